//! lockdep's IRQ-safe -> IRQ-unsafe dependencies across classes (Linux's
//! `check_irq_usage`): class `A` is taken in an interrupt handler (it is
//! IRQ-safe), `B` is taken with interrupts enabled (IRQ-unsafe), and some
//! CPU takes `B` while holding `A` (with interrupts masked, or it would be
//! an inversion of `A` itself). CPU 0 holds `B`, an interrupt on CPU 0
//! spins on `A`; CPU 1 holds `A` and spins on `B`: deadlock. The pattern
//! is complete at whichever of its three parts comes last (the edge, the
//! use in a handler, the use with interrupts enabled); each order is
//! reported there, once, naming the chain. Run with
//! `cargo test --features lockdep --test lockdep_irq_usage`.
//!
//! As in `tests/lockdep.rs`, reports are recorded instead of panicking and
//! each test begins with `start()`, one at a time.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use ksync::host::{enter_interrupt, exit_interrupt};
use ksync::lock_class;
use ksync::lockdep::LockClassKey;
use ksync::spinlock::{IrqState, IrqTicketMutex, RawTicketLock, TicketMutex};

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

type Lock = TicketMutex<u32>;

/// A lock of its own class, named `name` (each call a new class).
fn named(name: &'static str) -> Lock {
    let key: &'static LockClassKey = Box::leak(Box::new(LockClassKey::new(name)));
    TicketMutex::from_raw(RawTicketLock::with_class(key), 0)
}

/// `file:line:` of the line before this macro's: where a lock was just
/// taken.
macro_rules! taken_above {
    () => {
        format!("{}:{}:", file!(), line!() - 1)
    };
}

/// Takes `lock` in a "handler": its class becomes IRQ-safe. Returns where.
fn in_handler(lock: &Lock) -> String {
    enter_interrupt();
    *lock.lock() += 1;
    let at = taken_above!();
    exit_interrupt();
    at
}

/// Takes `lock` with interrupts enabled: its class becomes IRQ-unsafe.
/// Returns where.
fn irqs_on(lock: &Lock) -> String {
    *lock.lock() += 1;
    taken_above!()
}

/// Takes `inner` while holding `outer`, with interrupts masked (neither
/// use is IRQ-safe or IRQ-unsafe): the edge `outer -> inner`.
fn nest_masked(outer: &Lock, inner: &Lock) {
    let _irq = IrqState::save();
    let _o = outer.lock();
    *inner.lock() += 1;
}

/// The report names the IRQ-safe class with its use in a handler, the
/// IRQ-unsafe class with its use with interrupts enabled, and each edge of
/// the chain from the one to the other.
fn check_report(report: &str, safe: (&str, &str), unsafe_: (&str, &str), chain: &[(&str, &str)]) {
    println!("{report}");
    assert!(
        report.contains("IRQ-safe -> IRQ-unsafe lock order"),
        "{report}"
    );
    assert!(!report.contains("circular"), "{report}");
    let line = |prefix: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line: {report}"))
            .to_string()
    };
    let safe_line = line("IRQ-safe:");
    assert!(
        safe_line.contains(&format!("\"{}\"", safe.0)) && safe_line.contains(safe.1),
        "{report}"
    );
    let unsafe_line = line("IRQ-unsafe:");
    assert!(
        unsafe_line.contains(&format!("\"{}\"", unsafe_.0)) && unsafe_line.contains(unsafe_.1),
        "{report}"
    );
    for (i, (from, to)) in chain.iter().enumerate() {
        let link = line(&format!("#{i} "));
        assert!(
            link.contains(&format!("\"{from}\" -> \"{to}\"")),
            "link #{i} is {from} -> {to}: {report}"
        );
    }
    assert!(
        !report.contains(&format!("#{} ", chain.len())),
        "{} links: {report}",
        chain.len()
    );
}

#[test]
fn the_closing_edge_is_reported() {
    let _s = start();
    let (a, b) = (named("edge-A"), named("edge-B"));
    let a_irq = in_handler(&a);
    let b_on = irqs_on(&b);
    no_report();
    nest_masked(&a, &b);
    let report = one_report();
    check_report(
        &report,
        ("edge-A", &a_irq),
        ("edge-B", &b_on),
        &[("edge-A", "edge-B")],
    );
    // Once: the same order, and both uses, again.
    nest_masked(&a, &b);
    in_handler(&a);
    irqs_on(&b);
    no_report();
}

#[test]
fn the_use_in_a_handler_last_is_reported() {
    let _s = start();
    let (a, b) = (named("safe-last-A"), named("safe-last-B"));
    let b_on = irqs_on(&b);
    nest_masked(&a, &b);
    no_report();
    let a_irq = in_handler(&a);
    let report = one_report();
    check_report(
        &report,
        ("safe-last-A", &a_irq),
        ("safe-last-B", &b_on),
        &[("safe-last-A", "safe-last-B")],
    );
    in_handler(&a);
    nest_masked(&a, &b);
    no_report();
}

#[test]
fn the_use_with_interrupts_enabled_last_is_reported() {
    let _s = start();
    let (a, b) = (named("unsafe-last-A"), named("unsafe-last-B"));
    let a_irq = in_handler(&a);
    nest_masked(&a, &b);
    no_report();
    let b_on = irqs_on(&b);
    let report = one_report();
    check_report(
        &report,
        ("unsafe-last-A", &a_irq),
        ("unsafe-last-B", &b_on),
        &[("unsafe-last-A", "unsafe-last-B")],
    );
    irqs_on(&b);
    nest_masked(&a, &b);
    no_report();
}

