//! loom models of the sleeping mutex's `WAITERS` clearing
//! (an unlock that frees the lock clears `WAITERS`; the woken waiter sets
//! it again when it lands). The case not in `tests/loom_wait.rs`: a
//! holder that relocks while a woken waiter is on its way back, and a
//! second waiter that queues meanwhile, so that an unlock runs with
//! `flight` set and a waiter queued (it wakes no one and clears
//! `WAITERS`). A lost wake-up is a deadlock, which loom reports.
//! Not a demonstration: both models pass at the reviewed HEAD (bound 1:
//! 120 s and 17 s in release on the loaded 2-core host); kept as evidence
//! for the review, not in `cargo xtask`'s loom group.
//!
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=1 KSYNC_MAX_CPUS=4 \
//!  CARGO_TARGET_DIR=target/loom cargo test --release --test loom_mutex_handoff`

#![cfg(ksync_loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use ksync::mutex::RawMutex;

struct Locked {
    mutex: RawMutex,
    data: UnsafeCell<usize>,
}

// SAFETY: `data` is accessed only with `mutex` held (the model checks it).
unsafe impl Sync for Locked {}

impl Locked {
    fn locked_bump(&self) {
        self.mutex.lock();
        // SAFETY: the lock is held (what the model checks).
        let v = self.data.with(|d| unsafe { *d });
        thread::yield_now();
        // SAFETY: as above.
        self.data.with_mut(|d| unsafe { *d = v + 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.mutex.unlock() };
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(1, |b| b.min(1)));
    builder.check(f);
}

#[test]
fn a_relocking_hog_and_two_waiters_lose_no_wake() {
    model(|| {
        let l = Arc::new(Locked {
            mutex: RawMutex::new(),
            data: UnsafeCell::new(0),
        });
        let threads: Vec<_> = [2, 1, 1]
            .into_iter()
            .map(|n| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    for _ in 0..n {
                        l.locked_bump();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: every user is joined.
        assert_eq!(l.data.with(|d| unsafe { *d }), 4);
        assert_eq!(
            format!("{:?}", l.mutex),
            "RawMutex { locked: false, waiters: false, handoff: false, woken_in_flight: false, .. }"
        );
    });
}

/// The same with the second waiter a `lock_async` future polled twice and
/// then dropped (ready or not): a woken future cancelled with a relocking
/// holder and a blocking waiter around.
#[test]
fn a_relocking_hog_a_waiter_and_a_cancelled_lock_async_lose_no_wake() {
    use std::future::Future;
    use std::task::{Context, Waker};
    model(|| {
        let l = Arc::new(Locked {
            mutex: RawMutex::new(),
            data: UnsafeCell::new(0),
        });
        let blocking: Vec<_> = [2, 1]
            .into_iter()
            .map(|n| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    for _ in 0..n {
                        l.locked_bump();
                    }
                })
            })
            .collect();
        let canceller = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let mut future = Box::pin(l.mutex.lock_async());
                let mut cx = Context::from_waker(Waker::noop());
                for _ in 0..2 {
                    if future.as_mut().poll(&mut cx).is_ready() {
                        // SAFETY: held (the future is ready).
                        let v = l.data.with(|d| unsafe { *d });
                        // SAFETY: as above.
                        l.data.with_mut(|d| unsafe { *d = v + 1 });
                        // SAFETY: held by this thread's future.
                        unsafe { l.mutex.unlock() };
                        return 1;
                    }
                    thread::yield_now();
                }
                drop(future);
                0
            })
        };
        for t in blocking {
            t.join().unwrap();
        }
        let sections = 3 + canceller.join().unwrap();
        // SAFETY: every user is joined.
        assert_eq!(l.data.with(|d| unsafe { *d }), sections);
        assert_eq!(
            format!("{:?}", l.mutex),
            "RawMutex { locked: false, waiters: false, handoff: false, woken_in_flight: false, .. }"
        );
    });
}
