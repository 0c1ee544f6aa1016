//! Host tests of the ticket lock's strict FIFO mode: the mode for bare
//! metal with one CPU per core, where waiters queue by ticket (`unlock_fair`,
//! `bump`, bounded bypass, the 2^32 ticket wrap, `is_contended`).
//!
//! The host hooks say CPUs are preemptible (threads can be descheduled), so
//! locks hand off by test-and-set by default; every test in this binary
//! switches the process to FIFO first, and none of them oversubscribes the
//! machine. A binary of its own, because the mode is process-wide.

// Under loom the crate is built for the models in `tests/loom.rs` only.
#![cfg(not(ksync_loom))]

mod common;
use common::{Budget, Held, tickets, wait_until};

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Instant;

use ksync::lock_api::MutexGuard;
use ksync::spinlock::{RawTicketLock, TicketLock, TicketMutex};

/// Threads playing CPUs (on a 2-core machine this oversubscribes FIFO
/// mode; every test here bounds its work by time or by a handful of
/// acquisitions, so a convoy makes it slow, never stuck).
const THREADS: usize = 4;

/// Lock acquisitions for the bypass test, within the time budget.
const TOTAL_OPS: usize = if cfg!(debug_assertions) {
    400_000
} else {
    1_000_000
};

/// Strict FIFO for this process (every test here wants it).
fn fifo_mode() {
    ksync::kernel::set_vcpu_preemptible(false);
    assert!(!ksync::kernel::vcpu_preemptible());
}

#[test]
fn ticket_is_contended_while_a_waiter_queues() {
    fifo_mode();
    let lock: RawTicketLock = RawTicketLock::new();
    let got_it = AtomicBool::new(false);
    let held = Held::lock(&lock);
    thread::scope(|s| {
        s.spawn(|| {
            let _held = Held::lock(&lock);
            got_it.store(true, Ordering::Relaxed);
        });
        wait_until("the waiter to queue", || lock.is_contended());
        assert!(lock.is_locked());
        assert!(!lock.try_lock(), "try_lock with a waiter queued");
        assert!(!got_it.load(Ordering::Relaxed));
        drop(held);
    });
    assert!(got_it.load(Ordering::Relaxed));
    assert!(!lock.is_locked());
    assert!(!lock.is_contended());
}

/// The 2^32 ticket wrap, from a lock that starts just below it (no test
/// could take a lock 2^32 times): lock, a queued waiter, `is_contended`
/// and `try_lock` across it.
#[test]
fn ticket_wraparound() {
    fifo_mode();
    let lock: TicketLock = TicketLock::at_ticket(u32::MAX - 1);
    assert_eq!(tickets(&lock), (u32::MAX - 1, u32::MAX - 1));
    lock.lock();
    // SAFETY: taken on the line above.
    unsafe { lock.unlock() };
    assert_eq!(tickets(&lock), (u32::MAX, u32::MAX));
    assert!(!lock.is_locked());

    // Holding ticket u32::MAX: next has wrapped to 0.
    lock.lock();
    assert_eq!(tickets(&lock), (u32::MAX, 0));
    assert!(lock.is_locked());
    assert!(!lock.is_contended());
    assert!(!lock.try_lock());
    thread::scope(|s| {
        s.spawn(|| {
            lock.lock();
            // SAFETY: taken on the line above.
            unsafe { lock.unlock() };
        });
        wait_until("the waiter to queue", || lock.is_contended());
        assert_eq!(tickets(&lock), (u32::MAX, 1));
        // SAFETY: taken before the scope.
        unsafe { lock.unlock() };
    });
    assert_eq!(tickets(&lock), (1, 1));
    assert!(!lock.is_locked());

    // try_lock across the wrap too.
    let lock: TicketLock = TicketLock::at_ticket(u32::MAX - 2);
    for _ in 0..6 {
        assert!(lock.try_lock());
        assert!(lock.is_locked());
        // SAFETY: taken by the successful try_lock above.
        unsafe { lock.unlock() };
    }
    assert_eq!(tickets(&lock), (3, 3));
}

