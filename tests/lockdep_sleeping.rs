//! lockdep and the sleeping locks: a mutex is a lock class like any other
//! (a cycle through mutexes is reported), its record belongs to the task
//! that holds it (it may migrate and sleep holding it), and `might_sleep`
//! reports spinlocks held but not sleeping locks. Run with
//! `cargo test --features test-hooks,lockdep --test lockdep_sleeping`.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use std::thread;
use std::time::Duration;

use ksync::lock_class;
use ksync::lockdep;
use ksync::mutex::{Mutex, RawMutex};
use ksync::spinlock::{RawTicketLock, TicketMutex};
use ksync::wait::{WaitQueue, might_sleep};

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

fn on_cpu(f: impl FnOnce() + Send) {
    thread::scope(|s| s.spawn(f).join().unwrap());
}

static MA: Mutex<u32> = Mutex::from_raw(RawMutex::with_class(lock_class!("mutex-A")), 0);
static MB: Mutex<u32> = Mutex::from_raw(RawMutex::with_class(lock_class!("mutex-B")), 0);
static SPIN: TicketMutex<u32> =
    TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("spin-S")), 0);

#[test]
fn a_cycle_through_two_mutexes_is_reported() {
    let _s = start();
    on_cpu(|| {
        let _a = MA.lock();
        *MB.lock() += 1;
    });
    no_report();
    on_cpu(|| {
        let _b = MB.lock();
        *MA.lock() += 1;
    });
    let report = one_report();
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(
        report.contains("\"mutex-A\"") && report.contains("\"mutex-B\""),
        "{report}"
    );
}

#[test]
fn a_mutex_holder_may_sleep_and_migrate() {
    let _s = start();
    on_cpu(|| {
        let g = MA.lock();
        might_sleep(); // a sleeping lock held: fine
        thread::sleep(Duration::from_millis(1));
        // The task moves to another CPU while it holds the mutex: its
        // record goes with it (held per task, not per CPU).
        let free = (0..ksync::kernel::MAX_CPUS)
            .rev()
            .find(|&c| c != ksync::kernel::cpu_id())
            .unwrap();
        ksync::host::migrate_to(free);
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(g);
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    no_report();
}

#[test]
fn might_sleep_reports_a_held_spinlock_by_name() {
    let _s = start();
    on_cpu(|| {
        let _g = SPIN.lock();
        might_sleep();
    });
    let report = one_report();
    assert!(report.contains("might_sleep"), "{report}");
    assert!(report.contains("\"spin-S\""), "{report}");
}

#[test]
fn a_wait_under_a_spinlock_is_reported_before_it_sleeps() {
    let _s = start();
    on_cpu(|| {
        let q = WaitQueue::new();
        let _g = SPIN.lock();
        // Reported, then it goes on (the test hooks record reports) and
        // times out at once: the report came before any sleep.
        let _ = q.wait_event_timeout(|| false, Duration::from_millis(1));
    });
    let report = one_report();
    assert!(report.contains("\"spin-S\""), "{report}");
}

#[test]
fn spinlock_inside_a_mutex_is_an_order_like_any_other() {
    let _s = start();
    on_cpu(|| {
        let _m = MB.lock();
        *SPIN.lock() += 1;
    });
    no_report();
    // The other way round is both a wait under a spinlock and a cycle.
    on_cpu(|| {
        let _g = SPIN.lock();
        let inner = MB.try_lock(); // a try-lock: no wait, no new edge
        drop(inner);
    });
    no_report();
}

/// An executor that idles on a ksync wait queue: its waker wakes that
/// queue. Futures waiting on other ksync primitives are woken through it;
/// the wake is made after the primitive's own queue lock is dropped, so
/// it is not a nested lock of the one wait-queue class.
#[test]
fn async_wakes_through_an_executor_on_a_wait_queue_are_not_nested_locks() {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Wake, Waker};

    static IDLE: WaitQueue = WaitQueue::new();
    static READY: AtomicBool = AtomicBool::new(false);
    struct Exec;
    impl Wake for Exec {
        fn wake(self: Arc<Self>) {
            READY.store(true, Ordering::Release);
            IDLE.wake_all();
        }
    }
    let _s = start();
    let sem = ksync::semaphore::Semaphore::new(0);
    let done = ksync::completion::Completion::new();
    let m = Mutex::new(0u32);
    thread::scope(|s| {
        let guard = m.lock();
        s.spawn(|| {
            let waker = Waker::from(Arc::new(Exec));
            let mut cx = Context::from_waker(&waker);
            let mut fut = pin!(async {
                sem.down_async().await;
                done.wait().await;
                *ksync::mutex::lock_async(&m).await += 1;
            });
            while fut.as_mut().poll(&mut cx).is_pending() {
                IDLE.wait_event(|| READY.swap(false, Ordering::Acquire));
            }
        });
        thread::sleep(Duration::from_millis(20));
        sem.up();
        thread::sleep(Duration::from_millis(20));
        done.complete();
        thread::sleep(Duration::from_millis(20));
        drop(guard);
    });
    no_report();
}

/// Runs `sleep` on a fresh thread while a `Mutex` is held and inside the
/// context `enter` opens; the panic message (empty if none).
fn sleep_in_under_mutex(enter: fn() -> Box<dyn std::any::Any>, sleep: fn()) -> String {
    thread::spawn(move || {
        static M: Mutex<u32> = Mutex::new(0);
        let held = M.lock(); // a sleeping lock: allowed across a sleep
        let ctx = enter();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(sleep));
        drop(ctx);
        drop(held);
        match r {
            Ok(()) => String::new(),
            Err(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        }
    })
    .join()
    .unwrap()
}

/// `might_sleep`'s preemption check used to be skipped whenever lockdep
/// counted a held lock ("left to lockdep's report"), but that report
/// covers non-sleeping locks only: a sleep inside `preempt_disable()` or
/// a `PerCpu::get()` reference with a `Mutex` held went unreported. It is
/// skipped now only for held non-sleeping locks.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn a_sleep_with_preemption_disabled_is_reported_while_a_mutex_is_held() {
    let sleeps: [(&str, fn()); 3] = [
        ("Semaphore::down", || {
            ksync::semaphore::Semaphore::new(1).down()
        }),
        ("Mutex::lock", || drop(Mutex::new(0).lock())),
        ("RwSemaphore::write", || {
            drop(ksync::rwsem::RwSemaphore::new(0).write())
        }),
    ];
    for (name, sleep) in sleeps {
        let msg = sleep_in_under_mutex(|| Box::new(ksync::kernel::preempt_disable()), sleep);
        assert!(
            msg.contains("preemption disabled"),
            "{name} inside preempt_disable() with a Mutex held: no might_sleep report ({msg:?})"
        );
        let msg = sleep_in_under_mutex(
            || {
                static P: ksync::percpu::PerCpu<std::sync::atomic::AtomicU32> =
                    ksync::percpu::PerCpu::new();
                Box::new(P.get())
            },
            sleep,
        );
        assert!(
            msg.contains("preemption disabled"),
            "{name} holding a PerCpu::get() reference with a Mutex held: no might_sleep report \
             ({msg:?})"
        );
    }
}
