//! Reference counts that saturate instead of wrapping: [`RefCount`]
//! (Linux's `refcount_t`) and [`Kref<T>`] (Linux's `kref`), an object with
//! its count and a release function run exactly once.
//!
//! # Saturation
//!
//! A reference count that wraps frees an object that is still in use: an
//! overflow (2^31 increments, or a leak in a loop) brings the count back to
//! zero, and an extra decrement reaches zero while references remain. As
//! Linux's `refcount_t`, a [`RefCount`] that sees either sets itself to
//! [`REFCOUNT_SATURATED`] (`i32::MIN / 2`) and stays there: half-way
//! through the negative range, so that neither 2^30 further increments nor
//! decrements can bring it back to zero. The object leaks; it is never
//! freed twice. The cases, Linux's `refcount_saturation_type`:
//!
//! | [`Saturation`] | found | by |
//! |---|---|---|
//! | [`AddNotZeroOverflow`](Saturation::AddNotZeroOverflow) | a count that overflows | `inc_not_zero`, `add_not_zero` |
//! | [`AddOverflow`](Saturation::AddOverflow) | a count that overflows | `inc`, `add` |
//! | [`AddUseAfterFree`](Saturation::AddUseAfterFree) | zero: the object is being freed | `inc`, `add` |
//! | [`SubUseAfterFree`](Saturation::SubUseAfterFree) | a count that goes below zero | `dec_and_test`, `sub_and_test`, `dec_not_one`, `dec_and_lock` |
//! | [`DecLeak`](Saturation::DecLeak) | a count that reaches zero without a release | `dec` |
//! | [`NegativeAmount`](Saturation::NegativeAmount) | a negative amount (before the count moves) | `add`, `add_not_zero`, `sub_and_test` |
//!
//! Each is counted ([`stats`]) every time, and reported once per kind (as
//! Linux's `WARN_ONCE`) to the hook set with [`set_saturation_hook`] (and
//! with `defmt` logged). Saturation is survivable: nothing panics.
//!
//! # Orderings
//!
//! As Linux's (`Documentation/core-api/refcount-vs-atomic.rst`):
//! increments are Relaxed (a new reference is taken from an existing one,
//! which already orders the object's accesses); decrements are Release, so
//! every access made through a reference happens-before the count drops;
//! the decrement that reaches zero adds an Acquire fence, so the releaser
//! sees every other holder's accesses before it frees the object.
//!
//! # Cost
//!
//! `inc` is one `fetch_add` and a compare of the old value; `dec_and_test`
//! one `fetch_sub` and a compare (`cargo bench --bench refcount`).

use core::fmt;
use core::ops::Deref;
use core::ptr::NonNull;

use crate::sync::config::{AtomicBool, AtomicPtr};
use crate::sync::{AtomicI32, Ordering, StatCounter, const_fn, fence};

/// The value a [`RefCount`] keeps once it found misuse: `i32::MIN / 2`
/// (Linux's `REFCOUNT_SATURATED`), as far from zero as from overflow.
pub const REFCOUNT_SATURATED: i32 = i32::MIN / 2;

/// The highest count a [`RefCount`] reaches before it saturates (Linux's
/// `REFCOUNT_MAX`).
pub const REFCOUNT_MAX: i32 = i32::MAX;

/// Which misuse saturated a [`RefCount`] (Linux's
/// `refcount_saturation_type`); see the [module docs](self#saturation).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::refcount::{self, RefCount, Saturation};
///
/// fn refcount_warn(kind: Saturation) {
///     match kind {
///         // A use after free: worth a stack dump.
///         Saturation::AddUseAfterFree | Saturation::SubUseAfterFree => {}
///         _ => {} // a leak: log `kind.message()`
///     }
/// }
/// refcount::set_saturation_hook(refcount_warn);
/// let refs = RefCount::new(0); // the object is being freed
/// refs.inc(); // a late user: the count saturates, the object is not revived
/// assert!(refs.is_saturated());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Saturation {
    /// `inc_not_zero`/`add_not_zero` overflowed the count.
    AddNotZeroOverflow,
    /// `inc`/`add` overflowed the count.
    AddOverflow,
    /// `inc`/`add` found the count at zero (the object is being freed).
    AddUseAfterFree,
    /// A decrement took the count below zero.
    SubUseAfterFree,
    /// `dec` took the count to zero, where only `dec_and_test` may free.
    DecLeak,
    /// `add`, `add_not_zero` or `sub_and_test` was given a negative
    /// amount, which would move the count the other way (ksync's own: the
    /// count saturates before it moves).
    NegativeAmount,
}

