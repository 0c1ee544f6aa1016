//! `RefCount` (Linux's `refcount_t`) and `Kref`: Linux's semantics, every
//! saturation kind (the object leaks, never frees twice, each kind reported
//! once), `dec_and_lock`, and release-exactly-once under a stress with
//! more threads than cores and lookups racing the last put.

#![cfg(not(ksync_loom))]

use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use ksync::RefCount;
use ksync::refcount::{self, Kref, KrefRef, REFCOUNT_SATURATED, Saturation};
use ksync::spinlock::SpinLock;

#[test]
fn linux_semantics() {
    let r = RefCount::new(1);
    r.inc();
    r.add(3);
    assert_eq!(r.read(), 5);
    assert!(r.inc_not_zero());
    assert!(r.add_not_zero(2));
    assert_eq!(r.read(), 8);
    r.dec();
    assert!(!r.sub_and_test(6));
    assert_eq!(r.read(), 1);
    assert!(r.dec_if_one(), "the only reference");
    assert_eq!(r.read(), 0);
    assert!(!r.dec_if_one() || r.read() != 0, "not at zero");
    assert!(!r.inc_not_zero(), "a dead count is not revived");
    assert!(!r.add_not_zero(5));
    assert_eq!(r.read(), 0);
    let r = RefCount::new(3);
    assert!(r.dec_not_one());
    assert!(r.dec_not_one());
    assert!(!r.dec_not_one());
    assert_eq!(r.read(), 1);
    assert!(r.dec_and_test());
}

#[test]
#[should_panic(expected = "must not be negative")]
fn a_negative_initial_count_is_refused() {
    let _ = RefCount::new(-1);
}

#[test]
fn overflow_saturates_and_never_reaches_zero() {
    let before = refcount::stats();
    let r = RefCount::new(i32::MAX);
    r.inc();
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    // 2^29 decrements later it is still far from zero: model a burst.
    for _ in 0..1000 {
        assert!(!r.dec_and_test(), "a saturated count must never free");
    }
    assert!(r.is_saturated());
    let after = refcount::stats();
    assert!(after.add_overflow > before.add_overflow);
    assert!(after.sub_use_after_free >= before.sub_use_after_free + 1000);
    // `add` that crosses i32::MAX saturates too.
    let r = RefCount::new(i32::MAX - 1);
    r.add(5);
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    // `add_not_zero` as well.
    let r = RefCount::new(i32::MAX);
    assert!(r.inc_not_zero());
    assert_eq!(r.read(), REFCOUNT_SATURATED);
}

#[test]
fn increment_from_zero_is_a_use_after_free_and_leaks() {
    let before = refcount::stats();
    let r = RefCount::new(0);
    r.inc();
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    assert!(!r.dec_and_test(), "the object is leaked, not freed again");
    assert!(refcount::stats().add_use_after_free > before.add_use_after_free);
}

#[test]
fn underflow_saturates_instead_of_freeing_twice() {
    let r = RefCount::new(1);
    assert!(r.dec_and_test()); // the one legitimate free
    assert!(!r.dec_and_test(), "a second free must not happen");
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    assert!(!r.dec_and_test());
    // dec to zero is a leak, reported and saturated.
    let r = RefCount::new(1);
    r.dec();
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    assert!(!r.dec_and_test());
    // dec_not_one on zero.
    let r = RefCount::new(0);
    assert!(r.dec_not_one());
    assert_eq!(r.read(), REFCOUNT_SATURATED);
}

#[test]
fn wrapping_atomics_would_free_twice_control() {
    // The control: what a bare `AtomicI32` does with the same sequence
    // (so the saturation tests above can fail): 1 -> 0 (free) -> -1 ... and
    // overflow wraps to i32::MIN, then back up to zero.
    let raw = std::sync::atomic::AtomicI32::new(1);
    assert_eq!(raw.fetch_sub(1, Ordering::Release), 1); // free
    raw.fetch_add(1, Ordering::Relaxed); // "get" on a dead object: 0 -> 1
    assert_eq!(raw.fetch_sub(1, Ordering::Release), 1, "freed twice");
}

static REPORTS: Mutex<Vec<Saturation>> = Mutex::new(Vec::new());

fn record(kind: Saturation) {
    REPORTS.lock().unwrap().push(kind);
}

#[test]
fn each_kind_is_reported_once() {
    refcount::set_saturation_hook(record);
    refcount::rearm_reports();
    for _ in 0..3 {
        RefCount::new(i32::MAX).inc(); // AddOverflow
        let _ = RefCount::new(i32::MAX).inc_not_zero(); // AddNotZeroOverflow
        RefCount::new(0).inc(); // AddUseAfterFree
        let _ = RefCount::new(0).dec_and_test(); // SubUseAfterFree
        RefCount::new(1).dec(); // DecLeak
    }
    let reports = REPORTS.lock().unwrap().clone();
    for kind in [
        Saturation::AddOverflow,
        Saturation::AddNotZeroOverflow,
        Saturation::AddUseAfterFree,
        Saturation::SubUseAfterFree,
        Saturation::DecLeak,
    ] {
        let n = reports.iter().filter(|&&k| k == kind).count();
        assert_eq!(n, 1, "{kind:?} reported {n} times: {reports:?}");
    }
}

#[test]
fn dec_and_lock_returns_the_guard_only_for_the_last() {
    static LIST: SpinLock<Vec<u32>> = SpinLock::new(Vec::new());
    LIST.lock().push(7);
    let r = RefCount::new(2);
    assert!(r.dec_and_lock(&LIST).is_none());
    assert_eq!(r.read(), 1);
    let mut list = r.dec_and_lock(&LIST).expect("the last reference");
    assert_eq!(r.read(), 0);
    list.retain(|&x| x != 7);
    drop(list);
    assert!(LIST.lock().is_empty());
}

