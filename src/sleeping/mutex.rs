//! A sleeping mutex (Linux's `struct mutex`): a contended locker spins
//! while the holder runs on a CPU, then sleeps on the lock's wait queue;
//! a waiter that keeps losing the lock gets it handed over.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::mutex::Mutex;
//!
//! static TABLE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
//!
//! let threads: Vec<_> = (0..4)
//!     .map(|i| std::thread::spawn(move || TABLE.lock().push(i)))
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! assert_eq!(TABLE.lock().len(), 4);
//! # }
//! ```
//!
//! # The algorithm
//!
//! One word holds `LOCKED`, `WAITERS` (the next unlock must look at the
//! queue) and `HANDOFF` (the first waiter asked for the lock to be handed
//! to it); a flag beside it, `flight`, says that a woken waiter is on its
//! way back. Uncontended, `lock` and `unlock` are one compare-exchange
//! each.
//!
//! * **Optimistic spinning.** A locker that finds it held spins while the
//!   holder is on a CPU ([`Kernel::task_running`](crate::kernel::Kernel::task_running)),
//!   up to a quarter of [`SPIN_LIMIT`] relax rounds and then gives its CPU
//!   away a few times
//!   ([`Kernel::yield_now`](crate::kernel::Kernel::yield_now)), taking the
//!   lock when it is free: a short critical section is waited out without
//!   two context switches (Linux's `mutex_optimistic_spin`, with
//!   `parking_lot`'s yields for more tasks than CPUs). It looks at the
//!   lock with exponential backoff from 16 relax rounds, so that it does
//!   not keep the holder's cache line busy. A lock found free with
//!   waiters queued is taken at once, without the checks of the path
//!   that may sleep.
//! * **Sleeping.** Otherwise it queues on the wait queue (FIFO), sets
//!   `WAITERS` and sleeps; `unlock` then takes the slow path, frees the
//!   lock, clears `WAITERS` and wakes the first waiter, which sets
//!   `WAITERS` again when it is back (so the unlocks in between, which
//!   have no one to wake, take the fast path).
//! * **Hand-off.** A woken waiter may find the lock taken again by a
//!   spinner. It goes back to the front of the queue and sets `HANDOFF`;
//!   the next `unlock` then does not free the lock but makes that first
//!   waiter its owner and wakes it, and no one else may take the lock
//!   while `HANDOFF` is set. While a woken waiter is on its way back
//!   (`flight`: woken, not yet queued again; it may wait to be scheduled),
//!   unlocks free the lock but wake no one else, so no other woken waiter
//!   can queue at the front ahead of it (in Linux the woken waiter stays
//!   on the list, first, and the unlocks wake only it). So a waiter loses
//!   at most one race after it reaches the front (Linux's
//!   `MUTEX_FLAG_HANDOFF`): no starvation. Until that race is lost,
//!   lockers take a free lock as they find it (Linux's lock stealing).
//!   The cost: an async waiter that is woken and then neither polled nor
//!   dropped holds up the waiters behind it (not the lock: the lock is
//!   free, and lockers that find it so take it).
//!
//! # What the contended path costs
//!
//! The first version of the bound kept `flight` in the word, with
//! `WAITERS` set while anyone was queued: while a waiter was on its way
//! back, which under contention is nearly always, every lock and unlock
//! missed its fast path (each an extra compare-exchange, and each unlock
//! the queue lock): counted at 8 threads on 2 cores, about 10 million
//! slow unlocks a second against a few hundred wakes. The contended bench
//! of `benches/sleeping.rs` at 8 threads on 2 cores ran 0.67x
//! `parking_lot::Mutex`'s critical sections with it, and 1.00-1.05x with
//! `flight` out of the word and `WAITERS` cleared while a waiter is
//! woken (medians of interleaved runs on a host at load average 6-18;
//! the same build waking the next waiter at every unlock, without the
//! bound, 0.89-1.18x). See `docs/benchmarks.md`.
//!
//! Unlike a spinlock, the holder may sleep, and preemption stays enabled.
//! Guards come from [`lock_api`], as for the spinlocks: [`Mutex`] is
//! `lock_api::Mutex<RawMutex, T>`; [`lock_async`] is the async form on the
//! same lock.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use crate::kernel::{self, SPIN_LIMIT};
use crate::lockdep::{LockClassKey, Map};
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::wait::{self, GRANTED, Locked, Node, Queued, WAITING, WaitQueue};