const KINDS: usize = 6;

impl Saturation {
    const ALL: [Self; KINDS] = [
        Self::AddNotZeroOverflow,
        Self::AddOverflow,
        Self::AddUseAfterFree,
        Self::SubUseAfterFree,
        Self::DecLeak,
        Self::NegativeAmount,
    ];

    /// Linux's message for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::refcount::Saturation;
    /// assert!(Saturation::AddUseAfterFree.message().contains("use-after-free"));
    /// ```
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            Self::AddNotZeroOverflow => "refcount_t: saturated; leaking memory",
            Self::AddOverflow => "refcount_t: saturated; leaking memory",
            Self::AddUseAfterFree => "refcount_t: addition on 0; use-after-free",
            Self::SubUseAfterFree => "refcount_t: underflow; use-after-free",
            Self::DecLeak => "refcount_t: decrement hit 0; leaking memory",
            Self::NegativeAmount => "refcount_t: negative amount; leaking memory",
        }
    }
}

impl fmt::Display for Saturation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

static COUNTS: [StatCounter; KINDS] = [const { StatCounter::new(0) }; KINDS];
static REPORTED: [AtomicBool; KINDS] = [const { AtomicBool::new(false) }; KINDS];
static HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// How often each kind of saturation happened so far, in all
/// [`RefCount`]s.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::refcount::{self, RefCount};
///
/// let before = refcount::stats();
/// let refs = RefCount::new(0);
/// assert!(!refs.dec_and_test()); // below zero, a put without a get: never "free"
/// let after = refcount::stats();
/// assert_eq!(after.sub_use_after_free, before.sub_use_after_free + 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct Stats {
    /// [`Saturation::AddNotZeroOverflow`].
    pub add_not_zero_overflow: usize,
    /// [`Saturation::AddOverflow`].
    pub add_overflow: usize,
    /// [`Saturation::AddUseAfterFree`].
    pub add_use_after_free: usize,
    /// [`Saturation::SubUseAfterFree`].
    pub sub_use_after_free: usize,
    /// [`Saturation::DecLeak`].
    pub dec_leak: usize,
    /// [`Saturation::NegativeAmount`].
    pub negative_amount: usize,
}

/// The process-wide saturation counts.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// let before = ksync::refcount::stats();
/// let r = ksync::RefCount::new(1);
/// r.dec(); // 1 -> 0 without a release: a leak
/// assert_eq!(ksync::refcount::stats().dec_leak, before.dec_leak + 1);
/// ```
#[must_use]
pub fn stats() -> Stats {
    let n = |k: Saturation| COUNTS[k as usize].load(Ordering::Relaxed);
    Stats {
        add_not_zero_overflow: n(Saturation::AddNotZeroOverflow),
        add_overflow: n(Saturation::AddOverflow),
        add_use_after_free: n(Saturation::AddUseAfterFree),
        sub_use_after_free: n(Saturation::SubUseAfterFree),
        dec_leak: n(Saturation::DecLeak),
        negative_amount: n(Saturation::NegativeAmount),
    }
}

/// Sets the function told of the first saturation of each kind (Linux's
/// `WARN_ONCE` in `refcount_warn_saturate`): log it, dump the stack, or
/// panic. Called from the saturating operation, on its CPU, maybe with
/// interrupts off; it must not take a lock the caller may hold.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// fn warn(kind: ksync::refcount::Saturation) {
///     let _ = kind; // e.g. println!("{kind}") in a kernel's log
/// }
/// ksync::refcount::set_saturation_hook(warn);
/// ```
pub fn set_saturation_hook(hook: fn(Saturation)) {
    // Release pairs with the Acquire load in `warn_saturate`.
    HOOK.store(hook as *mut (), Ordering::Release);
}

/// `add`'s rare case: `old` was zero, or negative (saturated), or
/// overflows with `n`.
#[cold]
#[inline(never)]
fn add_misuse(count: &AtomicI32, old: i32, n: i32) {
    if old == 0 {
        warn_saturate(count, Saturation::AddUseAfterFree);
    } else if old < 0 || old.wrapping_add(n) < 0 {
        warn_saturate(count, Saturation::AddOverflow);
    }
}

