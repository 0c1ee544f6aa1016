//! `call_rcu` without an allocator: intrusive heads on per-CPU segmented
//! callback lists, run in bounded batches from [`process_callbacks`];
//! [`barrier`] waits for every queued callback.
//!
//! # The lists
//!
//! Each CPU owns a list of [`RcuHead`]s in three segments, oldest first:
//!
//! | segment | holds | tag |
//! |---|---|---|
//! | `done` | callbacks whose grace period has completed | — |
//! | `wait` | callbacks waiting for one grace period | its cookie |
//! | `next` | callbacks queued after that, waiting for a later one | its cookie |
//!
//! [`call_rcu`] takes a cookie ([`get_state`](super::get_state)), asks the
//! engine for a grace period that completes it, and appends the head to the
//! youngest segment with that cookie. Two pending segments are enough: a
//! cookie names the end of the running grace period or of the one after
//! it, and before appending, the list is *advanced* (segments whose cookie
//! completed move to `done`, `next` slides into an empty `wait`). If a third
//! cookie ever showed up, `next` takes the later of the two, which only
//! makes its callbacks wait longer. A segment move is a splice: O(1).
//!
//! Each list has its own IRQ-saving spinlock, taken by its CPU (uncontended
//! in the common case) and by [`barrier`] or a CPU adopting the callbacks of
//! an offline one. At most one context invokes a list's callbacks at a
//! time, in queue order, which is what makes [`barrier`] exact.
//!
//! # Barriers
//!
//! A callback runs only after its cookie completed as seen by an Acquire
//! load of `gp_seq`, followed by a full fence (**W1** in the engine docs):
//! everything the readers did in the grace period happens-before it. The
//! cookie is taken after [`get_state`](super::get_state)'s full fence, so
//! whatever the caller unpublished before `call_rcu` is ordered before the
//! grace period (G1/E1 pairing).

use core::fmt;
use core::ptr;

use super::{InCallback, engine, get_state, seq_ge, waiting_quiescent_state};
use crate::kernel;
use crate::percpu::PerCpu;
use crate::spinlock::{RawTicketLock, lock_irqsave};
use crate::sync::{AtomicBool, AtomicUsize, Ordering, UnsafeCell, fence, model_static, spin_loop};

/// A callback for [`call_rcu`]: receives the head it was queued with.
///
/// It runs in whatever context calls [`process_callbacks`] or [`barrier`]
/// (usually the queuing CPU's softirq or tick; an offline CPU's callbacks run
/// on another CPU), always with preemption disabled, as Linux runs its
/// callbacks in softirq context: it must not block or sleep, and it stays
/// on one CPU (the debug builds' "inside a callback" mark is that CPU's).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use ksync::rcu::{self, Callback, RcuHead};
///
/// static FREED: AtomicUsize = AtomicUsize::new(0);
/// static HEAD: RcuHead = RcuHead::new();
///
/// unsafe fn count_free(_head: *mut RcuHead) {
///     FREED.fetch_add(1, Ordering::Relaxed); // no sleeping here
/// }
/// let cb: Callback = count_free;
/// // SAFETY: a static head; the callback only counts.
/// unsafe { rcu::call_rcu(&HEAD as *const RcuHead as *mut RcuHead, cb) };
/// rcu::barrier();
/// assert_eq!(FREED.load(Ordering::Relaxed), 1);
/// ```
pub type Callback = unsafe fn(*mut RcuHead);

/// The intrusive link for [`call_rcu`] (Linux's `struct rcu_head`): embed
/// one in the object that is to be freed after a grace period. Two words.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::mem::offset_of;
/// use ksync::rcu::{self, RcuHead};
///
/// struct Inode { ino: u64, i_rcu: RcuHead }
/// unsafe fn i_callback(head: *mut RcuHead) {
///     // SAFETY: the `i_rcu` of a boxed `Inode` (below): container_of, free.
///     drop(unsafe { Box::from_raw(head.byte_sub(offset_of!(Inode, i_rcu)).cast::<Inode>()) });
/// }
/// let inode = Box::into_raw(Box::new(Inode { ino: 2, i_rcu: RcuHead::new() }));
/// // ... unpublish it (remove it from the inode hash) ...
/// // SAFETY: unpublished; freed only by `i_callback`, after a grace period.
/// unsafe { rcu::call_rcu(&raw mut (*inode).i_rcu, i_callback) };
/// # rcu::barrier();
/// ```
///
/// A head may be queued again once its callback has started (the callback
/// itself may re-queue it); queuing it while it is still queued panics.
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): not queued.
#[doc(alias("rcu_head", "callback_head"))]
pub struct RcuHead {
    next: UnsafeCell<*mut RcuHead>,
    /// The queued callback as a word ([`encode`]), 0 when not queued. An
    /// atomic, so that `call_rcu`'s check for a double queuing never races
    /// with the invocation's take, even in the misuse it is there to catch.
    func: AtomicUsize,
}

