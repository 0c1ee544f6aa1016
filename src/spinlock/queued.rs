//! The queued spinlock (Linux's `qspinlock`). The design, with the lock
//! word's layout, is [`QueuedLock`]'s documentation, so that rustdoc shows
//! it (this module is private; its items are re-exported by `spinlock`).

use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{Ordering::SeqCst, compiler_fence};

use super::tracked::{ArchSpinlock, FairArchSpinlock, RawSpinlock, tracked_constructors};
use super::up::{self, UP};
use super::{IrqDisabled, PreemptDisabled, RelaxStrategy, Spin};
use crate::kernel::{
    self, Backoff, MAX_CPUS, StallSite, StallWatch, kick_waiters, vcpu_preemptible,
};
use crate::percpu::{CachePadded, PerCpu};
use crate::sync::{AtomicU32, Ordering, const_fn, relax};
use Ordering::{AcqRel, Acquire, Relaxed, Release};

/// A [`lock_api::Mutex`] over a [`RawQueuedLock`] (preemption disabled
/// while held).
#[doc(alias = "qspinlock")]
pub type QueuedMutex<T> = lock_api::Mutex<RawQueuedLock, T>;
/// A [`QueuedMutex`] that saves and disables local interrupts while held,
/// then preemption (through the kernel's hooks):
/// [`SpinLock<T, IrqDisabled, QueuedLock>`](super::SpinLock), as
/// [`IrqTicketMutex`](super::IrqTicketMutex).
pub type IrqQueuedMutex<T> = super::SpinLock<T, IrqDisabled, QueuedLock>;

// ---- the word (the layout table is in `QueuedLock`'s docs) -------------------

/// The locked byte.
const LOCKED_MASK: u32 = 0xff;
/// The locked byte's "held" value.
const LOCKED: u32 = 1;
/// The pending bit (bit 8; bits 9-15 stay zero).
const PENDING: u32 = 1 << 8;
/// The locked and pending bytes: what the queue head waits to see clear.
const LOCKED_PENDING_MASK: u32 = 0xffff;
/// The tail: index and CPU.
const TAIL_MASK: u32 = !LOCKED_PENDING_MASK;
const TAIL_IDX_SHIFT: u32 = 16;
const TAIL_IDX_MASK: u32 = 0b11;
const TAIL_CPU_SHIFT: u32 = 18;
/// Nodes per CPU: thread, softirq, hardirq, NMI.
const NODES_PER_CPU: usize = 4;

/// The tail value naming node `idx` of `cpu`.
#[inline]
fn encode_tail(cpu: usize, idx: usize) -> u32 {
    // `CPUS_FIT` bounds `cpu + 1` to 14 bits; `idx < NODES_PER_CPU`.
    ((cpu as u32 + 1) << TAIL_CPU_SHIFT) | ((idx as u32) << TAIL_IDX_SHIFT)
}

/// `(cpu, idx)` of a non-zero tail.
#[inline]
fn decode_tail(tail: u32) -> (usize, usize) {
    let cpu = (tail >> TAIL_CPU_SHIFT) as usize - 1;
    let idx = ((tail >> TAIL_IDX_SHIFT) & TAIL_IDX_MASK) as usize;
    (cpu, idx)
}

// ---- per-CPU queue nodes ------------------------------------------------------

/// One MCS queue node. Only its CPU initialises it; its predecessor writes
/// `locked` and its successor writes `next`, each once per queueing.
struct Node {
    /// Set to 1 by the predecessor when this node becomes the queue head.
    locked: AtomicU32,
    /// The successor's tail value, 0 until it links itself.
    next: AtomicU32,
    /// Node 0 only: how many of this CPU's nodes are in use (Linux's
    /// `node->count`). Only this CPU and its interrupt handlers touch it.
    count: AtomicU32,
    /// Hand-offs this node's CPU has seen while queued (its predecessor's
    /// count moving, becoming the queue head, the word changing under the
    /// head), for the stall watch of its successor, which reads it now and
    /// then: the queue's progress passed back one node at a time. Only
    /// this node's CPU writes it; never touched under loom (the watch is
    /// inert there).
    handoffs: AtomicU32,
}

