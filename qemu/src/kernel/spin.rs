//! How this kernel's lock waiters behave: it is always a guest, usually
//! with more vCPUs than the host has cores (`-smp 4` or `8` on a two-core
//! CI runner), so it tells ksync that its CPUs may be descheduled while
//! they spin ([`ksync::kernel::set_vcpu_preemptible`]): the FIFO locks
//! (ticket lock, the lock inside `LockRef`, the queued lock) then hand off
//! by test-and-set with backoff instead of to a waiter whose vCPU thread
//! the host may not be running.
//!
//! The run's word `fifo` (see `harness::args`) turns that off for the whole
//! boot, to compare with strict FIFO hand-off; the `*-fifo` suites turn it
//! off for themselves ([`set_fifo_for_suite`]) so that the queue paths are
//! tested too, and put the boot's setting back in their `finish`
//! ([`restore`]).
//!
//! # Waiting
//!
//! ksync's waiters call a [`ksync::kernel::SpinWait`] after a bounded spin.
//! This kernel keeps ksync's default (keep spinning), because nothing a
//! guest can do there helped under TCG (measured, README.md "Measurements
//! and history"): every lock in the suites is waited for with interrupts
//! masked, where x86_64's `hlt` never wakes and `pause` only leaves the
//! translated code; on aarch64 `wfe` (with `sev` as the kick) measured
//! within the noise of spinning, and `wfi` hung the suites (a waiter inside
//! the timer handler sleeps for the tick that only its own return re-arms).

use core::sync::atomic::{AtomicBool, Ordering};

use crate::println;

/// The boot's setting: whether CPUs may be descheduled while they spin.
static BOOT_PREEMPTIBLE: AtomicBool = AtomicBool::new(true);

/// Sets the boot's mode (boot CPU, before the other CPUs start): preemptible
/// unless the run says `fifo`.
pub fn init(preemptible: bool) {
    // Relaxed: the other CPUs start after this (their start-up orders it),
    // and ksync's own setting is a waiting strategy, never exclusion.
    BOOT_PREEMPTIBLE.store(preemptible, Ordering::Relaxed);
    ksync::kernel::set_vcpu_preemptible(preemptible);
}

/// Prints the mode as a `KSYNC-SPIN` line.
pub fn report() {
    println!(
        "KSYNC-SPIN preemptible={} wait=spin",
        u8::from(ksync::kernel::vcpu_preemptible())
    );
}

/// Strict FIFO hand-off for one suite (boot CPU, in its `setup`, before
/// the other CPUs start it); [`restore`] undoes it.
pub fn set_fifo_for_suite() {
    ksync::kernel::set_vcpu_preemptible(false);
}

/// Back to the boot's setting (after a suite, with the other CPUs quiet).
pub fn restore() {
    ksync::kernel::set_vcpu_preemptible(BOOT_PREEMPTIBLE.load(Ordering::Relaxed));
}
