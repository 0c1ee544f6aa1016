//! The sleeping primitives on the host's scheduler hooks (threads park and
//! unpark): wait queues, completions, semaphores and the sleeping mutex,
//! blocking and async, with more threads than the machine has cores.

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use ksync::completion::Completion;
use ksync::mutex::{Mutex, lock_async};
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

/// Threads per test: more than the 2 cores of the CI machine.
const THREADS: usize = 8;

/// A generous bound that turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

/// Runs `f` on `n` threads and joins them all (failing on a hang).
fn on_threads(n: usize, f: impl Fn(usize) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (f, done) = (f.clone(), done.clone());
            thread::spawn(move || {
                f(i);
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < n {
        assert!(
            start.elapsed() < HANG,
            "threads hung: {} of {n} done",
            done.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(5));
    }
    for h in handles {
        h.join().unwrap();
    }
}

struct ThreadWaker(thread::Thread, AtomicUsize);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.unpark();
    }
}

/// A minimal executor: polls `fut` on this thread, parking between polls.
fn block_on<F: Future>(fut: F) -> F::Output {
    let waker_state = Arc::new(ThreadWaker(thread::current(), AtomicUsize::new(0)));
    let waker = Waker::from(waker_state.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(start.elapsed() < HANG, "future hung");
        thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn wait_event_returns_at_once_when_the_condition_holds() {
    let q = WaitQueue::new();
    q.wait_event(|| true);
    assert!(!q.has_waiters());
    assert_eq!(q.wake_all(), 0);
}

#[test]
fn wait_event_sleeps_until_woken_with_the_condition_true() {
    static Q: WaitQueue = WaitQueue::new();
    static FLAG: AtomicBool = AtomicBool::new(false);
    let waiter = thread::spawn(|| Q.wait_event(|| FLAG.load(Ordering::Acquire)));
    // Wait until it is queued, so the wake really wakes a sleeper.
    let start = Instant::now();
    while !Q.has_waiters() {
        assert!(start.elapsed() < HANG);
        thread::yield_now();
    }
    // A wake with the condition false: the waiter goes back to sleep.
    Q.wake_all();
    thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "woke with the condition false");
    FLAG.store(true, Ordering::Release);
    Q.wake_all();
    waiter.join().unwrap();
}

/// Ping-pong through two wait queues, many rounds, more threads than
/// cores: a lost wake-up hangs (and fails on the bound).
#[test]
fn no_lost_wake_ups_in_a_ping_pong() {
    static TURN: AtomicUsize = AtomicUsize::new(0);
    static Q: WaitQueue = WaitQueue::new();
    const ROUNDS: usize = 2000;
    on_threads(THREADS, |i| {
        for round in 0..ROUNDS {
            let mine = round * THREADS + i;
            Q.wait_event(|| TURN.load(Ordering::Acquire) == mine);
            TURN.store(mine + 1, Ordering::Release);
            Q.wake_all();
        }
    });
    assert_eq!(TURN.load(Ordering::SeqCst), ROUNDS * THREADS);
}

#[test]
fn wake_one_wakes_one_exclusive_waiter_and_every_other_one() {
    static Q: WaitQueue = WaitQueue::new();
    static GO: AtomicBool = AtomicBool::new(false);
    static PASSED: AtomicUsize = AtomicUsize::new(0);
    let exclusive: Vec<_> = (0..3)
        .map(|_| {
            thread::spawn(|| {
                Q.wait_event_exclusive(|| GO.load(Ordering::Acquire));
                PASSED.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let plain: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(|| {
                Q.wait_event(|| GO.load(Ordering::Acquire));
                PASSED.fetch_add(100, Ordering::SeqCst);
            })
        })
        .collect();
    let start = Instant::now();
    // All five queued (each parks once queued; the queue lock is fair).
    loop {
        assert!(start.elapsed() < HANG);
        thread::sleep(Duration::from_millis(20));
        if Q.has_waiters() && PASSED.load(Ordering::SeqCst) == 0 {
            break;
        }
    }
    thread::sleep(Duration::from_millis(50));
    GO.store(true, Ordering::Release);
    assert_eq!(Q.wake_one(), 3, "two non-exclusive + one exclusive");
    for t in plain {
        t.join().unwrap();
    }
    let start = Instant::now();
    while PASSED.load(Ordering::SeqCst) != 201 {
        assert!(start.elapsed() < HANG);
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(Duration::from_millis(30));
    assert_eq!(
        PASSED.load(Ordering::SeqCst),
        201,
        "more than one exclusive waiter woke"
    );
    assert_eq!(Q.wake_n(2), 2);
    for t in exclusive {
        t.join().unwrap();
    }
    assert_eq!(PASSED.load(Ordering::SeqCst), 203);
}

#[test]
fn wait_event_timeout_times_out_and_reports_the_condition() {
    let q = WaitQueue::new();
    let start = Instant::now();
    assert!(!q.wait_event_timeout(|| false, Duration::from_millis(30)));
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert!(!q.has_waiters(), "a timed-out waiter stayed queued");
    assert!(q.wait_event_timeout(|| true, Duration::from_millis(30)));
}

#[test]
fn a_panicking_condition_leaves_the_queue_clean() {
    let q = WaitQueue::new();
    let calls = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        q.wait_event(|| {
            // The first check passes through, the one after queueing panics.
            assert!(calls.fetch_add(1, Ordering::SeqCst) == 0, "boom");
            false
        })
    }));
    assert!(r.is_err());
    assert!(!q.has_waiters(), "the unwound waiter's node stayed queued");
}

#[test]
fn async_waiters_share_the_queue_with_blocked_tasks() {
    static Q: WaitQueue = WaitQueue::new();
    static FLAG: AtomicBool = AtomicBool::new(false);
    let blocked = thread::spawn(|| Q.wait_event(|| FLAG.load(Ordering::Acquire)));
    let asynchronous = thread::spawn(|| block_on(Q.wait_until(|| FLAG.load(Ordering::Acquire))));
    thread::sleep(Duration::from_millis(30));
    FLAG.store(true, Ordering::Release);
    Q.wake_all();
    blocked.join().unwrap();
    asynchronous.join().unwrap();
}

#[test]
fn a_cancelled_async_exclusive_waiter_passes_its_wake_on() {
    let q = WaitQueue::new();
    let flag = AtomicBool::new(false);
    let waker = Waker::from(Arc::new(ThreadWaker(
        thread::current(),
        AtomicUsize::new(0),
    )));
    let mut cx = Context::from_waker(&waker);
    let mut first = Box::pin(q.wait_until_exclusive(|| flag.load(Ordering::Acquire)));
    let mut second = Box::pin(q.wait_until_exclusive(|| flag.load(Ordering::Acquire)));
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert!(second.as_mut().poll(&mut cx).is_pending());
    flag.store(true, Ordering::Release);
    assert_eq!(q.wake_one(), 1); // wakes `first` only
    drop(first); // cancelled before it used the wake
    // `second` was woken in its place and is off the queue.
    assert!(!q.has_waiters(), "the wake was not passed on");
    assert!(second.as_mut().poll(&mut cx).is_ready());
}

#[test]
fn completion_lets_one_waiter_through_per_complete() {
    static C: Completion = Completion::new();
    static THROUGH: AtomicUsize = AtomicUsize::new(0);
    let waiters: Vec<_> = (0..THREADS)
        .map(|_| {
            thread::spawn(|| {
                C.wait_for_completion();
                THROUGH.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(30));
    for n in 1..=3 {
        C.complete();
        let start = Instant::now();
        while THROUGH.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < HANG);
            thread::yield_now();
        }
    }
    thread::sleep(Duration::from_millis(30));
    assert_eq!(THROUGH.load(Ordering::SeqCst), 3);
    C.complete_all();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(THROUGH.load(Ordering::SeqCst), THREADS);
    // complete_all stays done until reinit.
    C.wait_for_completion();
    assert!(C.is_done());
    C.reinit();
    assert!(!C.is_done());
    assert!(!C.try_wait_for_completion());
    assert!(!C.wait_for_completion_timeout(Duration::from_millis(10)));
    C.complete();
    assert!(C.try_wait_for_completion());
    assert!(!C.is_done());
}

#[test]
fn a_complete_before_the_wait_is_kept() {
    let c = Completion::new();
    c.complete();
    c.complete();
    c.wait_for_completion();
    block_on(c.wait());
    assert!(!c.try_wait_for_completion());
}

#[test]
fn semaphore_bounds_the_holders() {
    static S: Semaphore = Semaphore::new(3);
    static INSIDE: AtomicUsize = AtomicUsize::new(0);
    static MAX: AtomicUsize = AtomicUsize::new(0);
    on_threads(THREADS, |_| {
        for _ in 0..500 {
            S.down();
            let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
            MAX.fetch_max(now, Ordering::SeqCst);
            std::hint::spin_loop();
            INSIDE.fetch_sub(1, Ordering::SeqCst);
            S.up();
        }
    });
    assert!(
        MAX.load(Ordering::SeqCst) <= 3,
        "{} inside",
        MAX.load(Ordering::SeqCst)
    );
    assert_eq!(S.count(), 3);
}

#[test]
fn semaphore_timeout_and_try() {
    let s = Semaphore::new(1);
    assert!(s.try_down());
    assert!(!s.try_down());
    let start = Instant::now();
    assert!(!s.down_timeout(Duration::from_millis(20)));
    assert!(start.elapsed() >= Duration::from_millis(20));
    s.up();
    assert!(s.down_timeout(Duration::from_millis(20)));
    s.up();
    assert_eq!(s.count(), 1);
}

#[test]
fn a_cancelled_async_down_gives_a_handed_unit_back() {
    let s = Semaphore::new(0);
    let waker = Waker::from(Arc::new(ThreadWaker(
        thread::current(),
        AtomicUsize::new(0),
    )));
    let mut cx = Context::from_waker(&waker);
    let mut fut = Box::pin(s.down_async());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    s.up(); // handed to the queued future
    assert_eq!(s.count(), 0);
    drop(fut);
    assert_eq!(s.count(), 1, "the handed unit was lost");
}

#[test]
fn mutex_excludes_with_more_threads_than_cores() {
    static M: Mutex<u64> = Mutex::new(0);
    const ITERS: u64 = 20_000;
    on_threads(THREADS, |_| {
        for _ in 0..ITERS {
            let mut g = M.lock();
            // A non-atomic read-modify-write: a lost update shows a
            // broken exclusion.
            let v = *g;
            std::hint::black_box(&mut *g);
            *g = v + 1;
        }
    });
    assert_eq!(*M.lock(), ITERS * THREADS as u64);
}

#[test]
fn mutex_holders_may_sleep() {
    static M: Mutex<u64> = Mutex::new(0);
    on_threads(THREADS, |_| {
        for _ in 0..20 {
            let mut g = M.lock();
            thread::sleep(Duration::from_micros(200));
            *g += 1;
        }
    });
    assert_eq!(*M.lock(), 20 * THREADS as u64);
}

#[test]
fn mutex_try_lock() {
    let m = Mutex::new(1);
    let g = m.lock();
    assert!(m.try_lock().is_none());
    assert!(m.is_locked());
    drop(g);
    assert!(m.try_lock().is_some());
}

#[test]
fn async_and_blocking_lockers_exclude_each_other() {
    static M: Mutex<u64> = Mutex::new(0);
    const ITERS: u64 = 5000;
    on_threads(4, |i| {
        for _ in 0..ITERS {
            if i % 2 == 0 {
                let mut g = M.lock();
                let v = *g;
                *g = std::hint::black_box(v) + 1;
            } else {
                block_on(async {
                    let mut g = lock_async(&M).await;
                    let v = *g;
                    *g = std::hint::black_box(v) + 1;
                });
            }
        }
    });
    assert_eq!(*M.lock(), 4 * ITERS);
}

/// The hand-off: a waiter cannot be starved by a thread that releases
/// and re-takes the lock in a loop. The hog holds it for a while each
/// time, so the waiter sleeps and is woken, and the hog's re-take would
/// win every race without the hand-off.
#[test]
fn a_waiter_is_not_starved_by_a_relocking_hog() {
    static M: Mutex<()> = Mutex::new(());
    static GOT_IT: AtomicBool = AtomicBool::new(false);
    let hog = thread::spawn(|| {
        let start = Instant::now();
        let mut rounds = 0u64;
        while !GOT_IT.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "waiter starved ({rounds} hog rounds)"
            );
            let g = M.lock();
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(300) {
                std::hint::spin_loop();
            }
            drop(g);
            rounds += 1;
        }
    });
    thread::sleep(Duration::from_millis(20));
    let waiter = thread::spawn(|| {
        let _g = M.lock();
        GOT_IT.store(true, Ordering::SeqCst);
    });
    waiter.join().unwrap();
    hog.join().unwrap();
}

