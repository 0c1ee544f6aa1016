//! `RwSpinLock` (Linux's queued rwlock): spin's own `RwLock` tests ported
//! to ksync's names, the `lock_api` rw-lock exclusion check on the raw lock
//! with more threads than cores, and qrwlock's rules: a waiting writer
//! holds new readers back, a reader in interrupt context is admitted while
//! a writer only waits (not while one holds the lock), and the guard
//! policies disable what they say. Waits are bounded (a hang fails).

#![cfg(not(ksync_loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ksync::lock_api;
use ksync::spinlock::{IrqRwSpinLock, NoGuard, RawRwSpinLock, RwSpinLock, SpinGuardian};

mod common;
use common::wait_until;

// ---- spin's RwLock tests, with ksync's names --------------------------------

#[test]
fn smoke() {
    let l = RwSpinLock::<()>::new(());
    drop(l.read());
    drop(l.write());
    drop(l.read());
    drop(l.write());
}

/// spin's smoke test also reads twice on one thread: allowed by the lock,
/// and reported by lockdep under Linux's rule for queued rwlocks (a writer
/// waiting between the two reads would deadlock them; see
/// tests/lockdep_rwspinlock.rs), so only without `lockdep`.
#[cfg(not(feature = "lockdep"))]
#[test]
fn two_reads_on_one_cpu() {
    let l = RwSpinLock::<()>::new(());
    drop((l.read(), l.read()));
}

#[test]
fn rw_arc() {
    let arc = Arc::new(RwSpinLock::<isize>::new(0));
    let arc2 = arc.clone();
    let (tx, rx) = channel();
    let t = thread::spawn(move || {
        let mut lock = arc2.write();
        for _ in 0..10 {
            let tmp = *lock;
            *lock = -1;
            thread::yield_now();
            *lock = tmp + 1;
        }
        tx.send(()).unwrap();
    });
    // Readers try to catch the writer in the act.
    let children: Vec<_> = (0..5)
        .map(|_| {
            let arc3 = arc.clone();
            thread::spawn(move || assert!(*arc3.read() >= 0))
        })
        .collect();
    for r in children {
        r.join().unwrap();
    }
    rx.recv().unwrap();
    assert_eq!(*arc.read(), 10);
    t.join().unwrap();
}

#[test]
fn rw_access_in_unwind() {
    let arc = Arc::new(RwSpinLock::<isize, NoGuard>::new(1));
    let arc2 = arc.clone();
    let _ = thread::spawn(move || {
        struct Unwinder {
            i: Arc<RwSpinLock<isize, NoGuard>>,
        }
        impl Drop for Unwinder {
            fn drop(&mut self) {
                *self.i.write() += 1;
            }
        }
        let _u = Unwinder { i: arc2 };
        panic!();
    })
    .join();
    assert_eq!(*arc.read(), 2);
}

#[test]
fn rwlock_unsized() {
    let rw: &RwSpinLock<[i32]> = &RwSpinLock::new([1, 2, 3]);
    {
        let b = &mut *rw.write();
        b[0] = 4;
        b[2] = 5;
    }
    assert_eq!(&*rw.read(), &[4, 2, 5][..]);
}

#[test]
fn try_write_and_try_read() {
    let lock = RwSpinLock::<isize>::new(0);
    let read_guard = lock.read();
    assert!(
        lock.try_write().is_none(),
        "try_write succeeded while read-locked"
    );
    drop(read_guard);
    let w = lock.write();
    assert!(lock.try_read().is_none());
    drop(w);
    assert!(lock.try_read().is_some());
}