/// The longer chain `A -> B -> C`, `A` IRQ-safe and `C` IRQ-unsafe,
/// completed by each of its parts in turn.
#[test]
fn a_longer_chain_is_reported_whichever_part_comes_last() {
    let _s = start();
    let names = ["long-A", "long-B", "long-C"];
    let chain = [("long-A", "long-B"), ("long-B", "long-C")];
    // Each order with its own three classes.
    let fresh = || (named("long-A"), named("long-B"), named("long-C"));

    // 1. The use in a handler last: found by searching forward from A.
    let (a, b, c) = fresh();
    let c_on = irqs_on(&c);
    nest_masked(&a, &b);
    nest_masked(&b, &c);
    no_report();
    let a_irq = in_handler(&a);
    check_report(&one_report(), (names[0], &a_irq), (names[2], &c_on), &chain);

    // 2. The use with interrupts enabled last: searching backward from C.
    let (a, b, c) = fresh();
    let a_irq = in_handler(&a);
    nest_masked(&a, &b);
    nest_masked(&b, &c);
    no_report();
    let c_on = irqs_on(&c);
    check_report(&one_report(), (names[0], &a_irq), (names[2], &c_on), &chain);

    // 3. The first edge last: forward from B (through B -> C).
    let (a, b, c) = fresh();
    let a_irq = in_handler(&a);
    let c_on = irqs_on(&c);
    nest_masked(&b, &c);
    no_report();
    nest_masked(&a, &b);
    check_report(&one_report(), (names[0], &a_irq), (names[2], &c_on), &chain);

    // 4. The second edge last: backward from B (through A -> B).
    let (a, b, c) = fresh();
    let a_irq = in_handler(&a);
    let c_on = irqs_on(&c);
    nest_masked(&a, &b);
    no_report();
    nest_masked(&b, &c);
    check_report(&one_report(), (names[0], &a_irq), (names[2], &c_on), &chain);
}

/// A plain lock taken inside `IrqState::save()` is taken with interrupts
/// masked, not in a handler: it is not IRQ-safe, and what it leads to may
/// be taken with interrupts enabled.
#[test]
fn plain_locks_inside_irq_save_are_not_irq_safe() {
    let _s = start();
    let (a, b) = (named("masked-A"), named("masked-B"));
    nest_masked(&a, &b);
    irqs_on(&b);
    irqs_on(&a);
    nest_masked(&a, &b);
    no_report();

    // The IRQ-saving form outside a handler: the same.
    static OUTER: IrqTicketMutex<u32> = IrqTicketMutex::from_raw(
        RawTicketLock::with_relax_in_class(lock_class!("irqsave-outer")),
        0,
    );
    let inner = named("under-irqsave");
    {
        let _o = OUTER.lock();
        *inner.lock() += 1;
    }
    irqs_on(&inner);
    no_report();

    // A try-lock in a handler never spins: it does not make its class
    // IRQ-safe.
    let (polled, after) = (named("polled"), named("after-polled"));
    enter_interrupt();
    drop(polled.try_lock());
    exit_interrupt();
    nest_masked(&polled, &after);
    irqs_on(&after);
    no_report();

    // A handler that takes only locks of its own that lead nowhere.
    let (h, other) = (named("handler-only"), named("thread-only"));
    in_handler(&h);
    irqs_on(&other);
    nest_masked(&other, &h);
    no_report();
}

/// One report per IRQ-unsafe class: a second IRQ-safe class reaching it is
/// the same bug (taking it with interrupts enabled), not reported again; a
/// second IRQ-unsafe class reached is reported.
#[test]
fn each_irq_unsafe_class_is_reported_once() {
    let _s = start();
    let (a, a2, b, c) = (
        named("once-A"),
        named("once-A2"),
        named("once-B"),
        named("once-C"),
    );
    in_handler(&a);
    in_handler(&a2);
    irqs_on(&b);
    nest_masked(&a, &b);
    assert!(one_report().contains("IRQ-unsafe"));
    nest_masked(&a2, &b);
    no_report();
    irqs_on(&c);
    nest_masked(&a, &c);
    let report = one_report();
    assert!(report.contains("\"once-C\""), "{report}");
}

/// A chain longer than a report lists (8 edges), closed in its middle: the
/// first 8 edges are listed in order, the rest counted.
#[test]
fn a_long_chain_is_listed_in_part() {
    let _s = start();
    const NAMES: [&str; 12] = [
        "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11",
    ];
    let locks: Vec<Lock> = NAMES.iter().map(|n| named(n)).collect();
    in_handler(&locks[0]);
    irqs_on(&locks[11]);
    for i in (0..11).filter(|&i| i != 5) {
        nest_masked(&locks[i], &locks[i + 1]);
    }
    no_report();
    nest_masked(&locks[5], &locks[6]);
    let report = one_report();
    println!("{report}");
    for i in 0..8 {
        let link = format!("#{i} \"{}\" -> \"{}\"", NAMES[i], NAMES[i + 1]);
        assert!(report.contains(&link), "{link}: {report}");
    }
    assert!(!report.contains("#8 "), "{report}");
    assert!(report.contains("... and 3 more"), "{report}");
    assert!(report.contains("IRQ-unsafe: class \"n11\""), "{report}");
}
