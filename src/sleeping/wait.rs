//! Wait queues: tasks, and async tasks, sleeping until a condition holds
//! (Linux's `wait_queue_head_t`, `wait_event` and `wake_up`).
//!
//! A [`WaitQueue`] is a spinlock (interrupts off while held, so handlers
//! may wake) and an intrusive FIFO list of waiters. A waiter is a node on
//! the waiting task's stack (or inside its future), pinned while queued:
//! no allocation. It sleeps through the kernel's scheduler hooks
//! ([`Kernel::block`](crate::kernel::Kernel::block),
//! [`Kernel::wake`](crate::kernel::Kernel::wake), the task's token from
//! [`Kernel::current_task`](crate::kernel::Kernel::current_task)); in a
//! kernel without them the defaults make a waiter busy-wait, which is
//! correct and only slower. An async waiter keeps a
//! [`Waker`] in its node instead: one queue serves
//! blocking tasks and `.await` alike, with no executor assumed.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use core::sync::atomic::{AtomicBool, Ordering};
//! use ksync::wait::WaitQueue;
//!
//! static READY: AtomicBool = AtomicBool::new(false);
//! static QUEUE: WaitQueue = WaitQueue::new();
//!
//! let waiter = std::thread::spawn(|| QUEUE.wait_event(|| READY.load(Ordering::Acquire)));
//! READY.store(true, Ordering::Release); // make the condition true...
//! QUEUE.wake_all(); // ...then wake: the waiter re-checks it
//! waiter.join().unwrap();
//! # }
//! ```
//!
//! # No lost wake-ups
//!
//! `wait_event(cond)` checks `cond`, enqueues its node, and checks `cond`
//! again before it sleeps (Linux's `prepare_to_wait` then the check). A
//! waker makes the condition true *before* it calls `wake_*`, so either the
//! waiter's second check sees it, or the node was queued before the wake
//! and the wake marks it (under the queue lock) and calls the kernel's
//! `wake` on its task, which makes a `block` that has not started yet
//! return at once (the hook's contract).
//!
//! Every wake, of a blocked task (the kernel's `wake`) or of a future
//! (its [`Waker`]), is made after the queue lock is dropped (Linux's
//! `wake_q`, maitake-sync's `WakeBatch`): under the lock the waker only
//! takes the node off the queue, marks it woken and notes the wake in a
//! fixed batch on its stack (no allocation). A `Waker` may run any code,
//! drop the future it wakes (whose drop takes this queue's lock), or take
//! other wait queues' locks; none of it runs under this one. A wake of
//! more waiters than the batch holds (eight) drops the lock,
//! makes the batch's wakes and takes the lock again, in rounds, waking
//! in queue order and only the waiters queued when it began.
//!
//! For a blocked task, the waker marks the node woken with a "wake
//! pending" bit under the lock, and clears the bit (Release) once `wake`
//! returned. A waiter that sees its node woken waits (spinning: the waker
//! runs with preemption disabled until it is done) for the bit to clear
//! (Acquire) before it returns or reuses the node, so the node and the
//! task token outlive the waker's use of them; it does not take the
//! queue lock to learn that. An async waiter's `Waker` is the waker's own
//! once it is taken out of the node: the future may go away at once.
//!
//! # Exclusive waiters
//!
//! Waiters are woken in FIFO order. An *exclusive* waiter
//! ([`wait_event_exclusive`](WaitQueue::wait_event_exclusive)) is one of
//! several where one wake is enough (the next lock holder): `wake_one`
//! wakes every non-exclusive waiter and the first exclusive one,
//! `wake_n(n)` the first `n` exclusive ones (`wake_n(0)`: all, as
//! Linux's `nr_exclusive` of 0), `wake_all` all (Linux's
//! `wake_up`, `wake_up_nr`, `wake_up_all`). A woken waiter is off the
//! queue; one whose condition is false again queues at the back.
//!
//! # Where waits may happen
//!
//! Every blocking wait calls [`might_sleep`], in debug builds on entry
//! (whether or not it will have to sleep, as Linux), in release builds
//! before it sleeps: it panics in an interrupt handler or wherever
//! [`Kernel::may_sleep`](crate::kernel::Kernel::may_sleep) says no, inside
//! an RCU read section on this CPU (a sleep is a context switch, which
//! would end a grace period under the reader; every build), and in debug
//! builds inside a `call_rcu` callback, with preemption disabled through
//! ksync (a spinlock, a per-CPU reference, `preempt_disable`) and with
//! interrupts masked; with `lockdep` it reports spinlocks held by name.
//! Waking never sleeps: `wake_*` may be called anywhere, interrupt
//! handlers included.

use core::future::Future;
use core::marker::PhantomPinned;
use core::mem::MaybeUninit;
use core::pin::Pin;
use core::ptr;
use core::task::{Context, Poll, Waker};
use core::time::Duration;

use crate::kernel;
use crate::spinlock::Spin;
#[cfg(not(ksync_loom))]
use crate::spinlock::{IrqDisabled, RawSpinlock, TicketLock};
use crate::sync::{AtomicUsize, Ordering, UnsafeCell, const_fn};

/// In [`Node::state`]: queued, not woken.
pub(crate) const WAITING: usize = 0;
/// In [`Node::state`]: woken (taken off the queue); re-check the condition.
pub(crate) const WOKEN: usize = 1;
/// In [`Node::state`]: woken and handed what it waited for (a lock, a
/// semaphore unit) by the waker: the primitives' hand-off.
pub(crate) const GRANTED: usize = 2;
/// In [`Node::state`], beside [`WOKEN`] or [`GRANTED`]: the waker has yet
/// to call the kernel's `wake` with the node's task token (it does so after
/// it dropped the queue lock). Never seen through [`Node::state`].
const PENDING: usize = 4;
/// How many wakes a [`Locked`] holds until the lock is dropped: 8 (about
/// 200 bytes on the waker's stack). A primitive that wakes more drops the
/// lock and takes it again between batches ([`Locked::relock`]).
pub(crate) const WAKE_BATCH: usize = 8;

/// A wake noted under the queue lock, made after it is dropped.
enum Deferred {
    /// A blocked task: its node (marked [`PENDING`]) and token.
    Task(*const Node, usize),
    /// An async waiter's waker, taken out of its node.
    Async(Waker),
}

/// How a queued waiter is woken.
enum Wake {
    /// Not queued yet.
    None,
    /// A blocked task: the kernel's token.
    Task(usize),
    /// An async task (`None` once a wake took it).
    Async(Option<Waker>),
}

