//! CPU bookkeeping: how many CPUs the kernel supports, which one is running,
//! and data kept per CPU.
//!
//! Each CPU learns its index once, at boot (0 for the boot CPU, then 1, 2, ...
//! in order of arrival), and the arch code keeps it in a register every CPU
//! has for itself: the GS base on x86_64, `TPIDR_EL1` on aarch64, the same
//! registers Linux uses for its per-CPU offset. [`current`] reads it back.
//! It is what this kernel gives ksync as its CPU id, and [`possible`] what
//! it gives as the CPU count (`kernel::hooks`).
//!
//! Per-CPU counters sit on cache lines of their own
//! ([`CachePadded`]: 128 bytes on x86_64, which prefetches lines in pairs,
//! and on aarch64, whose largest lines are 128 bytes), so that they do not
//! bounce lines between CPUs and disturb what they measure.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use ksync::spinlock::IrqState;

use super::fw_cfg;
use crate::arch;

/// The most CPUs this kernel brings up; any further ones are left parked.
/// (QEMU's aarch64 `virt` board with its default GICv2 stops at 8.)
pub const MAX_CPUS: usize = 8;

/// This CPU's index, `0..MAX_CPUS`.
#[inline]
pub fn current() -> usize {
    arch::cpu_index()
}

/// The possible CPUs (0 until the boot CPU has counted them).
static POSSIBLE: AtomicUsize = AtomicUsize::new(0);

/// Boot CPU, before it starts the others: fixes the number of possible CPUs
/// from the firmware (QEMU's `-smp`, read from fw_cfg), at most
/// [`MAX_CPUS`]. Every CPU index is below it from then on.
pub fn init_possible() {
    let mut nb_cpus = [0; 2];
    fw_cfg::read(fw_cfg::NB_CPUS, &mut nb_cpus);
    let cpus = usize::from(u16::from_le_bytes(nb_cpus)).clamp(1, MAX_CPUS);
    // Relaxed: set before the other CPUs start (starting them orders it).
    POSSIBLE.store(cpus, Ordering::Relaxed);
}

/// How many CPUs this machine can have (`nr_cpu_ids`): fixed at boot by
/// [`init_possible`], the count ksync's per-CPU data covers.
///
/// # Panics
/// Before [`init_possible`].
#[inline]
pub fn possible() -> usize {
    match POSSIBLE.load(Ordering::Relaxed) {
        0 => panic!("the CPU count was asked for before the boot CPU counted the CPUs"),
        n => n,
    }
}

/// CPUs that have come up, the boot CPU included.
static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// Records that this CPU is up and running (`kernel::rcu::cpu_up` tells
/// RCU first).
pub fn mark_online() {
    // Release pairs with the Acquire in `online`: whoever counts this CPU
    // also sees its initialisation.
    ONLINE.fetch_add(1, Ordering::Release);
}

/// How many CPUs have come up.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// One counter per CPU, each on its own cache line. Only statistics: every
/// access is `Relaxed`, and the totals are read after a barrier has ordered
/// them.
pub struct Counters([CachePadded<AtomicU64>; MAX_CPUS]);

impl Counters {
    /// All zero.
    pub const fn new() -> Self {
        Self([const { CachePadded::new(AtomicU64::new(0)) }; MAX_CPUS])
    }

    /// Adds `n` to `cpu`'s counter. A read-modify-write, because thread
    /// context and interrupt handlers of the same CPU may both count.
    #[inline]
    pub fn add(&self, cpu: usize, n: u64) {
        self.0[cpu].fetch_add(n, Ordering::Relaxed);
    }

    /// `cpu`'s counter.
    pub fn get(&self, cpu: usize) -> u64 {
        self.0[cpu].load(Ordering::Relaxed)
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        for slot in &self.0 {
            slot.store(0, Ordering::Relaxed);
        }
    }

    /// The sum over the first `cpus` counters.
    pub fn sum(&self, cpus: usize) -> u64 {
        (0..cpus).map(|cpu| self.get(cpu)).sum()
    }

    /// The smallest and the largest of the first `cpus` counters.
    pub fn min_max(&self, cpus: usize) -> (u64, u64) {
        (0..cpus)
            .map(|cpu| self.get(cpu))
            .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
    }
}

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
// by `current()`), with interrupts off and a re-entrancy check, so no value is
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
        let cpu = current();
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