/// How many relax rounds a locker spins while the holder runs before it
/// starts giving its CPU away ([`YIELDS`]): a quarter of the spinlocks'
/// [`SPIN_LIMIT`] (all of it under loom, whose limit is 2). A spinner is
/// not free for the holder: on the 2-core host of `benches/sleeping.rs` a
/// thread that only runs `pause` on the other CPU halves a lone locker's
/// rate, and with the full `SPIN_LIMIT` the contended bench ran about 0.6x
/// as many critical sections as with this. Measured there (contended
/// throughput vs `parking_lot::Mutex` at 2 / 4 / 8 threads, interleaved
/// full runs, quiet host): this spin then sleeping, 1.04x / 0.61x /
/// 0.66x; this spin then 7 yields, 0.91x / 0.77x / 0.73x; 16 rounds then
/// 7 yields, 0.71-0.86x / 0.81x / 0.78x: yielding helps where tasks
/// outnumber CPUs and costs where the holder has a CPU of its own. (All
/// with the first look after 1 round; see [`FIRST_STEP`] for today's.)
const SPIN_ROUNDS: u32 = if cfg!(ksync_loom) {
    SPIN_LIMIT
} else {
    SPIN_LIMIT / 4
};

/// The first wait between two looks at the lock, in relax rounds (then
/// doubling up to [`BACKOFF_MAX`](kernel::BACKOFF_MAX)). Linux lets one
/// optimistic spinner at a time at the lock word (the others queue on its
/// `osq` MCS lock); here every spinner looks, so each looks rarely from the
/// start. A look that finds the lock free takes it from a holder that was
/// about to take it again, and moves the line (and the lock) to another
/// CPU. Starting at 1 round (4 looks in the first 7 rounds), the contended
/// bench of `benches/sleeping.rs` (2 cores; 2, 4 and 8 threads) ran
/// 0.85-0.94x / 0.66-0.67x / 0.64-0.66x `parking_lot::Mutex`'s critical
/// sections; starting at 16, 1.76-1.96x / 1.37-1.53x / 1.41-1.47x in the
/// same interleaved runs, fairer too (0.67 against 0.45 at 8 threads). 8
/// gave about 1.05x at 4 and 8 threads, 32 little more than 16. The cost
/// is a later look in a short wait: 16 relax rounds at most.
const FIRST_STEP: u32 = 16;

/// How many times a locker whose holder still runs after [`SPIN_ROUNDS`]
/// gives its CPU away ([`Kernel::yield_now`](kernel::Kernel::yield_now))
/// before it sleeps, looking at the lock after each.
const YIELDS: u32 = if cfg!(ksync_loom) { 1 } else { 7 };

/// In the state word: held.
const LOCKED: usize = 1;
/// The next unlock must look at the queue: set by a waiter as it queues,
/// or comes back after a wake (under the queue lock, in the read-modify-
/// write that looks at `LOCKED`: either it sees the lock free and takes
/// it, or the holder's unlock sees this bit). Cleared when the queue
/// empties, and by an unlock that frees the lock: then the first waiter
/// is woken, or one is on its way back already (`flight`), and sets it
/// again when it is back.
const WAITERS: usize = 2;
/// The first waiter asked for a hand-off.
const HANDOFF: usize = 4;

/// In `owner`: held by an async task (a `lock_async` future). It runs on
/// no CPU of its own while it holds the lock (its executor may poll other
/// futures, or park), so there is no holder to watch: lockers sleep at
/// once instead of spinning and yielding while "the owner runs", which
/// would only watch the executor's thread.
const ASYNC_HOLDER: usize = usize::MAX;

