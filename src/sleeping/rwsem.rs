//! A sleeping reader-writer semaphore (Linux's `struct rw_semaphore`):
//! readers share it, a writer has it alone, and whoever cannot have it
//! sleeps on its wait queue, in FIFO order, until it is handed over.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::rwsem::RwSemaphore;
//!
//! static ROUTES: RwSemaphore<Vec<u32>> = RwSemaphore::new(Vec::new());
//!
//! let writers: Vec<_> = (0..4)
//!     .map(|i| std::thread::spawn(move || ROUTES.write().push(i)))
//!     .collect();
//! for w in writers {
//!     w.join().unwrap();
//! }
//! let routes = ROUTES.read(); // readers share it, and may sleep holding it
//! std::thread::sleep(std::time::Duration::from_millis(1));
//! assert_eq!(routes.len(), 4);
//! # }
//! ```
//!
//! # The algorithm
//!
//! One word holds `WRITER` (a writer has it), `WAITERS` (someone is
//! queued) and the number of readers inside, in units of `READER`:
//!
//! | bits | meaning |
//! |---|---|
//! | 0 (`WRITER`) | held by a writer |
//! | 1 (`WAITERS`) | the wait queue is not empty: no fast path for anyone |
//! | 2.. (`READER` each) | readers inside |
//!
//! * **Fast paths, one atomic operation each.** A reader adds `READER` by
//!   compare-exchange while neither `WRITER` nor `WAITERS` is set; a
//!   writer swaps 0 for `WRITER`. Unlocking is a `fetch_sub` (reader) or a
//!   compare-exchange of `WRITER` for 0 (writer).
//! * **No writer starvation.** A waiting writer is queued, and a queue
//!   that is not empty sets `WAITERS`, which stops every new reader from
//!   taking the fast path: new readers queue behind the writer, the
//!   readers inside drain, and the writer goes next.
//! * **Hand-off under the queue lock.** When the lock becomes free with
//!   waiters queued (a writer leaves, or the last reader does), the one
//!   who freed it takes the queue lock and *grants* it to the head of the
//!   queue: a writer, or the batch of consecutive readers at the front
//!   (Linux's `rwsem_mark_wake`). The lock never becomes free while
//!   `WAITERS` is set, so nobody overtakes the queue: the order is FIFO,
//!   and a granted waiter finds the lock already its own when it wakes
//!   (the wait queue's `GRANTED` state).
//! * **Optimistic spinning.** Before it queues, a locker that finds a
//!   writer inside spins while that writer runs on a CPU
//!   ([`Kernel::task_running`](crate::kernel::Kernel::task_running)), up
//!   to [`SPIN_LIMIT`] rounds, as the sleeping
//!   [`Mutex`](crate::mutex::Mutex) does, and never while anyone is
//!   queued.
//!
//! Readers take the count by compare-exchange rather than Linux's
//! `fetch_add` followed by a back-out: the count is then always exactly
//! the readers inside, so "the lock is free" means what it says, and a
//! `try_write` fails only when someone holds the lock or waits for it.
//!
//! A waiter that gives up (a timed wait that runs out, an async waiter
//! dropped) leaves the queue and grants the lock to whoever can have it
//! now: readers queued behind a writer that gave up while readers hold
//! the lock go in at once. A timeout that races a grant keeps the lock
//! (the wait succeeds); an async waiter dropped after a grant releases it.
//!
//! Guards come from [`lock_api`]: [`RwSemaphore`] is
//! `lock_api::RwLock<RawRwSemaphore, T>`, with `downgrade` (Linux's
//! `downgrade_write`) and timed `try_read_for`/`try_write_for`;
//! [`read_async`] and [`write_async`] are the async forms on the same
//! lock and queue. Holders may sleep; every wait first calls
//! [`might_sleep`](crate::wait::might_sleep) (on every call in debug builds,
//! on the contended path in release builds).
//!
//! # Lock-order checking
//!
//! With [`lockdep`](crate::lockdep) a semaphore is a lock class (the place
//! it was built, or a key given to [`with_class`](RawRwSemaphore::with_class);
//! `lock_api`'s `RwLock::new` has no call site, so such a semaphore is a
//! class of its own), recorded as Linux's `down_read`/`down_write`
//! annotations do:
//!
//! * Both sides are *sleeping* acquisitions, on the holder task's
//!   held-lock stack: the holder may sleep and migrate, and
//!   [`might_sleep`](crate::wait::might_sleep) does not count it.
//! * A read is not a recursive read (Linux's `rwsem_acquire_read` is
//!   `read = 1`, not 2): a writer that queues between a task's two reads
//!   blocks the second one behind it, and the writer waits for the first.
//!   So readers take part in the order graph as writers do, and a task
//!   taking a read lock it already holds is a
//!   [`Recursion`](crate::lockdep::ReportKind::Recursion) report.
//! * The blocking and timed forms are recorded before they wait (so a
//!   deadlock is reported before it hangs; a timed wait that gives up
//!   drops its record again), the `try_` forms once they succeeded (no
//!   edge into the semaphore: they do not wait).
//! * [`downgrade`](RawRwSemaphore::downgrade) keeps the record: the task
//!   still holds the lock, and readers and writers obey the same rules,
//!   so nothing lockdep checks changes with it (Linux's `lock_downgrade`
//!   only relabels the entry); the read unlock then drops it.
//! * The async forms ([`read_async`], [`write_async`]) are not tracked, as
//!   the [`Mutex`](crate::mutex::Mutex)'s are not: a future may be polled
//!   by one thread and dropped by another, which no per-task stack
//!   follows. A read unlock drops a record only if the unlocking task
//!   holds one for this semaphore, so an untracked read guard is released
//!   without a report; a tracked read guard sent to another task and
//!   dropped there leaves its record behind (Linux has
//!   `up_read_non_owner` for that, and no checking).

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;