impl Node {
    const_fn! {
        fn new() -> Self {
            Self {
                locked: AtomicU32::new(0),
                next: AtomicU32::new(0),
                count: AtomicU32::new(0),
                handoffs: AtomicU32::new(0),
            }
        }
    }

    /// This node's CPU saw a hand-off: its successor's watch sees the
    /// count move. Relaxed load and store: only this CPU writes it, and
    /// its reader only compares values (a stall heuristic, never
    /// exclusion).
    #[inline]
    fn saw_handoff(&self) {
        if !cfg!(ksync_loom) {
            let n = self.handoffs.load(Relaxed);
            self.handoffs.store(n.wrapping_add(1), Relaxed);
        }
    }
}

/// A queued CPU's view of the node ahead of it, for its stall watch: the
/// predecessor's hand-off count, and whether it moved since the last
/// look (then this CPU saw a hand-off too, and passes it on).
struct Ahead {
    node: &'static Node,
    seen: u32,
}

impl Ahead {
    /// Called by the watch when it looks (never under loom): the value it
    /// watches, the predecessor's count. A move is passed on to `mine`.
    #[inline]
    fn look(&mut self, mine: &Node) -> u32 {
        // Relaxed: a value for the stall clock only. The node may be
        // reused by its CPU for another lock once it handed us the lock,
        // after our last look: any value then is only a clock restart.
        let now = self.node.handoffs.load(Relaxed);
        if now != self.seen {
            self.seen = now;
            mine.saw_handoff();
        }
        now
    }
}

/// A CPU's nodes, each on its own cache line: a waiter's spinning never
/// shares a line with another node's hand-off.
struct CpuNodes([CachePadded<Node>; NODES_PER_CPU]);

#[cfg(not(ksync_loom))] // a constant node set; loom builds one per execution (below)
impl crate::percpu::ConstInit for CpuNodes {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self([const { CachePadded::new(Node::new()) }; NODES_PER_CPU]);
}

#[cfg(not(ksync_loom))] // the `static`'s loom twin follows
static NODES: PerCpu<CpuNodes> = PerCpu::new();

// loom atomics cannot be built in a constant: one node set per execution.
#[cfg(ksync_loom)]
loom::lazy_static! {
    static ref NODES: PerCpu<CpuNodes> =
        PerCpu::from_fn(|_| CpuNodes(core::array::from_fn(|_| CachePadded::new(Node::new()))));
}

/// The node a non-zero tail value names.
#[inline]
fn node_of(tail: u32) -> &'static Node {
    let nodes: &'static PerCpu<CpuNodes> = &NODES;
    let (cpu, idx) = decode_tail(tail);
    &nodes.cpu(cpu).0[idx]
}

/// This CPU's nesting level, taken for one slow-path acquisition: restores
/// the count when dropped.
struct Nesting {
    count: &'static AtomicU32,
    idx: u32,
}

impl Nesting {
    /// Takes the next level on `cpu`.
    #[inline]
    fn enter(cpu: usize) -> Self {
        let nodes: &'static PerCpu<CpuNodes> = &NODES;
        let count = &nodes.cpu(cpu).0[0].count;
        // Relaxed load and store, not an atomic increment: only this CPU
        // updates its count, and an interrupt that arrives in between
        // restores what it found before it returns (interrupts nest).
        let idx = count.load(Relaxed);
        count.store(idx + 1, Relaxed);
        // The node must not be touched before an interrupt on this CPU
        // can see the new count (a compiler barrier: only this CPU
        // races with itself here; Linux's `barrier()`).
        compiler_fence(SeqCst);
        Self { count, idx }
    }
}

impl Drop for Nesting {
    #[inline]
    fn drop(&mut self) {
        // Every access to the node is done before an interrupt on this CPU
        // may take it again.
        compiler_fence(SeqCst);
        self.count.store(self.idx, Relaxed);
    }
}

// ---- the lock -----------------------------------------------------------------

