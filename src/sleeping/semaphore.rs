//! A counting semaphore that sleeps (Linux's `struct semaphore`):
//! [`down`](Semaphore::down) takes a unit or sleeps until
//! [`up`](Semaphore::up) hands it one.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::semaphore::Semaphore;
//!
//! static SLOTS: Semaphore = Semaphore::new(2); // two at a time
//!
//! let workers: Vec<_> = (0..4)
//!     .map(|_| {
//!         std::thread::spawn(|| {
//!             SLOTS.down();
//!             // ... at most two threads here ...
//!             SLOTS.up();
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! assert_eq!(SLOTS.count(), 2);
//! # }
//! ```
//!
//! # Hand-off
//!
//! An `up` with waiters queued does not raise the count: it hands the unit
//! to the first waiter (Linux's `__up`), so a stream of `down` calls that
//! find the count positive cannot overtake a sleeping waiter for ever, and
//! waiters are served in FIFO order. A waiter whose timeout races a
//! hand-off keeps the unit (the `down` succeeds); an async waiter
//! cancelled after a hand-off gives it back.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use crate::sync::{AtomicUsize, Ordering};
use crate::wait::{self, GRANTED, Locked, Node, Queued, WaitQueue};

/// Units and waiters: the core of [`Semaphore`] and
/// [`Completion`](crate::completion::Completion). `count` changes only
/// under the queue's lock and is positive only while nobody waits;
/// [`ALL`] is a count that taking never lowers (`complete_all`).
pub(crate) struct Units {
    count: AtomicUsize,
    /// Bumped by [`set`](Self::set) (a completion's `reinit`), under the
    /// queue lock: a hand-off records it in the waiter's node (its tag),
    /// and a cancelled async waiter gives its unit back only if it is
    /// still the same, so a grant from before `reinit` never comes back
    /// after it.
    generation: AtomicUsize,
    queue: WaitQueue,
}

/// A count that is never used up.
pub(crate) const ALL: usize = usize::MAX;

impl Units {
    crate::sync::const_fn! {
        pub(crate) fn new(count: usize) -> Self {
            Units {
                count: AtomicUsize::new(count),
                generation: AtomicUsize::new(0),
                queue: WaitQueue::new(),
            }
        }
    }

    /// The count now (a snapshot; Relaxed: it says nothing of other data).
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Takes a unit under the lock if there is one.
    fn take_locked(&self, _locked: &Locked<'_>) -> bool {
        // Relaxed: the count changes only under the queue lock, held here.
        match self.count.load(Ordering::Relaxed) {
            0 => false,
            ALL => true,
            n => {
                self.count.store(n - 1, Ordering::Relaxed);
                true
            }
        }
    }

    /// Takes a unit if one is there without waiting.
    pub(crate) fn try_take(&self) -> bool {
        let locked = self.queue.lock();
        self.take_locked(&locked)
    }

    /// Takes a unit, sleeping until one is handed over or `deadline_ns`
    /// passes; whether it got one.
    #[track_caller]
    pub(crate) fn take(&self, deadline_ns: Option<u64>) -> bool {
        let mut locked = self.queue.lock();
        if self.take_locked(&locked) {
            return true;
        }
        drop(locked);
        wait::might_sleep_slow();
        locked = self.queue.lock();
        if self.take_locked(&locked) {
            return true;
        }
        let node = Node::new();
        let _queued = Queued {
            queue: &self.queue,
            node: &node,
        };
        // SAFETY: `node` stays put and `_queued` takes it off the queue
        // before it goes away; it is new.
        unsafe { locked.enqueue(&node, true, 0, None, false) };
        drop(locked);
        // Only hand-offs wake these waiters: GRANTED, or WAITING when the
        // deadline passed first (and the node is off the queue).
        self.queue.sleep(&node, deadline_ns) == GRANTED
    }

    /// Gives `n` units back ([`ALL`]: the count is never used up again,
    /// [`give_all`](Self::give_all)): to the waiters first, in queue
    /// order, then to the count, which saturates at `ALL - 1` (a
    /// completion's "done" count, Linux's). A panic
    /// from a waiter's `Waker` (past a batch of wakes) ends it with the
    /// units not yet handed over lost.
    pub(crate) fn give(&self, n: usize) {
        self.give_inner(n, false);
    }

    /// [`give`](Self::give) for a semaphore's `up`: a count that would
    /// pass `ALL - 1` is a panic naming it and the limit (the count left
    /// as it was), not a unit silently lost.
    pub(crate) fn give_checked(&self, n: usize) {
        self.give_inner(n, true);
    }