use crate::kernel::{self, SPIN_LIMIT};
use crate::lockdep::{LockClassKey, Map};
use crate::sync::{AtomicUsize, Ordering};
use crate::wait::{self, GRANTED, Locked, Node, WAITING, WaitQueue};

/// In the state word: a writer holds it.
const WRITER: usize = 1;
/// In the state word: the wait queue is not empty.
const WAITERS: usize = 2;
/// In the state word: one reader inside.
const READER: usize = 4;

/// A queued waiter's tag: a reader.
const TAG_READ: usize = 0;
/// A queued waiter's tag: a writer.
const TAG_WRITE: usize = 1;

/// What a locker wants.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Read,
    Write,
}

impl Kind {
    fn tag(self) -> usize {
        match self {
            Kind::Read => TAG_READ,
            Kind::Write => TAG_WRITE,
        }
    }
}

/// The lock under [`RwSemaphore`] (Linux's `struct rw_semaphore`). See
/// the [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::rwsem::RawRwSemaphore;
///
/// // Embedded in a structure of its own, as Linux's `mm->mmap_lock`.
/// struct AddressSpace {
///     mmap_lock: RawRwSemaphore,
/// }
/// let mm = AddressSpace { mmap_lock: RawRwSemaphore::new() };
/// mm.mmap_lock.read(); // a page fault walks the mappings
/// // SAFETY: the read lock taken above.
/// unsafe { mm.mmap_lock.unlock_read() };
/// # }
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked semaphore with nobody waiting:
/// [`new`](Self::new) without `lockdep`, with it a class of its own
/// (`Zeroable` with the `bytemuck` feature). `lock_api`'s `RwSemaphore<T>`
/// is not covered (its layout is `lock_api`'s): embed the raw semaphore.
#[doc(alias = "rw_semaphore")]
pub struct RawRwSemaphore {
    /// `WRITER`, `WAITERS` and the readers (module docs). `WAITERS` is
    /// set and cleared only under the queue lock, and is set whenever the
    /// queue is not empty.
    state: AtomicUsize,
    /// The writer's task token (0 while none, or unknown): for spinners
    /// to ask whether it runs. Relaxed: a hint, never for exclusion.
    owner: AtomicUsize,
    queue: WaitQueue,
    /// The semaphore's [lockdep](crate::lockdep) class (zero-sized without
    /// `lockdep`): a sleeping lock, on its holders' task stacks.
    dep_map: Map,
    /// With `lockdep`: the writer took it through a tracked path (not the
    /// async ones), so its unlock records the release. Written by the
    /// writer only.
    #[cfg(feature = "lockdep")]
    tracked: crate::sync::AtomicBool,
}

impl core::fmt::Debug for RawRwSemaphore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let state = self.state.load(Ordering::Relaxed);
        f.debug_struct("RawRwSemaphore")
            .field("writer", &(state & WRITER != 0))
            .field("readers", &(state / READER))
            .field("waiters", &(state & WAITERS != 0))
            .finish_non_exhaustive()
    }
}

impl Default for RawRwSemaphore {
    fn default() -> Self {
        Self::new()
    }
}

/// A reader-writer lock whose waiters sleep (see the [module docs](self)).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::rwsem::RwSemaphore;
///
/// static MOUNTS: RwSemaphore<Vec<&str>> = RwSemaphore::new(Vec::new());
///
/// MOUNTS.write().push("/"); // down_write ... up_write
/// let mounts = MOUNTS.read(); // readers share it, and may sleep holding it
/// assert_eq!(mounts.len(), 1);
/// # }
/// ```
pub type RwSemaphore<T> = lock_api::RwLock<RawRwSemaphore, T>;
/// The read guard of [`RwSemaphore`].
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::rwsem::{RwSemaphore, RwSemaphoreReadGuard};
///
/// fn mount_count(mounts: &RwSemaphoreReadGuard<'_, Vec<&str>>) -> usize {
///     mounts.len() // the caller holds a read lock
/// }
/// let mounts = RwSemaphore::new(vec!["/", "/proc"]);
/// assert_eq!(mount_count(&mounts.read()), 2);
/// # }
/// ```
pub type RwSemaphoreReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawRwSemaphore, T>;
/// The write guard of [`RwSemaphore`].
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::rwsem::{RwSemaphore, RwSemaphoreWriteGuard};
///
/// let mounts = RwSemaphore::new(vec!["/"]);
/// let mut w: RwSemaphoreWriteGuard<'_, Vec<&str>> = mounts.write();
/// w.push("/tmp");
/// // Done changing, still reading: downgrade_write, no writer in between.
/// let r = RwSemaphoreWriteGuard::downgrade(w);
/// assert_eq!(r.len(), 2);
/// # }
/// ```
pub type RwSemaphoreWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawRwSemaphore, T>;