/// A queued spinlock (Linux's `qspinlock`) in one 32-bit word: FIFO, with
/// each waiter spinning on its own per-CPU node. The contended path needs
/// the kernel hooks ([`set_kernel!`](crate::set_kernel)).
///
/// # Why another FIFO lock
///
/// The ticket lock is fair, but every waiter spins on the lock's own cache
/// line: each unlock invalidates that line in every waiting CPU, and all of
/// them fetch it again to see whose turn it is, so one hand-off costs a
/// number of line transfers that grows with the number of waiters. An MCS
/// lock queues waiters in a linked list of nodes, one per waiter, and each
/// waiter spins on a flag in *its own* node: the releasing CPU writes one
/// remote line (its successor's flag) however many CPUs wait. The price of
/// a classic MCS lock is a node per acquisition, passed from lock to
/// unlock, and a two-word lock.
///
/// Linux's qspinlock keeps the MCS queue's scaling and fits in 32 bits:
///
/// * The nodes are per-CPU, not per-acquisition. A CPU waits for at most
///   one lock per context, and contexts nest only as thread, softirq,
///   hardirq and NMI, so four nodes per CPU are enough. Each CPU counts how
///   deep it is nested (the count lives in its first node); an interrupt
///   arriving while this CPU is queued takes the next node. Deeper nesting
///   (a fifth level) has no node, so it spins on the lock word with
///   test-and-set instead of corrupting a node in use.
/// * The list is named by its tail only, written into the lock word as
///   `(CPU + 1, nesting index)`; zero means no queue. A newcomer swaps
///   itself in as the tail and links itself behind the old one.
/// * The first waiter never queues: it sets the *pending* bit and spins on
///   the word itself (a second cache line is not worth it for one waiter);
///   only the second and later waiters build the queue. The queue head, in
///   turn, spins on the word until the owner and the pending CPU are gone.
/// * The node is needed only while waiting: the new owner has left the
///   queue before it returns, so `unlock` is one store of the locked byte
///   and a guard carries nothing.
///
/// # The lock word
///
/// | bits | field | meaning |
/// |---|---|---|
/// | 0-7 | locked byte | 1 while held (only bit 0 is ever set) |
/// | 8 | pending | the first waiter, spinning on this word |
/// | 9-15 | (zero) | the rest of the pending byte |
/// | 16-17 | tail index | nesting level of the last queued waiter's node (0 thread, 1 softirq, 2 hardirq, 3 NMI) |
/// | 18-31 | tail CPU | that waiter's CPU + 1; 0 (with index 0) means no queue |
///
/// Linux updates the locked byte and the pending byte with byte and
/// halfword stores into this word. Rust's memory model has no mixed-size
/// atomic accesses to one location, so every update in Rust here is a
/// 32-bit atomic on the whole word: compare-exchange, `fetch_or`,
/// `fetch_and`, `fetch_add`. The one exception is `unlock` on aarch64 and
/// riscv64 (bare metal): Linux's release store of the locked byte alone
/// (`stlrb`, `fence rw,w; sb`), in `asm!` with the hardware's argument for
/// it, so that an uncontended lock costs one atomic read-modify-write, as
/// the ticket lock does. On x86_64, and elsewhere and under loom, unlock
/// is a Release `fetch_sub`: on x86_64 the byte store measured slower (the
/// next `lock cmpxchg` stalls on the narrower store; see `arch`), so the
/// queued lock's uncontended pair costs two locked instructions there
/// against the ticket lock's one.
/// Fourteen CPU bits limit the lock to 16 383 CPUs: using it with a larger
/// [`MAX_CPUS`] fails the build.
///
/// # Oversubscribed CPUs
///
/// FIFO hand-off is a liability when a CPU can be descheduled while it
/// waits (a guest with more vCPUs than host cores, host tests): the lock is
/// passed to a queued CPU that is not running, and everyone behind it waits
/// for the host to schedule it. When [`vcpu_preemptible`] says so, a
/// contended `lock` does not queue at all: it waits until the whole word is
/// zero and takes it with one compare-exchange, backing off exponentially
/// between attempts, as Linux's `virt_spin_lock` does. Fairness is traded
/// for progress. Both modes may run on one lock at once (a test-and-set
/// taker only succeeds when nobody is queued), so changing the setting
/// never breaks exclusion.
///
/// In either mode a waiter that has spun for
/// [`SPIN_LIMIT`](crate::kernel::SPIN_LIMIT) rounds calls the kernel's
/// [`SpinWait::wait`](crate::kernel::SpinWait), which may give the CPU away
/// (the host test hooks yield the thread; the default elsewhere keeps
/// spinning) or halt it until kicked. That keeps the FIFO queue live on an
/// oversubscribed machine too: the CPUs queued behind a descheduled one let
/// it run.
///
/// # Halting waiters
///
/// Every store that can make some waiter's condition true is followed by a
/// kick ([`SpinWait`](crate::kernel::SpinWait)'s contract; the kick is
/// sent only while some waiter has advertised that it may halt):
///
/// | store | whose wait it ends |
/// |---|---|
/// | `unlock`'s store of the locked byte | the pending CPU (locked byte clear), the queue head (locked and pending clear), test-and-set waiters (word zero) |
/// | the pending-bit undo (`fetch_and`) | the queue head (pending clear) |
/// | a newcomer's link into its predecessor's `next` | the queue head, which holds the lock and waits for it |
/// | the head's hand-off to its successor's `locked` | that successor |
///
/// The other updates make no waiter's condition true: the pending CPU's
/// `fetch_add` and the head's compare-exchange or `fetch_or` set the
/// locked byte, and a tail exchange only adds a waiter.
///
/// # The fifth nesting level
///
/// A CPU nested five deep has no node: it waits on the word by
/// test-and-set and never joins the queue. It does pass through the pending
/// step first, so its `fetch_or(PENDING)` can land after a queue formed,
/// between the queue head's load of the word (locked and pending clear, the
/// tail its own) and its "last in the queue" compare-exchange, which then
/// fails. Linux's head takes such a failure to mean that a successor is
/// linking (`set_locked`, then wait for `next`), which the fifth-level CPU
/// never does: the head would hold the lock and wait for ever, and so would
/// the fifth-level CPU (Linux has the same hazard, for NMIs nested in
/// NMIs). Here the head takes nothing for granted: after a failed exchange
/// it reads the word again, waits while pending is set (a pending bit set
/// while a tail exists is always transient: its setter saw the tail and
/// clears it, with a kick), and either exchanges again or, if the tail is
/// no longer its own, locks and waits for the successor that put it there.
/// The retries are bounded: only a CPU whose first look at the word saw no
/// tail can set pending once a tail exists.
///
/// # Kernel hooks
///
/// The contended FIFO path names this CPU's nodes by [`kernel::cpu_id`] and
/// keeps preemption disabled while queued, so a binary that uses this lock
/// needs [`set_kernel!`](crate::set_kernel) (the host test hooks provide
/// it). The uncontended path calls no hook.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::QueuedMutex;
///
/// static INODES: QueuedMutex<u64> = QueuedMutex::new(0);
///
/// *INODES.lock() += 1;
/// assert_eq!(*INODES.lock(), 1);
/// assert!(INODES.try_lock().is_some());
/// ```
///
/// # Lock-order checking
///
/// This is the algorithm alone: it tells [`lockdep`](crate::lockdep)
/// nothing. [`RawQueuedLock`] is the same lock with its class.
///
/// # Invariants
/// The locked byte is 0 or 1 and only its holder clears it; the pending
/// bit is set by at most one CPU at a time as its owner (others may set it
/// for an instant and clear it again when they see it was theirs to clear);
/// a non-zero tail names a node whose CPU is queued on this lock.
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock, the one [`new`](Self::new)
/// builds (not locked, not pending, no tail). `bytemuck::Zeroable` with the
/// `bytemuck` feature.
#[doc(alias("qspinlock", "arch_spinlock_t", "queued_spin_lock"))]
#[repr(transparent)]
pub struct QueuedLock<R = Spin> {
    val: AtomicU32,
    relax: PhantomData<R>,
}

