//! Per-CPU counters: a count that every CPU updates on its own cache line,
//! folded into a shared total only every `batch` units.
//!
//! Linux's `lib/percpu_counter.c`. A shared `fetch_add` costs a cache-line
//! transfer per update once two CPUs update it; here an update touches only
//! this CPU's slot — without a `lock`-prefixed or exclusive-pair
//! instruction where the architecture allows (x86_64: one `add` to memory;
//! aarch64 with LSE: `stadd`; elsewhere an atomic add on this CPU's own
//! slot, such as riscv64's `amoadd.w`) — and moves the slot's value into the shared total under a lock
//! only when the slot reaches `batch` in absolute value.
//!
//! # Reading
//!
//! * [`read`](PerCpuCounter::read): the shared total alone, one load. It
//!   misses what sits in the slots: **its error is below
//!   `4 * batch * nr_cpus()`** in absolute value. A slot holds less than
//!   `batch` after any add (an add of `batch` or more always folds); an
//!   interrupt handler that adds on a CPU between that CPU's check and its
//!   add can leave one `batch` more, and each further level of nested
//!   contexts landing in the same window one more. The bound covers the
//!   four contexts a CPU can nest (thread, softirq, hardirq, NMI: the
//!   nesting the crate supports, as the queued lock's four nodes per CPU);
//!   deeper nesting is not supported.
//! * [`sum`](PerCpuCounter::sum): exact, O(`nr_cpus`), under the fold lock
//!   (exact as of one instant when no update runs concurrently; concurrent
//!   updates are either in or out).
//! * [`compare`](PerCpuCounter::compare): uses `read` when the error bound
//!   already decides, and `sum` only when it does not.
//!
//! # Bad input
//!
//! The total is an `i64`, and every `i64` is a valid `amount`. A fold
//! computes the new total exactly; one that would leave the `i64` range
//! saturates at `i64::MAX` or `i64::MIN` and is reported: counted in
//! [`overflows`] in every build, then a panic in builds with debug
//! assertions (after the counter is updated and its lock released). No
//! other input saturates or panics: the result is exact whenever the exact
//! value fits, whatever the batch. [`sum`](PerCpuCounter::sum) of a value
//! that does not fit (the total near an edge plus unfolded slots) reads as
//! the nearest edge, and [`compare`](PerCpuCounter::compare) stays exact.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::percpu_counter::PerCpuCounter;
//!
//! static FREE_BLOCKS: PerCpuCounter = PerCpuCounter::new();
//!
//! FREE_BLOCKS.add(1000);
//! FREE_BLOCKS.dec();
//! assert_eq!(FREE_BLOCKS.sum(), 999);
//! assert!((FREE_BLOCKS.read() - 999).abs() < FREE_BLOCKS.error_bound());
//! assert_eq!(FREE_BLOCKS.compare(500), core::cmp::Ordering::Greater);
//! ```

use core::cmp::Ordering as Cmp;
use core::fmt;

use crate::arch;
use crate::kernel;
use crate::percpu::PerCpu;
use crate::spinlock::{RawTicketLock, lock_irqsave};
use crate::sync::{AtomicI32, LockedI64, Ordering, StatCounter, const_fn};

/// The largest batch: keeps `4 * batch` (a slot pushed past the batch by
/// three nested contexts, see the module docs) inside an `i32`.
pub const MAX_BATCH: i32 = 1 << 29;

/// How many contexts can nest on one CPU (thread, softirq, hardirq, NMI),
/// each able to leave up to one `batch` in a slot (module docs).
const NESTED_CONTEXTS: i64 = 4;

// A slot's worst case fits its `i32`.
const _: () = assert!(NESTED_CONTEXTS * (MAX_BATCH as i64) <= i32::MAX as i64 + 1);

/// A counter with a per-CPU part and a shared total.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_counter::PerCpuCounter;
///
/// // Linux's `nr_files` / `vm_committed_as`: updated everywhere, read rarely.
/// static NR_FILES: PerCpuCounter = PerCpuCounter::new();
///
/// NR_FILES.inc(); // `percpu_counter_inc`: this CPU's slot only
/// NR_FILES.add(4);
/// assert_eq!(NR_FILES.sum(), 5); // exact, folds every CPU's part
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): count 0, the default batch
/// (stored as 0), every CPU's part 0, the fold lock free.
#[doc(alias = "percpu_counter")]
pub struct PerCpuCounter {
    /// Serialises folds into `total` with `sum` and `set`.
    lock: RawTicketLock,
    /// The folded part. Written only under `lock`.
    total: LockedI64,
    /// 0: the default, `max(32, 2 * nr_cpus())`.
    batch: i32,
    /// Each CPU's unfolded part; |slot| < 4 * batch (see the module docs).
    slots: PerCpu<AtomicI32>,
}