/// `f` as a word: never 0 (function pointers are non-null).
fn encode(f: Callback) -> usize {
    f as usize
}

/// The callback that `word` encodes.
///
/// # Safety
/// `word` came from [`encode`].
unsafe fn decode(word: usize) -> Callback {
    // SAFETY: the caller's contract: the bits of a `Callback`, which is a
    // word-sized function pointer.
    unsafe { core::mem::transmute::<usize, Callback>(word) }
}

// SAFETY: `next` is written by its owner before `call_rcu`, then only
// under its list's lock while queued, then by the one context that
// dequeued it for invocation; each hand-over goes through the list lock
// (Acquire/Release), so it is never accessed concurrently. `func` is
// atomic.
unsafe impl Send for RcuHead {}
// SAFETY: as above; `&RcuHead` gives no access to the fields.
unsafe impl Sync for RcuHead {}

impl RcuHead {
    crate::sync::const_fn! {
        /// A head that is not queued.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::RcuHead;
        ///
        /// struct Route {
        ///     dst: u32,
        ///     rcu: RcuHead,
        /// }
        /// static DEFAULT: Route = Route { dst: 0, rcu: RcuHead::new() }; // const
        /// // SAFETY: nobody queues it.
        /// assert!(!unsafe { DEFAULT.rcu.is_queued() });
        /// ```
        pub fn new() -> Self {
            Self {
                next: UnsafeCell::new(ptr::null_mut()),
                func: AtomicUsize::new(0),
            }
        }
    }

    /// Whether the head is queued and its callback has not started yet.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuHead};
    ///
    /// static HEAD: RcuHead = RcuHead::new();
    /// unsafe fn done(_: *mut RcuHead) {}
    ///
    /// // SAFETY: a static head; `done` does nothing.
    /// unsafe { rcu::call_rcu(&HEAD as *const RcuHead as *mut RcuHead, done) };
    /// // SAFETY: only this code queues it, and it runs in `barrier` below.
    /// assert!(unsafe { HEAD.is_queued() });
    /// rcu::barrier();
    /// assert!(!unsafe { HEAD.is_queued() });
    /// ```
    ///
    /// # Safety
    /// None for memory safety any more (the word is atomic); the answer is
    /// only meaningful when no other context can be queuing or invoking
    /// this head: for example from the code that owns the enclosing object.
    pub unsafe fn is_queued(&self) -> bool {
        // Relaxed: a snapshot (see above).
        self.func.load(Ordering::Relaxed) != 0
    }
}

impl Default for RcuHead {
    fn default() -> Self {
        Self::new()
    }
}

crate::sync::const_init! {
    impl for RcuHead = RcuHead::new();
}

impl fmt::Debug for RcuHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RcuHead")
    }
}

/// A singly linked run of heads.
#[derive(Clone, Copy)]
struct Seg {
    head: *mut RcuHead,
    tail: *mut RcuHead,
    /// The cookie that must complete before these callbacks may run
    /// (`wait` and `next` only).
    seq: usize,
}

impl Seg {
    const EMPTY: Seg = Seg {
        head: ptr::null_mut(),
        tail: ptr::null_mut(),
        seq: 0,
    };

    fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Appends one head.
    ///
    /// # Safety
    /// `h` is valid and owned by the caller (under the list lock).
    unsafe fn push(&mut self, h: *mut RcuHead) {
        // SAFETY: caller's contract; `tail` is a queued head of this
        // segment, accessed under the same lock.
        unsafe {
            (*h).next.with_mut(|n| *n = ptr::null_mut());
            if self.is_empty() {
                self.head = h;
            } else {
                (*self.tail).next.with_mut(|n| *n = h);
            }
        }
        self.tail = h;
    }