impl QueuedLock {
    const_fn! {
        /// A new, unlocked queued lock that spins with [`Spin`].
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::QueuedLock;
        ///
        /// static LOCK: QueuedLock = QueuedLock::new(); // one 32-bit word, unlocked
        /// assert!(!LOCK.is_locked());
        /// ```
        pub fn new() -> Self {
            Self::with_relax()
        }
    }
}

impl<R> QueuedLock<R> {
    /// Fails the build if a tail cannot name every CPU.
    const CPUS_FIT: () = assert!(
        MAX_CPUS < 1 << (32 - TAIL_CPU_SHIFT),
        "QueuedLock names CPUs in 14 bits: KSYNC_MAX_CPUS must be below 16384"
    );

    const_fn! {
        /// A new, unlocked queued lock with the relax strategy `R`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::{Loop, QueuedLock};
        ///
        /// static LOCK: QueuedLock<Loop> = QueuedLock::with_relax();
        /// assert!(LOCK.try_lock());
        /// # unsafe { LOCK.unlock() };
        /// ```
        pub fn with_relax() -> Self {
            Self { val: AtomicU32::new(0), relax: PhantomData }
        }
    }

    /// Tries to take the lock without waiting: succeeds only when nobody
    /// holds it, is about to, or is queued for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::QueuedLock;
    ///
    /// let lock = QueuedLock::new();
    /// assert!(lock.try_lock()); // `queued_spin_trylock`
    /// assert!(!lock.try_lock());
    /// // SAFETY: taken by the first `try_lock`.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "queued_spin_trylock")]
    #[inline]
    #[must_use = "the lock is held when this returns `true` and must be unlocked"]
    pub fn try_lock(&self) -> bool {
        if UP {
            return self.try_lock_up();
        }
        // Read first: a failed compare-exchange would still take the line
        // exclusively. Acquire pairs with the release in
        // `unlock` (directly, or through the read-modify-writes after it).
        self.val.load(Relaxed) == 0
            && self
                .val
                .compare_exchange(0, LOCKED, Acquire, Relaxed)
                .is_ok()
    }