static OVERFLOWS: StatCounter = StatCounter::new(0);
static DEFAULT_BATCH: StatCounter = StatCounter::new(0);

/// How many folds saturated a counter's total at `i64::MAX`/`i64::MIN`, in
/// all counters (release builds do not panic on it: watch this instead).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_counter;
///
/// // Part of a periodic health report in release builds.
/// if percpu_counter::overflows() > 0 {
///     eprintln!("percpu_counter: a total saturated at i64::MAX/MIN");
/// }
/// # assert_eq!(percpu_counter::overflows(), 0);
/// ```
pub fn overflows() -> usize {
    OVERFLOWS.load(Ordering::Relaxed)
}

/// Linux's default batch: `max(32, 2 * nr_cpus())`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_counter::{self, PerCpuCounter};
///
/// let batch = percpu_counter::default_batch(); // `percpu_counter_batch`
/// assert!(batch >= 32);
/// assert_eq!(PerCpuCounter::new().batch(), batch);
/// ```
#[doc(alias = "percpu_counter_batch")]
pub fn default_batch() -> i32 {
    match DEFAULT_BATCH.load(Ordering::Relaxed) {
        0 => {
            let batch = (2 * kernel::nr_cpus()).clamp(32, MAX_BATCH as usize);
            DEFAULT_BATCH.store(batch, Ordering::Relaxed);
            batch as i32
        }
        batch => batch as i32,
    }
}

impl PerCpuCounter {
    const_fn! {
        /// A counter at zero with the default batch (see [`default_batch`]).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::percpu_counter::PerCpuCounter;
        ///
        /// // `percpu_counter_init(&nr_dentry, 0)`, but `const`, in a `static`.
        /// static NR_DENTRY: PerCpuCounter = PerCpuCounter::new();
        /// assert_eq!(NR_DENTRY.read(), 0);
        /// ```
        #[doc(alias = "percpu_counter_init")]
        pub fn new() -> Self {
            Self::with_batch(0)
        }
    }

    const_fn! {
        /// A counter at zero that folds every `batch` units (0: the default).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::percpu_counter::PerCpuCounter;
        ///
        /// // A limit checked often (`__percpu_counter_compare` against a quota):
        /// // a small batch keeps `read` close to the truth.
        /// static DIRTY_PAGES: PerCpuCounter = PerCpuCounter::with_batch(8);
        /// assert_eq!(DIRTY_PAGES.batch(), 8);
        /// ```
        ///
        /// # Panics
        /// If `batch` is negative or above [`MAX_BATCH`].
        // `RangeInclusive::contains` is not `const`.
        #[allow(clippy::manual_range_contains)]
        pub fn with_batch(batch: i32) -> Self {
            assert!(
                batch >= 0 && batch <= MAX_BATCH,
                "percpu_counter: batch out of 0..=MAX_BATCH"
            );
            Self {
                lock: RawTicketLock::new(),
                total: LockedI64::new(0),
                batch,
                slots: PerCpu::new(),
            }
        }
    }

    /// The batch this counter folds at.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// let counter = PerCpuCounter::with_batch(64);
    /// counter.add(63); // stays in this CPU's slot
    /// assert_eq!(counter.read(), 0);
    /// counter.add(1); // reaches the batch: folded into the total
    /// assert_eq!(counter.read(), 64);
    /// # assert_eq!(counter.batch(), 64);
    /// ```
    #[inline]
    pub fn batch(&self) -> i32 {
        if self.batch != 0 {
            self.batch
        } else {
            default_batch()
        }
    }

    /// The bound on [`read`](Self::read)'s error: `4 * batch * nr_cpus()`
    /// (see the module docs for the factor 4: the contexts a CPU can nest).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// // How far off a cheap `read` may be: decides whether `sum` is needed.
    /// let blocks = PerCpuCounter::with_batch(32);
    /// let bound = blocks.error_bound();
    /// assert_eq!(bound, 4 * 32 * ksync::kernel::nr_cpus() as i64);
    /// ```
    pub fn error_bound(&self) -> i64 {
        NESTED_CONTEXTS * i64::from(self.batch()) * kernel::nr_cpus() as i64
    }