impl RawRwSemaphore {
    crate::sync::const_fn! {
        /// A new, unlocked semaphore (Linux's `init_rwsem`), in the
        /// [lockdep](crate::lockdep) class of the place it is built.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::rwsem::{RawRwSemaphore, RwSemaphore};
        ///
        /// struct Inode {
        ///     i_rwsem: RwSemaphore<u64>, // the file size, say
        /// }
        /// // Every inode's semaphore is built here: one lockdep class for all.
        /// fn new_inode() -> Inode {
        ///     Inode { i_rwsem: RwSemaphore::from_raw(RawRwSemaphore::new(), 0) }
        /// }
        /// let inode = new_inode();
        /// *inode.i_rwsem.write() = 4096;
        /// assert_eq!(*inode.i_rwsem.read(), 4096);
        /// # }
        /// ```
        #[doc(alias = "init_rwsem")]
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
        /// use ksync::rwsem::{RawRwSemaphore, RwSemaphore};
        ///
        /// static MOUNTS: RwSemaphore<Vec<&str>> =
        ///     RwSemaphore::from_raw(RawRwSemaphore::with_class(ksync::lock_class!("namespace_sem")), Vec::new());
        /// MOUNTS.write().push("/");
        /// assert_eq!(MOUNTS.read().len(), 1);
        /// # }
        /// ```
        #[must_use]
        pub fn with_class(key: &'static LockClassKey) -> Self {
            Self::with_map(Map::with_key(key))
        }
    }

    crate::sync::const_fn! {
        fn with_map(dep_map: Map) -> Self {
            RawRwSemaphore {
                state: AtomicUsize::new(0),
                owner: AtomicUsize::new(0),
                queue: WaitQueue::new(),
                dep_map,
                #[cfg(feature = "lockdep")]
                tracked: crate::sync::AtomicBool::new(false),
            }
        }
    }

    /// With lockdep: the new writer's acquisition was recorded, so its
    /// unlock records the release (only the writer writes it).
    #[inline(always)]
    fn mark_tracked(&self, kind: Kind) {
        #[cfg(feature = "lockdep")]
        if kind == Kind::Write {
            self.tracked
                .store(true, core::sync::atomic::Ordering::Relaxed);
        }
        #[cfg(not(feature = "lockdep"))]
        let _ = kind;
    }

    /// With lockdep: whether the writer's acquisition was recorded (and
    /// forgets it).
    #[cfg(feature = "lockdep")]
    #[inline(always)]
    fn take_tracked(&self) -> bool {
        self.tracked
            .swap(false, core::sync::atomic::Ordering::Relaxed)
    }