    /// Whether the lock is held or about to be (a pending or queued CPU
    /// counts, as in Linux's `queued_spin_is_locked`). A snapshot, stale
    /// the moment it returns: not for synchronization.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::QueuedLock;
    ///
    /// let lock = QueuedLock::new();
    /// lock.lock();
    /// assert!(lock.is_locked()); // `queued_spin_is_locked`
    /// // SAFETY: held by this context.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "queued_spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.val.load(Relaxed) != 0
    }

    /// Whether CPUs wait for the lock in FIFO mode (pending or queued; a
    /// snapshot, like [`is_locked`](Self::is_locked)). Test-and-set waiters
    /// ([`vcpu_preemptible`] mode) leave no mark in the word and are not
    /// seen.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::QueuedLock;
    ///
    /// let lock = QueuedLock::new();
    /// lock.lock();
    /// assert!(!lock.is_contended()); // nobody pending or queued
    /// // SAFETY: held by this context.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "queued_spin_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.val.load(Relaxed) & !LOCKED_MASK != 0
    }

    /// Releases the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::QueuedLock;
    ///
    /// let lock = QueuedLock::new();
    /// lock.lock();
    /// // SAFETY: this context holds it (`queued_spin_unlock`).
    /// unsafe { lock.unlock() };
    /// assert!(!lock.is_locked());
    /// ```
    ///
    /// # Safety
    /// The lock must be held by the caller's context.
    #[doc(alias = "queued_spin_unlock")]
    #[inline]
    pub unsafe fn unlock(&self) {
        if UP {
            debug_assert!(
                self.val.load(Relaxed) == LOCKED,
                "unlock of a queued lock that is not held"
            );
            up::releasing();
            // Relaxed, a store: on one CPU nobody sets pending or a tail
            // (that is the contended path, which a recursion never takes
            // here), and `releasing` keeps the critical section above it.
            self.val.store(0, Relaxed);
            return;
        }
        debug_assert!(
            self.val.load(Relaxed) & LOCKED_MASK == LOCKED,
            "unlock of a queued lock that is not held"
        );
        // Clears the locked byte, leaving pending and the tail, which
        // others may be changing: a release store of that byte alone where
        // the architecture has one (Linux's `queued_spin_unlock`), else a
        // Release `fetch_sub` (see `arch`). Release pairs with the Acquire
        // in `lock`, `try_lock` and the waiters' loads of the word.
        // SAFETY: the caller holds the lock (contract), so the locked byte
        // is 1 and ours to clear; every other access to the word here is a
        // 32-bit atomic.
        unsafe { crate::arch::queued_unlock(&self.val) };
        // Always (one flag load when nobody may halt): a pending CPU, the
        // queue head, or a test-and-set waiter (from either mode, or the
        // fifth nesting level) may be halted on this store.
        kick_waiters();
    }
}

