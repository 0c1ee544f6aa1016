//! Property tests of `PerCpuCounter`: random operation sequences with
//! amounts at the `i64` edges and batches from 1 to `MAX_BATCH`, against
//! a model that keeps the exact value in an `i128`.
//!
//! The documented behaviour: exact whenever the exact value fits an `i64`;
//! a fold that would leave the range saturates, is counted in
//! `overflows()` and (debug builds) panics after the fact; `sum` of a value
//! past the edges reads as the edge; `compare` is always exact; `read` is
//! within `error_bound` of the exact value.
#![cfg(not(ksync_loom))]

use std::cmp::Ordering as Cmp;
use std::panic::{AssertUnwindSafe, catch_unwind};

use ksync::percpu_counter::{self, MAX_BATCH, PerCpuCounter};
use proptest::prelude::*;

#[path = "common/prop.rs"]
mod prop;
use prop::{quiet_expected_panics, serial};

fn amount() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(-1),
        Just(i64::MAX),
        Just(i64::MIN),
        Just(i64::MAX - 1),
        Just(i64::MIN + 1),
        Just(i64::from(i32::MAX)),
        Just(i64::from(i32::MIN)),
        Just(i64::from(MAX_BATCH)),
        Just(-i64::from(MAX_BATCH)),
        -100..100i64,
        any::<i64>(),
    ]
}

fn batch() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(32),
        Just(MAX_BATCH),
        Just(MAX_BATCH - 1),
        1..1000i32,
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Add(i64),
    Inc,
    Dec,
    Set(i64),
    Compare(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => amount().prop_map(Op::Add),
        2 => Just(Op::Inc),
        2 => Just(Op::Dec),
        1 => amount().prop_map(Op::Set),
        2 => amount().prop_map(Op::Compare),
    ]
}

fn clamp(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn fits(v: i128) -> bool {
    i64::try_from(v).is_ok()
}

proptest! {
    #![proptest_config(prop::config())]

    #[test]
    fn counter_matches_the_model(
        batch in batch(),
        start in proptest::option::of(amount()),
        ops in proptest::collection::vec(op(), 1..48),
    ) {
        let _serial = serial();
        quiet_expected_panics("percpu_counter: ");
        let c = PerCpuCounter::with_batch(batch);
        let batch = c.batch();
        prop_assert!((1..=MAX_BATCH).contains(&batch));
        // The exact value (one CPU: the total plus this thread's slot).
        let mut exact: i128 = 0;
        if let Some(v) = start {
            c.set(v);
            exact = i128::from(v);
        }
        for op in &ops {
            let before = percpu_counter::overflows();
            let result = catch_unwind(AssertUnwindSafe(|| match *op {
                Op::Add(a) => c.add(a),
                Op::Inc => c.inc(),
                Op::Dec => c.dec(),
                Op::Set(v) => c.set(v),
                Op::Compare(_) => {}
            }));
            let reports = percpu_counter::overflows() - before;
            let next = match *op {
                Op::Add(a) => exact + i128::from(a),
                Op::Inc => exact + 1,
                Op::Dec => exact - 1,
                Op::Set(v) => i128::from(v),
                Op::Compare(rhs) => {
                    prop_assert_eq!(c.compare(rhs), exact.cmp(&i128::from(rhs)), "compare({})", rhs);
                    exact
                }
            };
            prop_assert!(reports <= 1, "{op:?}: {reports} reports");
            prop_assert_eq!(result.is_err(), reports == 1 && cfg!(debug_assertions), "{:?}: panic", op);
            if reports == 1 {
                // Only a value that left the range may saturate, and then
                // at the edge it left through.
                prop_assert!(!fits(next), "{op:?}: saturated while {next} fits");
                exact = i128::from(clamp(next));
            } else {
                exact = next;
            }
            prop_assert_eq!(c.sum(), clamp(exact), "{:?}: sum", op);
            prop_assert_eq!(c.sum_positive(), clamp(exact).max(0));
            let read = i128::from(c.read());
            prop_assert!((read - exact).abs() < i128::from(c.error_bound()), "{op:?}: read {read}, exact {exact}");
            prop_assert_eq!(c.compare(clamp(exact)), exact.cmp(&i128::from(clamp(exact))));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Threads (CPUs) add random amounts on one counter (sums of moderate
    /// values, so nothing saturates): the final sum equals the sum of their
    /// tallies, and sums taken meanwhile stay within the range of partial
    /// totals.
    #[test]
    fn counter_threads_lose_nothing(
        batch in batch(),
        runs in proptest::collection::vec(proptest::collection::vec(-1_000_000..1_000_000i64, 1..300), 2..4),
    ) {
        let c = PerCpuCounter::with_batch(batch);
        let expected: i64 = runs.iter().flatten().sum();
        std::thread::scope(|s| {
            for run in &runs {
                let c = &c;
                s.spawn(move || {
                    for &a in run {
                        c.add(a);
                    }
                });
            }
            // A concurrent reader: never panics, never wraps.
            let (lo, hi): (i64, i64) = runs.iter().flatten().fold((0, 0), |(lo, hi), &a| {
                if a < 0 { (lo + a, hi) } else { (lo, hi + a) }
            });
            for _ in 0..50 {
                let sum = c.sum();
                assert!((lo..=hi).contains(&sum), "sum {sum} outside {lo}..={hi}");
                let _ = c.compare(0);
            }
        });
        prop_assert_eq!(c.sum(), expected);
        prop_assert!((i128::from(c.read()) - i128::from(expected)).abs() < i128::from(c.error_bound()));
    }
}

/// The batch edges, by hand: batch 1 folds every non-zero add, the largest
/// batch keeps amounts below it in the slot.
#[test]
fn batch_edges() {
    let _serial = serial();
    let one = PerCpuCounter::with_batch(1);
    one.add(1);
    assert_eq!(one.read(), 1, "batch 1 folds at once");
    one.add(0);
    one.add(-3);
    assert_eq!((one.read(), one.sum()), (-2, -2));
    let huge = PerCpuCounter::with_batch(MAX_BATCH);
    huge.add(i64::from(MAX_BATCH) - 1);
    assert_eq!((huge.read(), huge.sum()), (0, i64::from(MAX_BATCH) - 1));
    huge.add(1);
    assert_eq!(
        huge.read(),
        i64::from(MAX_BATCH),
        "reaching the batch folds"
    );
    huge.add(-i64::from(MAX_BATCH));
    assert_eq!(huge.sum(), 0);
    assert_eq!(huge.compare(0), Cmp::Equal);
}
