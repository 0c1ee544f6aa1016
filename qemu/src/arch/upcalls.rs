//! What the arch code calls in the layers above it: the timer tick, the
//! console and the fatal-error path. The boot CPU hands them down
//! ([`set`]) before anything can call them, so the arch layer imports
//! nothing above it.

use core::fmt;

/// The layers above, as the arch code sees them.
#[derive(Clone, Copy)]
pub struct Upcalls {
    /// Every timer interrupt, interrupts off, with the address it
    /// interrupted.
    pub timer_tick: fn(pc: u64),
    /// The end of every timer interrupt, after the interrupt controller
    /// was told it is done, interrupts off, with whether the interrupted
    /// context had them on: where the scheduler may preempt the
    /// interrupted thread (switching stacks from inside the handler; the
    /// trap frame stays on the thread's stack until it is switched back).
    pub irq_exit: fn(interrupted_irqs_on: bool),
    /// Prints one line on the console.
    pub print_line: fn(fmt::Arguments<'_>),
    /// Reports an unrecoverable error and stops the machine with a failure
    /// status.
    pub fatal: fn(fmt::Arguments<'_>) -> !,
}

static UPCALLS: spin::Once<Upcalls> = spin::Once::new();

/// Boot CPU, first thing after its `init_cpu`: what the arch code calls
/// above it. Only the first call counts.
pub fn set(upcalls: Upcalls) {
    UPCALLS.call_once(|| upcalls);
}

fn get() -> Option<&'static Upcalls> {
    UPCALLS.get()
}

/// Hands a timer interrupt on (ignored before [`set`]: no timer runs then).
pub fn timer_tick(pc: u64) {
    if let Some(upcalls) = get() {
        (upcalls.timer_tick)(pc);
    }
}

/// Hands the end of a timer interrupt on (ignored before [`set`]).
pub fn irq_exit(interrupted_irqs_on: bool) {
    if let Some(upcalls) = get() {
        (upcalls.irq_exit)(interrupted_irqs_on);
    }
}

/// Prints one line (dropped before [`set`]: there is no console then).
#[cfg_attr(
    not(target_arch = "aarch64"),
    expect(dead_code, reason = "only the aarch64 boot code prints")
)]
pub fn print_line(args: fmt::Arguments<'_>) {
    if let Some(upcalls) = get() {
        (upcalls.print_line)(args);
    }
}

/// Reports an unrecoverable error and stops the machine (before [`set`],
/// with nowhere to report it, it only stops the machine).
pub fn fatal(args: fmt::Arguments<'_>) -> ! {
    match get() {
        Some(upcalls) => (upcalls.fatal)(args),
        None => super::exit(false),
    }
}
