//! Completions (Linux's `struct completion`): one side waits until the
//! other says something is done.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::completion::Completion;
//!
//! static SETUP_DONE: Completion = Completion::new();
//!
//! let cpu1 = std::thread::spawn(|| {
//!     // ... bring this CPU up ...
//!     SETUP_DONE.complete();
//! });
//! SETUP_DONE.wait_for_completion(); // sleeps until `complete`
//! cpu1.join().unwrap();
//! # }
//! ```
//!
//! Each [`complete`](Completion::complete) lets one waiter through (or the
//! next one to wait, if nobody waits yet); [`complete_all`](Completion::complete_all)
//! lets every waiter through, now and later, until
//! [`reinit`](Completion::reinit). A `complete` with waiters queued hands
//! its "done" to the first of them (FIFO), as the semaphore's `up` does: it
//! is a [`Semaphore`](crate::semaphore::Semaphore) that starts at zero.
//! What the completer wrote before `complete` is visible to the waiter
//! after its wait returns (the queue lock orders them).

use core::time::Duration;

use crate::semaphore::{ALL, Take, Units};
use crate::wait;

/// See the [module docs](self).
///
/// ```
/// # #[cfg(feature = "test-hooks")] {
/// use ksync::completion::Completion;
///
/// // One per request: the interrupt handler completes it, the task waits.
/// struct Request {
///     done: Completion,
/// }
/// let req = Request { done: Completion::new() };
/// std::thread::scope(|s| {
///     s.spawn(|| req.done.complete()); // the device's "transfer done" IRQ
///     req.done.wait_for_completion();
/// });
/// # }
/// ```
pub struct Completion {
    units: Units,
}

impl core::fmt::Debug for Completion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Completion")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl Default for Completion {
    fn default() -> Self {
        Self::new()
    }
}

impl Completion {
    crate::sync::const_fn! {
        /// A completion that is not done (Linux's `init_completion`).
        ///
        /// ```
        /// # #[cfg(feature = "test-hooks")] {
        /// use ksync::completion::Completion;
        ///
        /// static FW_LOADED: Completion = Completion::new(); // DECLARE_COMPLETION
        /// assert!(!FW_LOADED.is_done());
        /// # }
        /// ```
        #[doc(alias("init_completion", "DECLARE_COMPLETION"))]
        #[must_use]
        pub fn new() -> Self {
            Completion { units: Units::new(0) }
        }
    }

    /// Lets one waiter through: the first one queued, or the next to wait
    /// (Linux's `complete`). Never sleeps; callable from interrupt
    /// handlers. The "done" count saturates (at `usize::MAX - 1`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// let reset_done = Completion::new();
    /// reset_done.complete(); // before anyone waits: kept for the next waiter
    /// reset_done.wait_for_completion(); // goes through at once
    /// assert!(!reset_done.is_done()); // used up
    /// # }
    /// ```
    pub fn complete(&self) {
        self.units.give(1);
    }

    /// Lets every waiter through, now and until [`reinit`](Self::reinit)
    /// (Linux's `complete_all`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// // "The root filesystem is mounted": every task waiting for it goes on.
    /// static ROOT_MOUNTED: Completion = Completion::new();
    /// ROOT_MOUNTED.complete_all();
    /// ROOT_MOUNTED.wait_for_completion();
    /// ROOT_MOUNTED.wait_for_completion(); // and every later wait too
    /// assert!(ROOT_MOUNTED.is_done());
    /// # }
    /// ```
    pub fn complete_all(&self) {
        self.units.give(ALL);
    }

    /// Sleeps until a `complete` lets this task through (Linux's
    /// `wait_for_completion`).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// static AP_STARTED: Completion = Completion::new();
    ///
    /// let ap = std::thread::spawn(|| AP_STARTED.complete()); // the new CPU's entry
    /// AP_STARTED.wait_for_completion(); // the boot CPU sleeps until then
    /// ap.join().unwrap();
    /// # }
    /// ```
    ///
    /// # Panics
    /// Where sleeping is not allowed ([`might_sleep`](crate::wait::might_sleep)):
    /// on every call in debug builds, when it would have to sleep in
    /// release builds.
    #[track_caller]
    pub fn wait_for_completion(&self) {
        wait::might_sleep_entry();
        self.units.take(None);
    }

    /// [`wait_for_completion`](Self::wait_for_completion) for at most
    /// `timeout` (Linux's `wait_for_completion_timeout`): whether it was
    /// let through. Needs [`Kernel::clock_ns`](crate::kernel::Kernel::clock_ns).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use core::time::Duration;
    /// use ksync::completion::Completion;
    ///
    /// let cmd_done = Completion::new();
    /// // The device never answered: give up (here at once) and reset it.
    /// assert!(!cmd_done.wait_for_completion_timeout(Duration::ZERO));
    /// cmd_done.complete();
    /// assert!(cmd_done.wait_for_completion_timeout(Duration::from_secs(1)));
    /// # }
    /// ```
    #[track_caller]
    #[must_use = "false means the wait timed out"]
    pub fn wait_for_completion_timeout(&self, timeout: Duration) -> bool {
        wait::might_sleep_entry();
        self.units.try_take() || self.units.take(Some(wait::deadline(timeout)))
    }

    /// Goes through if a `complete` is there to be used, without waiting
    /// (Linux's `try_wait_for_completion`): whether it did.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// let dma_done = Completion::new();
    /// assert!(!dma_done.try_wait_for_completion()); // still running: poll later
    /// dma_done.complete();
    /// assert!(dma_done.try_wait_for_completion());
    /// # }
    /// ```
    #[must_use = "true means a `complete` was used up"]
    pub fn try_wait_for_completion(&self) -> bool {
        self.units.try_take()
    }

    /// Waits as a future: the async form of
    /// [`wait_for_completion`](Self::wait_for_completion).
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// # use core::pin::pin;
    /// # use core::task::{Context, Waker};
    /// use ksync::completion::Completion;
    ///
    /// let link_up = Completion::new();
    /// let mut cx = Context::from_waker(Waker::noop()); // an executor's waker
    /// let mut wait = pin!(link_up.wait());
    /// assert!(wait.as_mut().poll(&mut cx).is_pending());
    /// link_up.complete(); // wakes the task that polls `wait`
    /// assert!(wait.as_mut().poll(&mut cx).is_ready());
    /// # }
    /// ```
    pub fn wait(&self) -> Take<'_> {
        self.units.take_async()
    }

    /// Whether a wait would go through now (Linux's `completion_done`): a
    /// snapshot.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// let probe_done = Completion::new();
    /// assert!(!probe_done.is_done());
    /// probe_done.complete();
    /// assert!(probe_done.is_done()); // a wait would not sleep now
    /// # }
    /// ```
    #[doc(alias = "completion_done")]
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.units.count() != 0
    }

    /// Makes it "not done" again, undoing earlier `complete` and
    /// `complete_all` calls (Linux's `reinit_completion`). Call it only
    /// while nobody waits.
    ///
    /// ```
    /// # #[cfg(feature = "test-hooks")] {
    /// use ksync::completion::Completion;
    ///
    /// let reset_done = Completion::new();
    /// reset_done.complete_all(); // the first controller reset finished
    /// assert!(reset_done.is_done());
    /// reset_done.reinit(); // before the next reset is started
    /// assert!(!reset_done.is_done());
    /// # }
    /// ```
    #[doc(alias = "reinit_completion")]
    pub fn reinit(&self) {
        self.units.set(0);
    }
}