/// Fields of a [`Node`] that only the queue lock's holder touches.
struct Links {
    prev: *const Node,
    next: *const Node,
    linked: bool,
    exclusive: bool,
    /// What the primitive on the queue needs to know of the waiter (a
    /// reader or a writer, say).
    tag: usize,
    /// The queue's enqueue count when it was queued: a wake of many
    /// leaves those queued after it began alone.
    seq: usize,
    /// Handed what it waits for while still queued, its wake to come
    /// ([`Locked::grant`]); cleared when it leaves the queue.
    granted: bool,
    wake: Wake,
}

/// A waiter: lives on the waiting task's stack or in its future, pinned
/// while queued, and off the queue before it goes away.
pub(crate) struct Node {
    links: UnsafeCell<Links>,
    /// [`WAITING`], [`WOKEN`] or [`GRANTED`] (with [`PENDING`] while the
    /// waker still has the task to wake): stored by the queue lock's holder
    /// (Release, before it wakes the task), read by the waiter without the
    /// lock (Acquire: what the waker did before is visible).
    state: AtomicUsize,
    _pin: PhantomPinned,
}

// SAFETY: `links` is touched only under the queue lock (`Locked`), by
// whichever CPU holds it; `state` is atomic. The `Waker` inside is `Send`
// and `Sync`.
unsafe impl Sync for Node {}
// SAFETY: as above; a node is moved only while it is not queued.
unsafe impl Send for Node {}

impl Node {
    pub(crate) fn new() -> Self {
        Node {
            links: UnsafeCell::new(Links {
                prev: ptr::null(),
                next: ptr::null(),
                linked: false,
                exclusive: false,
                tag: 0,
                seq: 0,
                granted: false,
                wake: Wake::None,
            }),
            state: AtomicUsize::new(WAITING),
            _pin: PhantomPinned,
        }
    }

    /// The state a waker left, once the waker is done with the node (it
    /// waits while [`PENDING`] is set). Acquire: pairs with the waker's
    /// Release store in [`Locked::wake`] (what it did before the wake is
    /// visible) and with the Release that clears `PENDING` (its last use
    /// of the node and of the task token came before).
    #[inline]
    pub(crate) fn state(&self) -> usize {
        let state = self.state.load(Ordering::Acquire);
        if state & PENDING == 0 {
            return state;
        }
        self.settled_state()
    }

    /// [`state`](Self::state) while the waker is between its unlock and
    /// the end of the kernel's `wake`, with preemption disabled: a short
    /// wait, but one that gives the CPU away as a spinlock waiter does
    /// (on a host, the waker may be descheduled anyway).
    #[cold]
    fn settled_state(&self) -> usize {
        let mut backoff = kernel::Backoff::new();
        loop {
            backoff.backoff::<Spin>();
            // Acquire: as in `state`.
            let state = self.state.load(Ordering::Acquire);
            if state & PENDING == 0 {
                return state;
            }
        }
    }

    /// The waker's end of a deferred wake: wakes `task` (this node's) and
    /// then lets the node's owner go on (Release: pairs with the Acquire
    /// in [`state`](Self::state); the node is not touched after it).
    fn finish_wake(&self, task: usize) {
        kernel::wake(task);
        self.state.fetch_and(!PENDING, Ordering::Release);
        // A waiter in `settled_state` may have given its CPU away.
        kernel::kick_waiters();
    }
}

/// The queue's lock: a ticket spinlock with interrupts off.
#[cfg(not(ksync_loom))]
type QueueLock = RawSpinlock<TicketLock<Spin>, IrqDisabled>;

/// Under loom, the queue's lock is a blocking lock: a contended taker
/// waits without spinning. The wait-queue models are about the protocol
/// around the lock, and every spin round of a waiter on the ticket lock
/// is a point where loom tries every other thread: with three threads
/// taking the queue lock, the models ran for minutes on that alone. The
/// ticket lock itself has its own models (`tests/loom.rs`). Loom models
/// have no interrupts, so nothing is masked here.
#[cfg(ksync_loom)]
struct QueueLock {
    held: loom::sync::Mutex<bool>,
    freed: loom::sync::Condvar,
}

#[cfg(ksync_loom)]
impl QueueLock {
    fn with_relax() -> Self {
        QueueLock {
            held: loom::sync::Mutex::new(false),
            freed: loom::sync::Condvar::new(),
        }
    }

    fn lock(&self) {
        let mut held = self.held.lock().unwrap();
        while *held {
            held = self.freed.wait(held).unwrap();
        }
        *held = true;
    }

    /// # Safety
    /// Held by the caller (as the spinlock's `unlock`).
    unsafe fn unlock(&self) {
        *self.held.lock().unwrap() = false;
        self.freed.notify_one();
    }
}

/// A queue of sleeping tasks (Linux's `wait_queue_head_t`). See the
/// [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use ksync::wait::WaitQueue;
///
/// // A UART's receive buffer: readers sleep until bytes arrive.
/// struct Uart {
///     rx_count: AtomicUsize,
///     rx_wait: WaitQueue,
/// }
/// let uart = Uart { rx_count: AtomicUsize::new(0), rx_wait: WaitQueue::new() };
/// std::thread::scope(|s| {
///     s.spawn(|| uart.rx_wait.wait_event(|| uart.rx_count.load(Ordering::Acquire) > 0));
///     uart.rx_count.store(1, Ordering::Release); // the receive interrupt...
///     uart.rx_wait.wake_one(); // ...then wakes the reader
/// });
/// # }
/// ```
pub struct WaitQueue {
    /// Interrupts off while held: handlers wake.
    lock: QueueLock,
    /// Head and tail of the FIFO list, under `lock`.
    ends: UnsafeCell<(*const Node, *const Node)>,
    /// Enqueues so far (wrapping), under `lock`: each node's `seq`.
    seq: UnsafeCell<usize>,
}

// SAFETY: the list is touched only under `lock`; its nodes are `Sync`.
unsafe impl Sync for WaitQueue {}
// SAFETY: as above; the pointers are into pinned nodes of other tasks,
// which the queue does not own.
unsafe impl Send for WaitQueue {}

impl Default for WaitQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for WaitQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WaitQueue").finish_non_exhaustive()
    }
}

/// The queue lock held: the list is this context's. Wakes made under it
/// are done when it drops, after the unlock (or at a
/// [`relock`](Locked::relock)).
pub(crate) struct Locked<'q> {
    queue: &'q WaitQueue,
    /// The first `deferred` entries are initialized: the wakes to make
    /// after the unlock, in queue order.
    wakes: [MaybeUninit<Deferred>; WAKE_BATCH],
    deferred: usize,
}

