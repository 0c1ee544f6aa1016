//! One tracked lock above the algorithms: [`RawSpinlock<A>`] holds the
//! lockdep map, the entry points that tell lockdep, the `lock_api` impls and
//! `#[track_caller]`, for any [`ArchSpinlock`] `A` (the ticket, TTAS and
//! queued locks). Linux layers the same way: `arch_spinlock_t` (the
//! algorithm) below `raw_spinlock_t` (which adds `dep_map`), and
//! Rust-for-Linux's `Lock<T, B: Backend>` is generic over small backends.

use core::fmt;

use crate::lockdep::{LockClassKey, Map};
use crate::sync::const_fn;

/// A spinlock algorithm without lock-order checking (Linux's
/// `arch_spinlock_t`): what [`RawSpinlock`] wraps. [`TicketLock`],
/// [`TtasLock`] and [`QueuedLock`] implement it.
///
/// # Safety
/// `lock` returns, and `try_lock` returns `true`, only when the calling
/// context holds the lock and no other does; taking it has Acquire
/// ordering and `unlock` Release, so one holder's critical section
/// happens-before the next one's. A lock whose holder forgets to unlock
/// stays held (no unwinding releases it).
///
/// [`TicketLock`]: super::TicketLock
/// [`TtasLock`]: super::TtasLock
/// [`QueuedLock`]: super::QueuedLock
pub unsafe trait ArchSpinlock {
    /// An unlocked lock, for `lock_api`'s `INIT` (not under loom, whose
    /// atomics cannot be constants).
    #[cfg(not(ksync_loom))]
    const UNLOCKED: Self;

    /// Takes the lock, spinning until it is free.
    fn lock(&self);

    /// Takes the lock if that needs no waiting.
    fn try_lock(&self) -> bool;

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock is held by the caller's context.
    unsafe fn unlock(&self);

    /// Whether the lock is held: a snapshot, not for synchronization.
    fn is_locked(&self) -> bool;
}

/// An [`ArchSpinlock`] whose plain unlock hands the lock to the longest
/// waiter (FIFO), so it is `lock_api`'s fair unlock too.
///
/// # Safety
/// `unlock` hands the lock over in arrival order whenever someone waits in
/// the lock's FIFO order, and `is_contended` says whether anyone waits.
pub unsafe trait FairArchSpinlock: ArchSpinlock {
    /// Whether other contexts wait for the lock (a snapshot).
    fn is_contended(&self) -> bool;
}

/// A spinlock that takes part in [`lockdep`](crate::lockdep) (Linux's
/// `raw_spinlock_t`): the algorithm `A` and the lock's class. Without the
/// `lockdep` feature the map is zero-sized and every method is exactly
/// `A`'s. Named through its aliases: [`RawTicketLock`](super::RawTicketLock),
/// [`RawTtasLock`](super::RawTtasLock), [`RawQueuedLock`](super::RawQueuedLock).
///
/// With `lockdep`, `lock` (and `lock_nested`) records the acquisition
/// before it spins, `try_lock` once it succeeded, `unlock` the release. A
/// lock's class is the place it was built: the constructors are
/// `#[track_caller]` with `lockdep`, or take an explicit key (`with_class`,
/// [`set_lock_class`](Self::set_lock_class)).
#[cfg_attr(not(feature = "lockdep"), repr(transparent))]
#[cfg_attr(feature = "lockdep", repr(C))]
pub struct RawSpinlock<A> {
    arch: A,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
}

impl<A> RawSpinlock<A> {
    const_fn! {
        /// `arch` in the class of the place this is called from.
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub(crate) fn from_arch(arch: A) -> Self {
            Self { arch, dep_map: Map::new() }
        }
    }

    const_fn! {
        /// `arch` in `key`'s class.
        pub(crate) fn from_arch_in(arch: A, key: &'static LockClassKey) -> Self {
            Self { arch, dep_map: Map::with_key(key) }
        }
    }

    /// The algorithm underneath, which tells lockdep nothing (for locks
    /// that record at their own level).
    #[inline]
    pub fn arch(&self) -> &A {
        &self.arch
    }

    /// The lock's lockdep map (for an algorithm's own extra entry points).
    #[inline]
    pub(crate) fn dep_map(&self) -> &Map {
        &self.dep_map
    }

    /// Puts the lock in `key`'s [lockdep](crate::lockdep) class instead of
    /// the class of the place it was built. Does nothing without `lockdep`.
    #[doc(alias = "lockdep_set_class")]
    #[inline]
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }
}

