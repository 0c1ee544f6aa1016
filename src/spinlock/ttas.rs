//! The test-and-test-and-set lock: the algorithm ([`TtasLock`]) and its
//! tracked form (its items are re-exported by `spinlock`).

use core::fmt;
use core::marker::PhantomData;

use super::tracked::{ArchSpinlock, RawSpinlock, tracked_constructors};
use super::up::{self, UP};
use super::{PreemptDisabled, RelaxStrategy, Spin};
use crate::kernel::{Waiter, kick_waiters, vcpu_preemptible};
use crate::sync::{AtomicBool, Ordering, const_fn, relax};

/// A test-and-test-and-set spinlock: waiters read the flag until it looks
/// free and only then try to take it, so they do not steal the cache line
/// from the holder while it works. Not fair.
///
/// The algorithm alone: it tells [`lockdep`](crate::lockdep) nothing;
/// [`RawTtasLock`] is the same lock with its lockdep class.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::TtasLock;
///
/// // One byte, not fair: for a rarely contended flag-sized lock, e.g. a
/// // per-page bit lock in a kernel's page struct.
/// struct Page { lock: TtasLock, flags: core::cell::Cell<u32> }
///
/// let page = Page { lock: TtasLock::new(), flags: core::cell::Cell::new(0) };
/// page.lock.lock();
/// page.flags.set(page.flags.get() | 1); // PG_dirty
/// // SAFETY: held by this context.
/// unsafe { page.lock.unlock() };
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock, the one [`new`](Self::new)
/// builds (`false`). `bytemuck::Zeroable` with the `bytemuck` feature.
#[repr(transparent)]
pub struct TtasLock<R = Spin> {
    locked: AtomicBool,
    relax: PhantomData<R>,
}

impl TtasLock {
    const_fn! {
        /// A new, unlocked TTAS lock that spins with [`Spin`].
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::TtasLock;
        ///
        /// static LOCK: TtasLock = TtasLock::new(); // `const`: unlocked
        /// assert!(!LOCK.is_locked());
        /// ```
        pub fn new() -> Self {
            Self::with_relax()
        }
    }
}

impl<R> TtasLock<R> {
    const_fn! {
        /// A new, unlocked TTAS lock with the relax strategy `R`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::{Loop, TtasLock};
        ///
        /// static LOCK: TtasLock<Loop> = TtasLock::with_relax(); // no spin hint
        /// assert!(LOCK.try_lock());
        /// # unsafe { LOCK.unlock() };
        /// ```
        pub fn with_relax() -> Self {
            Self { locked: AtomicBool::new(false), relax: PhantomData }
        }
    }

    /// Tries to take the lock once.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TtasLock;
    ///
    /// let lock = TtasLock::new();
    /// if lock.try_lock() {
    ///     // ... the fast path: got it without waiting ...
    ///     // SAFETY: taken just above.
    ///     unsafe { lock.unlock() };
    /// }
    /// ```
    #[inline]
    #[must_use = "the lock is held when this returns `true` and must be unlocked"]
    pub fn try_lock(&self) -> bool {
        if UP {
            return self.try_lock_up();
        }
        // Acquire pairs with the Release store in `unlock`.
        !self.locked.load(Ordering::Relaxed)
            && self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether the lock is held: a snapshot, not for synchronization.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TtasLock;
    ///
    /// let lock = TtasLock::new();
    /// assert!(lock.try_lock());
    /// assert!(lock.is_locked()); // a snapshot, for assertions
    /// # unsafe { lock.unlock() };
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// Releases the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TtasLock;
    ///
    /// let lock = TtasLock::new();
    /// lock.lock();
    /// // SAFETY: this context holds it.
    /// unsafe { lock.unlock() };
    /// assert!(!lock.is_locked());
    /// ```
    ///
    /// # Safety
    /// The lock must be held by the caller's context.
    #[inline]
    pub unsafe fn unlock(&self) {
        debug_assert!(self.is_locked(), "unlock of a TTAS lock that is not held");
        if UP {
            up::releasing();
            // Relaxed: `releasing` keeps the critical section above it
            // (the `up` module's argument).
            self.locked.store(false, Ordering::Relaxed);
            return;
        }
        // Release pairs with the Acquire exchange in `lock`/`try_lock`.
        self.locked.store(false, Ordering::Release);
        // In every mode: a waiter from before a mode switch may be halted
        // (the `SpinWait` contract).
        kick_waiters();
    }
}

impl<R: RelaxStrategy> TtasLock<R> {
    /// Spins until the lock is taken.
    ///
    /// When CPUs may be descheduled while spinning ([`vcpu_preemptible`]),
    /// a waiter gives the CPU away now and then (the kernel's
    /// [`SpinWait`](crate::kernel::SpinWait)) so a descheduled holder can
    /// run.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TtasLock;
    ///
    /// static LOCK: TtasLock = TtasLock::new();
    /// LOCK.lock(); // reads until it looks free, then one swap
    /// // SAFETY: held by this context.
    /// unsafe { LOCK.unlock() };
    /// ```
    #[inline]
    pub fn lock(&self) {
        if UP {
            if !self.try_lock_up() {
                self.lock_up_held();
            }
            return;
        }
        // Acquire pairs with the Release store in `unlock`.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        self.lock_contended();
    }

