//! More held locks than lockdep's per-CPU stack holds: one report, then
//! checking is off. Its own test binary (checking stays off).

#![cfg(feature = "lockdep")]

use ksync::LockRef;
use ksync::host::{record_lockdep_reports, take_lockdep_reports};
use ksync::lockdep::{self, LockClassKey, MAX_LOCK_DEPTH};

#[test]
fn holding_too_many_locks_is_reported_once() {
    record_lockdep_reports(true);
    let locks: Vec<LockRef> = (0..MAX_LOCK_DEPTH + 2)
        .map(|_| {
            let key: &'static LockClassKey = Box::leak(Box::new(LockClassKey::new("deep")));
            let mut lock = LockRef::new(1);
            lock.set_lock_class(key);
            lock
        })
        .collect();
    let guards: Vec<_> = locks.iter().map(LockRef::lock).collect();
    let reports = take_lockdep_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        reports[0].contains("more than 48 locks held"),
        "{}",
        reports[0]
    );
    assert!(reports[0].contains("and 40 more"), "{}", reports[0]);
    drop(guards);
    // Releases of locks taken before and after are quiet.
    assert!(take_lockdep_reports().is_empty());
    assert_eq!(lockdep::held_lock_count(), 0);
}
