//! [`SeqCount`], the bare sequence counter (Linux's `seqcount_t`): the
//! reader's and writer's halves of the protocol with their memory
//! orderings, and [`SeqCountWriteGuard`].

use core::fmt;

use crate::sync::{AtomicU32, Ordering, const_fn, fence, spin_loop};

#[cfg(doc)]
use super::SeqLock;

/// A sequence counter whose writers are serialised by the caller (Linux's
/// `seqcount_t`).
///
/// The data it protects lives elsewhere and must be read and written with
/// atomics (relaxed is enough: the counter orders them), or readers race
/// with writers; [`SeqLock`] packages the counter with its data and lock
/// and does that for you.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::seqlock::SeqCount;
/// use ksync::spinlock::TicketMutex;
///
/// struct Stats {
///     writers: TicketMutex<()>, // serialises the writers
///     seq: SeqCount,
///     packets: AtomicU64,
///     bytes: AtomicU64,
/// }
///
/// static STATS: Stats = Stats {
///     writers: TicketMutex::new(()),
///     seq: SeqCount::new(),
///     packets: AtomicU64::new(0),
///     bytes: AtomicU64::new(0),
/// };
///
/// fn account(len: u64) {
///     let _writer = STATS.writers.lock();
///     // SAFETY: `STATS.writers` is held: no other writer of `STATS.seq`,
///     // and (a spinlock) no preemption until it is released.
///     let _write = unsafe { STATS.seq.write() };
///     STATS.packets.fetch_add(1, Relaxed);
///     STATS.bytes.fetch_add(len, Relaxed);
/// }
///
/// account(1500);
/// account(40);
/// let (packets, bytes) = STATS
///     .seq
///     .read(|| (STATS.packets.load(Relaxed), STATS.bytes.load(Relaxed)));
/// assert_eq!((packets, bytes), (2, 1540));
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): sequence 0, no write in
/// progress.
#[doc(alias = "seqcount_t")]
pub struct SeqCount {
    /// Even: no write in progress. Odd: a writer is between
    /// `write_begin` and `write_end`.
    seq: AtomicU32,
}

impl SeqCount {
    const_fn! {
        /// A counter at zero (no write in progress).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use core::sync::atomic::AtomicU64;
        /// use ksync::seqlock::SeqCount;
        ///
        /// // The timekeeper's clock: a counter next to the words it protects.
        /// struct Clock {
        ///     seq: SeqCount, // const: fine in a static
        ///     ns: AtomicU64,
        /// }
        /// static CLOCK: Clock = Clock { seq: SeqCount::new(), ns: AtomicU64::new(0) };
        /// assert_eq!(CLOCK.seq.sequence(), 0);
        /// ```
        #[doc(alias("seqcount_init", "SEQCNT_ZERO"))]
        pub fn new() -> Self {
            Self { seq: AtomicU32::new(0) }
        }
    }

    /// Starts a read: waits (spins) while a write is in progress and
    /// returns the even sequence number to pass to
    /// [`read_retry`](Self::read_retry).
    ///
    /// Spins forever if it interrupted the writer on this CPU; see the
    /// [module docs](super#interrupts) and
    /// [`try_read_begin`](Self::try_read_begin).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// let start = seq.read_begin();
    /// assert!(!seq.read_retry(start));
    /// ```
    #[doc(alias = "read_seqcount_begin")]
    #[inline]
    pub fn read_begin(&self) -> u32 {
        loop {
            if let Some(start) = self.try_read_begin() {
                return start;
            }
            spin_loop();
        }
    }

    /// Starts a read without waiting: the even sequence number, or `None`
    /// while a write is in progress. Never spins, so it is the one to use
    /// in an interrupt handler that may have interrupted the writer.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// // SAFETY: this is the only writer.
    /// let write = unsafe { seq.write() };
    /// assert_eq!(seq.try_read_begin(), None);
    /// drop(write);
    /// assert_eq!(seq.try_read_begin(), Some(2));
    /// ```
    #[doc(alias = "raw_read_seqcount")]
    #[inline]
    pub fn try_read_begin(&self) -> Option<u32> {
        // R1: Acquire pairs with the Release store in `write_end` (W2): if
        // we read the even value a writer stored there, its data stores are
        // visible to our data loads.
        let start = self.seq.load(Ordering::Acquire);
        (start & 1 == 0).then_some(start)
    }

