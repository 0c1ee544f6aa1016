//! Per-CPU data: one cache-padded slot per possible CPU.
//!
//! A value that every CPU updates scales only if each CPU updates its own
//! copy, on its own cache line, and the copies are combined when someone
//! needs the total. [`PerCpu<T>`] is that layout: [`MAX_CPUS`] slots, each
//! [`CachePadded`] so that neighbours never share a line (128 bytes on
//! x86_64 and aarch64, where the adjacent-line prefetcher pairs lines).
//!
//! * [`PerCpu::get`] returns this CPU's slot behind a guard that keeps
//!   preemption disabled, so the caller cannot migrate while it uses the
//!   slot; the guard is `!Send`.
//! * [`PerCpu::cpu`] reads another CPU's slot, [`PerCpu::iter`] all of them
//!   (for sums).
//!
//! Slots are shared: interrupt handlers on this CPU and readers on other
//! CPUs may look at them at any time, so the guard hands out `&T` and `T`
//! does its own synchronization (atomics, or the arch-local operations of
//! [`PerCpuCounter`](crate::percpu_counter::PerCpuCounter)).
//!
//! The number of slots is [`MAX_CPUS`], set at build time with
//! `KSYNC_MAX_CPUS` (see [`kernel`]); the CPU ids come from
//! the kernel hooks.
//!
//! The types built on it live in this module's children, also reachable at
//! the crate root as before: [`counter`] (`ksync::percpu_counter`, Linux's
//! `percpu_counter`), [`rwlock`] (`ksync::percpu_rwlock`, the scalable
//! reader-writer lock) and [`brlock`] (`ksync::brlock`, one spinlock per
//! CPU).
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! use ksync::percpu::PerCpu;
//!
//! static PACKETS: PerCpu<AtomicU64> = PerCpu::new();
//!
//! PACKETS.get().fetch_add(1, Relaxed); // this CPU's line only
//! let total: u64 = PACKETS.iter().map(|n| n.load(Relaxed)).sum();
//! assert_eq!(total, 1);
//! ```

use core::fmt;
use core::ops::Deref;

pub use crossbeam_utils::CachePadded;

use crate::kernel::{self, MAX_CPUS, PreemptGuard};
use crate::sync::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, array, const_fn, init};

pub use crate::sync::ConstInit;

pub mod brlock;
pub mod counter;
pub mod rwlock;

crate::sync::const_init! {
    impl for AtomicBool = AtomicBool::new(false);
    impl for AtomicI32 = AtomicI32::new(0);
    impl for AtomicU32 = AtomicU32::new(0);
    impl for AtomicUsize = AtomicUsize::new(0);
    impl for bool = false;
    impl for u8 = 0;
    impl for u16 = 0;
    impl for u32 = 0;
    impl for u64 = 0;
    impl for usize = 0;
    impl for i8 = 0;
    impl for i16 = 0;
    impl for i32 = 0;
    impl for i64 = 0;
    impl for isize = 0;
    impl for () = ();
    impl[T: ConstInit] for CachePadded<T> = CachePadded::new(init::<T>());
}

// With the hostile host kernel the shim's atomics are wrappers: users'
// `PerCpu<core::sync::atomic::AtomicU64>` and the like still build.
#[cfg(all(feature = "hostile", not(ksync_loom)))]
crate::sync::const_init! {
    impl for core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    impl for core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);
    impl for core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    impl for core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
    impl for core::sync::atomic::AtomicI64 = core::sync::atomic::AtomicI64::new(0);
    impl for core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
}

#[cfg(target_has_atomic = "64")]
crate::sync::const_init! {
    impl for crate::sync::AtomicI64 = crate::sync::AtomicI64::new(0);
    impl for crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);
}

