//! A scalable sleeping reader-writer semaphore: readers touch only their
//! own CPU's count while no writer is around, and may sleep and migrate
//! while they hold it (Linux's `percpu_rw_semaphore`, the 2007
//! "scalable rw_mutex" as it was meant).
//!
//! The reader side is the gated [`GatedPerCpuRwLock`]'s, shared with it:
//! per-CPU reader counts, a `block` flag and an [`RcuSync`](crate::rcu::RcuSync)
//! gate. What differs is the waiting: here every wait sleeps. Use it for
//! read-mostly data whose readers may sleep (Linux: `cgroup_threadgroup_rwsem`,
//! the file systems' freeze locks); for short non-sleeping sections the
//! spinning lock is cheaper for writers.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::percpu_rwsem::PerCpuRwSemaphore;
//!
//! static CONFIG: PerCpuRwSemaphore<u32> = PerCpuRwSemaphore::new(1);
//!
//! let reader = std::thread::spawn(|| {
//!     let config = CONFIG.read(); // this CPU's count, no shared write
//!     std::thread::sleep(std::time::Duration::from_millis(5)); // may sleep holding it
//!     *config
//! });
//! *CONFIG.write() += 1; // waits (sleeping) for the reader, if it got in first
//! let seen = reader.join().unwrap();
//! assert!(seen == 1 || seen == 2);
//! assert_eq!(*CONFIG.read(), 2);
//! # }
//! ```
//!
//! # The algorithm
//!
//! * **Reader fast path** (the gate is idle: no writer for a grace period):
//!   preemption off (an RCU read section, so the check and the increment
//!   do not straddle a quiescent state), this CPU's count += 1,
//!   preemption on. No atomic read-modify-write on a shared line, no
//!   fence. The reader then holds the lock, may sleep, and may be
//!   preempted and migrate; its release decrements the count of whatever
//!   CPU it runs on then. The counts mean something only summed (wrapping;
//!   one CPU's may be negative).
//! * **Writer**: writers exclude each other through `block` (set by
//!   compare-exchange; a writer that finds it set sleeps in the FIFO
//!   queue `waiters`). First it closes the gate
//!   ([`RcuSync::enter`](crate::rcu::RcuSync::enter): one grace period,
//!   none while the gate is still closed from another writer), so every
//!   new reader takes the slow path; then it takes `block`, issues a full
//!   fence (D), and sleeps on its own wait queue (Linux's `rcuwait`) until
//!   the reader counts sum to zero, then an acquire fence (C).
//! * **Reader slow path** (gate closed): count += 1, full fence (A), check
//!   `block`. Clear: in. Set: back the count out, wake the writer (it may
//!   have counted this reader and gone to sleep), and sleep in `waiters`,
//!   trying once more under the queue lock first.
//! * **Reader release**: fast path (gate idle) a decrement; slow path a
//!   release fence (B), the decrement, a full fence (E), and if `block`
//!   is set, a wake of the writer.
//! * **Writer release**: clears `block`, and under the queue lock hands it
//!   on in FIFO order (Linux's `percpu_rwsem_wake_function`): takes a
//!   read lock for each reader at the front of `waiters` on its behalf and
//!   wakes it granted, up to the first writer, which it gives `block`
//!   and wakes; then [`RcuSync::exit`](crate::rcu::RcuSync::exit), which
//!   reopens the fast path a grace period later. A writer that finds
//!   `block` clear takes it even with readers queued whose grant is still
//!   to run (Linux's "can get stolen"); those readers then wait for it.
//!
//! # The barrier pairing
//!
//! A, B, C and D are the gated lock's (see
//! [`percpu_rwlock`](crate::percpu_rwlock#the-barrier-pairing)): A/D
//! (store buffering) means a reader either sees `block` or is counted by
//! the writer, B/C that a writer that sees a reader's decrement sees its
//! whole read section. **E pairs with D** (store buffering again): a
//! releasing reader either sees `block` set and wakes the writer (whose
//! wait re-checks the sum after it queued), or the writer's sums, all made
//! after D, see the decrement. A reader backing out wakes the writer
//! unconditionally. A granted reader or writer learns of the grant with
//! the wait queue's Release/Acquire on the node's state, so it sees the
//! releasing writer's section; a writer granted `block` by another
//! task issues D itself after it woke (the grant's compare-exchange
//! happens-before that fence, which is what the pairing needs).
//!
//! # Rules
//!
//! * The fast path is the gated lock's: the kernel must report RCU
//!   quiescent states ([`crate::rcu`]), or a writer's first grace period
//!   never ends. Readers keep no read section open while they hold the
//!   lock (only across the few instructions of their step), so holding
//!   it does not hold up grace periods, and sleeping holding it is fine.
//! * A writer's grace period is waited for as [`rcu::synchronize`](crate::rcu::synchronize)
//!   waits: spinning and reporting its own CPU's quiescent states. Every
//!   other wait sleeps.
//! * Do not take a read lock twice in one task while a writer may come:
//!   the writer waits for the outer one, the inner one for the writer.
//! * [`try_write`](RawPerCpuRwSemaphore::try_write) never waits, for
//!   readers, writers or a grace period: as the gated lock's, it fails
//!   while the gate is open (closing it takes a grace period) and
//!   succeeds, with nobody inside, while the gate is still closed from a
//!   writer that left less than a grace period ago.
//! * Every wait calls [`might_sleep`](crate::wait::might_sleep) (readers
//!   on their slow path only).
//!
//! # Lock-order checking
//!
//! With [`lockdep`](crate::lockdep) a semaphore is a lock class (the place
//! it was built, or the key given to
//! [`with_class`](RawPerCpuRwSemaphore::with_class); `lock_api`'s
//! `RwLock::new` has no call site, so such a semaphore is a class of its
//! own), recorded as Linux's `percpu_down_read`/`percpu_down_write`:
//! sleeping acquisitions on the holder task's held-lock stack (the holder
//! may sleep and migrate; [`might_sleep`](crate::wait::might_sleep) does
//! not count it), readers as non-recursive readers, which take part in
//! the order graph as writers do (a writer waiting between a task's two
//! reads deadlocks it, the rule above: a second read in one task is a
//! [`Recursion`](crate::lockdep::ReportKind::Recursion) report). `read`
//! and `write` are recorded before they wait (`write` before it closes
//! the gate, as Linux), the `try_` forms once they succeeded. The record
//! is the gated lock's own [`Map`] field, so it adds
//! nothing to the size; without `lockdep` it is zero-sized. A guard
//! released by another task than the one that took it is a
//! [`BadUnlock`](crate::lockdep::ReportKind::BadUnlock) report, as for the
//! [`Mutex`](crate::mutex::Mutex) (Linux's `percpu_up_read` from another
//! task needs `percpu_rwsem_release` first).
//!
//! # Grace periods in the host test kernel
//!
//! With `test-hooks`, threads are CPUs, and a thread that never called
//! [`rcu::cpu_online`](crate::rcu::cpu_online) is one RCU does not watch
//! (an extended quiescent state, as an idle CPU): grace periods do not
//! wait for it, except while a read section runs on it, which the reader
//! step's section is (it reports its quiescent state when it ends). The
//! writer's own CPU reports its quiescent states while it waits. So in
//! tests whose threads stay offline to RCU, a writer's grace period ends
//! at once. Nothing reports a quiescent state when a host thread sleeps
//! (`Kernel::block` is `thread::park`, `thread::sleep` is not a hook): a
//! test thread that did call `cpu_online` holds up every grace period,
//! and with it every writer that must close the gate, until it reports
//! one ([`rcu::quiescent_state`](crate::rcu::quiescent_state)) or goes
//! offline. A real kernel reports one at every context switch, a sleep
//! included.
//!
//! [`GatedPerCpuRwLock`]: crate::percpu_rwlock::GatedPerCpuRwLock