    /// Moves all of `other` to the end of `self` (keeping `self.seq`).
    ///
    /// # Safety
    /// Both segments' heads are under the caller's list lock.
    unsafe fn splice(&mut self, other: &mut Seg) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            self.head = other.head;
        } else {
            // SAFETY: caller's contract.
            unsafe { (*self.tail).next.with_mut(|n| *n = other.head) };
        }
        self.tail = other.tail;
        *other = Seg::EMPTY;
    }
}

/// One CPU's callbacks (under `Cpu::lock`).
struct List {
    done: Seg,
    wait: Seg,
    next: Seg,
    /// Callbacks queued and not yet finished (including a batch being
    /// invoked).
    len: usize,
    /// A context is invoking a batch taken from `done`.
    invoking: bool,
    /// The CPU went offline ([`super::cpu_offline`]): any CPU may run
    /// these callbacks.
    offline: bool,
}

impl List {
    const EMPTY: List = List {
        done: Seg::EMPTY,
        wait: Seg::EMPTY,
        next: Seg::EMPTY,
        len: 0,
        invoking: false,
        offline: false,
    };

    fn orphaned(&self) -> bool {
        self.offline && self.len > 0
    }

    /// When [`process_cpu`] has work here: [`DUE_NOW`], a cookie (once it
    /// completes), or [`DUE_NEVER`] (nothing queued, or a batch is being
    /// invoked: its invoker looks again when it finishes).
    fn due(&self) -> usize {
        if self.invoking {
            DUE_NEVER
        } else if !self.done.is_empty() {
            DUE_NOW
        } else if !self.wait.is_empty() {
            self.wait.seq
        } else {
            DUE_NEVER
        }
    }

    /// Moves callbacks whose cookie completed at `seq` to `done`.
    fn advance(&mut self, seq: usize) {
        if !self.wait.is_empty() && seq_ge(seq, self.wait.seq) {
            // SAFETY: under the list lock (all `List` methods are).
            unsafe { self.done.splice(&mut self.wait) };
        }
        if self.wait.is_empty() && !self.next.is_empty() {
            if seq_ge(seq, self.next.seq) {
                // SAFETY: as above.
                unsafe { self.done.splice(&mut self.next) };
            } else {
                self.wait = self.next;
                self.next = Seg::EMPTY;
            }
        }
    }

    /// Queues `h` for the grace period `cookie`.
    ///
    /// # Safety
    /// `h` is valid and handed to the list.
    unsafe fn enqueue(&mut self, h: *mut RcuHead, cookie: usize) {
        let seg = if !self.next.is_empty() {
            if seq_ge(cookie, self.next.seq) {
                self.next.seq = cookie;
            }
            &mut self.next
        } else if self.wait.is_empty() {
            self.wait.seq = cookie;
            &mut self.wait
        } else if seq_ge(self.wait.seq, cookie) {
            &mut self.wait
        } else {
            self.next.seq = cookie;
            &mut self.next
        };
        // SAFETY: the caller's contract.
        unsafe { seg.push(h) };
        self.len += 1;
    }

    /// Appends `h` behind every queued callback without waiting for a
    /// grace period of its own (for [`barrier`]).
    ///
    /// # Safety
    /// As [`enqueue`](Self::enqueue).
    unsafe fn enqueue_last(&mut self, h: *mut RcuHead) {
        // SAFETY: caller's contract.
        unsafe {
            if !self.next.is_empty() {
                self.next.push(h);
            } else if !self.wait.is_empty() {
                self.wait.push(h);
            } else {
                self.done.push(h);
            }
        }
        self.len += 1;
    }

