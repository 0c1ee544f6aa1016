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

// ---- the two halves (the layout table is in `QueuedLock`'s docs) -----------

/// Below this many CPUs each half of the lock is 16 bits wide and the lock
/// one 32-bit word, as Linux's: a tail of 13 CPU bits names them all.
/// From here on (up to [`kernel::MAX_CPUS_LIMIT`]) each half is 32 bits
/// and the lock two words (Linux, too, widens its tail with `NR_CPUS`).
const NARROW_CPUS: usize = 1 << 13;

/// The width of the lock's halves, chosen by [`MAX_CPUS`].
struct Width<const NARROW: bool>;

/// The atomic and integer types of one half.
trait Half {
    type Atomic;
    type Bits;
}

impl Half for Width<true> {
    type Atomic = crate::sync::AtomicU16;
    type Bits = u16;
}

impl Half for Width<false> {
    type Atomic = AtomicU32;
    type Bits = u32;
}

type ThisWidth = Width<{ MAX_CPUS < NARROW_CPUS }>;
/// One half of the lock: `locked`, or `pending_tail`.
type HalfAtomic = <ThisWidth as Half>::Atomic;
/// A half's value.
type Bits = <ThisWidth as Half>::Bits;

/// `locked`'s "held" value (it is 0 or 1).
const LOCKED: Bits = 1;
/// The pending bit of `pending_tail`.
const PENDING: Bits = 1;
/// The tail: index and CPU.
const TAIL_MASK: Bits = !PENDING;
const TAIL_IDX_SHIFT: u32 = 1;
const TAIL_IDX_MASK: Bits = 0b11;
const TAIL_CPU_SHIFT: u32 = 3;
/// Nodes per CPU: thread, softirq, hardirq, NMI.
const NODES_PER_CPU: usize = 4;

/// The tail value naming node `idx` of `cpu`.
#[inline]
fn encode_tail(cpu: usize, idx: usize) -> Bits {
    // `CPUS_FIT` bounds `cpu + 1` to the tail's CPU bits; `idx <
    // NODES_PER_CPU`.
    (((cpu + 1) << TAIL_CPU_SHIFT) | (idx << TAIL_IDX_SHIFT)) as Bits
}

