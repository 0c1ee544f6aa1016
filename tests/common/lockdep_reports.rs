//! Helpers shared by the lockdep tests (`tests/lockdep*.rs`), each of which
//! includes this file with `#[path]`: reports are recorded instead of
//! panicking, and the tests run one at a time so that each reads only its
//! own.

use std::sync::{Mutex, MutexGuard};

use ksync::host::{record_lockdep_reports, take_lockdep_reports};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests and turns recording on, with nothing recorded.
pub(crate) fn start() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    record_lockdep_reports(true);
    take_lockdep_reports();
    guard
}

/// The one report recorded since the last look (fails on none or more).
pub(crate) fn one_report() -> String {
    let reports = take_lockdep_reports();
    assert_eq!(reports.len(), 1, "expected one report, got {reports:#?}");
    reports.into_iter().next().unwrap()
}

/// Fails if anything was reported since the last look.
pub(crate) fn no_report() {
    let reports = take_lockdep_reports();
    assert!(reports.is_empty(), "expected no report, got {reports:#?}");
}
