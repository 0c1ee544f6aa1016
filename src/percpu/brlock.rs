//! brlock: one spinlock per CPU (Linux's lglock, the "big reader" lock).
//!
//! A local operation takes only this CPU's lock — uncontended, on its own
//! cache line — and a global operation takes every CPU's lock, in CPU
//! order. Locals scale perfectly; globals are expensive. It fits data that
//! is split per CPU and only occasionally needs a consistent view of all
//! of it (Linux used it for the VFS's per-CPU file lists).
//!
//! Each CPU's lock protects that CPU's `T`: a local guard gives `&mut` to
//! it, the global guard to all of them.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::brlock::BrLock;
//!
//! static OPEN_FILES: BrLock<u32> = BrLock::new();
//!
//! *OPEN_FILES.local_lock() += 1; // this CPU only
//! let total: u32 = OPEN_FILES.global_lock().iter_mut().map(|n| *n).sum();
//! assert_eq!(total, 1);
//! ```
//!
//! Locks taken with the `_irqsave` variants mask local interrupts first;
//! use them when interrupt handlers take the lock too.
//!
//! With `lockdep`, a brlock is one [lock class](crate::lockdep#lock-classes)
//! (the place it was built), and local, per-CPU and global locking all take
//! that class, as Linux's lglock did: an order "brlock -> X" on one CPU and
//! "X -> brlock" on another is reported even when both are local, because
//! a global locker between them makes it a deadlock.

use core::fmt;
use core::ops::{Deref, DerefMut};

use crate::kernel::{self, PreemptGuard};
use crate::lockdep::{Acquired, LockClassKey, Map};
use crate::percpu::{ConstInit, PerCpu};
use crate::spinlock::{IrqState, TicketLock};
use crate::sync::{UnsafeCell, const_fn, init};

struct Slot<T> {
    lock: TicketLock,
    data: UnsafeCell<T>,
}

crate::sync::const_init! {
    impl[T: ConstInit] for Slot<T> = Slot {
        lock: TicketLock::new(),
        data: UnsafeCell::new(init::<T>()),
    };
}

/// Per-CPU spinlocks, each guarding its CPU's `T`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::brlock::BrLock;
///
/// // Linux's old per-CPU `files_lglock`: each CPU lists the files it opened.
/// let files: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
///
/// files.local_lock().push(3); // `lg_local_lock`: this CPU's lock only
/// let open: usize = files.global_lock().iter_mut().map(|l| l.len()).sum();
/// assert_eq!(open, 1); // `lg_global_lock`: every CPU's, in order
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid `BrLock<T>`, every CPU's lock free, whenever
/// they are a valid `T` (every slot's `T` zeroed; [`new`](Self::new) when
/// `T::INIT` is all zeroes). `Zeroable` for `T: Zeroable` with the
/// `bytemuck` feature.
#[doc(alias("lglock", "br_lock"))]
pub struct BrLock<T = ()> {
    slots: PerCpu<Slot<T>>,
    /// The lockdep class of all the slots' locks (zero-sized without
    /// `lockdep`).
    dep_map: Map,
}

// SAFETY: each `T` is reached only through its slot's lock (one holder at a
// time, possibly on another CPU, so `T: Send`).
unsafe impl<T: Send> Sync for BrLock<T> {}
// SAFETY: moving the lock moves the `T`s.
unsafe impl<T: Send> Send for BrLock<T> {}

impl<T: ConstInit> BrLock<T> {
    const_fn! {
        /// Every CPU's `T` starts as `T::INIT`. `const`, for `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::brlock::BrLock;
        ///
        /// // `DEFINE_LGLOCK`: `const`, every CPU's count starts at `u64::INIT` (0).
        /// static MOUNTS: BrLock<u64> = BrLock::new();
        /// assert!(!MOUNTS.is_locked());
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new() -> Self {
            Self { slots: PerCpu::new(), dep_map: Map::new() }
        }
    }
}

