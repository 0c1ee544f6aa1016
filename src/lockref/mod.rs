//! lockref: a spinlock and a reference count in one 64-bit word, updated
//! without taking the lock whenever the lock is free.
//!
//! # The contract
//!
//! Every operation behaves as if it had taken the lock, changed the count
//! and released the lock: a lockless update succeeds only if it observed the
//! lock free and nothing changed the word between its load and its
//! compare-exchange. A holder of the lock ([`LockRef::lock`]) therefore sees
//! a count that nobody else changes until it unlocks.
//!
//! This is Linux's `lib/lockref.c`: objects such as dentries are looked up
//! and released millions of times per second by many CPUs, and taking a
//! spinlock for each `count++` makes the lock's cache line the bottleneck.
//! With the lock and the count in one word, a single 64-bit compare-exchange
//! both checks the lock and updates the count: one atomic operation instead
//! of a lock, an update and an unlock.
//!
//! # Layout
//!
//! | bits | field |
//! |---|---|
//! | 0..16 | lock: ticket being served (`owner`) |
//! | 16..32 | lock: next ticket to hand out (`next`); free when `owner == next` |
//! | 32..64 | count, `i32`; negative means dead ([`DEAD`] after [`LockRefGuard::mark_dead`]) |
//!
//! The embedded lock is a fair ticket lock, as Linux's is a fair spinlock.
//! The lockless path makes at most [`CMPXCHG_LOOP_TRIES`] attempts, then
//! takes the lock (or, for [`LockRef::put_return`], reports failure).
//!
//! # The embedded lock: a ticket lock, not the queued lock
//!
//! Linux's lockref embeds whatever `spinlock_t` is, a qspinlock on x86_64
//! and arm64 today. This one embeds the ticket lock (strict FIFO at one CPU
//! per core, test-and-set when CPUs may be descheduled, see
//! [`kernel::vcpu_preemptible`](crate::kernel::vcpu_preemptible)), not
//! [`RawQueuedLock`](crate::spinlock::RawQueuedLock), for three reasons:
//!
//! * The queued lock's MCS nodes are per CPU, so it needs the kernel's CPU
//!   id; the ticket lock needs no hook beyond what the guard policy
//!   disables, so `LockRef::<NoGuard>` works in any binary (firmware, user
//!   space, single-core MCUs) that never calls
//!   [`set_kernel!`](crate::set_kernel).
//! * Its steps are 32-bit atomics (Linux's also 8- and 16-bit ones) on part
//!   of the word, while the lockless path compare-exchanges all 64 bits:
//!   mixed-size atomic accesses to one location, which Rust's memory model
//!   does not define and loom cannot check. Each step would have to become
//!   a compare-exchange loop on the whole word.
//! * What the queue buys is one line transfer per hand-off however many
//!   CPUs wait. A lockref's lock is taken only when the lockless path
//!   cannot be used (a last put, a kill, a rename), and every lockless
//!   caller touches the same line anyway. Measured (`cargo bench --bench
//!   locks`, the README's lock table), the ticket hand-off beats the
//!   queued one at one thread per core in strict FIFO mode; in the
//!   preemptible mode both are one compare-exchange on the word.
//!
//! A kernel that wants queued hand-off for an object's lock can keep a
//! [`QueuedMutex`](crate::spinlock::QueuedMutex) beside a plain count.
//!
//! # Memory ordering
//!
//! * Increments ([`get`](LockRef::get)) are `Relaxed`: the caller already
//!   holds a reference, so it needs no new view of the object (as
//!   `Arc::clone`).
//! * [`get_not_zero`](LockRef::get_not_zero) and
//!   [`get_not_dead`](LockRef::get_not_dead) are `Acquire` on success: the
//!   caller sees the object at least as it was when its count was last
//!   changed (for example re-initialised under the lock, then unlocked).
//! * Decrements are `Release`, and one that reaches zero is followed by an
//!   `Acquire` fence, so **a caller whose [`put_return`](LockRef::put_return)
//!   returned `Some(0)` may free the object**: every other holder's accesses
//!   happen-before the free (the `Arc::drop` argument).
//! * Everything done under [`lock`](LockRef::lock) is ordered by the lock's
//!   Acquire/Release.
//!
//! Linux gets away with relaxed compare-exchanges because it frees objects
//! under the lock or after an RCU grace period; this crate's API also lets
//! callers free on `Some(0)`, which needs the orderings above. On x86_64
//! they cost nothing (every locked instruction is a full barrier).
//!
//! # Saturation and misuse
//!
//! A count never wraps. An increment that would pass `i32::MAX` leaves the
//! count at `i32::MAX` for good: decrements no longer change it, so the
//! object leaks but is never freed early. A `get` on a dead lockref is
//! refused and leaves it dead. Both are reported: they panic in builds with
//! debug assertions, and in every build they are counted in [`stats`]. A
//! put on a zero or dead count is refused: [`put_return`](LockRef::put_return)
//! returns `None` and [`put_or_lock`](LockRef::put_or_lock) hands the caller
//! the lock with the count unchanged.
//!
//! # Targets
//!
//! With 64-bit compare-and-swap the lockless path runs (x86_64: `lock
//! cmpxchg`; aarch64: LL/SC or LSE `cas`, see `arch/`). Without it
//! (thumbv6m, thumbv7em, riscv32) every operation takes the lock: correct,
//! just not lockless. It never goes through an emulated 64-bit atomic, whose
//! hidden global lock would not be interrupt-safe.
//!
//! # Example
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::LockRef;
//!
//! struct Dentry { lockref: LockRef /* , name, inode, ... */ }
//!
//! let d = Dentry { lockref: LockRef::new(1) };
//! d.lockref.get();                          // a second user
//! assert!(d.lockref.get_not_dead());        // a lookup that races with kill
//! assert_eq!(d.lockref.put_return(), Some(2));
//!
//! // Dropping a reference that may be the last: the lockless path refuses
//! // at count <= 1 and hands over the lock instead.
//! assert_eq!(d.lockref.put_return(), Some(1));
//! match d.lockref.put_or_lock() {
//!     None => unreachable!("count was 1"),
//!     Some(mut guard) => {
//!         assert_eq!(guard.count(), 1);
//!         guard.mark_dead();                // now tear the object down
//!     }
//! }
//! assert!(d.lockref.is_dead());
//! assert!(!d.lockref.get_not_dead());
//! ```