/// The lock under [`Mutex`] (Linux's `struct mutex`). See the
/// [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::mutex::RawMutex;
///
/// // A lock with no data inside: it serialises firmware uploads.
/// static FW_UPLOAD: RawMutex = RawMutex::new();
///
/// FW_UPLOAD.lock();
/// // ... program the flash controller, maybe sleeping ...
/// // SAFETY: this task holds it.
/// unsafe { FW_UPLOAD.unlock() };
/// # }
/// ```
pub struct RawMutex {
    state: AtomicUsize,
    /// The holder's task token (0 while free or unknown, [`ASYNC_HOLDER`]
    /// for an async holder): for spinners
    /// to ask whether it runs. Relaxed: a hint, never for exclusion.
    owner: AtomicUsize,
    /// A waiter was woken without the lock (the lock freed for it) and has
    /// not queued again nor left yet: the unlocks wake no one else meanwhile
    /// (it is still the first waiter, as in Linux, where a woken waiter
    /// stays on the list), so no other woken waiter can queue at the front
    /// ahead of it. Written under the queue lock (Relaxed: the lock orders
    /// it; `Debug` reads a snapshot). Not in `state`, so that the lock and
    /// unlock fast paths still work while it is set: see `WAITERS`.
    flight: AtomicBool,
    queue: WaitQueue,
    /// The lock's [lockdep](crate::lockdep) class (zero-sized without
    /// `lockdep`): a sleeping lock, on its holder task's stack.
    dep_map: Map,
    /// With `lockdep`: the holder took it through a tracked path (the
    /// blocking ones; async acquisitions may move between threads and are
    /// not on a task's stack). Written by the holder only.
    #[cfg(feature = "lockdep")]
    tracked: crate::sync::AtomicBool,
}