/// `(cpu, idx)` of a non-zero tail.
#[inline]
fn decode_tail(tail: Bits) -> (usize, usize) {
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
    next: HalfAtomic,
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
                next: HalfAtomic::new(0),
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
fn node_of(tail: Bits) -> &'static Node {
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

/// A queued spinlock (Linux's `qspinlock`) in one 32-bit word (two below
/// 8,192 CPUs: see the layout table): FIFO, with
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
///   (a fifth level) has no node, so it spins on the lock with
///   test-and-set instead of corrupting a node in use.
/// * The list is named by its tail only, written into the lock as
///   `(CPU + 1, nesting index)`; zero means no queue. A newcomer swaps
///   itself in as the tail and links itself behind the old one.
/// * The first waiter never queues: it sets the *pending* bit and spins on
///   the lock itself (a second cache line is not worth it for one waiter);
///   only the second and later waiters build the queue. The queue head, in
///   turn, spins on the lock until the owner and the pending CPU are gone.
/// * The node is needed only while waiting: the new owner has left the
///   queue before it returns, so `unlock` is one store and a guard carries
///   nothing.
///
/// # The lock word: two halves
///
/// | half | bits | field | meaning |
/// |---|---|---|---|
/// | `locked` | all | locked | 1 while held, else 0 |
/// | `pending_tail` | 0 | pending | the first waiter, spinning on the lock |
/// | `pending_tail` | 1-2 | tail index | nesting level of the last queued waiter's node (0 thread, 1 softirq, 2 hardirq, 3 NMI) |
/// | `pending_tail` | 3- | tail CPU | that waiter's CPU + 1; 0 (with index 0) means no queue |
///
/// Each half is a 16-bit atomic, together one naturally aligned 32-bit
/// word, while [`MAX_CPUS`] is below 8192 (13 tail CPU bits); with more
/// CPUs each half is 32 bits and the lock 8 bytes.
///
/// Linux keeps the locked byte, the pending byte and the tail in one word
/// and updates it both whole (the fast path's compare-exchange of the
/// word, the tail exchange) and in parts (`unlock`'s byte store). Here no
/// operation spans both halves, which splits the lock's two jobs:
///
/// * `locked` alone is the mutual exclusion. Every acquisition, on every
///   path, is a compare-exchange of `locked` from 0 to 1 (Acquire), and
///   only the holder clears it, with a Release store of the same width:
///   `unlock` is a plain store (`mov`, `stlrh`, `fence rw,w; sh`), as
///   Linux's, with no mixed-size access (which Rust's memory model does
///   not have). On x86_64 the mixed sizes also cost: Linux's byte store
///   followed by the next lock's 32-bit `lock cmpxchg` of the same word
///   measured 6.0 ns per uncontended lock+unlock on this project's host,
///   the ticket lock 2.1 ns, this lock 2.2 ns (`docs/lock-costs.md`).
/// * `pending_tail` is the queueing: who may try for `locked`, in which
///   order. The pending CPU and the queue head wait on both halves.
///
/// The price: the uncontended `lock` (and [`try_lock`](Self::try_lock),
/// and the test-and-set mode) is two steps, a read of `pending_tail` and,
/// if that was zero, the compare-exchange of `locked`, where Linux's is
/// one compare-exchange of the word. A CPU whose read came just before a
/// waiter set pending or queued can still take the lock ahead of that
/// waiter. That is bounded: from a waiter's update of `pending_tail` until
/// it has the lock, the half is never zero (its own pending bit, or a
/// tail: the last queue head clears the tail only once it holds the
/// lock), and a CPU that took the lock reads `pending_tail` again only
/// after its Acquire, so after the waiter's update (the three
/// architectures' memory models are multi-copy atomic: a read-modify-write
/// that completed is seen by every later read). So a waiter can lose the
/// lock at most once to each context (thread, softirq, hardirq, NMI of
/// each CPU) that was between its read and its compare-exchange when the
/// waiter arrived; the pending CPU and the queue head retry their
/// compare-exchange after such a loss.
///
/// # Oversubscribed CPUs
///
/// FIFO hand-off is a liability when a CPU can be descheduled while it
/// waits (a guest with more vCPUs than host cores, host tests): the lock is
/// passed to a queued CPU that is not running, and everyone behind it waits
/// for the host to schedule it. When [`vcpu_preemptible`] says so, a
/// contended `lock` does not queue at all: it waits until both halves are
/// zero and takes `locked` with one compare-exchange, backing off
/// exponentially between attempts, as Linux's `virt_spin_lock` does.
/// Fairness is traded for progress. Both modes may run on one lock at once
/// (a test-and-set taker only tries when nobody is pending or queued), so
/// changing the setting never breaks exclusion.
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
/// | `unlock`'s store of `locked` | the pending CPU (`locked` clear), the queue head (`locked` and pending clear), test-and-set waiters (both halves zero) |
/// | the pending-bit undo (`fetch_and`) | the queue head (pending clear), test-and-set waiters |
/// | a newcomer's link into its predecessor's `next` | the queue head, which holds the lock and waits for it |
/// | the head's hand-off to its successor's `locked` | that successor |
///
/// The other updates make no waiter's condition true: every
/// compare-exchange of `locked` sets it; the pending CPU clears its bit and
/// the last queue head its tail only while holding the lock (`locked` is
/// set); a tail exchange only adds a waiter.
///
/// # The fifth nesting level
///
/// A CPU nested five deep has no node: it never joins the queue, and
/// takes `locked` whenever it reads it free, queue or no queue (waiting
/// for nobody to be queued, as Linux's trylock loop there does, would
/// never end while other CPUs keep a queue on the lock). It does pass through the pending step first, so its
/// `fetch_or(PENDING)` can land after a queue formed, between the queue
/// head's read of `pending_tail` (the tail its own) and its
/// compare-exchange clearing that tail, which then fails. Linux's head
/// takes such a failure to mean that a successor is linking (`set_locked`,
/// then wait for `next`), which the fifth-level CPU never does: the head
/// would wait for ever, and so would the fifth-level CPU (Linux has the
/// same hazard, for NMIs nested in NMIs). Here the head takes nothing for
/// granted: after a failed exchange it reads the half again, and either
/// clears its tail (keeping a pending bit, which, set while a tail exists,
/// is always transient: its setter saw the tail and clears it, with a
/// kick) or, if the tail is no longer its own, waits for the successor
/// that put it there. The retries are bounded: only a CPU whose read of
/// `pending_tail` saw no tail sets pending once a tail exists.
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
/// `locked` is 0 or 1, set only by a compare-exchange from 0 and cleared
/// only by its holder; the pending bit is set by at most one CPU at a time
/// as its owner (others may set it for an instant and clear it again when
/// they see it was theirs to clear), and only while no tail is in the
/// half; a non-zero tail names a node whose CPU is queued on this lock.
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock, the one [`new`](Self::new)
/// builds (not locked, not pending, no tail). `bytemuck::Zeroable` with the
/// `bytemuck` feature.
#[doc(alias("qspinlock", "arch_spinlock_t", "queued_spin_lock"))]
#[repr(C, align(4))]
pub struct QueuedLock<R = Spin> {
    /// The mutual exclusion: 1 while held.
    locked: HalfAtomic,
    /// The pending bit and the queue's tail.
    pending_tail: HalfAtomic,
    relax: PhantomData<R>,
}

/// The lock's state as one value, for the stall watches, which only
/// compare values (with 32-bit halves two states may give one value: a
/// hand-off that goes unseen only delays a restart of the watch's clock).
#[inline]
fn snapshot(locked: Bits, pending_tail: Bits) -> u32 {
    u32::from(pending_tail).rotate_left(16) ^ u32::from(locked)
}

impl QueuedLock {
    const_fn! {
        /// A new, unlocked queued lock that spins with [`Spin`].
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::QueuedLock;
        ///
        /// static LOCK: QueuedLock = QueuedLock::new(); // unlocked
        /// assert!(!LOCK.is_locked());
        /// ```
        pub fn new() -> Self {
            Self::with_relax()
        }
    }
}

impl<R> QueuedLock<R> {
    /// Fails the build if a tail cannot name every CPU (the halves' width
    /// is chosen so that it can: a check of that choice).
    const CPUS_FIT: () = assert!(
        MAX_CPUS < 1 << (Bits::BITS - TAIL_CPU_SHIFT),
        "QueuedLock's tail cannot name KSYNC_MAX_CPUS CPUs"
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
            Self {
                locked: HalfAtomic::new(0),
                pending_tail: HalfAtomic::new(0),
                relax: PhantomData,
            }
        }
    }

    /// Tries to take the lock without waiting: succeeds only when nobody
    /// holds it, is about to, or is queued for it (as far as this CPU has
    /// seen: see "The price" in the type's docs).
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
        // exclusively. Relaxed loads: only the compare-exchange decides.
        // Acquire pairs with the Release store in `unlock`, the only store
        // that clears `locked`.
        self.pending_tail.load(Relaxed) == 0
            && self.locked.load(Relaxed) == 0
            && self
                .locked
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
        self.locked.load(Relaxed) != 0 || self.pending_tail.load(Relaxed) != 0
    }

    /// Whether CPUs wait for the lock in FIFO mode (pending or queued; a
    /// snapshot, like [`is_locked`](Self::is_locked)). Test-and-set waiters
    /// ([`vcpu_preemptible`] mode) leave no mark in the lock and are not
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
        self.pending_tail.load(Relaxed) != 0
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
        debug_assert!(
            self.locked.load(Relaxed) == LOCKED,
            "unlock of a queued lock that is not held"
        );
        if UP {
            up::releasing();
            // Relaxed, a store: on one CPU `releasing` keeps the critical
            // section above it.
            self.locked.store(0, Relaxed);
            return;
        }
        // One store of `locked` (Linux's `queued_spin_unlock`): only the
        // holder writes it while it is 1, and the pending bit and the tail,
        // which others may be changing, are in the other half. Release
        // pairs with the Acquire compare-exchange of every acquisition.
        self.locked.store(0, Release);
        // Always (one flag load when nobody may halt): a pending CPU, the
        // queue head, or a test-and-set waiter (from either mode, or the
        // fifth nesting level) may be halted on this store.
        kick_waiters();
    }
}