/// Sets the count to [`REFCOUNT_SATURATED`] and reports `kind` (Linux's
/// `refcount_warn_saturate`).
#[cold]
#[inline(never)]
fn warn_saturate(count: &AtomicI32, kind: Saturation) {
    // Relaxed: a saturated count is never used to order anything.
    count.store(REFCOUNT_SATURATED, Ordering::Relaxed);
    COUNTS[kind as usize].fetch_add(1, Ordering::Relaxed);
    // Relaxed: one report per kind, which CPU reports does not matter
    // (two CPUs that saturate at once may both report: harmless, and a
    // load and a store work on every target).
    if REPORTED[kind as usize].load(Ordering::Relaxed) {
        return;
    }
    REPORTED[kind as usize].store(true, Ordering::Relaxed);
    #[cfg(feature = "defmt")]
    defmt::warn!("{}", kind.message());
    // Acquire pairs with the Release store in `set_saturation_hook`.
    let hook = HOOK.load(Ordering::Acquire);
    if !hook.is_null() {
        // SAFETY: only `set_saturation_hook` stores a non-null pointer,
        // cast from a `fn(Saturation)`; function and data pointers have
        // one size on every target ksync supports.
        let hook = unsafe { core::mem::transmute::<*mut (), fn(Saturation)>(hook) };
        hook(kind);
    }
}

/// Forgets which kinds were reported, so that the next of each is
/// reported again (for tests).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// ksync::refcount::rearm_reports();
/// ```
pub fn rearm_reports() {
    for k in Saturation::ALL {
        REPORTED[k as usize].store(false, Ordering::Relaxed);
    }
}

/// A reference count that saturates instead of wrapping (Linux's
/// `refcount_t`): see the [module docs](self) for the saturation rules
/// and the orderings.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::RefCount;
///
/// let refs = RefCount::new(1); // the creator's reference
/// refs.inc(); // a second user
/// assert!(!refs.dec_and_test()); // the second user is done
/// assert!(refs.dec_and_test()); // the last: free the object now
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are `RefCount::new(0)`: a count whose object is dead
/// (`inc` on it saturates).
#[doc(alias = "refcount_t")]
#[repr(transparent)]
pub struct RefCount {
    refs: AtomicI32,
}

impl RefCount {
    const_fn! {
        /// A count of `n` (Linux's `REFCOUNT_INIT`, `refcount_set`).
        ///
        /// # Panics
        /// If `n` is negative (only [`REFCOUNT_SATURATED`] may be).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// static USERS: ksync::RefCount = ksync::RefCount::new(1);
        /// assert_eq!(USERS.read(), 1);
        /// ```
        #[doc(alias = "REFCOUNT_INIT")]
        #[must_use]
        pub fn new(n: i32) -> Self {
            assert!(n >= 0 || n == REFCOUNT_SATURATED, "RefCount::new: a count must not be negative");
            Self { refs: AtomicI32::new(n) }
        }
    }

    /// The count (a snapshot; [`REFCOUNT_SATURATED`] once saturated).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// assert_eq!(ksync::RefCount::new(3).read(), 3);
    /// ```
    #[doc(alias = "refcount_read")]
    #[inline]
    #[must_use]
    pub fn read(&self) -> i32 {
        self.refs.load(Ordering::Relaxed)
    }

    /// Sets the count (for an object nobody else sees yet).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(0);
    /// r.set(1);
    /// assert_eq!(r.read(), 1);
    /// ```
    #[doc(alias = "refcount_set")]
    #[inline]
    pub fn set(&self, n: i32) {
        self.refs.store(n, Ordering::Relaxed);
    }

    /// Whether the count is saturated (the object leaks).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(0);
    /// r.inc(); // on zero: use-after-free, saturated
    /// assert!(r.is_saturated());
    /// ```
    #[inline]
    #[must_use]
    pub fn is_saturated(&self) -> bool {
        self.read() < 0
    }