impl Drop for Locked<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.deferred == 0 {
            // SAFETY: taken by `WaitQueue::lock` (or `relock`) in this
            // context.
            unsafe { self.queue.lock.unlock() }
            return;
        }
        self.unlock_and_wake();
    }
}

impl Locked<'_> {
    /// Whether the batch of deferred wakes is full: a primitive that has
    /// more to wake calls [`relock`](Self::relock) first.
    #[inline]
    pub(crate) fn batch_full(&self) -> bool {
        self.deferred == WAKE_BATCH
    }

    /// How many more wakes the batch holds.
    #[inline]
    pub(crate) fn room(&self) -> usize {
        WAKE_BATCH - self.deferred
    }

    /// Drops the queue lock, makes the wakes noted so far, and takes the
    /// lock again (a new batch). The queue may have changed meanwhile:
    /// the caller looks at it afresh.
    ///
    /// Panic-safe: if a `Waker` panics, the batch's other wakes are made
    /// (see [`unlock_and_wake`](Self::unlock_and_wake)) and the lock is
    /// taken again before the panic goes on, so this guard still holds
    /// it (and its drop releases it once). The caller's wakes past the
    /// batch are cut short by the panic unless it guards them too (as
    /// `complete_all` does).
    #[cold]
    pub(crate) fn relock(&mut self) {
        /// Takes the queue lock again, on the way out or unwinding.
        struct Retake<'a>(&'a QueueLock);
        impl Drop for Retake<'_> {
            fn drop(&mut self) {
                self.0.lock();
            }
        }
        let retake = Retake(&self.queue.lock);
        self.unlock_and_wake();
        drop(retake);
    }

    /// Drops the queue lock and makes the deferred wakes, in queue order.
    /// The blocked tasks' wakes run with preemption disabled from before
    /// the unlock, so that their waiters, which wait for the end of them,
    /// do not wait for this task to be scheduled; then the `Waker`s, with
    /// nothing held. If a `Waker` panics, the batch's later `Waker`s are
    /// still woken as the panic unwinds (a second panic among them aborts,
    /// as any panic while unwinding); the blocked tasks' wakes are made
    /// first, so no waiter is left waiting for its pending bit.
    #[cold]
    fn unlock_and_wake(&mut self) {
        let n = core::mem::replace(&mut self.deferred, 0);
        kernel::preempt_disable_hook();
        // SAFETY: taken by `WaitQueue::lock` (or `relock`) in this context.
        unsafe { self.queue.lock.unlock() }
        for entry in &self.wakes[..n] {
            // SAFETY: the first `n` entries are initialized; a task entry
            // is plain data, read in place.
            if let Deferred::Task(node, task) = unsafe { entry.assume_init_ref() } {
                // SAFETY: a node marked PENDING stays valid until the bit
                // is cleared (its owner waits for that in `Node::state`),
                // which `finish_wake` does last.
                unsafe { &**node }.finish_wake(*task);
            }
        }
        kernel::preempt_enable_hook();
        let mut rest = AsyncWakes {
            wakes: &mut self.wakes[..n],
            next: 0,
        };
        while let Some(waker) = rest.next_waker() {
            waker.wake();
        }
    }

    /// Notes a wake to make after the unlock.
    fn defer(&mut self, wake: Deferred) {
        debug_assert!(
            !self.batch_full(),
            "ksync: a wait-queue wake past the batch (call relock first)"
        );
        if self.batch_full() {
            // Not reached (every caller makes room); if it were, the wake
            // is made under the lock rather than lost.
            match wake {
                Deferred::Task(node, task) => {
                    // SAFETY: as in `run_wakes`.
                    unsafe { &*node }.finish_wake(task)
                }
                Deferred::Async(waker) => waker.wake(),
            }
            return;
        }
        self.wakes[self.deferred].write(wake);
        self.deferred += 1;
    }
}

/// The `Waker`s of a batch not woken yet: if one panics, the others are
/// woken as the panic unwinds (when this drops).
struct AsyncWakes<'w> {
    /// Initialized, each read once: those before `next` were read.
    wakes: &'w mut [MaybeUninit<Deferred>],
    next: usize,
}

impl AsyncWakes<'_> {
    /// The next `Waker` to wake, taken out of the batch.
    fn next_waker(&mut self) -> Option<Waker> {
        while let Some(entry) = self.wakes.get_mut(self.next) {
            self.next += 1;
            // SAFETY: initialized (the batch's first entries), and read
            // once: `next` has moved past it.
            if let Deferred::Async(waker) = unsafe { entry.assume_init_read() } {
                return Some(waker);
            }
        }
        None
    }
}

impl Drop for AsyncWakes<'_> {
    fn drop(&mut self) {
        // Reached with wakes left only when one panicked.
        while let Some(waker) = self.next_waker() {
            waker.wake();
        }
    }
}