/// Waiters are served in the order they took their tickets.
#[test]
fn ticket_hands_over_in_fifo_order() {
    fifo_mode();
    const WAITERS: u32 = 5;
    let lock: RawTicketLock = RawTicketLock::new();
    let order = Mutex::new(Vec::new());
    let held = Held::lock(&lock);
    thread::scope(|s| {
        for i in 0..WAITERS {
            let (lock, order) = (&lock, &order);
            s.spawn(move || {
                let _held = Held::lock(lock);
                order.lock().unwrap().push(i);
            });
            // Spawn the next one only once this one holds its ticket.
            wait_until("the waiter's ticket", || tickets(lock).1 == i + 2);
        }
        drop(held);
    });
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

/// Every acquisition records how many other acquisitions happened between
/// its call to `lock` and its entry: with a FIFO lock and `THREADS` threads,
/// at most `THREADS - 1` (each other thread holds at most one earlier
/// ticket). Only a thread preempted between reading the counter and taking
/// its ticket can see more, so nearly all acquisitions must respect the
/// bound. A lock that lets a waiter be overtaken again and again (TTAS)
/// does not.
#[test]
fn ticket_bypass_is_bounded() {
    fifo_mode();
    let lock: RawTicketLock = RawTicketLock::new();
    let acquisitions = AtomicUsize::new(0);
    let over = AtomicUsize::new(0);
    let max_bypass = AtomicUsize::new(0);
    let per_thread: Vec<AtomicUsize> = (0..THREADS).map(|_| AtomicUsize::new(0)).collect();
    let t0 = Instant::now();

    // Every thread queues behind this one before anyone starts, so each
    // is served at least once whatever the scheduler does.
    let held = Held::lock(&lock);
    thread::scope(|s| {
        for mine in &per_thread {
            let (lock, acquisitions, over, max_bypass) = (&lock, &acquisitions, &over, &max_bypass);
            s.spawn(move || {
                let mut budget = Budget::new(t0, TOTAL_OPS / THREADS);
                while budget.next() {
                    let before = acquisitions.load(Ordering::Relaxed);
                    let held = Held::lock(lock);
                    let after = acquisitions.fetch_add(1, Ordering::Relaxed);
                    mine.fetch_add(1, Ordering::Relaxed);
                    drop(held);
                    let bypass = after - before;
                    max_bypass.fetch_max(bypass, Ordering::Relaxed);
                    if bypass > THREADS - 1 {
                        over.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        wait_until("every thread to queue", || {
            let (owner, next) = tickets(&lock);
            next.wrapping_sub(owner) == 1 + THREADS as u32
        });
        drop(held);
    });

    let total = acquisitions.load(Ordering::Relaxed);
    let over = over.load(Ordering::Relaxed);
    let counts: Vec<usize> = per_thread
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    println!(
        "{total} acquisitions in {:?}; per thread {counts:?}; {over} over the bound, max bypass {}",
        t0.elapsed(),
        max_bypass.load(Ordering::Relaxed)
    );
    assert_eq!(counts.iter().sum::<usize>(), total);
    assert!(
        counts.iter().all(|&c| c > 0),
        "a thread starved: {counts:?}"
    );
    // 5%: threads outnumber cores here, and under emulation (qemu-user) on
    // a loaded host a preemption between the counter read and the ticket
    // is common; a lock that lets waiters be overtaken is over the bound
    // on most acquisitions. With lockdep the window is wider (the
    // acquisition is recorded before the ticket is taken): 20% (seen:
    // 8.8% on a host loaded by a benchmark run beside the tests).
    let tolerated = if cfg!(feature = "lockdep") {
        total / 5
    } else {
        total / 20
    };
    assert!(
        over <= tolerated + 2,
        "{over} of {total} acquisitions were overtaken more than {} times",
        THREADS - 1
    );
}

/// `unlock_fair` hands the lock to the queued waiter: right after it, the
/// lock is not free for the taking, even before the waiter runs.
#[test]
fn ticket_unlock_fair_hands_over() {
    fifo_mode();
    let m = TicketMutex::new(0u32);
    // Without waiters it simply unlocks.
    let guard = m.lock();
    MutexGuard::unlock_fair(guard);
    assert!(!m.is_locked());
    assert!(m.try_lock().is_some());

    let checked = AtomicBool::new(false);
    let guard = m.lock();
    thread::scope(|s| {
        s.spawn(|| {
            let mut guard = m.lock();
            *guard += 1;
            wait_until("the holder's check", || checked.load(Ordering::Relaxed));
        });
        // SAFETY: only reads a snapshot of the lock state through the raw
        // lock; nothing is locked or unlocked through it.
        let raw = unsafe { m.raw() };
        wait_until("the waiter to queue", || raw.is_contended());
        MutexGuard::unlock_fair(guard);
        assert!(m.try_lock().is_none(), "unlock_fair let the lock be stolen");
        assert!(m.is_locked());
        checked.store(true, Ordering::Relaxed);
    });
    assert_eq!(*m.lock(), 1);
}

/// `bump` with a waiter queued lets it run before re-taking the lock;
/// without one it keeps the lock.
#[test]
fn ticket_bump_yields_to_a_waiter() {
    fifo_mode();
    let m = TicketMutex::new(0u32);
    let mut guard = m.lock();
    MutexGuard::bump(&mut guard);
    *guard += 1;
    thread::scope(|s| {
        s.spawn(|| assert!(m.try_lock().is_none(), "bump released the lock"))
            .join()
            .unwrap();
    });
    assert_eq!(*guard, 1);

    thread::scope(|s| {
        s.spawn(|| {
            let mut guard = m.lock();
            assert_eq!(*guard, 1);
            *guard = 10;
        });
        // SAFETY: only reads a snapshot of the lock state.
        let raw = unsafe { m.raw() };
        wait_until("the waiter to queue", || raw.is_contended());
        MutexGuard::bump(&mut guard);
        // The waiter ran in between, and we hold the lock again.
        assert_eq!(*guard, 10);
        assert!(m.is_locked());
        *guard += 1;
        drop(guard);
    });
    assert_eq!(*m.lock(), 11);
}