use crate::lockdep::{LockClassKey, Map};
use crate::percpu_rwlock::{Flavour, Gated, RawPerCpuRwLock};
use crate::sync::{Ordering, fence};
use crate::wait::{self, GRANTED, Node, Queued, WaitQueue};

/// A queued waiter's tag: a reader.
const TAG_READ: usize = 0;
/// A queued waiter's tag: a writer.
const TAG_WRITE: usize = 1;

/// The lock under [`PerCpuRwSemaphore`] (Linux's `struct
/// percpu_rw_semaphore`). See the [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
///
/// // Freezing a file system: every write takes the read side (per-CPU, no
/// // shared cache line), a freeze takes the write side.
/// static SB_WRITERS: RawPerCpuRwSemaphore = RawPerCpuRwSemaphore::new();
///
/// SB_WRITERS.read(); // sb_start_write
/// // ... write a block, maybe sleeping ...
/// // SAFETY: the read lock taken above.
/// unsafe { SB_WRITERS.unlock_read() }; // sb_end_write
/// # }
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked semaphore (no reader counted,
/// `block` clear, the gate idle, empty queues): [`new`](Self::new)
/// without `lockdep`, with it a class of its own (`Zeroable` with the
/// `bytemuck` feature). `lock_api`'s `PerCpuRwSemaphore<T>` is not
/// covered (its layout is `lock_api`'s): embed the raw semaphore.
#[doc(alias = "percpu_rw_semaphore")]
pub struct RawPerCpuRwSemaphore {
    /// The per-CPU reader counts, `block` and the gate: the gated
    /// spinning lock, used through its untracked steps and never through
    /// its (spinning) waits.
    core: RawPerCpuRwLock<Gated>,
    /// Readers and writers waiting for `block` to clear, FIFO.
    waiters: WaitQueue,
    /// The writer holding `block` while it waits for readers to drain
    /// (Linux's `rcuwait`): one task at most.
    writer: WaitQueue,
}

impl core::fmt::Debug for RawPerCpuRwSemaphore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawPerCpuRwSemaphore")
            .field("block", &self.core.is_write_locked())
            .finish_non_exhaustive()
    }
}

