//! [`SeqLock<T>`]: a [`SeqCount`], a writers' ticket lock and the data in
//! one, with its readers (copy, check, retry) and [`SeqLockWriteGuard`],
//! which publishes a private copy on drop.

use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};

use super::storage::{Padded, Storage, value_of};
use super::{SeqCount, SeqData};
use crate::lockdep::{Acquired, LockClassKey, Map};
use crate::spinlock::{IrqState, PreemptDisabled, SpinGuardian, TicketLock};
use crate::sync::const_fn;

/// Data of type `T`, a sequence counter and a writers' lock (Linux's
/// `seqlock_t` with the data it protects): readers copy the data out and
/// retry if a writer got in the way; writers serialise on a ticket lock
/// and never wait for readers.
///
/// `G` is what writers disable while they hold the lock, as for
/// [`SpinLock`](crate::spinlock::SpinLock) (a
/// [`SpinGuardian`]): [`PreemptDisabled`] by default (Linux's
/// `write_seqlock` is `spin_lock`: a writer is never switched out holding
/// the lock, or in the middle of a publication that readers spin on),
/// [`IrqDisabled`](crate::spinlock::IrqDisabled) for writers that always
/// mask interrupts, or [`NoGuard`](crate::spinlock::NoGuard) for a
/// kernel's own code that keeps preemption off itself, and for binaries
/// without [`set_kernel!`](crate::set_kernel). Build the other policies
/// with [`with_policy`](Self::with_policy).
///
/// Good for small `T` read far more often than written, where readers must
/// not slow writers down (timekeeping) or each other (statistics). Each
/// read copies the whole `T`: for large data, or data behind pointers,
/// use RCU.
///
/// See the [module docs](super) for how reads avoid undefined behaviour and
/// [`SeqData`] for what `T` may be.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::seqlock::SeqLock;
///
/// let pair = SeqLock::new([1u32, 2]);
/// pair.write().swap(0, 1);
/// assert_eq!(pair.read(), [2, 1]);
/// assert_eq!(pair.read_with(|p| p[0] + p[1]), 3);
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid `SeqLock<T>` whenever they are a valid `T`
/// (the integers and their arrays, not references or `NonZero*`): the same
/// as `SeqLock::new` of a zeroed `T`, sequence even, writers' lock free
/// (with `lockdep`, its own class). `Zeroable` for `T: Zeroable` with the
/// `bytemuck` feature.
#[doc(alias("seqlock_t", "DEFINE_SEQLOCK", "seqlock_init"))]
pub struct SeqLock<T, G = PreemptDisabled> {
    seq: SeqCount,
    /// Serialises writers (the `SeqCount` contract), taken with `G`'s
    /// `enter` first.
    lock: TicketLock,
    data: Storage<T>,
    /// The writers' lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
    /// The writers' guard policy (no bytes; `fn() -> G` keeps `G` out of
    /// the auto traits).
    policy: PhantomData<fn() -> G>,
}

// SAFETY: the data is only accessed through atomic words (concurrently) or
// exclusively (`&mut`, ownership), readers get copies that the sequence
// check proved whole, and writers are serialised by `lock`. Copies of `T`
// move between threads, hence `T: Send`; no `&T` into the shared storage is
// ever handed out, so `T: Sync` is not needed.
unsafe impl<T: SeqData + Send, G> Sync for SeqLock<T, G> {}
// SAFETY: owning a `SeqLock<T>` is owning a `T`.
unsafe impl<T: Send, G> Send for SeqLock<T, G> {}

impl<T: SeqData> SeqLock<T> {
    const_fn! {
        /// A seqlock holding `value`, whose writers disable preemption
        /// (the default policy). `const`, for `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// # use ksync::seqlock::SeqLock;
        /// static JIFFIES: SeqLock<u64> = SeqLock::new(0);
        /// assert_eq!(JIFFIES.read(), 0);
        /// ```
        /// With `lockdep`, the writers' lock's class is this call's
        /// location (see [`lockdep`](crate::lockdep#lock-classes)).
        #[doc(alias = "seqlock_init")]
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new(value: T) -> Self {
            Self::with_policy(value)
        }
    }
}