#[test]
fn into_inner_and_drop() {
    struct Foo(Arc<AtomicUsize>);
    impl Drop for Foo {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let num_drops = Arc::new(AtomicUsize::new(0));
    let m = RwSpinLock::<Foo>::new(Foo(num_drops.clone()));
    assert_eq!(num_drops.load(Ordering::SeqCst), 0);
    {
        let _inner = m.into_inner();
        assert_eq!(num_drops.load(Ordering::SeqCst), 0);
    }
    assert_eq!(num_drops.load(Ordering::SeqCst), 1);
    drop(RwSpinLock::<Foo>::new(Foo(num_drops.clone())));
    assert_eq!(num_drops.load(Ordering::SeqCst), 2);
}

#[test]
fn upgrade_downgrade() {
    let m = RwSpinLock::<()>::new(());
    {
        let _r = m.read();
        let upg = m.try_upgradeable_read().unwrap();
        // As lock_api's (parking_lot's) upgradeable read, not spin's:
        // plain readers still get in; writers do not.
        assert!(m.try_read().is_some());
        assert!(m.try_write().is_none());
        assert!(m.try_upgradeable_read().is_none());
        assert!(upg.try_upgrade().is_err());
    }
    {
        let w = m.write();
        assert!(m.try_upgradeable_read().is_none());
        let _r = w.downgrade();
        assert!(m.try_upgradeable_read().is_some());
        assert!(m.try_read().is_some());
        assert!(m.try_write().is_none());
    }
    {
        let _u = m.upgradeable_read();
        assert!(m.try_upgradeable_read().is_none());
    }
    assert!(m.try_upgradeable_read().unwrap().try_upgrade().is_ok());
    assert!(!m.is_locked());
}

// ---- lock_api, and stress with more threads than cores ----------------------

#[test]
fn lock_api_rwlock_exclusion_oversubscribed() {
    let lock: lock_api::RwLock<RawRwSpinLock, (u64, u64)> = lock_api::RwLock::new((0, 0));
    let threads = 4 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    common::check_rwlock_exclusion(&lock, threads, 400, 5, false);
}

#[test]
fn lock_api_upgradable_and_downgrade() {
    let lock: lock_api::RwLock<RawRwSpinLock, u32> = lock_api::RwLock::new(1);
    let up = lock.upgradable_read();
    assert_eq!(*lock.read(), 1);
    let mut w = lock_api::RwLockUpgradableReadGuard::upgrade(up);
    *w = 2;
    let r = lock_api::RwLockWriteGuard::downgrade(w);
    assert_eq!(*r, 2);
    assert!(lock.try_read().is_some());
    drop(r);
    assert!(!lock.is_locked());
}

#[test]
fn upgraders_and_writers_stress_oversubscribed() {
    let lock = RwSpinLock::<(u64, u64)>::new((0, 0));
    let threads = 3 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let writes = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..threads {
            let (lock, writes) = (&lock, &writes);
            s.spawn(move || {
                for i in 0..300 {
                    match (i + t) % 4 {
                        0 => {
                            let mut g = lock.write();
                            g.0 += 1;
                            g.1 += 1;
                            writes.fetch_add(1, Ordering::Relaxed);
                        }
                        1 => {
                            let up = lock.upgradeable_read();
                            assert_eq!(up.0, up.1);
                            let mut g = up.upgrade();
                            g.0 += 1;
                            g.1 += 1;
                            writes.fetch_add(1, Ordering::Relaxed);
                            let r = g.downgrade();
                            assert_eq!(r.0, r.1);
                        }
                        _ => {
                            let g = lock.read();
                            assert_eq!(g.0, g.1);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(lock.read().0, writes.load(Ordering::Relaxed) as u64);
}

// ---- qrwlock's rules ----------------------------------------------------------

/// Starts a writer on its own thread while `lock` is read-held, and
/// returns once it waits (new `try_read`s fail: `QW_WAITING` is set).
fn waiting_writer<G: SpinGuardian>(
    lock: &'static RwSpinLock<u32, G>,
    order: &'static Mutex<Vec<&'static str>>,
) -> thread::JoinHandle<()> {
    let h = thread::spawn(move || {
        let mut g = lock.write();
        order.lock().unwrap().push("writer");
        *g += 1;
    });
    wait_until("the writer to wait", || lock.try_read().is_none());
    h
}

#[test]
fn a_waiting_writer_holds_new_readers_back() {
    static LOCK: RwSpinLock<u32> = RwSpinLock::new(0);
    static ORDER: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let first = LOCK.read();
    let writer = waiting_writer(&LOCK, &ORDER);
    let reader_in = Arc::new(AtomicBool::new(false));
    let late_reader = {
        let reader_in = reader_in.clone();
        thread::spawn(move || {
            let g = LOCK.read();
            reader_in.store(true, Ordering::SeqCst);
            ORDER.lock().unwrap().push("late reader");
            assert_eq!(*g, 1, "the late reader came in before the writer");
        })
    };
    thread::sleep(Duration::from_millis(50));
    assert!(
        !reader_in.load(Ordering::SeqCst),
        "a new reader overtook a waiting writer (a reader-preferring lock)"
    );
    drop(first);
    writer.join().unwrap();
    late_reader.join().unwrap();
    assert_eq!(*ORDER.lock().unwrap(), ["writer", "late reader"]);
}

#[test]
fn overlapping_readers_do_not_starve_a_writer() {
    // Two reader threads, each taking its next read before it releases
    // the last (`try_read`, so that no thread waits while it holds a
    // read): the reader count never drops to zero while reads get in. A
    // writer only ever retrying `0 -> QW_LOCKED` would wait for ever; the
    // bounded retries end in `QW_WAITING`, the readers' next tries fail,
    // they let go, and the writer gets in.
    static LOCK: RwSpinLock<u32, NoGuard> = RwSpinLock::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    static READS: AtomicUsize = AtomicUsize::new(0);
    let readers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(|| {
                while !STOP.load(Ordering::SeqCst) {
                    let mut held = LOCK.read();
                    while !STOP.load(Ordering::SeqCst) {
                        match LOCK.try_read() {
                            Some(next) => held = next,
                            None => break,
                        }
                        READS.fetch_add(1, Ordering::SeqCst);
                    }
                    drop(held);
                }
            })
        })
        .collect();
    // Both readers overlapping first.
    wait_until("the readers to overlap", || {
        READS.load(Ordering::SeqCst) > 1000 && LOCK.reader_count() >= 2
    });
    let (tx, rx) = channel();
    let writer = thread::spawn(move || {
        *LOCK.write() += 1;
        tx.send(()).unwrap();
    });
    let got_in = rx.recv_timeout(Duration::from_secs(20));
    STOP.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    got_in.expect("a writer starved behind readers whose holds overlap");
    assert_eq!(*LOCK.read(), 1);
}

#[test]
fn an_interrupt_reader_is_admitted_while_a_writer_waits() {
    // Read in interrupt handlers, so written with interrupts masked (with
    // them enabled, lockdep reports the lock: a handler's read on the
    // writer's CPU would wait for it for ever).
    static LOCK: IrqRwSpinLock<u32> = IrqRwSpinLock::new(0);
    static ORDER: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let first = LOCK.read();
    let writer = waiting_writer(&LOCK, &ORDER);
    // An interrupt handler on another CPU (or on the writer's: same rule)
    // read-locks: it must get in at once, before the writer.
    let (tx, rx) = channel();
    thread::spawn(move || {
        ksync::host::enter_interrupt();
        let v = *LOCK.read();
        ksync::host::exit_interrupt();
        ORDER.lock().unwrap().push("irq reader");
        tx.send(v).unwrap();
    });
    let seen = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("an interrupt-context reader waited behind a waiting writer");
    assert_eq!(seen, 0);
    drop(first);
    writer.join().unwrap();
    assert_eq!(*ORDER.lock().unwrap(), ["irq reader", "writer"]);
}

#[test]
fn an_interrupt_reader_waits_while_a_writer_holds() {
    // Written with interrupts masked, as above.
    static LOCK: IrqRwSpinLock<u32> = IrqRwSpinLock::new(0);
    let w = LOCK.write();
    let got_in = Arc::new(AtomicBool::new(false));
    let h = {
        let got_in = got_in.clone();
        thread::spawn(move || {
            ksync::host::enter_interrupt();
            let v = *LOCK.read();
            ksync::host::exit_interrupt();
            got_in.store(true, Ordering::SeqCst);
            v
        })
    };
    thread::sleep(Duration::from_millis(50));
    assert!(
        !got_in.load(Ordering::SeqCst),
        "a reader was admitted while a writer held the lock"
    );
    drop(w);
    assert_eq!(h.join().unwrap(), 0);
}

#[test]
fn policies_disable_what_they_say() {
    static IRQ: IrqRwSpinLock<u8> = IrqRwSpinLock::new(0);
    static PRE: RwSpinLock<u8> = RwSpinLock::new(0);
    static NONE: RwSpinLock<u8, NoGuard> = RwSpinLock::new(0);
    assert!(!ksync::host::irqs_disabled());
    {
        let _r = IRQ.read();
        assert!(ksync::host::irqs_disabled());
    }
    assert!(!ksync::host::irqs_disabled());
    {
        let w = IRQ.write();
        assert!(ksync::host::irqs_disabled());
        let r = w.downgrade();
        assert!(ksync::host::irqs_disabled());
        drop(r);
    }
    assert!(!ksync::host::irqs_disabled());
    let base = ksync::host::preempt_count();
    {
        // Upgradeable first, then a read on the same CPU: safe (no
        // writer gets past the upgradeable holder), and not reported by
        // lockdep. (The other order can deadlock behind a queued writer.)
        let u = PRE.upgradeable_read();
        assert_eq!(ksync::host::preempt_count(), base + 1);
        let _r = PRE.read();
        let u = u.try_upgrade().unwrap_err();
        assert_eq!(ksync::host::preempt_count(), base + 2);
        drop(u);
    }
    assert_eq!(ksync::host::preempt_count(), base);
    {
        let _w = NONE.write();
        assert_eq!(ksync::host::preempt_count(), base);
    }
}

/// Runs `f` on a thread of its own and returns its panic message; fails
/// (after 60 s) if it hangs, with `what`, or if it does not panic.
#[cfg(debug_assertions)]
fn panic_of(what: &str, f: impl FnOnce() + Send + 'static) -> String {
    let (tx, rx) = channel();
    thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let msg = r.err().map(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        });
        let _ = tx.send(msg);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("hung: {what} was not reported"))
        .expect("no panic")
}

/// Debug builds: a CPU that would wait for its own write hold panics
/// instead of spinning for ever (lockdep, when on, reports it first).
#[cfg(debug_assertions)]
#[test]
fn waiting_for_my_own_write_hold_panics() {
    static W: RwSpinLock<u8> = RwSpinLock::new(0);
    let read = panic_of("waiting for its own write hold", || {
        let _w = W.write();
        let _r = W.read();
    });
    assert!(read.contains("recursi"), "{read}");
    static W2: RwSpinLock<u8> = RwSpinLock::new(0);
    let write = panic_of("waiting for its own write hold", || {
        let _w = W2.write();
        let _w2 = W2.write();
    });
    assert!(write.contains("recursi"), "{write}");
}

/// Debug builds: an upgradeable holder that takes the same lock again,
/// upgradeable or for writing, would wait for its own hold (it keeps the
/// queue, and its reader's bias keeps writers out): it panics instead of
/// spinning for ever, as a write holder that waits for itself does.
#[cfg(debug_assertions)]
#[test]
fn an_upgradeable_holder_taking_the_lock_again_panics() {
    static U1: RwSpinLock<u8> = RwSpinLock::new(0);
    let again = panic_of("an upgradeable holder waiting for itself", || {
        let _u = U1.upgradeable_read();
        let _u2 = U1.upgradeable_read();
    });
    // (With lockdep, its recursion report comes first.)
    let upgradeable = |msg: &str| cfg!(feature = "lockdep") || msg.contains("upgradeable");
    assert!(again.contains("recursi") && upgradeable(&again), "{again}");
    static U2: RwSpinLock<u8> = RwSpinLock::new(0);
    let write = panic_of("an upgradeable holder waiting for itself", || {
        let _u = U2.upgradeable_read();
        let _w = U2.write();
    });
    assert!(write.contains("recursi") && upgradeable(&write), "{write}");
    // Its own reads never wait: still allowed. And the lock is usable
    // again once the holder let go (the record is cleared by every way
    // out: unlock, upgrade, downgrade).
    static U3: RwSpinLock<u8> = RwSpinLock::new(0);
    let up = U3.upgradeable_read();
    assert_eq!(*U3.read(), 0);
    *up.upgrade() += 1;
    let up = U3.upgradeable_read();
    drop(up.downgrade());
    drop(U3.upgradeable_read());
    let up = U3.upgradeable_read();
    let w = up.try_upgrade().ok().unwrap();
    drop(w);
    drop(U3.upgradeable_read());
    drop(U3.write());
}