    #[inline(never)]
    fn lock_contended(&self) {
        let preemptible = vcpu_preemptible();
        let mut waiter = Waiter::new();
        loop {
            // Test before test-and-set: read-only spinning leaves the line
            // shared instead of bouncing it between waiters.
            while self.locked.load(Ordering::Relaxed) {
                waiter.wait::<R>(preemptible);
            }
            // Acquire pairs with the Release store in `unlock`.
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

// ---- the single-CPU build (`KSYNC_MAX_CPUS=1`, see `up`) -------------------

impl<R> TtasLock<R> {
    /// [`try_lock`](Self::try_lock) on one CPU: a load and a store.
    #[inline(always)]
    fn try_lock_up(&self) -> bool {
        // Relaxed load and store: on one CPU only an interrupt handler can
        // run between them, and it leaves the flag as it found it (the
        // `up` module's argument).
        if self.locked.load(Ordering::Relaxed) {
            return false;
        }
        self.locked.store(true, Ordering::Relaxed);
        up::acquired();
        true
    }
}

impl<R: RelaxStrategy> TtasLock<R> {
    /// The lock is held on the only CPU: a recursion (panics in debug
    /// builds); release builds spin, as the SMP lock would.
    #[cold]
    #[inline(never)]
    fn lock_up_held(&self) {
        up::held_on_entry("TTAS lock");
        while !self.try_lock_up() {
            relax::<R>();
        }
    }
}

impl<R> Default for TtasLock<R> {
    fn default() -> Self {
        Self::with_relax()
    }
}

impl<R> fmt::Debug for TtasLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtasLock")
            .field("locked", &self.is_locked())
            .finish()
    }
}

tracked_constructors!(TtasLock, RawTtasLock, "TTAS lock");

/// The TTAS lock with its [lockdep](crate::lockdep) class (its class is the
/// place it was built): what kernels use (through
/// [`TtasMutex`](super::TtasMutex) or by hand).
///
/// # Zeroed memory
///
/// As for [`RawTicketLock`](super::RawTicketLock#zeroed-memory): all-zero
/// bytes are a valid unlocked lock in every build (with `lockdep`, its own
/// class).
pub type RawTtasLock<R = Spin, G = PreemptDisabled> = RawSpinlock<TtasLock<R>, G>;

// SAFETY: the compare-exchange from `false` to `true` succeeds for one CPU
// at a time and only the holder stores `false`. Acquire on taking, Release
// on unlock, as documented on the methods.
unsafe impl<R: RelaxStrategy> ArchSpinlock for TtasLock<R> {
    #[cfg(not(ksync_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const UNLOCKED: Self = Self::with_relax();

    #[inline]
    fn lock(&self) {
        TtasLock::lock(self)
    }

    #[inline]
    fn try_lock(&self) -> bool {
        TtasLock::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { TtasLock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        TtasLock::is_locked(self)
    }
}

#[cfg(feature = "defmt")]
impl<R> defmt::Format for TtasLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "TtasLock {{ locked: {} }}", self.is_locked())
    }
}