impl<R: RelaxStrategy> QueuedLock<R> {
    /// Spins until the lock is taken: FIFO through the pending bit and the
    /// queue, or by test-and-set when CPUs may be descheduled while they
    /// spin ([`vcpu_preemptible`]; see the type's docs).
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
        // Nobody pending or queued, then take `locked`: two steps (the
        // bound on what slips between them is "The price" in the type's
        // docs). Relaxed load: the compare-exchange decides. Acquire pairs
        // with the Release store in `unlock`.
        let pending_tail = self.pending_tail.load(Relaxed);
        if pending_tail != 0
            || self
                .locked
                .compare_exchange(0, LOCKED, Acquire, Relaxed)
                .is_err()
        {
            self.lock_slow(pending_tail);
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, pending_tail: Bits) {
        if vcpu_preemptible() {
            return self.lock_word();
        }
        self.lock_pending(pending_tail);
    }

    /// Test-and-set (Linux's `virt_spin_lock`): wait, reading, with
    /// bounded exponential backoff until nobody holds, is pending or is
    /// queued, then compare-exchange `locked` from zero.
    #[doc(alias = "virt_spin_lock")]
    fn lock_word(&self) {
        let mut backoff = Backoff::new();
        while !self.try_lock() {
            backoff.backoff::<R>();
        }
    }