    /// Takes up to `limit` callbacks from the front of `done`.
    fn take_done(&mut self, limit: usize) -> (*mut RcuHead, usize) {
        let first = self.done.head;
        let mut n = 0;
        let mut cur = first;
        let mut last = ptr::null_mut();
        while n < limit && !cur.is_null() {
            last = cur;
            // SAFETY: `cur` is a queued head, under the list lock.
            cur = unsafe { (*cur).next.with(|p| *p) };
            n += 1;
        }
        if n == 0 {
            return (ptr::null_mut(), 0);
        }
        if cur.is_null() {
            self.done = Seg::EMPTY;
        } else {
            self.done.head = cur;
            // SAFETY: `last` is a queued head, now cut off the list.
            unsafe { (*last).next.with_mut(|p| *p = ptr::null_mut()) };
        }
        (first, n)
    }
}

/// A CPU's list and its lock.
struct Cpu {
    lock: RawTicketLock,
    list: UnsafeCell<List>,
    /// `list.len`, readable without the lock.
    len: AtomicUsize,
    /// `list.due()`, readable without the lock: callers look at a list only
    /// when it has work, so that a waiting [`barrier`] and the CPU's own
    /// tick do not take turns on a lock for nothing.
    due: AtomicUsize,
    /// This CPU's [`barrier`] callback.
    barrier_head: RcuHead,
}

// SAFETY: `list` (and the heads it links) is only accessed under `lock`;
// the rest are atomics or `RcuHead` (Sync).
unsafe impl Sync for Cpu {}
// SAFETY: as above: the raw pointers in `list` are owned by the list.
unsafe impl Send for Cpu {}

crate::sync::const_init! {
    impl for Cpu = Cpu {
        lock: RawTicketLock::new(),
        list: UnsafeCell::new(List::EMPTY),
        len: AtomicUsize::new(0),
        due: AtomicUsize::new(DUE_NEVER),
        barrier_head: RcuHead::new(),
    };
}

impl Cpu {
    /// Runs `f` on the list with the lock held and interrupts off; keeps
    /// `len` and the orphan count in step.
    fn locked<R>(&self, f: impl FnOnce(&mut List) -> R) -> R {
        let _locked = lock_irqsave(&self.lock);
        self.list.with_mut(|list| {
            // SAFETY: the lock gives exclusive access to the list.
            let list = unsafe { &mut *list };
            let was_orphan = list.orphaned();
            let r = f(list);
            // Relaxed: `orphans` is a hint for `process_callbacks`, which
            // re-checks each list under its lock.
            match (was_orphan, list.orphaned()) {
                (false, true) => {
                    callbacks().orphans.fetch_add(1, Ordering::Relaxed);
                }
                (true, false) => {
                    callbacks().orphans.fetch_sub(1, Ordering::Relaxed);
                }
                _ => {}
            }
            // Relaxed: a hint for lock-free "anything queued?" checks;
            // whoever acts on it takes the lock.
            self.len.store(list.len, Ordering::Relaxed);
            // Relaxed: a hint as well; `process_cpu` re-checks under the
            // lock.
            self.due.store(list.due(), Ordering::Relaxed);
            r
        })
    }
}

struct Callbacks {
    cpus: PerCpu<Cpu>,
    /// Offline CPUs with callbacks.
    orphans: AtomicUsize,
    /// Serialises [`barrier`] calls (they share the per-CPU barrier heads):
    /// set while one runs. Taken only by a compare-exchange and held with
    /// preemption *enabled* (a barrier waits for a grace period and for
    /// callbacks; Linux's `rcu_barrier` sleeps on `barrier_mutex` and a
    /// completion): a barrier that finds it set reports this CPU's
    /// quiescent states and tries again, so a preempted holder delays it
    /// but cannot deadlock it.
    barrier_running: AtomicBool,
    /// Barrier callbacks not yet run, plus one while they are being queued.
    barrier_left: AtomicUsize,
}

model_static! {
    static CALLBACKS: Callbacks = Callbacks {
        cpus: PerCpu::new(),
        orphans: AtomicUsize::new(0),
        barrier_running: AtomicBool::new(false),
        barrier_left: AtomicUsize::new(0),
    };
}

#[inline]
fn callbacks() -> &'static Callbacks {
    &CALLBACKS
}

/// [`List::due`]: callbacks are ready now. Cookies are multiples of 4, so
/// odd values cannot be mistaken for one.
const DUE_NOW: usize = 1;
/// [`List::due`]: nothing to do until the list changes.
const DUE_NEVER: usize = 3;

