//! A sense-reversing spin barrier for a known number of CPUs. Waiting CPUs
//! are idle for RCU (`kernel::rcu::idle_wait`).

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
        // Read the generation before arriving: once we are counted, the last
        // arrival may start the next generation at any moment. Acquire pairs
        // with the Release increment below from the previous round.
        let generation = self.generation.load(Ordering::Acquire);
        // AcqRel: the last arrival acquires every earlier arrival's Release
        // (the increments form one release sequence) ...
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.arrived.store(0, Ordering::Relaxed);
            // ... and publishes them, and the reset, to the waiters: pairs
            // with their Acquire loads of `generation`.
            self.generation.fetch_add(1, Ordering::Release);
        } else {
            // A waiting CPU is idle: RCU must not wait for it (see
            // `kernel::rcu`).
            rcu::idle_wait(|| self.generation.load(Ordering::Acquire) != generation);
        }
    }
}