    /// The fifth nesting level (no node left): compare-exchanges `locked`
    /// from zero whenever it reads zero, queue or no queue. Waiting for
    /// both halves to be zero, as [`lock_word`](Self::lock_word) does (and
    /// Linux's `idx >= MAX_NODES` trylock loop), never ends while other
    /// CPUs keep a queue on the lock (each re-queues as it unlocks). Taking
    /// `locked` between two of their hand-offs costs the queue head one
    /// lost race per such acquisition, which only an NMI nested in an NMI
    /// makes.
    fn lock_nodeless(&self) {
        let mut backoff = Backoff::new();
        loop {
            // Relaxed load: the compare-exchange decides. Acquire pairs
            // with the Release store in `unlock`.
            if self.locked.load(Relaxed) == 0
                && self
                    .locked
                    .compare_exchange(0, LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff.backoff::<R>();
        }
    }

    /// The first waiter: owns the pending bit and spins on the lock. Joins
    /// the queue if someone is pending or queued already.
    fn lock_pending(&self, mut pending_tail: Bits) {
        // Pending set, nobody queued: the pending CPU is taking the lock
        // this instant, or has it and is clearing its bit. Look once more
        // before queueing behind it.
        if pending_tail == PENDING {
            pending_tail = self.pending_tail.load(Relaxed);
        }
        if pending_tail == 0 {
            // Relaxed: the bit publishes nothing; the lock is taken on
            // `locked`, with Acquire.
            let prev = self.pending_tail.fetch_or(PENDING, Relaxed);
            if prev == 0 {
                // Ours: nobody queues ahead of us now, and the queue head
                // waits for the bit to clear. Wait for the owner to go.
                let mut watch = StallWatch::new(StallSite::Queued);
                loop {
                    let locked = self.locked.load(Relaxed);
                    // Acquire pairs with the Release store in `unlock`.
                    if locked == 0
                        && self
                            .locked
                            .compare_exchange(0, LOCKED, Acquire, Relaxed)
                            .is_ok()
                    {
                        break;
                    }
                    // Held, or taken under us by a CPU that read
                    // `pending_tail` before our bit (bounded: "The price").
                    watch.wait::<R>(|| snapshot(locked, self.pending_tail.load(Relaxed)), true);
                }
                // The lock is ours: let the queue head see it. Relaxed: the
                // head takes `locked` by its own Acquire compare-exchange;
                // `locked` is set, so no waiter's condition becomes true
                // here and nobody needs a kick.
                self.pending_tail.fetch_and(!PENDING, Relaxed);
                return;
            }
            // Someone else is pending or queued. Undo our bit if we set it.
            // Relaxed: the bit was never ours, it published nothing. A
            // queue head (or a test-and-set waiter) may be waiting, even
            // halted, for it to clear.
            if prev & PENDING == 0 {
                self.pending_tail.fetch_and(!PENDING, Relaxed);
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
            // left. Take the lock by test-and-set rather than reuse one.
            return self.lock_nodeless();
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

        // Swap our tail in, keeping the pending bit. Release: our successor
        // reads this tail (Acquire) before it writes our `next`, so our
        // initialisation above cannot overwrite its link. Acquire: likewise
        // for our predecessor's node, which we link to.
        let mut pending_tail = self.pending_tail.load(Relaxed);
        let old = loop {
            let new = (pending_tail & PENDING) | tail;
            match self
                .pending_tail
                .compare_exchange_weak(pending_tail, new, AcqRel, Relaxed)
            {
                Ok(old) => break old,
                Err(now) => pending_tail = now,
            }
        };

        // Every stage below watches for a stall (the kernel's
        // `StallWatch`): time in which this CPU saw no hand-off ahead of
        // it, never the length of the queue. A queued CPU cannot see the
        // hand-offs at the head from its own node, and the lock reads the
        // same (held, a tail) after each of them; so it watches its
        // predecessor's hand-off count, which moves whenever the
        // predecessor saw one (see `Node::handoffs`), and moves its own for
        // its successor. The head watches the lock, which changes when its
        // owner or the pending CPU lets go.
        let mut watch = StallWatch::new(StallSite::Queued);
        if old & TAIL_MASK != 0 {
            let pred = node_of(old & TAIL_MASK);
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
        // take `locked`.
        let mut seen = None;
        loop {
            let pending_tail = self.pending_tail.load(Relaxed);
            let locked = self.locked.load(Relaxed);
            // Acquire pairs with the Release store in `unlock`.
            if pending_tail & PENDING == 0
                && locked == 0
                && self
                    .locked
                    .compare_exchange(0, LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                break;
            }
            // Held, a CPU pending ahead of us, or the lock taken under us
            // by a CPU that read `pending_tail` before the queue formed
            // (bounded: "The price" in the type's docs).
            watch.wait::<R>(
                || {
                    // The owner or the pending CPU let go (or a CPU queued
                    // behind us): tell our successor.
                    let now = snapshot(locked, pending_tail);
                    if seen.replace(now).is_some_and(|s| s != now) {
                        node.saw_handoff();
                    }
                    now
                },
                true,
            );
        }
        // The lock is ours: a hand-off. Our successor (linked, or about
        // to) watches our count; our own wait for its link starts afresh.
        node.saw_handoff();
        watch.restart();

        // Leave the queue. Last in it: clear the tail, keeping a pending
        // bit (set while a tail exists, it is transient: its setter saw a
        // tail and clears it). Relaxed: we hold the lock; a newcomer that
        // read our tail has changed the half, and the exchange fails.
        loop {
            let pending_tail = self.pending_tail.load(Relaxed);
            if pending_tail & TAIL_MASK != tail {
                // Someone queued behind us.
                break;
            }
            if self
                .pending_tail
                .compare_exchange(pending_tail, pending_tail & PENDING, Relaxed, Relaxed)
                .is_ok()
            {
                return;
            }
            // A successor swapped its tail in, or a CPU set or cleared
            // pending for an instant: look again. Not "assume a
            // successor": the CPU that set pending may be at the fifth
            // nesting level, which never links behind us (see "The fifth
            // nesting level" in the type's docs).
        }

        // Hand the head over once the successor has linked itself (it is
        // between its tail exchange and its link store). Acquire pairs with
        // its Release link store: its `locked = 0` is done.
        let next = loop {
            let next = node.next.load(Acquire);
            if next != 0 {
                break next;
            }
            watch.wait::<R>(|| u32::from(next), true);
        };
        // Release pairs with the successor's Acquire load of `locked`
        // (Linux's `arch_mcs_spin_unlock_contended`): what we did as the
        // head (the lock taken, the tail read) is ordered before its reads
        // of the lock as the new head.
        node_of(next).locked.store(1, Release);
        kick_waiters();
        // `nesting` drops after the last access to the node.
        drop(nesting);
    }
}

// ---- the single-CPU build (`KSYNC_MAX_CPUS=1`, see `up`) -------------------

impl<R> QueuedLock<R> {
    /// [`try_lock`](Self::try_lock) on one CPU: a load and a store of
    /// `locked`; nobody is ever pending or queued in this build.
    #[inline(always)]
    fn try_lock_up(&self) -> bool {
        // Relaxed load and store: on one CPU only an interrupt handler can
        // run between them, and it leaves the lock as it found it (the
        // `up` module's argument).
        if self.locked.load(Relaxed) != 0 {
            return false;
        }
        self.locked.store(LOCKED, Relaxed);
        up::acquired();
        true
    }
}

impl<R: RelaxStrategy> QueuedLock<R> {
    /// The lock is held on the only CPU: a recursion (panics in debug
    /// builds); release builds spin, as the SMP lock would (on `locked`:
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
        let (locked, pending_tail) = (self.locked.load(Relaxed), self.pending_tail.load(Relaxed));
        let tail = (pending_tail & TAIL_MASK != 0).then(|| decode_tail(pending_tail));
        f.debug_struct("QueuedLock")
            .field("locked", &(locked != 0))
            .field("pending", &(pending_tail & PENDING != 0))
            .field("tail", &tail)
            .finish()
    }
}

#[cfg(feature = "defmt")]
impl<R> defmt::Format for QueuedLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        let (locked, pending_tail) = (self.locked.load(Relaxed), self.pending_tail.load(Relaxed));
        defmt::write!(
            f,
            "QueuedLock {{ locked: {}, pending: {}, tail: {:#x} }}",
            locked != 0,
            pending_tail & PENDING != 0,
            u32::from(pending_tail >> TAIL_IDX_SHIFT)
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

// SAFETY: `lock` and `try_lock` return only once this context set
// `locked` from 0 by compare-exchange (on every path: the fast path,
// `try_lock`, test-and-set, the pending CPU, the queue head), and only the
// holder clears it: one holder at a time. Acquire on taking,
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
// or the queue head in arrival order (a CPU whose read of `pending_tail`
// came before a waiter's update of it arrived first, unmarked, and may go
// first, at most once per context per waiter: "The price" in
// `QueuedLock`'s docs); in test-and-set mode there is no order to keep. `is_contended` sees pending and queued CPUs.
unsafe impl<R: RelaxStrategy> FairArchSpinlock for QueuedLock<R> {
    #[inline]
    fn is_contended(&self) -> bool {
        QueuedLock::is_contended(self)
    }
}