    /// Ends a read: `true` if a write began since
    /// [`read_begin`](Self::read_begin) returned `start`, so that what
    /// was read in between may be inconsistent and the read must be
    /// retried.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// let start = seq.read_begin();
    /// // SAFETY: this is the only writer.
    /// drop(unsafe { seq.write() });
    /// assert!(seq.read_retry(start));
    /// ```
    #[doc(alias = "read_seqcount_retry")]
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        // R2: the Acquire fence pairs with the Release fence in
        // `write_begin` (W1): if one of our data loads read a store made
        // after a writer's W1, that writer's odd increment happens-before
        // the load below, which then cannot return `start`. It also keeps
        // our data loads from moving below this load.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// Runs `f` until it ran without a write overlapping it, and returns
    /// that run's result.
    ///
    /// `f` may run several times, and runs that overlap a write may see
    /// the data half updated (their results are discarded): it should only
    /// load the protected atomics and compute from them, and must not
    /// panic on an inconsistent combination.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqCount;
    /// let (seq, lo, hi) = (SeqCount::new(), AtomicU32::new(1), AtomicU32::new(2));
    /// assert_eq!(seq.read(|| (lo.load(Relaxed), hi.load(Relaxed))), (1, 2));
    /// ```
    #[inline]
    pub fn read<R>(&self, mut f: impl FnMut() -> R) -> R {
        loop {
            let start = self.read_begin();
            let result = f();
            if !self.read_retry(start) {
                return result;
            }
        }
    }

    /// Starts a write: the sequence becomes odd, so readers wait or retry.
    ///
    /// # Safety
    ///
    /// Writers are serialised: until the matching
    /// [`write_end`](Self::write_end), no other `write_begin` on this
    /// counter runs, and the previous writer's `write_end` happens-before
    /// this call (holding a lock that every writer of this counter holds
    /// across its write section guarantees both).
    ///
    /// Violating it does not corrupt memory by itself, but readers would
    /// accept torn data, and unsafe code (such as [`SeqLock`]'s) relies on
    /// [`read_retry`](Self::read_retry) returning `false` only for
    /// consistent data.
    ///
    /// # Preemption
    ///
    /// The writer must not be preempted until `write_end` (Linux asserts
    /// it in `write_seqcount_begin`): readers spin while the sequence is
    /// odd, so a writer switched out in the middle leaves every reader
    /// that runs meanwhile spinning for a task that cannot run (for ever,
    /// on a CPU whose scheduler waits for them). Hold preemption off from
    /// `write_begin` to `write_end`: a ksync spinlock of the default
    /// policy ([`PreemptDisabled`](crate::spinlock::PreemptDisabled),
    /// [`IrqDisabled`](crate::spinlock::IrqDisabled)) serialising the
    /// writers does; with writers serialised by a sleeping
    /// [`Mutex`](crate::mutex::Mutex), take
    /// [`kernel::preempt_disable`](crate::kernel::preempt_disable) around
    /// the write section, as Linux's `write_seqcount_begin` does itself for
    /// a `seqcount_mutex_t`. (ksync has no counter whose readers take the
    /// writers' mutex instead of spinning, Linux's PREEMPT_RT answer.)
    /// ksync cannot check this (the kernel's hooks do not tell it the
    /// preemption count); [`SeqLock`] keeps it by construction.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqCount;
    /// let (seq, data) = (SeqCount::new(), AtomicU32::new(0));
    /// let no_preemption = ksync::kernel::preempt_disable();
    /// // SAFETY: single-threaded: the only writer; not preemptible.
    /// unsafe { seq.write_begin() };
    /// data.store(5, Relaxed);
    /// // SAFETY: ends the write begun above.
    /// unsafe { seq.write_end() };
    /// drop(no_preemption);
    /// assert_eq!(seq.read(|| data.load(Relaxed)), 5);
    /// ```
    #[doc(alias = "write_seqcount_begin")]
    #[inline]
    pub unsafe fn write_begin(&self) {
        // Relaxed: writers are serialised (the caller's contract), so only
        // this writer changes `seq` now, and the previous writer's stores
        // are visible to it.
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(
            seq & 1 == 0,
            "seqcount: write_begin while a write is in progress (writers not serialised?)"
        );
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // W1: orders the odd store before the data stores that follow;
        // pairs with R2 in `read_retry`.
        fence(Ordering::Release);
    }

