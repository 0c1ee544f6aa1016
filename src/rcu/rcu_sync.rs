//! `rcu_sync`: a gate that tells readers whether a writer is around, at
//! the cost of one grace period for the first writer and none for writers
//! that arrive while it is entered.
//!
//! Readers check [`RcuSync::is_idle`] (one load); while it is idle they may
//! skip their synchronization with writers entirely, as the gated
//! [`PerCpuRwLock`](crate::percpu_rwlock) readers do. A writer calls
//! [`enter`](RcuSync::enter), which closes the gate and waits one grace
//! period, so that every reader that saw the gate idle has finished; then
//! every new reader takes its slow path. [`exit`](RcuSync::exit) reopens
//! the gate only after a further grace period (so that a reader taking the
//! fast path again starts after the writer's critical section is visible
//! everywhere), and does not wait for it.
//!
//! # States
//!
//! | state | meaning | next |
//! |---|---|---|
//! | `IDLE` | no writer: readers take the fast path | `enter` → `ENTER` |
//! | `ENTER` | the first writer waits for its grace period; later writers wait for it | grace period → `PASSED` |
//! | `PASSED` | writers hold the gate; readers take the slow path | last `exit` → `EXIT` |
//! | `EXIT` | the last writer left; a grace period must pass before `IDLE` | grace period → `IDLE`; `enter` → `PASSED` at once |
//! | `REPLAY` | (Linux: a writer came and went during `EXIT`) | not needed here, see below |
//!
//! Linux runs the `EXIT` → `IDLE` step from an RCU callback and needs
//! `REPLAY` when a writer comes and goes while that callback is queued.
//! Here `exit` takes a polled grace-period [`Cookie`] instead, and the step
//! happens lazily, when anyone calls [`is_idle`](RcuSync::is_idle) or
//! [`poll_idle`](RcuSync::poll_idle) (the gated lock's readers and its
//! writers do) after the cookie
//! completes: a later `exit` simply takes a fresher cookie, which is what
//! `REPLAY` achieves. A writer arriving in `EXIT` needs no grace period at
//! all: the gate has not been idle since the previous writer's. (A queued
//! callback would also pin the gate in memory while it waits, and a Rust
//! value, such as a lock that embeds the gate, may be moved.)

use core::fmt;

use super::{Cookie, poll, start_poll, synchronize};
use crate::spinlock::{RawTicketLock, lock_irqsave};
use crate::sync::{AtomicU32, AtomicUsize, Ordering, spin_loop};

const IDLE: u32 = 0;
const ENTER: u32 = 1;
const PASSED: u32 = 2;
const EXIT: u32 = 3;

/// A reader/writer gate backed by RCU grace periods (Linux's
/// `struct rcu_sync`).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicU32, Ordering};
/// use ksync::rcu::{self, RcuSync};
///
/// static GATE: RcuSync = RcuSync::new();
/// static SLOW_PATHS: AtomicU32 = AtomicU32::new(0);
///
/// fn reader() {
///     let _rcu = rcu::read_lock();
///     if !GATE.is_idle() {
///         // A writer is around: take the lock (here, just count).
///         SLOW_PATHS.fetch_add(1, Ordering::Relaxed);
///     } // else the fast path: nothing shared written
/// }
/// reader();
/// GATE.enter(); // waits for the readers that saw the gate idle
/// reader();
/// # GATE.exit();
/// assert_eq!(SLOW_PATHS.load(Ordering::Relaxed), 1);
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): idle, no writer.
#[doc(alias = "rcu_sync")]
pub struct RcuSync {
    state: AtomicU32,
    /// Writers inside (between `enter` and `exit`). Under `lock`.
    writers: AtomicU32,
    /// In `EXIT`: the grace period after which the gate may be idle.
    exit_cookie: AtomicUsize,
    lock: RawTicketLock,
}

impl RcuSync {
    crate::sync::const_fn! {
        /// An idle gate.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::RcuSync;
        ///
        /// struct FreezeLock {
        ///     gate: RcuSync, // const: fine in a static
        /// }
        /// static SB_FREEZE: FreezeLock = FreezeLock { gate: RcuSync::new() };
        /// assert!(SB_FREEZE.gate.is_idle());
        /// ```
        #[doc(alias = "rcu_sync_init")]
        pub fn new() -> Self {
            Self {
                state: AtomicU32::new(IDLE),
                writers: AtomicU32::new(0),
                exit_cookie: AtomicUsize::new(0),
                lock: RawTicketLock::new(),
            }
        }
    }

