//! loom models of the seqlock: a reader never returns a torn value, under
//! every interleaving and every weak-memory outcome loom explores for the
//! barrier pairs W1/R2 and W2/R1 (see `ksync::seqlock`'s module docs).
//!
//! Run with `RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --test loom_seqlock`. Two threads per model: loom
//! livelocks when two threads spin on a lock at once.
#![cfg(ksync_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{
    AtomicBool, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use loom::thread;

use ksync::seqlock::{SeqCount, SeqLock};

/// Two words, so a torn copy is possible; the writer publishes `[1, 1]`
/// then `[2, 2]` (one word store at a time, inside the sequence bracket).
///
/// The writer uses `store`, whose first accesses to the data words are
/// stores: loom's DPOR keeps only the last access per object, so a writer
/// that first *loads* the words (as the guard of `write` does, to copy the
/// old value) makes loom forget the reader's loads and explore far fewer
/// interleavings. `write_guard_publishes_whole_values` covers the guard.
#[test]
fn seqlock_read_is_never_torn() {
    loom::model(|| {
        let lock = Arc::new(SeqLock::new([0usize; 2]));
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.store([1, 1]);
                lock.store([2, 2]);
            })
        };
        let first = lock.read();
        assert_eq!(first[0], first[1], "torn read: {first:?}");
        let second = lock.read();
        assert_eq!(second[0], second[1], "torn read: {second:?}");
        assert!(second[0] >= first[0], "went backwards");
        writer.join().unwrap();
        assert_eq!(lock.read(), [2, 2]);
    });
}

/// The write guard: copies the old value under the lock, publishes the
/// modified copy on drop. The reader gets a whole old or new value.
///
/// The reader starts once the writer holds its guard (`copied`), so that
/// its loads of the words come after the guard's: with the loads the other
/// way round, loom's last-access DPOR would lose them (see above) and find
/// a single interleaving.
#[test]
fn write_guard_publishes_whole_values() {
    loom::model(|| {
        let lock = Arc::new(SeqLock::new([0usize; 2]));
        let copied = Arc::new(AtomicBool::new(false));
        let writer = {
            let (lock, copied) = (lock.clone(), copied.clone());
            thread::spawn(move || {
                let mut g = lock.write();
                copied.store(true, Release);
                g[0] += 1;
                g[1] += 1;
            })
        };
        while !copied.load(Acquire) {
            thread::yield_now();
        }
        let v = lock.read_with(|v| *v);
        assert!(v == [0, 0] || v == [1, 1], "torn read: {v:?}");
        writer.join().unwrap();
        assert_eq!(lock.read(), [1, 1]);
    });
}

/// The non-spinning reads: `try_read` and `read_at` return either nothing
/// or a whole value.
#[test]
fn seqlock_try_read_is_never_torn() {
    loom::model(|| {
        let lock = Arc::new(SeqLock::new([0usize; 2]));
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || lock.store([1, 1]))
        };
        if let Some(v) = lock.try_read() {
            assert_eq!(v[0], v[1], "torn try_read: {v:?}");
        }
        let start = lock.read_begin();
        if let Some(v) = lock.read_at(start) {
            assert_eq!(v[0], v[1], "torn read_at: {v:?}");
        }
        writer.join().unwrap();
    });
}

/// A bare `SeqCount` over two atomics written between `write_begin` and
/// `write_end` (one writer, so nothing else to serialise).
#[test]
fn seqcount_read_is_never_torn() {
    loom::model(|| {
        let seq = Arc::new(SeqCount::new());
        let data = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let writer = {
            let (seq, data) = (seq.clone(), data.clone());
            thread::spawn(move || {
                for k in 1..=2 {
                    // SAFETY: the only writer.
                    let _w = unsafe { seq.write() };
                    data[0].store(k, Relaxed);
                    data[1].store(k, Relaxed);
                }
            })
        };
        let (a, b) = seq.read(|| (data[0].load(Relaxed), data[1].load(Relaxed)));
        assert_eq!(a, b, "torn read: ({a}, {b})");
        writer.join().unwrap();
    });
}