    fn give_inner(&self, n: usize, checked: bool) {
        if n == ALL {
            self.give_all();
            return;
        }
        let mut locked = self.queue.lock();
        let mut left = n;
        while left > 0 {
            if locked.batch_full() {
                // More waiters than one batch of wakes: wake these, then
                // go on with the front of the queue as it is then (a
                // waiter that came meanwhile queued at the back).
                locked.relock();
            }
            let Some(node) = first_not_granted(&mut locked) else {
                break;
            };
            // SAFETY: queued, so valid until taken off, which `wake` does;
            // its memory stays valid through `wake` (its owner waits for
            // the waker to be done with it: `Node::state`).
            let node = unsafe { &*node };
            // Relaxed: under the lock, as every access to it.
            locked.set_tag(node, self.generation.load(Ordering::Relaxed));
            locked.wake(node, GRANTED);
            left -= 1;
        }
        if left > 0 {
            // Relaxed: under the lock.
            let count = self.count.load(Ordering::Relaxed);
            if count != ALL {
                match count.checked_add(left).filter(|&new| new < ALL) {
                    Some(new) => self.count.store(new, Ordering::Relaxed),
                    None if !checked => self.count.store(ALL - 1, Ordering::Relaxed),
                    None => {
                        drop(locked);
                        count_overflow(count, left);
                    }
                }
            }
        }
    }

    /// `complete_all`: the count becomes [`ALL`] and every waiter queued
    /// now is handed a unit, as Linux's `complete_all` (`done = UINT_MAX`,
    /// then all waiters woken under the lock). The grants are made at
    /// once, under the lock ([`Locked::grant`]); the wakes go in batches,
    /// the lock dropped between them. Meanwhile the granted waiters stay
    /// queued but are no one else's: a `complete` (after a woken task's
    /// `reinit`: the count 0, a new generation) passes them by and goes
    /// to a waiter queued since, or to the count; a timed waiter whose
    /// deadline passes leaves as granted; an async one polled leaves
    /// ready. `complete_all` does not store `ALL` again. A waiter's
    /// `Waker` that panics does not stop it: the other waiters are woken
    /// as the panic unwinds.
    fn give_all(&self) {
        let mut locked = self.queue.lock();
        // Relaxed: under the lock.
        self.count.store(ALL, Ordering::Relaxed);
        let generation = self.generation.load(Ordering::Relaxed);
        let mut cursor = locked.front().map(|(node, _, _)| node as *const Node);
        while let Some(node) = cursor {
            // SAFETY: queued, so valid while the lock is held.
            let node = unsafe { &*node };
            locked.set_tag(node, generation);
            locked.grant(node);
            cursor = locked.next(node).map(|(node, _, _)| node as *const Node);
        }
        let mut all = GiveAll { locked };
        all.wake();
        // `all` drops: its `wake` finds nothing left, then the last
        // batch's wakes.
    }
    /// Sets the count (no waiter must be queued for it to mean much).
    /// A new generation: grants made before are not given back by
    /// cancelled waiters.
    pub(crate) fn set(&self, count: usize) {
        let _locked = self.queue.lock();
        self.count.store(count, Ordering::Relaxed);
        // Relaxed: under the lock.
        let generation = self.generation.load(Ordering::Relaxed);
        self.generation
            .store(generation.wrapping_add(1), Ordering::Relaxed);
    }

    /// A future that takes a unit.
    pub(crate) fn take_async(&self) -> Take<'_> {
        Take {
            units: self,
            node: Node::new(),
            queued: false,
            done: false,
        }
    }
}

/// A give past the count's limit: bad input, answered clearly (a unit
/// lost silently would be a semaphore that admits one task too few).
#[cold]
#[inline(never)]
#[track_caller]
fn count_overflow(count: usize, n: usize) -> ! {
    panic!(
        "ksync: Semaphore::up with the count at {count}: \
         {n} more passes its limit of {} (usize::MAX - 1)",
        ALL - 1
    )
}

/// The first waiter not [granted](Locked::grant) its unit already (by a
/// `complete_all` whose wakes are under way).
fn first_not_granted(locked: &mut Locked<'_>) -> Option<*const Node> {
    let mut cursor = locked.front().map(|(node, _, _)| node as *const Node);
    while let Some(node) = cursor {
        // SAFETY: queued, so valid while the lock is held.
        let node = unsafe { &*node };
        if !locked.is_granted(node) {
            return Some(node);
        }
        cursor = locked.next(node).map(|(node, _, _)| node as *const Node);
    }
    None
}

