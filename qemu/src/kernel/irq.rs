//! Interrupt accounting and the local interrupt switch.
//!
//! The arch code owns the interrupt controller and the timer (x86_64: the
//! local APIC timer; aarch64: the generic timer's virtual timer through the
//! GIC) and calls [`timer_tick`] from every timer interrupt.
//!
//! Saving and restoring the interrupt state around critical sections is not
//! here: that is ksync's [`IrqState`](ksync::spinlock::IrqState), which on
//! bare-metal x86_64 and aarch64 uses `cli`/`sti` and `DAIF` directly, with
//! nothing for the kernel to provide. This module only switches interrupts
//! on for good once a CPU is ready, and off around the runner's barriers.

use super::cpu::{self, Counters};
use super::hooks;
use super::runner;
use crate::arch;

/// Timer interrupts taken, per CPU.
pub static TICKS: Counters = Counters::new();

/// Called by the arch code on every timer interrupt, interrupts off. If the
/// CPU was idle, RCU watches it while the handler runs (`hooks::interrupt`).
pub fn timer_tick() {
    let cpu = cpu::current();
    TICKS.add(cpu, 1);
    hooks::interrupt(|| runner::on_tick(cpu));
}

/// Enables interrupts on this CPU.
pub fn enable() {
    arch::irq_enable();
}

/// Disables interrupts on this CPU.
pub fn disable() {
    arch::irq_disable();
}