    /// Whether no writer is around, so a reader may take its fast path.
    /// Call it inside an RCU read section (for QSBR: between two quiescent
    /// states), which the fast path must also be inside.
    ///
    /// One load while the gate is idle or closed. After the last writer
    /// left, it also completes the reopening once its grace period has
    /// passed (as [`poll_idle`](Self::poll_idle)), so the gate is idle
    /// again for anyone who asks after that grace period:
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// ksync::rcu::cpu_online();
    /// let gate = ksync::rcu::RcuSync::new();
    /// gate.enter();
    /// assert!(!gate.is_idle());
    /// gate.exit();
    /// ksync::rcu::synchronize();
    /// assert!(gate.is_idle());
    /// ```
    #[doc(alias = "rcu_sync_is_idle")]
    #[inline]
    pub fn is_idle(&self) -> bool {
        // Relaxed: the grace period in `enter` orders readers that saw
        // IDLE before the writer; readers that see anything else take a
        // slow path with its own barriers, and `poll_idle` issues W1
        // before it reports the gate idle.
        let state = self.state.load(Ordering::Relaxed);
        // One compare and a not-taken branch on the readers' path; the
        // other states are out of line.
        state == IDLE || self.not_idle(state)
    }

    /// [`is_idle`](Self::is_idle) for a gate that was not idle when it
    /// looked: completes a pending reopening.
    #[cold]
    #[inline(never)]
    fn not_idle(&self, state: u32) -> bool {
        state == EXIT && self.poll_idle()
    }

    /// Closes the gate: returns once every reader that saw it idle has
    /// finished. The first writer waits one grace period; writers arriving
    /// while it is closed wait for that one or none.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuSync};
    ///
    /// rcu::cpu_online();
    /// let gate = RcuSync::new();
    /// gate.enter(); // one grace period: the fast-path readers are done
    /// assert!(!gate.is_idle()); // new readers take their slow path
    /// gate.enter(); // a second writer: no grace period
    /// gate.exit();
    /// gate.exit();
    /// # rcu::cpu_offline();
    /// ```
    ///
    /// Must not be called inside an RCU read section or a `call_rcu`
    /// callback (it may wait for a grace period).
    ///
    /// # Panics
    /// Inside a read section (every build) or a callback (debug builds),
    /// whether or not this call would have waited.
    #[doc(alias = "rcu_sync_enter")]
    #[track_caller]
    pub fn enter(&self) {
        super::check_may_wait("RcuSync::enter()");
        let was = {
            let _locked = lock_irqsave(&self.lock);
            // Acquire pairs with the Release store of PASSED after the first
            // writer's grace period (made outside the lock). The other
            // accesses to `state`, `writers` and `exit_cookie` here and in
            // `exit`/`poll_idle` are Relaxed: they happen under `lock`.
            let was = self.state.load(Ordering::Acquire);
            match was {
                IDLE => self.state.store(ENTER, Ordering::Relaxed),
                // Never idle since the last writer's grace period.
                EXIT => self.state.store(PASSED, Ordering::Relaxed),
                _ => {}
            }
            self.writers.fetch_add(1, Ordering::Relaxed);
            was
        };
        match was {
            IDLE => {
                synchronize();
                // Release: pairs with the Acquire below in writers that
                // waited for this grace period.
                self.state.store(PASSED, Ordering::Release);
            }
            ENTER => {
                // The first writer waits for a grace period, which needs
                // this CPU's quiescent state too: report it while waiting
                // (as `synchronize` does), or the two wait for each other.
                while self.state.load(Ordering::Acquire) == ENTER {
                    super::waiting_quiescent_state("RcuSync::enter()");
                    spin_loop();
                }
            }
            _ => {}
        }
    }