/// The waiters granted by a `complete_all` ([`Units::give_all`]) being
/// woken: whatever is left when it drops (a `Waker` panicked) is woken
/// then, as the panic unwinds.
struct GiveAll<'a> {
    locked: Locked<'a>,
}

impl GiveAll<'_> {
    /// Wakes the granted waiters at the front of the queue (those of this
    /// `complete_all`, or of one that began later). Waiters queue at the
    /// back: those queued since the grants (after a `reinit`) are behind
    /// them, and not granted.
    fn wake(&mut self) {
        loop {
            if self.locked.batch_full() {
                self.locked.relock();
            }
            let Some((node, _, _)) = self.locked.front() else {
                return;
            };
            let node: *const Node = node;
            // SAFETY: queued, so valid until taken off, which `wake` does;
            // its memory stays valid through `wake` (its owner waits for
            // the waker to be done with it: `Node::state`).
            let node = unsafe { &*node };
            if !self.locked.is_granted(node) {
                return;
            }
            self.locked.wake(node, GRANTED);
        }
    }
}

impl Drop for GiveAll<'_> {
    fn drop(&mut self) {
        // Nothing left, unless a `Waker` panicked in `wake` (at a
        // `relock`, which took the lock again).
        self.wake();
    }
}

/// Future of an async `down`: ready once it holds a unit. Dropped after a
/// hand-off and before it completed, it gives the unit back.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::semaphore::Semaphore;
///
/// let slots = Semaphore::new(0);
/// let mut cx = Context::from_waker(Waker::noop());
/// {
///     let mut take = pin!(slots.down_async());
///     assert!(take.as_mut().poll(&mut cx).is_pending()); // queued
/// } // dropped: cancelled, off the queue, nothing taken
/// slots.up();
/// assert_eq!(slots.count(), 1);
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Take<'a> {
    units: &'a Units,
    node: Node,
    queued: bool,
    done: bool,
}

impl core::fmt::Debug for Take<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Take")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Future for Take<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing moves out of the future; `node` stays put until
        // the future drops, which takes it off the queue.
        let this = unsafe { self.get_unchecked_mut() };
        if this.done {
            return Poll::Ready(());
        }
        let mut locked = this.units.queue.lock();
        if this.queued {
            if this.node.state() == GRANTED {
                this.done = true;
                return Poll::Ready(());
            }
            if locked.is_granted(&this.node) {
                // Granted by a `complete_all` whose wake is yet to come:
                // done now, off the queue (the wake passes it by).
                locked.remove(&this.node);
                this.done = true;
                return Poll::Ready(());
            }
            // Still queued: a hand-off wakes the newest waker. The one it
            // replaces is dropped after the unlock (executor code).
            let old = locked.set_waker(&this.node, cx.waker());
            drop(locked);
            drop(old);
            return Poll::Pending;
        }
        if this.units.take_locked(&locked) {
            this.done = true;
            return Poll::Ready(());
        }
        // SAFETY: the node is pinned inside the pinned future and `Drop`
        // takes it off the queue; it is not queued.
        unsafe { locked.enqueue(&this.node, true, 0, Some(cx.waker()), false) };
        this.queued = true;
        Poll::Pending
    }
}

impl Drop for Take<'_> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let mut locked = self.units.queue.lock();
        if !locked.remove(&self.node)
            && !self.done
            && self.node.state() == GRANTED
            // Relaxed: under the lock, as the grant's store of the tag.
            && locked.tag(&self.node) == self.units.generation.load(Ordering::Relaxed)
        {
            // Handed a unit and cancelled before it saw it: give it on
            // (unless a completion's `reinit` undid it since).
            drop(locked);
            self.units.give(1);
        }
    }
}

/// A counting semaphore whose waiters sleep (Linux's `struct semaphore`).
/// See the [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::semaphore::Semaphore;
///
/// // A pool of four DMA buffers: a driver sleeps while all are in flight.
/// static DMA_BUFFERS: Semaphore = Semaphore::new(4);
///
/// DMA_BUFFERS.down();
/// // ... fill a buffer and start the transfer ...
/// DMA_BUFFERS.up(); // the transfer's end gives the buffer back
/// # }
/// ```
pub struct Semaphore {
    units: Units,
}

