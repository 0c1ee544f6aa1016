//! `Once` and `Lazy`: spin's own `Once` tests ported to ksync's names,
//! stampedes with more threads than cores, and the misuse that must be
//! reported instead of hanging (recursion, an interrupt on the
//! initialiser, a panicking initialiser with waiters). Every test that
//! could hang runs under a watchdog that turns a hang into a failure.

#![cfg(not(ksync_loom))]

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use ksync::{Lazy, Once};

/// A hang is a failure: the body runs on its own thread, and the test
/// fails if it has not finished within this bound.
const HANG: Duration = Duration::from_secs(60);

/// Runs `f` on a thread of its own; returns its panic message, if any.
/// Panics if it does not end within [`HANG`].
fn watched(f: impl FnOnce() + Send + 'static) -> Option<String> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        let result = panic::catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(result.err().map(|e| message(&*e)));
    });
    rx.recv_timeout(HANG)
        .expect("hung: the misuse was not reported within 60 s")
}

fn message(e: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = e.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        String::from("<non-string panic>")
    }
}

// ---- spin's Once tests, with ksync's names ---------------------------------

#[test]
fn smoke_once() {
    static O: Once = Once::new();
    let mut a = 0;
    O.call_once(|| a += 1);
    assert_eq!(a, 1);
    O.call_once(|| a += 1);
    assert_eq!(a, 1);
}

#[test]
fn smoke_once_value() {
    static O: Once<usize> = Once::new();
    assert_eq!(*O.call_once(|| 1), 1);
    assert_eq!(*O.call_once(|| 2), 1);
}

#[test]
fn stampede_once_more_threads_than_cores() {
    static O: Once<u32> = Once::new();
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let threads = 4 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let v = *O.call_once(|| {
                    RUNS.fetch_add(1, Ordering::Relaxed);
                    // Hold the initialisation long enough that the others
                    // wait (and, oversubscribed, yield to it).
                    thread::sleep(Duration::from_millis(20));
                    7
                });
                assert_eq!(v, 7);
                assert_eq!(O.get(), Some(&7));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(RUNS.load(Ordering::Relaxed), 1);
}

#[test]
fn get() {
    static INIT: Once<usize> = Once::new();
    assert!(INIT.get().is_none());
    INIT.call_once(|| 2);
    assert_eq!(INIT.get().copied(), Some(2));
}

#[test]
fn get_does_not_wait_for_a_running_initialiser() {
    static INIT: Once<usize> = Once::new();
    let (started_tx, started_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let t = thread::spawn(move || {
        INIT.call_once(|| {
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            42
        });
    });
    started_rx.recv().unwrap();
    assert!(INIT.get().is_none());
    assert!(!INIT.is_completed());
    go_tx.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(INIT.get(), Some(&42));
}

#[test]
fn poll() {
    static INIT: Once<usize> = Once::new();
    assert!(INIT.poll().is_none());
    INIT.call_once(|| 3);
    assert_eq!(INIT.poll().copied(), Some(3));
}

#[test]
fn wait() {
    static INIT: Once<usize> = Once::new();
    let t = thread::spawn(|| {
        assert_eq!(*INIT.wait(), 3);
        assert!(INIT.is_completed());
    });
    thread::sleep(Duration::from_millis(5));
    INIT.call_once(|| 3);
    t.join().unwrap();
}

#[test]
fn panic_poisons() {
    static INIT: Once = Once::new();
    assert!(panic::catch_unwind(|| INIT.call_once(|| panic!("boom"))).is_err());
    assert!(INIT.is_poisoned());
    let msg = watched(|| {
        INIT.call_once(|| {});
    })
    .expect("a poisoned Once must panic");
    assert!(msg.contains("poisoned"), "{msg}");
    assert!(msg.contains("Once<()>"), "{msg}");
}

#[test]
fn init_constant() {
    static O: Once = Once::INIT;
    let mut a = 0;
    O.call_once(|| a += 1);
    O.call_once(|| a += 1);
    assert_eq!(a, 1);
}

#[test]
fn try_call_once_err_lets_a_waiter_take_over() {
    let shared = Arc::new((Once::<()>::new(), AtomicU32::new(0)));
    let (tx, rx) = channel();
    let t0 = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (once, called) = &*shared;
            once.try_call_once(|| {
                called.fetch_add(1, Ordering::AcqRel);
                tx.send(()).unwrap();
                thread::sleep(Duration::from_millis(30));
                Err(())
            })
            .unwrap_err();
        })
    };
    let t1 = {
        let shared = shared.clone();
        thread::spawn(move || {
            rx.recv().unwrap();
            let (once, called) = &*shared;
            assert_eq!(called.load(Ordering::Acquire), 1);
            // Waits for the failing initialiser, then runs its own.
            once.call_once(|| {
                called.fetch_add(1, Ordering::AcqRel);
            });
        })
    };
    t0.join().unwrap();
    t1.join().unwrap();
    assert_eq!(shared.1.load(Ordering::Acquire), 2);
    assert!(shared.0.is_completed());
}

#[test]
fn drop_runs_once_and_not_for_uninit() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct D;
    impl Drop for D {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }
    {
        let once = Once::new();
        once.call_once(|| D);
    }
    assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    drop(Once::<D>::new());
    assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    let once = Once::initialized(D);
    let inner = once.into_inner();
    assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    drop(inner);
    assert_eq!(DROPS.load(Ordering::Relaxed), 2);
}