impl Locked<'_> {
    /// Runs `f` on a node's lock-protected fields.
    #[inline]
    fn links<R>(&mut self, node: &Node, f: impl FnOnce(&mut Links) -> R) -> R {
        // SAFETY: the queue lock is held (`self`), which guards `links`
        // of every node that is or may be queued here; no other reference
        // to them is live.
        node.links.with_mut(|links| f(unsafe { &mut *links }))
    }

    #[inline]
    fn ends<R>(&mut self, f: impl FnOnce(&mut (*const Node, *const Node)) -> R) -> R {
        // SAFETY: under the queue lock.
        self.queue.ends.with_mut(|ends| f(unsafe { &mut *ends }))
    }

    /// Queues `node` at the back (`front`: at the front) as a waiter of
    /// the current task, or of `waker`, with the primitive's `tag`, and
    /// marks it [`WAITING`]. The `waker` is cloned under the lock: the one
    /// piece of executor code that runs under it (a reference count
    /// increment in every executor we know; it must not take this
    /// queue's lock). The node's earlier `Waker`, if a wake did not take
    /// it, is dropped here, under the lock: callers queue again only
    /// nodes a wake took off (or new ones), whose `Waker` is gone.
    ///
    /// # Safety
    /// `node` is pinned and stays valid until it is off the queue (a
    /// waker took it, or [`remove`](Self::remove)); it is not queued now.
    pub(crate) unsafe fn enqueue(
        &mut self,
        node: &Node,
        exclusive: bool,
        tag: usize,
        waker: Option<&Waker>,
        front: bool,
    ) {
        let wake = match waker {
            Some(waker) => Wake::Async(Some(waker.clone())),
            None => Wake::Task(kernel::current_task()),
        };
        // Relaxed: read by this task only after it saw WAITING replaced,
        // which is a Release store by a later holder of this lock.
        node.state.store(WAITING, Ordering::Relaxed);
        let me: *const Node = node;
        let (head, tail) = self.ends(|ends| *ends);
        let seq = self.queue.seq.with_mut(|seq| {
            // SAFETY: under the queue lock.
            let seq = unsafe { &mut *seq };
            let mine = *seq;
            *seq = mine.wrapping_add(1);
            mine
        });
        self.links(node, |links| {
            links.seq = seq;
            debug_assert!(!links.linked, "ksync: a wait-queue node queued twice");
            links.linked = true;
            links.exclusive = exclusive;
            links.tag = tag;
            links.wake = wake;
            if front {
                links.prev = ptr::null();
                links.next = head;
            } else {
                links.prev = tail;
                links.next = ptr::null();
            }
        });
        if front {
            match head.is_null() {
                true => self.ends(|ends| ends.1 = me),
                // SAFETY: queued nodes are valid (the enqueue contract).
                false => self.links(unsafe { &*head }, |l| l.prev = me),
            }
            self.ends(|ends| ends.0 = me);
        } else {
            match tail.is_null() {
                true => self.ends(|ends| ends.0 = me),
                // SAFETY: as above.
                false => self.links(unsafe { &*tail }, |l| l.next = me),
            }
            self.ends(|ends| ends.1 = me);
        }
    }

    /// Takes `node` off the queue if it is on it; whether it was.
    pub(crate) fn remove(&mut self, node: &Node) -> bool {
        let Some((prev, next)) = self.links(node, |links| {
            if !links.linked {
                return None;
            }
            links.linked = false;
            links.granted = false;
            Some((links.prev, links.next))
        }) else {
            return false;
        };
        match prev.is_null() {
            true => self.ends(|ends| ends.0 = next),
            // SAFETY: queued nodes are valid (the enqueue contract).
            false => self.links(unsafe { &*prev }, |l| l.next = next),
        }
        match next.is_null() {
            true => self.ends(|ends| ends.1 = prev),
            // SAFETY: as above.
            false => self.links(unsafe { &*next }, |l| l.prev = prev),
        }
        true
    }

    /// Sets the primitive's tag of `node` (queued, or woken by this lock's
    /// holder and not yet seen by its owner).
    pub(crate) fn set_tag(&mut self, node: &Node, tag: usize) {
        self.links(node, |links| links.tag = tag);
    }

    /// The primitive's tag of `node`.
    pub(crate) fn tag(&mut self, node: &Node) -> usize {
        self.links(node, |links| links.tag)
    }

    /// Marks `node` (queued) as handed what it waits for, under this
    /// lock, with its wake to come ([`wake`](Self::wake) with
    /// [`GRANTED`], in a later batch): it stays queued meanwhile, so a
    /// grant of one unit passes it by ([`is_granted`](Self::is_granted)),
    /// and a waiter whose deadline passes first takes itself off as
    /// granted ([`WaitQueue::sleep`]). `complete_all` grants every waiter
    /// at once this way, as Linux's does under its lock, and wakes them in
    /// batches.
    pub(crate) fn grant(&mut self, node: &Node) {
        self.links(node, |links| {
            debug_assert!(links.linked, "ksync: a grant to a node not queued");
            links.granted = true;
        });
    }

    /// Whether `node` (queued) was [`grant`](Self::grant)ed, its wake to
    /// come.
    pub(crate) fn is_granted(&mut self, node: &Node) -> bool {
        self.links(node, |links| links.granted)
    }

    /// Whether `node` is queued.
    pub(crate) fn is_queued(&mut self, node: &Node) -> bool {
        self.links(node, |links| links.linked)
    }

    /// Makes `node` (queued, async) wake `waker` from now on; the
    /// `Waker` it replaces, which the caller drops after the unlock:
    /// dropping a `Waker` runs executor code (the last reference to a
    /// task drops its future, which may be queued here and take this
    /// lock). A `waker` that [`will_wake`](Waker::will_wake) the same task
    /// is kept, not cloned; a new one is cloned under the lock (executor
    /// code too, though a clone is a reference count increment in every
    /// executor we know: it must not take this queue's lock).
    #[must_use = "drop the replaced waker after the queue lock is released"]
    pub(crate) fn set_waker(&mut self, node: &Node, waker: &Waker) -> Option<Waker> {
        self.links(node, |links| match &mut links.wake {
            Wake::Async(Some(old)) if old.will_wake(waker) => None,
            wake => match core::mem::replace(wake, Wake::Async(Some(waker.clone()))) {
                Wake::Async(old) => old,
                _ => None,
            },
        })
    }

    /// The queue's enqueue count now: a waiter queued from now on is not
    /// [`queued_before`](Self::queued_before) it.
    pub(crate) fn enqueue_count(&mut self) -> usize {
        self.queue.seq.with(|seq| {
            // SAFETY: under the queue lock.
            unsafe { *seq }
        })
    }

    /// Whether `node` (queued) was queued before the queue's enqueue
    /// count was `start` ([`enqueue_count`](Self::enqueue_count)).
    pub(crate) fn queued_before(&mut self, node: &Node, start: usize) -> bool {
        let seq = self.links(node, |l| l.seq);
        start.wrapping_sub(seq).wrapping_sub(1) < usize::MAX / 2
    }

    /// The task token of a queued blocking waiter (0 for an async one).
    pub(crate) fn task_of(&mut self, node: &Node) -> usize {
        self.links(node, |links| match links.wake {
            Wake::Task(token) => token,
            _ => 0,
        })
    }

    /// Whether nobody waits.
    pub(crate) fn is_empty(&mut self) -> bool {
        self.ends(|ends| ends.0.is_null())
    }

    /// The first waiter, with its tag and whether it is exclusive.
    pub(crate) fn front(&mut self) -> Option<(&Node, usize, bool)> {
        let head = self.ends(|ends| ends.0);
        // SAFETY: queued nodes stay valid while queued, and they stay
        // queued while this lock is held (the returned borrow is `self`'s).
        let node = unsafe { head.as_ref() }?;
        let (tag, exclusive) = self.links(node, |l| (l.tag, l.exclusive));
        Some((node, tag, exclusive))
    }

    /// The waiter after `node` (which is queued), with its tag and
    /// whether it is exclusive.
    #[allow(dead_code)] // for the rw semaphores' reader batches
    pub(crate) fn next(&mut self, node: &Node) -> Option<(&Node, usize, bool)> {
        let next = self.links(node, |l| l.next);
        // SAFETY: as in `front`.
        let node = unsafe { next.as_ref() }?;
        let (tag, exclusive) = self.links(node, |l| (l.tag, l.exclusive));
        Some((node, tag, exclusive))
    }

    /// Takes `node` (queued) off the queue, leaves `state` ([`WOKEN`] or
    /// [`GRANTED`]) in it and wakes its task: a blocked task when this
    /// guard drops, after the unlock (the node stays [`PENDING`] until
    /// then, so its owner waits and the token stays valid for the kernel's
    /// `wake`), an async one's `Waker` at once.
    pub(crate) fn wake(&mut self, node: &Node, state: usize) {
        self.remove(node);
        let wake = self.links(node, |links| match &mut links.wake {
            Wake::Task(token) => Wake::Task(*token),
            Wake::Async(waker) => Wake::Async(waker.take()),
            Wake::None => Wake::None,
        });
        match wake {
            // This task's own node (a primitive that queued it and then
            // granted to the head of the queue, under one lock): the task
            // runs and reads its node before it blocks, so no wake is due,
            // and a deferred one would leave the node PENDING until this
            // guard drops, under which the task reads it. Not from an
            // interrupt handler: the task it interrupted may be about to
            // block, and needs the wake.
            Wake::Task(token) if token == kernel::current_task() && !kernel::in_interrupt() => {
                // Release: as below.
                node.state.store(state, Ordering::Release);
            }
            Wake::Task(token) => {
                // Release: pairs with the waiter's Acquire in `Node::state`,
                // which then sees what the waker did first (the condition
                // made true, the lock handed over); it waits for PENDING to
                // clear before it leaves.
                node.state.store(state | PENDING, Ordering::Release);
                self.defer(Deferred::Task(node, token));
            }
            Wake::Async(waker) => {
                // Release: as above. The waker is this context's now: the
                // future may go away at once.
                node.state.store(state, Ordering::Release);
                if let Some(waker) = waker {
                    self.defer(Deferred::Async(waker));
                }
            }
            // Release: as above.
            Wake::None => node.state.store(state, Ordering::Release),
        }
    }

    /// Wakes every non-exclusive waiter and the first `exclusive`
    /// exclusive ones, in queue order, among those queued when it began;
    /// how many it woke. Past a batch of wakes it drops the lock and takes
    /// it again ([`relock`](Self::relock)) and goes on from the front:
    /// the waiters it woke are off the queue, and those queued since (a
    /// later sequence number) are not its to wake. If a `Waker` panics at
    /// a relock, the wake goes on as the panic unwinds (a blocked task
    /// past the batch is not left asleep), and then the panic goes on.
    pub(crate) fn wake_n(&mut self, exclusive: usize) -> usize {
        let start = self.enqueue_count();
        let mut rounds = WakeRounds {
            locked: self,
            start,
            exclusive,
            woken: 0,
            done: false,
        };
        rounds.run();
        rounds.done = true;
        rounds.woken
    }
}

