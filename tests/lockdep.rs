//! lockdep's reports, one deliberate bug each, and none for correct
//! programs. Run with `cargo test --features test-hooks,alloc,lockdep --test lockdep`.
//!
//! Reports are recorded (`ksync::host::record_lockdep_reports`) instead of
//! panicking, so each test reads what was reported; each test begins
//! with `start()` (tests/common/lockdep_reports.rs), one at a time.

#![cfg(feature = "lockdep")]

use std::sync::mpsc;
use std::thread;

use ksync::brlock::BrLock;
use ksync::host::{enter_interrupt, exit_interrupt};
use ksync::lockdep::{self, Map};
use ksync::seqlock::SeqLock;
use ksync::{LockRef, lock_class};

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

/// `file:line:` of the line before this macro's: where a lock was just
/// taken.
macro_rules! taken_above {
    () => {
        format!("{}:{}:", file!(), line!() - 1)
    };
}

/// `file:line` of the first line of this file containing `needle`.
fn line_of(needle: &str) -> String {
    let line = include_str!("lockdep.rs")
        .lines()
        .position(|l| l.contains(needle))
        .expect("needle in this file");
    format!("{}:{}:", file!(), line + 1)
}

static A: LockRef = LockRef::new(0);
static B: LockRef = LockRef::new(0);