    /// Adds one reference; the caller holds one already. Relaxed.
    /// Saturates on zero ([`Saturation::AddUseAfterFree`]) and on overflow.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(1);
    /// r.inc();
    /// assert_eq!(r.read(), 2);
    /// ```
    #[doc(alias = "refcount_inc")]
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n` references (Linux's `refcount_add`). Relaxed.
    ///
    /// As Linux's, `n == 0` changes nothing on a live count and saturates
    /// a dead one ([`Saturation::AddUseAfterFree`]: any use of it is one).
    /// A negative `n` would drop references through the back door (a
    /// count that reaches zero with no release, then a double free): it
    /// saturates the count instead, before it moves
    /// ([`Saturation::NegativeAmount`]). With a constant `n` the check
    /// compiles away.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(1);
    /// r.add(4);
    /// assert_eq!(r.read(), 5);
    /// ```
    #[doc(alias = "refcount_add")]
    #[inline]
    pub fn add(&self, n: i32) {
        if n < 0 {
            return warn_saturate(&self.refs, Saturation::NegativeAmount);
        }
        // Relaxed: a new reference comes from one the caller holds, which
        // already orders its accesses to the object.
        let old = self.refs.fetch_add(n, Ordering::Relaxed);
        // The common case in one compare: `0 < old <= REFCOUNT_MAX - n`
        // (`n > 0`), i.e. `old - 1` below `REFCOUNT_MAX - n` unsigned.
        if (old.wrapping_sub(1) as u32) >= (REFCOUNT_MAX.wrapping_sub(n) as u32) {
            add_misuse(&self.refs, old, n);
        }
    }

    /// Adds one reference unless the count is zero (the object is being
    /// freed): for lookups that find an object without holding a reference
    /// (under RCU or a lock). Returns whether it did. Relaxed: the lookup
    /// that found the object orders its reads (an RCU dereference, a
    /// lock).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(0);
    /// assert!(!r.inc_not_zero());
    /// r.set(1);
    /// assert!(r.inc_not_zero());
    /// ```
    #[doc(alias = "refcount_inc_not_zero")]
    #[inline]
    #[must_use = "the reference was not taken when this returns false"]
    pub fn inc_not_zero(&self) -> bool {
        self.add_not_zero(1)
    }