    /// Adds `amount`: to this CPU's slot, or, when the slot would reach
    /// `batch` in absolute value, folds the slot and `amount` into the
    /// total under the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static FREE_BLOCKS: PerCpuCounter = PerCpuCounter::new();
    /// FREE_BLOCKS.add(1024); // `percpu_counter_add`: blocks freed
    /// FREE_BLOCKS.add(-16); // ... and allocated
    /// assert_eq!(FREE_BLOCKS.sum(), 1008);
    /// ```
    #[doc(alias("percpu_counter_add", "percpu_counter_add_batch"))]
    #[inline]
    pub fn add(&self, amount: i64) {
        let batch = u64::from(self.batch().unsigned_abs());
        let slot = self.slots.get();
        // The fast path needs |amount| < batch as well as |slot + amount|
        // < batch: the addition cannot overflow (|slot| <= 2^31, |amount|
        // < 2^29), `amount` fits the slot's `i32`, and a slot that nested
        // contexts changed between the load and the add stays below
        // `4 * batch` (module docs). Anything else, i64 edges included,
        // folds exactly, or saturates and is reported.
        if amount.unsigned_abs() < batch {
            let local = i64::from(slot.load(Ordering::Relaxed)) + amount;
            if local.unsigned_abs() < batch {
                arch::local_add(&slot, amount as i32);
                return;
            }
        }
        self.fold(&slot, amount);
    }

    /// Moves this CPU's slot plus `amount` into the total.
    #[cold]
    #[inline(never)]
    fn fold(&self, slot: &AtomicI32, amount: i64) {
        let (new, exact) = {
            // Interrupts off: a handler on this CPU must neither deadlock
            // on the lock nor change the slot between our load and store.
            let _locked = lock_irqsave(&self.lock);
            let local = slot.load(Ordering::Relaxed);
            // SAFETY: the lock is held.
            let total = unsafe { self.total.get() };
            let exact = i128::from(total) + i128::from(local) + i128::from(amount);
            let new = clamp(exact);
            // SAFETY: the lock is held.
            unsafe { self.total.set(new) };
            slot.store(0, Ordering::Relaxed);
            (new, exact)
        };
        if i128::from(new) != exact {
            report_overflow();
        }
    }

    /// Adds one.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static NR_INODES: PerCpuCounter = PerCpuCounter::new();
    /// NR_INODES.inc(); // `percpu_counter_inc` in `new_inode`
    /// assert_eq!(NR_INODES.sum(), 1);
    /// ```
    #[doc(alias = "percpu_counter_inc")]
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Subtracts one.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static NR_INODES: PerCpuCounter = PerCpuCounter::new();
    /// NR_INODES.inc();
    /// NR_INODES.dec(); // `percpu_counter_dec` in `destroy_inode`
    /// assert_eq!(NR_INODES.sum(), 0);
    /// ```
    #[doc(alias = "percpu_counter_dec")]
    #[inline]
    pub fn dec(&self) {
        self.add(-1)
    }

    /// Sets the counter to `value`: the total becomes `value` and every slot
    /// zero. Updates running at the same time may be lost, as in Linux.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static FREE_BLOCKS: PerCpuCounter = PerCpuCounter::new();
    /// // At mount: the free count read from the superblock.
    /// FREE_BLOCKS.set(1 << 20);
    /// assert_eq!(FREE_BLOCKS.read(), 1 << 20);
    /// ```
    #[doc(alias = "percpu_counter_set")]
    pub fn set(&self, value: i64) {
        let _locked = lock_irqsave(&self.lock);
        for slot in self.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
        // SAFETY: the lock is held.
        unsafe { self.total.set(value) };
    }

    /// The total without the per-CPU parts: one load, off by less than
    /// [`error_bound`](Self::error_bound).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static NR_FILES: PerCpuCounter = PerCpuCounter::new();
    /// NR_FILES.inc();
    /// // `percpu_counter_read`: one load, for /proc files and heuristics.
    /// let approx = NR_FILES.read();
    /// assert!((approx - NR_FILES.sum()).abs() <= NR_FILES.error_bound());
    /// ```
    #[doc(alias = "percpu_counter_read")]
    #[inline]
    pub fn read(&self) -> i64 {
        match self.total.load_unlocked() {
            Some(total) => total,
            None => {
                // No 64-bit atomic load: read under the lock.
                let _locked = lock_irqsave(&self.lock);
                // SAFETY: the lock is held.
                unsafe { self.total.get() }
            }
        }
    }

    /// [`read`](Self::read), but never below zero (for counts that are
    /// positive in truth but can read negative while slots lag).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static NR_DENTRY: PerCpuCounter = PerCpuCounter::new();
    /// NR_DENTRY.inc();
    /// // `/proc/sys/fs/dentry-state` never shows a negative count, even when
    /// // another CPU's decrement was folded before this CPU's increment.
    /// let shown = NR_DENTRY.read_positive();
    /// assert!(shown >= 0);
    /// ```
    #[doc(alias = "percpu_counter_read_positive")]
    #[inline]
    pub fn read_positive(&self) -> i64 {
        self.read().max(0)
    }