impl Default for RawPerCpuRwSemaphore {
    fn default() -> Self {
        Self::new()
    }
}

/// A scalable reader-writer lock whose waiters sleep and whose readers
/// may sleep holding it (see the [module docs](self)).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::percpu_rwsem::PerCpuRwSemaphore;
///
/// // Read on every fork, written on a rare cgroup migration.
/// static THREADGROUP: PerCpuRwSemaphore<u32> = PerCpuRwSemaphore::new(0);
///
/// let forks = THREADGROUP.read(); // this CPU's count only
/// drop(forks);
/// *THREADGROUP.write() += 1; // one grace period, then waits for readers
/// # }
/// ```
pub type PerCpuRwSemaphore<T> = lock_api::RwLock<RawPerCpuRwSemaphore, T>;
/// The read guard of [`PerCpuRwSemaphore`].
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::percpu_rwsem::{PerCpuRwSemaphore, PerCpuRwSemaphoreReadGuard};
///
/// fn frozen(state: &PerCpuRwSemaphoreReadGuard<'_, bool>) -> bool {
///     **state // the caller holds a read lock
/// }
/// let sb_state = PerCpuRwSemaphore::new(false);
/// assert!(!frozen(&sb_state.read()));
/// # }
/// ```
pub type PerCpuRwSemaphoreReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawPerCpuRwSemaphore, T>;
/// The write guard of [`PerCpuRwSemaphore`].
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::percpu_rwsem::{PerCpuRwSemaphore, PerCpuRwSemaphoreWriteGuard};
///
/// fn freeze(mut state: PerCpuRwSemaphoreWriteGuard<'_, bool>) {
///     *state = true; // no reader is inside
/// }
/// let sb_state = PerCpuRwSemaphore::new(false);
/// freeze(sb_state.write());
/// assert!(*sb_state.read());
/// # }
/// ```
pub type PerCpuRwSemaphoreWriteGuard<'a, T> =
    lock_api::RwLockWriteGuard<'a, RawPerCpuRwSemaphore, T>;

impl RawPerCpuRwSemaphore {
    crate::sync::const_fn! {
        /// A new, unlocked semaphore (Linux's `percpu_init_rwsem`), its
        /// gate idle. `const`, for `static`s.
        /// In the [lockdep](crate::lockdep) class of the place it is built.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::percpu_rwsem::{PerCpuRwSemaphore, RawPerCpuRwSemaphore};
        ///
        /// struct SuperBlock {
        ///     s_writers: PerCpuRwSemaphore<()>,
        /// }
        /// // Every super block's semaphore is built here: one lockdep class.
        /// fn alloc_super() -> SuperBlock {
        ///     SuperBlock { s_writers: PerCpuRwSemaphore::from_raw(RawPerCpuRwSemaphore::new(), ()) }
        /// }
        /// let sb = alloc_super();
        /// drop(sb.s_writers.read());
        /// # }
        /// ```
        #[doc(alias = "percpu_init_rwsem")]
        #[must_use]
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new() -> Self {
            Self::with_map(Map::new())
        }
    }