    /// [`inc_not_zero`](Self::inc_not_zero) by `n`. `n == 0` takes
    /// nothing and says whether the count is live; a negative `n` leaves a
    /// dead count alone (`false`) and saturates a live one (`true`: pinned
    /// for ever, so still safe to use; [`Saturation::NegativeAmount`]).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(1);
    /// assert!(r.add_not_zero(2));
    /// assert_eq!(r.read(), 3);
    /// ```
    #[doc(alias = "refcount_add_not_zero")]
    #[inline]
    #[must_use = "the references were not taken when this returns false"]
    pub fn add_not_zero(&self, n: i32) -> bool {
        let mut old = self.refs.load(Ordering::Relaxed);
        loop {
            if old == 0 {
                return false;
            }
            // A negative amount pins the count where it is live: the
            // exchange (not a plain store) so that a count that reached
            // zero meanwhile stays dead.
            let new = if n < 0 {
                REFCOUNT_SATURATED
            } else {
                old.wrapping_add(n)
            };
            // Relaxed: see `inc_not_zero`.
            match self
                .refs
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) if n < 0 => {
                    warn_saturate(&self.refs, Saturation::NegativeAmount);
                    return true;
                }
                Ok(_) => break,
                Err(seen) => old = seen,
            }
        }
        if old < 0 || old.wrapping_add(n) < 0 {
            warn_saturate(&self.refs, Saturation::AddNotZeroOverflow);
        }
        true
    }

    /// Drops one reference that is not the last (Linux's `refcount_dec`):
    /// reaching zero here is a leak ([`Saturation::DecLeak`]). Release.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(2);
    /// r.dec();
    /// assert_eq!(r.read(), 1);
    /// ```
    #[doc(alias = "refcount_dec")]
    #[inline]
    pub fn dec(&self) {
        // Release: this holder's accesses happen-before the final
        // decrement's Acquire fence (in `sub_and_test`).
        let old = self.refs.fetch_sub(1, Ordering::Release);
        if old <= 1 {
            warn_saturate(&self.refs, Saturation::DecLeak);
        }
    }

    /// Drops one reference; returns `true` when it was the last, and the
    /// caller frees the object. Release, and Acquire when it returns
    /// `true`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(1);
    /// assert!(r.dec_and_test());
    /// ```
    #[doc(alias = "refcount_dec_and_test")]
    #[inline]
    #[must_use = "the object must be freed when this returns true"]
    pub fn dec_and_test(&self) -> bool {
        self.sub_and_test(1)
    }

    /// Drops `n` references; `true` when they were the last.
    ///
    /// As Linux's, `n == 0` drops nothing (`false`) on a live count and
    /// saturates a dead one ([`Saturation::SubUseAfterFree`]). A negative
    /// `n` would add references: it saturates the count before it moves
    /// ([`Saturation::NegativeAmount`]) and returns `false`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(3);
    /// assert!(!r.sub_and_test(2));
    /// assert!(r.sub_and_test(1));
    /// ```
    #[doc(alias = "refcount_sub_and_test")]
    #[inline]
    #[must_use = "the object must be freed when this returns true"]
    pub fn sub_and_test(&self, n: i32) -> bool {
        if n < 0 {
            warn_saturate(&self.refs, Saturation::NegativeAmount);
            return false;
        }
        // Release pairs with the Acquire fence of the decrement that
        // reaches zero: every holder's accesses happen-before the free.
        let old = self.refs.fetch_sub(n, Ordering::Release);
        // The common case in one compare: references remain.
        if old > n {
            return false;
        }
        if old == n && old > 0 {
            // Acquire: pairs with every other holder's Release decrement.
            fence(Ordering::Acquire);
            return true;
        }
        // Below zero, or saturated (negative): never free.
        warn_saturate(&self.refs, Saturation::SubUseAfterFree);
        false
    }

    /// Drops the reference if it is the only one: 1 becomes 0 (Release)
    /// and it returns `true`; any other count is left alone. For objects
    /// whose last user may free them while others only look.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(2);
    /// assert!(!r.dec_if_one());
    /// r.dec();
    /// assert!(r.dec_if_one());
    /// assert_eq!(r.read(), 0);
    /// ```
    #[doc(alias = "refcount_dec_if_one")]
    #[inline]
    #[must_use = "the object must be freed when this returns true"]
    pub fn dec_if_one(&self) -> bool {
        // Release: as `sub_and_test` (this is the last reference).
        self.refs
            .compare_exchange(1, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Drops one reference unless it is the last: returns `false`, and
    /// leaves the count at 1, when it is (Linux's `refcount_dec_not_one`).
    /// Release.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let r = ksync::RefCount::new(2);
    /// assert!(r.dec_not_one());
    /// assert!(!r.dec_not_one());
    /// assert_eq!(r.read(), 1);
    /// ```
    #[doc(alias = "refcount_dec_not_one")]
    #[inline]
    #[must_use = "the reference was not dropped when this returns false"]
    pub fn dec_not_one(&self) -> bool {
        let mut old = self.refs.load(Ordering::Relaxed);
        loop {
            if old == REFCOUNT_SATURATED {
                return true;
            }
            if old == 1 {
                return false;
            }
            let new = old.wrapping_sub(1);
            if new < 0 || old <= 0 {
                warn_saturate(&self.refs, Saturation::SubUseAfterFree);
                return true;
            }
            // Release: as in `sub_and_test`.
            match self
                .refs
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => old = seen,
            }
        }
    }

    /// Drops one reference; if it was the last, returns `lock`'s guard,
    /// taken *before* the count reached zero (Linux's
    /// `refcount_dec_and_lock`): a lookup under the same lock never finds
    /// the object at zero. Without the lock when it is not the last (one
    /// compare-exchange). Works with every `lock_api` mutex of ksync
    /// ([`SpinLock`](crate::spinlock::SpinLock), the IRQ-saving ones, the
    /// sleeping [`Mutex`](crate::mutex::Mutex)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::{spinlock::SpinLock, RefCount};
    ///
    /// static TABLE: SpinLock<u32> = SpinLock::new(1); // objects in the table
    /// let refs = RefCount::new(1);
    /// if let Some(mut table) = refs.dec_and_lock(&TABLE) {
    ///     *table -= 1; // unlink it under the lock, then free it
    /// }
    /// assert_eq!(*TABLE.lock(), 0);
    /// ```
    #[doc(alias = "refcount_dec_and_lock")]
    #[inline]
    #[track_caller]
    #[must_use = "the object must be unlinked and freed when this returns a guard"]
    pub fn dec_and_lock<'a, R: lock_api::RawMutex, T: ?Sized>(
        &self,
        lock: &'a lock_api::Mutex<R, T>,
    ) -> Option<lock_api::MutexGuard<'a, R, T>> {
        if self.dec_not_one() {
            return None;
        }
        let guard = lock.lock();
        if self.dec_and_test() {
            Some(guard)
        } else {
            None
        }
    }
}

impl fmt::Debug for RefCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RefCount").field(&self.read()).finish()
    }
}