impl<T: SeqData, G: SpinGuardian> SeqLock<T, G> {
    const_fn! {
        /// A seqlock holding `value`, whose writers disable what `G`
        /// says (name it in the type). `const`, for `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::seqlock::SeqLock;
        /// use ksync::spinlock::{IrqDisabled, NoGuard};
        ///
        /// // Updated by the timer interrupt and read everywhere: writers
        /// // always mask interrupts (`write` is `write_seqlock_irqsave`).
        /// static CLOCK: SeqLock<u64, IrqDisabled> = SeqLock::with_policy(0);
        /// // The scheduler's own statistics, written with preemption
        /// // already off.
        /// static RQ_STATS: SeqLock<[u32; 2], NoGuard> = SeqLock::with_policy([0; 2]);
        /// *CLOCK.write() += 1;
        /// RQ_STATS.write()[0] += 1;
        /// assert_eq!((CLOCK.read(), RQ_STATS.read()), (1, [1, 0]));
        /// ```
        /// With `lockdep`, the writers' lock's class is this call's
        /// location.
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn with_policy(value: T) -> Self {
            Self {
                seq: SeqCount::new(),
                lock: TicketLock::new(),
                data: Storage::new(value),
                dep_map: Map::new(),
                policy: PhantomData,
            }
        }
    }

