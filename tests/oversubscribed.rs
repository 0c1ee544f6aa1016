//! Liveness with more threads than cores: every ksync lock, and `LockRef`,
//! with 2x and 4x as many threads as `available_parallelism` reports,
//! mixed operations and exact final counts.
//!
//! Threads playing CPUs are descheduled while they spin, as vCPUs of an
//! oversubscribed guest are. A FIFO lock that hands itself to a waiter that
//! is not running stalls everyone (measured before the preemptible mode:
//! about 60 operations per second at 4 threads on 2 cores). Each test does
//! a fixed amount of work under a generous wall-clock bound: a collapse
//! fails with a message instead of hanging. This is a liveness check, not
//! a speed check. The process runs in the host hooks' default mode (CPUs
//! preemptible).

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use ksync::LockRef;
use ksync::lock_api::{Mutex, RawMutex};
use ksync::spinlock::{
    IrqQueuedMutex, IrqTicketMutex, IrqTtasMutex, QueuedMutex, TicketMutex, TtasMutex,
};

/// The wall-clock bound of one run.
const BOUND: Duration = Duration::from_secs(60);

/// Operations per thread.
const OPS: u64 = if cfg!(debug_assertions) {
    20_000
} else {
    100_000
};

/// 2x and 4x the cores.
fn thread_counts() -> [usize; 2] {
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    [2 * cores, 4 * cores]
}

/// Runs `op(thread, i)` for `i in 0..OPS` on `threads` threads; panics
/// with a message if they have not all finished within [`BOUND`]. Returns
/// the number of operations done.
fn hammer(what: &str, threads: usize, op: impl Fn(usize, u64) + Sync) -> u64 {
    assert!(
        ksync::kernel::vcpu_preemptible(),
        "the host hooks' default mode says CPUs are preemptible"
    );
    let start = Instant::now();
    let gave_up = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    thread::scope(|s| {
        for t in 0..threads {
            let (op, gave_up, done) = (&op, &gave_up, &done);
            s.spawn(move || {
                for i in 0..OPS {
                    if i % 64 == 0 && (gave_up.load(Relaxed) || start.elapsed() > BOUND) {
                        gave_up.store(true, Relaxed);
                        return;
                    }
                    op(t, i);
                    done.fetch_add(1, Relaxed);
                }
            });
        }
    });
    let done = done.load(Relaxed);
    assert!(
        !gave_up.load(Relaxed),
        "{what}, {threads} threads: collapsed, {done} of {} operations in {:?}",
        threads as u64 * OPS,
        start.elapsed()
    );
    done
}

/// Mixed operations on a counter behind a `lock_api` mutex: lock and add
/// one; try_lock until it succeeds and add one; lock, add two and take one
/// away under a second acquisition (`bump` in between when fair).
fn mutex_mixed<R: RawMutex + Sync>(what: &str, make: fn() -> Mutex<R, u64>) {
    for threads in thread_counts() {
        let m = make();
        let done = hammer(what, threads, |t, i| match (i + t as u64) % 3 {
            0 => *m.lock() += 1,
            1 => loop {
                if let Some(mut g) = m.try_lock() {
                    *g += 1;
                    break;
                }
                std::hint::spin_loop();
            },
            _ => {
                *m.lock() += 2;
                *m.lock() -= 1;
            }
        });
        assert_eq!(*m.lock(), done, "{what}, {threads} threads: lost updates");
    }
}

#[test]
fn ticket_mutex() {
    mutex_mixed("TicketMutex", || TicketMutex::new(0));
}

#[test]
fn ttas_mutex() {
    mutex_mixed("TtasMutex", || TtasMutex::new(0));
}

#[test]
fn queued_mutex() {
    mutex_mixed("QueuedMutex", || QueuedMutex::new(0));
}

#[test]
fn irq_ticket_mutex() {
    mutex_mixed("IrqTicketMutex", || IrqTicketMutex::new(0));
}

#[test]
fn irq_ttas_mutex() {
    mutex_mixed("IrqTtasMutex", || IrqTtasMutex::new(0));
}

#[test]
fn irq_queued_mutex() {
    mutex_mixed("IrqQueuedMutex", || IrqQueuedMutex::new(0));
}

/// Drops one reference the caller holds (and knows is not the last):
/// lockless, or under the lock when `put_return` gives up.
fn put(lr: &LockRef) {
    if lr.put_return().is_none() {
        let mut g = lr.lock();
        let count = g.count();
        assert!(count > 1, "a held reference was not counted: {count}");
        g.set_count(count - 1);
    }
}

/// The mixed `LockRef` workload of issue 10: each operation takes a
/// reference and drops it one of four ways; a base reference keeps the
/// count above zero throughout, so it ends at exactly 1.
fn lockref_mixed(threads: usize) {
    let lr = LockRef::new(1);
    hammer("LockRef", threads, |t, i| {
        lr.get();
        match (i + t as u64) % 4 {
            0 => put(&lr),
            1 => {
                if let Some(g) = lr.put_or_lock() {
                    panic!("put_or_lock locked at count {}", g.count());
                }
            }
            2 => {
                let mut g = lr.lock();
                let count = g.count();
                assert!(count > 1, "count {count} with a reference held");
                g.set_count(count - 1);
            }
            _ => {
                assert!(lr.get_not_zero(), "count was zero with references held");
                put(&lr);
                put(&lr);
            }
        }
    });
    assert_eq!(lr.count(), 1, "LockRef, {threads} threads: lost updates");
}

#[test]
fn lockref_2x() {
    lockref_mixed(thread_counts()[0]);
}

#[test]
fn lockref_4x() {
    lockref_mixed(thread_counts()[1]);
}