/// How many callbacks [`process_callbacks`] runs per list and call (Linux's
/// `blimit` is 10).
pub const CALLBACK_BATCH: usize = 16;

/// Queues `func(head)` to run after a grace period: once every read section
/// that started before this call has finished. Needs no allocation: `head`
/// is embedded in the object to be freed, and `func` finds the object from
/// it (`head.byte_sub(offset_of!(Object, head)).cast::<Object>()`).
///
/// Callbacks run from [`process_callbacks`], which the kernel calls
/// regularly (its tick or softirq), and from [`barrier`]. Callable from
/// interrupt handlers and inside read sections.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::mem::offset_of;
/// use ksync::rcu::{self, RcuHead, RcuPtr};
///
/// struct Node { value: u64, head: RcuHead }
///
/// unsafe fn free_node(head: *mut RcuHead) {
///     // SAFETY: `head` is the `head` field of a boxed `Node` (see below).
///     unsafe { drop(Box::from_raw(head.byte_sub(offset_of!(Node, head)).cast::<Node>())) }
/// }
///
/// static CURRENT: RcuPtr<Node> = RcuPtr::null();
///
/// rcu::cpu_online();
/// for value in 0..3 {
///     let new = Box::into_raw(Box::new(Node { value, head: RcuHead::new() }));
///     // SAFETY: `new` is freed only by `free_node`, after a grace period.
///     let old = unsafe { CURRENT.publish(new) };
///     if !old.is_null() {
///         // SAFETY: `old` is unpublished and stays valid until `free_node`.
///         unsafe { rcu::call_rcu(&raw mut (*old).head, free_node) };
///     }
/// }
/// assert_eq!(CURRENT.read(&rcu::read_lock()).map(|n| n.value), Some(2));
/// rcu::barrier(); // both old nodes are freed now
/// # let last = unsafe { CURRENT.publish(core::ptr::null_mut()) };
/// # unsafe { rcu::call_rcu(&raw mut (*last).head, free_node) };
/// # rcu::barrier();
/// # rcu::cpu_offline();
/// ```
///
/// # Safety
/// `head` is valid, not queued, and stays valid and otherwise untouched
/// until `func` is called with it; `func` is safe to call with it then, in
/// any CPU's callback context.
///
/// # Panics
/// If `head` is already queued (a double `call_rcu`, which would corrupt
/// the lists).
#[doc(alias("call_rcu_hurry", "kvfree_call_rcu"))]
#[track_caller]
pub unsafe fn call_rcu(head: *mut RcuHead, func: Callback) {
    // SAFETY: the caller hands us a valid head. A head that is still
    // queued is refused with its callback unchanged; the compare-exchange
    // cannot race with an invocation taking the callback (both atomic).
    // Relaxed: the list lock below hands the head over, with the callback.
    let claimed = unsafe { &(*head).func }
        .compare_exchange(0, encode(func), Ordering::Relaxed, Ordering::Relaxed)
        .is_ok();
    if !claimed {
        already_queued();
    }
    // The cookie's fence orders the caller's unpublishing before it.
    let cookie = get_state();
    let cpu = kernel::cpu_id();
    callbacks().cpus.cpu(cpu).locked(|list| {
        list.advance(engine().gp_seq.load(Ordering::Acquire));
        // SAFETY: the caller's contract; the head is now the list's.
        unsafe { list.enqueue(head, cookie.0) };
    });
    engine().request(cookie.0);
}

#[cold]
#[inline(never)]
#[track_caller]
fn already_queued() -> ! {
    panic!("rcu: call_rcu on a head that is already queued (double call_rcu)")
}