impl core::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Semaphore")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    crate::sync::const_fn! {
        /// A semaphore with `count` units (Linux's `sema_init`). At most
        /// `usize::MAX - 1`.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::semaphore::Semaphore;
        ///
        /// static FW_LOAD: Semaphore = Semaphore::new(1); // Linux's DEFINE_SEMAPHORE
        /// let tx_slots = Semaphore::new(8);
        /// assert_eq!((FW_LOAD.count(), tx_slots.count()), (1, 8));
        /// # }
        /// ```
        #[doc(alias = "sema_init")]
        #[must_use]
        pub fn new(count: usize) -> Self {
            assert!(count < ALL, "ksync: a semaphore's count must be below usize::MAX");
            Semaphore {
                units: Units::new(count),
            }
        }
    }

    /// Takes a unit, sleeping until one is free (Linux's `down`).
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// on every call in debug builds, when it would have to sleep in
    /// release builds.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::semaphore::Semaphore;
    ///
    /// static CMD_SLOTS: Semaphore = Semaphore::new(0);
    ///
    /// // The controller's "command done" interrupt frees a slot.
    /// let irq = std::thread::spawn(|| CMD_SLOTS.up());
    /// CMD_SLOTS.down(); // sleeps until the `up`
    /// irq.join().unwrap();
    /// assert_eq!(CMD_SLOTS.count(), 0);
    /// # }
    /// ```
    #[track_caller]
    pub fn down(&self) {
        wait::might_sleep_entry();
        self.units.take(None);
    }

    /// Takes a unit if one is free now (Linux's `down_trylock`, which
    /// returns the opposite): whether it did. Never sleeps.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::semaphore::Semaphore;
    ///
    /// let rx_buffers = Semaphore::new(1);
    /// // In the receive interrupt, which must not sleep:
    /// assert!(rx_buffers.try_down()); // got a buffer
    /// assert!(!rx_buffers.try_down()); // none left: drop the packet
    /// rx_buffers.up();
    /// # }
    /// ```
    #[doc(alias = "down_trylock")]
    #[must_use = "true means a unit was taken and must be given back with `up`"]
    pub fn try_down(&self) -> bool {
        self.units.try_take()
    }

    /// [`down`](Self::down) for at most `timeout` (Linux's
    /// `down_timeout`): whether it took a unit. Needs
    /// [`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::time::Duration;
    /// use ksync::semaphore::Semaphore;
    ///
    /// let mailbox = Semaphore::new(1);
    /// assert!(mailbox.down_timeout(Duration::from_millis(100))); // free: at once
    /// // Held: give up once the (here zero) timeout has passed.
    /// assert!(!mailbox.down_timeout(Duration::ZERO));
    /// mailbox.up();
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "true means a unit was taken and must be given back with `up`"]
    pub fn down_timeout(&self, timeout: Duration) -> bool {
        wait::might_sleep_entry();
        self.units.try_take() || self.units.take(Some(wait::deadline(timeout)))
    }

    /// Takes a unit, as a future (no executor assumed): the async form of
    /// [`down`](Self::down), on the same queue.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::semaphore::Semaphore;
    ///
    /// let slots = Semaphore::new(0);
    /// let mut cx = Context::from_waker(Waker::noop()); // an executor's waker
    /// let mut down = pin!(slots.down_async());
    /// assert!(down.as_mut().poll(&mut cx).is_pending()); // queued
    /// slots.up(); // hands the unit to the queued future and wakes it
    /// assert!(down.as_mut().poll(&mut cx).is_ready());
    /// assert_eq!(slots.count(), 0);
    /// # }
    /// ```
    pub fn down_async(&self) -> Take<'_> {
        self.units.take_async()
    }

    /// Gives a unit back (Linux's `up`): to the first waiter if there is
    /// one, otherwise to the count. Never sleeps; callable from interrupt
    /// handlers.
    ///
    /// # Panics
    /// If the count is already `usize::MAX - 1`, its limit (an unbalanced
    /// `up`; the count is left as it was).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::semaphore::Semaphore;
    ///
    /// let free_descriptors = Semaphore::new(0);
    /// // The NIC's completion interrupt returns two descriptors:
    /// free_descriptors.up();
    /// free_descriptors.up();
    /// assert_eq!(free_descriptors.count(), 2);
    /// # }
    /// ```
    pub fn up(&self) {
        self.units.give_checked(1);
    }

    /// The units free now (a snapshot).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::semaphore::Semaphore;
    ///
    /// let pool = Semaphore::new(3);
    /// pool.down();
    /// assert_eq!(pool.count(), 2); // for statistics: stale at once
    /// pool.up();
    /// # }
    /// ```
    #[must_use]
    pub fn count(&self) -> usize {
        self.units.count()
    }
}