    crate::sync::const_fn! {
        /// A new, unlocked semaphore in `key`'s [lockdep](crate::lockdep)
        /// class (Linux's `lockdep_set_class`); exactly `new` without
        /// `lockdep`.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::percpu_rwsem::{PerCpuRwSemaphore, RawPerCpuRwSemaphore};
        ///
        /// static THREADGROUP: PerCpuRwSemaphore<()> = PerCpuRwSemaphore::from_raw(
        ///     RawPerCpuRwSemaphore::with_class(ksync::lock_class!("cgroup_threadgroup_rwsem")),
        ///     (),
        /// );
        /// drop(THREADGROUP.read()); // lockdep reports name the class
        /// # }
        /// ```
        #[must_use]
        pub fn with_class(key: &'static LockClassKey) -> Self {
            Self::with_map(Map::with_key(key))
        }
    }

    crate::sync::const_fn! {
        fn with_map(dep_map: Map) -> Self {
            RawPerCpuRwSemaphore {
                core: RawPerCpuRwLock::with_map(dep_map),
                waiters: WaitQueue::new(),
                writer: WaitQueue::new(),
            }
        }
    }

    /// The lockdep record: the gated lock's, which never uses it itself
    /// here (only its untracked steps are called).
    #[inline(always)]
    fn dep_map(&self) -> &Map {
        self.core.dep_map()
    }