    /// Ends a write: the sequence becomes even again.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use ksync::seqlock::SeqCount;
    ///
    /// let (seq, jiffies) = (SeqCount::new(), AtomicU64::new(0));
    /// let no_preemption = ksync::kernel::preempt_disable();
    /// // SAFETY: the only writer here; not preemptible.
    /// unsafe { seq.write_begin() };
    /// jiffies.fetch_add(1, Relaxed);
    /// // SAFETY: ends the write begun above: readers may succeed again.
    /// unsafe { seq.write_end() };
    /// drop(no_preemption);
    /// assert_eq!(seq.sequence() % 2, 0);
    /// ```
    ///
    /// # Safety
    ///
    /// The caller began this write with [`write_begin`](Self::write_begin)
    /// and still serialises writers.
    #[doc(alias = "write_seqcount_end")]
    #[inline]
    pub unsafe fn write_end(&self) {
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(seq & 1 == 1, "seqcount: write_end without write_begin");
        // W2: Release orders the data stores before the even value; pairs
        // with R1 in `try_read_begin`.
        self.seq.store(seq.wrapping_add(1), Ordering::Release);
    }

    /// [`write_begin`](Self::write_begin) now and
    /// [`write_end`](Self::write_end) when the guard drops.
    ///
    /// # Safety
    ///
    /// As for [`write_begin`](Self::write_begin) (writers serialised, and
    /// not preemptible), for the guard's whole life. (Leaking the guard
    /// leaves the sequence odd: readers spin forever.)
    ///
    /// See [`SeqCount`] for an example.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use ksync::seqlock::SeqCount;
    /// use ksync::spinlock::TicketMutex;
    ///
    /// static XTIME_LOCK: TicketMutex<()> = TicketMutex::new(()); // serialises writers
    /// static SEQ: SeqCount = SeqCount::new();
    /// static SEC: AtomicU64 = AtomicU64::new(0);
    /// static NSEC: AtomicU64 = AtomicU64::new(0);
    ///
    /// let _writer = XTIME_LOCK.lock();
    /// // SAFETY: the writers' spinlock is held: one writer, no preemption.
    /// let write = unsafe { SEQ.write() }; // the sequence is odd: readers retry
    /// SEC.store(1, Relaxed);
    /// NSEC.store(500, Relaxed);
    /// drop(write); // even again
    /// ```
    #[inline]
    pub unsafe fn write(&self) -> SeqCountWriteGuard<'_> {
        // SAFETY: forwarded caller contract.
        unsafe { self.write_begin() };
        SeqCountWriteGuard { seq: self }
    }

    /// The raw sequence number: a snapshot, stale at once, for statistics
    /// and debugging (use [`read_begin`](Self::read_begin) to read).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::seqlock::SeqCount;
    ///
    /// let seq = SeqCount::new();
    /// # let no_preemption = ksync::kernel::preempt_disable();
    /// // SAFETY: the only writer; not preemptible (hidden above).
    /// drop(unsafe { seq.write() });
    /// # drop(no_preemption);
    /// assert_eq!(seq.sequence(), 2); // one write so far: +1 to begin, +1 to end
    /// ```
    #[inline]
    pub fn sequence(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }
}

impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SeqCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeqCount")
            .field("seq", &self.sequence())
            .finish()
    }
}

/// A write section of a [`SeqCount`]; ends it on drop (see
/// [`SeqCount::write`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// # use ksync::seqlock::SeqCount;
/// let seq = SeqCount::new();
/// {
///     // SAFETY: single-threaded: the only writer.
///     let _write = unsafe { seq.write() };
///     assert_eq!(seq.sequence(), 1); // odd: readers wait
/// }
/// assert_eq!(seq.sequence(), 2);
/// ```
#[must_use = "the write section ends when the guard drops"]
pub struct SeqCountWriteGuard<'a> {
    seq: &'a SeqCount,
}

impl Drop for SeqCountWriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `SeqCount::write` began this write, under the caller's
        // promise to serialise writers for the guard's life.
        unsafe { self.seq.write_end() }
    }
}

impl fmt::Debug for SeqCountWriteGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeqCountWriteGuard")
            .field("seq", &self.seq.sequence())
            .finish()
    }
}
