//! lockdep and `RwSpinLock` with Linux's rules for queued rwlocks
//! (`read_lock_is_recursive()`): outside interrupt context a read is a
//! non-recursive acquisition (a reader queued behind a waiting writer
//! waits), so reads take part in order cycles and a second read of a lock
//! the CPU already reads is reported; in interrupt context a read never
//! waits for a waiting writer, so a recursive read there is allowed. Run
//! with `cargo test --features test-hooks,lockdep --test lockdep_rwspinlock`.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use std::thread;

use ksync::lock_class;
use ksync::spinlock::{RawRwSpinLock, RwSpinLock};

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

fn on_cpu(f: impl FnOnce() + Send) {
    thread::scope(|s| s.spawn(f).join().unwrap());
}

static A: RwSpinLock<u32> = RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-A")), 0);
static B: RwSpinLock<u32> = RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-B")), 0);
static REC: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-rec")), 0);
static IRQ: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-irq")), 0);

#[test]
fn a_read_write_inversion_across_two_locks_is_reported() {
    let _s = start();
    on_cpu(|| {
        let _a = A.read();
        *B.write() += 1;
    });
    no_report();
    on_cpu(|| {
        let _b = B.write();
        *A.write() += 1;
    });
    let report = one_report();
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(
        report.contains("\"rw-A\"") && report.contains("\"rw-B\""),
        "{report}"
    );
}

#[test]
fn a_second_read_in_process_context_is_recursion() {
    let _s = start();
    on_cpu(|| {
        let _outer = REC.read();
        let _inner = REC.read();
    });
    let report = one_report();
    assert!(report.contains("\"rw-rec\""), "{report}");
}

#[test]
fn a_recursive_read_in_interrupt_context_is_allowed() {
    let _s = start();
    on_cpu(|| {
        let _outer = IRQ.read();
        ksync::host::enter_interrupt();
        {
            let _inner = IRQ.read();
        }
        ksync::host::exit_interrupt();
    });
    no_report();
}

static UP: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-up")), 0);

#[test]
fn a_read_inside_an_upgradeable_read_is_allowed_the_other_order_is_not() {
    let _s = start();
    // No writer gets past an upgradeable holder: its own reads never wait.
    on_cpu(|| {
        let up = UP.upgradeable_read();
        let _r = UP.read();
        drop(up);
    });
    no_report();
    // A read held while taking the upgradeable read can wait behind a
    // writer queued ahead, which waits for that read: reported.
    on_cpu(|| {
        let _r = UP.read();
        let _up = UP.upgradeable_read();
    });
    let report = one_report();
    assert!(report.contains("\"rw-up\""), "{report}");
}

// ---- interrupt usage, read and write apart (Linux's
// LOCK_USED_IN_HARDIRQ_READ / LOCK_ENABLED_HARDIRQ_READ) -----------------

use ksync::host::{enter_interrupt, exit_interrupt};
use ksync::spinlock::IrqState;

/// Exactly one report since the last look: the interrupt inversion of
/// the class named `class`.
fn one_inversion_of(class: &str) {
    let report = one_report();
    assert!(
        report.contains("taken in an interrupt handler and with interrupts enabled")
            && report.contains(&format!("\"{class}\"")),
        "{report}"
    );
}

/// Read-locks `lock` in a "handler".
fn read_in_handler(lock: &RwSpinLock<u32>) {
    enter_interrupt();
    {
        let _r = lock.read();
    }
    exit_interrupt();
}

static W_ON_R_IRQ: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-w-on-r-irq")), 0);
static R_IRQ_W_ON: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-r-irq-w-on")), 0);

/// CPU 0 holds the lock for writing with interrupts enabled; an interrupt
/// on CPU 0 read-locks it and spins while the writer holds it: deadlock.
/// Reported whichever of the two uses comes second.
#[test]
fn a_write_with_interrupts_enabled_and_a_read_in_a_handler_are_an_inversion() {
    let _s = start();
    on_cpu(|| *W_ON_R_IRQ.write() += 1);
    no_report();
    on_cpu(|| read_in_handler(&W_ON_R_IRQ));
    one_inversion_of("rw-w-on-r-irq");
    // The other order.
    on_cpu(|| read_in_handler(&R_IRQ_W_ON));
    no_report();
    on_cpu(|| *R_IRQ_W_ON.write() += 1);
    one_inversion_of("rw-r-irq-w-on");
}

