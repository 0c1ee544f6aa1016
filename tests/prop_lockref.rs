//! Property tests of `LockRef`: random operation sequences, edge counts
//! included (zero, one, `i32::MAX`, negative and dead counts), against a
//! model that is a plain `i32` under a lock. Misuse (saturation, `get` on a
//! dead lockref) must be refused, counted in `lockref::stats()` and, in
//! debug builds, panic after the fact; nothing else may panic.
#![cfg(not(ksync_loom))]

use std::panic::{AssertUnwindSafe, catch_unwind};

use ksync::LockRef;
use ksync::lockref::{self, DEAD};
use proptest::prelude::*;

#[path = "common/prop.rs"]
mod prop;
use prop::{quiet_expected_panics, serial};

fn count_strategy() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(i32::MAX),
        Just(i32::MAX - 1),
        Just(i32::MAX - 2),
        Just(-1),
        Just(DEAD),
        Just(i32::MIN),
        0..8i32,
        any::<i32>(),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Get,
    GetNotZero,
    GetNotDead,
    PutReturn,
    /// `put_or_lock`; if it hands over the lock, set the count to this.
    PutOrLock(Option<i32>),
    /// Take the lock, then set the count (or only look).
    Lock(Option<i32>),
    MarkDead,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Get),
        2 => Just(Op::GetNotZero),
        2 => Just(Op::GetNotDead),
        3 => Just(Op::PutReturn),
        2 => proptest::option::of(count_strategy()).prop_map(Op::PutOrLock),
        1 => proptest::option::of(count_strategy()).prop_map(Op::Lock),
        1 => Just(Op::MarkDead),
    ]
}

/// What an operation did in the model.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Unit,
    Bool(bool),
    Count(Option<i32>),
    /// `put_or_lock`: whether the lock was handed over.
    Locked(bool),
}

/// The model: what `op` returns on a count `c`, the new count, and the
/// misuse it reports as (saturated, get on dead).
fn model(op: &Op, c: &mut i32) -> (Outcome, (usize, usize)) {
    const MAX: i32 = i32::MAX;
    match *op {
        Op::Get => match *c {
            MAX => (Outcome::Unit, (1, 0)),
            n if n < 0 => (Outcome::Unit, (0, 1)),
            n => {
                *c = n + 1;
                (Outcome::Unit, (0, 0))
            }
        },
        Op::GetNotZero | Op::GetNotDead => {
            let lo = if matches!(op, Op::GetNotZero) { 1 } else { 0 };
            match *c {
                MAX => (Outcome::Bool(true), (1, 0)),
                n if n < lo => (Outcome::Bool(false), (0, 0)),
                n => {
                    *c = n + 1;
                    (Outcome::Bool(true), (0, 0))
                }
            }
        }
        Op::PutReturn => match *c {
            MAX => (Outcome::Count(Some(MAX)), (0, 0)),
            n if n >= 1 => {
                *c = n - 1;
                (Outcome::Count(Some(n - 1)), (0, 0))
            }
            _ => (Outcome::Count(None), (0, 0)),
        },
        Op::PutOrLock(set) => match *c {
            MAX => (Outcome::Locked(false), (0, 0)),
            n if n >= 2 => {
                *c = n - 1;
                (Outcome::Locked(false), (0, 0))
            }
            _ => {
                if let Some(v) = set {
                    *c = v;
                }
                (Outcome::Locked(true), (0, 0))
            }
        },
        Op::Lock(set) => {
            if let Some(v) = set {
                *c = v;
            }
            (Outcome::Unit, (0, 0))
        }
        Op::MarkDead => {
            *c = DEAD;
            (Outcome::Unit, (0, 0))
        }
    }
}

fn run(op: &Op, lr: &LockRef) -> Outcome {
    match *op {
        Op::Get => {
            lr.get();
            Outcome::Unit
        }
        Op::GetNotZero => Outcome::Bool(lr.get_not_zero()),
        Op::GetNotDead => Outcome::Bool(lr.get_not_dead()),
        Op::PutReturn => Outcome::Count(lr.put_return()),
        Op::PutOrLock(set) => match lr.put_or_lock() {
            None => Outcome::Locked(false),
            Some(mut guard) => {
                if let Some(v) = set {
                    guard.set_count(v);
                }
                Outcome::Locked(true)
            }
        },
        Op::Lock(set) => {
            let mut guard = lr.lock();
            let before = guard.count();
            assert_eq!(lr.count(), before, "the count moved under the lock");
            if let Some(v) = set {
                guard.set_count(v);
                assert_eq!(guard.count(), v);
            }
            Outcome::Unit
        }
        Op::MarkDead => {
            lr.lock().mark_dead();
            Outcome::Unit
        }
    }
}

proptest! {
    #![proptest_config(prop::config())]

    /// Every operation matches the model; reports happen exactly on
    /// misuse (and panic only in debug builds, leaving the lockref usable).
    #[test]
    fn lockref_matches_the_model(
        start in count_strategy(),
        ops in proptest::collection::vec(op_strategy(), 1..64),
    ) {
        let _serial = serial();
        quiet_expected_panics("lockref: ");
        let lr = LockRef::new(start);
        let mut c = start;
        for op in &ops {
            let before = lockref::stats();
            let (expected, (sat, dead)) = model(op, &mut c);
            let result = catch_unwind(AssertUnwindSafe(|| run(op, &lr)));
            let after = lockref::stats();
            let reported = sat + dead != 0;
            match result {
                Ok(outcome) => {
                    prop_assert!(!(reported && cfg!(debug_assertions)), "{op:?}: misuse did not panic");
                    prop_assert_eq!(outcome, expected, "{:?} on {}", op, c);
                }
                Err(_) => prop_assert!(reported && cfg!(debug_assertions), "{op:?}: unexpected panic"),
            }
            prop_assert_eq!(after.saturated - before.saturated, sat, "{:?}: saturation reports", op);
            prop_assert_eq!(after.get_on_dead - before.get_on_dead, dead, "{:?}: get-on-dead reports", op);
            prop_assert_eq!(lr.count(), c, "{:?}: count", op);
            prop_assert_eq!(lr.is_dead(), c < 0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Threads (CPUs) take and drop references in random runs on a shared
    /// lockref, some under the lock: every reference is counted once, and
    /// the count is back at its start when they are done.
    #[test]
    fn lockref_threads_balance(
        start in 1..4i32,
        runs in proptest::collection::vec(proptest::collection::vec(0..4u8, 1..200), 2..4),
    ) {
        let lr = LockRef::new(start);
        std::thread::scope(|s| {
            for run in &runs {
                let lr = &lr;
                s.spawn(move || {
                    let mut held = 0;
                    for &step in run {
                        match step {
                            0 => {
                                lr.get();
                                held += 1;
                            }
                            1 => assert!(lr.get_not_zero()),
                            2 if held > 0 => {
                                if lr.put_return().is_none() {
                                    let mut g = lr.lock();
                                    let n = g.count();
                                    g.set_count(n - 1);
                                }
                                held -= 1;
                            }
                            _ => {
                                let mut g = lr.lock();
                                let n = g.count();
                                assert!(n >= start, "count {n} below the base references");
                                g.set_count(n + 1);
                                g.set_count(n);
                            }
                        }
                        if step == 1 {
                            held += 1;
                        }
                    }
                    for _ in 0..held {
                        assert!(lr.put_or_lock().is_none(), "a held reference was not counted");
                    }
                });
            }
        });
        prop_assert_eq!(lr.count(), start);
    }
}