/// The state of one [`Locked::wake_n`]: what is left of it is done when
/// it drops unfinished (a `Waker` panicked at a relock, which took the
/// lock again).
struct WakeRounds<'l, 'q> {
    locked: &'l mut Locked<'q>,
    start: usize,
    /// Exclusive waiters left to wake.
    exclusive: usize,
    woken: usize,
    done: bool,
}

impl WakeRounds<'_, '_> {
    fn run(&mut self) {
        'rounds: loop {
            let locked = &mut *self.locked;
            let mut cursor = locked.ends(|ends| ends.0);
            // SAFETY: queued nodes are valid while queued (enqueue
            // contract), and `next` is read before the node is woken.
            while let Some(node) = unsafe { cursor.as_ref() } {
                let (next, is_exclusive) = locked.links(node, |l| (l.next, l.exclusive));
                cursor = next;
                // Queued after this wake began.
                if !locked.queued_before(node, self.start) {
                    continue;
                }
                if is_exclusive && self.exclusive == 0 {
                    continue;
                }
                if locked.batch_full() {
                    locked.relock();
                    continue 'rounds;
                }
                if is_exclusive {
                    self.exclusive -= 1;
                }
                locked.wake(node, WOKEN);
                self.woken += 1;
            }
            return;
        }
    }
}

impl Drop for WakeRounds<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            self.run();
        }
    }
}

impl WaitQueue {
    const_fn! {
        /// An empty wait queue.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::wait::WaitQueue;
        ///
        /// static KEYBOARD_WAIT: WaitQueue = WaitQueue::new(); // DECLARE_WAIT_QUEUE_HEAD
        /// assert!(!KEYBOARD_WAIT.has_waiters());
        /// # }
        /// ```
        #[must_use]
        pub fn new() -> Self {
            WaitQueue {
                lock: QueueLock::with_relax(),
                ends: UnsafeCell::new((ptr::null(), ptr::null())),
                seq: UnsafeCell::new(0),
            }
        }
    }