impl<A: ArchSpinlock> RawSpinlock<A> {
    /// Takes the lock (spinning; see each algorithm's `lock` for how it
    /// waits). With lockdep, recorded before spinning, so that a deadlock
    /// is reported first.
    #[doc(alias = "spin_lock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lock(&self) {
        self.dep_map.acquire(0, false, false);
        self.arch.lock();
    }

    /// [`lock`](Self::lock) for deliberate nesting of two locks of one
    /// [lockdep](crate::lockdep) class (Linux's `spin_lock_nested`): the
    /// outer one with `lock`, the inner one with `lock_nested(1)`.
    /// Without `lockdep`, exactly `lock`.
    ///
    /// # Panics
    /// With `lockdep`, if `subclass` is not below
    /// [`MAX_SUBCLASSES`](crate::lockdep::MAX_SUBCLASSES).
    #[doc(alias = "spin_lock_nested")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lock_nested(&self, subclass: u8) {
        self.dep_map.acquire(subclass, false, false);
        self.arch.lock();
    }

    /// Takes the lock if that needs no waiting (see each algorithm's
    /// `try_lock`).
    #[doc(alias = "spin_trylock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[must_use = "the lock is held when this returns `true` and must be unlocked"]
    pub fn try_lock(&self) -> bool {
        let locked = self.arch.try_lock();
        if locked {
            self.dep_map.acquire(0, true, false);
        }
        locked
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock must be held by the caller's context.
    #[doc(alias = "spin_unlock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock(&self) {
        self.dep_map.release();
        // SAFETY: forwarded caller contract.
        unsafe { self.arch.unlock() }
    }

    /// Whether the lock is held. A snapshot, stale the moment it returns:
    /// do not use it for synchronization.
    #[doc(alias = "spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.arch.is_locked()
    }
}

impl<A: FairArchSpinlock> RawSpinlock<A> {
    /// Whether other CPUs wait for the lock (a snapshot, like
    /// [`is_locked`](Self::is_locked)).
    #[doc(alias = "spin_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.arch.is_contended()
    }
}

impl<A: fmt::Debug> fmt::Debug for RawSpinlock<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.arch.fmt(f)
    }
}

#[cfg(feature = "defmt")]
impl<A: defmt::Format> defmt::Format for RawSpinlock<A> {
    fn format(&self, f: defmt::Formatter<'_>) {
        self.arch.format(f)
    }
}

/// The constructors of one algorithm's tracked lock: `new`, `with_class`,
/// `with_relax` and `Default`. Written once per algorithm, not generic:
/// `RawTicketLock::new()` must infer the default relax strategy, which an
/// impl generic over the algorithm could not (a type alias's default
/// parameter does not take part in inference).
macro_rules! tracked_constructors {
    ($arch:ident, $alias:ident, $name:literal) => {
        impl $crate::spinlock::RawSpinlock<$arch> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " that spins with [`Spin`](crate::spinlock::Spin).")]
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn new() -> Self {
                    Self::from_arch($arch::new())
                }
            }

            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " in `key`'s [lockdep](crate::lockdep)")]
                /// class (Linux's `lockdep_set_class`); exactly `new`
                /// without `lockdep`. `const`, for a `lock_api` mutex in a
                /// `static`: `TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("runqueue")), 0)`.
                #[doc(alias = "lockdep_set_class")]
                pub fn with_class(key: &'static $crate::lockdep::LockClassKey) -> Self {
                    Self::from_arch_in($arch::new(), key)
                }
            }
        }

        impl<R> $crate::spinlock::RawSpinlock<$arch<R>> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " with the relax strategy `R` (name")]
                #[doc = concat!("it: `", stringify!($alias), "::<Loop>::with_relax()`).")]
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn with_relax() -> Self {
                    Self::from_arch($arch::with_relax())
                }
            }
        }

        impl<R> Default for $crate::spinlock::RawSpinlock<$arch<R>> {
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn default() -> Self {
                Self::with_relax()
            }
        }
    };
}
pub(crate) use tracked_constructors;

#[cfg(not(ksync_loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: exclusion and Acquire/Release are `A`'s (the `ArchSpinlock`
// contract); forgetting a guard leaves the lock held, which is safe; a
// lock cannot unwind.
unsafe impl<A: ArchSpinlock> lock_api::RawMutex for RawSpinlock<A> {
    // No call site to name a class after: with lockdep, each mutex built
    // from `INIT` (`Mutex::new`) is a class of its own.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        arch: A::UNLOCKED,
        dep_map: Map::per_instance(),
    };
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) {
        RawSpinlock::lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> bool {
        RawSpinlock::try_lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract (the lock is held).
        unsafe { RawSpinlock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawSpinlock::is_locked(self)
    }
}

#[cfg(not(ksync_loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: `A`'s plain unlock is its fair one (the `FairArchSpinlock`
// contract).
unsafe impl<A: FairArchSpinlock> lock_api::RawMutexFair for RawSpinlock<A> {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawSpinlock::unlock(self) }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn bump(&self) {
        if self.is_contended() {
            // SAFETY: forwarded caller contract; re-locked before return.
            unsafe { RawSpinlock::unlock(self) };
            RawSpinlock::lock(self);
        }
    }
}