    /// Whether anyone holds it (a snapshot: stale as soon as it returns).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.read();
    /// assert!(sem.is_locked() && !sem.is_write_locked()); // rwsem_is_locked
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(!sem.is_locked());
    /// # }
    /// ```
    #[doc(alias = "rwsem_is_locked")]
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & !WAITERS != 0
    }

    /// Whether a writer holds it (a snapshot).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.write();
    /// assert!(sem.is_write_locked()); // for assertions: "a writer holds it"
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// assert!(!sem.is_write_locked());
    /// # }
    /// ```
    #[must_use]
    pub fn is_write_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & WRITER != 0
    }

    /// Takes a read lock if that needs no waiting (Linux's
    /// `down_read_trylock`): fails while a writer holds the lock or anyone
    /// waits for it. Never sleeps.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// assert!(sem.try_read());
    /// // SAFETY: the read lock just taken.
    /// unsafe { sem.unlock_read() };
    /// sem.write();
    /// assert!(!sem.try_read()); // a writer is inside: it would sleep
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[doc(alias = "down_read_trylock")]
    #[inline]
    #[must_use = "true means a read lock is held and must be unlocked"]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_read(&self) -> bool {
        let got = self.try_read_untracked();
        if got {
            self.dep_map.acquire_sleeping(0, true);
        }
        got
    }

    /// `try_read` without telling lockdep.
    #[inline]
    fn try_read_untracked(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & (WRITER | WAITERS) != 0 {
                return false;
            }
            // Acquire: pairs with the Release of the writer's unlock that
            // freed it.
            match self.state.compare_exchange_weak(
                state,
                state + READER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    /// Takes the write lock if nobody holds it or waits for it (Linux's
    /// `down_write_trylock`); whether it did. Never sleeps.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.read();
    /// assert!(!sem.try_write()); // a reader is inside: the writer would sleep
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(sem.try_write());
    /// // SAFETY: the write lock just taken.
    /// unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[doc(alias = "down_write_trylock")]
    #[inline]
    #[must_use = "true means the write lock is held and must be unlocked"]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write(&self) -> bool {
        let got = self.try_write_untracked();
        if got {
            self.dep_map.acquire_sleeping(0, true);
            self.mark_tracked(Kind::Write);
        }
        got
    }

    /// `try_write` without telling lockdep.
    #[inline]
    fn try_write_untracked(&self) -> bool {
        // Acquire: pairs with the Release of the unlock that freed it.
        let got = self
            .state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if got {
            self.owner.store(kernel::current_task(), Ordering::Relaxed);
        }
        got
    }

    /// Takes the lock for `kind` if that needs no waiting, without
    /// telling lockdep.
    fn try_take(&self, kind: Kind) -> bool {
        match kind {
            Kind::Read => self.try_read_untracked(),
            Kind::Write => self.try_write_untracked(),
        }
    }

    /// The uncontended blocking path: takes the lock for `kind` if that
    /// needs no waiting and records it as a blocking acquisition.
    #[inline(always)]
    #[track_caller]
    fn try_take_blocking(&self, kind: Kind) -> bool {
        let got = self.try_take(kind);
        if got {
            self.dep_map.acquire_sleeping(0, false);
            self.mark_tracked(kind);
        }
        got
    }

    /// Takes a read lock, sleeping while a writer holds it or anyone is
    /// queued for it (Linux's `down_read`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// static MM_LOCK: RawRwSemaphore = RawRwSemaphore::new();
    ///
    /// fn page_fault() {
    ///     MM_LOCK.read();
    ///     // ... walk the mappings, maybe sleeping on I/O ...
    ///     // SAFETY: the read lock taken above.
    ///     unsafe { MM_LOCK.unlock_read() };
    /// }
    /// MM_LOCK.read(); // this task's fault...
    /// std::thread::spawn(page_fault).join().unwrap(); // ...does not stop another's
    /// // SAFETY: the read lock taken above.
    /// unsafe { MM_LOCK.unlock_read() };
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// on every call in debug builds, on the contended path in release
    /// builds.
    #[doc(alias = "down_read")]
    #[inline]
    #[track_caller]
    pub fn read(&self) {
        wait::might_sleep_entry();
        if !self.try_take_blocking(Kind::Read) {
            self.lock_slow(Kind::Read, None);
        }
    }

    /// Takes the write lock, sleeping until the readers and writers
    /// before it are done (Linux's `down_write`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RwSemaphore;
    ///
    /// static ROUTES: RwSemaphore<Vec<u32>> = RwSemaphore::new(Vec::new());
    ///
    /// let reader = ROUTES.read();
    /// let writer = std::thread::spawn(|| ROUTES.write().push(10)); // sleeps...
    /// drop(reader); // ...until the reader is done
    /// writer.join().unwrap();
    /// assert_eq!(*ROUTES.read(), [10]);
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// on every call in debug builds, on the contended path in release
    /// builds.
    #[doc(alias = "down_write")]
    #[inline]
    #[track_caller]
    pub fn write(&self) {
        wait::might_sleep_entry();
        if !self.try_take_blocking(Kind::Write) {
            self.lock_slow(Kind::Write, None);
        }
    }

    /// [`read`](Self::read) for at most `timeout`: whether it took the
    /// lock. A timeout that races a hand-off keeps the lock (`true`).
    /// Needs [`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns) when it
    /// has to wait.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::time::Duration;
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.write();
    /// std::thread::scope(|s| {
    ///     // A writer is inside: another task gives up after the timeout
    ///     // (here zero, at once).
    ///     s.spawn(|| assert!(!sem.try_read_for(Duration::ZERO)));
    /// });
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// assert!(sem.try_read_for(Duration::from_millis(10)));
    /// # unsafe { sem.unlock_read() };
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "true means a read lock is held and must be unlocked"]
    pub fn try_read_for(&self, timeout: Duration) -> bool {
        wait::might_sleep_entry();
        self.try_take_blocking(Kind::Read)
            || self.lock_slow(Kind::Read, Some(wait::deadline(timeout)))
    }

    /// [`read`](Self::read) until the kernel's clock
    /// ([`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns)) reaches
    /// `deadline_ns`: whether it took the lock.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use ksync::{host::HostKernel as MyKernel, kernel::Kernel};
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// let deadline = MyKernel::clock_ns() + 5_000_000; // 5 ms from now
    /// assert!(sem.try_read_until(deadline)); // free: at once
    /// // SAFETY: the read lock just taken.
    /// unsafe { sem.unlock_read() };
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "true means a read lock is held and must be unlocked"]
    pub fn try_read_until(&self, deadline_ns: u64) -> bool {
        wait::might_sleep_entry();
        self.try_take_blocking(Kind::Read) || self.lock_slow(Kind::Read, Some(deadline_ns))
    }

    /// [`write`](Self::write) for at most `timeout`: whether it took the
    /// lock. A timeout that races a hand-off keeps the lock (`true`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::time::Duration;
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.read();
    /// std::thread::scope(|s| {
    ///     // A reader is inside: another task gives up (here at once).
    ///     s.spawn(|| assert!(!sem.try_write_for(Duration::ZERO)));
    /// });
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(sem.try_write_for(Duration::from_millis(10)));
    /// # unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "true means the write lock is held and must be unlocked"]
    pub fn try_write_for(&self, timeout: Duration) -> bool {
        wait::might_sleep_entry();
        self.try_take_blocking(Kind::Write)
            || self.lock_slow(Kind::Write, Some(wait::deadline(timeout)))
    }

    /// [`write`](Self::write) until the kernel's clock reaches
    /// `deadline_ns`: whether it took the lock.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use ksync::{host::HostKernel as MyKernel, kernel::Kernel};
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// let now = MyKernel::clock_ns();
    /// sem.read();
    /// std::thread::scope(|s| {
    ///     // A reader is inside and the deadline has passed: give up.
    ///     s.spawn(|| assert!(!sem.try_write_until(now)));
    /// });
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(sem.try_write_until(now + 5_000_000)); // free: at once
    /// # unsafe { sem.unlock_write() };
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "true means the write lock is held and must be unlocked"]
    pub fn try_write_until(&self, deadline_ns: u64) -> bool {
        wait::might_sleep_entry();
        self.try_take_blocking(Kind::Write) || self.lock_slow(Kind::Write, Some(deadline_ns))
    }

    /// The contended path: spin while a running writer holds it, then
    /// queue and sleep until granted (or the deadline passes: `false`).
    #[cold]
    #[track_caller]
    fn lock_slow(&self, kind: Kind, deadline_ns: Option<u64>) -> bool {
        wait::might_sleep_slow();
        // Before waiting, so a deadlock is reported first; dropped again
        // if the wait gives up or unwinds.
        let dep = self.dep_map.acquire_sleeping_guard(0, false);
        let got = self.lock_slow_untracked(kind, deadline_ns);
        if got {
            dep.keep();
            self.mark_tracked(kind);
        }
        got
    }

    /// `lock_slow` without telling lockdep.
    fn lock_slow_untracked(&self, kind: Kind, deadline_ns: Option<u64>) -> bool {
        if self.spin(kind) {
            return true;
        }
        let node = Node::new();
        // Takes the node off the queue on every way out, unwinding
        // included, and lets the waiters behind it go if they can.
        let leave = Leave {
            sem: self,
            node: &node,
        };
        {
            let mut locked = self.queue.lock();
            // SAFETY: `node` is new and stays on this stack frame, and
            // `leave` takes it off the queue before the frame goes.
            if unsafe { self.queue_or_take(&mut locked, &node, kind, None) } {
                drop(locked);
                // Never queued, or granted (a grant takes the node off):
                // nothing to leave.
                core::mem::forget(leave);
                return true;
            }
        }
        // Only grants wake these waiters: GRANTED, or WAITING when the
        // deadline passed first (the node is then off the queue, and
        // `leave` lets the ones behind it go).
        self.queue.sleep(&node, deadline_ns) == GRANTED
    }

    /// Spins while a writer that runs on a CPU holds the lock and nobody
    /// is queued, taking it when it is free; whether it did.
    fn spin(&self, kind: Kind) -> bool {
        for _ in 0..SPIN_LIMIT {
            let state = self.state.load(Ordering::Relaxed);
            if state & WAITERS != 0 {
                return false;
            }
            if state & WRITER == 0 {
                if kind == Kind::Write && state != 0 {
                    // Held by readers, which may sleep: no owner to watch.
                    return false;
                }
                if self.try_take(kind) {
                    return true;
                }
                continue;
            }
            let owner = self.owner.load(Ordering::Relaxed);
            if owner != 0 && !kernel::task_running(owner) {
                return false;
            }
            crate::sync::spin_loop();
        }
        false
    }

    /// Under the queue lock: takes the lock for `kind` at once if nobody
    /// waits and it is free for `kind`, or else queues `node` (waking
    /// `waker`, or this task) and sets `WAITERS`, then grants the lock to
    /// the head of the queue if it can have it now (which may be `node`
    /// itself). Whether the caller holds the lock now (then `node` is not
    /// queued).
    ///
    /// # Safety
    /// `node` is not queued, stays where it is until it is off the queue,
    /// and is taken off before it goes away (as for
    /// [`Locked::enqueue`]).
    unsafe fn queue_or_take(
        &self,
        locked: &mut Locked<'_>,
        node: &Node,
        kind: Kind,
        waker: Option<&Waker>,
    ) -> bool {
        if locked.is_empty() && self.take_unqueued(kind) {
            return true;
        }
        // SAFETY: forwarded from the caller.
        unsafe { locked.enqueue(node, true, kind.tag(), waker, false) };
        // Under the queue lock, after the node is queued: an unlock that
        // frees the lock after this sees WAITERS and grants under this
        // lock (so it finds the node); one that freed it before shows
        // here, and `grant` hands it on.
        self.state.fetch_or(WAITERS, Ordering::Relaxed);
        self.grant(locked);
        node.state() == GRANTED
    }

    /// With the queue lock held and the queue empty: takes the lock for
    /// `kind` if it is free for it (clearing a `WAITERS` that nobody
    /// needs any more); whether it did.
    fn take_unqueued(&self, kind: Kind) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            let new = match kind {
                Kind::Read if state & WRITER == 0 => (state & !WAITERS) + READER,
                Kind::Write if state & !WAITERS == 0 => WRITER,
                _ => return false,
            };
            // Acquire: as in `try_read`/`try_write`.
            match self
                .state
                .compare_exchange_weak(state, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if kind == Kind::Write {
            self.owner.store(kernel::current_task(), Ordering::Relaxed);
        }
        true
    }

    /// Under the queue lock: hands the lock to the head of the queue if it
    /// can have it now (a writer if the lock is free; the consecutive
    /// readers at the front if no writer holds it), and clears `WAITERS`
    /// when nobody is left queued. Safe to call whenever: it looks at the
    /// state first.
    fn grant(&self, locked: &mut Locked<'_>) {
        while self.grant_batch(locked) {
            // More readers at the front than one batch of wakes: wake
            // these (the lock dropped), then look at the queue afresh.
            locked.relock();
        }
    }

    /// One round of [`grant`](Self::grant): at most a batch of wakes;
    /// whether readers at the front were left for the next round.
    fn grant_batch(&self, locked: &mut Locked<'_>) -> bool {
        if locked.batch_full() {
            return true;
        }
        let Some((head, tag, _)) = locked.front() else {
            // Relaxed: WAITERS changes only under the queue lock.
            self.state.fetch_and(!WAITERS, Ordering::Relaxed);
            return false;
        };
        let head: *const Node = head;
        // Acquire: pairs with the Release of the unlock that freed the
        // lock; its critical section reaches the granted waiters through
        // `wake`'s Release store of GRANTED.
        let state = self.state.load(Ordering::Acquire);
        debug_assert!(state & WAITERS != 0, "ksync: rwsem waiters without WAITERS");
        if tag == TAG_WRITE {
            if state & !WAITERS != 0 {
                // Held: its release grants.
                return false;
            }
            // SAFETY: queued, so valid until `wake` takes it off.
            let head = unsafe { &*head };
            let last = locked.next(head).is_none();
            // Free with WAITERS set: nobody else can take it or change
            // the word now (the fast paths need WAITERS clear, queueing
            // needs this lock, no one is inside to unlock).
            let new = if last { WRITER } else { WRITER | WAITERS };
            // Relaxed: the new owner learns of it through GRANTED.
            let old = self.state.swap(new, Ordering::Relaxed);
            debug_assert_eq!(old, WAITERS);
            self.owner.store(locked.task_of(head), Ordering::Relaxed);
            locked.wake(head, GRANTED);
            return false;
        }
        if state & WRITER != 0 {
            return false;
        }
        // The batch: the readers at the front, up to the first writer, at
        // most as many as the wake batch holds (`more`: readers left).
        let room = locked.room();
        let mut batch = 1;
        // SAFETY: queued, so valid while this lock is held.
        let mut cursor = unsafe { &*head };
        let mut more = false;
        let last = loop {
            match locked.next(cursor) {
                Some((_, TAG_READ, _)) if batch == room => {
                    more = true;
                    break false;
                }
                Some((next, TAG_READ, _)) => {
                    let next: *const Node = next;
                    // SAFETY: as above.
                    cursor = unsafe { &*next };
                    batch += 1;
                }
                Some(_) => break false,
                None => break true,
            }
        };
        // The readers count before they wake (one may unlock at once);
        // WAITERS goes in the same step if the queue empties. A
        // read-modify-write: readers inside may be unlocking meanwhile.
        let add = batch * READER - if last { WAITERS } else { 0 };
        // Relaxed: the readers learn of it through GRANTED.
        self.state.fetch_add(add, Ordering::Relaxed);
        for _ in 0..batch {
            let Some((node, _, _)) = locked.front() else {
                break;
            };
            let node: *const Node = node;
            // SAFETY: queued, so valid until `wake` takes it off.
            locked.wake(unsafe { &*node }, GRANTED);
        }
        more
    }

    /// Releases a read lock (Linux's `up_read`); the last reader out hands
    /// the lock to the waiters.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.read();
    /// assert!(!sem.try_write()); // a reader is inside
    /// // SAFETY: releases the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(sem.try_write()); // the last reader is out
    /// # unsafe { sem.unlock_write() };
    /// # }
    /// ```
    ///
    /// # Safety
    /// A read lock is held (by the caller; the lock itself only needs one
    /// held).
    #[doc(alias = "up_read")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_read(&self) {
        // A read taken through a tracked path by this task (an async one,
        // or one another task took, has no record here).
        #[cfg(feature = "lockdep")]
        if self.dep_map.is_held() == Some(true) {
            self.dep_map.release();
        }
        // Release: pairs with the Acquire of the next writer (its fast
        // path, or the grant that hands it the lock).
        let old = self.state.fetch_sub(READER, Ordering::Release);
        debug_assert!(
            old & WRITER == 0 && old >= READER,
            "ksync: rwsem unlock_read without a read lock"
        );
        if old == READER | WAITERS {
            // The last reader, with waiters: hand it on.
            self.grant(&mut self.queue.lock());
        }
    }

    /// Releases the write lock (Linux's `up_write`): hands it to the head
    /// of the queue if anyone waits.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.write();
    /// // ... change the mappings ...
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() };
    /// assert!(!sem.is_locked());
    /// # }
    /// ```
    ///
    /// # Safety
    /// The write lock is held (by the caller; the lock itself only needs
    /// it held).
    #[doc(alias = "up_write")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_write(&self) {
        #[cfg(feature = "lockdep")]
        if self.take_tracked() {
            self.dep_map.release();
        }
        self.owner.store(0, Ordering::Relaxed);
        // Release: pairs with the next locker's Acquire.
        if self
            .state
            .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_write_slow();
        }
    }

    #[cold]
    fn unlock_write_slow(&self) {
        let mut locked = self.queue.lock();
        // Release: pairs with the grant's Acquire (and the next locker's).
        let old = self.state.fetch_and(!WRITER, Ordering::Release);
        debug_assert!(
            old & WRITER != 0,
            "ksync: rwsem unlock_write without the write lock"
        );
        self.grant(&mut locked);
    }

    /// Turns the write lock into a read lock without letting a writer in
    /// between (Linux's `downgrade_write`); the readers at the front of
    /// the queue come in with it.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.write();
    /// // ... install the new mapping, then only read it ...
    /// // SAFETY: this task holds the write lock.
    /// unsafe { sem.downgrade() };
    /// assert!(!sem.is_write_locked() && sem.try_read()); // readers come in
    /// // SAFETY: the downgraded lock and the read lock just taken.
    /// unsafe { sem.unlock_read() };
    /// unsafe { sem.unlock_read() };
    /// # }
    /// ```
    ///
    /// # Safety
    /// The write lock is held by the caller, which holds a read lock
    /// afterwards.
    #[doc(alias = "downgrade_write")]
    pub unsafe fn downgrade(&self) {
        // With lockdep the writer's record, if any, becomes the reader's
        // (module docs): the read unlock finds it held and drops it.
        #[cfg(feature = "lockdep")]
        self.take_tracked();
        self.owner.store(0, Ordering::Relaxed);
        // WRITER out, one READER in, in one step (bit 0 is set, so adding
        // READER - WRITER borrows nothing). Release: readers granted
        // from here on see the write section (with the grant's Acquire).
        let old = self.state.fetch_add(READER - WRITER, Ordering::Release);
        debug_assert!(
            old & WRITER != 0,
            "ksync: rwsem downgrade without the write lock"
        );
        if old & WAITERS != 0 {
            self.grant(&mut self.queue.lock());
        }
    }

    /// Releases the lock held for `kind`.
    ///
    /// # Safety
    /// It is held for `kind`.
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self, kind: Kind) {
        match kind {
            // SAFETY: forwarded.
            Kind::Read => unsafe { self.unlock_read() },
            // SAFETY: forwarded.
            Kind::Write => unsafe { self.unlock_write() },
        }
    }

    /// Takes a read lock, as a future: the async form of
    /// [`read`](Self::read) on the same lock and queue (no spinning).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.write();
    /// let mut cx = Context::from_waker(Waker::noop()); // an executor's waker
    /// let mut reading = pin!(sem.read_async());
    /// assert!(reading.as_mut().poll(&mut cx).is_pending()); // queued
    /// // SAFETY: the write lock taken above.
    /// unsafe { sem.unlock_write() }; // hands a read lock to the future
    /// assert!(reading.as_mut().poll(&mut cx).is_ready());
    /// # unsafe { sem.unlock_read() };
    /// # }
    /// ```
    pub fn read_async(&self) -> RawRead<'_> {
        RawRead {
            waiter: AsyncWaiter::new(self, Kind::Read),
        }
    }

    /// Takes the write lock, as a future: the async form of
    /// [`write`](Self::write) on the same lock and queue.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::rwsem::RawRwSemaphore;
    ///
    /// let sem = RawRwSemaphore::new();
    /// sem.read();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut writing = pin!(sem.write_async());
    /// assert!(writing.as_mut().poll(&mut cx).is_pending()); // waits for the reader
    /// // SAFETY: the read lock taken above.
    /// unsafe { sem.unlock_read() };
    /// assert!(writing.as_mut().poll(&mut cx).is_ready());
    /// assert!(sem.is_write_locked());
    /// # unsafe { sem.unlock_write() };
    /// # }
    /// ```
    pub fn write_async(&self) -> RawWrite<'_> {
        RawWrite {
            waiter: AsyncWaiter::new(self, Kind::Write),
        }
    }
}