use core::fmt;
use core::marker::PhantomData;

use crate::lockdep::{Acquired, LockClassKey, Map};
use crate::spinlock::{PreemptDisabled, SpinGuardian};
use crate::sync::{Ordering, const_fn, fence};
use word::{Attempt, Rule};

#[cfg(target_has_atomic = "64")]
use crate::{
    arch,
    kernel::{Backoff, StallSite, StallWatch, kick_waiters, vcpu_preemptible},
    spinlock::Spin,
    sync::AtomicU64,
};

#[cfg(not(target_has_atomic = "64"))]
use crate::{spinlock::TicketLock, sync::AtomicI32};

mod stats;
pub(crate) mod word;

pub use stats::{Stats, stats};
use stats::{refused_get, saturated};

/// The count a dead lockref holds after [`LockRefGuard::mark_dead`] (any
/// negative count is dead).
pub const DEAD: i32 = -128;

/// How many lockless attempts an operation makes before it falls back to
/// the lock, as Linux's `CMPXCHG_LOOP`.
pub const CMPXCHG_LOOP_TRIES: u32 = 100;

const MAX: i32 = i32::MAX;

/// A spinlock and a reference count in one 64-bit word.
///
/// See the [module documentation](self) for the contract, the orderings and
/// what happens on overflow.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::LockRef;
///
/// // Linux's `struct dentry`: the count and its lock in one word.
/// struct Dentry { d_lockref: LockRef /* , d_name, d_inode, ... */ }
///
/// static ROOT: Dentry = Dentry { d_lockref: LockRef::new(1) };
/// ROOT.d_lockref.get(); // `dget`: lockless while nobody holds the lock
/// assert_eq!(ROOT.d_lockref.put_return(), Some(1)); // `dput`
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are `LockRef::new(0)`: unlocked, count 0 (with
/// `lockdep`, its lock is its own class, see
/// [`Map`](crate::lockdep::Map#zeroed-memory)). `bytemuck::Zeroable` with
/// the `bytemuck` feature.
///
/// # Guard policy
///
/// `G` is what the lock disables while held, as for the spinlocks
/// ([`SpinGuardian`]): [`PreemptDisabled`] by default, because Linux's
/// lockref lock is a `spinlock_t` (a holder switched out would keep every
/// CPU that spins for it waiting, and a CPU whose preempted thread holds
/// it would spin for ever). Only the lock path calls the hooks; the
/// lockless get and put call none. A binary that never calls
/// [`set_kernel!`](crate::set_kernel) names
/// [`NoGuard`](crate::spinlock::NoGuard):
/// `LockRef::<NoGuard>::with_policy(1)` calls no hook at all.
#[doc(alias = "lockref")]
#[cfg_attr(target_has_atomic = "64", repr(C, align(8)))]
pub struct LockRef<G: SpinGuardian = PreemptDisabled> {
    #[cfg(target_has_atomic = "64")]
    word: AtomicU64,
    #[cfg(not(target_has_atomic = "64"))]
    lock: TicketLock,
    #[cfg(not(target_has_atomic = "64"))]
    count: AtomicI32,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
    policy: PhantomData<fn() -> G>,
}

/// What `G::enter` saved when a [`LockRefGuard`] was made: undone on drop,
/// after the unlock and lockdep's release (the guard's last field).
struct Entered<G: SpinGuardian>(G::Saved);

impl<G: SpinGuardian> Drop for Entered<G> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `self.0` comes from `G::enter` in `lock_subclass`, on this
        // CPU (the guard is `!Send`); guards of one CPU drop in reverse
        // order of taking, as every scoped guard does, and this runs after
        // the lock is free, as Linux's `spin_unlock`.
        unsafe { G::exit(self.0) }
    }
}

