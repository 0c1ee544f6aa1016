//! lockdep's dependency table filling up: one report, then checking is
//! off. Its own test binary (checking stays off).

#![cfg(feature = "lockdep")]

use ksync::host::{record_lockdep_reports, take_lockdep_reports};
use ksync::lockdep::{LockClassKey, MAX_CLASSES, MAX_DEPENDENCIES, Map};

#[test]
fn a_full_dependency_table_is_reported_once() {
    record_lockdep_reports(true);
    // n classes taken pairwise in one order make n(n-1)/2 edges.
    let n = (1..MAX_CLASSES)
        .find(|n| n * (n - 1) / 2 > MAX_DEPENDENCIES)
        .expect("enough classes to fill the dependency table");
    let maps: Vec<Map> = (0..n)
        .map(|_| Map::with_key(Box::leak(Box::new(LockClassKey::new("pair")))))
        .collect();
    for i in 0..n {
        for j in i + 1..n {
            maps[i].acquire(0, false, false);
            maps[j].acquire(0, false, false);
            maps[j].release();
            maps[i].release();
        }
    }
    let reports = take_lockdep_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        reports[0].contains("the dependency table is full"),
        "{}",
        reports[0]
    );
    // The reverse order, now unchecked, is not reported.
    maps[1].acquire(0, false, false);
    maps[0].acquire(0, false, false);
    maps[0].release();
    maps[1].release();
    assert!(take_lockdep_reports().is_empty());
}