impl<R: RelaxStrategy> QueuedLock<R> {
    /// Spins until the lock is taken: FIFO through the pending bit and the
    /// queue, or by test-and-set when CPUs may be descheduled while they
    /// spin ([`vcpu_preemptible`]; see the module docs).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::QueuedLock;
    ///
    /// static LOCK: QueuedLock = QueuedLock::new();
    /// LOCK.lock(); // one CAS when free; pending bit, then an MCS queue, when not
    /// // SAFETY: held by this context.
    /// unsafe { LOCK.unlock() };
    /// ```
    #[doc(alias = "queued_spin_lock")]
    #[inline]
    pub fn lock(&self) {
        if UP {
            if !self.try_lock_up() {
                self.lock_up_held();
            }
            return;
        }
        // Acquire pairs with the release in `unlock`.
        if let Err(val) = self.val.compare_exchange(0, LOCKED, Acquire, Relaxed) {
            self.lock_slow(val);
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, val: u32) {
        if vcpu_preemptible() {
            return self.lock_word();
        }
        self.lock_pending(val);
    }

    /// Test-and-set on the whole word (Linux's `virt_spin_lock`): wait,
    /// reading, with bounded exponential backoff until nobody holds, is
    /// pending or is queued, then compare-exchange from zero.
    #[doc(alias = "virt_spin_lock")]
    fn lock_word(&self) {
        let mut backoff = Backoff::new();
        while !self.try_lock() {
            backoff.backoff::<R>();
        }
    }

    /// The first waiter: owns the pending bit and spins on the word. Joins
    /// the queue if someone is pending or queued already.
    fn lock_pending(&self, mut val: u32) {
        // Pending set, locked clear: the pending CPU is taking the lock
        // this instant. Look once more before queueing behind it.
        if val == PENDING {
            val = self.val.load(Relaxed);
        }
        if val & !LOCKED_MASK == 0 {
            // Acquire: if the lock is free already, this is where we
            // synchronize with its last unlock (its release of the locked byte,
            // through any read-modify-writes after it).
            let prev = self.val.fetch_or(PENDING, Acquire);
            if prev & !LOCKED_MASK == 0 {
                // Ours. Wait for the owner to go.
                if prev & LOCKED_MASK != 0 {
                    let mut watch = StallWatch::new(StallSite::Queued);
                    loop {
                        // Acquire pairs with the release in
                        // `unlock`.
                        let val = self.val.load(Acquire);
                        if val & LOCKED_MASK == 0 {
                            break;
                        }
                        watch.wait::<R>(|| val, true);
                    }
                }
                // Clear pending and set locked in one add (the locked byte
                // is 0, pending is 1). Relaxed: the Acquire above ordered
                // us after the unlock. Nobody else sets locked meanwhile:
                // the queue head waits for pending to clear, `try_lock`
                // for a zero word.
                self.val.fetch_add(LOCKED.wrapping_sub(PENDING), Relaxed);
                return;
            }
            // Someone else is pending or queued. Undo our bit if we set it.
            // Relaxed: the bit was never ours, it published nothing. A
            // queue head may be waiting (even halted) for it to clear.
            if prev & PENDING == 0 {
                self.val.fetch_and(!PENDING, Relaxed);
                kick_waiters();
            }
        }
        self.lock_queued();
    }

    /// The MCS queue (Linux's `queued_spin_lock_slowpath` after the
    /// pending step).
    fn lock_queued(&self) {
        let () = Self::CPUS_FIT;
        // The nodes are this CPU's: stay on it while one is in use.
        let (_preempt, cpu) = kernel::preempt_disable_cpu();
        let nesting = Nesting::enter(cpu);
        let idx = nesting.idx as usize;
        if idx >= NODES_PER_CPU {
            // Nested deeper than thread, softirq, hardirq and NMI: no node
            // left. Spin on the word rather than reuse one.
            return self.lock_word();
        }
        let tail = encode_tail(cpu, idx);
        let node = node_of(tail);
        // Relaxed: published by the Release tail exchange below.
        node.locked.store(0, Relaxed);
        node.next.store(0, Relaxed);

        // The node's line may have been cold; the lock may be free by now.
        if self.try_lock() {
            return;
        }

        // Swap our tail in, keeping the locked and pending bytes. Release:
        // our successor reads this tail (Acquire) before it writes our
        // `next`, so our initialisation above cannot overwrite its link.
        // Acquire: likewise for our predecessor's node, which we link to.
        let mut val = self.val.load(Relaxed);
        let old = loop {
            let new = (val & LOCKED_PENDING_MASK) | tail;
            match self.val.compare_exchange_weak(val, new, AcqRel, Relaxed) {
                Ok(old) => break old,
                Err(now) => val = now,
            }
        };

        // Every stage below watches for a stall (the kernel's
        // `StallWatch`): time in which this CPU saw no hand-off ahead of
        // it, never the length of the queue. A queued CPU cannot see the
        // hand-offs at the head from its own node, and the lock word reads
        // the same (`tail | LOCKED`) after each of them; so it watches its
        // predecessor's hand-off count, which moves whenever the
        // predecessor saw one (see `Node::handoffs`), and moves its own for
        // its successor. The head watches the word, which changes when its
        // owner or the pending CPU lets go.
        let mut watch = StallWatch::new(StallSite::Queued);
        if old & TAIL_MASK != 0 {
            let pred = node_of(old);
            let mut ahead = Ahead {
                node: pred,
                seen: if cfg!(ksync_loom) {
                    0
                } else {
                    // Relaxed: see `Ahead::look`.
                    pred.handoffs.load(Relaxed)
                },
            };
            // Link behind the old tail. Release pairs with its Acquire load
            // of `next`: our `locked = 0` happens-before its hand-off.
            pred.next.store(tail, Release);
            // Our predecessor may be the queue head, holding the lock and
            // waiting (even halted) for this link.
            kick_waiters();
            // Acquire pairs with the predecessor's Release hand-off store.
            while node.locked.load(Acquire) == 0 {
                watch.wait::<R>(|| ahead.look(node), true);
            }
            // Handed the head: a hand-off, for us and our successor.
            node.saw_handoff();
            watch.restart();
        }

        // Queue head: wait for the owner and the pending CPU to go, then
        // take the lock. Acquire pairs with the release in
        // `unlock`.
        let mut word = None;
        loop {
            let val = self.val.load(Acquire);
            if val & LOCKED_PENDING_MASK != 0 {
                watch.wait::<R>(
                    || {
                        // The owner or the pending CPU let go (or a CPU
                        // queued behind us): tell our successor.
                        if word.replace(val).is_some_and(|w| w != val) {
                            node.saw_handoff();
                        }
                        val
                    },
                    true,
                );
                continue;
            }
            if val & TAIL_MASK != tail {
                // Someone queued behind us.
                break;
            }
            // Last in the queue: clear the tail and lock in one step.
            // Relaxed: the Acquire load above ordered us after the unlock.
            if self
                .val
                .compare_exchange(val, LOCKED, Relaxed, Relaxed)
                .is_ok()
            {
                return;
            }
            // A successor swapped its tail in, or a CPU set pending for an
            // instant (it saw the tail and clears the bit again): look
            // again. Not "assume a successor": the CPU that set pending may
            // be at the fifth nesting level, which never links behind us
            // (see "The fifth nesting level" in the type's docs).
        }
        // Someone queued behind us: lock and keep the tail. Relaxed as
        // above; nobody else sets locked while a tail is queued.
        self.val.fetch_or(LOCKED, Relaxed);
        // The lock is ours: a hand-off. Our successor (linked, or about
        // to) watches our count; our own wait for its link starts afresh.
        node.saw_handoff();
        watch.restart();

        // Hand the head over once the successor has linked itself (it is
        // between its tail exchange and its link store). Acquire pairs with
        // its Release link store: its `locked = 0` is done.
        let next = loop {
            let next = node.next.load(Acquire);
            if next != 0 {
                break next;
            }
            watch.wait::<R>(|| next, true);
        };
        // Release pairs with the successor's Acquire load of `locked`: our
        // last reads of our node happen-before it can reuse the queue.
        node_of(next).locked.store(1, Release);
        kick_waiters();
        // `nesting` drops after the last access to the node.
        drop(nesting);
    }
}

// ---- the single-CPU build (`KSYNC_MAX_CPUS=1`, see `up`) -------------------

impl<R> QueuedLock<R> {
    /// [`try_lock`](Self::try_lock) on one CPU: a load and a store. The
    /// word is only ever 0 or `LOCKED` in this build.
    #[inline(always)]
    fn try_lock_up(&self) -> bool {
        // Relaxed load and store: on one CPU only an interrupt handler can
        // run between them, and it leaves the word as it found it (the
        // `up` module's argument).
        if self.val.load(Relaxed) != 0 {
            return false;
        }
        self.val.store(LOCKED, Relaxed);
        up::acquired();
        true
    }
}

impl<R: RelaxStrategy> QueuedLock<R> {
    /// The lock is held on the only CPU: a recursion (panics in debug
    /// builds); release builds spin, as the SMP lock would (on the word:
    /// there is no other CPU to queue behind).
    #[cold]
    #[inline(never)]
    fn lock_up_held(&self) {
        up::held_on_entry("queued lock");
        while !self.try_lock_up() {
            relax::<R>();
        }
    }
}

impl<R> Default for QueuedLock<R> {
    fn default() -> Self {
        Self::with_relax()
    }
}

impl<R> fmt::Debug for QueuedLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let val = self.val.load(Relaxed);
        let tail = (val & TAIL_MASK != 0).then(|| decode_tail(val));
        f.debug_struct("QueuedLock")
            .field("locked", &(val & LOCKED_MASK != 0))
            .field("pending", &(val & PENDING != 0))
            .field("tail", &tail)
            .finish()
    }
}

