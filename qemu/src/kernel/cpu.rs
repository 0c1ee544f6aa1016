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

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

use super::fw_cfg;
use crate::arch;
pub use crate::arch::MAX_CPUS;

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