#[test]
fn call_once_runs_once_across_rounds() {
    for _ in 0..20 {
        let share = Arc::new(AtomicUsize::new(0));
        let once = Arc::new(Once::<()>::new());
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (share, once) = (share.clone(), once.clone());
                thread::spawn(move || {
                    once.call_once(|| {
                        share.fetch_add(1, Ordering::SeqCst);
                    });
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(share.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn get_mut_and_debug() {
    let mut once = Once::new();
    assert!(once.get_mut().is_none());
    assert_eq!(format!("{once:?}"), "Once(<uninit>)");
    once.call_once(|| 1u8);
    *once.get_mut().unwrap() = 2;
    assert_eq!(format!("{once:?}"), "Once(2)");
}

// ---- misuse: reported, never a hang ----------------------------------------

#[test]
fn recursion_from_the_initialiser_panics_naming_the_once() {
    static REC: Once<u64> = Once::new();
    let msg = watched(|| {
        REC.call_once(|| *REC.call_once(|| 1) + 1);
    })
    .expect("recursion must panic");
    assert!(msg.contains("recursion"), "{msg}");
    assert!(msg.contains("Once<u64>"), "{msg}");
    assert!(REC.is_poisoned(), "the outer initialiser unwound");
}

#[test]
fn lazy_that_derefs_itself_panics() {
    static SELF_REF: Lazy<u32> = Lazy::new(|| *SELF_REF + 1);
    let msg = watched(|| {
        let _ = *SELF_REF;
    })
    .expect("a self-referential Lazy must panic");
    assert!(msg.contains("Once<u32>"), "{msg}");
}

#[test]
fn interrupt_on_the_initialising_cpu_panics() {
    static IRQ: Once<u8> = Once::new();
    let msg = watched(|| {
        IRQ.call_once(|| {
            // An interrupt arrives on this CPU while it initialises, and
            // its handler wants the same value.
            ksync::host::enter_interrupt();
            let _guard = ExitIrq;
            *IRQ.call_once(|| 2)
        });
    })
    .expect("the handler must panic");
    assert!(msg.contains("interrupt handler"), "{msg}");
}

struct ExitIrq;
impl Drop for ExitIrq {
    fn drop(&mut self) {
        ksync::host::exit_interrupt();
    }
}

#[test]
fn initialiser_preempted_and_migrated_is_waited_for_not_reported() {
    // The initialiser moves to another CPU mid-way; a caller on its old
    // CPU is another task and must wait, not panic.
    static MIG: Once<usize> = Once::new();
    let (started_tx, started_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let t = thread::spawn(move || {
        MIG.call_once(|| {
            let old = ksync::kernel::cpu_id();
            let new = (0..ksync::kernel::MAX_CPUS)
                .rev()
                .find(|&c| c != old)
                .unwrap();
            ksync::host::migrate_to(new);
            started_tx.send(old).unwrap();
            go_rx.recv().unwrap();
            5
        });
    });
    let old = started_rx.recv().unwrap();
    let msg = watched(move || {
        ksync::host::migrate_to(old);
        go_tx.send(()).unwrap();
        assert_eq!(*MIG.call_once(|| 0), 5);
    });
    assert_eq!(msg, None);
    t.join().unwrap();
}

#[test]
fn waiters_on_a_panicking_initialiser_panic_instead_of_spinning() {
    static P: Once<u32> = Once::new();
    static WAITING: AtomicUsize = AtomicUsize::new(0);
    const WAITERS: usize = 6;
    let (go_tx, go_rx) = channel::<()>();
    let (started_tx, started_rx) = channel();
    let init = thread::spawn(move || {
        panic::catch_unwind(AssertUnwindSafe(|| {
            P.call_once(|| {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                panic!("initialiser fails")
            })
        }))
        .is_err()
    });
    started_rx.recv().unwrap();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (tx, rx) = channel();
            thread::spawn(move || {
                let r = panic::catch_unwind(|| {
                    WAITING.fetch_add(1, Ordering::Relaxed);
                    *P.call_once(|| 0)
                });
                let _ = tx.send(r.err().map(|e| message(&*e)));
            });
            rx
        })
        .collect();
    while WAITING.load(Ordering::Relaxed) < WAITERS {
        thread::yield_now();
    }
    thread::sleep(Duration::from_millis(10));
    go_tx.send(()).unwrap();
    assert!(init.join().unwrap());
    for rx in waiters {
        let msg = rx
            .recv_timeout(HANG)
            .expect("a waiter hung on a poisoned Once")
            .expect("a waiter returned a value that was never made");
        assert!(msg.contains("poisoned"), "{msg}");
    }
}

// ---- Lazy ------------------------------------------------------------------

#[test]
fn lazy_static_is_built_once_under_a_stampede() {
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    static TABLE: Lazy<Vec<u32>> = Lazy::new(|| {
        BUILDS.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(10));
        (0..100).collect()
    });
    let threads = 3 * thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let hs: Vec<_> = (0..threads)
        .map(|_| thread::spawn(|| TABLE.iter().sum::<u32>()))
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 4950);
    }
    assert_eq!(BUILDS.load(Ordering::Relaxed), 1);
}

#[test]
fn lazy_with_a_closure_type_and_default() {
    let captured = 5;
    let lazy = Lazy::new(move || captured * 2);
    assert_eq!(Lazy::get(&lazy), None);
    assert_eq!(*lazy, 10);
    let d: Lazy<Vec<u8>> = Lazy::default();
    assert!(d.is_empty());
}

#[test]
fn lazy_panicking_initialiser_poisons() {
    static BAD: Lazy<u8> = Lazy::new(|| panic!("no device"));
    assert!(panic::catch_unwind(|| *BAD).is_err());
    let msg = watched(|| {
        let _ = *BAD;
    })
    .expect("must panic again");
    assert!(msg.contains("poisoned"), "{msg}");
}