#[test]
fn cycle_of_two_is_reported_without_a_deadlock() {
    let _s = start();
    let (a_class, b_class) = (line_of("static A:"), line_of("static B:"));
    // CPU 0: A then B, both released before CPU 1 starts: nothing can
    // deadlock. CPU 0 stays online (parked) meanwhile, so CPU 1 is another
    // CPU, not CPU 0's id handed to a new thread.
    let (done_tx, done_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let cpu0 = thread::spawn(move || {
        {
            let _a = A.lock();
            let _b = B.lock();
        }
        done_tx.send(ksync::kernel::cpu_id()).unwrap();
        exit_rx.recv().unwrap();
    });
    let first_cpu = done_rx.recv().unwrap();
    no_report();
    // Later, CPU 1: B then A.
    let (taken_b, taken_a, second_cpu) = thread::spawn(|| {
        let _b = B.lock();
        let b_at = taken_above!();
        let _a = A.lock();
        (b_at, taken_above!(), ksync::kernel::cpu_id())
    })
    .join()
    .unwrap();
    exit_tx.send(()).unwrap();
    cpu0.join().unwrap();
    assert_ne!(first_cpu, second_cpu);
    let report = one_report();
    println!("{report}");
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(
        report.contains(&a_class) && report.contains(&b_class),
        "{report}"
    );
    assert!(
        report.contains(&taken_b) && report.contains(&taken_a),
        "{report}"
    );
    // Reported once: the order is now known.
    thread::spawn(|| {
        let _b = B.lock();
        let _a = A.lock();
    })
    .join()
    .unwrap();
    no_report();
}

#[test]
fn longer_cycle_is_reported() {
    let _s = start();
    static X: SeqLock<u32> = SeqLock::new(0);
    static Y: SeqLock<u32> = SeqLock::new(0);
    static Z: SeqLock<u32> = SeqLock::new(0);
    thread::spawn(|| {
        let _x = X.write();
        let _y = Y.write();
    })
    .join()
    .unwrap();
    thread::spawn(|| {
        let _y = Y.write();
        let _z = Z.write();
    })
    .join()
    .unwrap();
    no_report();
    thread::spawn(|| {
        let _z = Z.write();
        X.store(1);
    })
    .join()
    .unwrap();
    let report = one_report();
    println!("{report}");
    assert!(report.contains("circular"), "{report}");
    assert!(report.contains("#2"), "three edges: {report}");
}

#[test]
fn one_order_everywhere_is_fine() {
    let _s = start();
    static P: LockRef = LockRef::new(0);
    static Q: SeqLock<u64> = SeqLock::new(0);
    static R: BrLock<u32> = BrLock::new();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(|| {
                for _ in 0..200 {
                    let _p = P.lock();
                    let mut q = Q.write();
                    *q += 1;
                    *R.local_lock() += 1;
                    drop(q);
                    *R.global_lock().cpu_mut(0) += 1;
                }
                assert_eq!(lockdep::held_lock_count(), 0);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    no_report();
}

#[test]
fn interrupt_inversion_is_reported() {
    let _s = start();
    static TICKS: SeqLock<u64> = SeqLock::new(0);
    // In a "handler".
    enter_interrupt();
    *TICKS.write() += 1;
    let in_irq = taken_above!();
    exit_interrupt();
    no_report();
    // Elsewhere with interrupts enabled.
    *TICKS.write() += 1;
    let irqs_on = taken_above!();
    let report = one_report();
    println!("{report}");
    assert!(report.contains("interrupt handler"), "{report}");
    assert!(
        report.contains(&in_irq) && report.contains(&irqs_on),
        "{report}"
    );
}

#[test]
fn interrupt_inversion_the_other_way() {
    let _s = start();
    static COUNTER: LockRef = LockRef::new(1);
    drop(COUNTER.lock());
    no_report();
    enter_interrupt();
    drop(COUNTER.lock());
    exit_interrupt();
    let report = one_report();
    assert!(report.contains("with interrupts enabled"), "{report}");
}

#[test]
fn irqsave_everywhere_outside_handlers_is_fine() {
    let _s = start();
    static TIMER: SeqLock<u64> = SeqLock::new(0);
    static PER_CPU: BrLock<u64> = BrLock::new();
    enter_interrupt();
    *TIMER.write() += 1;
    *PER_CPU.local_lock() += 1;
    exit_interrupt();
    *TIMER.write_irqsave() += 1;
    *PER_CPU.local_lock_irqsave() += 1;
    {
        // A plain lock taken with interrupts masked by hand, either way.
        let _irq = ksync::spinlock::IrqState::save();
        *TIMER.write() += 1;
    }
    {
        let _irq = ksync::spinlock::IrqState::<ksync::spinlock::ArchIrq>::save_with();
        *TIMER.write() += 1;
    }
    // Try-locks in handlers never spin: not a use in a handler.
    static POLLED: SeqLock<u8> = SeqLock::new(0);
    enter_interrupt();
    drop(POLLED.try_write());
    exit_interrupt();
    *POLLED.write() += 1;
    no_report();
}

/// Two locks of one class: built by one line.
fn make_lockref() -> LockRef {
    LockRef::new(1)
}

#[test]
fn recursion_on_a_class_is_reported() {
    let _s = start();
    let (parent, child) = (make_lockref(), make_lockref());
    {
        let _p = parent.lock();
        let _c = child.lock();
    }
    let report = one_report();
    println!("{report}");
    assert!(report.contains("recursive locking"), "{report}");
    assert!(report.contains("another lock of the class"), "{report}");
    // With a subclass it is an order, not recursion.
    let _p = parent.lock();
    let _c = child.lock_nested(1);
    no_report();
}

#[test]
fn recursion_on_one_lock_is_reported() {
    let _s = start();
    // The deadlock itself would hang the test: drive the map by hand.
    static MAP: Map = Map::new();
    MAP.acquire(0, false, false);
    MAP.acquire(0, false, false);
    let report = one_report();
    assert!(report.contains("the same lock"), "{report}");
    MAP.release();
    MAP.release();
    no_report();
}

#[test]
fn bad_unlock_is_reported() {
    let _s = start();
    static MAP: Map = Map::new();
    MAP.release();
    let report = one_report();
    assert!(report.contains("does not hold"), "{report}");
    // Taken on one CPU, released on another.
    thread::spawn(|| MAP.acquire(0, false, false))
        .join()
        .unwrap();
    MAP.release();
    assert!(one_report().contains("does not hold"));
}

#[test]
fn held_locks_are_counted_and_asserted() {
    let _s = start();
    static HELD: SeqLock<u8> = SeqLock::new(0);
    lockdep::assert_no_locks_held("test: nothing held");
    no_report();
    let w = HELD.write();
    assert_eq!(lockdep::held_lock_count(), 1);
    lockdep::assert_no_locks_held("rcu::synchronize");
    drop(w);
    let report = one_report();
    println!("{report}");
    assert!(
        report.contains("rcu::synchronize called with locks held"),
        "{report}"
    );
    assert!(report.contains("lockdep.rs"), "{report}");
    assert_eq!(lockdep::held_lock_count(), 0);
}

#[test]
fn explicit_classes_are_named_and_shared() {
    let _s = start();
    fn inode() -> LockRef {
        let mut l = LockRef::new(1);
        l.set_lock_class(lock_class!("inode"));
        l
    }
    let mut journal = SeqLock::new(0u32);
    journal.set_lock_class(lock_class!("journal"));
    let (i1, i2) = (inode(), inode());
    {
        let _i = i1.lock();
        let _j = journal.write();
    }
    {
        let _j = journal.write();
        let _i = i2.lock();
    }
    let report = one_report();
    assert!(
        report.contains("\"inode\"") && report.contains("\"journal\""),
        "{report}"
    );
}

#[test]
fn per_instance_classes_are_freed_with_their_lock() {
    let _s = start();
    static OUTER: Map = Map::new();
    for _ in 0..1000 {
        // Each its own class, freed on drop: the table never fills.
        let inner = Map::per_instance();
        OUTER.acquire(0, false, false);
        inner.acquire(0, false, false);
        inner.release();
        OUTER.release();
    }
    // A new instance (maybe at an old one's address) starts clean: the
    // reverse order is no cycle.
    let inner = Map::per_instance();
    inner.acquire(0, false, false);
    OUTER.acquire(0, false, false);
    OUTER.release();
    inner.release();
    no_report();
}

#[test]
fn brlock_local_and_global_are_one_class() {
    let _s = start();
    static FILES: BrLock<u32> = BrLock::new();
    static INODE: LockRef = LockRef::new(1);
    thread::spawn(|| {
        let _l = FILES.local_lock();
        let _i = INODE.lock();
    })
    .join()
    .unwrap();
    thread::spawn(|| {
        let _i = INODE.lock();
        let _g = FILES.global_lock();
    })
    .join()
    .unwrap();
    assert!(one_report().contains("circular"));
}

#[test]
fn handler_locks_do_not_depend_on_the_interrupted_code() {
    let _s = start();
    static TASK: LockRef = LockRef::new(1);
    static DEVICE: SeqLock<u32> = SeqLock::new(0);
    {
        let _t = TASK.lock_nested(0);
        // An interrupt arrives while TASK is held; its handler takes DEVICE.
        enter_interrupt();
        *DEVICE.write() += 1;
        exit_interrupt();
    }
    // DEVICE then TASK elsewhere is no cycle (the handler's DEVICE did not
    // depend on TASK). It is the IRQ-safe -> IRQ-unsafe order, though:
    // DEVICE is taken in a handler, TASK with interrupts enabled, so the
    // interrupt above, arriving while this CPU holds TASK, spins on DEVICE
    // if another CPU holds DEVICE here and waits for TASK.
    {
        let _irq = ksync::spinlock::IrqState::save();
        let _d = DEVICE.write();
        let _t = TASK.lock();
    }
    let report = one_report();
    assert!(report.contains("IRQ-safe -> IRQ-unsafe"), "{report}");
    assert!(!report.contains("circular"), "{report}");
}
