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
        #[doc(alias("init_completion", "DECLARE_COMPLETION"))]
        #[must_use]
        pub fn new() -> Self {
            Completion { units: Units::new(0) }
        }
    }

    /// Lets one waiter through: the first one queued, or the next to wait
    /// (Linux's `complete`). Never sleeps; callable from interrupt
    /// handlers. The "done" count saturates (at `usize::MAX - 1`).
    pub fn complete(&self) {
        self.units.give(1);
    }

    /// Lets every waiter through, now and until [`reinit`](Self::reinit)
    /// (Linux's `complete_all`).
    pub fn complete_all(&self) {
        self.units.give(ALL);
    }

    /// Sleeps until a `complete` lets this task through (Linux's
    /// `wait_for_completion`).
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
    #[track_caller]
    #[must_use = "false means the wait timed out"]
    pub fn wait_for_completion_timeout(&self, timeout: Duration) -> bool {
        wait::might_sleep_entry();
        self.units.try_take() || self.units.take(Some(wait::deadline(timeout)))
    }

    /// Goes through if a `complete` is there to be used, without waiting
    /// (Linux's `try_wait_for_completion`): whether it did.
    #[must_use = "true means a `complete` was used up"]
    pub fn try_wait_for_completion(&self) -> bool {
        self.units.try_take()
    }

    /// Waits as a future: the async form of
    /// [`wait_for_completion`](Self::wait_for_completion).
    pub fn wait(&self) -> Take<'_> {
        self.units.take_async()
    }

    /// Whether a wait would go through now (Linux's `completion_done`): a
    /// snapshot.
    #[doc(alias = "completion_done")]
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.units.count() != 0
    }

    /// Makes it "not done" again, undoing earlier `complete` and
    /// `complete_all` calls (Linux's `reinit_completion`). Call it only
    /// while nobody waits.
    #[doc(alias = "reinit_completion")]
    pub fn reinit(&self) {
        self.units.set(0);
    }
}
