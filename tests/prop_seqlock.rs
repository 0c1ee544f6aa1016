//! Property tests of `SeqLock` and `SeqCount`: random operation sequences
//! against a model (the current value, and the number of writes published,
//! which the sequence counts two by two).
#![cfg(not(ksync_loom))]

use ksync::seqlock::{SeqCount, SeqLock};
use proptest::prelude::*;

/// Data of several words, so a torn copy would show.
type Data = (u64, u32, [u8; 2], i16);

fn data() -> impl Strategy<Value = Data> {
    prop_oneof![
        Just((0, 0, [0; 2], 0)),
        Just((u64::MAX, u32::MAX, [u8::MAX; 2], i16::MIN)),
        any::<Data>(),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Store(Data),
    /// `write()`, change the copy to this (or not at all), then drop.
    Write(Option<Data>),
    WriteIrqsave(Data),
    /// `try_write()` (must succeed: nobody holds the lock).
    TryWrite(Data),
    /// Holds a write guard (with this new value) across reads: readers see
    /// the old value and a second writer is refused until it drops.
    HoldWrite(Data),
    Read,
    TryRead,
    ReadWith,
    /// Remember a `read_begin` snapshot (at most a few).
    Begin,
    /// `read_at` and `read_retry` on snapshot `i % snapshots`.
    Check(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => data().prop_map(Op::Store),
        2 => proptest::option::of(data()).prop_map(Op::Write),
        1 => data().prop_map(Op::WriteIrqsave),
        1 => data().prop_map(Op::TryWrite),
        1 => data().prop_map(Op::HoldWrite),
        2 => Just(Op::Read),
        1 => Just(Op::TryRead),
        1 => Just(Op::ReadWith),
        2 => Just(Op::Begin),
        3 => any::<usize>().prop_map(Op::Check),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 256 } else { 1024 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn seqlock_matches_the_model(start in data(), ops in proptest::collection::vec(op(), 1..64)) {
        let lock = SeqLock::new(start);
        let mut value = start;
        let mut writes = 0u32;
        // (sequence number, writes published when it was taken, value then)
        let mut snapshots: Vec<(u32, u32, Data)> = Vec::new();
        for op in &ops {
            match *op {
                Op::Store(v) => {
                    lock.store(v);
                    value = v;
                    writes += 1;
                }
                Op::Write(v) => {
                    let mut w = lock.write();
                    prop_assert_eq!(*w, value, "the guard starts from the current value");
                    if let Some(v) = v {
                        *w = v;
                        value = v;
                    }
                    drop(w);
                    writes += 1;
                }
                Op::WriteIrqsave(v) => {
                    *lock.write_irqsave() = v;
                    value = v;
                    writes += 1;
                }
                Op::TryWrite(v) => {
                    let mut w = lock.try_write().expect("try_write on a free lock");
                    *w = v;
                    drop(w);
                    value = v;
                    writes += 1;
                }
                Op::HoldWrite(v) => {
                    let start = lock.read_begin();
                    let mut w = lock.write();
                    *w = v;
                    prop_assert!(lock.try_write().is_none(), "two writers");
                    prop_assert_eq!(lock.read(), value, "unpublished write visible");
                    prop_assert_eq!(lock.try_read(), Some(value));
                    prop_assert_eq!(lock.read_at(start), Some(value));
                    drop(w);
                    value = v;
                    writes += 1;
                    prop_assert!(lock.read_retry(start));
                    prop_assert_eq!(lock.read_at(start), None);
                }
                Op::Read => prop_assert_eq!(lock.read(), value),
                Op::TryRead => prop_assert_eq!(lock.try_read(), Some(value)),
                Op::ReadWith => prop_assert_eq!(lock.read_with(|d| *d), value),
                Op::Begin => {
                    let start = lock.read_begin();
                    prop_assert_eq!(start % 2, 0, "odd sequence with no write in progress");
                    if snapshots.len() < 4 {
                        snapshots.push((start, writes, value));
                    }
                }
                Op::Check(i) => {
                    if snapshots.is_empty() {
                        continue;
                    }
                    let (start, then, old) = snapshots[i % snapshots.len()];
                    let changed = writes != then;
                    prop_assert_eq!(lock.read_retry(start), changed);
                    prop_assert_eq!(lock.read_at(start), (!changed).then_some(old));
                    prop_assert_eq!(start.wrapping_add(2 * (writes - then)), lock.read_begin());
                }
            }
        }
    }

    /// `SeqCount`: the sequence is even outside writes, odd inside, and
    /// moves by two per write; `try_read_begin` refuses during a write.
    #[test]
    fn seqcount_matches_the_model(writes in proptest::collection::vec(any::<bool>(), 0..64)) {
        let seq = SeqCount::new();
        let base = seq.sequence();
        prop_assert_eq!(base % 2, 0);
        for (n, &guarded) in writes.iter().enumerate() {
            let start = seq.read_begin();
            prop_assert_eq!(start, base.wrapping_add(2 * n as u32));
            prop_assert_eq!(seq.try_read_begin(), Some(start));
            if guarded {
                // SAFETY: this is the only writer.
                let w = unsafe { seq.write() };
                prop_assert_eq!(seq.sequence() % 2, 1);
                prop_assert_eq!(seq.try_read_begin(), None);
                drop(w);
            } else {
                // SAFETY: the only writer; `write_end` pairs with it.
                unsafe {
                    seq.write_begin();
                    prop_assert_eq!(seq.try_read_begin(), None);
                    seq.write_end();
                }
            }
            prop_assert!(seq.read_retry(start));
            prop_assert_eq!(seq.read(|| 7), 7);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// One writer stores a random run of values whose parts agree (a
    /// value, its complement, ...), while readers copy: no copy is torn,
    /// and the writer's last value is what is left.
    #[test]
    fn seqlock_threads_never_tear(values in proptest::collection::vec(any::<u64>(), 1..400), readers in 1..3usize) {
        let coherent = |v: u64| (v, !v, v.rotate_left(17), v ^ 0x5555_5555_5555_5555);
        let lock = SeqLock::new(coherent(0));
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..readers {
                s.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let (a, b, c, d) = lock.read();
                        assert_eq!((b, c, d), (!a, a.rotate_left(17), a ^ 0x5555_5555_5555_5555), "torn read");
                    }
                });
            }
            for &v in &values {
                lock.store(coherent(v));
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        prop_assert_eq!(lock.read(), coherent(*values.last().unwrap()));
    }
}
