//! Helpers shared by the threaded host tests.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Wall-clock budget of each threaded test. Threads playing CPUs spin in
/// the lockref's ticket lock, and on a loaded 2-core machine a preempted
/// waiter stalls everyone behind it (a convoy: a few hundred acquisitions
/// per second at worst), so the threaded tests stop early rather than run
/// for minutes. They still check everything they did.
pub(crate) const TIME_BUDGET: Duration = Duration::from_millis(1500);

/// Operations each thread does regardless of the budget.
pub(crate) const MIN_OPS: usize = 16;

/// Per-thread iteration budget: `max` iterations, stopping early once the
/// shared deadline has passed (but never before `MIN_OPS`).
pub(crate) struct Budget {
    deadline: Instant,
    max: usize,
    pub(crate) done: usize,
}

impl Budget {
    pub(crate) fn new(start: Instant, max: usize) -> Self {
        Self {
            deadline: start + TIME_BUDGET,
            max,
            done: 0,
        }
    }

    pub(crate) fn next(&mut self) -> bool {
        if self.done >= self.max
            || (self.done >= MIN_OPS
                && self.done.is_multiple_of(8)
                && Instant::now() >= self.deadline)
        {
            return false;
        }
        self.done += 1;
        true
    }
}

/// Mixed readers and writers on `threads` threads (CPUs), thread `t`
/// writing on iterations where `(i + t * 7) % write_every == 0`: a
/// writer-active flag and a reader count must never be seen together, and
/// the protected pair must stay equal. With `rcu_cpu`, each thread is an
/// RCU CPU that reports a quiescent state after every iteration (the gated
/// lock needs them). Returns the number of writes, checked against the
/// final value.
pub(crate) fn check_rwlock_exclusion<R>(
    lock: &ksync::lock_api::RwLock<R, (u64, u64)>,
    threads: usize,
    iters: usize,
    write_every: usize,
    rcu_cpu: bool,
) -> u64
where
    R: ksync::lock_api::RawRwLock + Sync,
{
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};

    let writer_in = AtomicBool::new(false);
    let readers_in = AtomicI32::new(0);
    let writes = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (writer_in, readers_in, writes) = (&writer_in, &readers_in, &writes);
            s.spawn(move || {
                if rcu_cpu {
                    ksync::rcu::cpu_online();
                }
                for i in 0..iters {
                    if (i + t * 7) % write_every == 0 {
                        let mut g = lock.write();
                        assert!(!writer_in.swap(true, SeqCst), "two writers");
                        assert_eq!(readers_in.load(SeqCst), 0, "writer with readers inside");
                        g.0 += 1;
                        g.1 += 1;
                        writes.fetch_add(1, SeqCst);
                        writer_in.store(false, SeqCst);
                    } else {
                        let g = lock.read();
                        readers_in.fetch_add(1, SeqCst);
                        assert!(!writer_in.load(SeqCst), "reader with a writer inside");
                        assert_eq!(g.0, g.1);
                        readers_in.fetch_sub(1, SeqCst);
                    }
                    if rcu_cpu {
                        ksync::rcu::quiescent_state();
                    }
                }
                if rcu_cpu {
                    ksync::rcu::cpu_offline();
                }
            });
        }
    });
    let writes = writes.load(SeqCst);
    assert!(writes > 0, "no writes: the test proved nothing");
    assert_eq!(lock.read().0, writes);
    writes
}