    /// The exact value: the total plus every CPU's slot, under the lock.
    #[doc(alias = "percpu_counter_sum")]
    ///
    /// An exact value outside the `i64` range (the total near an edge and
    /// slots that push it past, before any fold saturated) reads as
    /// `i64::MAX` or `i64::MIN`; nothing is saturated or reported, since
    /// the counter itself is unchanged.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static FREE_BLOCKS: PerCpuCounter = PerCpuCounter::new();
    /// FREE_BLOCKS.add(3);
    /// // `percpu_counter_sum`: exact, for `statfs` and shutdown.
    /// assert_eq!(FREE_BLOCKS.sum(), 3);
    /// ```
    pub fn sum(&self) -> i64 {
        clamp(self.sum_exact())
    }

    /// The total plus every CPU's slot, without rounding to the `i64` range.
    fn sum_exact(&self) -> i128 {
        let _locked = lock_irqsave(&self.lock);
        // SAFETY: the lock is held.
        let total = unsafe { self.total.get() };
        self.slots.iter().fold(i128::from(total), |sum, slot| {
            sum + i128::from(slot.load(Ordering::Relaxed))
        })
    }

    /// [`sum`](Self::sum), but never below zero.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static NR_FILES: PerCpuCounter = PerCpuCounter::new();
    /// NR_FILES.dec(); // a close counted before its open was
    /// assert_eq!(NR_FILES.sum(), -1);
    /// assert_eq!(NR_FILES.sum_positive(), 0); // `percpu_counter_sum_positive`
    /// ```
    #[doc(alias = "percpu_counter_sum_positive")]
    pub fn sum_positive(&self) -> i64 {
        self.sum().max(0)
    }

    /// Compares the counter with `rhs`: from [`read`](Self::read) when it is
    /// further from `rhs` than the error bound, else from the exact
    /// [`sum`](Self::sum) (exact even where `sum` saturates).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::cmp::Ordering;
    /// use ksync::percpu_counter::PerCpuCounter;
    ///
    /// static FREE_BLOCKS: PerCpuCounter = PerCpuCounter::new();
    /// FREE_BLOCKS.add(100);
    ///
    /// // `__percpu_counter_compare`: cheap when far from the limit, exact near it.
    /// let wanted = 64;
    /// if FREE_BLOCKS.compare(wanted) == Ordering::Less {
    ///     panic!("ENOSPC");
    /// }
    /// ```
    #[doc(alias("percpu_counter_compare", "__percpu_counter_compare"))]
    pub fn compare(&self, rhs: i64) -> Cmp {
        let approx = self.read();
        if (i128::from(approx) - i128::from(rhs)).abs() > i128::from(self.error_bound()) {
            approx.cmp(&rhs)
        } else {
            self.sum_exact().cmp(&i128::from(rhs))
        }
    }
}

impl Default for PerCpuCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PerCpuCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuCounter")
            .field("read", &self.read())
            .field("batch", &self.batch())
            .finish_non_exhaustive()
    }
}

/// `value` rounded into the `i64` range.
fn clamp(value: i128) -> i64 {
    value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cold]
#[inline(never)]
fn report_overflow() {
    OVERFLOWS.fetch_add(1, Ordering::Relaxed);
    if cfg!(debug_assertions) {
        panic!("percpu_counter: the total overflowed i64 and saturated");
    }
}

#[cfg(all(test, feature = "test-hooks", not(ksync_loom)))]
mod tests {
    use super::{Cmp, PerCpuCounter};
    use crate::kernel;
    use crate::sync::Ordering;

    /// `compare` decides from `read` only beyond the error bound, and the
    /// bound covers slots left at their worst by four nested contexts
    /// (each adding `batch - 1` in the window between a CPU's check and
    /// its add). With the old bound (`2 * batch * nr_cpus`) `read` decided
    /// here and answered `Less` for a counter above `rhs`.
    #[test]
    fn compare_holds_for_slots_left_by_nested_contexts() {
        let batch = 1000;
        let counter = PerCpuCounter::with_batch(batch);
        let cpus = kernel::nr_cpus();
        let worst = 4 * (batch - 1);
        for slot in counter.slots.iter().take(cpus) {
            slot.store(worst, Ordering::Relaxed);
        }
        let truth = i64::from(worst) * cpus as i64;
        assert_eq!(counter.read(), 0);
        assert!(counter.error_bound() >= truth);
        assert_eq!(counter.compare(truth - 1), Cmp::Greater);
        assert_eq!(counter.compare(truth), Cmp::Equal);
        assert_eq!(counter.compare(truth + 1), Cmp::Less);
    }
}
