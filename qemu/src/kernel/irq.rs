//! Interrupt accounting and the local interrupt switch.
//!
//! The arch code owns the interrupt controller and the timer (x86_64: the
//! local APIC timer; aarch64: the generic timer's virtual timer through the
//! GIC) and calls [`timer_tick`] from every timer interrupt. This module
//! counts the interrupt and hands it on to the handler the boot CPU set
//! ([`set_tick_handler`]): what a tick does (RCU's work, the harness's) is
//! decided above the kernel services, in `main.rs`.
//!
//! Saving and restoring the interrupt state around critical sections is not
//! here: that is ksync's [`IrqState`](ksync::spinlock::IrqState), which on
//! bare-metal x86_64 and aarch64 uses `cli`/`sti` and `DAIF` directly, with
//! nothing for the kernel to provide. This module only switches interrupts
//! on for good once a CPU is ready, and off around the runner's barriers.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::cpu::{self, Counters, MAX_CPUS};
use super::time;
use crate::arch;

/// Timer interrupts taken, per CPU.
pub static TICKS: Counters = Counters::new();

/// Per CPU: where its latest timer interrupt interrupted it.
static INTERRUPTED_PC: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// What every timer interrupt runs after the accounting, with the CPU and
/// the counter at the interrupt.
pub type TickHandler = fn(cpu: usize, now: u64);

static TICK_HANDLER: spin::Once<TickHandler> = spin::Once::new();

/// Boot CPU, before any timer starts: sets what every timer interrupt runs.
/// Only the first call counts.
pub fn set_tick_handler(handler: TickHandler) {
    TICK_HANDLER.call_once(|| handler);
}

/// Per CPU: timer interrupt handlers running (0 or 1: they run with
/// interrupts off), for the kernel's `in_interrupt` hook.
static IN_HANDLER: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Whether this CPU runs its timer interrupt handler.
pub fn in_handler() -> bool {
    // Relaxed: only this CPU changes its own count.
    IN_HANDLER[cpu::current()].load(Ordering::Relaxed) != 0
}

/// Called by the arch code on every timer interrupt, interrupts off, with
/// the address it interrupted: counts it, then runs the tick handler.
pub fn timer_tick(pc: u64) {
    let cpu = cpu::current();
    // Relaxed: only this CPU touches its count, interrupts off.
    IN_HANDLER[cpu].fetch_add(1, Ordering::Relaxed);
    handle_tick(cpu, pc);
    IN_HANDLER[cpu].fetch_sub(1, Ordering::Relaxed);
}

fn handle_tick(cpu: usize, pc: u64) {
    TICKS.add(cpu, 1);
    // Relaxed: a diagnostic (RCU stall reports print it).
    INTERRUPTED_PC[cpu].store(pc, Ordering::Relaxed);
    // One counter read for the whole tick (on aarch64 under TCG it takes
    // QEMU's global lock).
    let now = time::now();
    if let Some(handler) = TICK_HANDLER.get() {
        handler(cpu, now);
    }
}

/// Where `cpu`'s latest timer interrupt interrupted it, and how many it
/// has taken: for a stalled CPU that still takes interrupts, where it
/// spins; if the count stops moving, its interrupts are off.
pub fn last_interrupted(cpu: usize) -> (u64, u64) {
    // Relaxed: a diagnostic snapshot, stale the moment it is read.
    (INTERRUPTED_PC[cpu].load(Ordering::Relaxed), TICKS.get(cpu))
}

/// Enables interrupts on this CPU.
pub fn enable() {
    arch::irq_enable();
}

/// Disables interrupts on this CPU.
pub fn disable() {
    arch::irq_disable();
}