impl<T: ConstInit> Default for BrLock<T> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn default() -> Self {
        Self::new()
    }
}

impl<T> BrLock<T> {
    /// CPU `i`'s `T` starts as `init(i)`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// // Per-CPU free lists, each starting with that CPU's share of the pool.
    /// let free_ids = BrLock::from_fn(|cpu| vec![cpu as u32 * 100]);
    /// assert_eq!(free_ids.cpu_lock(2)[0], 200);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn from_fn(mut init: impl FnMut(usize) -> T) -> Self {
        Self {
            slots: PerCpu::from_fn(|i| Slot {
                lock: TicketLock::new(),
                data: UnsafeCell::new(init(i)),
            }),
            dep_map: Map::new(),
        }
    }

    /// Puts the brlock in `key`'s [lockdep](crate::lockdep) class instead
    /// of the class of the place it was built. Does nothing without
    /// `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// // Built in a generic constructor, named for the reports.
    /// let mut files: BrLock<u32> = BrLock::new();
    /// files.set_lock_class(ksync::lock_class!("files_lglock"));
    /// *files.local_lock() += 1;
    /// ```
    #[doc(alias = "lockdep_set_class")]
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }

    /// Whether any CPU's lock is held (a local or the global locker): a
    /// snapshot, stale the moment it returns.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let lock: BrLock<u32> = BrLock::new();
    /// let guard = lock.local_lock();
    /// assert!(lock.is_locked()); // some CPU holds its part: a snapshot
    /// drop(guard);
    /// assert!(!lock.is_locked());
    /// ```
    #[doc(alias = "spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.slots.iter().any(|slot| slot.lock.is_locked())
    }

    /// Whether CPU `cpu`'s lock is held (a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let lock: BrLock<u32> = BrLock::new();
    /// let guard = lock.local_lock();
    /// assert!(lock.is_cpu_locked(guard.cpu()));
    /// # drop(guard);
    /// ```
    ///
    /// # Panics
    /// If `cpu` is not below [`MAX_CPUS`](crate::kernel::MAX_CPUS).
    #[inline]
    pub fn is_cpu_locked(&self, cpu: usize) -> bool {
        self.slots.cpu(cpu).lock.is_locked()
    }

    /// Takes this CPU's lock (preemption disabled until the guard drops).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// static NR_OPEN: BrLock<u64> = BrLock::new();
    ///
    /// let mut count = NR_OPEN.local_lock(); // uncontended, on this CPU's line
    /// *count += 1;
    /// ```
    #[doc(alias = "lg_local_lock")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn local_lock(&self) -> LocalGuard<'_, T> {
        let (preempt, cpu) = kernel::preempt_disable_cpu();
        self.lock_slot(cpu, 0, preempt, None)
    }

    /// [`local_lock`](Self::local_lock) with local interrupts masked
    /// before spinning and restored after unlocking.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// // Interrupt handlers account here too: mask before taking the lock.
    /// static TIMER_EVENTS: BrLock<u64> = BrLock::new();
    /// *TIMER_EVENTS.local_lock_irqsave() += 1;
    /// assert!(!ksync::host::irqs_disabled()); // restored on drop
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn local_lock_irqsave(&self) -> LocalGuard<'_, T> {
        let irq = IrqState::save();
        let (preempt, cpu) = kernel::preempt_disable_cpu();
        self.lock_slot(cpu, 0, preempt, Some(irq))
    }

    /// Takes CPU `cpu`'s lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let runqueues: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
    ///
    /// // `lg_local_lock_cpu`: queue a task on another CPU's run queue.
    /// runqueues.cpu_lock(1).push(42);
    /// assert_eq!(runqueues.cpu_lock(1).len(), 1);
    /// ```
    ///
    /// # Panics
    /// If `cpu` is at or past the number of possible CPUs (the message
    /// names the id and the limit).
    #[doc(alias = "lg_local_lock_cpu")]
    #[track_caller]
    pub fn cpu_lock(&self, cpu: usize) -> LocalGuard<'_, T> {
        self.lock_slot(cpu, 0, kernel::preempt_disable(), None)
    }

    /// [`cpu_lock`](Self::cpu_lock) for a slot taken while another slot
    /// of this brlock is held (Linux's `spin_lock_nested` on an lglock's
    /// per-CPU lock): every slot is one [lockdep](crate::lockdep) class,
    /// so without the annotation the second slot is reported as a
    /// recursion. The first slot with `cpu_lock`, the second with
    /// `cpu_lock_nested(cpu, 1)`, a third with `2`. Without `lockdep`,
    /// exactly `cpu_lock`.
    ///
    /// The annotation silences the check, not the deadlock: two CPUs that
    /// nest the same two slots must take them in the same order (by CPU
    /// id, as [`double_lock`](Self::double_lock) does).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::brlock::BrLock;
    /// # use ksync::kernel::MAX_CPUS;
    /// static RUNQUEUES: BrLock<u32> = BrLock::new();
    /// # let (src, dst) = (0, 1 % MAX_CPUS);
    /// # if src != dst {
    /// // Move one task from CPU `src` to CPU `dst` (src < dst).
    /// let mut from = RUNQUEUES.cpu_lock(src);
    /// let mut to = RUNQUEUES.cpu_lock_nested(dst, 1);
    /// *from = from.wrapping_sub(1);
    /// *to += 1;
    /// # }
    /// ```
    ///
    /// # Panics
    /// As [`cpu_lock`](Self::cpu_lock); with `lockdep`, if `subclass` is
    /// not below [`MAX_SUBCLASSES`](crate::lockdep::MAX_SUBCLASSES).
    #[doc(alias = "spin_lock_nested")]
    #[track_caller]
    pub fn cpu_lock_nested(&self, cpu: usize, subclass: u8) -> LocalGuard<'_, T> {
        self.lock_slot(cpu, subclass, kernel::preempt_disable(), None)
    }

    /// Takes CPU `a`'s and CPU `b`'s locks (Linux's `lg_double_lock`): in
    /// CPU order, so double lockers and global lockers (also in CPU order)
    /// cannot deadlock with each other, the second as a nested
    /// acquisition ([`cpu_lock_nested`](Self::cpu_lock_nested)). The
    /// guards come back in the order asked: `a`'s, then `b`'s.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::brlock::BrLock;
    /// # use ksync::kernel::MAX_CPUS;
    /// static RUNQUEUES: BrLock<u32> = BrLock::new();
    /// # let (src, dst) = (1 % MAX_CPUS, 0);
    /// # if src != dst {
    /// let (mut from, mut to) = RUNQUEUES.double_lock(src, dst);
    /// *from = from.wrapping_sub(1);
    /// *to += 1;
    /// # }
    /// ```
    ///
    /// # Panics
    /// If `a == b` (one lock taken twice deadlocks), or as
    /// [`cpu_lock`](Self::cpu_lock) for an impossible CPU (then nothing
    /// stays locked).
    #[doc(alias = "lg_double_lock")]
    #[track_caller]
    pub fn double_lock(&self, a: usize, b: usize) -> (LocalGuard<'_, T>, LocalGuard<'_, T>) {
        assert!(a != b, "brlock: double_lock of CPU {a} twice");
        let (low, high) = (a.min(b), a.max(b));
        let first = self.cpu_lock(low);
        // If `high` is out of range, `first` unlocks as the panic unwinds.
        let second = self.cpu_lock_nested(high, 1);
        if a < b {
            (first, second)
        } else {
            (second, first)
        }
    }

    /// # Panics
    /// If `cpu` is not a possible CPU ([`PerCpu::cpu`] checks).
    #[track_caller]
    fn lock_slot(
        &self,
        cpu: usize,
        subclass: u8,
        preempt: PreemptGuard,
        irq: Option<IrqState>,
    ) -> LocalGuard<'_, T> {
        let slot = self.slots.cpu(cpu);
        // Recorded once `cpu` is known to be valid, before spinning.
        let dep = self.dep_map.acquire_guard(subclass, false, irq.is_some());
        slot.lock.lock();
        LocalGuard {
            slot,
            cpu,
            _dep: dep,
            _preempt: preempt,
            _irq: irq,
        }
    }

    /// Takes every CPU's lock, in CPU order (so global lockers cannot
    /// deadlock with each other).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let files: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
    /// files.local_lock().push(7);
    ///
    /// // `mark_files_ro`: walk every CPU's list with all of them stopped.
    /// let mut all = files.global_lock();
    /// let total: usize = all.iter_mut().map(|files| files.len()).sum();
    /// assert_eq!(total, 1);
    /// ```
    #[doc(alias = "lg_global_lock")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn global_lock(&self) -> GlobalGuard<'_, T> {
        self.lock_all(kernel::preempt_disable(), None)
    }

    /// [`global_lock`](Self::global_lock) with local interrupts masked
    /// before spinning and restored after unlocking.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// static TIMER_EVENTS: BrLock<u64> = BrLock::new();
    /// // A consistent total, with this CPU's handlers masked meanwhile.
    /// let total: u64 = TIMER_EVENTS.global_lock_irqsave().iter_mut().map(|n| *n).sum();
    /// assert_eq!(total, 0);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn global_lock_irqsave(&self) -> GlobalGuard<'_, T> {
        let irq = IrqState::save();
        self.lock_all(kernel::preempt_disable(), Some(irq))
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_all(&self, preempt: PreemptGuard, irq: Option<IrqState>) -> GlobalGuard<'_, T> {
        // One acquisition of the class for all the slots (taken in CPU
        // order, which cannot deadlock with another global locker).
        let dep = self.dep_map.acquire_guard(0, false, irq.is_some());
        for slot in self.slots.iter() {
            slot.lock.lock();
        }
        GlobalGuard {
            lock: self,
            _dep: dep,
            _preempt: preempt,
            _irq: irq,
        }
    }

    /// Exclusive access to every CPU's `T` (no locking needed).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// // Owned: reset at boot or teardown without taking any lock.
    /// let mut stats: BrLock<u64> = BrLock::new();
    /// stats.iter_mut().for_each(|n| *n = 0);
    /// ```
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        // SAFETY: `&mut self`: nobody else can reach the data.
        self.slots
            .iter_mut()
            .map(|slot| slot.data.with_mut(|data| unsafe { &mut *data }))
    }
}