/// Runs up to [`CALLBACK_BATCH`] callbacks whose grace period has completed
/// from this CPU's list (and as many from each offline CPU's list), and
/// returns how many ran. The kernel calls it regularly on every CPU with
/// callbacks (Linux runs `rcu_core` from the tick's softirq); cheap when
/// there is nothing to do. Call it again while it returns
/// [`CALLBACK_BATCH`] or more to drain a backlog.
///
/// The callbacks run with preemption disabled (see [`Callback`]).
/// Callable in any context, including a read section or an interrupt
/// that interrupted one: a callback that is ready belongs to an object
/// unpublished before its grace period started, which a read section still
/// running on this CPU (it has not passed a quiescent state since) cannot
/// have found.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use ksync::rcu::{self, RcuHead};
///
/// static FREED: AtomicUsize = AtomicUsize::new(0);
/// static HEAD: RcuHead = RcuHead::new();
/// unsafe fn free_route(_: *mut RcuHead) {
///     FREED.fetch_add(1, Ordering::Relaxed);
/// }
///
/// rcu::cpu_online();
/// // SAFETY: a static head; the callback only counts.
/// unsafe { rcu::call_rcu(&HEAD as *const RcuHead as *mut RcuHead, free_route) };
/// assert_eq!(rcu::process_callbacks(), 0); // its grace period is still running
/// rcu::synchronize();
/// assert_eq!(rcu::process_callbacks(), 1); // the tick's softirq runs it now
/// assert_eq!(FREED.load(Ordering::Relaxed), 1);
/// # rcu::cpu_offline();
/// ```
#[doc(alias("rcu_core", "rcu_do_batch", "invoke_rcu_core"))]
pub fn process_callbacks() -> usize {
    process_callbacks_max(CALLBACK_BATCH)
}

/// [`process_callbacks`] with a batch limit of `limit` per list.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuHead};
///
/// static HEADS: [RcuHead; 3] = [const { RcuHead::new() }; 3];
/// unsafe fn free_buf(_: *mut RcuHead) {}
///
/// rcu::cpu_online();
/// for head in &HEADS {
///     // SAFETY: static heads; the callback does nothing.
///     unsafe { rcu::call_rcu(head as *const RcuHead as *mut RcuHead, free_buf) };
/// }
/// rcu::synchronize();
/// // A tick with little time to spare runs two; the next one the rest.
/// assert_eq!(rcu::process_callbacks_max(2), 2);
/// assert_eq!(rcu::process_callbacks_max(2), 1);
/// # rcu::cpu_offline();
/// ```
pub fn process_callbacks_max(limit: usize) -> usize {
    let cbs = callbacks();
    let mut ran = process_cpu(cbs.cpus.cpu(kernel::cpu_id()), limit, false);
    // Relaxed: a hint; the lists are checked under their locks.
    if cbs.orphans.load(Ordering::Relaxed) != 0 {
        for cpu in cbs.cpus.iter() {
            ran += process_cpu(cpu, limit, true);
        }
    }
    ran
}

/// Runs up to `limit` completed callbacks of `cpu`'s list (only if the CPU
/// is offline, with `orphans_only`).
fn process_cpu(cpu: &Cpu, limit: usize, orphans_only: bool) -> usize {
    // Relaxed: a hint, re-checked under the lock. Checked first, so that
    // a CPU with nothing queued does not even read `gp_seq`.
    let due = cpu.due.load(Ordering::Relaxed);
    if due == DUE_NEVER {
        return 0;
    }
    // Acquire pairs with the Release that ended the grace period.
    let seq = engine().gp_seq.load(Ordering::Acquire);
    if due != DUE_NOW && !seq_ge(seq, due) {
        return 0;
    }
    let (mut cur, n) = cpu.locked(|list| {
        if list.invoking || (orphans_only && !list.offline) {
            return (ptr::null_mut(), 0);
        }
        list.advance(seq);
        let batch = list.take_done(limit);
        list.invoking = batch.1 != 0;
        batch
    });
    if n == 0 {
        return 0;
    }
    // W1: the readers' accesses happen-before the callbacks.
    fence(Ordering::SeqCst);
    // Preemption off while the callbacks run (see `Callback`); debug
    // builds: a callback that waits for a grace period panics.
    let _in_callback = InCallback::enter();
    while !cur.is_null() {
        let h = cur;
        // SAFETY: `h` was dequeued above and is ours until its callback
        // starts (the caller of `call_rcu` keeps it valid until then).
        let word = unsafe {
            cur = (*h).next.with(|p| *p);
            // Relaxed: the list lock handed the head over.
            (*h).func.swap(0, Ordering::Relaxed)
        };
        assert_ne!(word, 0, "rcu: queued head without a callback");
        // SAFETY: a non-zero word is one `call_rcu` (or `barrier`) encoded.
        let func = unsafe { decode(word) };
        // SAFETY: `call_rcu`'s contract: safe to call now, after the grace
        // period.
        unsafe { func(h) };
    }
    cpu.locked(|list| {
        list.invoking = false;
        list.len -= n;
    });
    n
}

