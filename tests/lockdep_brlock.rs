//! lockdep and two `BrLock` slots held at once (Linux's `lg_double_lock`,
//! used to move something between two CPUs' data): every slot is one lock
//! class, so the second slot looks like a recursion unless the nesting is
//! declared, with a subclass (`cpu_lock_nested`, Linux's
//! `spin_lock_nested`) or by `double_lock`, which takes the two in CPU
//! order. Run with `cargo test --features lockdep --test lockdep_brlock`.
//!
//! As in `tests/lockdep.rs`, reports are recorded instead of panicking and
//! each test begins with `start()`, one at a time.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use ksync::brlock::BrLock;
use ksync::kernel::MAX_CPUS;

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

/// Two CPU ids to nest (the same one on a single-CPU build, where the
/// tests that need two return early).
const LOW: usize = 0;
const HIGH: usize = if MAX_CPUS > 1 { 1 } else { 0 };

#[test]
fn two_slots_without_annotation_look_like_recursion() {
    if LOW == HIGH {
        return;
    }
    let _s = start();
    static B: BrLock<u32> = BrLock::new();
    {
        let _low = B.cpu_lock(LOW);
        let _high = B.cpu_lock(HIGH);
    }
    let report = one_report();
    assert!(report.contains("recursi"), "{report}");
}

#[test]
fn nested_slots_are_not_a_report() {
    if LOW == HIGH {
        return;
    }
    let _s = start();
    static B: BrLock<u32> = BrLock::new();
    {
        let mut low = B.cpu_lock(LOW);
        let mut high = B.cpu_lock_nested(HIGH, 1);
        *low += 1;
        *high += 1;
        assert!(B.is_cpu_locked(LOW) && B.is_cpu_locked(HIGH));
    }
    assert!(!B.is_locked());
    no_report();
    // A third level of the class needs a third subclass.
    {
        let _a = B.cpu_lock(LOW);
        let _b = B.cpu_lock_nested(HIGH, 1);
        if MAX_CPUS > 2 {
            let _c = B.cpu_lock_nested(2, 2);
        }
    }
    no_report();
}

#[test]
fn double_lock_takes_two_slots_in_cpu_order() {
    if LOW == HIGH {
        return;
    }
    let _s = start();
    static B: BrLock<u32> = BrLock::new();
    {
        // Asked in either order, the guards come back as asked.
        let (mut a, mut b) = B.double_lock(HIGH, LOW);
        assert_eq!((a.cpu(), b.cpu()), (HIGH, LOW));
        *a += 10;
        *b += 1;
    }
    no_report();
    let (a, b) = B.double_lock(LOW, HIGH);
    assert_eq!((*a, *b), (1, 10));
    drop((a, b));
    no_report();
    // One slot twice would deadlock: refused.
    let err = std::panic::catch_unwind(|| B.double_lock(LOW, LOW)).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains(&format!("CPU {LOW} twice")), "{msg}");
    assert!(!B.is_locked());
    no_report();
}