impl core::fmt::Debug for RawMutex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // One snapshot of the word (Relaxed: a hint, as `is_locked`).
        let state = self.state.load(Ordering::Relaxed);
        f.debug_struct("RawMutex")
            .field("locked", &(state & LOCKED != 0))
            .field("waiters", &(state & WAITERS != 0))
            .field("handoff", &(state & HANDOFF != 0))
            .field("woken_in_flight", &self.flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

/// A mutex whose waiters sleep (see the [module docs](self)).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::mutex::Mutex;
///
/// struct Device {
///     config: Mutex<[u8; 16]>, // its holder may sleep (wait for the device)
/// }
/// let dev = Device { config: Mutex::new([0; 16]) };
/// let mut config = dev.config.lock(); // mutex_lock
/// config[0] = 1;
/// drop(config); // mutex_unlock
/// # }
/// ```
pub type Mutex<T> = lock_api::Mutex<RawMutex, T>;
/// The guard of [`Mutex`].
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::mutex::{Mutex, MutexGuard};
///
/// // Takes the guard: the caller must hold the lock (lockdep_assert_held).
/// fn flush(queue: &mut MutexGuard<'_, Vec<u32>>) -> usize {
///     queue.drain(..).count()
/// }
/// let queue = Mutex::new(vec![1, 2, 3]);
/// assert_eq!(flush(&mut queue.lock()), 3);
/// # }
/// ```
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMutex, T>;

impl RawMutex {
    crate::sync::const_fn! {
        /// A new, unlocked mutex, in the [lockdep](crate::lockdep) class
        /// of the place it is built.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::mutex::{Mutex, RawMutex};
        ///
        /// struct Device {
        ///     cfg: Mutex<u32>,
        /// }
        /// // Every device's lock is built on this line: one lockdep class for all.
        /// fn probe() -> Device {
        ///     Device { cfg: Mutex::from_raw(RawMutex::new(), 0) }
        /// }
        /// let (eth0, eth1) = (probe(), probe());
        /// *eth0.cfg.lock() = 1500;
        /// assert_eq!(*eth1.cfg.lock(), 0);
        /// # }
        /// ```
        #[must_use]
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new() -> Self {
            Self::with_map(Map::new())
        }
    }

    crate::sync::const_fn! {
        /// A new, unlocked mutex in `key`'s [lockdep](crate::lockdep)
        /// class (Linux's `lockdep_set_class`); exactly `new` without
        /// `lockdep`.
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::mutex::{Mutex, RawMutex};
        ///
        /// static DEVICES: Mutex<Vec<&str>> =
        ///     Mutex::from_raw(RawMutex::with_class(ksync::lock_class!("devices")), Vec::new());
        /// DEVICES.lock().push("eth0"); // lockdep reports name the class "devices"
        /// # }
        /// ```
        #[must_use]
        pub fn with_class(key: &'static LockClassKey) -> Self {
            Self::with_map(Map::with_key(key))
        }
    }

    crate::sync::const_fn! {
        fn with_map(dep_map: Map) -> Self {
            RawMutex {
                state: AtomicUsize::new(0),
                owner: AtomicUsize::new(0),
                flight: AtomicBool::new(false),
                queue: WaitQueue::new(),
                dep_map,
                #[cfg(feature = "lockdep")]
                tracked: crate::sync::AtomicBool::new(false),
            }
        }
    }

    /// Records a blocking acquisition with lockdep (before waiting, so a
    /// deadlock is reported first; `try_lock`: after it succeeded).
    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn dep_acquire(&self, try_lock: bool) {
        self.dep_map.acquire_sleeping(0, try_lock);
    }

    /// With lockdep: the new holder's acquisition was recorded, so its
    /// unlock records the release (only the holder writes it).
    #[inline(always)]
    fn mark_tracked(&self) {
        #[cfg(feature = "lockdep")]
        self.tracked
            .store(true, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether anyone holds it (a snapshot).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::mutex::RawMutex;
    ///
    /// let dev_lock = RawMutex::new();
    /// dev_lock.lock();
    /// assert!(dev_lock.is_locked()); // for assertions: "the caller holds it"
    /// // SAFETY: held by this task.
    /// unsafe { dev_lock.unlock() };
    /// assert!(!dev_lock.is_locked());
    /// # }
    /// ```
    #[doc(alias = "mutex_is_locked")]
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// Takes the lock if that needs no waiting (Linux's
    /// `mutex_trylock`); whether it did. Never sleeps.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::mutex::RawMutex;
    ///
    /// let reset_lock = RawMutex::new();
    /// assert!(reset_lock.try_lock());
    /// assert!(!reset_lock.try_lock()); // a reset is already under way: skip it
    /// // SAFETY: taken above, by this task.
    /// unsafe { reset_lock.unlock() };
    /// # }
    /// ```
    #[doc(alias = "mutex_trylock")]
    #[inline]
    #[must_use = "true means the lock is held and must be unlocked"]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_lock(&self) -> bool {
        let locked = self.try_lock_untracked();
        if locked {
            self.dep_acquire(true);
            self.mark_tracked();
        }
        locked
    }

    /// `try_lock` without telling lockdep.
    #[inline]
    fn try_lock_untracked(&self) -> bool {
        self.try_lock_from(self.state.load(Ordering::Relaxed))
    }

    /// [`try_lock_untracked`](Self::try_lock_untracked) from a value of
    /// the word already read.
    #[inline]
    fn try_lock_from(&self, mut state: usize) -> bool {
        loop {
            if state & (LOCKED | HANDOFF) != 0 {
                return false;
            }
            // Acquire: pairs with the Release of the unlock that freed it.
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.owner.store(kernel::current_task(), Ordering::Relaxed);
                    return true;
                }
                Err(now) => state = now,
            }
        }
    }

    /// Takes the lock, spinning while its holder runs and then sleeping
    /// (Linux's `mutex_lock`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::mutex::Mutex;
    ///
    /// static CONFIG: Mutex<[u8; 4]> = Mutex::new([0; 4]);
    ///
    /// let writer = std::thread::spawn(|| CONFIG.lock()[0] = 1);
    /// CONFIG.lock()[1] = 2; // sleeps (or spins) while the other task holds it
    /// writer.join().unwrap();
    /// assert_eq!(*CONFIG.lock(), [1, 2, 0, 0]);
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// checked on every call in debug builds, and in release builds
    /// whenever the lock is not free (the call may then wait).
    #[doc(alias = "mutex_lock")]
    #[inline]
    #[track_caller]
    pub fn lock(&self) {
        wait::might_sleep_entry();
        // Acquire: as in `try_lock`.
        match self
            .state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => {
                self.owner.store(kernel::current_task(), Ordering::Relaxed);
                self.dep_acquire(false);
            }
            Err(state) => self.lock_slow(state),
        }
        self.mark_tracked();
    }

    /// `lock` once the word was not 0 but `state`.
    #[cold]
    #[track_caller]
    fn lock_slow(&self, state: usize) {
        // Free, with waiters queued or a woken one on its way back, and no
        // hand-off pending: taken as a spinner would take it (the waiters
        // have not lost a race they were promised: see the module docs).
        // This will not sleep, so no `might_sleep` in release builds.
        if state & (LOCKED | HANDOFF) == 0 && self.try_lock_from(state) {
            self.dep_acquire(false);
            return;
        }
        wait::might_sleep_slow();
        self.dep_acquire(false);
        if self.spin() {
            return;
        }
        let node = Node::new();
        let queued = Queued {
            queue: &self.queue,
            node: &node,
        };
        let mut locked = self.queue.lock();
        // SAFETY: `node` stays put and `queued` takes it off the queue
        // before it goes away; it is new.
        unsafe { locked.enqueue(&node, true, 0, None, false) };
        let mut woken = false;
        loop {
            if self.acquire_queued(&mut locked, &node, woken) {
                // Taken off the queue above, under the lock: the guard's
                // look at the node would only retake the lock.
                core::mem::forget(queued);
                return;
            }
            drop(locked);
            if woken && self.spin_for_grant(&node) {
                // Handed over while this task still ran (and the waker
                // done with the node: `Node::state`).
                return;
            }
            if self.queue.sleep(&node, None) == GRANTED {
                // The unlock made this task the owner.
                return;
            }
            // Woken (and off the queue): back to the front, try again.
            locked = self.queue.lock();
            // SAFETY: as above; a wake took it off the queue.
            unsafe { locked.enqueue(&node, true, 0, None, true) };
            self.landed();
            woken = true;
        }
    }

    /// Spins while the holder runs and the lock has no hand-off pending;
    /// whether it took the lock. Between two looks at the lock it waits
    /// [`FIRST_STEP`] relax rounds, then twice as long, ... up to
    /// [`BACKOFF_MAX`](kernel::BACKOFF_MAX), [`SPIN_ROUNDS`] rounds in
    /// all, then up to [`YIELDS`] yields with a look after each (see
    /// `spin_while_owner_runs`). A spinner that read the word (and the
    /// owner) on every round kept pulling the cache line away from the
    /// holder, whose lock and unlock then missed on it: with the backoff,
    /// `benches/sleeping.rs` at 4 and 8 threads on 2 cores runs about 1.6x
    /// and 1.9x as many critical sections.
    fn spin(&self) -> bool {
        self.spin_while_owner_runs(|| {
            let state = self.state.load(Ordering::Relaxed);
            if state & HANDOFF != 0 {
                return Some(false);
            }
            (state & LOCKED == 0 && self.try_lock_from(state)).then_some(true)
        })
    }

    /// A woken waiter that lost again and asked for the hand-off is the
    /// first waiter: it watches its node for the grant while the holder
    /// runs (Linux's first waiter spinning in `__mutex_lock`) instead of
    /// going to sleep at once, so a hand-off does not leave the lock owned
    /// by a task that must first be woken and scheduled. Whether it was
    /// granted.
    fn spin_for_grant(&self, node: &Node) -> bool {
        self.spin_while_owner_runs(|| match node.state() {
            GRANTED => Some(true),
            // Woken without the lock (only a hand-off grants here): the
            // caller's sleep sees it and retries.
            wait::WOKEN => Some(false),
            _ => None,
        })
    }

    /// The spinning of [`spin`](Self::spin) and
    /// [`spin_for_grant`](Self::spin_for_grant): up to [`SPIN_ROUNDS`]
    /// rounds with backoff, then up to [`YIELDS`] calls of the kernel's
    /// `yield_now`, asking `look` before each (`Some`: the answer) and
    /// giving up once the holder is off its CPU. Nothing here waits for a
    /// wake: a grant or unlock that comes while this task yields is seen
    /// by the next look, or by the sleep that follows (a wake before the
    /// block makes it return at once).
    fn spin_while_owner_runs(&self, mut look: impl FnMut() -> Option<bool>) -> bool {
        let (mut rounds, mut step, mut yields) = (0, FIRST_STEP.min(kernel::BACKOFF_MAX), 0);
        loop {
            if let Some(done) = look() {
                return done;
            }
            let owner = self.owner.load(Ordering::Relaxed);
            if owner == ASYNC_HOLDER || (owner != 0 && !kernel::task_running(owner)) {
                return false;
            }
            if rounds < SPIN_ROUNDS {
                for _ in 0..step {
                    crate::sync::spin_loop();
                }
                rounds += step;
                step = (step * 2).min(kernel::BACKOFF_MAX);
            } else if yields < YIELDS {
                kernel::yield_now();
                yields += 1;
            } else {
                return false;
            }
        }
    }

    /// The woken waiter is back in the queue (or gone), under the queue
    /// lock: the next unlock may wake again.
    fn landed(&self) {
        // Relaxed: under the queue lock, as every access but `Debug`'s.
        self.flight.store(false, Ordering::Relaxed);
    }

    /// Under the queue lock: wakes the first waiter without the lock (the
    /// lock is free), unless a woken waiter is still on its way back.
    fn wake_first(&self, locked: &mut Locked<'_>) {
        // Relaxed: under the queue lock, as every access but `Debug`'s.
        if self.flight.load(Ordering::Relaxed) {
            return;
        }
        if let Some((first, _, _)) = locked.front() {
            let first: *const Node = first;
            self.flight.store(true, Ordering::Relaxed);
            // SAFETY: queued, so valid until `wake` takes it off.
            locked.wake(unsafe { &*first }, wait::WOKEN);
        }
    }

    /// With `node` queued (under `locked`): sets `WAITERS`, takes the lock
    /// if it is free (and no hand-off is pending for another waiter), and
    /// otherwise, for a waiter that was `woken` and lost again, asks for
    /// the hand-off. Whether it took the lock (then off the queue).
    fn acquire_queued(&self, locked: &mut Locked<'_>, node: &Node, woken: bool) -> bool {
        // Under the queue lock, so an unlock that frees the lock after
        // this (its slow path: WAITERS is set) finds this node queued.
        let mut state = self.state.fetch_or(WAITERS, Ordering::Relaxed) | WAITERS;
        loop {
            let first = locked
                .front()
                .is_some_and(|(n, _, _)| core::ptr::eq(n, node));
            if state & LOCKED != 0 || (state & HANDOFF != 0 && !first) {
                if woken && first && state & LOCKED != 0 {
                    // Under the queue lock, while held: its unlock sees it.
                    self.state.fetch_or(HANDOFF, Ordering::Relaxed);
                }
                return false;
            }
            // Acquire: as in `try_lock`.
            match self.state.compare_exchange_weak(
                state,
                (state | LOCKED) & !HANDOFF,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        locked.remove(node);
        if locked.is_empty() {
            self.state.fetch_and(!WAITERS, Ordering::Relaxed);
        }
        self.owner.store(kernel::current_task(), Ordering::Relaxed);
        true
    }

    /// Releases the lock (Linux's `mutex_unlock`): frees it and wakes the
    /// first waiter, or hands it to that waiter if it asked.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::mutex::RawMutex;
    ///
    /// let i2c_bus = RawMutex::new();
    /// i2c_bus.lock();
    /// // ... a transfer on the bus ...
    /// // SAFETY: this task took it above and releases it once.
    /// unsafe { i2c_bus.unlock() };
    /// assert!(!i2c_bus.is_locked());
    /// # }
    /// ```
    ///
    /// # Safety
    /// The lock is held (by the caller's task, as Linux requires; the
    /// lock itself only needs it held).
    #[doc(alias = "mutex_unlock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock(&self) {
        #[cfg(feature = "lockdep")]
        if self
            .tracked
            .swap(false, core::sync::atomic::Ordering::Relaxed)
        {
            self.dep_map.release();
        }
        self.owner.store(0, Ordering::Relaxed);
        // Release: pairs with the next locker's Acquire.
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        let mut locked = self.queue.lock();
        let state = self.state.load(Ordering::Relaxed);
        let first = match locked.front() {
            Some((first, _, _)) if state & HANDOFF != 0 => Some(first as *const Node),
            _ => None,
        };
        if let Some(first) = first {
            // SAFETY: queued, so valid until a wake takes it off.
            let first = unsafe { &*first };
            let token = match locked.task_of(first) {
                0 => ASYNC_HOLDER, // an async waiter
                token => token,
            };
            self.owner.store(token, Ordering::Relaxed);
            locked.remove(first);
            let mut clear = HANDOFF;
            if locked.is_empty() {
                clear |= WAITERS;
            }
            // Still LOCKED: the owner changes, the lock stays held. The
            // critical section's accesses reach the new owner through the
            // Release in `wake` and its Acquire of GRANTED.
            self.state.fetch_and(!clear, Ordering::Relaxed);
            locked.wake(first, GRANTED);
            return;
        }
        // Freed, and `WAITERS` cleared whatever the queue holds: the next
        // unlock has no one to wake until a woken waiter is back. Either
        // the queue is empty, or a woken waiter is on its way back
        // (`flight`), or the first waiter is woken below. That waiter
        // sets `WAITERS` again when it lands (`acquire_queued`, under the
        // queue lock, in one read-modify-write with its look at `LOCKED`),
        // so the unlock after that wakes the next one. Meanwhile lockers
        // and unlocks take the fast paths, and a waiter that queues sets
        // `WAITERS` itself and its holder's unlock comes here.
        // Release: pairs with the next locker's Acquire.
        self.state
            .fetch_and(!(LOCKED | HANDOFF | WAITERS), Ordering::Release);
        self.wake_first(&mut locked);
    }

    /// Takes the lock, as a future: the async form of
    /// [`lock`](Self::lock) on the same lock and queue (no spinning).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::mutex::RawMutex;
    ///
    /// let lock = RawMutex::new();
    /// lock.lock();
    /// let mut cx = Context::from_waker(Waker::noop()); // an executor's waker
    /// let mut locking = pin!(lock.lock_async());
    /// assert!(locking.as_mut().poll(&mut cx).is_pending()); // queued, no spinning
    /// // SAFETY: held by this task.
    /// unsafe { lock.unlock() }; // wakes the future's task
    /// assert!(locking.as_mut().poll(&mut cx).is_ready()); // now it holds it
    /// # unsafe { lock.unlock() };
    /// # }
    /// ```
    pub fn lock_async(&self) -> RawLock<'_> {
        RawLock {
            mutex: self,
            node: Node::new(),
            queued: false,
            woken: false,
            done: false,
        }
    }
}