    /// [`enter`](Self::enter) if it needs no grace period, else nothing:
    /// returns whether the caller entered (and owes an
    /// [`exit`](Self::exit)). It needs none while the gate is closed
    /// (another writer is in) or still closed from a writer that left less
    /// than a grace period ago; closing an open gate (or waiting for the
    /// writer that is closing it) would wait. Never waits, so it may be
    /// called anywhere, a read section included.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// ksync::rcu::cpu_online();
    /// let gate = ksync::rcu::RcuSync::new();
    /// assert!(!gate.try_enter(), "closing an open gate takes a grace period");
    /// gate.enter();
    /// assert!(gate.try_enter(), "closed: no grace period needed");
    /// gate.exit();
    /// gate.exit();
    /// assert!(gate.try_enter(), "closed from a writer that just left");
    /// gate.exit();
    /// ```
    pub fn try_enter(&self) -> bool {
        let _locked = lock_irqsave(&self.lock);
        // Acquire pairs with the Release store of PASSED in `enter` (made
        // outside the lock); the rest is under the lock, as in `enter`.
        match self.state.load(Ordering::Acquire) {
            PASSED => {}
            // Never idle since the last writer's grace period.
            EXIT => self.state.store(PASSED, Ordering::Relaxed),
            _ => return false,
        }
        self.writers.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Reopens the gate once a grace period has passed (without waiting
    /// for it). Pairs with one [`enter`](Self::enter) (or a successful
    /// [`try_enter`](Self::try_enter)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuSync};
    ///
    /// rcu::cpu_online();
    /// let gate = RcuSync::new();
    /// gate.enter();
    /// gate.exit(); // returns at once
    /// assert!(!gate.is_idle()); // still closed: the grace period runs
    /// rcu::synchronize();
    /// assert!(gate.is_idle());
    /// # rcu::cpu_offline();
    /// ```
    ///
    /// An `exit` without an `enter` is caught: it panics, in every build,
    /// before it changes anything. An `exit` for a writer other than the
    /// caller (two exits for one writer while another is inside) cannot
    /// be told apart from a correct one; it opens the gate early, which is
    /// a logic error of the gate's owner. Readers that trust the gate with
    /// memory safety are the owner's code: the gated
    /// [`PerCpuRwLock`](crate::percpu_rwlock)'s gate is private, and it
    /// pairs its own calls.
    ///
    /// # Panics
    /// If no writer is inside (more exits than enters).
    #[doc(alias = "rcu_sync_exit")]
    #[track_caller]
    pub fn exit(&self) {
        let locked = lock_irqsave(&self.lock);
        let inside = self.writers.load(Ordering::Relaxed);
        if inside == 0 {
            drop(locked);
            panic!("rcu_sync: exit without enter");
        }
        let left = inside - 1;
        self.writers.store(left, Ordering::Relaxed);
        if left == 0 {
            self.exit_cookie.store(start_poll().0, Ordering::Relaxed);
            self.state.store(EXIT, Ordering::Relaxed);
        }
        drop(locked);
    }

    /// Completes a pending reopening: if the last writer left and a grace
    /// period has passed since, the gate becomes idle. Cheap when there is
    /// nothing to do. Returns whether the gate is idle.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuSync};
    ///
    /// rcu::cpu_online();
    /// let gate = RcuSync::new();
    /// gate.enter();
    /// gate.exit();
    /// assert!(!gate.poll_idle()); // the reopening's grace period is running
    /// rcu::quiescent_state(); // this CPU's tick
    /// assert!(gate.poll_idle()); // it completed: the gate is open again
    /// # rcu::cpu_offline();
    /// ```
    pub fn poll_idle(&self) -> bool {
        // Relaxed: a filter, re-checked under the lock; `poll` orders the
        // writer's section before a reader that then sees IDLE (W1).
        match self.state.load(Ordering::Relaxed) {
            IDLE => true,
            EXIT if poll(Cookie(self.exit_cookie.load(Ordering::Relaxed))) => {
                let _locked = lock_irqsave(&self.lock);
                let idle = self.state.load(Ordering::Relaxed) == EXIT
                    && poll(Cookie(self.exit_cookie.load(Ordering::Relaxed)));
                if idle {
                    self.state.store(IDLE, Ordering::Relaxed);
                }
                idle
            }
            _ => false,
        }
    }
}

impl Default for RcuSync {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RcuSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state.load(Ordering::Relaxed) {
            IDLE => "IDLE",
            ENTER => "ENTER",
            PASSED => "PASSED",
            _ => "EXIT",
        };
        f.debug_struct("RcuSync")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