#[test]
fn an_interrupt_handler_may_wake_but_not_sleep() {
    static Q: WaitQueue = WaitQueue::new();
    static FLAG: AtomicBool = AtomicBool::new(false);
    let waiter = thread::spawn(|| Q.wait_event(|| FLAG.load(Ordering::Acquire)));
    let start = Instant::now();
    while !Q.has_waiters() {
        assert!(start.elapsed() < HANG);
        thread::yield_now();
    }
    ksync::host::enter_interrupt();
    FLAG.store(true, Ordering::Release);
    Q.wake_all();
    // Sleeping here is refused, with a message that says why.
    let r = std::panic::catch_unwind(|| Q.wait_event(|| false));
    ksync::host::exit_interrupt();
    let msg = r.unwrap_err();
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| msg.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(msg.contains("may not sleep"), "{msg}");
    waiter.join().unwrap();
}

#[test]
fn sleeping_inside_an_rcu_read_section_panics_in_every_build() {
    let s = Semaphore::new(0);
    thread::spawn(move || {
        ksync::rcu::cpu_online();
        let guard = ksync::rcu::read_lock();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.down()));
        drop(guard);
        assert!(
            r.is_err(),
            "a sleeping wait inside a read section was allowed"
        );
        // Outside it, a wait that need not sleep is fine.
        s.up();
        s.down();
        ksync::rcu::cpu_offline();
    })
    .join()
    .unwrap();
}