impl<T> fmt::Debug for BrLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrLock").finish_non_exhaustive()
    }
}

/// One CPU's lock of a [`BrLock`], held. `!Send`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::brlock::{BrLock, LocalGuard};
///
/// let files: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
///
/// // Helpers that need "this CPU's list, locked" take the guard.
/// fn file_add(list: &mut LocalGuard<'_, Vec<u32>>, fd: u32) {
///     list.push(fd);
/// }
/// file_add(&mut files.local_lock(), 3);
/// ```
#[must_use = "dropping the guard unlocks at once"]
pub struct LocalGuard<'a, T> {
    slot: &'a Slot<T>,
    cpu: usize,
    // Dropped after `Drop::drop` unlocks: lockdep's record, interrupts,
    // then preemption (`spin_unlock_irqrestore`'s order: the preemption
    // point where the count returns to zero runs with interrupts on).
    _dep: Acquired<'a>,
    _irq: Option<IrqState>,
    _preempt: PreemptGuard,
}

impl<T> LocalGuard<'_, T> {
    /// The CPU whose lock this is.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let files: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
    /// let guard = files.local_lock();
    /// // Remember which CPU's list the file went on, to unlink it later.
    /// let home_cpu = guard.cpu();
    /// # assert_eq!(home_cpu, ksync::kernel::cpu_id());
    /// ```
    #[must_use]
    pub fn cpu(&self) -> usize {
        self.cpu
    }
}