    /// A consistent copy of the data: copies it, and copies again while a
    /// writer got in the way. Spins while a write is being published.
    ///
    /// In an interrupt handler that may have interrupted this lock's writer
    /// (without [`write_irqsave`](Self::write_irqsave)), use
    /// [`try_read`](Self::try_read) instead.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(7u16);
    /// assert_eq!(lock.read(), 7);
    /// ```
    #[doc(alias = "read_seqbegin")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read(&self) -> T {
        self.dep_map.read_access();
        loop {
            let start = self.seq.read_begin();
            // SAFETY: `start` is what `read_begin` (R1) just returned.
            if let Some(value) = unsafe { self.copy_since(start) } {
                return value;
            }
        }
    }

    /// Calls `f` once, with a consistent copy of the data (made as by
    /// [`read`](Self::read)), and returns its result. The copy lives in
    /// this call's frame, so `f` can look at part of a large `T` without
    /// moving all of it again.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new([3u64; 8]);
    /// assert_eq!(lock.read_with(|a| a.iter().sum::<u64>()), 24);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read_with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.dep_map.read_access();
        let mut buf = MaybeUninit::uninit();
        loop {
            let start = self.seq.read_begin();
            self.data.load(&mut buf);
            if !self.seq.read_retry(start) {
                break;
            }
        }
        // SAFETY: the sequence check passed: no writer overlapped the copy
        // (R1/R2 with W1/W2, module docs), so the words are those of one
        // published `Padded<T>`.
        let value = unsafe { &(*buf.as_ptr()).value };
        f(value)
    }

    /// One attempt at [`read`](Self::read) that never spins: `None` if a
    /// write was being published before or during the copy.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(1i8);
    /// assert_eq!(lock.try_read(), Some(1));
    /// ```
    #[inline]
    pub fn try_read(&self) -> Option<T> {
        let start = self.seq.try_read_begin()?;
        // SAFETY: `start` is what `try_read_begin` (R1) just returned.
        unsafe { self.copy_since(start) }
    }

    /// Starts a hand-rolled read section (Linux's `read_seqbegin`): spins
    /// while a write is being published and returns the even sequence
    /// number for [`read_at`](Self::read_at) and
    /// [`read_retry`](Self::read_retry).
    ///
    /// Useful to read several things consistently with this lock's data
    /// (other atomics, or several reads of the data), or as a version
    /// number: `read_retry(start)` tells whether anything was published
    /// since.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(10u32);
    /// let extra = AtomicU32::new(1); // also only changed inside write sections
    /// let (value, extra) = loop {
    ///     let start = lock.read_begin();
    ///     let Some(value) = lock.read_at(start) else { continue };
    ///     let e = extra.load(Relaxed);
    ///     if !lock.read_retry(start) {
    ///         break (value, e);
    ///     }
    /// };
    /// assert_eq!((value, extra), (10, 1));
    /// ```
    #[doc(alias = "read_seqbegin")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read_begin(&self) -> u32 {
        self.dep_map.read_access();
        self.seq.read_begin()
    }

    /// Ends a hand-rolled read section: `true` if a write was published
    /// (or began) since [`read_begin`](Self::read_begin) returned `start`,
    /// so the section must be retried.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(0u8);
    /// let start = lock.read_begin();
    /// assert!(!lock.read_retry(start));
    /// *lock.write() = 1;
    /// assert!(lock.read_retry(start));
    /// ```
    #[doc(alias = "read_seqretry")]
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        self.seq.read_retry(start)
    }

    /// The data as of sequence number `start` (from
    /// [`read_begin`](Self::read_begin)): a copy, or `None` if the sequence
    /// is no longer `start` (something was published since), before or
    /// after the copy. The copy is then discarded unseen.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new('a');
    /// let start = lock.read_begin();
    /// assert_eq!(lock.read_at(start), Some('a'));
    /// *lock.write() = 'b';
    /// assert_eq!(lock.read_at(start), None);
    /// ```
    #[inline]
    pub fn read_at(&self, start: u32) -> Option<T> {
        // `start` is any number the caller likes: check it against the
        // counter with an Acquire load of our own (R1), so the copy is
        // ordered after the publication of `start` even if the caller's
        // `read_begin` was long ago (or never happened).
        if self.seq.try_read_begin()? != start {
            return None;
        }
        // SAFETY: `start` was just returned by `try_read_begin` (R1).
        unsafe { self.copy_since(start) }
    }

    /// Copies the data and returns it if the sequence still is `start`
    /// after the copy (R2 fence, then a reload).
    ///
    /// # Safety
    /// `start` is the even value returned by [`SeqCount::try_read_begin`]
    /// or [`SeqCount::read_begin`] (their Acquire load, R1) on `self.seq`,
    /// before this call.
    #[inline]
    unsafe fn copy_since(&self, start: u32) -> Option<T> {
        debug_assert!(start & 1 == 0);
        let mut buf = MaybeUninit::uninit();
        self.data.load(&mut buf);
        if self.seq.read_retry(start) {
            return None;
        }
        // SAFETY: R1 read the even `start` (caller), and after the copy the
        // sequence still is `start` (R2 fence, then the reload): no writer
        // overlapped the copy (R1/R2 pair with W2/W1, module docs), so the
        // words are exactly those of the `Padded<T>` published at `start`,
        // a valid `T`. (Were the counter to wrap around to `start` during
        // the copy, each word would still be whole, and `SeqData`'s third
        // rule keeps the mix a valid `T`.)
        Some(unsafe { value_of(&buf) })
    }

    /// Whether a writer holds the lock: a snapshot, stale the moment it
    /// returns (Linux's `spin_is_locked(&sl->lock)`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::seqlock::SeqLock;
    ///
    /// let clock = SeqLock::new(0u64);
    /// let mut w = clock.write();
    /// *w += 1;
    /// assert!(clock.is_locked()); // for assertions: "the writer holds it"
    /// drop(w);
    /// assert!(!clock.is_locked());
    /// ```
    #[doc(alias = "spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.lock.is_locked()
    }

    /// Takes the writers' lock (spinning) and returns a guard that derefs
    /// to a copy of the data; dropping the guard publishes the copy and
    /// unlocks.
    ///
    /// Readers keep seeing the old value until the drop; they spin or
    /// retry only while it is being stored. If readers run in interrupt
    /// handlers, use [`write_irqsave`](Self::write_irqsave).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new([0u32; 2]);
    /// {
    ///     let mut w = lock.write();
    ///     w[0] = 1;
    ///     assert_eq!(lock.read(), [0, 0]); // not published yet
    ///     w[1] = 1;
    /// }
    /// assert_eq!(lock.read(), [1, 1]);
    /// ```
    #[doc(alias("write_seqlock", "write_sequnlock"))]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write(&self) -> SeqLockWriteGuard<'_, T, G> {
        // The policy first (preemption off before spinning), then lockdep
        // (before spinning, so a deadlock is reported first; after the
        // policy, so it sees interrupts masked by `IrqDisabled`).
        let saved = G::enter();
        let dep = self.dep_map.acquire_guard(0, false, false);
        self.lock.lock();
        // SAFETY: locked just above, after `G::enter` on this CPU; the
        // guard unlocks and exits.
        unsafe { self.guard(saved, None, dep) }
    }

    /// [`write`](Self::write) with local interrupts saved and disabled
    /// *before* spinning on the lock, and restored after the guard has
    /// published and unlocked: a reader in an interrupt handler on this
    /// CPU can then never spin on this CPU's half-published write.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// static TIMEKEEPER: SeqLock<u64> = SeqLock::new(0);
    /// *TIMEKEEPER.write_irqsave() += 1; // interrupts off until published
    /// assert_eq!(TIMEKEEPER.read(), 1);
    /// ```
    #[doc(alias("write_seqlock_irqsave", "write_sequnlock_irqrestore"))]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write_irqsave(&self) -> SeqLockWriteGuard<'_, T, G> {
        // The policy, then interrupts off, both before spinning: a handler
        // on this CPU must not find the lock held (or the sequence odd) by
        // the code it interrupted. The guard undoes them in reverse order
        // (interrupts restored before preemption is enabled, as Linux's
        // `spin_unlock_irqrestore`).
        let saved = G::enter();
        let irq = IrqState::save();
        let dep = self.dep_map.acquire_guard(0, false, true);
        self.lock.lock();
        // SAFETY: locked just above, after `G::enter` on this CPU; the
        // guard unlocks and exits.
        unsafe { self.guard(saved, Some(irq), dep) }
    }

    /// [`write`](Self::write) if the writers' lock is free, without
    /// spinning.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(0u32);
    /// let w = lock.try_write().unwrap();
    /// assert!(lock.try_write().is_none());
    /// drop(w);
    /// ```
    #[doc(alias = "write_tryseqlock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write(&self) -> Option<SeqLockWriteGuard<'_, T, G>> {
        let saved = G::enter();
        if !self.lock.try_lock() {
            // SAFETY: the matching `enter`, just above.
            unsafe { G::exit(saved) };
            return None;
        }
        let dep = self.dep_map.acquire_guard(0, true, false);
        // SAFETY: `try_lock` succeeded after `G::enter` on this CPU, so the
        // lock is ours; the guard unlocks and exits.
        Some(unsafe { self.guard(saved, None, dep) })
    }

    /// Replaces the data with `value` (lock, publish, unlock), without
    /// copying the old value out first.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(1.5f64);
    /// lock.store(2.5);
    /// assert_eq!(lock.read(), 2.5);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn store(&self, value: T) {
        let saved = G::enter();
        let dep = self.dep_map.acquire_guard(0, false, false);
        self.lock.lock();
        // SAFETY: the lock is held (locked just above), and `saved` is
        // from the `enter` above, on this CPU (the policy keeps us here).
        unsafe {
            self.publish_locked(&Padded::new(value));
            self.lock.unlock();
            G::exit(saved);
        }
        drop(dep);
    }

    /// Puts the writers' lock in `key`'s [lockdep](crate::lockdep) class
    /// instead of the class of the place it was built. Does nothing
    /// without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::seqlock::SeqLock;
    ///
    /// struct Timekeeper {
    ///     clock: SeqLock<u64>,
    /// }
    /// let mut tk = Timekeeper { clock: SeqLock::new(0) };
    /// // Before it is shared: lockdep reports name the class "tk_core".
    /// tk.clock.set_lock_class(ksync::lock_class!("tk_core"));
    /// tk.clock.store(1);
    /// ```
    #[doc(alias = "lockdep_set_class")]
    #[inline]
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }

    /// The data, through exclusive access: no atomics, no lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// let mut lock = SeqLock::new(1u32);
    /// *lock.get_mut() += 1;
    /// assert_eq!(lock.read(), 2);
    /// ```
    // Not under loom: its storage holds loom atomics, not a `T` to lend.
    #[cfg(not(ksync_loom))]
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// The data, consuming the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqLock;
    /// assert_eq!(SeqLock::new(5u8).into_inner(), 5);
    /// ```
    #[inline]
    pub fn into_inner(self) -> T {
        // SAFETY: ownership excludes writers, and whatever moved the lock
        // to us ordered the last writer's stores before this call.
        unsafe { self.data.load_exclusive() }
    }

    /// A guard holding a copy of the data; it publishes, unlocks and
    /// exits the policy on drop.
    ///
    /// # Safety
    /// `self.lock` is held by the caller, and its ownership passes to the
    /// guard; `saved` is what `G::enter` returned on this CPU before the
    /// lock was taken (and `irq`, if any, was saved after it).
    #[inline]
    unsafe fn guard<'a>(
        &'a self,
        saved: G::Saved,
        irq: Option<IrqState>,
        dep: Acquired<'a>,
    ) -> SeqLockWriteGuard<'a, T, G> {
        // SAFETY: the lock is held (caller), so only we write the data, and
        // the lock's Acquire made the previous writer's stores visible.
        let value = Padded::new(unsafe { self.data.load_exclusive() });
        SeqLockWriteGuard {
            lock: self,
            value,
            saved,
            irq,
            _dep: dep,
        }
    }

    /// Publishes `value`: odd, stores, even.
    ///
    /// # Safety
    /// `self.lock` is held by the caller (taken after `G::enter`).
    #[inline]
    unsafe fn publish_locked(&self, value: &Padded<T>) {
        // SAFETY: the lock serialises writers, and its Acquire/Release
        // ordering makes the previous writer's `write_end` happen-before
        // this `write_begin`. The publication cannot be preempted with the
        // count odd: the policy `G` holds preemption (or interrupts) off,
        // or, for `NoGuard`, the user promised the kernel does (its docs).
        unsafe { self.seq.write_begin() };
        self.data.store(value);
        // SAFETY: ends the write begun above, lock still held.
        unsafe { self.seq.write_end() };
    }
}

