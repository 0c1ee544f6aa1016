//! Review 38b: `might_sleep` skips its preemption check while lockdep
//! counts a non-sleeping lock held on this CPU, leaving it to lockdep's
//! `LocksHeld` report (src/sleeping/wait.rs `might_sleep`:
//! `held_spinning_lock_count() == 0`). But once lockdep has turned itself
//! off (a `TooDeep` or `TableFull` report), `assert_no_locks_held` returns
//! at once and reports nothing, while the locks taken before are still on
//! its stack: a sleeping call under a spinlock is then not reported at all
//! (Linux's `__might_resched` checks the preemption count whatever
//! `debug_locks` says). Its own test binary: lockdep stays off.

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
        "might_sleep under a spinlock (preempt_count {count}) went unreported once lockdep \
         had turned itself off: no panic, no report"
    );
}