/// One cache-padded `T` per possible CPU.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::percpu::PerCpu;
///
/// // `DEFINE_PER_CPU(unsigned long, nr_switches)`
/// static NR_SWITCHES: PerCpu<AtomicU64> = PerCpu::new();
///
/// NR_SWITCHES.get().fetch_add(1, Relaxed); // `this_cpu_inc`
/// let total: u64 = NR_SWITCHES.iter().map(|n| n.load(Relaxed)).sum();
/// assert_eq!(total, 1);
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid `PerCpu<T>` whenever they are a valid `T`:
/// every slot holds a zeroed `T`, which is what [`new`](Self::new) builds
/// when `T::INIT` is all zeroes (the integers, atomics and `()`).
/// `Zeroable` for `T: Zeroable` with the `bytemuck` feature.
#[doc(alias = "DEFINE_PER_CPU")]
pub struct PerCpu<T> {
    slots: [CachePadded<T>; MAX_CPUS],
}

impl<T: ConstInit> PerCpu<T> {
    const_fn! {
        /// Every slot holds `T::INIT`. `const`, for `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use core::sync::atomic::AtomicUsize;
        /// use ksync::percpu::PerCpu;
        ///
        /// // Every slot starts at `AtomicUsize::INIT` (zero); `const`, so a `static`.
        /// static RUNQUEUE_LEN: PerCpu<AtomicUsize> = PerCpu::new();
        /// # assert_eq!(RUNQUEUE_LEN.iter().count(), ksync::kernel::nr_cpus());
        /// ```
        pub fn new() -> Self {
            Self { slots: array![CachePadded::new(init::<T>()); MAX_CPUS] }
        }
    }
}

impl<T: ConstInit> Default for PerCpu<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerCpu<T> {
    /// Slot `i` holds `init(i)`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu::PerCpu;
    ///
    /// // Each CPU's slot knows its CPU, e.g. for a per-CPU run queue.
    /// struct RunQueue { cpu: usize }
    /// let rqs = PerCpu::from_fn(|cpu| RunQueue { cpu });
    /// assert_eq!(rqs.cpu(1).cpu, 1);
    /// assert_eq!(rqs.get().cpu, ksync::kernel::cpu_id());
    /// ```
    pub fn from_fn(mut init: impl FnMut(usize) -> T) -> Self {
        Self {
            slots: core::array::from_fn(|i| CachePadded::new(init(i))),
        }
    }