/// A blocking waiter leaving the queue (timed out, or unwinding): takes
/// its node off and grants the lock to the ones behind it if they can
/// have it now.
struct Leave<'a> {
    sem: &'a RawRwSemaphore,
    node: &'a Node,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut locked = self.sem.queue.lock();
        if locked.remove(self.node) || self.node.state() == WAITING {
            // Left without the lock (a timed-out `sleep` took the node
            // off already): a writer at the head that gave up may have
            // been all that kept the readers behind it out.
            self.sem.grant(&mut locked);
        }
    }
}

/// The state of an async locker (both futures).
struct AsyncWaiter<'a> {
    sem: &'a RawRwSemaphore,
    kind: Kind,
    node: Node,
    queued: bool,
    done: bool,
}

impl<'a> AsyncWaiter<'a> {
    fn new(sem: &'a RawRwSemaphore, kind: Kind) -> Self {
        AsyncWaiter {
            sem,
            kind,
            node: Node::new(),
            queued: false,
            done: false,
        }
    }

    /// # Safety
    /// `self` is pinned: it does not move until it drops.
    unsafe fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.done {
            return Poll::Ready(());
        }
        if !self.queued {
            if self.sem.try_take(self.kind) {
                self.done = true;
                return Poll::Ready(());
            }
            let mut locked = self.sem.queue.lock();
            // SAFETY: the node is not queued yet, it is pinned (this
            // function's contract), and `Drop` takes it off the queue.
            if unsafe {
                self.sem
                    .queue_or_take(&mut locked, &self.node, self.kind, Some(cx.waker()))
            } {
                self.done = true;
                return Poll::Ready(());
            }
            self.queued = true;
            return Poll::Pending;
        }
        let mut locked = self.sem.queue.lock();
        if self.node.state() == GRANTED {
            self.done = true;
            return Poll::Ready(());
        }
        // Still queued: a grant wakes the newest waker. The one it
        // replaces is dropped after the unlock (executor code).
        let old = locked.set_waker(&self.node, cx.waker());
        drop(locked);
        drop(old);
        Poll::Pending
    }
}

