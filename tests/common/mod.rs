//! Helpers shared by the threaded host tests.

#![allow(dead_code)]

use std::thread;
use std::time::{Duration, Instant};

use ksync::spinlock::RawTicketLock;

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
            || (self.done >= MIN_OPS && self.done % 8 == 0 && Instant::now() >= self.deadline)
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
    // The gated lock's readers must be on a CPU that RCU watches (debug
    // builds check), this thread included.
    if rcu_cpu {
        ksync::rcu::cpu_online();
    }
    assert_eq!(lock.read().0, writes);
    if rcu_cpu {
        ksync::rcu::cpu_offline();
    }
    writes
}

/// How long to wait for something that must happen before calling it a
/// hang.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// Spins (yielding) until `cond` holds; panics after [`PATIENCE`].
pub(crate) fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        thread::yield_now();
    }
}

/// `(owner, next)` of a ticket lock, read from its `Debug` output (the
/// only place they are visible).
pub(crate) fn tickets(lock: &impl core::fmt::Debug) -> (u32, u32) {
    let text = format!("{lock:?}");
    let field = |name: &str| -> u32 {
        let start = text
            .find(name)
            .unwrap_or_else(|| panic!("{name} in {text}"))
            + name.len();
        let digits: String = text[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("{name} in {text}"))
    };
    (field("owner: "), field("next: "))
}

/// A raw ticket lock held by this thread, unlocked on drop: also when a
/// failed assertion unwinds, so that a test fails instead of leaving its
/// waiters spinning (and `thread::scope` waiting for them) forever.
pub(crate) struct Held<'a>(&'a RawTicketLock);

impl<'a> Held<'a> {
    pub(crate) fn lock(lock: &'a RawTicketLock) -> Self {
        lock.lock();
        Self(lock)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: locked by `Held::lock` on this thread, unlocked only here.
        unsafe { self.0.unlock() }
    }
}