/// The future of [`RawMutex::lock_async`]: ready once the lock is held.
/// Dropped before that, it leaves the queue (and passes on a wake or a
/// hand-off it got).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::mutex::RawMutex;
///
/// let lock = RawMutex::new();
/// lock.lock();
/// let mut cx = Context::from_waker(Waker::noop());
/// {
///     let mut locking = pin!(lock.lock_async());
///     assert!(locking.as_mut().poll(&mut cx).is_pending());
/// } // dropped: cancelled, off the queue
/// // SAFETY: held by this task.
/// unsafe { lock.unlock() };
/// assert!(!lock.is_locked()); // nobody was handed the lock
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct RawLock<'a> {
    mutex: &'a RawMutex,
    node: Node,
    queued: bool,
    woken: bool,
    done: bool,
}

impl core::fmt::Debug for RawLock<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawLock")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Future for RawLock<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing moves out of the future; `node` stays put until
        // the future drops, which takes it off the queue.
        let this = unsafe { self.get_unchecked_mut() };
        if this.done {
            return Poll::Ready(());
        }
        if !this.queued && this.mutex.try_lock_untracked() {
            this.mutex.owner.store(ASYNC_HOLDER, Ordering::Relaxed);
            this.done = true;
            return Poll::Ready(());
        }
        let mut locked = this.mutex.queue.lock();
        if this.queued {
            match this.node.state() {
                GRANTED => {
                    this.done = true;
                    return Poll::Ready(());
                }
                WAITING => {
                    let old = locked.set_waker(&this.node, cx.waker());
                    // The replaced waker is executor code: dropped after
                    // the queue lock, as every wake is.
                    drop(locked);
                    drop(old);
                    return Poll::Pending;
                }
                _ => {
                    // Woken: back to the front.
                    // SAFETY: pinned in the pinned future; `Drop` takes it
                    // off the queue; a wake took it off.
                    unsafe { locked.enqueue(&this.node, true, 0, Some(cx.waker()), true) };
                    this.mutex.landed();
                    this.woken = true;
                }
            }
        } else {
            // SAFETY: as above; not queued yet.
            unsafe { locked.enqueue(&this.node, true, 0, Some(cx.waker()), false) };
            this.queued = true;
        }
        if this
            .mutex
            .acquire_queued(&mut locked, &this.node, this.woken)
        {
            this.mutex.owner.store(ASYNC_HOLDER, Ordering::Relaxed);
            this.done = true;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for RawLock<'_> {
    fn drop(&mut self) {
        if !self.queued || self.done {
            return;
        }
        let mut locked = self.mutex.queue.lock();
        let was_queued = locked.remove(&self.node);
        if locked.is_empty() {
            self.mutex
                .state
                .fetch_and(!(WAITERS | HANDOFF), Ordering::Relaxed);
        }
        if was_queued {
            return;
        }
        match self.node.state() {
            GRANTED => {
                // Made the owner, and cancelled before it knew: unlock.
                drop(locked);
                // SAFETY: the hand-off made this future's task the holder.
                unsafe { self.mutex.unlock() };
            }
            _ => {
                // Woken and cancelled: the wake goes to the next waiter
                // if the lock is still free; else `WAITERS` makes its
                // holder's unlock wake it (set here as a waiter that
                // lands sets it: the unlocks while this one was woken
                // cleared it).
                self.mutex.landed();
                if locked.is_empty() {
                    return;
                }
                // Under the queue lock, in one step with the look at
                // LOCKED, as in `acquire_queued`.
                let state = self.mutex.state.fetch_or(WAITERS, Ordering::Relaxed);
                if state & LOCKED == 0 {
                    self.mutex.wake_first(&mut locked);
                }
            }
        }
    }
}