/// An object with a reference count and a release function that runs
/// exactly once, when the last reference is dropped (Linux's `kref`
/// embedded in a structure, with `kref_put`'s release). References are
/// [`KrefRef`]s: cloning one counts a reference ([`RefCount::inc`]),
/// dropping one drops it ([`RefCount::dec_and_test`]), and the one that
/// reaches zero calls `release` with the object's address. No allocator:
/// the object lives wherever the kernel put it (a slab, a pool, a
/// `static`), and `release` gives the storage back.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::ptr::NonNull;
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use ksync::refcount::{Kref, KrefRef};
///
/// static RELEASED: AtomicUsize = AtomicUsize::new(0);
/// fn release(_obj: NonNull<Kref<u32>>) {
///     RELEASED.fetch_add(1, Ordering::Relaxed); // return it to its pool
/// }
///
/// // SAFETY: a `static` is never freed; `release` only counts.
/// static DEV: Kref<u32> = unsafe { Kref::new(42, release) };
/// // SAFETY: the creator's reference, adopted once.
/// let first = unsafe { KrefRef::adopt(&DEV) };
/// let second = first.clone();
/// assert_eq!(*second, 42);
/// drop(first);
/// drop(second); // the last: `release` runs
/// assert_eq!(RELEASED.load(Ordering::Relaxed), 1);
/// assert!(DEV.get_unless_zero().is_none()); // a lookup finds it dying
/// ```
#[doc(alias = "kref")]
pub struct Kref<T> {
    refs: RefCount,
    release: fn(NonNull<Kref<T>>),
    value: T,
}

// SAFETY: the count is atomic, `release` a plain function, and the value
// is only shared (`&T`) across references held on any thread: as `Arc<T>`.
unsafe impl<T: Send + Sync> Sync for Kref<T> {}
// SAFETY: as `Arc<T>`: the last reference may drop it on any thread.
unsafe impl<T: Send + Sync> Send for Kref<T> {}

impl<T> Kref<T> {
    /// An object with one reference (the creator's: take it with
    /// [`KrefRef::adopt`]) and its release function (Linux's
    /// `kref_init`).
    ///
    /// # Safety
    /// The storage of the `Kref` stays valid (it is not moved, freed or
    /// reused) until `release` runs, and `release` reclaims it only once
    /// no `&Kref<T>` can still be in use: at once when every access goes
    /// through counted references, after an RCU grace period
    /// ([`call_rcu`](crate::rcu::call_rcu)) when lookups find it under RCU
    /// and take references with [`get_unless_zero`](Self::get_unless_zero).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// // SAFETY: a `static` stays valid for ever.
    /// static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// assert_eq!(K.read(), 1);
    /// ```
    #[doc(alias = "kref_init")]
    #[must_use]
    #[cfg(not(ksync_loom))]
    pub const unsafe fn new(value: T, release: fn(NonNull<Kref<T>>)) -> Self {
        Self {
            refs: RefCount::new(1),
            release,
            value,
        }
    }

    /// [`new`](Self::new) under loom (whose atomics cannot be built in
    /// a constant).
    ///
    /// # Safety
    /// As `new`.
    #[cfg(ksync_loom)]
    pub unsafe fn new(value: T, release: fn(NonNull<Kref<T>>)) -> Self {
        Self {
            refs: RefCount::new(1),
            release,
            value,
        }
    }

    /// A counted reference unless the count is zero (the object is being
    /// released): for lookups that find the object under RCU or a lock
    /// without holding a reference (Linux's `kref_get_unless_zero`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// let r = K.get_unless_zero().expect("alive");
    /// assert_eq!(K.read(), 2);
    /// drop(r);
    /// ```
    #[doc(alias = "kref_get_unless_zero")]
    #[inline]
    #[must_use]
    pub fn get_unless_zero(&self) -> Option<KrefRef<T>> {
        if self.refs.inc_not_zero() {
            Some(KrefRef {
                ptr: NonNull::from(self),
            })
        } else {
            None
        }
    }

    /// The count (Linux's `kref_read`; a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// assert_eq!(K.read(), 1);
    /// ```
    #[doc(alias = "kref_read")]
    #[inline]
    #[must_use]
    pub fn read(&self) -> i32 {
        self.refs.read()
    }