    /// This CPU's slot, with preemption disabled until the guard drops.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use ksync::percpu::PerCpu;
    ///
    /// static PGFAULTS: PerCpu<AtomicU64> = PerCpu::new();
    ///
    /// let slot = PGFAULTS.get(); // `get_cpu_ptr`: preemption off until `slot` drops
    /// slot.fetch_add(1, Relaxed);
    /// assert_eq!(PGFAULTS.cpu(slot.cpu()).load(Relaxed), 1);
    /// ```
    ///
    /// # Panics
    /// If the kernel's CPU id is at or past [`MAX_CPUS`] (the message names
    /// both).
    #[doc(alias("this_cpu_ptr", "get_cpu_var", "get_cpu_ptr"))]
    #[inline]
    pub fn get(&self) -> PerCpuRef<'_, T> {
        let (preempt, cpu) = kernel::preempt_disable_cpu();
        // `preempt_disable_cpu` has checked `cpu < MAX_CPUS`.
        PerCpuRef {
            slot: &self.slots[cpu],
            cpu,
            _preempt: preempt,
        }
    }

    /// This CPU's slot, for a caller that keeps preemption disabled and
    /// has `cpu` from [`kernel::cpu_id`] meanwhile (one preemption guard
    /// for several per-CPU structures).
    #[inline]
    pub(crate) fn this_cpu(&self, cpu: usize) -> &T {
        // `cpu_id` has checked `cpu < MAX_CPUS`; the index checks again
        // (free once inlined after that check).
        &self.slots[cpu]
    }

    /// CPU `cpu`'s slot.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
    /// use ksync::percpu::PerCpu;
    ///
    /// // `per_cpu(need_resched, cpu)`: ask another CPU to reschedule.
    /// static NEED_RESCHED: PerCpu<AtomicBool> = PerCpu::new();
    /// NEED_RESCHED.cpu(1).store(true, Relaxed);
    /// assert!(NEED_RESCHED.cpu(1).load(Relaxed));
    /// ```
    ///
    /// # Panics
    /// If `cpu` is at or past the number of possible CPUs
    /// ([`nr_cpus`](kernel::nr_cpus), at most [`MAX_CPUS`]): the message
    /// names the id and the limit.
    #[doc(alias("per_cpu", "per_cpu_ptr"))]
    #[inline]
    #[track_caller]
    pub fn cpu(&self, cpu: usize) -> &T {
        // Possible CPUs only: a slot past `nr_cpus` is never summed by
        // `iter` (nor locked by a brlock's global lock).
        let nr = kernel::nr_cpus();
        if cpu >= nr {
            kernel::cpu_out_of_range(cpu, nr, "nr_cpus");
        }
        // `nr_cpus` has checked `nr <= MAX_CPUS`.
        &self.slots[cpu]
    }

    /// The slots of the possible CPUs (`0..nr_cpus()`), in id order.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use ksync::percpu::PerCpu;
    ///
    /// static IRQS: PerCpu<AtomicU64> = PerCpu::new();
    /// let this_cpu = IRQS.get();
    /// this_cpu.fetch_add(1, Relaxed);
    ///
    /// // `for_each_possible_cpu`: the busiest CPU, for /proc/interrupts.
    /// let busiest = IRQS.iter().enumerate().max_by_key(|(_, n)| n.load(Relaxed));
    /// assert_eq!(busiest.map(|(cpu, _)| cpu), Some(this_cpu.cpu()));
    /// ```
    #[doc(alias = "for_each_possible_cpu")]
    #[inline]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &T> + '_ {
        self.slots[..kernel::nr_cpus()].iter().map(|slot| &**slot)
    }

    /// Exclusive access to every slot (no other CPU can see them).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu::PerCpu;
    ///
    /// // Before the other CPUs start: plain writes, no atomics needed.
    /// let mut budgets: PerCpu<u32> = PerCpu::new();
    /// for budget in budgets.iter_mut() {
    ///     *budget = 64;
    /// }
    /// assert_eq!(*budgets.cpu(0), 64);
    /// ```
    #[inline]
    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = &mut T> + '_ {
        self.slots.iter_mut().map(|slot| &mut **slot)
    }
}

impl<T: fmt::Debug> fmt::Debug for PerCpu<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// This CPU's slot of a [`PerCpu`], with preemption disabled. `!Send`: it
/// belongs to the CPU it was taken on.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::percpu::{PerCpu, PerCpuRef};
///
/// static SOFTIRQS: PerCpu<AtomicU64> = PerCpu::new();
///
/// // A helper that needs "this CPU's slot, and stay here" takes the guard.
/// fn account(slot: &PerCpuRef<'_, AtomicU64>) {
///     slot.fetch_add(1, Relaxed);
/// }
/// account(&SOFTIRQS.get());
/// ```
#[must_use = "the guard keeps preemption disabled while it lives"]
pub struct PerCpuRef<'a, T> {
    slot: &'a T,
    cpu: usize,
    _preempt: PreemptGuard,
}

impl<'a, T> PerCpuRef<'a, T> {
    /// The CPU whose slot this is (the current CPU).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu::PerCpu;
    ///
    /// static LAST_TICK: PerCpu<u64> = PerCpu::new();
    /// let slot = LAST_TICK.get();
    /// // Stable while `slot` lives: the task cannot migrate.
    /// assert_eq!(slot.cpu(), ksync::kernel::cpu_id());
    /// ```
    #[inline]
    #[must_use]
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The slot and the guard that keeps preemption disabled (for guards
    /// that keep fewer words than this one).
    #[inline]
    pub(crate) fn into_parts(self) -> (&'a T, PreemptGuard) {
        (self.slot, self._preempt)
    }
}

impl<T> Deref for PerCpuRef<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.slot
    }
}

impl<T: fmt::Debug> fmt::Debug for PerCpuRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuRef")
            .field("cpu", &self.cpu)
            .field("slot", self.slot)
            .finish()
    }
}