    /// Takes the queue lock (interrupts off until it drops).
    #[inline]
    pub(crate) fn lock(&self) -> Locked<'_> {
        // The host kernel registers a task at its first `current_task`,
        // allocating its record; `enqueue` asks under this lock, where an
        // allocator that wakes this queue would take it again. A kernel's
        // own `current` is a register read, so only the host asks first.
        #[cfg(feature = "test-hooks")]
        if !kernel::in_interrupt() {
            let _ = kernel::current_task();
        }
        self.lock.lock();
        Locked {
            queue: self,
            wakes: [const { MaybeUninit::uninit() }; WAKE_BATCH],
            deferred: 0,
        }
    }

    /// Sleeps until a waker took `node` off the queue ([`WOKEN`] or
    /// [`GRANTED`]: returned) or, with a `deadline_ns`, until the clock
    /// passed it and the node is still queued ([`WAITING`]: taken off,
    /// returned; [`GRANTED`] if it was [granted](Locked::grant), its wake
    /// yet to come: it takes itself off as granted, as Linux's timed wait
    /// looks at `done` once its timeout ends). The node was queued by this
    /// task.
    pub(crate) fn sleep(&self, node: &Node, deadline_ns: Option<u64>) -> usize {
        loop {
            // Once the waker is done with the node and the token.
            let state = node.state();
            if state != WAITING {
                return state;
            }
            if deadline_ns.is_some_and(|deadline| kernel::clock_ns() >= deadline) {
                let mut locked = self.lock();
                // Relaxed: under the lock, which every store that replaces
                // WAITING is made under (a PENDING seen here is waited
                // for below).
                if node.state.load(Ordering::Relaxed) == WAITING {
                    // Read before `remove` clears it.
                    let granted = locked.is_granted(node);
                    locked.remove(node);
                    if granted {
                        // Relaxed: only this task reads it, after this.
                        node.state.store(GRANTED, Ordering::Relaxed);
                        return GRANTED;
                    }
                    return WAITING;
                }
                drop(locked);
                // Woken meanwhile: wait for the waker to be done.
                return node.state();
            }
            kernel::block(deadline_ns);
        }
    }

    /// Waits until `cond` is true (Linux's `wait_event`): returns at once
    /// if it is, and otherwise sleeps on the queue until a wake finds it
    /// true. `cond` runs without the queue lock, on this task, any number
    /// of times.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::sync::atomic::{AtomicBool, Ordering};
    /// use ksync::wait::WaitQueue;
    ///
    /// static LINK_UP: AtomicBool = AtomicBool::new(false);
    /// static LINK_WAIT: WaitQueue = WaitQueue::new();
    ///
    /// let phy_irq = std::thread::spawn(|| {
    ///     LINK_UP.store(true, Ordering::Release);
    ///     LINK_WAIT.wake_one();
    /// });
    /// LINK_WAIT.wait_event(|| LINK_UP.load(Ordering::Acquire)); // sleeps until then
    /// phy_irq.join().unwrap();
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`]).
    #[track_caller]
    pub fn wait_event(&self, cond: impl FnMut() -> bool) {
        self.wait_inner(cond, false, None);
    }

    /// [`wait_event`](Self::wait_event) as an exclusive waiter (Linux's
    /// `wait_event_exclusive`): [`wake_one`](Self::wake_one) wakes only
    /// the first of these.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::sync::atomic::{AtomicUsize, Ordering};
    /// use ksync::wait::WaitQueue;
    ///
    /// // Workers wait for requests; one request needs one worker, not all.
    /// static PENDING: AtomicUsize = AtomicUsize::new(0);
    /// static WORK_WAIT: WaitQueue = WaitQueue::new();
    ///
    /// let worker = std::thread::spawn(|| {
    ///     WORK_WAIT.wait_event_exclusive(|| PENDING.load(Ordering::Acquire) > 0);
    /// });
    /// PENDING.fetch_add(1, Ordering::Release);
    /// WORK_WAIT.wake_one(); // one exclusive waiter at most
    /// worker.join().unwrap();
    /// # }
    /// ```
    #[track_caller]
    pub fn wait_event_exclusive(&self, cond: impl FnMut() -> bool) {
        self.wait_inner(cond, true, None);
    }

    /// [`wait_event`](Self::wait_event) for at most `timeout` (Linux's
    /// `wait_event_timeout`): whether `cond` was true (checked once more
    /// when the time is up). Needs [`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::sync::atomic::{AtomicBool, Ordering};
    /// use core::time::Duration;
    /// use ksync::wait::WaitQueue;
    ///
    /// let ack = AtomicBool::new(false);
    /// let ack_wait = WaitQueue::new();
    /// // No answer from the device (here with a zero timeout, at once): give up.
    /// assert!(!ack_wait.wait_event_timeout(|| ack.load(Ordering::Acquire), Duration::ZERO));
    /// ack.store(true, Ordering::Release);
    /// assert!(ack_wait.wait_event_timeout(|| ack.load(Ordering::Acquire), Duration::from_secs(1)));
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "false means the condition did not become true in time"]
    pub fn wait_event_timeout(&self, cond: impl FnMut() -> bool, timeout: Duration) -> bool {
        self.wait_inner(cond, false, Some(deadline(timeout)))
    }

    /// [`wait_event_exclusive`](Self::wait_event_exclusive) for at most
    /// `timeout`; whether `cond` was true.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::sync::atomic::{AtomicUsize, Ordering};
    /// use core::time::Duration;
    /// use ksync::wait::WaitQueue;
    ///
    /// // Every request tag in use: one waiter per tag freed, for a while.
    /// let free_tags = AtomicUsize::new(0);
    /// let tag_wait = WaitQueue::new();
    /// let got_tag = tag_wait.wait_event_exclusive_timeout(
    ///     || free_tags.load(Ordering::Acquire) > 0,
    ///     Duration::ZERO, // (here: give up at once)
    /// );
    /// assert!(!got_tag); // none came free in time: -EBUSY
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "false means the condition did not become true in time"]
    pub fn wait_event_exclusive_timeout(
        &self,
        cond: impl FnMut() -> bool,
        timeout: Duration,
    ) -> bool {
        self.wait_inner(cond, true, Some(deadline(timeout)))
    }

    #[track_caller]
    fn wait_inner(
        &self,
        mut cond: impl FnMut() -> bool,
        exclusive: bool,
        deadline_ns: Option<u64>,
    ) -> bool {
        might_sleep_entry();
        if cond() {
            return true;
        }
        might_sleep_slow();
        let node = Node::new();
        // The node does not move from here on, and `Queued` takes it off
        // the queue on every way out (a panicking `cond` included).
        let waiter = Queued {
            queue: self,
            node: &node,
        };
        loop {
            // SAFETY: `node` stays put and `waiter` dequeues it before it
            // goes away; it is not queued (new, or a waker took it off).
            unsafe { self.lock().enqueue(&node, exclusive, 0, None, false) };
            // The check after queueing: a wake from now on finds the node.
            if cond() {
                return true;
            }
            if waiter.queue.sleep(&node, deadline_ns) == WAITING {
                // Timed out (and off the queue).
                return cond();
            }
            if cond() {
                return true;
            }
        }
    }

    /// Waits until `cond` is true, as a future: the async form of
    /// [`wait_event`](Self::wait_event), on the same queue (a wake wakes
    /// blocked tasks and futures in queue order). Dropping the future
    /// takes it off the queue; one that was woken as an exclusive waiter
    /// and dropped before it completed passes the wake on to the next
    /// exclusive waiter.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// use core::sync::atomic::{AtomicBool, Ordering};
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// let ready = AtomicBool::new(false);
    /// let queue = WaitQueue::new();
    /// let mut cx = Context::from_waker(Waker::noop()); // an executor's waker
    /// let mut wait = pin!(queue.wait_until(|| ready.load(Ordering::Acquire)));
    /// assert!(wait.as_mut().poll(&mut cx).is_pending()); // queued
    /// ready.store(true, Ordering::Release);
    /// assert_eq!(queue.wake_one(), 1); // wakes the future's task
    /// assert!(wait.as_mut().poll(&mut cx).is_ready());
    /// # }
    /// ```
    pub fn wait_until<F: FnMut() -> bool>(&self, cond: F) -> WaitUntil<'_, F> {
        self.future(cond, false)
    }

    fn future<F: FnMut() -> bool>(&self, cond: F, exclusive: bool) -> WaitUntil<'_, F> {
        WaitUntil {
            queue: self,
            cond,
            node: Node::new(),
            exclusive,
            done: false,
        }
    }

    /// [`wait_until`](Self::wait_until) as an exclusive waiter.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// let queue = WaitQueue::new();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut first = pin!(queue.wait_until_exclusive(|| false));
    /// let mut second = pin!(queue.wait_until_exclusive(|| false));
    /// assert!(first.as_mut().poll(&mut cx).is_pending());
    /// assert!(second.as_mut().poll(&mut cx).is_pending());
    /// assert_eq!(queue.wake_one(), 1); // only the first exclusive waiter
    /// # }
    /// ```
    pub fn wait_until_exclusive<F: FnMut() -> bool>(&self, cond: F) -> WaitUntil<'_, F> {
        self.future(cond, true)
    }

    /// Wakes every non-exclusive waiter and the first exclusive one
    /// (Linux's `wake_up`); how many it woke. Make the condition true
    /// first.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// let queue = WaitQueue::new();
    /// assert_eq!(queue.wake_one(), 0); // nobody waits: nothing to do
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let not_yet = || false;
    /// let mut reader = pin!(queue.wait_until(not_yet));
    /// let mut worker = pin!(queue.wait_until_exclusive(not_yet));
    /// let mut other = pin!(queue.wait_until_exclusive(not_yet));
    /// for w in [reader.as_mut(), worker.as_mut(), other.as_mut()] {
    ///     assert!(w.poll(&mut cx).is_pending());
    /// }
    /// assert_eq!(queue.wake_one(), 2); // the reader and the first worker
    /// # }
    /// ```
    #[doc(alias = "wake_up")]
    pub fn wake_one(&self) -> usize {
        self.wake_n(1)
    }

    /// Wakes every non-exclusive waiter and the first `n` exclusive ones
    /// (Linux's `wake_up_nr`); how many it woke. `n == 0` wakes every
    /// waiter, as Linux's `nr_exclusive` of 0 (no limit): `wake_n(0)` is
    /// [`wake_all`](Self::wake_all).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// // Three workers wait for packets; two packets came in.
    /// let rx_wait = WaitQueue::new();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let not_yet = || false;
    /// let mut w1 = pin!(rx_wait.wait_until_exclusive(not_yet));
    /// let mut w2 = pin!(rx_wait.wait_until_exclusive(not_yet));
    /// let mut w3 = pin!(rx_wait.wait_until_exclusive(not_yet));
    /// for w in [w1.as_mut(), w2.as_mut(), w3.as_mut()] {
    ///     assert!(w.poll(&mut cx).is_pending());
    /// }
    /// assert_eq!(rx_wait.wake_n(2), 2);
    /// # }
    /// ```
    #[doc(alias = "wake_up_nr")]
    pub fn wake_n(&self, n: usize) -> usize {
        // Linux's `__wake_up` with `nr_exclusive` 0: no limit.
        let n = if n == 0 { usize::MAX } else { n };
        self.lock().wake_n(n)
    }

    /// Wakes every waiter (Linux's `wake_up_all`); how many.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// // The device is going away: wake everyone so they see the error.
    /// let dev_wait = WaitQueue::new();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let not_yet = || false;
    /// let mut a = pin!(dev_wait.wait_until(not_yet));
    /// let mut b = pin!(dev_wait.wait_until_exclusive(not_yet));
    /// let mut c = pin!(dev_wait.wait_until_exclusive(not_yet));
    /// for w in [a.as_mut(), b.as_mut(), c.as_mut()] {
    ///     assert!(w.poll(&mut cx).is_pending());
    /// }
    /// assert_eq!(dev_wait.wake_all(), 3);
    /// # }
    /// ```
    #[doc(alias = "wake_up_all")]
    pub fn wake_all(&self) -> usize {
        self.wake_n(usize::MAX)
    }

    /// Whether anyone waits now (Linux's `waitqueue_active`): a snapshot.
    /// A waker that skips `wake_*` when it is false must order its
    /// condition store before this check with a full fence, as Linux's
    /// `wq_has_sleeper` does; `wake_*` needs no such care.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::wait::WaitQueue;
    ///
    /// let queue = WaitQueue::new();
    /// assert!(!queue.has_waiters());
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut wait = pin!(queue.wait_until(|| false));
    /// assert!(wait.as_mut().poll(&mut cx).is_pending());
    /// assert!(queue.has_waiters());
    /// # }
    /// ```
    #[doc(alias("waitqueue_active", "wq_has_sleeper"))]
    pub fn has_waiters(&self) -> bool {
        crate::sync::fence(Ordering::SeqCst);
        !self.lock().is_empty()
    }
}

