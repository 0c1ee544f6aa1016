//! The timer: the supervisor timer interrupt (`scause` 5, enabled by
//! `sie.STIE`), raised when the `time` CSR passes this hart's compare
//! value, re-armed from its handler for a periodic tick.
//!
//! The compare value is `stimecmp` (the Sstc extension) when the device
//! tree lists `sstc` in the hart's ISA string, as QEMU 7.2's `virt` does
//! (OpenSBI then lets S-mode write it): a CSR write, no trip to M-mode.
//! Without Sstc it is SBI `set_timer` (`sbi-rt`), which OpenSBI implements
//! with the machine timer and injects as the supervisor timer interrupt.
//! Either way, setting a new compare value clears the pending interrupt.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use riscv::register::sie;

use super::TIMER_HZ;
use crate::arch::upcalls;

/// `time` ticks per second (the device tree's `timebase-frequency`).
static HZ: AtomicU64 = AtomicU64::new(0);
/// `time` ticks per timer period.
static PERIOD: AtomicU64 = AtomicU64::new(0);
/// Whether to write `stimecmp` directly (Sstc) instead of calling SBI.
static SSTC: AtomicBool = AtomicBool::new(false);

/// Boot CPU: the counter frequency and the compare mechanism, from the
/// device tree at `dtb`.
pub fn init_platform(dtb: *const u8) {
    // SAFETY: OpenSBI passes a valid flattened device tree in a1, in RAM
    // below the kernel that nothing writes.
    let fdt = match unsafe { fdt::Fdt::from_ptr(dtb) } {
        Ok(fdt) => fdt,
        Err(error) => upcalls::fatal(format_args!(
            "KSYNC-FAULT no device tree at {dtb:p}: {error:?}"
        )),
    };
    let Some(cpu) = fdt.cpus().next() else {
        upcalls::fatal(format_args!("KSYNC-FAULT the device tree lists no CPU"));
    };
    let hz = cpu.timebase_frequency() as u64;
    let sstc = cpu
        .property("riscv,isa")
        .and_then(|isa| isa.as_str())
        .is_some_and(|isa| isa.split('_').any(|ext| ext == "sstc"));
    // Relaxed: set before the other harts start (starting them orders it).
    HZ.store(hz, Ordering::Relaxed);
    PERIOD.store(hz / TIMER_HZ, Ordering::Relaxed);
    SSTC.store(sstc, Ordering::Relaxed);
}

/// `time` ticks per second.
pub fn hz() -> u64 {
    HZ.load(Ordering::Relaxed)
}

/// Every CPU: the timer interrupt enabled in `sie`, the timer itself off
/// (compare value at infinity). Nothing arrives before `sstatus.SIE`.
pub fn init_local() {
    set_compare(u64::MAX);
    // SAFETY: enables this hart's supervisor timer interrupt, which
    // `trap_handler` handles; `sstatus.SIE` is still clear.
    unsafe { sie::set_stimer() };
    // SAFETY: enables this hart's supervisor software interrupt (a halting
    // lock wait's kick, `kick_others`), which `trap_handler` handles by
    // clearing it; `sstatus.SIE` is still clear.
    unsafe { sie::set_ssoft() };
}

/// Starts this CPU's periodic timer.
pub fn timer_start() {
    set_compare(super::counter() + PERIOD.load(Ordering::Relaxed));
}

/// Stops this CPU's timer for good (parking).
pub fn stop() {
    // SAFETY: masks this hart's timer interrupt only.
    unsafe { sie::clear_stimer() };
    set_compare(u64::MAX);
}

/// The timer interrupt: re-arm (which clears it), then the tick. `pc`:
/// where it interrupted this CPU.
pub fn handle_irq(pc: u64) {
    set_compare(super::counter() + PERIOD.load(Ordering::Relaxed));
    upcalls::timer_tick(pc);
}

/// This hart's timer compare value.
fn set_compare(at: u64) {
    if SSTC.load(Ordering::Relaxed) {
        // SAFETY: `stimecmp` (CSR 0x14D, Sstc), which OpenSBI lets S-mode
        // write when the hart has Sstc (menvcfg.STCE); it only moves this
        // hart's timer. The `riscv` crate has no accessor for it.
        unsafe { core::arch::asm!("csrw 0x14d, {}", in(reg) at, options(nomem, nostack)) };
    } else {
        // Only fails for an SBI without the TIME extension, where no timer
        // works; the missing ticks then fail every suite by name.
        let _ = sbi_rt::set_timer(at);
    }
}