impl Drop for AsyncWaiter<'_> {
    fn drop(&mut self) {
        if !self.queued || self.done {
            return;
        }
        let mut locked = self.sem.queue.lock();
        if locked.remove(&self.node) {
            // Cancelled while queued: the ones behind may go now.
            self.sem.grant(&mut locked);
            return;
        }
        // Off the queue: only a grant takes an async waiter off.
        debug_assert_eq!(self.node.state(), GRANTED);
        drop(locked);
        // SAFETY: the grant made this future's task a holder for `kind`,
        // and it was cancelled before it knew: release.
        unsafe { self.sem.unlock(self.kind) };
    }
}

/// The future of [`RawRwSemaphore::read_async`]: ready once a read lock is
/// held. Dropped before that, it leaves the queue (and releases a lock it
/// was handed).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::rwsem::RawRwSemaphore;
///
/// let sem = RawRwSemaphore::new();
/// sem.write();
/// let mut cx = Context::from_waker(Waker::noop());
/// {
///     let mut reading = pin!(sem.read_async());
///     assert!(reading.as_mut().poll(&mut cx).is_pending());
///     // SAFETY: the write lock taken above.
///     unsafe { sem.unlock_write() }; // hands the future a read lock
/// } // dropped before it saw it: it releases the lock
/// assert!(!sem.is_locked());
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct RawRead<'a> {
    waiter: AsyncWaiter<'a>,
}