/// A deadline `timeout` from now, on the kernel's clock.
pub(crate) fn deadline(timeout: Duration) -> u64 {
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    kernel::clock_ns().saturating_add(nanos)
}

/// Takes a blocking waiter's node off its queue when the wait ends (or
/// unwinds), and waits for a waker that is still using it.
pub(crate) struct Queued<'a> {
    pub(crate) queue: &'a WaitQueue,
    pub(crate) node: &'a Node,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        // Woken (and the waker done with it): a waker took it off the
        // queue, and only this task queues it again (as WAITING). Else it
        // may be queued: off it, under the lock.
        if self.node.state() == WAITING {
            let mut locked = self.queue.lock();
            if !locked.remove(self.node) {
                // A waker took it off, and its store may not have been
                // seen above; the lock orders it before this point, so
                // this waits for the waker to be done.
                drop(locked);
                self.node.state();
            }
        }
    }
}

/// The future of [`WaitQueue::wait_until`]: ready once its condition is
/// true.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use core::sync::atomic::{AtomicBool, Ordering};
/// use ksync::wait::{WaitQueue, WaitUntil};
///
/// static FLUSHED: AtomicBool = AtomicBool::new(false);
/// static FLUSH_WAIT: WaitQueue = WaitQueue::new();
///
/// // An async task awaits it: `FLUSH_WAIT.wait_until(..).await`.
/// fn wait_flushed() -> WaitUntil<'static, impl FnMut() -> bool> {
///     FLUSH_WAIT.wait_until(|| FLUSHED.load(Ordering::Acquire))
/// }
/// FLUSHED.store(true, Ordering::Release);
/// let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
/// assert!(core::pin::pin!(wait_flushed()).poll(&mut cx).is_ready());
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct WaitUntil<'q, F> {
    queue: &'q WaitQueue,
    cond: F,
    node: Node,
    exclusive: bool,
    /// Completed (the condition was seen true): no wake to pass on.
    done: bool,
}