/// Takes `mutex`, as a future, and gives its guard: the async form of
/// `mutex.lock()`.
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// # use core::pin::pin;
/// # use core::task::{Context, Waker};
/// use ksync::mutex::{Mutex, lock_async};
///
/// static RX_STATS: Mutex<u64> = Mutex::new(0);
///
/// async fn count_packet() {
///     *lock_async(&RX_STATS).await += 1;
/// }
/// # let mut cx = Context::from_waker(Waker::noop());
/// # assert!(pin!(count_packet()).poll(&mut cx).is_ready());
/// assert_eq!(*RX_STATS.lock(), 1);
/// # }
/// ```
#[cfg(not(ksync_loom))] // lock_api's `RawMutex` is not implemented under loom
pub async fn lock_async<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // SAFETY: `raw` is only used to take the lock, which the guard made
    // below then owns.
    unsafe { mutex.raw() }.lock_async().await;
    // SAFETY: the lock is held, by this task, and the guard releases it.
    unsafe { mutex.make_guard_unchecked() }
}

#[cfg(not(ksync_loom))] // `INIT` is a constant; loom's atomics cannot be one
// SAFETY: `lock` and `try_lock` give exclusion with Acquire, `unlock`
// releases with Release (or hands the lock to one waiter, which then holds
// it); the guard may move to another task (the lock has no per-task
// state that its release depends on).
unsafe impl lock_api::RawMutex for RawMutex {
    // No call site to name a class after: with lockdep, each mutex built
    // from `INIT` (`Mutex::new`) is a class of its own.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::with_map(Map::per_instance());
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    #[track_caller]
    fn lock(&self) {
        RawMutex::lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> bool {
        RawMutex::try_lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded: the guard holds it.
        unsafe { RawMutex::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawMutex::is_locked(self)
    }
}