/// The future of [`RawRwSemaphore::write_async`]: ready once the write
/// lock is held. Dropped before that, it leaves the queue (and releases a
/// lock it was handed).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::rwsem::RawRwSemaphore;
///
/// let sem = RawRwSemaphore::new();
/// sem.read();
/// let mut cx = Context::from_waker(Waker::noop());
/// {
///     let mut writing = pin!(sem.write_async());
///     assert!(writing.as_mut().poll(&mut cx).is_pending());
/// } // cancelled: off the queue, so new readers may come in again
/// assert!(sem.try_read());
/// # unsafe { sem.unlock_read() };
/// # unsafe { sem.unlock_read() };
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct RawWrite<'a> {
    waiter: AsyncWaiter<'a>,
}

impl core::fmt::Debug for RawRead<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawRead")
            .field("done", &self.waiter.done)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for RawWrite<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawWrite")
            .field("done", &self.waiter.done)
            .finish_non_exhaustive()
    }
}

impl Future for RawRead<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing moves out of the future; the waiter (and its
        // node) stays put until the future drops, which takes it off the
        // queue.
        unsafe { self.get_unchecked_mut().waiter.poll(cx) }
    }
}

impl Future for RawWrite<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: as for `RawRead`.
        unsafe { self.get_unchecked_mut().waiter.poll(cx) }
    }
}