impl<T: SeqData + Default, G: SpinGuardian> Default for SeqLock<T, G> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn default() -> Self {
        Self::with_policy(T::default())
    }
}

impl<T: SeqData + fmt::Debug, G: SpinGuardian> fmt::Debug for SeqLock<T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_read`: never spin inside a formatter (it may run on the
        // writer's CPU, or in the write section itself).
        let mut d = f.debug_struct("SeqLock");
        match self.try_read() {
            Some(value) => d.field("data", &value),
            None => d.field("data", &format_args!("<being written>")),
        };
        d.field("seq", &self.seq.sequence()).finish()
    }
}

/// A write section of a [`SeqLock`]: derefs to a private copy of the data,
/// which is published (and the lock released, interrupts restored for
/// [`write_irqsave`](SeqLock::write_irqsave), and what the policy `G`
/// disabled enabled again) when the guard drops.
///
/// `!Send`: it may hold the interrupt state of the CPU that took it, and
/// the CPU's disabled preemption.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// # use ksync::seqlock::SeqLock;
/// let lock = SeqLock::new([1u8, 2, 3]);
/// let mut guard = lock.write();
/// guard.reverse(); // a private copy: readers still see [1, 2, 3]
/// assert_eq!(lock.read(), [1, 2, 3]);
/// drop(guard); // published
/// assert_eq!(lock.read(), [3, 2, 1]);
/// ```
#[must_use = "the new value is published when the guard drops"]
pub struct SeqLockWriteGuard<'a, T: SeqData, G: SpinGuardian = PreemptDisabled> {
    lock: &'a SeqLock<T, G>,
    /// The data being written, with the zero tail that the word stores
    /// cover.
    value: Padded<T>,
    /// What `G::enter` saved, for `G::exit` in `drop`.
    saved: G::Saved,
    /// The interrupt state `write_irqsave` saved, restored in `drop`.
    irq: Option<IrqState>,
    /// Dropped after `drop` has published and unlocked: lockdep's record.
    _dep: Acquired<'a>,
}

impl<T: SeqData, G: SpinGuardian> Deref for SeqLockWriteGuard<'_, T, G> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.value.value
    }
}

impl<T: SeqData, G: SpinGuardian> DerefMut for SeqLockWriteGuard<'_, T, G> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value.value
    }
}

impl<T: SeqData, G: SpinGuardian> Drop for SeqLockWriteGuard<'_, T, G> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard owns the held lock (`SeqLock::guard`'s
        // contract); it is released here, once.
        unsafe {
            self.lock.publish_locked(&self.value);
            self.lock.lock.unlock();
        }
        // The reverse of the entry: interrupts (saved last), then the
        // policy.
        drop(self.irq.take());
        // SAFETY: `saved` is from `G::enter` on this CPU (the guard is
        // `!Send`), before the interrupt state just restored.
        unsafe { G::exit(self.saved) };
    }
}

impl<T: SeqData + fmt::Debug, G: SpinGuardian> fmt::Debug for SeqLockWriteGuard<'_, T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