/// The lock of a [`LockRef`], held; unlocks on drop.
///
/// While it is held nobody else changes the count: lockless updates see the
/// lock taken and fall back to it.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::LockRef;
///
/// let inode = LockRef::new(1);
/// let mut guard = inode.lock(); // lockless gets now fall back to the lock
/// guard.set_count(guard.count() + 1);
/// drop(guard);
/// assert_eq!(inode.count(), 2);
/// ```
///
/// # Invariants
///
/// From its creation until it drops, the guard holds `lockref`'s lock, taken
/// by the `raw_lock` that returned `ticket`, and nothing else releases that
/// lock: the guard is the lock's one owner.
#[must_use = "dropping the guard unlocks at once"]
pub struct LockRefGuard<'a, G: SpinGuardian = PreemptDisabled> {
    lockref: &'a LockRef<G>,
    ticket: u16,
    /// Records the release with lockdep after the unlock (zero-sized
    /// without `lockdep`).
    _dep: Acquired<'a>,
    /// What the policy disabled (preemption by default) stays disabled
    /// while the lock is held and is undone after the unlock (declared
    /// after `_dep`: dropped last).
    _entered: Entered<G>,
    not_send: PhantomData<*mut ()>,
}

// ---- word-level primitives (one implementation per representation) ---------

#[cfg(target_has_atomic = "64")]
impl<G: SpinGuardian> LockRef<G> {
    const_fn! {
        /// A new, unlocked lockref holding `count`, with the guard policy
        /// `G` (name it: `LockRef::<NoGuard>::with_policy(1)`). With
        /// `lockdep`, its lock's class is this call's location (see
        /// [`lockdep`](crate::lockdep#lock-classes)).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::LockRef;
        /// use ksync::spinlock::NoGuard;
        ///
        /// // Firmware without `set_kernel!`: the lock path calls no kernel hook.
        /// static BUFFER: LockRef<NoGuard> = LockRef::with_policy(1);
        /// BUFFER.get();
        /// assert_eq!(BUFFER.lock().count(), 2);
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn with_policy(count: i32) -> Self {
            Self {
                word: AtomicU64::new(word::with_count(count)),
                dep_map: Map::new(),
                policy: PhantomData,
            }
        }
    }

    /// The bounded lockless loop (Linux's `CMPXCHG_LOOP`): attempts `rule`
    /// while the lock is free, at most [`CMPXCHG_LOOP_TRIES`] times.
    /// Returns `Attempt::Lost` when the tries ran out.
    #[inline(always)]
    fn lockless(&self, rule: Rule, order: Ordering) -> Attempt {
        // An LL/SC step loads the word itself; the others start from a load.
        let mut seen = if arch::STEP_LOADS_WORD {
            0
        } else {
            self.word.load(Ordering::Relaxed)
        };
        // A lost race is retried at once, with the word the failed attempt
        // saw: no pause or backoff (Linux's choice; a `pause` and an
        // exponential backoff measured no better here, see the README).
        for _ in 0..CMPXCHG_LOOP_TRIES {
            match arch::lockref_attempt(&self.word, &mut seen, rule, order) {
                Attempt::Lost => {}
                done => return done,
            }
        }
        Attempt::Lost
    }