/// Waits until every callback queued (on any CPU) before the call has run
/// (Linux's `rcu_barrier`). Drives the grace periods and runs the
/// callbacks itself where needed, so it does not depend on other CPUs
/// calling [`process_callbacks`]. Call it before unloading the code or
/// freeing the memory the callbacks use.
///
/// Reports this CPU's quiescent states while it waits, so it must not be
/// called inside a read section, nor from a callback (it would wait for
/// itself). Waits with preemption enabled (it holds no ksync lock across
/// the wait; concurrent barriers take turns), so the calling task may be
/// preempted or migrate meanwhile.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuHead};
///
/// static HEAD: RcuHead = RcuHead::new();
/// unsafe fn module_free_cb(_: *mut RcuHead) {}
///
/// // SAFETY: a static head; the callback does nothing.
/// unsafe { rcu::call_rcu(&HEAD as *const RcuHead as *mut RcuHead, module_free_cb) };
/// // Before the callback's code goes away (a module unload):
/// rcu::barrier();
/// assert_eq!(rcu::pending_callbacks(), 0);
/// ```
///
/// # Panics
/// Inside a read-side critical section (every build), or from a callback
/// (debug builds).
#[doc(alias = "rcu_barrier")]
#[track_caller]
pub fn barrier() {
    super::check_may_wait("rcu::barrier()");
    let cbs = callbacks();
    // Another barrier may be waiting for a grace period that needs this
    // CPU's quiescent state: report them while waiting for our turn.
    // Acquire pairs with the Release in `BarrierRunning::drop`: the previous
    // barrier's heads ran before we reuse them.
    while cbs
        .barrier_running
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        waiting_quiescent_state("rcu::barrier()");
        spin_loop();
    }
    let _running = BarrierRunning(&cbs.barrier_running);
    // One for the queuing itself, so that early callbacks cannot reach 0.
    cbs.barrier_left.store(1, Ordering::Relaxed);
    for cpu in cbs.cpus.iter() {
        let head = &cpu.barrier_head as *const RcuHead as *mut RcuHead;
        cpu.locked(|list| {
            if list.len != 0 {
                // Relaxed: ordered before the Release decrement below.
                cbs.barrier_left.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the barrier head is ours (`barrier_running`)
                // and idle: the previous barrier waited for it to run.
                unsafe {
                    (*head)
                        .func
                        .store(encode(barrier_callback), Ordering::Relaxed);
                    list.enqueue_last(head);
                }
            }
        });
    }
    // Release pairs with the Acquire load below (the loop's exit).
    cbs.barrier_left.fetch_sub(1, Ordering::Release);
    // Acquire pairs with the Release in `barrier_callback`: the callbacks
    // before each barrier head ran before it did.
    while cbs.barrier_left.load(Ordering::Acquire) != 0 {
        let mut ran = 0;
        for cpu in cbs.cpus.iter() {
            ran += process_cpu(cpu, usize::MAX, false);
        }
        if ran == 0 {
            waiting_quiescent_state("rcu::barrier()");
            spin_loop();
        }
    }
}

/// [`Callbacks::barrier_running`] held; released when it drops.
struct BarrierRunning<'a>(&'a AtomicBool);

impl Drop for BarrierRunning<'_> {
    fn drop(&mut self) {
        // Release pairs with the Acquire in `barrier`.
        self.0.store(false, Ordering::Release);
    }
}

unsafe fn barrier_callback(_head: *mut RcuHead) {
    // Release: see `barrier`.
    callbacks().barrier_left.fetch_sub(1, Ordering::Release);
}

