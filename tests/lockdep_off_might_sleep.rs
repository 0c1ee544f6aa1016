//! `might_sleep` leaves the preemption check to lockdep's `LocksHeld`
//! report while lockdep counts a spinlock held on this CPU. Once lockdep
//! has turned itself off (here: a `TooDeep` report), that report is no
//! longer made, so the spinlock no longer excuses the preemption check:
//! a sleeping call under it still panics (Linux's `__might_resched`
//! checks the preemption count whatever `debug_locks` says). Its own test
//! binary: lockdep stays off for the rest of the process.

#![cfg(feature = "lockdep")]

use ksync::LockRef;
use ksync::host::{record_lockdep_reports, take_lockdep_reports};
use ksync::lockdep::{LockClassKey, MAX_LOCK_DEPTH};
use ksync::spinlock::TicketMutex;

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn a_sleep_under_a_spinlock_is_reported_after_lockdep_turned_off() {
    record_lockdep_reports(true);
    let outer = TicketMutex::new(0);
    let guard = outer.lock(); // preemption off until it drops
    // One lock too many: lockdep reports it once and stops checking.
    let locks: Vec<LockRef> = (0..MAX_LOCK_DEPTH)
        .map(|_| {
            let key: &'static LockClassKey = Box::leak(Box::new(LockClassKey::new("deep")));
            let mut lock = LockRef::new(1);
            lock.set_lock_class(key);
            lock
        })
        .collect();
    drop(locks.iter().map(LockRef::lock).collect::<Vec<_>>());
    let reports = take_lockdep_reports();
    assert_eq!(reports.len(), 1, "the depth report: {reports:#?}");
    let count = ksync::host::preempt_count();
    assert!(count > 0, "the spinlock keeps preemption off");
    // A sleeping call with the spinlock held.
    let r = std::panic::catch_unwind(ksync::wait::might_sleep);
    let reports = take_lockdep_reports();
    drop(guard);
    assert!(
        r.is_err() || !reports.is_empty(),
        "might_sleep under a spinlock (preempt_count {count}) with lockdep off: \
         no panic and no report"
    );
}
