//! lockdep and `SeqLock` readers (Linux's `seqcount_lockdep_reader_access`):
//! a reader that spins (`read`, `read_with`, `read_begin`) in an interrupt
//! handler, and a writer that publishes with interrupts enabled elsewhere,
//! is the hang the seqlock docs warn about (the handler interrupts the
//! publication on its own CPU and spins on the odd sequence for ever):
//! reported as an interrupt inversion of the writers' lock's class,
//! whichever use comes first. The readers that never spin (`try_read`,
//! `read_at`), `write_irqsave`, and a reader inside its own CPU's write
//! section (ksync's sequence is odd only while the guard publishes) are
//! not reports. Run with `cargo test --features lockdep --test lockdep_seqlock`.
//!
//! As in `tests/lockdep.rs`, reports are recorded instead of panicking and
//! each test begins with `start()`, one at a time.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use ksync::host::{enter_interrupt, exit_interrupt};
use ksync::lockdep::LockClassKey;
use ksync::seqlock::SeqLock;
use ksync::spinlock::TicketMutex;

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

/// `file:line:` of the line before this macro's.
macro_rules! taken_above {
    () => {
        format!("{}:{}:", file!(), line!() - 1)
    };
}

/// A way to read a seqlock.
type Reader = fn(&SeqLock<u64>);

/// Each spinning reader form, by name.
const SPINNING: [(&str, Reader); 3] = [
    ("read", |l| {
        l.read();
    }),
    ("read_with", |l| {
        l.read_with(|v| *v);
    }),
    ("read_begin", |l| {
        let start = l.read_begin();
        l.read_retry(start);
    }),
];

/// A seqlock whose writers' lock is a class of its own, named `name`.
fn fresh(name: &'static str) -> SeqLock<u64> {
    let mut lock = SeqLock::new(0);
    lock.set_lock_class(Box::leak(Box::new(LockClassKey::new(name))));
    lock
}

fn check_inversion(report: &str, form: &str) {
    println!("{report}");
    assert!(
        report.contains("is taken in an interrupt handler and with interrupts enabled"),
        "{form}: {report}"
    );
}

#[test]
fn reader_in_a_handler_then_writer_with_interrupts_on() {
    let _s = start();
    for (form, read) in SPINNING {
        let lock = fresh(form);
        enter_interrupt();
        read(&lock);
        exit_interrupt();
        no_report();
        *lock.write() += 1;
        let irqs_on = taken_above!();
        let report = one_report();
        check_inversion(&report, form);
        assert!(report.contains(&irqs_on), "{form}: {report}");
    }
}

#[test]
fn writer_with_interrupts_on_then_reader_in_a_handler() {
    let _s = start();
    for (form, read) in SPINNING {
        let lock = fresh(form);
        lock.store(1);
        let irqs_on = taken_above!();
        no_report();
        enter_interrupt();
        read(&lock);
        exit_interrupt();
        let report = one_report();
        check_inversion(&report, form);
        assert!(report.contains(&irqs_on), "{form}: {report}");
    }
}

/// The documented ways out are not reports: a handler that never spins,
/// or writers that mask interrupts.
#[test]
fn try_read_in_a_handler_or_irqsave_writers_are_fine() {
    let _s = start();
    let lock = SeqLock::new(0u64);
    enter_interrupt();
    assert_eq!(lock.try_read(), Some(0));
    assert_eq!(lock.read_at(0), Some(0)); // the sequence of a new lock
    exit_interrupt();
    *lock.write() += 1;
    no_report();

    let lock = SeqLock::new(0u64);
    enter_interrupt();
    lock.read();
    exit_interrupt();
    *lock.write_irqsave() += 1;
    no_report();
}

/// ksync's sequence is odd only while a guard publishes, so reading in
/// one's own write section (or under a lock that the write section also
/// takes) waits for nothing: not a recursion, not a cycle.
#[test]
fn readers_add_no_recursion_or_order() {
    let _s = start();
    let lock = SeqLock::new(0u64);
    let other = TicketMutex::new(0u32);
    {
        let mut w = lock.write();
        *w = lock.read() + 1;
        *other.lock() += 1; // lock -> other
    }
    {
        let _o = other.lock();
        lock.read(); // other -> lock would close a cycle for a lock
    }
    no_report();
}
