//! The test-and-test-and-set lock (its items are re-exported by
//! `spinlock`).

use core::fmt;
use core::marker::PhantomData;

use super::{RelaxStrategy, Spin};
use crate::kernel::{Waiter, kick_waiters, vcpu_preemptible};
use crate::lockdep::Map;
use crate::sync::{AtomicBool, Ordering, const_fn};

/// A test-and-test-and-set spinlock: waiters read the flag until it looks
/// free and only then try to take it, so they do not steal the cache line
/// from the holder while it works. Not fair.
///
/// With [`lockdep`](crate::lockdep), as [`RawTicketLock`](super::RawTicketLock): its class is
/// the place it was built, and its methods record themselves.
#[cfg_attr(not(feature = "lockdep"), repr(transparent))]
pub struct RawTtasLock<R = Spin> {
    locked: AtomicBool,
    relax: PhantomData<R>,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
}

impl<R> RawTtasLock<R> {
    const_fn! {
        fn with_map(dep_map: Map) -> Self {
            Self { locked: AtomicBool::new(false), relax: PhantomData, dep_map }
        }
    }

    /// [`try_lock`](Self::try_lock) without telling lockdep.
    #[inline]
    pub(crate) fn try_lock_untracked(&self) -> bool {
        // Acquire pairs with the Release store in `unlock`.
        !self.locked.load(Ordering::Relaxed)
            && self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether the lock is held: a snapshot, not for synchronization.
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// [`unlock`](Self::unlock) without telling lockdep.
    ///
    /// # Safety
    /// As for [`unlock`](Self::unlock).
    #[inline]
    pub(crate) unsafe fn unlock_untracked(&self) {
        debug_assert!(self.is_locked(), "unlock of a TTAS lock that is not held");
        // Release pairs with the Acquire exchange in `lock`/`try_lock`.
        self.locked.store(false, Ordering::Release);
        // In every mode: a waiter from before a mode switch may be halted
        // (the `SpinWait` contract).
        kick_waiters();
    }
}

impl<R: RelaxStrategy> RawTtasLock<R> {
    /// [`lock`](Self::lock) without telling lockdep.
    #[inline]
    pub(crate) fn lock_untracked(&self) {
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

impl<R> fmt::Debug for RawTtasLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawTtasLock")
            .field("locked", &self.is_locked())
            .finish()
    }
}

// ---- lock_api ---------------------------------------------------------------

// Why it excludes: the compare-exchange from `false` to `true` succeeds for one CPU
// at a time and only the holder stores `false`. Acquire/Release as
// documented on the methods.
super::impl_lock_entry_points!(
    RawTtasLock, "TTAS lock",
    lock: {
        /// Spins until the lock is taken.
        ///
        /// When CPUs may be descheduled while spinning ([`vcpu_preemptible`]),
        /// a waiter gives the CPU away now and then (the kernel's
        /// [`SpinWait`](crate::kernel::SpinWait)) so a descheduled holder can
        /// run.
    },
    try_lock: {
        /// Tries to take the lock once.
    },
    unlock: {},
);

super::impl_raw_mutex!(RawTtasLock);

#[cfg(feature = "defmt")]
impl<R> defmt::Format for RawTtasLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "RawTtasLock {{ locked: {} }}", self.is_locked())
    }
}