    /// The value, through a `&Kref` the caller found (a counted reference
    /// derefs to it too).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// assert_eq!(*K.value(), 1);
    /// ```
    #[inline]
    #[must_use]
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The count itself, for the Linux calls on a raw `kref`
    /// (`refcount_dec_and_lock` on `kref.refcount`, ...).
    ///
    /// # Safety
    /// Every decrement made through it gives up a counted reference the
    /// caller owns (as [`put`](Self::put) does), and one that brings the
    /// count to zero is followed by what `put` does then (the release):
    /// a decrement of someone else's reference would let the object be
    /// released while that reference still reads it. Reads are always
    /// fine ([`read`](Self::read) needs no `unsafe`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// // SAFETY: only read.
    /// assert_eq!(unsafe { K.refcount() }.read(), 1);
    /// ```
    #[inline]
    #[must_use]
    pub unsafe fn refcount(&self) -> &RefCount {
        &self.refs
    }

    /// Counts one more reference that the caller keeps untracked (Linux's
    /// `kref_get`); give it back with [`put`](Self::put).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// K.get();
    /// // SAFETY: the reference just counted.
    /// assert!(!unsafe { K.put() });
    /// ```
    #[doc(alias = "kref_get")]
    #[inline]
    pub fn get(&self) {
        self.refs.inc();
    }

    /// Drops one untracked reference (Linux's `kref_put`): returns `true`
    /// when it was the last and `release` ran (the object may be gone).
    ///
    /// # Safety
    /// The caller owns one counted reference (the creator's, or one
    /// counted with [`get`](Self::get)), and uses neither it nor `self`
    /// afterwards when this returns `true`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # fn noop(_: NonNull<ksync::refcount::Kref<u8>>) {}
    /// # static K: ksync::refcount::Kref<u8> = unsafe { ksync::refcount::Kref::new(1, noop) };
    /// K.get();
    /// // SAFETY: the reference just counted.
    /// assert!(!unsafe { K.put() });
    /// ```
    #[doc(alias = "kref_put")]
    #[inline]
    pub unsafe fn put(&self) -> bool {
        // SAFETY: forwarded caller contract; `release` gets a pointer
        // derived from a shared reference, which the release function's
        // contract (see `new`) must not free through: a `Kref` whose
        // release frees its storage is put with `put_raw`.
        unsafe { Self::put_raw(NonNull::from(self)) }
    }

    /// [`put`](Self::put) through a raw pointer (Linux's `kref_put` on a
    /// `struct kref *`): `release` gets `this` itself, with the provenance
    /// the caller's pointer has, so a release that frees the allocation
    /// (`Box::from_raw`, a slab free) is sound when `this` came from it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::ptr::NonNull;
    /// use ksync::refcount::Kref;
    ///
    /// struct Urb { len: usize }
    /// fn urb_release(urb: NonNull<Kref<Urb>>) {
    ///     // SAFETY: the last reference is gone; the Kref came from the box below.
    ///     drop(unsafe { Box::from_raw(urb.as_ptr()) });
    /// }
    /// // SAFETY: boxed, freed only by `urb_release`, once the count is zero.
    /// let urb = Box::new(unsafe { Kref::new(Urb { len: 512 }, urb_release) });
    /// let urb = NonNull::from(Box::leak(urb));
    /// // SAFETY: the creator's reference; `urb` is not used afterwards.
    /// assert!(unsafe { Kref::put_raw(urb) }); // it was the last: freed
    /// ```
    ///
    /// # Safety
    /// `this` points to a live `Kref`; the caller owns one counted
    /// reference and uses neither it nor `this` afterwards when this
    /// returns `true`.
    #[inline]
    pub unsafe fn put_raw(this: NonNull<Self>) -> bool {
        // SAFETY: `this` is live (caller contract); the shared borrow
        // ends before `release` runs.
        let last = unsafe { this.as_ref() }.refs.dec_and_test();
        if last {
            // SAFETY: as above, `this` is live until `release` frees it.
            let release = unsafe { this.as_ref() }.release;
            release(this);
        }
        last
    }
}

impl<T: fmt::Debug> fmt::Debug for Kref<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kref")
            .field("refs", &self.read())
            .field("value", &self.value)
            .finish()
    }
}

/// One counted reference to a [`Kref<T>`]: `Clone` counts another,
/// `Drop` drops it and runs the release function when it was the last.
/// Dereferences to `T`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// # use core::ptr::NonNull;
/// # use ksync::refcount::{Kref, KrefRef};
/// # fn noop(_: NonNull<Kref<&str>>) {}
/// // SAFETY: a `static` stays valid for ever.
/// static NAME: Kref<&str> = unsafe { Kref::new("eth0", noop) };
/// // SAFETY: the creator's reference, adopted once.
/// let r: KrefRef<&str> = unsafe { KrefRef::adopt(&NAME) };
/// assert_eq!(*r, "eth0");
/// ```
pub struct KrefRef<T> {
    ptr: NonNull<Kref<T>>,
}

