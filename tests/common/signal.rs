//! Interrupts played by POSIX signals (Linux): a handler installed for a
//! signal runs between any two instructions of the thread the signal is
//! sent to, as an interrupt handler does on one CPU.

/// Installs `handler` for `signal` (restarting interrupted system calls,
/// nothing masked) and returns the action it replaced, for [`restore`].
/// The handler must be async-signal-safe.
pub(crate) fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> libc::sigaction {
    // SAFETY: a zeroed `sigaction` is a valid "default action, no flags,
    // empty mask" value (a C struct of integers and a mask).
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: as above for `action`; the caller promises an
    // async-signal-safe handler and restores the old action.
    unsafe {
        let mut action: libc::sigaction = core::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(signal, &action, &mut old), 0);
    }
    old
}

/// Puts back the action [`install`] replaced (no signal may be pending).
pub(crate) fn restore(signal: libc::c_int, old: &libc::sigaction) {
    // SAFETY: `old` came from `sigaction` itself.
    unsafe { assert_eq!(libc::sigaction(signal, old, core::ptr::null_mut()), 0) };
}
