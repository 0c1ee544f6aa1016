//! Per-CPU data for the arch code's own per-CPU hardware handles (a local
//! APIC, a GIC CPU interface).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use ksync::spinlock::IrqState;

use super::{MAX_CPUS, cpu_index};

/// Data that each CPU owns alone: slot `i` is only ever touched by CPU `i`.
///
/// [`with`](Self::with) hands out the current CPU's slot with local
/// interrupts disabled (through ksync's [`IrqState`]), so neither another CPU
/// nor an interrupt handler on this CPU can reach it meanwhile. Values that
/// belong to one CPU's hardware (a local APIC handle, which is `!Send`) can
/// live here.
pub struct CpuLocal<T> {
    slots: UnsafeCell<[T; MAX_CPUS]>,
    busy: [AtomicBool; MAX_CPUS],
}

// SAFETY: slot `i` is accessed only by CPU `i` (through `with`, which indexes
// by `cpu_index()`), with interrupts off and a re-entrancy check, so no value is
// ever shared or moved between CPUs and no two references to one slot exist.
unsafe impl<T> Sync for CpuLocal<T> {}

impl<T> CpuLocal<T> {
    /// One initial value per CPU.
    pub const fn new(slots: [T; MAX_CPUS]) -> Self {
        Self {
            slots: UnsafeCell::new(slots),
            busy: [const { AtomicBool::new(false) }; MAX_CPUS],
        }
    }

    /// Runs `f` on this CPU's slot, with local interrupts disabled.
    ///
    /// # Panics
    /// If `f` calls `with` on the same `CpuLocal` again.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let _irq = IrqState::save();
        let cpu = cpu_index();
        // Relaxed: only this CPU, with interrupts off, touches `busy[cpu]`.
        let nested = self.busy[cpu].swap(true, Ordering::Relaxed);
        assert!(!nested, "CpuLocal::with re-entered on CPU {cpu}");
        // SAFETY: `cpu < MAX_CPUS` (indices come from the boot code, which
        // parks CPUs beyond it), so the pointer is in bounds. Slot `cpu` is
        // only touched by this CPU, interrupts are off and `busy` rules out
        // re-entry: this is the only reference to it until `f` returns.
        let slot = unsafe { &mut *self.slots.get().cast::<T>().add(cpu) };
        let result = f(slot);
        self.busy[cpu].store(false, Ordering::Relaxed);
        result
    }
}