// SAFETY: a counted reference is an `Arc<T>`: it shares `&T` across
// threads and may drop the last reference (running `release`) on any.
unsafe impl<T: Send + Sync> Send for KrefRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KrefRef<T> {}

impl<T> KrefRef<T> {
    /// Takes over one reference the caller owns (the creator's from
    /// [`Kref::new`], or one counted with [`Kref::get`]).
    ///
    /// # Safety
    /// The caller owns that reference and gives it to the returned value
    /// (it must not also [`put`](Kref::put) it). The pointer `release` gets
    /// comes from `kref`, a shared reference: a release that frees the
    /// storage needs [`from_raw`](Self::from_raw) with the allocation's
    /// pointer instead.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # use ksync::refcount::{Kref, KrefRef};
    /// # fn noop(_: NonNull<Kref<u8>>) {}
    /// # static K: Kref<u8> = unsafe { Kref::new(1, noop) };
    /// // SAFETY: the creator's reference.
    /// let r = unsafe { KrefRef::adopt(&K) };
    /// assert_eq!(*r, 1);
    /// ```
    #[must_use]
    pub unsafe fn adopt(kref: &Kref<T>) -> Self {
        Self {
            ptr: NonNull::from(kref),
        }
    }

    /// Gives the reference up without dropping it: the caller owns it
    /// again (back with [`from_raw`](Self::from_raw)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # use ksync::refcount::{Kref, KrefRef};
    /// # fn noop(_: NonNull<Kref<u8>>) {}
    /// # static K: Kref<u8> = unsafe { Kref::new(1, noop) };
    /// # let r = unsafe { KrefRef::adopt(&K) };
    /// let raw = KrefRef::into_raw(r);
    /// // SAFETY: from `into_raw`, once.
    /// let r = unsafe { KrefRef::from_raw(raw) };
    /// assert_eq!(*r, 1);
    /// ```
    #[must_use]
    pub fn into_raw(this: Self) -> NonNull<Kref<T>> {
        let ptr = this.ptr;
        core::mem::forget(this);
        ptr
    }

    /// A reference given up with [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    /// `ptr` comes from `into_raw`, and each such pointer is turned back
    /// once.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # use ksync::refcount::{Kref, KrefRef};
    /// # fn noop(_: NonNull<Kref<u8>>) {}
    /// # static K: Kref<u8> = unsafe { Kref::new(1, noop) };
    /// # let r = unsafe { KrefRef::adopt(&K) };
    /// let raw = KrefRef::into_raw(r);
    /// // SAFETY: from `into_raw`, once.
    /// drop(unsafe { KrefRef::from_raw(raw) });
    /// ```
    #[must_use]
    pub unsafe fn from_raw(ptr: NonNull<Kref<T>>) -> Self {
        Self { ptr }
    }

    /// The `Kref` this refers to.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use core::ptr::NonNull;
    /// # use ksync::refcount::{Kref, KrefRef};
    /// # fn noop(_: NonNull<Kref<u8>>) {}
    /// # static K: Kref<u8> = unsafe { Kref::new(1, noop) };
    /// # let r = unsafe { KrefRef::adopt(&K) };
    /// assert_eq!(KrefRef::kref(&r).read(), 1);
    /// ```
    #[must_use]
    pub fn kref(this: &Self) -> &Kref<T> {
        // SAFETY: this counted reference keeps the storage valid
        // (`Kref::new`'s contract).
        unsafe { this.ptr.as_ref() }
    }
}

impl<T> Clone for KrefRef<T> {
    #[inline]
    fn clone(&self) -> Self {
        Self::kref(self).refs.inc();
        Self { ptr: self.ptr }
    }
}

impl<T> Drop for KrefRef<T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this value owns one counted reference, dropped here and
        // never used again; `ptr` is the pointer it was built from (with
        // that pointer's provenance, which a freeing release needs).
        unsafe { Kref::put_raw(self.ptr) };
    }
}

impl<T> Deref for KrefRef<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &Self::kref(self).value
    }
}

impl<T: fmt::Debug> fmt::Debug for KrefRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(Self::kref(self), f)
    }
}