impl<T> Deref for LocalGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the slot's lock is held by this guard.
        self.slot.data.with(|data| unsafe { &*data })
    }
}

impl<T> DerefMut for LocalGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the slot's lock is held by this guard, which is borrowed
        // mutably.
        self.slot.data.with_mut(|data| unsafe { &mut *data })
    }
}

impl<T: fmt::Debug> fmt::Debug for LocalGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalGuard")
            .field("cpu", &self.cpu)
            .field("data", &**self)
            .finish()
    }
}

impl<T> Drop for LocalGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the slot's lock.
        unsafe { self.slot.lock.unlock() }
    }
}

/// Every CPU's lock of a [`BrLock`], held. `!Send`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::brlock::{BrLock, GlobalGuard};
///
/// let files: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
///
/// fn count_all(all: &mut GlobalGuard<'_, Vec<u32>>) -> usize {
///     all.iter_mut().map(|l| l.len()).sum()
/// }
/// assert_eq!(count_all(&mut files.global_lock()), 0);
/// ```
#[must_use = "dropping the guard unlocks at once"]
pub struct GlobalGuard<'a, T> {
    lock: &'a BrLock<T>,
    // Dropped in this order after the unlocks: interrupts before
    // preemption, as in `LocalGuard`.
    _dep: Acquired<'a>,
    _irq: Option<IrqState>,
    _preempt: PreemptGuard,
}