/// Takes a read lock on `sem`, as a future, and gives its guard: the async
/// form of `sem.read()`.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::rwsem::{RwSemaphore, read_async};
///
/// static ROUTES: RwSemaphore<Vec<u32>> = RwSemaphore::new(Vec::new());
///
/// async fn route_count() -> usize {
///     read_async(&ROUTES).await.len()
/// }
/// # let mut cx = Context::from_waker(Waker::noop());
/// # let std::task::Poll::Ready(n) = pin!(route_count()).poll(&mut cx) else { panic!() };
/// # assert_eq!(n, 0);
/// # }
/// ```
#[cfg(not(ksync_loom))] // `lock_api`'s traits are not implemented under loom
pub async fn read_async<T: ?Sized>(sem: &RwSemaphore<T>) -> RwSemaphoreReadGuard<'_, T> {
    // SAFETY: `raw` is only used to take a read lock, which the guard
    // made below then owns.
    unsafe { sem.raw() }.read_async().await;
    // SAFETY: a read lock is held, by this task, and the guard releases it.
    unsafe { sem.make_read_guard_unchecked() }
}

/// Takes the write lock on `sem`, as a future, and gives its guard: the
/// async form of `sem.write()`.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::rwsem::{RwSemaphore, write_async};
///
/// static ROUTES: RwSemaphore<Vec<u32>> = RwSemaphore::new(Vec::new());
///
/// async fn add_route(gateway: u32) {
///     write_async(&ROUTES).await.push(gateway);
/// }
/// # let mut cx = Context::from_waker(Waker::noop());
/// # assert!(pin!(add_route(7)).poll(&mut cx).is_ready());
/// assert_eq!(*ROUTES.read(), [7]);
/// # }
/// ```
#[cfg(not(ksync_loom))] // as `read_async`
pub async fn write_async<T: ?Sized>(sem: &RwSemaphore<T>) -> RwSemaphoreWriteGuard<'_, T> {
    // SAFETY: `raw` is only used to take the write lock, which the guard
    // made below then owns.
    unsafe { sem.raw() }.write_async().await;
    // SAFETY: the write lock is held, by this task, and the guard
    // releases it.
    unsafe { sem.make_write_guard_unchecked() }
}

#[cfg(not(ksync_loom))] // `INIT` is a constant; loom's atomics cannot be one
// SAFETY: `lock_exclusive` and `try_lock_exclusive` return with WRITER set
// by this caller and no reader counted (a writer's CAS from 0, or a grant
// on a free lock), `lock_shared` with this reader counted and WRITER clear
// (the reader CAS, or a grant while no writer holds it); every
// acquisition is Acquire against the releases' Release (directly, or
// through the grant's wake). The guards may move to other tasks: the
// release depends on no per-task state (the owner token is a hint).
unsafe impl lock_api::RawRwLock for RawRwSemaphore {
    // No call site to name a class after: with lockdep, each semaphore
    // built from `INIT` (`RwSemaphore::new`) is a class of its own.
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
        RawRwSemaphore::is_locked(self)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.is_write_locked()
    }
}

#[cfg(not(ksync_loom))]
// SAFETY: `downgrade` swaps WRITER for one READER in one atomic step, so no
// writer gets in between, and the caller then holds a read lock.
unsafe impl lock_api::RawRwLockDowngrade for RawRwSemaphore {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn downgrade(&self) {
        // SAFETY: forwarded: the guard holds the write lock.
        unsafe { RawRwSemaphore::downgrade(self) }
    }
}

#[cfg(not(ksync_loom))]
// SAFETY: the timed forms take the lock as `lock_shared`/`lock_exclusive`
// do, or return false without holding it (a waiter that timed out is off
// the queue and was granted nothing).
unsafe impl lock_api::RawRwLockTimed for RawRwSemaphore {
    /// A timeout.
    type Duration = Duration;
    /// A deadline on the kernel's clock, in nanoseconds
    /// ([`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns)).
    type Instant = u64;

    #[inline]
    #[track_caller]
    fn try_lock_shared_for(&self, timeout: Duration) -> bool {
        self.try_read_for(timeout)
    }

    #[inline]
    #[track_caller]
    fn try_lock_shared_until(&self, deadline_ns: u64) -> bool {
        self.try_read_until(deadline_ns)
    }

    #[inline]
    #[track_caller]
    fn try_lock_exclusive_for(&self, timeout: Duration) -> bool {
        self.try_write_for(timeout)
    }

    #[inline]
    #[track_caller]
    fn try_lock_exclusive_until(&self, deadline_ns: u64) -> bool {
        self.try_write_until(deadline_ns)
    }
}