static R_IRQ_R_ON: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-r-irq-r-on")), 0);

/// A read in a handler and a read with interrupts enabled: the handler's
/// read never waits for a reader (nor for a writer that only waits), so
/// this is fine (recursive reads); a write under `irqsave` too.
#[test]
fn a_read_in_a_handler_and_a_read_with_interrupts_enabled_are_not() {
    let _s = start();
    on_cpu(|| read_in_handler(&R_IRQ_R_ON));
    on_cpu(|| {
        let _r = R_IRQ_R_ON.read();
    });
    on_cpu(|| {
        let _irq = IrqState::save();
        *R_IRQ_R_ON.write() += 1;
    });
    on_cpu(|| read_in_handler(&R_IRQ_R_ON));
    no_report();
}

static W_IRQ_R_ON: RwSpinLock<u32> =
    RwSpinLock::from_raw(RawRwSpinLock::with_class(lock_class!("rw-w-irq-r-on")), 0);

/// A write in a handler and a read with interrupts enabled: the handler
/// waits for the reader it interrupted. Reported (as before).
#[test]
fn a_write_in_a_handler_and_a_read_with_interrupts_enabled_are_an_inversion() {
    let _s = start();
    on_cpu(|| {
        let _r = W_IRQ_R_ON.read();
    });
    no_report();
    on_cpu(|| {
        enter_interrupt();
        *W_IRQ_R_ON.write() += 1;
        exit_interrupt();
    });
    one_inversion_of("rw-w-irq-r-on");
}

// ---- across classes (Linux's check_irq_usage with read usage) ---------

/// An rwlock read in a handler makes its class IRQ-safe for the chains
/// across classes when the chain's first order was taken with it held
/// for writing: CPU 0 holds `B` with interrupts enabled, an interrupt on
/// CPU 0 read-locks `A`, CPU 1 holds `A` for writing (interrupts masked)
/// and waits for `B`: deadlock. Held for reading instead, CPU 1 lets the
/// handler's read in: no report. Reported at whichever part comes last.
/// With interrupts masked, takes `inner` for writing while holding
/// `outer` for writing (`write`) or reading.
fn nest_masked(outer: &RwSpinLock<u32>, write: bool, inner: &RwSpinLock<u32>) {
    let _irq = IrqState::save();
    let _outer = if write {
        Ok(outer.write())
    } else {
        Err(outer.read())
    };
    *inner.write() += 1;
}

/// Exactly one report since the last look: an IRQ-safe -> IRQ-unsafe
/// chain from the class named `safe` to the one named `unsafe_`.
fn one_chain(safe: &str, unsafe_: &str) {
    let report = one_report();
    assert!(
        report.contains("IRQ-safe -> IRQ-unsafe")
            && report.contains(&format!("\"{safe}\""))
            && report.contains(&format!("\"{unsafe_}\"")),
        "{report}"
    );
}

#[test]
fn a_read_in_a_handler_leading_to_an_irq_unsafe_class_by_a_write_hold() {
    let _s = start();
    let lock = |key| RwSpinLock::<u32>::from_raw(RawRwSpinLock::with_class(key), 0);
    // The order comes last.
    let (a, b) = (lock(lock_class!("chain-A")), lock(lock_class!("chain-B")));
    on_cpu(|| read_in_handler(&a));
    on_cpu(|| *b.write() += 1);
    on_cpu(|| nest_masked(&a, false, &b));
    no_report();
    on_cpu(|| nest_masked(&a, true, &b));
    one_chain("chain-A", "chain-B");
    // The read in a handler comes last.
    let (c, d) = (lock(lock_class!("chain-C")), lock(lock_class!("chain-D")));
    on_cpu(|| *d.write() += 1);
    on_cpu(|| nest_masked(&c, true, &d));
    no_report();
    on_cpu(|| read_in_handler(&c));
    one_chain("chain-C", "chain-D");
    // Held for reading only: nothing.
    let (e, f) = (lock(lock_class!("chain-E")), lock(lock_class!("chain-F")));
    on_cpu(|| *f.write() += 1);
    on_cpu(|| nest_masked(&e, false, &f));
    on_cpu(|| read_in_handler(&e));
    no_report();
}
