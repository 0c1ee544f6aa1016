//! lockdep's class table filling up: one report, then checking is off and
//! the locks go on working. Its own test binary, because checking stays
//! off for the rest of the process.

#![cfg(feature = "lockdep")]

use ksync::LockRef;
use ksync::host::{record_lockdep_reports, take_lockdep_reports};
use ksync::lockdep::{self, LockClassKey, MAX_CLASSES};

#[test]
fn a_full_class_table_is_reported_once_and_turns_checking_off() {
    record_lockdep_reports(true);
    // One class per key: more keys than the table holds.
    let locks: Vec<LockRef> = (0..MAX_CLASSES + 10)
        .map(|_| {
            let key: &'static LockClassKey = Box::leak(Box::new(LockClassKey::new("many")));
            let mut lock = LockRef::new(1);
            lock.set_lock_class(key);
            lock
        })
        .collect();
    for lock in &locks {
        drop(lock.lock());
    }
    let reports = take_lockdep_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        reports[0].contains("the class table is full"),
        "{}",
        reports[0]
    );
    assert!(
        reports[0].contains("KSYNC_LOCKDEP_CLASSES"),
        "{}",
        reports[0]
    );
    // Checking is off: a cycle goes unreported, and nothing is counted.
    {
        let _a = locks[0].lock();
        let _b = locks[1].lock();
        assert_eq!(lockdep::held_lock_count(), 0);
    }
    {
        let _b = locks[1].lock();
        let _a = locks[0].lock();
    }
    assert!(take_lockdep_reports().is_empty());
}
