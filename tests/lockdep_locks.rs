//! lockdep on the spinlocks (ticket, TTAS, queued, their `lock_api`
//! mutexes and IRQ-saving forms), the per-CPU rw locks and RCU's waits and
//! read sections: one deliberate bug each is reported (and nothing hangs),
//! correct nesting is not. Run with
//! `cargo test --features test-hooks,alloc,lockdep --test lockdep_locks`.
//!
//! As in `tests/lockdep.rs`, reports are recorded instead of panicking and
//! each test begins with `start()`, one at a time.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use std::thread;

use ksync::host::{enter_interrupt, exit_interrupt};
use ksync::lock_api::RawMutex;
use ksync::lock_class;
use ksync::lockdep;
use ksync::percpu_rwlock::{PerCpuRwLock, RawPerCpuRwLock};
use ksync::rcu::{self, srcu::Srcu};
use ksync::spinlock::{
    IrqTicketMutex, RawQueuedLock, RawTicketLock, RawTtasLock, TicketMutex, TtasMutex,
};

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

/// Runs `f` on a fresh thread (a CPU of its own) and waits for it.
fn on_cpu(f: impl FnOnce() + Send) {
    thread::scope(|s| s.spawn(f).join().unwrap());
}

static TA: TicketMutex<u32> =
    TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("ticket-A")), 0);
static TB: TicketMutex<u32> =
    TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("ticket-B")), 0);

#[test]
fn ticket_mutex_cycle_is_reported_with_both_classes() {
    let _s = start();
    on_cpu(|| {
        let _a = TA.lock();
        *TB.lock() += 1;
    });
    no_report();
    on_cpu(|| {
        let _b = TB.lock();
        *TA.lock() += 1;
    });
    let report = one_report();
    println!("{report}");
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(
        report.contains("\"ticket-A\"") && report.contains("\"ticket-B\""),
        "{report}"
    );
    // Where the edges were taken: this file.
    assert!(report.contains("tests/lockdep_locks.rs:"), "{report}");
}

#[test]
fn raw_locks_are_classes_of_the_line_that_built_them() {
    let _s = start();
    static OUTER: RawTtasLock = RawTtasLock::new();
    static INNER: RawQueuedLock = RawQueuedLock::new();
    let line = |needle: &str| {
        let n = include_str!("lockdep_locks.rs")
            .lines()
            .position(|l| l.contains(needle))
            .unwrap();
        format!("tests/lockdep_locks.rs:{}:", n + 1)
    };
    on_cpu(|| {
        OUTER.lock();
        INNER.lock();
        // SAFETY: both locked just above, on this thread.
        unsafe {
            INNER.unlock();
            OUTER.unlock();
        }
    });
    no_report();
    on_cpu(|| {
        INNER.lock();
        assert!(OUTER.try_lock(), "a try-lock adds no edge");
        // SAFETY: locked just above.
        unsafe { OUTER.unlock() };
        OUTER.lock();
        // SAFETY: both locked above, on this thread.
        unsafe {
            OUTER.unlock();
            INNER.unlock();
        }
    });
    let report = one_report();
    assert!(report.contains("circular"), "{report}");
    let (outer, inner) = (line("static OUTER:"), line("static INNER:"));
    assert!(
        report.contains(&outer) && report.contains(&inner),
        "{report}"
    );
}

#[test]
fn two_locks_of_one_class_need_a_subclass() {
    let _s = start();
    // Built by one line: one class.
    let locks: Vec<RawQueuedLock> = (0..2).map(|_| RawQueuedLock::new()).collect();
    on_cpu(|| {
        locks[0].lock();
        locks[1].lock_nested(1);
        // SAFETY: both locked just above.
        unsafe {
            locks[1].unlock();
            locks[0].unlock();
        }
    });
    no_report();
    on_cpu(|| {
        locks[0].lock();
        // Another lock of the held class, no subclass: recursion (it does
        // not hang: it is a different lock).
        locks[1].lock();
        // SAFETY: both locked just above.
        unsafe {
            locks[1].unlock();
            locks[0].unlock();
        }
    });
    let report = one_report();
    assert!(report.contains("recursive locking"), "{report}");
    // The same for the ticket and TTAS locks' `lock_nested`.
    let tickets: Vec<RawTicketLock> = (0..2).map(|_| RawTicketLock::new()).collect();
    let ttas: Vec<RawTtasLock> = (0..2).map(|_| RawTtasLock::new()).collect();
    on_cpu(|| {
        tickets[0].lock();
        tickets[1].lock_nested(1);
        ttas[0].lock();
        ttas[1].lock_nested(1);
        assert_eq!(lockdep::held_lock_count(), 4);
        // SAFETY: all locked just above.
        unsafe {
            ttas[1].unlock();
            ttas[0].unlock();
            tickets[1].unlock();
            tickets[0].unlock();
        }
    });
    no_report();
}