#[cfg(feature = "defmt")]
impl<R> defmt::Format for QueuedLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        let val = self.val.load(Relaxed);
        defmt::write!(
            f,
            "QueuedLock {{ locked: {}, pending: {}, tail: {:#x} }}",
            val & LOCKED_MASK != 0,
            val & PENDING != 0,
            val >> TAIL_IDX_SHIFT
        )
    }
}

// ---- the tracked lock ---------------------------------------------------------

tracked_constructors!(QueuedLock, RawQueuedLock, "queued lock");

/// The queued lock with its [lockdep](crate::lockdep) class (the place the
/// lock was built): what kernels use (through [`QueuedMutex`] or by hand).
/// The algorithm and the word's layout are [`QueuedLock`]'s documentation.
///
/// # Zeroed memory
///
/// As for [`RawTicketLock`](super::RawTicketLock#zeroed-memory): all-zero
/// bytes are a valid unlocked lock in every build (with `lockdep`, its own
/// class).
#[doc(alias("qspinlock", "queued_spin_lock"))]
pub type RawQueuedLock<R = Spin, G = PreemptDisabled> = RawSpinlock<QueuedLock<R>, G>;

// SAFETY: `lock` and `try_lock` return only once this context set the
// locked byte from 0 (by compare-exchange from a free word, by the pending
// owner's add, or by the queue head after both owner and pending left),
// and only the holder clears it: one holder at a time. Acquire on taking,
// Release on unlock, as documented on the methods. No node is in use once
// `lock` returns, so a held lock may be unlocked on another CPU, or never
// (it stays held, which is safe).
unsafe impl<R: RelaxStrategy> ArchSpinlock for QueuedLock<R> {
    #[cfg(not(ksync_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const UNLOCKED: Self = Self::with_relax();

    #[inline]
    fn lock(&self) {
        QueuedLock::lock(self)
    }

    #[inline]
    fn try_lock(&self) -> bool {
        QueuedLock::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { QueuedLock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        QueuedLock::is_locked(self)
    }
}

// SAFETY: in FIFO mode the plain unlock hands the lock to the pending CPU
// or the queue head in arrival order; in test-and-set mode there is no
// order to keep. `is_contended` sees pending and queued CPUs.
unsafe impl<R: RelaxStrategy> FairArchSpinlock for QueuedLock<R> {
    #[inline]
    fn is_contended(&self) -> bool {
        QueuedLock::is_contended(self)
    }
}