/// Callbacks queued on all CPUs that have not finished yet.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuHead};
///
/// static HEADS: [RcuHead; 2] = [const { RcuHead::new() }; 2];
/// unsafe fn free_obj(_: *mut RcuHead) {}
///
/// for head in &HEADS {
///     // SAFETY: static heads; the callback does nothing.
///     unsafe { rcu::call_rcu(head as *const RcuHead as *mut RcuHead, free_obj) };
/// }
/// assert_eq!(rcu::pending_callbacks(), 2); // for statistics
/// rcu::barrier();
/// assert_eq!(rcu::pending_callbacks(), 0);
/// ```
#[must_use]
pub fn pending_callbacks() -> usize {
    callbacks()
        .cpus
        .iter()
        // Relaxed: a snapshot for statistics and tests.
        .map(|cpu| cpu.len.load(Ordering::Relaxed))
        .sum()
}

/// Whether this CPU has callbacks queued (a kernel keeps its tick, or
/// calls [`process_callbacks`] before idling, while it does).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuHead};
///
/// static HEAD: RcuHead = RcuHead::new();
/// unsafe fn free_obj(_: *mut RcuHead) {}
///
/// assert!(!rcu::has_callbacks()); // the idle loop may stop the tick
/// // SAFETY: a static head; the callback does nothing.
/// unsafe { rcu::call_rcu(&HEAD as *const RcuHead as *mut RcuHead, free_obj) };
/// assert!(rcu::has_callbacks()); // keep the tick until they have run
/// rcu::barrier();
/// assert!(!rcu::has_callbacks());
/// ```
#[doc(alias = "rcu_needs_cpu")]
#[must_use]
pub fn has_callbacks() -> bool {
    // Relaxed: a hint; running the callbacks re-checks under the lock.
    callbacks()
        .cpus
        .cpu(kernel::cpu_id())
        .len
        .load(Ordering::Relaxed)
        != 0
}

/// `cpu` goes offline (`offline == true`) or comes back: an offline CPU's
/// callbacks are run by whichever CPU calls [`process_callbacks`].
pub(super) fn set_offline(cpu: usize, offline: bool) {
    callbacks()
        .cpus
        .cpu(cpu)
        .locked(|list| list.offline = offline);
}

// ---- the allocating helper ------------------------------------------------

#[cfg(feature = "alloc")]
mod free {
    use alloc::boxed::Box;

    use super::{RcuHead, call_rcu};

    #[repr(C)]
    struct Deferred<T> {
        // First, so that a pointer to the head is one to the whole.
        head: RcuHead,
        value: Box<T>,
    }

    unsafe fn drop_deferred<T>(head: *mut RcuHead) {
        // SAFETY: `head` is the first field of a `Deferred<T>` leaked by
        // `defer_free` (`repr(C)`), and its callback runs once.
        drop(unsafe { Box::from_raw(head.cast::<Deferred<T>>()) });
    }

    /// Drops `value` after a grace period, from a callback (feature
    /// `alloc`). Costs one small allocation for the [`RcuHead`]; embed a
    /// head and use [`call_rcu`] to avoid it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuPtr};
    ///
    /// static NAME: RcuPtr<String> = RcuPtr::null();
    ///
    /// // SAFETY (both): fresh boxes, freed only after a grace period.
    /// unsafe { NAME.publish(Box::into_raw(Box::new("old".to_string()))) };
    /// let old = unsafe { NAME.publish(Box::into_raw(Box::new("new".to_string()))) };
    /// // SAFETY: `old` came from `Box::into_raw` and is unpublished.
    /// rcu::defer_free(unsafe { Box::from_raw(old) });
    /// rcu::barrier(); // "old" is dropped now
    /// # rcu::defer_free(unsafe { Box::from_raw(NAME.publish(core::ptr::null_mut())) });
    /// # rcu::barrier();
    /// ```
    #[doc(alias("kfree_rcu", "kvfree_rcu", "kfree_rcu_mightsleep"))]
    pub fn defer_free<T: Send + 'static>(value: Box<T>) {
        let deferred = Box::into_raw(Box::new(Deferred {
            head: RcuHead::new(),
            value,
        }));
        // SAFETY: a fresh, leaked head; `drop_deferred::<T>` frees exactly
        // this allocation, and `T: Send` may be dropped on any CPU.
        unsafe { call_rcu(&raw mut (*deferred).head, drop_deferred::<T>) };
    }
}

#[cfg(feature = "alloc")]
pub use free::defer_free;
