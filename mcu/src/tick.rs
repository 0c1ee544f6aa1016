//! SysTick: the interrupt that hits the objects under test.
//!
//! The handler counts ticks and calls the hook the running check installed
//! (`install`), which works on the same object as thread mode. Counters
//! have one writer each (the handler or thread mode), so plain atomic loads
//! and stores suffice: the Cortex-M0 has no read-modify-write atomics.

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering::SeqCst};

use cortex_m::peripheral::{SYST, syst::SystClkSource};
use cortex_m_rt::exception;
use critical_section::Mutex;

/// SysTick reload: the core clock divided by 10 kHz. QEMU's mps2 boards
/// run at 25 MHz, the micro:bit (nRF51) at 16 MHz; the Cortex-M4 image is
/// the one with 32-bit atomics.
const RELOAD: u32 = if cfg!(target_has_atomic = "32") {
    25_000_000 / 10_000
} else {
    16_000_000 / 10_000
};

/// SysTick interrupts taken since `start`.
static TICKS: AtomicU32 = AtomicU32::new(0);

/// A check's interrupt-side step.
type Hook = Option<fn()>;

/// The running check's interrupt-side step, if any.
static HOOK: Mutex<Cell<Hook>> = Mutex::new(Cell::new(None));

/// What the handler side did during one check; written only by the hook
/// (or by thread mode while no hook is installed).
pub struct IrqCounts {
    /// Operations completed.
    pub ops: AtomicU32,
    /// Attempts that found the object busy (`try_lock` failed) and gave up.
    pub busy: AtomicU32,
    /// Inconsistencies seen (a torn read, an unexpected count).
    pub bad: AtomicU32,
}

pub static IRQ: IrqCounts = IrqCounts {
    ops: AtomicU32::new(0),
    busy: AtomicU32::new(0),
    bad: AtomicU32::new(0),
};

/// Adds one to a counter that only the calling context writes.
pub fn bump(counter: &AtomicU32) {
    counter.store(counter.load(SeqCst).wrapping_add(1), SeqCst);
}

/// Starts SysTick at 10 kHz from the core clock.
pub fn start() {
    let Some(mut peripherals) = cortex_m::Peripherals::take() else {
        panic!("cortex-m peripherals taken twice");
    };
    let syst: &mut SYST = &mut peripherals.SYST;
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD - 1);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Ticks so far.
pub fn now() -> u32 {
    TICKS.load(SeqCst)
}

/// Resets the handler-side counts and installs `hook`.
pub fn install(hook: fn()) {
    critical_section::with(|cs| {
        for counter in [&IRQ.ops, &IRQ.busy, &IRQ.bad] {
            counter.store(0, SeqCst);
        }
        HOOK.borrow(cs).set(Some(hook));
    });
}

/// Removes the hook: the handler only counts ticks from now on.
pub fn uninstall() {
    critical_section::with(|cs| HOOK.borrow(cs).set(None));
}

/// Runs `step` in thread mode until `ticks` SysTick interrupts have been
/// taken; returns how many steps ran, or `None` if SysTick never fired.
pub fn drive(ticks: u32, mut step: impl FnMut()) -> Option<u32> {
    /// Steps allowed before the first tick: far more than 100 µs of any
    /// step here, even emulated.
    const NO_TICK_LIMIT: u32 = 5_000_000;
    let start = now();
    let mut steps = 0u32;
    while now().wrapping_sub(start) < ticks {
        step();
        steps += 1;
        if steps == NO_TICK_LIMIT && now() == start {
            return None;
        }
    }
    Some(steps)
}

#[exception]
fn SysTick() {
    TICKS.store(TICKS.load(SeqCst).wrapping_add(1), SeqCst);
    // In the handler: thread mode cannot run until it returns, so reading
    // the hook under the (cheap, nested) critical section is exact.
    if let Some(hook) = critical_section::with(|cs| HOOK.borrow(cs).get()) {
        hook();
    }
}