impl<T> GlobalGuard<'_, T> {
    /// CPU `cpu`'s `T`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// let runqueues: BrLock<Vec<u32>> = BrLock::from_fn(|_| Vec::new());
    /// runqueues.cpu_lock(1).push(9);
    ///
    /// // With every CPU stopped: move CPU 1's tasks to CPU 0 (CPU 1 going offline).
    /// let mut all = runqueues.global_lock();
    /// let moved = std::mem::take(all.cpu_mut(1));
    /// all.cpu_mut(0).extend(moved);
    /// assert_eq!(all.cpu_mut(0).len(), 1);
    /// ```
    ///
    /// # Panics
    /// If `cpu` is at or past the number of possible CPUs (the message
    /// names the id and the limit).
    #[track_caller]
    pub fn cpu_mut(&mut self, cpu: usize) -> &mut T {
        // SAFETY: every slot's lock is held by this guard, borrowed mutably.
        self.lock
            .slots
            .cpu(cpu)
            .data
            .with_mut(|data| unsafe { &mut *data })
    }

    /// Every possible CPU's `T`, in CPU order.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::brlock::BrLock;
    ///
    /// static NR_OPEN: BrLock<u64> = BrLock::new();
    /// *NR_OPEN.local_lock() += 2;
    /// let mut all = NR_OPEN.global_lock();
    /// let total: u64 = all.iter_mut().map(|n| *n).sum(); // exact: every CPU stopped
    /// assert_eq!(total, 2);
    /// ```
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        // SAFETY: every slot's lock is held by this guard, borrowed mutably
        // for the iterator's life; each slot is yielded once.
        self.lock
            .slots
            .iter()
            .map(|slot| slot.data.with_mut(|data| unsafe { &mut *data }))
    }
}

/// Shows no data: reading every CPU's slot needs `&mut` (see
/// [`GlobalGuard::iter_mut`]).
impl<T> fmt::Debug for GlobalGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalGuard").finish_non_exhaustive()
    }
}

impl<T> Drop for GlobalGuard<'_, T> {
    fn drop(&mut self) {
        for slot in self.lock.slots.iter() {
            // SAFETY: `lock_all` took every one of these locks.
            unsafe { slot.lock.unlock() }
        }
    }
}