    /// Takes a ticket and waits for it; returns the ticket. When CPUs may
    /// be descheduled while spinning, takes the lock by test-and-set
    /// instead ([`raw_lock_preemptible`](Self::raw_lock_preemptible)).
    fn raw_lock(&self) -> u16 {
        if vcpu_preemptible() {
            return self.raw_lock_preemptible();
        }
        let mut seen = self.word.load(Ordering::Relaxed);
        loop {
            let next = word::next(seen);
            let taken = word::take_ticket(seen);
            // Acquire pairs with the Release unlock when the lock was free
            // and this exchange takes it at once.
            match self
                .word
                .compare_exchange_weak(seen, taken, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) if word::owner(seen) == next => return next,
                // A tail call that takes the word, not the ticket: a
                // ticket passed through would be kept in a callee-saved
                // register, pushed on the uncontended path too.
                Ok(_) => return self.raw_lock_wait(seen),
                Err(current) => seen = current,
            }
        }
    }

    /// Waits until the ticket taken from the word `seen` is served,
    /// watching `owner` for a stall (as the ticket lock's waiters do: the
    /// kernel's `StallWatch`), and returns the ticket. Out of line: only
    /// contended acquisitions pay for the call.
    #[inline(never)]
    fn raw_lock_wait(&self, seen: u64) -> u16 {
        let ticket = word::next(seen);
        let mut watch = StallWatch::new(StallSite::LockRef);
        loop {
            // Acquire pairs with the Release unlock that serves us.
            let owner = word::owner(self.word.load(Ordering::Acquire));
            if owner == ticket {
                return ticket;
            }
            // Giving the CPU away every `SPIN_LIMIT` rounds, as the
            // ticket lock's FIFO waiters do.
            watch.wait::<Spin>(|| u32::from(owner), true);
        }
    }

    /// The lock half taken by test-and-set (Linux's `virt_spin_lock`): a
    /// ticket is taken only when the lock is free, so no waiter holds a
    /// place in a queue and a descheduled one never stalls the others. The
    /// word layout is unchanged (free when `owner == next`), so lockless
    /// steps and FIFO lockers see the lock exactly as before; a CPU in
    /// either mode excludes a CPU in the other. Waiting is read-only, with
    /// bounded exponential backoff, giving the CPU away now and then (the
    /// kernel's [`SpinWait`](crate::kernel::SpinWait)). A `wait` that halts
    /// cannot miss the unlock: the waiter advertises itself and re-reads the
    /// word before it first halts, the unlock (in either mode) kicks while
    /// anyone has advertised, and a kick that lands between the waiter's
    /// last look and its halt is latched (the `SpinWait` contract).
    #[inline]
    fn raw_lock_preemptible(&self) -> u16 {
        // The uncontended case inline, waiting out of line.
        match self.try_take(self.word.load(Ordering::Relaxed)) {
            Ok(ticket) => ticket,
            Err(seen) => self.raw_lock_preemptible_slow(seen),
        }
    }

    #[inline(never)]
    fn raw_lock_preemptible_slow(&self, mut seen: u64) -> u16 {
        let mut backoff = Backoff::new();
        loop {
            match self.try_take(seen) {
                Ok(ticket) => return ticket,
                // A lockless count update or another locker changed the
                // word: look again at once while the lock stays free.
                Err(current) if word::lock_is_free(current) => seen = current,
                Err(_) => {
                    backoff.backoff::<Spin>();
                    seen = self.word.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// One test-and-set attempt on the word last seen as `seen`: its ticket
    /// if the lock was free and still is, else the word now.
    #[inline(always)]
    fn try_take(&self, seen: u64) -> Result<u16, u64> {
        if !word::lock_is_free(seen) {
            return Err(seen);
        }
        // Acquire pairs with the Release unlock that freed it.
        self.word
            .compare_exchange_weak(
                seen,
                word::take_ticket(seen),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .map(|_| word::next(seen))
    }

    /// Serves the next ticket.
    ///
    /// # Safety
    /// The caller holds the lock with `ticket`.
    unsafe fn raw_unlock(&self, ticket: u16) {
        // One read-modify-write, because waiters change `next` concurrently,
        // and one that cannot carry into `next`: owner 0xffff wraps to 0 by
        // subtracting. Release pairs with the Acquire in `raw_lock` and with
        // Acquire lockless steps that read the unlocked word.
        if ticket == u16::MAX {
            self.word.fetch_sub(word::OWNER_WRAP, Ordering::Release);
        } else {
            self.word.fetch_add(word::OWNER_ONE, Ordering::Release);
        }
        // In every mode: a test-and-set waiter from before a mode switch
        // may be halted (the `SpinWait` contract).
        kick_waiters();
    }

    #[inline]
    fn load_count(&self) -> i32 {
        word::count_of(self.word.load(Ordering::Relaxed))
    }

    #[inline]
    fn lock_held(&self) -> bool {
        !word::lock_is_free(self.word.load(Ordering::Relaxed))
    }

    /// # Safety
    /// The caller holds the lock and `old` is the current count.
    unsafe fn store_count_locked(&self, old: i32, new: i32) {
        // A read-modify-write of the count half only: waiters change the
        // lock half concurrently. Relaxed: the unlock publishes it.
        self.word
            .fetch_add(word::count_delta(new.wrapping_sub(old)), Ordering::Relaxed);
    }

    /// Exclusive access to the count: no atomics at all, since nobody else
    /// can see the lockref (the single-owner shortcut, as Linux's
    /// `fget_light`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let mut r = ksync::LockRef::new(1);
    /// *r.get_mut() += 2;
    /// assert_eq!(r.count(), 3);
    /// ```
    #[cfg(not(ksync_loom))]
    #[inline]
    pub fn get_mut(&mut self) -> &mut i32 {
        let ptr: *mut u64 = self.word.get_mut();
        // SAFETY: `ptr` is a unique, 8-byte aligned, live u64 (we hold
        // `&mut self`, and no guard can exist, as guards borrow `self`); its
        // count half is the i32 at `COUNT_INDEX` (1 on little-endian, 0 on
        // big-endian), in bounds and 4-byte aligned. The returned borrow
        // keeps `self` exclusively borrowed.
        unsafe { &mut *ptr.cast::<i32>().add(word::COUNT_INDEX) }
    }
}

#[cfg(not(target_has_atomic = "64"))]
impl<G: SpinGuardian> LockRef<G> {
    const_fn! {
        /// A new, unlocked lockref holding `count`, with the guard policy
        /// `G` (name it: `LockRef::<NoGuard>::with_policy(1)`). With
        /// `lockdep`, its lock's class is this call's location (see
        /// [`lockdep`](crate::lockdep#lock-classes)).
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn with_policy(count: i32) -> Self {
            Self {
                lock: TicketLock::new(),
                count: AtomicI32::new(count),
                dep_map: Map::new(),
                policy: PhantomData,
            }
        }
    }

    /// No 64-bit compare-and-swap here: the lockless path is never
    /// available.
    #[inline(always)]
    fn lockless(&self, _rule: Rule, _order: Ordering) -> Attempt {
        Attempt::Locked
    }

    fn raw_lock(&self) -> u16 {
        self.lock.lock();
        0
    }

    /// # Safety
    /// The caller holds the lock.
    unsafe fn raw_unlock(&self, _ticket: u16) {
        // SAFETY: forwarded caller contract.
        unsafe { self.lock.unlock() }
    }

    #[inline]
    fn lock_held(&self) -> bool {
        self.lock.is_locked()
    }

    #[inline]
    fn load_count(&self) -> i32 {
        self.count.load(Ordering::Relaxed)
    }

    /// # Safety
    /// The caller holds the lock.
    unsafe fn store_count_locked(&self, _old: i32, new: i32) {
        // Only lock holders write the count; the unlock publishes it.
        self.count.store(new, Ordering::Relaxed);
    }

    /// Exclusive access to the count: no atomics at all.
    #[cfg(not(ksync_loom))]
    #[inline]
    pub fn get_mut(&mut self) -> &mut i32 {
        self.count.get_mut()
    }
}

impl LockRef {
    const_fn! {
        /// A new, unlocked lockref holding `count`, whose lock disables
        /// preemption while held (the default policy, [`PreemptDisabled`]).
        /// With `lockdep`, its lock's class is this call's location (see
        /// [`lockdep`](crate::lockdep#lock-classes)).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::LockRef;
        ///
        /// // `const`: in a `static`, or embedded in an object at creation.
        /// static SUPER_BLOCK: LockRef = LockRef::new(1);
        /// assert_eq!(SUPER_BLOCK.count(), 1);
        /// ```
        #[doc(alias = "lockref_init")]
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new(count: i32) -> Self {
            Self::with_policy(count)
        }
    }
}

// ---- the operations ---------------------------------------------------------

impl<G: SpinGuardian> LockRef<G> {
    /// Takes a reference; the caller must already hold one (or hold the
    /// object by other means, as a lookup structure does).
    ///
    /// At `i32::MAX` the count saturates; on a dead lockref the call is
    /// refused. Both are reported (see the [module docs](self#saturation-and-misuse)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(1); // the lookup table's reference
    /// dentry.get(); // `dget`: a second user, without taking the lock
    /// assert_eq!(dentry.count(), 2);
    /// ```
    #[doc(alias = "lockref_get")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn get(&self) {
        let rule = Rule {
            lo: 0,
            hi: MAX - 1,
            delta: 1,
        };
        match self.lockless(rule, Ordering::Relaxed) {
            Attempt::Done(_) => {}
            Attempt::Refused(count) => refused_get(count),
            Attempt::Locked | Attempt::Lost => self.get_locked(),
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn get_locked(&self) {
        let mut guard = self.lock();
        match guard.count() {
            count @ (MAX | i32::MIN..0) => {
                drop(guard);
                refused_get(count);
            }
            count => guard.set_count(count + 1),
        }
    }

    /// Takes a reference unless the count is zero or dead (`<= 0`); returns
    /// whether it did.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// // An unused cached object (count 0) may be on its way to being freed:
    /// // a lookup that finds it must not revive it (`lockref_get_not_zero`).
    /// let cached = LockRef::new(0);
    /// assert!(!cached.get_not_zero());
    /// let live = LockRef::new(1);
    /// assert!(live.get_not_zero());
    /// ```
    #[doc(alias = "lockref_get_not_zero")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[must_use = "the reference is taken only when this returns `true`"]
    pub fn get_not_zero(&self) -> bool {
        self.get_if_at_least(1)
    }

    /// Takes a reference unless the lockref is dead (count `< 0`); returns
    /// whether it did. A count of zero is revived to one.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(0); // unused, but still valid in the cache
    /// assert!(dentry.get_not_dead()); // revived: count 1
    /// dentry.lock().mark_dead(); // `d_invalidate` tears it down
    /// assert!(!dentry.get_not_dead()); // a racing lookup backs off
    /// ```
    #[doc(alias = "lockref_get_not_dead")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[must_use = "the reference is taken only when this returns `true`"]
    pub fn get_not_dead(&self) -> bool {
        self.get_if_at_least(0)
    }

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn get_if_at_least(&self, lo: i32) -> bool {
        let rule = Rule {
            lo,
            hi: MAX - 1,
            delta: 1,
        };
        // Acquire: see the module docs.
        match self.lockless(rule, Ordering::Acquire) {
            Attempt::Done(_) => true,
            Attempt::Refused(MAX) => {
                saturated();
                true
            }
            Attempt::Refused(_) => false,
            Attempt::Locked | Attempt::Lost => self.get_if_at_least_locked(lo),
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn get_if_at_least_locked(&self, lo: i32) -> bool {
        let mut guard = self.lock();
        match guard.count() {
            MAX => {
                drop(guard);
                saturated();
                true
            }
            count if count < lo => false,
            count => {
                guard.set_count(count + 1);
                true
            }
        }
    }

    /// Drops a reference without ever taking the lock, and returns the new
    /// count.
    ///
    /// `None` when the count is already `<= 0` (zero or dead), and also when
    /// the lockless path cannot be used: the lock is held, the word stayed
    /// contended for [`CMPXCHG_LOOP_TRIES`] attempts, or this target has no
    /// 64-bit compare-and-swap. On `None` nothing changed; callers then
    /// usually take the lock (or use [`put_or_lock`](Self::put_or_lock)).
    ///
    /// On `Some(0)` the caller may free the object: the decrement is Release
    /// and reaching zero adds an Acquire fence. A saturated count stays at
    /// `i32::MAX` and returns `Some(i32::MAX)`.
    ///
    /// The result must be looked at (`#[must_use]`): dropping it would
    /// leave a reference held on `None`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```compile_fail")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// #![deny(unused_must_use)]
    /// let object = ksync::LockRef::new(2);
    /// object.put_return(); // error: unused `Option` that must be used
    /// ```
    #[doc(alias = "lockref_put_return")]
    #[inline]
    #[must_use = "`None` means nothing was dropped: the reference is still held"]
    pub fn put_return(&self) -> Option<i32> {
        let rule = Rule {
            lo: 1,
            hi: MAX - 1,
            delta: -1,
        };
        match self.lockless(rule, Ordering::Release) {
            Attempt::Done(0) => {
                // Pairs with the Release decrements of every other holder:
                // their accesses to the object happen-before the caller's
                // free.
                fence(Ordering::Acquire);
                Some(0)
            }
            Attempt::Done(count) => Some(count),
            Attempt::Refused(MAX) => Some(MAX),
            Attempt::Refused(_) | Attempt::Locked | Attempt::Lost => None,
        }
    }

    /// Drops a reference unless it may be the last one.
    ///
    /// * `None`: the count was above one and has been decremented (or is
    ///   saturated and stays).
    /// * `Some(guard)`: the count was `<= 1`; nothing changed and the lock
    ///   is now held, so the caller can decide under it (typically: set the
    ///   count to zero or [`mark_dead`](LockRefGuard::mark_dead) and tear
    ///   down).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// // `dput`: the last reference tears the dentry down under the lock.
    /// fn dput(d_lockref: &LockRef) {
    ///     if let Some(mut guard) = d_lockref.put_or_lock() {
    ///         guard.mark_dead(); // count was <= 1: ours to kill
    ///         // ... unhash, then free after a grace period ...
    ///     }
    /// }
    /// let dentry = LockRef::new(2);
    /// dput(&dentry); // lockless: 2 -> 1
    /// dput(&dentry); // the last one
    /// assert!(dentry.is_dead());
    /// ```
    #[doc(alias = "lockref_put_or_lock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[must_use = "`Some` holds the lock with the last reference: dropping it unlocks"]
    pub fn put_or_lock(&self) -> Option<LockRefGuard<'_, G>> {
        let rule = Rule {
            lo: 2,
            hi: MAX - 1,
            delta: -1,
        };
        match self.lockless(rule, Ordering::Release) {
            Attempt::Done(_) | Attempt::Refused(MAX) => None,
            Attempt::Refused(_) | Attempt::Locked | Attempt::Lost => self.put_or_lock_locked(),
        }
    }

    #[cold]
    #[inline(never)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn put_or_lock_locked(&self) -> Option<LockRefGuard<'_, G>> {
        let mut guard = self.lock();
        match guard.count() {
            ..=1 => Some(guard),
            MAX => None,
            count => {
                guard.set_count(count - 1);
                None
            }
        }
    }

    /// Takes the lock; the count cannot change until the guard drops.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let inode = LockRef::new(3);
    /// {
    ///     let guard = inode.lock(); // `spin_lock(&lockref->lock)`
    ///     assert!(inode.is_locked());
    ///     assert_eq!(guard.count(), 3); // exact while held
    /// }
    /// assert!(!inode.is_locked());
    /// ```
    #[doc(alias = "spin_lock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lock(&self) -> LockRefGuard<'_, G> {
        self.lock_subclass(0)
    }

    /// [`lock`](Self::lock) for deliberate nesting of locks of one
    /// [lockdep](crate::lockdep) class (Linux's `spin_lock_nested`): a
    /// parent's lock with [`lock`](Self::lock), then a child's with
    /// `lock_nested(1)`, records the order "class -> class/1" instead of
    /// reporting recursion. Without `lockdep`, exactly `lock`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// // Every dentry's lock is built here: one class.
    /// fn d_alloc() -> LockRef { LockRef::new(1) }
    ///
    /// // A rename locks the parent, then the child: nested on purpose,
    /// // always in that order.
    /// let (parent, child) = (d_alloc(), d_alloc());
    /// let _p = parent.lock();
    /// let _c = child.lock_nested(1); // "dentry -> dentry/1", not recursion
    /// ```
    ///
    /// # Panics
    /// With `lockdep`, if `subclass` is not below
    /// [`MAX_SUBCLASSES`](crate::lockdep::MAX_SUBCLASSES).
    #[doc(alias = "spin_lock_nested")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lock_nested(&self, subclass: u8) -> LockRefGuard<'_, G> {
        self.lock_subclass(subclass)
    }

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_subclass(&self, subclass: u8) -> LockRefGuard<'_, G> {
        // Preemption (the policy's) off before spinning, as `spin_lock`
        // does: the holder must not be switched out, and neither must a
        // waiter holding a FIFO ticket (the owner would wait for it).
        let entered = Entered::<G>(G::enter());
        // Recorded before spinning, so a deadlock is reported first.
        let dep = self.dep_map.acquire_guard(subclass, false, false);
        let ticket = self.raw_lock();
        // INVARIANT: `raw_lock` returns once the lock is taken with
        // `ticket`; the new guard is the only one that will release it.
        LockRefGuard {
            lockref: self,
            ticket,
            _dep: dep,
            _entered: entered,
            not_send: PhantomData,
        }
    }

    /// Puts the lock in `key`'s [lockdep](crate::lockdep) class instead of
    /// the class of the place it was built (Linux's `lockdep_set_class`).
    /// Does nothing without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let mut lockref = ksync::LockRef::new(1);
    /// lockref.set_lock_class(ksync::lock_class!("dentry"));
    /// ```
    #[doc(alias = "lockdep_set_class")]
    #[inline]
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }

    /// The count: a racy snapshot, possibly stale the moment it returns.
    /// Use it for statistics and assertions, not to decide anything.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(1);
    /// dentry.get();
    /// // A snapshot, for statistics and assertions, never for decisions.
    /// assert_eq!(dentry.count(), 2);
    /// ```
    #[inline]
    pub fn count(&self) -> i32 {
        self.load_count()
    }

    /// Whether the lockref is dead (count `< 0`): a snapshot, but a dead
    /// lockref never comes back to life by itself.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(1);
    /// assert!(!dentry.is_dead());
    /// dentry.lock().mark_dead();
    /// assert!(dentry.is_dead()); // and stays dead
    /// ```
    #[doc(alias = "__lockref_is_dead")]
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.load_count() < 0
    }

    /// Whether the embedded lock is held (by anyone): a snapshot, stale
    /// the moment it returns (Linux's `spin_is_locked(&lockref->lock)`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let inode = LockRef::new(1);
    /// let guard = inode.lock();
    /// assert!(inode.is_locked()); // e.g. in a `debug_assert!` of a caller's contract
    /// drop(guard);
    /// assert!(!inode.is_locked());
    /// ```
    #[doc(alias = "spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.lock_held()
    }
}