    /// Takes a read lock if that needs no waiting (Linux's
    /// `percpu_down_read_trylock`): fails while a writer holds it or waits
    /// for readers to drain. Never sleeps.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// assert!(sem.try_read()); // no writer: this CPU's count
    /// // SAFETY: the read lock just taken.
    /// unsafe { sem.unlock_read() };
    /// sem.write();
    /// assert!(!sem.try_read()); // a writer holds it: would sleep
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[doc(alias = "percpu_down_read_trylock")]
    #[inline]
    #[must_use = "true means a read lock is held and must be unlocked"]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_read(&self) -> bool {
        if self.core.try_read_untracked() {
            self.dep_map().acquire_sleeping(0, true);
            return true;
        }
        // The increment was counted and backed out: prod the writer to
        // count again (Linux's `__percpu_down_read_trylock`).
        self.wake_writer();
        false
    }

    /// Takes a read lock (Linux's `percpu_down_read`): on this CPU's count
    /// while no writer is around, else sleeping until the writer hands it
    /// over. The holder may sleep and migrate.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// static SB_WRITERS: RawPerCpuRwSemaphore = RawPerCpuRwSemaphore::new();
    ///
    /// // A task starting a write: it may sleep, and end up on another CPU.
    /// let task = std::thread::spawn(|| {
    ///     SB_WRITERS.read();
    ///     // ... allocate blocks, wait for I/O ...
    ///     // SAFETY: the read lock taken above.
    ///     unsafe { SB_WRITERS.unlock_read() };
    /// });
    /// task.join().unwrap();
    /// assert!(!SB_WRITERS.is_locked());
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// on every call in debug builds, on the slow path (a writer around)
    /// in release builds.
    #[doc(alias = "percpu_down_read")]
    #[inline]
    #[track_caller]
    pub fn read(&self) {
        wait::might_sleep_entry();
        if self.core.try_read_untracked() {
            self.dep_map().acquire_sleeping(0, false);
        } else {
            self.read_slow();
        }
    }

    #[cold]
    #[track_caller]
    fn read_slow(&self) {
        // As in `try_read`: the backed-out increment.
        self.wake_writer();
        wait::might_sleep_slow();
        // Before waiting, so a deadlock is reported first; dropped again
        // if the wait unwinds.
        let dep = self.dep_map().acquire_sleeping_guard(0, false);
        self.read_wait();
        dep.keep();
    }

    /// The waiting of `read_slow`, untracked.
    fn read_wait(&self) {
        let node = Node::new();
        let _queued = Queued {
            queue: &self.waiters,
            node: &node,
        };
        let mut locked = self.waiters.lock();
        // Under the queue lock: a writer's release clears `block` before
        // it takes this lock to hand the lock on, so either this try sees
        // `block` clear or that release finds the node queued.
        if self.core.try_read_untracked() {
            return;
        }
        // SAFETY: `node` stays on this stack frame and `_queued` takes it
        // off the queue before the frame goes; it is new.
        unsafe { locked.enqueue(&node, true, TAG_READ, None, false) };
        drop(locked);
        // The second backed-out increment (outside the queue lock: the
        // writer's queue is a wait queue of the same lock class).
        self.wake_writer();
        // Only grants wake these waiters, and there is no deadline.
        let state = self.waiters.sleep(&node, None);
        debug_assert_eq!(state, GRANTED);
    }

    /// Releases a read lock (Linux's `percpu_up_read`), on whatever CPU
    /// the holder runs now.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// sem.read();
    /// assert!(sem.is_locked());
    /// // SAFETY: the read lock taken above (it could be on another CPU now).
    /// unsafe { sem.unlock_read() };
    /// assert!(!sem.is_locked());
    /// # }
    /// ```
    ///
    /// # Safety
    /// A read lock is held (by the caller; the lock only needs one held).
    #[doc(alias = "percpu_up_read")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_read(&self) {
        self.dep_map().release();
        if self.core.unlock_read_untracked() {
            // E pairs with D (module docs): either `block` is seen here
            // and the writer woken, or the writer's sum sees the
            // decrement.
            fence(Ordering::SeqCst);
            if self.core.is_write_locked() {
                self.wake_writer();
            }
        }
    }

    /// Takes the write lock (Linux's `percpu_down_write`): closes the gate
    /// (one grace period, unless another writer keeps it closed), takes
    /// `block` (sleeping behind earlier waiters if another writer has it),
    /// then sleeps until the readers inside have left.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::PerCpuRwSemaphore;
    ///
    /// static FROZEN: PerCpuRwSemaphore<bool> = PerCpuRwSemaphore::new(false);
    ///
    /// // freeze_super: waits a grace period and for the writes in flight.
    /// *FROZEN.write() = true;
    /// assert!(*FROZEN.read());
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)),
    /// and inside an RCU read section (the grace period).
    #[doc(alias = "percpu_down_write")]
    #[track_caller]
    pub fn write(&self) {
        wait::might_sleep();
        // Before any wait (the grace period included), as Linux.
        let dep = self.dep_map().acquire_sleeping_guard(0, false);
        // Readers take the slow path from here on.
        self.core.flavour().writer_enter();
        if !self.core.try_block() {
            self.wait_for_block();
        }
        // D pairs with A and E.
        fence(Ordering::SeqCst);
        self.writer.wait_event(|| !self.core.readers_active());
        // C pairs with B.
        fence(Ordering::Acquire);
        dep.keep();
    }

    /// Sleeps in the queue until `block` is handed over.
    #[cold]
    fn wait_for_block(&self) {
        let node = Node::new();
        let _queued = Queued {
            queue: &self.waiters,
            node: &node,
        };
        let mut locked = self.waiters.lock();
        // Under the queue lock, as the reader's try.
        if self.core.try_block() {
            return;
        }
        // SAFETY: as in `read_slow`.
        unsafe { locked.enqueue(&node, true, TAG_WRITE, None, false) };
        drop(locked);
        let state = self.waiters.sleep(&node, None);
        debug_assert_eq!(state, GRANTED);
    }

    /// Takes the write lock if that needs no waiting at all: fails if a
    /// writer holds it, a reader is inside, or the gate is open (closing
    /// it takes a grace period). Never sleeps nor waits for a grace
    /// period. See the [module docs](self#rules).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// assert!(!sem.try_write()); // the gate is open: closing it needs a grace period
    /// sem.write();
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// // The gate stays closed for a grace period: a writer right behind gets in.
    /// assert!(sem.try_write());
    /// # unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[doc(alias = "percpu_down_write_trylock")]
    #[must_use = "true means the write lock is held and must be unlocked"]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write(&self) -> bool {
        if self.core.is_write_locked() || !self.core.flavour().try_writer_enter() {
            return false;
        }
        if !self.core.try_block() {
            self.core.flavour().writer_exit();
            return false;
        }
        // D pairs with A and E.
        fence(Ordering::SeqCst);
        if self.core.readers_active() {
            // Readers that saw `block` meanwhile backed out, and may be
            // queued: hand it to them.
            self.release_block();
            self.core.flavour().writer_exit();
            return false;
        }
        // C pairs with B.
        fence(Ordering::Acquire);
        self.dep_map().acquire_sleeping(0, true);
        true
    }

    /// Releases the write lock (Linux's `percpu_up_write`): hands it to
    /// the waiters (the readers at the front, up to a writer), and reopens
    /// the readers' fast path a grace period later.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// sem.write();
    /// // ... thaw the file system ...
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// assert!(sem.try_read()); // readers come in at once (on the slow path)
    /// # unsafe { sem.unlock_read() };
    /// # }
    /// ```
    ///
    /// # Safety
    /// The write lock is held (by the caller; the lock only needs it held).
    #[doc(alias = "percpu_up_write")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_write(&self) {
        self.dep_map().release();
        self.release_block();
        // After the hand-off, as Linux: the gate counts writers, so a
        // writer granted `block` above keeps it closed.
        self.core.flavour().writer_exit();
    }

    /// Clears `block` and hands the lock on in queue order: a read lock
    /// taken for each reader at the front (on this CPU's count: only the
    /// sum matters), up to the first writer, which gets `block`. A writer
    /// that took `block` meanwhile stops it; its release goes on.
    fn release_block(&self) {
        self.core.clear_block();
        let mut prod = false;
        {
            let mut locked = self.waiters.lock();
            loop {
                if locked.batch_full() {
                    // Wake this batch; the front is looked at afresh.
                    locked.relock();
                }
                let Some((node, tag, _)) = locked.front() else {
                    break;
                };
                let node: *const Node = node;
                let got = if tag == TAG_READ {
                    let got = self.core.try_read_untracked();
                    prod |= !got;
                    got
                } else {
                    self.core.try_block()
                };
                if !got {
                    break;
                }
                // SAFETY: queued, so valid until `wake` takes it off.
                locked.wake(unsafe { &*node }, GRANTED);
                if tag == TAG_WRITE {
                    break;
                }
            }
        }
        if prod {
            // A reader's try backed out: the writer that took `block` may
            // have counted it.
            self.wake_writer();
        }
    }

    /// Wakes the writer waiting for readers to drain, if any (Linux's
    /// `rcuwait_wake_up`).
    fn wake_writer(&self) {
        self.writer.wake_all();
    }

    /// Whether a writer holds the lock or waits for readers to drain (a
    /// snapshot).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// sem.write();
    /// assert!(sem.is_write_locked()); // percpu_is_write_locked, for assertions
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// assert!(!sem.is_write_locked());
    /// # }
    /// ```
    #[doc(alias = "percpu_is_write_locked")]
    #[must_use]
    pub fn is_write_locked(&self) -> bool {
        self.core.is_write_locked()
    }

    /// Whether anyone holds it (a snapshot; sums every CPU's count).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    ///
    /// let sem = RawPerCpuRwSemaphore::new();
    /// sem.read();
    /// assert!(sem.is_locked() && !sem.is_write_locked());
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(!sem.is_locked());
    /// # }
    /// ```
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.core.is_locked()
    }
}

