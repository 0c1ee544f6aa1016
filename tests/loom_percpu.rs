//! loom models of the per-CPU counter fold, the scalable rw lock's barrier
//! pairings (A/D and B/C) and writer-writer exclusion.
//!
//! Run with `RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --test loom_percpu` (`cargo xtask test` does). Each
//! loom thread is a CPU (the `test-hooks` kernel hooks use loom's thread
//! locals under loom).
#![cfg(ksync_loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;

use ksync::percpu_counter::PerCpuCounter;
use ksync::percpu_rwlock::{Fenced, RawPerCpuRwLock};

type Lock = RawPerCpuRwLock<Fenced>;

/// Two CPUs add across the batch (folds under the lock); one of them also
/// sums while the other may be folding: the final sum is exact and the
/// concurrent one within bounds. (Two threads only: loom livelocks when two
/// threads spin on a lock at once.)
#[test]
fn counter_fold_is_exact() {
    loom::model(|| {
        let c = Arc::new(PerCpuCounter::with_batch(2));
        let adds = |c: &PerCpuCounter| {
            c.add(1);
            c.add(1); // reaches the batch: folds
            c.add(3); // larger than the batch: folds directly
        };
        let other = {
            let c = c.clone();
            thread::spawn(move || adds(&c))
        };
        adds(&c);
        let mid = c.sum();
        assert!((5..=10).contains(&mid), "sum {mid} outside 5..=10");
        other.join().unwrap();
        assert_eq!(c.sum(), 10);
        assert_eq!(c.read(), 10, "every add folded (batch 2)");
    });
}

/// A pairs with D: a reader and a writer cannot both get in.
#[test]
fn rwlock_reader_writer_exclusion() {
    loom::model(|| {
        let lock = Arc::new(Lock::new());
        let data = Arc::new(UnsafeCell::new(0u32));
        let r = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                if lock.try_read() {
                    // loom flags a race if the writer is inside too.
                    // SAFETY: loom checks this access against the others (a race fails the model).
                    let v = data.with(|p| unsafe { *p });
                    // SAFETY: read-locked above.
                    unsafe { lock.unlock_read() };
                    Some(v)
                } else {
                    None
                }
            })
        };
        if lock.try_write() {
            // SAFETY: loom checks this access against the others (a race fails the model).
            data.with_mut(|p| unsafe { *p = 1 });
            // SAFETY: write-locked above.
            unsafe { lock.unlock_write() };
        }
        let _ = r.join().unwrap();
    });
}

/// B pairs with C: a writer that gets in after a reader left sees what the
/// reader did; a reader after a writer sees the writer's data.
#[test]
fn rwlock_read_section_happens_before_writer() {
    loom::model(|| {
        let lock = Arc::new(Lock::new());
        let seen_by_reader = Arc::new(UnsafeCell::new(0u32));
        let r = {
            let (lock, seen) = (lock.clone(), seen_by_reader.clone());
            thread::spawn(move || {
                lock.read();
                // Written inside the read section (a reader may write data
                // that only it touches; the writer reads it afterwards).
                // SAFETY: loom checks this access against the others (a race fails the model).
                seen.with_mut(|p| unsafe { *p = 5 });
                // SAFETY: read-locked above.
                unsafe { lock.unlock_read() };
            })
        };
        lock.write();
        // If the reader got in first, its write must be visible now
        // (loom reports a race if B/C do not order it); otherwise the
        // reader is waiting for us and has not written.
        // SAFETY: loom checks this access against the others (a race fails the model).
        let v = seen_by_reader.with(|p| unsafe { *p });
        assert!(v == 0 || v == 5);
        // SAFETY: write-locked above.
        unsafe { lock.unlock_write() };
        r.join().unwrap();
    });
}

/// Writers exclude each other.
#[test]
fn rwlock_writer_writer_exclusion() {
    loom::model(|| {
        let lock = Arc::new(Lock::new());
        let inside = Arc::new(AtomicBool::new(false));
        let data = Arc::new(UnsafeCell::new(0u32));
        let ws: Vec<_> = (0..2)
            .map(|_| {
                let (lock, inside, data) = (lock.clone(), inside.clone(), data.clone());
                thread::spawn(move || {
                    lock.write();
                    assert!(!inside.swap(true, SeqCst));
                    // SAFETY: loom checks this access against the others (a race fails the model).
                    data.with_mut(|p| unsafe { *p += 1 });
                    inside.store(false, SeqCst);
                    // SAFETY: write-locked above.
                    unsafe { lock.unlock_write() };
                })
            })
            .collect();
        for w in ws {
            w.join().unwrap();
        }
        // SAFETY: loom checks this access against the others (a race fails the model).
        assert_eq!(data.with(|p| unsafe { *p }), 2);
    });
}
