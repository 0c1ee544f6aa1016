//! loom models of the types that replace `spin`'s: `Once` racing
//! initialisers (the value is published by its Release store: loom's
//! `UnsafeCell` inside the `Once` reports a missing happens-before), a
//! failed `try_call_once` handing over to a waiter, `RefCount`'s last
//! decrement ordering the holders' accesses before the free, and the
//! queued rwlock: writer/reader exclusion, the writer's bounded spin
//! (readers whose holds overlap do not starve it: it announces itself
//! after a few tries; a spin without that bound never ends in the model),
//! and the interrupt-reader rule (a reader in interrupt context is
//! admitted while a writer waits; a rule that queued it behind the writer
//! deadlocks the model).
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 KSYNC_MAX_CPUS=4 cargo test --release --test loom_spin`.

#![cfg(ksync_loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use ksync::spinlock::{NoGuard, RawRwSpinLock};
use ksync::{Once, RefCount};

#[test]
fn once_racing_initialisers_run_one_and_publish_its_value() {
    loom::model(|| {
        let once = Arc::new(Once::<usize>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let racers: Vec<_> = (0..2)
            .map(|t| {
                let (once, runs) = (once.clone(), runs.clone());
                thread::spawn(move || {
                    let v = *once.call_once(|| {
                        runs.fetch_add(1, Ordering::Relaxed);
                        10 + t
                    });
                    assert!(v == 10 || v == 11);
                    v
                })
            })
            .collect();
        let seen: Vec<usize> = racers.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(seen[0], seen[1], "two values published");
        assert_eq!(runs.load(Ordering::Relaxed), 1, "initialised twice");
        assert_eq!(once.get(), Some(&seen[0]));
    });
}

#[test]
fn once_get_sees_the_value_or_nothing() {
    loom::model(|| {
        let once = Arc::new(Once::<usize>::new());
        let writer = {
            let once = once.clone();
            thread::spawn(move || {
                once.call_once(|| 7);
            })
        };
        let reader = {
            let once = once.clone();
            thread::spawn(move || {
                if let Some(v) = once.get() {
                    assert_eq!(*v, 7);
                }
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn once_failed_initialiser_hands_over() {
    loom::model(|| {
        let once = Arc::new(Once::<usize>::new());
        let failing = {
            let once = once.clone();
            thread::spawn(move || {
                let _ = once.try_call_once(|| Err::<usize, ()>(()));
            })
        };
        let other = {
            let once = once.clone();
            thread::spawn(move || *once.call_once(|| 3))
        };
        failing.join().unwrap();
        assert_eq!(other.join().unwrap(), 3);
        assert_eq!(once.get(), Some(&3));
    });
}

#[test]
fn refcount_last_decrement_orders_the_free() {
    loom::model(|| {
        let obj = Arc::new((RefCount::new(2), UnsafeCell::new(0u32)));
        let users: Vec<_> = (0..2)
            .map(|t| {
                let obj = obj.clone();
                thread::spawn(move || {
                    if t == 0 {
                        // A holder's last write before it lets go.
                        // SAFETY: loom checks that the free below is ordered
                        // after it.
                        obj.1.with_mut(|p| unsafe { *p = 5 });
                    }
                    if obj.0.dec_and_test() {
                        // "Free": touch the object as its destructor would.
                        // SAFETY: the last reference; loom checks the order.
                        obj.1.with_mut(|p| unsafe { *p = 0 });
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let frees = users
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&freed| freed)
            .count();
        assert_eq!(frees, 1);
    });
}

#[test]
fn rwlock_writer_excludes_readers() {
    loom::model(|| {
        let lock = Arc::new((RawRwSpinLock::<NoGuard>::new(), UnsafeCell::new(0u32)));
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.0.write_lock();
                // SAFETY: held exclusive.
                lock.1.with_mut(|p| unsafe { *p += 1 });
                // SAFETY: held exclusive.
                unsafe { lock.0.write_unlock(()) };
            })
        };
        let reader = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.0.read_lock();
                // SAFETY: held shared.
                let v = lock.1.with(|p| unsafe { *p });
                // SAFETY: held shared.
                unsafe { lock.0.read_unlock(()) };
                v
            })
        };
        writer.join().unwrap();
        assert!(reader.join().unwrap() <= 1);
    });
}

#[test]
fn rwlock_overlapping_readers_do_not_starve_a_writer() {
    loom::model(|| {
        let lock = Arc::new(RawRwSpinLock::<NoGuard>::new());
        let held = Arc::new(AtomicBool::new(false));
        // The readers: each new read is taken before the last one is
        // released (as reads on several CPUs overlap), so the reader count
        // never drops to zero while reads get in. The writer's retries of
        // `0 -> QW_LOCKED` never succeed then; bounded, they end in
        // `QW_WAITING`, which refuses the next read, and the last hold
        // goes. Unbounded, neither side ever stops (loom: too many
        // branches).
        let readers = {
            let (lock, held) = (lock.clone(), held.clone());
            thread::spawn(move || {
                lock.read_lock();
                held.store(true, Ordering::Release);
                while lock.try_read_lock().is_some() {
                    // SAFETY: the older of our two holds.
                    unsafe { lock.read_unlock(()) };
                    thread::yield_now();
                }
                // SAFETY: our last hold.
                unsafe { lock.read_unlock(()) };
            })
        };
        let writer = {
            let (lock, held) = (lock.clone(), held.clone());
            thread::spawn(move || {
                while !held.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                lock.write_lock();
                // SAFETY: held exclusive.
                unsafe { lock.write_unlock(()) };
            })
        };
        readers.join().unwrap();
        writer.join().unwrap();
    });
}

#[test]
fn rwlock_interrupt_reader_is_admitted_while_a_writer_waits() {
    loom::model(|| {
        let lock = Arc::new(RawRwSpinLock::<NoGuard>::new());
        let held = Arc::new(AtomicBool::new(false));
        // The task: holds the lock shared until the writer waits, then an
        // interrupt on its CPU read-locks too. The handler must get in (the
        // task cannot release before the handler returns); queued behind
        // the waiting writer, it would spin for ever (loom: too many
        // branches).
        let task = {
            let (lock, held) = (lock.clone(), held.clone());
            thread::spawn(move || {
                lock.read_lock();
                held.store(true, Ordering::Release);
                // Until the writer waits: then new task-context readers
                // are refused.
                while lock.try_read_lock().is_some() {
                    // SAFETY: the try just succeeded.
                    unsafe { lock.read_unlock(()) };
                    thread::yield_now();
                }
                ksync::host::enter_interrupt();
                lock.read_lock();
                // SAFETY: held shared (the handler's hold).
                unsafe { lock.read_unlock(()) };
                ksync::host::exit_interrupt();
                // SAFETY: held shared (the task's hold).
                unsafe { lock.read_unlock(()) };
            })
        };
        let writer = {
            let (lock, held) = (lock.clone(), held.clone());
            thread::spawn(move || {
                while !held.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                lock.write_lock();
                // SAFETY: held exclusive.
                unsafe { lock.write_unlock(()) };
            })
        };
        task.join().unwrap();
        writer.join().unwrap();
    });
}