#[cfg(not(ksync_loom))] // `INIT` is a constant; loom's atomics cannot be one
// SAFETY: `write` and `try_write` return holding `block` (writers exclude
// each other) after seeing the reader counts sum to zero after fence D
// (readers arriving later see `block`: A/D), `read` and `try_read` after
// seeing `block` clear after their increment (or with the gate idle,
// which the writer's grace period orders), or granted by a writer's
// release that took the read lock for them; C/B and the grants' Release/
// Acquire order the sections. The guards may move to other tasks: a
// release only needs the lock held, on any CPU.
unsafe impl lock_api::RawRwLock for RawPerCpuRwSemaphore {
    // No call site to name a class after: with lockdep, each semaphore
    // built from `INIT` (`PerCpuRwSemaphore::new`) is a class of its own.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::with_map(Map::per_instance());
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    #[track_caller]
    fn lock_shared(&self) {
        self.read();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> bool {
        self.try_read()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self) {
        // SAFETY: forwarded: the guard holds a read lock.
        unsafe { self.unlock_read() }
    }

    #[inline]
    #[track_caller]
    fn lock_exclusive(&self) {
        self.write();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> bool {
        self.try_write()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded: the guard holds the write lock.
        unsafe { self.unlock_write() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawPerCpuRwSemaphore::is_locked(self)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.is_write_locked()
    }
}