impl<F> core::fmt::Debug for WaitUntil<'_, F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WaitUntil")
            .field("exclusive", &self.exclusive)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<F: FnMut() -> bool> Future for WaitUntil<'_, F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing is moved out of the future; `node` stays where
        // it is until the future drops (which takes it off the queue).
        let this = unsafe { self.get_unchecked_mut() };
        if this.done {
            return Poll::Ready(());
        }
        if (this.cond)() {
            this.complete();
            return Poll::Ready(());
        }
        {
            let mut locked = this.queue.lock();
            if locked.is_queued(&this.node) {
                let old = locked.set_waker(&this.node, cx.waker());
                // The replaced waker goes after the unlock.
                drop(locked);
                drop(old);
            } else {
                // SAFETY: the node is pinned inside the pinned future and
                // `Drop` takes it off the queue; it is not queued now.
                unsafe { locked.enqueue(&this.node, this.exclusive, 0, Some(cx.waker()), false) };
            }
        }
        // The check after queueing, as `wait_event`'s.
        if (this.cond)() {
            this.complete();
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl<F> WaitUntil<'_, F> {
    fn complete(&mut self) {
        self.done = true;
        self.queue.lock().remove(&self.node);
    }
}

impl<F> Drop for WaitUntil<'_, F> {
    fn drop(&mut self) {
        let mut locked = self.queue.lock();
        if !locked.remove(&self.node)
            && !self.done
            && self.exclusive
            && self.node.state.load(Ordering::Relaxed) == WOKEN
        {
            // Woken as the one exclusive waiter, and cancelled before it
            // used the wake: the next exclusive waiter gets it.
            locked.wake_n(1);
        }
    }
}

/// Panics if the current context may not sleep, as Linux's
/// `might_sleep`: in an interrupt handler or wherever
/// [`Kernel::may_sleep`](crate::kernel::Kernel::may_sleep) says no, and
/// inside an RCU read section on this CPU (every build: the sleep's
/// context switch is a quiescent state that would end the grace period
/// under the reader). Debug builds also panic inside a `call_rcu`
/// callback, with preemption disabled through ksync
/// ([`kernel::preempt_disable`], a
/// [`PerCpu`](crate::percpu::PerCpu) reference, a spinlock held, ...:
/// ksync counts them per CPU, as Linux's preemption count), and with
/// interrupts masked ([`Kernel::irqs_disabled`](crate::kernel::Kernel::irqs_disabled)).
/// With `lockdep`, it also reports spinlocks held on this CPU
/// ([`LocksHeld`](crate::lockdep::ReportKind::LocksHeld), naming them;
/// then the preemption check is left to that report, unless lockdep has
/// turned itself off after an earlier report) and interrupts
/// masked. Every sleeping call of ksync calls it on entry in debug builds
/// (the uncontended path included, as Linux), and before it sleeps in
/// release builds; call it where a kernel's own code may sleep.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::{rcu, wait};
///
/// // A function that may sleep says so, so that a call from atomic
/// // context panics at once, not only when it happens to sleep.
/// fn load_firmware() {
///     wait::might_sleep();
///     // ... read the file, maybe sleeping ...
/// }
/// load_firmware(); // task context: fine
/// # rcu::cpu_online();
/// let reader = rcu::read_lock();
/// assert!(std::panic::catch_unwind(load_firmware).is_err()); // in a read section
/// drop(reader);
/// # rcu::cpu_offline();
/// # }
/// ```
#[track_caller]
pub fn might_sleep() {
    if !kernel::may_sleep() {
        cannot_sleep();
    }
    // The read section (every build) and, in debug builds, a `call_rcu`
    // callback on this CPU; with lockdep, the spinlocks held.
    crate::rcu::check_may_sleep();
    // With lockdep, a spinlock held is reported by name above (the
    // preemption it disabled is left to that report; once lockdep turned
    // itself off, it counts none, and this check is made); sleeping locks are
    // not reported there, so they do not hide a preemption-disabled
    // section (`preempt_disable`, a `PerCpu` reference) opened under them.
    #[cfg(debug_assertions)]
    if kernel::preempt_disabled_by_ksync() && crate::lockdep::held_spinning_lock_count() == 0 {
        preempt_disabled();
    }
    // `masked_by_ksync`: masking through ksync (an `ArchIrq` lock among
    // them), counted with lockdep and in the host kernel's debug builds
    // (elsewhere `ArchIrq` masking is seen only by a kernel whose
    // `irqs_disabled` reads the CPU's flag: counting it would need the
    // hooks, which `ArchIrq` users need not define).
    #[cfg(any(
        feature = "lockdep",
        all(debug_assertions, feature = "test-hooks", not(ksync_loom))
    ))]
    if kernel::irqs_disabled() || kernel::irq::masked_by_ksync_here() {
        irqs_masked();
    }
    #[cfg(all(
        debug_assertions,
        not(any(feature = "lockdep", all(feature = "test-hooks", not(ksync_loom))))
    ))]
    if kernel::irqs_disabled() {
        irqs_masked();
    }
}

/// [`might_sleep`] at the entry of a sleeping call, whether or not it
/// will have to sleep: debug builds only (the uncontended path stays a
/// compare-exchange in release builds).
#[inline(always)]
#[track_caller]
pub(crate) fn might_sleep_entry() {
    #[cfg(debug_assertions)]
    might_sleep();
}

/// [`might_sleep`] before a sleeping call actually waits: release builds
/// only (debug builds checked on entry, [`might_sleep_entry`]).
#[inline(always)]
#[track_caller]
pub(crate) fn might_sleep_slow() {
    #[cfg(not(debug_assertions))]
    might_sleep();
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn preempt_disabled() -> ! {
    panic!(
        "ksync: a sleeping wait with preemption disabled on this CPU \
         (kernel::preempt_disable, a PerCpu reference or a spinlock held)"
    )
}

#[cold]
#[inline(never)]
#[track_caller]
fn cannot_sleep() -> ! {
    panic!(
        "ksync: a sleeping wait where the current context may not sleep \
         (Kernel::may_sleep is false: an interrupt handler?)"
    )
}

#[cfg(any(feature = "lockdep", debug_assertions))]
#[cold]
#[inline(never)]
#[track_caller]
fn irqs_masked() -> ! {
    panic!("ksync: a sleeping wait with interrupts masked on this CPU")
}