#[test]
fn dec_and_lock_races_lookups_under_the_lock() {
    // Lookups take a reference under the lock with inc_not_zero; the last
    // put unlinks under the same lock. A lookup never revives a count that
    // reached zero, and the object is unlinked exactly once.
    static TABLE: SpinLock<Option<usize>> = SpinLock::new(None);
    let threads = 2 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    for round in 0..50 {
        let obj = RefCount::new(1);
        *TABLE.lock() = Some(round);
        let unlinked = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..20 {
                        // The lookup, under the table's lock.
                        let found = {
                            let table = TABLE.lock();
                            table.is_some() && obj.inc_not_zero()
                        };
                        if found {
                            if let Some(mut t) = obj.dec_and_lock(&TABLE) {
                                *t = None;
                                unlinked.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
            // The creator drops its reference in the middle.
            if let Some(mut t) = obj.dec_and_lock(&TABLE) {
                *t = None;
                unlinked.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert_eq!(unlinked.load(Ordering::Relaxed), 1, "round {round}");
        assert_eq!(obj.read(), 0);
        assert!(TABLE.lock().is_none());
    }
}

// ---- Kref -----------------------------------------------------------------

static RELEASES: AtomicUsize = AtomicUsize::new(0);

fn count_release(_: NonNull<Kref<u64>>) {
    RELEASES.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn kref_releases_exactly_once_under_oversubscription() {
    let threads = 4 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    for round in 0..20 {
        // Leaked so the storage outlives every reference (a pool slot).
        let obj: &'static Kref<u64> = Box::leak(Box::new(
            // SAFETY: leaked: never freed; `count_release` only counts.
            unsafe { Kref::new(round, count_release) },
        ));
        let before = RELEASES.load(Ordering::SeqCst);
        // SAFETY: the creator's reference.
        let first = unsafe { KrefRef::adopt(obj) };
        thread::scope(|s| {
            for t in 0..threads {
                let mine = first.clone();
                s.spawn(move || {
                    let mut held = vec![mine];
                    for i in 0..200 {
                        if (i + t) % 3 == 0 {
                            held.pop();
                        } else if let Some(r) = held.last().cloned() {
                            held.push(r);
                        } else if let Some(r) = obj.get_unless_zero() {
                            // A lookup through the "RCU" pointer.
                            assert_eq!(*r, round);
                            held.push(r);
                        }
                    }
                    drop(held);
                });
            }
            drop(first);
        });
        assert_eq!(RELEASES.load(Ordering::SeqCst), before + 1, "round {round}");
        assert_eq!(obj.read(), 0);
        assert!(
            obj.get_unless_zero().is_none(),
            "a dead Kref is not revived"
        );
    }
}

#[test]
fn kref_raw_get_and_put() {
    static RAW_RELEASED: AtomicUsize = AtomicUsize::new(0);
    fn release(obj: NonNull<Kref<&'static str>>) {
        // SAFETY: the Kref is a static, valid here.
        assert_eq!(unsafe { *obj.as_ref().value() }, "sda");
        RAW_RELEASED.fetch_add(1, Ordering::SeqCst);
    }
    // SAFETY: a static is never freed.
    static DISK: Kref<&str> = unsafe { Kref::new("sda", release) };
    DISK.get();
    assert_eq!(DISK.read(), 2);
    // SAFETY: the reference counted by `get`, then the creator's.
    assert!(!unsafe { DISK.put() });
    // SAFETY: the creator's reference.
    assert!(unsafe { DISK.put() });
    assert_eq!(RAW_RELEASED.load(Ordering::SeqCst), 1);
}

/// The amount argument (`i32`, Linux's `int`): zero is Linux's answer
/// (nothing changes on a live count; a dead count saturates, as any use of
/// it does), and a negative amount, which would move the count the other
/// way (an `add` that drops references: a count that reaches zero with no
/// release, then a double free), saturates before the count moves
/// ([`Saturation::NegativeAmount`]): the object leaks, as for every other
/// misuse.
#[test]
fn zero_and_negative_amounts() {
    // Zero on a live count: nothing.
    let r = RefCount::new(2);
    r.add(0);
    assert!(r.add_not_zero(0));
    assert!(!r.sub_and_test(0));
    assert_eq!(r.read(), 2);
    // Zero on a dead count: a use after free, as Linux's.
    let dead = RefCount::new(0);
    dead.add(0);
    assert!(dead.is_saturated());
    let dead = RefCount::new(0);
    assert!(!dead.add_not_zero(0));
    assert_eq!(dead.read(), 0);
    let dead = RefCount::new(0);
    assert!(!dead.sub_and_test(0));
    assert!(dead.is_saturated());
    // Negative: saturates, never moves the count the other way.
    let before = refcount::stats().negative_amount;
    let r = RefCount::new(3);
    r.add(-1);
    assert_eq!(r.read(), REFCOUNT_SATURATED, "add(-1) moved the count");
    let r = RefCount::new(1);
    assert!(!r.sub_and_test(-1));
    assert_eq!(
        r.read(),
        REFCOUNT_SATURATED,
        "sub_and_test(-1) moved the count"
    );
    let r = RefCount::new(3);
    assert!(r.add_not_zero(-2), "a live count: pinned, still usable");
    assert_eq!(r.read(), REFCOUNT_SATURATED);
    let dead = RefCount::new(0);
    assert!(!dead.add_not_zero(-2), "a dead count stays dead");
    assert_eq!(dead.read(), 0);
    let r = RefCount::new(3);
    r.add(i32::MIN);
    assert!(r.is_saturated());
    assert!(refcount::stats().negative_amount >= before + 4);
    assert!(Saturation::NegativeAmount.message().contains("negative"));
}
