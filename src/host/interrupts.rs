//! The host kernel's interrupt model, one copy for both backends (OS
//! threads and loom's model threads): each thread has an "interrupts off"
//! flag and an interrupt-handler nesting depth, in the backend's thread
//! locals.

use std::cell::Cell;

use super::backend::{IN_IRQ, IRQS_OFF};

#[cfg(all(feature = "hostile", not(ksync_loom)))]
std::thread_local! {
    /// The hostile kernel's view: how many `irq_save`s are open on this
    /// thread (the nesting of masked sections).
    static MASK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// How many `irq_save`s are open on this thread (hostile kernel only).
#[cfg(all(feature = "hostile", not(ksync_loom)))]
pub(super) fn mask_depth() -> u32 {
    MASK_DEPTH.with(Cell::get)
}

#[inline]
pub(super) fn irq_save() -> usize {
    #[cfg(all(feature = "hostile", not(ksync_loom)))]
    MASK_DEPTH.with(|d| d.set(d.get() + 1));
    usize::from(IRQS_OFF.with(|off| off.replace(true)))
}

#[inline]
pub(super) fn irq_restore(flags: usize) {
    debug_assert!(
        IRQS_OFF.with(Cell::get),
        "ksync test hooks: interrupts restored while not disabled"
    );
    #[cfg(all(feature = "hostile", not(ksync_loom)))]
    MASK_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    IRQS_OFF.with(|off| off.set(flags != 0));
}

/// Whether this thread has "interrupts" disabled (inside an IRQ-saving
/// lock or an [`IrqState`](crate::spinlock::IrqState)): Linux's
/// `irqs_disabled()` for the host hooks.
///
/// ```
/// use ksync::host;
/// use ksync::spinlock::IrqTicketMutex;
///
/// let lock = IrqTicketMutex::new(0);
/// let guard = lock.lock(); // `spin_lock_irqsave`
/// assert!(host::irqs_disabled());
/// drop(guard); // `spin_unlock_irqrestore`
/// assert!(!host::irqs_disabled());
/// ```
pub fn irqs_disabled() -> bool {
    IRQS_OFF.with(Cell::get)
}

/// From now on this thread plays an interrupt handler: the kernel's
/// [`in_interrupt`](crate::kernel::Kernel::in_interrupt) is true and
/// "interrupts" are off, until the matching [`exit_interrupt`]. Nests.
///
/// A POSIX signal handler playing an interrupt must first check
/// [`irqs_disabled`] and return at once when it is true: a masked
/// interrupt does not run, and ksync's own code (lockdep's held-lock
/// stack, IRQ-saving locks) relies on that.
///
/// ```
/// use ksync::host;
/// use ksync::spinlock::IrqTicketMutex;
///
/// static JIFFIES: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
///
/// // This thread takes a timer interrupt: the handler takes the IRQ-safe lock.
/// host::enter_interrupt();
/// assert!(host::irqs_disabled());
/// *JIFFIES.lock() += 1;
/// host::exit_interrupt();
/// assert_eq!(*JIFFIES.lock(), 1);
/// ```
pub fn enter_interrupt() {
    IN_IRQ.with(|irq| {
        let (depth, saved) = irq.get();
        let saved = if depth == 0 {
            IRQS_OFF.with(|off| off.replace(true))
        } else {
            saved
        };
        irq.set((depth + 1, saved));
    });
}

/// Ends the innermost [`enter_interrupt`]: at the outermost, "interrupts"
/// are as they were before it.
///
/// ```
/// use ksync::host;
///
/// host::enter_interrupt();
/// host::enter_interrupt(); // a nested interrupt
/// host::exit_interrupt();
/// assert!(host::irqs_disabled()); // still in the outer handler
/// host::exit_interrupt();
/// assert!(!host::irqs_disabled()); // back in task context
/// ```
///
/// # Panics
/// Without a matching `enter_interrupt`.
pub fn exit_interrupt() {
    IN_IRQ.with(|irq| {
        let (depth, saved) = irq.get();
        assert!(
            depth > 0,
            "ksync test hooks: exit_interrupt without enter_interrupt"
        );
        if depth == 1 {
            IRQS_OFF.with(|off| off.set(saved));
        }
        irq.set((depth - 1, saved));
    });
}

#[inline]
pub(super) fn in_interrupt() -> bool {
    IN_IRQ.with(|irq| irq.get().0 != 0)
}