impl<G: SpinGuardian> LockRefGuard<'_, G> {
    /// The count (exact: nobody else changes it while the lock is held).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let inode = LockRef::new(1);
    /// let guard = inode.lock();
    /// // Exact: a `get` on another CPU now waits for the lock to drop.
    /// if guard.count() == 1 { /* the only user: safe to reuse in place */ }
    /// # assert_eq!(guard.count(), 1);
    /// ```
    #[inline]
    #[must_use]
    pub fn count(&self) -> i32 {
        self.lockref.load_count()
    }

    /// Sets the count. Any value is allowed; a negative one means dead.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// // `d_drop`-style bookkeeping: under the lock, move two references at once.
    /// let dentry = LockRef::new(3);
    /// let mut guard = dentry.lock();
    /// guard.set_count(guard.count() - 2);
    /// drop(guard);
    /// assert_eq!(dentry.count(), 1);
    /// ```
    #[inline]
    pub fn set_count(&mut self, count: i32) {
        let old = self.count();
        // SAFETY: the guard holds the lock (type invariant), so nobody else
        // changes the count and `old`, read just above, is the current one.
        unsafe { self.lockref.store_count_locked(old, count) }
    }

    /// Marks the lockref dead ([`DEAD`]): from now on `get_not_dead` and
    /// `get_not_zero` fail and puts are refused.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(1);
    /// let mut guard = dentry.lock();
    /// guard.mark_dead(); // `lockref_mark_dead`: lookups fail from now on
    /// assert!(guard.is_dead());
    /// drop(guard);
    /// assert!(!dentry.get_not_zero());
    /// ```
    #[doc(alias = "lockref_mark_dead")]
    #[inline]
    pub fn mark_dead(&mut self) {
        self.set_count(DEAD);
    }

    /// Whether the count is negative (dead).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::LockRef;
    ///
    /// let dentry = LockRef::new(0);
    /// let guard = dentry.lock();
    /// // Under the lock the answer is exact: nobody kills it meanwhile.
    /// if !guard.is_dead() { /* safe to hand out a new reference */ }
    /// # drop(guard);
    /// ```
    #[inline]
    #[must_use]
    pub fn is_dead(&self) -> bool {
        self.count() < 0
    }
}