#[test]
fn mutexes_from_init_are_classes_of_their_own() {
    let _s = start();
    // `Mutex::new` goes through `INIT`: each mutex is its own class, so
    // nesting two of them is an order between two classes, not recursion.
    let locks: Vec<TtasMutex<u32>> = (0..3).map(TtasMutex::new).collect();
    on_cpu(|| {
        let _a = locks[0].lock();
        let _b = locks[1].lock();
        let _c = locks[2].lock();
        assert_eq!(lockdep::held_lock_count(), 3);
    });
    no_report();
    on_cpu(|| {
        let _c = locks[2].lock();
        // A try-lock cannot wait: no edge, no report.
        drop(locks[0].try_lock().expect("free"));
        no_report();
        let _a = locks[0].lock();
    });
    let report = one_report();
    assert!(
        report.contains("circular") && report.contains("lock@0x"),
        "{report}"
    );
    // Dropped mutexes free their classes: building and nesting many more
    // than the class table holds reports nothing.
    for _ in 0..lockdep::MAX_CLASSES {
        let (a, b) = (TtasMutex::new(0), <RawTicketLock as RawMutex>::INIT);
        on_cpu(|| {
            let _a = a.lock();
            b.lock();
            // SAFETY: locked just above.
            unsafe { b.unlock() };
        });
    }
    no_report();
}

#[test]
fn guard_unlocked_on_another_cpu_is_a_bad_unlock() {
    let _s = start();
    // A lock that disables nothing: its guard is `Send` (with lockdep as
    // without it); lockdep reports the unlock on the other CPU.
    static M: ksync::spinlock::SpinLock<u32, ksync::spinlock::NoGuard> =
        ksync::spinlock::SpinLock::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            let guard = M.lock();
            s.spawn(move || drop(guard)).join().unwrap();
        });
    });
    let report = one_report();
    assert!(report.contains("does not hold"), "{report}");
}

#[test]
fn interrupt_inversion_and_its_fix() {
    let _s = start();
    static PLAIN: TicketMutex<u64> = TicketMutex::new(0);
    static SAVING: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
    on_cpu(|| {
        enter_interrupt();
        *PLAIN.lock() += 1;
        *SAVING.lock() += 1;
        exit_interrupt();
        // Outside the handler the IRQ-saving mutex masks interrupts: fine.
        *SAVING.lock() += 1;
        drop(SAVING.try_lock());
    });
    no_report();
    on_cpu(|| *PLAIN.lock() += 1);
    let report = one_report();
    assert!(report.contains("interrupt handler"), "{report}");
}

#[test]
fn percpu_rwlock_readers_and_writers_take_part() {
    let _s = start();
    static RW: PerCpuRwLock<u32> = PerCpuRwLock::from_raw(RawPerCpuRwLock::new(), 0);
    static INNER: TicketMutex<u32> =
        TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("under-rw")), 0);
    on_cpu(|| {
        let r = RW.read();
        let mut inner = INNER.lock();
        *inner += *r;
        assert_eq!(lockdep::held_lock_count(), 2);
        drop(inner);
        drop(r);
        let _w = RW.try_write().expect("free");
        assert_eq!(lockdep::held_lock_count(), 1);
    });
    assert_eq!(lockdep::held_lock_count(), 0);
    no_report();
    // A writer under the inner lock: the other order.
    on_cpu(|| {
        let _i = INNER.lock();
        *RW.write() += 1;
    });
    let report = one_report();
    assert!(
        report.contains("circular") && report.contains("under-rw"),
        "{report}"
    );
    // A recursive read can deadlock against a waiting writer: recursion.
    on_cpu(|| {
        let _r = RW.read();
        let _again = RW.read();
    });
    let report = one_report();
    assert!(report.contains("recursive locking"), "{report}");
    // A recursive try-read cannot wait: fine.
    on_cpu(|| {
        let _r = RW.read();
        let _again = RW.try_read().expect("no writer");
    });
    no_report();
}

#[test]
fn rcu_waits_with_a_spinlock_held_are_reported() {
    let _s = start();
    static HELD: TicketMutex<()> = TicketMutex::new(());
    on_cpu(|| {
        rcu::cpu_online();
        let domain = Srcu::new();
        let waits: [(&str, &dyn Fn()); 5] = [
            ("rcu::synchronize", &rcu::synchronize),
            ("rcu::barrier", &rcu::barrier),
            ("rcu::cond_synchronize", &|| {
                rcu::cond_synchronize(rcu::start_poll())
            }),
            ("rcu::quiescent_state", &rcu::quiescent_state),
            ("srcu::synchronize", &|| domain.synchronize()),
        ];
        for (what, wait) in waits {
            wait();
            no_report();
            let guard = HELD.lock();
            wait();
            drop(guard);
            let report = one_report();
            assert!(
                report.contains(what) && report.contains("with locks held"),
                "{what}: {report}"
            );
        }
        rcu::cpu_offline();
    });
}

#[test]
fn rcu_wait_inside_a_read_section_is_reported_once() {
    let _s = start();
    on_cpu(|| {
        rcu::cpu_online();
        let guard = rcu::read_lock();
        assert_eq!(lockdep::held_lock_count(), 1, "a read section is held");
        let nested = rcu::read_lock();
        drop(nested);
        // Locks taken inside a read section, and read sections inside
        // locks, are fine.
        {
            let _l = TA.lock();
            drop(rcu::read_lock());
        }
        no_report();
        // RCU's own check (every build) panics first; lockdep says nothing
        // more.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(rcu::synchronize));
        assert!(result.is_err());
        no_report();
        drop(guard);
        assert_eq!(lockdep::held_lock_count(), 0);
        rcu::synchronize();
        no_report();
        rcu::cpu_offline();
    });
}
