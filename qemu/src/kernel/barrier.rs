//! A sense-reversing spin barrier for a known number of CPUs. Waiting CPUs
//! are idle for RCU (`kernel::rcu::idle_wait`); waiting threads
//! ([`Barrier::wait_threads`], several per CPU) yield instead.

use core::sync::atomic::{AtomicUsize, Ordering};

use super::rcu;

/// All CPUs that call [`wait`](Barrier::wait) with the same `n` leave it only
/// once `n` of them have arrived; it can be reused at once.
pub struct Barrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Barrier {
    /// A barrier nobody waits at.
    pub const fn new() -> Self {
        Self {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Waits until `n` CPUs (this one included) have arrived.
    ///
    /// Everything each CPU did before `wait` happens-before everything every
    /// CPU does after it.
    pub fn wait(&self, n: usize) {
        if let Some(generation) = self.arrive(n) {
            // A waiting CPU is idle: RCU must not wait for it (see
            // `kernel::rcu`).
            rcu::idle_wait(|| self.passed(generation));
        }
    }

    /// [`wait`](Self::wait) for `n` threads rather than CPUs, for several
    /// threads per CPU (scheduler mode): a waiting thread is no idle CPU
    /// (`idle_wait` holds preemption off, and the threads it waits for
    /// may be on its own CPU). Between two looks it reports an RCU
    /// quiescent state (it holds no reference) and gives its CPU to the
    /// next runnable thread or sleeps until the next interrupt
    /// (`sched::relax`). Preemption must be on. The same ordering as
    /// `wait`.
    pub fn wait_threads(&self, n: usize) {
        if let Some(generation) = self.arrive(n) {
            while !self.passed(generation) {
                ksync::rcu::quiescent_state();
                crate::sched::relax();
            }
        }
    }

    /// Counts the caller in; `None` if it was the last of `n` (the
    /// barrier is open), otherwise the generation to wait out.
    fn arrive(&self, n: usize) -> Option<usize> {
        // Read the generation before arriving: once we are counted, the last
        // arrival may start the next generation at any moment. Acquire pairs
        // with the Release increment below from the previous round.
        let generation = self.generation.load(Ordering::Acquire);
        // AcqRel: the last arrival acquires every earlier arrival's Release
        // (the increments form one release sequence) ...
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.arrived.store(0, Ordering::Relaxed);
            // ... and publishes them, and the reset, to the waiters: pairs
            // with their Acquire loads of `generation` in `passed`.
            self.generation.fetch_add(1, Ordering::Release);
            None
        } else {
            Some(generation)
        }
    }

    /// Whether the barrier opened since `generation`.
    fn passed(&self, generation: usize) -> bool {
        // Acquire: see `arrive`.
        self.generation.load(Ordering::Acquire) != generation
    }
}