impl<G: SpinGuardian> Drop for LockRefGuard<'_, G> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: by the type invariant the guard holds the lock with
        // `self.ticket` and nothing else releases it; the guard ends here,
        // so it is released exactly once.
        unsafe { self.lockref.raw_unlock(self.ticket) }
    }
}

// ---- trait impls ------------------------------------------------------------

/// For the default policy only, so that `LockRef::default()` needs no
/// annotation; other policies: `with_policy(0)`.
impl Default for LockRef {
    /// A lockref with count zero.
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn default() -> Self {
        Self::new(0)
    }
}

impl<G: SpinGuardian> fmt::Debug for LockRef<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRef")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl<G: SpinGuardian> fmt::Debug for LockRefGuard<'_, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRefGuard")
            .field("count", &self.count())
            .finish()
    }
}

#[cfg(feature = "defmt")]
impl<G: SpinGuardian> defmt::Format for LockRef<G> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "LockRef {{ count: {} }}", self.count())
    }
}

#[cfg(feature = "defmt")]
impl<G: SpinGuardian> defmt::Format for LockRefGuard<'_, G> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "LockRefGuard {{ count: {} }}", self.count())
    }
}

#[cfg(all(
    test,
    feature = "test-hooks",
    target_has_atomic = "64",
    not(ksync_loom)
))]
mod tests {
    use super::{LockRef, Ordering, word};

    /// The test-and-set take compares the whole 64-bit word, not one half:
    /// a word seen free, then 65 536 acquisitions later (tickets wrapped,
    /// lock held by the last one), has `next` back at the value seen but
    /// `owner` one behind, and the take must fail. (The ticket lock had the
    /// split compare; `RawTicketLock`'s loom model
    /// `ticket_try_lock_across_a_wrap` is its test.)
    #[test]
    fn try_take_compares_the_whole_word_across_a_ticket_wrap() {
        let lr = LockRef::new(3);
        let seen = lr.word.load(Ordering::Relaxed);
        assert!(word::lock_is_free(seen));
        for _ in 0..u16::MAX {
            drop(lr.lock());
        }
        let held = lr.lock();
        let now = lr.word.load(Ordering::Relaxed);
        assert_eq!(word::next(now), word::next(seen), "the tickets wrapped");
        assert_ne!(word::owner(now), word::owner(seen));
        assert!(lr.try_take(seen).is_err(), "took a held lock");
        drop(held);
        assert_eq!(lr.count(), 3);
    }
}
