//! Regression tests of the sleeping primitives' review (issue 38): a grant
//! from before `reinit` that came back, a waker called under the queue
//! lock, `might_sleep` blind spots, the mutex hand-off bound, and a wait
//! at thread exit on the host kernel; and of its adversarial review: a
//! `reinit` undone by `complete_all`, a panicking `Waker` in a batch of
//! wakes, a replaced `Waker` dropped under the queue lock, a wait in a
//! thread-local destructor registered before the thread's first ksync
//! call, `ArchIrq` masking unseen by `might_sleep`; and of review 38b: a
//! `complete` after a `reinit` between `complete_all`'s batches given to
//! a waiter `complete_all` released anyway, a timed waiter of
//! `complete_all` that reported a timeout. Each failed before its fix.

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use ksync::completion::Completion;
use ksync::mutex::Mutex;
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

#[path = "common/child.rs"]
mod child;

use child::run_child;

/// A generous bound that turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(NoopWake));
    fut.poll(&mut Context::from_waker(&waker))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Defect 1: an async wait granted by `complete_all` and dropped after
/// `reinit` must not leave the completion done.
#[test]
fn a_grant_from_before_reinit_is_not_given_back() {
    let c = Completion::new();
    {
        let mut wait = pin!(c.wait());
        assert!(poll_once(wait.as_mut()).is_pending());
        c.complete_all(); // grants the queued future
        c.reinit();
        // Dropped without having seen its grant.
    }
    assert!(
        !c.is_done(),
        "a grant of complete_all came back after reinit"
    );
    assert!(!c.try_wait_for_completion());
    // The same with `complete`: that "done" was undone by `reinit` too.
    {
        let mut wait = pin!(c.wait());
        assert!(poll_once(wait.as_mut()).is_pending());
        c.complete();
        c.reinit();
    }
    assert!(!c.is_done(), "a grant of complete came back after reinit");
    // A semaphore has no reinit: a cancelled grant still goes back.
    let s = Semaphore::new(0);
    {
        let mut down = pin!(s.down_async());
        assert!(poll_once(down.as_mut()).is_pending());
        s.up();
    }
    assert_eq!(s.count(), 1);
}

/// A waker that drops the future it wakes (an executor that has shut down
/// drops its tasks).
struct DropOnWake(StdMutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>);

impl Wake for DropOnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let fut = self.0.lock().unwrap().take();
        drop(fut);
    }
}

/// Defect 2 (a): `Waker::wake` is called after the queue lock is dropped,
/// so a waker that drops a waiter of the same queue does not deadlock.
#[test]
fn a_waker_that_drops_its_waiter_does_not_deadlock() {
    static Q: WaitQueue = WaitQueue::new();
    static FLAG: AtomicBool = AtomicBool::new(false);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    thread::spawn(move || {
        let waker_state = Arc::new(DropOnWake(StdMutex::new(None)));
        let waker = Waker::from(waker_state.clone());
        let mut fut: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(Q.wait_until(|| FLAG.load(Ordering::Acquire)));
        assert!(
            fut.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        *waker_state.0.lock().unwrap() = Some(fut);
        FLAG.store(true, Ordering::Release);
        Q.wake_all(); // the waker drops the future, whose drop locks Q
        d.store(true, Ordering::SeqCst);
    });
    let start = Instant::now();
    while !done.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "wake_all deadlocked: the waker ran under the queue lock"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// An async waiter per slot, each counting its wakes.
struct CountWake(AtomicUsize);

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Defect 2: more waiters than one batch of deferred wakes: every one is
/// woken once, in queue order, blocking and async alike.
#[test]
fn wakes_past_one_batch_are_all_done_in_order() {
    static Q: WaitQueue = WaitQueue::new();
    static FLAG: AtomicBool = AtomicBool::new(false);
    static ORDER: StdMutex<Vec<usize>> = StdMutex::new(Vec::new());
    struct Ordered(usize, AtomicUsize);
    impl Wake for Ordered {
        fn wake(self: Arc<Self>) {
            self.1.fetch_add(1, Ordering::SeqCst);
            ORDER.lock().unwrap().push(self.0);
        }
    }
    const N: usize = 40;
    let wakers: Vec<_> = (0..N)
        .map(|i| Arc::new(Ordered(i, AtomicUsize::new(0))))
        .collect();
    let mut futs: Vec<_> = (0..N)
        .map(|_| Box::pin(Q.wait_until(|| FLAG.load(Ordering::Acquire))))
        .collect();
    for (f, w) in futs.iter_mut().zip(&wakers) {
        let waker = Waker::from(w.clone());
        assert!(
            f.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
    }
    FLAG.store(true, Ordering::Release);
    assert_eq!(Q.wake_all(), N);
    for w in &wakers {
        assert_eq!(w.1.load(Ordering::SeqCst), 1, "waiter {} woken", w.0);
    }
    assert_eq!(*ORDER.lock().unwrap(), (0..N).collect::<Vec<_>>());
    assert!(!Q.has_waiters());

    // A semaphore handing out more units than a batch holds, and
    // `complete_all` with more waiters than that.
    let s = Semaphore::new(0);
    let c = Completion::new();
    let counts: Vec<_> = (0..N)
        .map(|_| Arc::new(CountWake(AtomicUsize::new(0))))
        .collect();
    let mut downs: Vec<_> = (0..N).map(|_| Box::pin(s.down_async())).collect();
    let mut waits: Vec<_> = (0..N).map(|_| Box::pin(c.wait())).collect();
    for ((d, w), k) in downs.iter_mut().zip(waits.iter_mut()).zip(&counts) {
        let waker = Waker::from(k.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(d.as_mut().poll(&mut cx).is_pending());
        assert!(w.as_mut().poll(&mut cx).is_pending());
    }
    for _ in 0..N {
        s.up();
    }
    c.complete_all();
    for k in &counts {
        assert_eq!(k.0.load(Ordering::SeqCst), 2);
    }
    for (d, w) in downs.iter_mut().zip(waits.iter_mut()) {
        assert!(poll_once(d.as_mut()).is_ready());
        assert!(poll_once(w.as_mut()).is_ready());
    }
    assert_eq!(s.count(), 0);
    // Blocking waiters past a batch, woken by one wake_all.
    static BQ: WaitQueue = WaitQueue::new();
    static GO: AtomicBool = AtomicBool::new(false);
    static QUEUED: AtomicUsize = AtomicUsize::new(0);
    let threads: Vec<_> = (0..20)
        .map(|_| {
            thread::spawn(|| {
                BQ.wait_event(|| {
                    QUEUED.fetch_add(1, Ordering::SeqCst);
                    GO.load(Ordering::Acquire)
                })
            })
        })
        .collect();
    let start = Instant::now();
    while QUEUED.load(Ordering::SeqCst) < 40 {
        assert!(start.elapsed() < HANG);
        thread::sleep(Duration::from_millis(1));
    }
    GO.store(true, Ordering::Release);
    BQ.wake_all();
    for t in threads {
        t.join().unwrap();
    }
}

/// Runs `f` on a fresh thread and returns its panic message ("" if it
/// did not panic).
fn panic_of(f: impl FnOnce() + Send + 'static) -> String {
    match thread::spawn(move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
        .join()
        .unwrap()
    {
        Ok(()) => String::new(),
        Err(p) => panic_text(&p),
    }
}

/// A sleeping call to try.
type EntryPoint = Box<dyn Fn() + Send + Sync>;

/// Every sleeping entry point, uncontended (each would not need to sleep).
fn entry_points() -> Vec<(&'static str, EntryPoint)> {
    vec![
        (
            "Mutex::lock",
            Box::new(|| {
                let m = Mutex::new(0);
                drop(m.lock());
            }),
        ),
        ("Semaphore::down", Box::new(|| Semaphore::new(1).down())),
        (
            "Semaphore::down_timeout",
            Box::new(|| {
                let _ = Semaphore::new(1).down_timeout(Duration::from_secs(1));
            }),
        ),
        (
            "Completion::wait_for_completion",
            Box::new(|| {
                let c = Completion::new();
                c.complete();
                c.wait_for_completion();
            }),
        ),
        (
            "WaitQueue::wait_event",
            Box::new(|| WaitQueue::new().wait_event(|| true)),
        ),
        (
            "WaitQueue::wait_event_timeout",
            Box::new(|| {
                let _ = WaitQueue::new().wait_event_timeout(|| true, Duration::from_secs(1));
            }),
        ),
        (
            "RwSemaphore::read",
            Box::new(|| {
                let s = ksync::rwsem::RwSemaphore::new(0);
                drop(s.read());
            }),
        ),
        (
            "RwSemaphore::write",
            Box::new(|| {
                let s = ksync::rwsem::RwSemaphore::new(0);
                drop(s.write());
            }),
        ),
        (
            "PerCpuRwSemaphore::read",
            Box::new(|| {
                let s = ksync::percpu_rwsem::PerCpuRwSemaphore::new(0);
                drop(s.read());
            }),
        ),
        (
            "PerCpuRwSemaphore::write",
            Box::new(|| {
                let s = ksync::percpu_rwsem::PerCpuRwSemaphore::new(0);
                drop(s.write());
            }),
        ),
    ]
}

/// Asserts that each entry point panics inside `enter`/`exit`, naming
/// `what` in the message.
fn every_entry_point_refuses(context: &str, enter: fn() -> Box<dyn std::any::Any>, what: &str) {
    for (name, f) in entry_points() {
        let msg = panic_of(move || {
            let guard = enter();
            f();
            drop(guard);
        });
        assert!(
            !msg.is_empty() && msg.contains(what),
            "{name} {context}: expected a panic naming {what:?}, got {msg:?}"
        );
    }
}

/// Defect 3: `might_sleep` on every sleeping entry point, uncontended
/// path included, in debug builds (without lockdep).
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn might_sleep_reports_atomic_contexts_on_the_uncontended_path() {
    struct Irq;
    impl Drop for Irq {
        fn drop(&mut self) {
            ksync::host::exit_interrupt();
        }
    }
    every_entry_point_refuses(
        "in an interrupt handler",
        || {
            ksync::host::enter_interrupt();
            Box::new(Irq)
        },
        "may not sleep",
    );
    every_entry_point_refuses(
        "inside preempt_disable()",
        || Box::new(ksync::kernel::preempt_disable()),
        "preemption disabled",
    );
    every_entry_point_refuses(
        "holding a PerCpu::get() reference",
        || {
            static P: ksync::percpu::PerCpu<std::sync::atomic::AtomicU32> =
                ksync::percpu::PerCpu::new();
            Box::new(P.get())
        },
        "preemption disabled",
    );
    every_entry_point_refuses(
        "holding a spinlock",
        || {
            static S: ksync::spinlock::TicketMutex<u32> = ksync::spinlock::TicketMutex::new(0);
            Box::new(S.lock())
        },
        // With lockdep its report of the held lock comes first.
        if cfg!(feature = "lockdep") {
            "locks held"
        } else {
            "preemption disabled"
        },
    );
    every_entry_point_refuses(
        "with interrupts masked",
        || {
            static S: ksync::spinlock::IrqTicketMutex<u32> =
                ksync::spinlock::IrqTicketMutex::new(0);
            Box::new(S.lock())
        },
        // "ksync: a sleeping wait ...", or lockdep's "ksync lockdep: a
        // sleeping wait ... with locks held", which comes first with it.
        "a sleeping wait",
    );
    // In a call_rcu callback.
    for (name, f) in entry_points() {
        let f: Arc<dyn Fn() + Send + Sync> = Arc::from(f);
        let msg = panic_of(move || {
            ksync::rcu::cpu_online();
            static SEEN: StdMutex<Option<String>> = StdMutex::new(None);
            static F: StdMutex<Option<Arc<dyn Fn() + Send + Sync>>> = StdMutex::new(None);
            *F.lock().unwrap() = Some(f);
            let head = Box::leak(Box::new(ksync::rcu::RcuHead::new()));
            fn cb(_: *mut ksync::rcu::RcuHead) {
                let f = F.lock().unwrap().take().unwrap();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f()));
                *SEEN.lock().unwrap() = Some(match r {
                    Ok(()) => String::new(),
                    Err(p) => panic_text(&p),
                });
            }
            // SAFETY: the head is leaked: valid for ever.
            unsafe { ksync::rcu::call_rcu(head, cb) };
            let start = Instant::now();
            while SEEN.lock().unwrap().is_none() {
                assert!(start.elapsed() < HANG);
                ksync::rcu::quiescent_state();
                ksync::rcu::process_callbacks();
                thread::yield_now();
            }
            ksync::rcu::cpu_offline();
            let seen = SEEN.lock().unwrap().take().unwrap();
            panic!("{seen}");
        });
        assert!(
            msg.contains("call_rcu callback"),
            "{name} in a call_rcu callback: {msg:?}"
        );
    }
}

/// Defect 4: once a waiter reached the front of a mutex's queue, it is
/// woken without the lock at most once (it then asks for the hand-off,
/// and the next unlock makes it the owner), even when woken waiters take
/// a while to run (injected latency after each wake), lockers that
/// spin keep taking the lock meanwhile, and others queue while a woken
/// waiter is on its way back (so that an unlock then has waiters it
/// could wake: it must not, or the second woken waiter may queue at the
/// front ahead of the first and take its hand-off).
#[test]
fn a_mutex_waiter_is_woken_without_the_lock_at_most_once() {
    static M: Mutex<u64> = Mutex::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    // Holds the lock a while asleep (the holder off its CPU: lockers do
    // not spin, they queue and sleep).
    fn hold() {
        static IDLE: Semaphore = Semaphore::new(0);
        assert!(!IDLE.down_timeout(Duration::from_micros(300)));
    }
    const WAITERS: usize = 6;
    const ROUNDS: usize = 15;
    // Lockers that take the lock again and again, spinning for it.
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    let mut g = M.lock();
                    *g += 1;
                    hold();
                    drop(g);
                }
            })
        })
        .collect();
    // A locker that comes every 200 µs, polls a `lock_async` future once
    // and drops it: it takes the lock if it is free, and otherwise queues
    // (setting the bit that sends the next unlock to the queue) and
    // leaves at once, so that there is a queued waiter to wake while a
    // woken one is on its way back.
    let arrivers: Vec<_> = (0..1)
        .map(|_| {
            thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_micros(200));
                    if let Poll::Ready(mut g) = poll_once(pin!(ksync::mutex::lock_async(&M))) {
                        *g += 1;
                    }
                }
            })
        })
        .collect();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            thread::spawn(|| {
                ksync::host::set_wake_latency(Duration::from_millis(5));
                let mut worst = 0;
                for _ in 0..ROUNDS {
                    // No unpark left pending from earlier waits (each
                    // wait's waker is done with this thread when it
                    // returns): every sleep below ends with a wake.
                    thread::park_timeout(Duration::ZERO);
                    let before = ksync::host::blocks();
                    let mut g = M.lock();
                    // Sleeps in this lock: the first ends with a wake at
                    // the front (without the lock, lost to a spinner) or
                    // with the hand-off; after a lost race, the second
                    // ends with the hand-off.
                    worst = worst.max(ksync::host::blocks() - before);
                    *g += 1;
                    hold();
                    drop(g);
                }
                worst
            })
        })
        .collect();
    let start = Instant::now();
    while !waiters.iter().all(|w| w.is_finished()) {
        assert!(start.elapsed() < HANG, "the waiters hung");
        thread::sleep(Duration::from_millis(5));
    }
    STOP.store(true, Ordering::Relaxed);
    let worst: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    for h in hogs.into_iter().chain(arrivers) {
        h.join().unwrap();
    }
    eprintln!("most sleeps in one lock, per waiter: {worst:?}");
    assert!(
        worst.iter().all(|&w| w <= 2),
        "a waiter slept more than twice in one lock (woken without the lock more than once): {worst:?}"
    );
}

/// Defect 5: a thread-local destructor that waits for a contended ksync
/// mutex at thread exit (after the host kernel's own task record is
/// gone) takes it; the process does not abort. Run in a child process:
/// an abort would take the test binary with it. Only where the test
/// binary runs natively: under qemu-user (the aarch64 and riscv64 runs)
/// the child is a foreign binary the kernel cannot exec without the
/// runner (exit 127).
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn a_wait_in_a_thread_local_destructor_at_exit_works() {
    const CHILD: &str = "KSYNC_TEST_TLS_EXIT_CHILD";
    if std::env::var_os(CHILD).is_some() {
        tls_exit_child();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_wait_in_a_thread_local_destructor_at_exit_works",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed ({:?}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("destructor took the mutex"), "{stdout}");
}

static EXIT_MUTEX: Mutex<u32> = Mutex::new(0);

struct LockAtExit;

impl Drop for LockAtExit {
    fn drop(&mut self) {
        *EXIT_MUTEX.lock() += 1;
    }
}

thread_local! {
    static LOCK_AT_EXIT: LockAtExit = const { LockAtExit };
}

fn tls_exit_child() {
    let held = EXIT_MUTEX.lock();
    let t = thread::spawn(|| {
        // The thread's CPU id first (freed last), then this destructor,
        // registered before the host kernel's task record (the first
        // ksync wait below creates it), so run after that is gone.
        let _ = ksync::kernel::cpu_id();
        LOCK_AT_EXIT.with(|_| {});
        let s = Semaphore::new(0);
        let _ = s.down_timeout(Duration::from_millis(1));
    });
    thread::sleep(Duration::from_millis(200)); // the thread is exiting
    drop(held);
    t.join().unwrap();
    assert_eq!(*EXIT_MUTEX.lock(), 1);
    println!("destructor took the mutex");
}

/// Settled: `wake_n(0)` wakes every waiter, as Linux's `wake_up_nr(q, 0)`
/// (an `nr_exclusive` of 0 is no limit), and says how many it woke.
/// (It used to wake only the non-exclusive ones.)
#[test]
fn wake_n_zero_wakes_every_waiter_as_linux() {
    let q = WaitQueue::new();
    let counts: Vec<_> = (0..3)
        .map(|_| Arc::new(CountWake(AtomicUsize::new(0))))
        .collect();
    let mut excl1 = Box::pin(q.wait_until_exclusive(|| false));
    let mut plain = Box::pin(q.wait_until(|| false));
    let mut excl2 = Box::pin(q.wait_until_exclusive(|| false));
    for (i, w) in counts.iter().enumerate() {
        let waker = Waker::from(w.clone());
        let mut cx = Context::from_waker(&waker);
        let pending = match i {
            0 => excl1.as_mut().poll(&mut cx),
            1 => plain.as_mut().poll(&mut cx),
            _ => excl2.as_mut().poll(&mut cx),
        };
        assert!(pending.is_pending());
    }
    assert_eq!(
        q.wake_n(0),
        3,
        "wake_n(0) wakes all, exclusive ones included"
    );
    let woken: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::SeqCst)).collect();
    assert_eq!(woken, [1, 1, 1]);
    assert_eq!(q.wake_n(0), 0, "nobody is left");
    assert!(!q.has_waiters());
}

/// `Semaphore::up` with the count at its limit (`usize::MAX - 1`) panics
/// naming the count and the limit, and leaves the count as it was (it
/// used to drop the unit silently).
#[test]
fn up_past_the_count_limit_panics_naming_it() {
    let s = Semaphore::new(usize::MAX - 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.up()));
    let msg = panic_text(&r.expect_err("an up past the limit panics"));
    assert!(
        msg.contains(&format!("{}", usize::MAX - 1)) && msg.contains("limit"),
        "the panic names the count and the limit: {msg:?}"
    );
    assert_eq!(s.count(), usize::MAX - 1, "the count is left as it was");
    // The semaphore still works.
    assert!(s.try_down());
    s.up();
    assert_eq!(s.count(), usize::MAX - 1);
}

/// Settled: a zero timeout is a try that never sleeps. Each timed wait
/// tries, and at most queues and dequeues again (the deadline is checked
/// before the kernel's `block`); the rw semaphore first spins a bounded
/// while (at most `SPIN_LIMIT` relax rounds) if a running writer holds
/// it. Use the `try_*` forms for no wait at all.
#[test]
fn a_zero_timeout_never_sleeps() {
    let s = Semaphore::new(0);
    let c = Completion::new();
    let q = WaitQueue::new();
    let rw = ksync::rwsem::RwSemaphore::new(0u32);
    let w = rw.write(); // held by this running thread
    thread::scope(|scope| {
        scope
            .spawn(|| {
                let before = ksync::host::blocks();
                let start = Instant::now();
                assert!(!s.down_timeout(Duration::ZERO));
                assert!(!c.wait_for_completion_timeout(Duration::ZERO));
                assert!(!q.wait_event_timeout(|| false, Duration::ZERO));
                assert!(!q.wait_event_exclusive_timeout(|| false, Duration::ZERO));
                assert!(rw.try_read_for(Duration::ZERO).is_none());
                assert!(rw.try_write_for(Duration::ZERO).is_none());
                assert_eq!(ksync::host::blocks(), before, "a zero timeout slept");
                assert!(start.elapsed() < Duration::from_secs(10));
            })
            .join()
            .unwrap();
    });
    drop(w);
    assert!(!q.has_waiters());
    assert_eq!(s.count(), 0);
    assert!(!c.is_done());
}

/// Defect 2, rw semaphore: more readers at the front than one batch of
/// wakes are all granted when the writer leaves (in rounds), each woken
/// once, and the queue is empty after.
#[test]
fn a_writer_release_grants_readers_past_one_batch() {
    const N: usize = 30;
    let rw = ksync::rwsem::RawRwSemaphore::new();
    rw.write();
    let counts: Vec<_> = (0..N)
        .map(|_| Arc::new(CountWake(AtomicUsize::new(0))))
        .collect();
    let mut reads: Vec<_> = (0..N).map(|_| Box::pin(rw.read_async())).collect();
    for (r, k) in reads.iter_mut().zip(&counts) {
        let waker = Waker::from(k.clone());
        assert!(
            r.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
    }
    // SAFETY: held by this test (the write above).
    unsafe { rw.unlock_write() };
    for (i, k) in counts.iter().enumerate() {
        assert_eq!(k.0.load(Ordering::SeqCst), 1, "reader {i} woken");
    }
    for r in reads.iter_mut() {
        assert!(poll_once(r.as_mut()).is_ready());
    }
    assert!(!rw.try_write(), "the readers hold it");
    for _ in 0..N {
        // SAFETY: each granted reader holds a read lock.
        unsafe { rw.unlock_read() };
    }
    assert!(rw.try_write(), "free again, nobody queued");
    // SAFETY: just taken.
    unsafe { rw.unlock_write() };
}

/// Queues nine async waiters on `c` (one more than a batch of wakes), the
/// first with `first` as its waker, runs `complete_all`, and checks that
/// every one of them goes through.
fn complete_all_with_nine_waiters(c: &'static Completion, first: Waker) {
    let noop = Waker::from(Arc::new(NoopWake));
    let mut waits: Vec<Pin<Box<_>>> = (0..9).map(|_| Box::pin(c.wait())).collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &first } else { &noop };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    c.complete_all();
    // Every waiter queued before complete_all goes through, those woken
    // after the first waiter's task ran included.
    for w in &mut waits {
        assert!(w.as_mut().poll(&mut Context::from_waker(&noop)).is_ready());
    }
}

/// `complete_all` wakes in batches, dropping the queue lock between them;
/// a woken task that calls `reinit` meanwhile (the "reuse" pattern) must
/// not be undone: `complete_all` used to store "done for all" again at its
/// end, so the completion was done with no `complete`. The waiters queued
/// before `complete_all` all go through (they were completed).
#[test]
fn a_reinit_between_batches_of_complete_all_is_not_undone() {
    static C: Completion = Completion::new();
    static REINIT_DONE: AtomicBool = AtomicBool::new(false);
    /// The first waiter's task re-arms the completion when woken (here
    /// from the wake itself, as its executor would once it ran).
    struct ReinitOnWake;
    impl Wake for ReinitOnWake {
        fn wake(self: Arc<Self>) {
            if !REINIT_DONE.swap(true, Ordering::SeqCst) {
                C.reinit();
            }
        }
    }
    complete_all_with_nine_waiters(&C, Waker::from(Arc::new(ReinitOnWake)));
    assert!(
        REINIT_DONE.load(Ordering::SeqCst),
        "the first waiter was woken"
    );
    assert!(
        !C.is_done(),
        "complete_all undid a reinit made after it woke the first waiter \
         (done again with no complete)"
    );
    assert!(
        !C.try_wait_for_completion(),
        "a wait after reinit passed with no complete"
    );
}

/// `complete_all` grants every waiter queued when it begins at once,
/// under the lock (as Linux's), and wakes them in batches. A woken task
/// that calls `reinit` and then `complete` between two batches completes
/// the new generation: that `complete` must not go to a waiter of the old
/// generation still queued for its wake (it used to, and the new
/// generation's `complete` was lost).
#[test]
fn a_complete_after_a_reinit_between_batches_of_complete_all_is_not_lost() {
    static C: Completion = Completion::new();
    static REARMED: AtomicBool = AtomicBool::new(false);
    /// The first waiter's task re-arms the completion and completes the
    /// next round (here from the wake itself, as its executor would once
    /// it ran, while `complete_all` is between two batches).
    struct RearmAndComplete;
    impl Wake for RearmAndComplete {
        fn wake(self: Arc<Self>) {
            if !REARMED.swap(true, Ordering::SeqCst) {
                C.reinit();
                C.complete();
            }
        }
    }
    complete_all_with_nine_waiters(&C, Waker::from(Arc::new(RearmAndComplete)));
    assert!(REARMED.load(Ordering::SeqCst), "the first waiter was woken");
    assert!(
        C.try_wait_for_completion(),
        "the complete() made after the reinit went to a waiter of complete_all \
         (queued before the reinit): none left for the new generation"
    );
}

/// The first waiter's executor in
/// [`a_timed_waiter_queued_before_complete_all_does_not_time_out`]: woken
/// in `complete_all`'s first batch, it runs until the timed waiter is back
/// (so `complete_all` is between two batches all that time).
struct SlowExecutor {
    completion: &'static Completion,
    done_seen: AtomicBool,
    rx: StdMutex<mpsc::Receiver<bool>>,
    result: StdMutex<Option<bool>>,
}

impl Wake for SlowExecutor {
    fn wake(self: Arc<Self>) {
        self.done_seen
            .store(self.completion.is_done(), Ordering::SeqCst);
        let got = self.rx.lock().unwrap().recv_timeout(HANG);
        *self.result.lock().unwrap() = got.ok();
    }
}

/// A timed waiter queued before `complete_all`, behind its first batch of
/// wakes, whose deadline passes while `complete_all` is between batches,
/// was completed (granted under the lock when `complete_all` began): its
/// wait says so, as Linux's timed wait looks at `done` when its timeout
/// ends. It used to take itself off the queue and report a timeout while
/// `is_done()` was already true.
#[test]
fn a_timed_waiter_queued_before_complete_all_does_not_time_out() {
    #[cfg(feature = "hostile")]
    ksync::host::hostile::set_enabled(false);
    // The timed waiter must queue before `complete_all` and time out after
    // it began: a loaded machine may miss either, and the attempt is then
    // made again with more time.
    for attempt in 0..4u32 {
        let settle = Duration::from_millis(150) * 2u32.pow(attempt);
        let timeout = Duration::from_millis(500) * 2u32.pow(attempt);
        let c: &'static Completion = Box::leak(Box::new(Completion::new()));
        let (tx, rx) = mpsc::channel::<bool>();
        let slow = Arc::new(SlowExecutor {
            completion: c,
            done_seen: AtomicBool::new(false),
            rx: StdMutex::new(rx),
            result: StdMutex::new(None),
        });
        let first = Waker::from(Arc::clone(&slow));
        let noop = Waker::from(Arc::new(NoopWake));
        // Eight queued async waiters: a full first batch.
        let mut waits: Vec<Pin<Box<_>>> = (0..8).map(|_| Box::pin(c.wait())).collect();
        for (i, w) in waits.iter_mut().enumerate() {
            let waker = if i == 0 { &first } else { &noop };
            assert!(
                w.as_mut()
                    .poll(&mut Context::from_waker(waker))
                    .is_pending()
            );
        }
        // The ninth: a blocked task with a timeout.
        let timed = thread::spawn(move || {
            #[cfg(feature = "hostile")]
            ksync::host::hostile::set_enabled(false);
            let started = Instant::now();
            let got = c.wait_for_completion_timeout(timeout);
            tx.send(got).unwrap();
            (started, ksync::host::blocks())
        });
        thread::sleep(settle);
        let all_began = Instant::now();
        c.complete_all();
        let (started, blocks) = timed.join().unwrap();
        assert!(
            slow.done_seen.load(Ordering::SeqCst),
            "done for all from the first wake on"
        );
        let got = slow
            .result
            .lock()
            .unwrap()
            .expect("the timed waiter returned");
        drop(waits);
        // Blocked (so queued before complete_all: it never queues once
        // the completion is done for all), and its deadline (at least
        // `timeout` after `started`) came after complete_all began.
        if blocks == 0 || all_began >= started + timeout {
            continue;
        }
        assert!(
            got,
            "wait_for_completion_timeout of a waiter queued before complete_all \
             returned 'timed out' while the completion was done for all"
        );
        return;
    }
    panic!("inconclusive: in 4 attempts the timed waiter never queued before complete_all in time");
}

struct PanicOnWake;

impl Wake for PanicOnWake {
    fn wake(self: Arc<Self>) {
        panic!("executor gone");
    }
}

/// A `Waker` that panics in the first batch of `complete_all`'s wakes:
/// the relock used to leave the queue lock released twice (a ticket lock
/// corrupted, here an abort) and the waiters past the batch unwoken. Now
/// the panic reaches the caller, every other waiter is woken and the
/// queue stays usable.
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn a_panicking_waker_past_one_batch_leaves_the_queue_usable() {
    const CHILD: &str = "KSYNC_TEST_PANIC_WAKER_CHILD";
    if std::env::var_os(CHILD).is_some() {
        panicking_waker_child();
        return;
    }
    let (status, stdout, stderr) = run_child(
        "a_panicking_waker_past_one_batch_leaves_the_queue_usable",
        CHILD,
        "1",
        HANG,
    );
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains("queue usable, all woken"),
        "after a Waker panicked in complete_all's first batch, the child failed or hung \
         ({status:?}):\n{stdout}\n{stderr}"
    );
}

fn panicking_waker_child() {
    static C: Completion = Completion::new();
    let bad = Waker::from(Arc::new(PanicOnWake));
    let count = Arc::new(CountWake(AtomicUsize::new(0)));
    let good = Waker::from(count.clone());
    let mut waits: Vec<Pin<Box<_>>> = (0..12).map(|_| Box::pin(C.wait())).collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &bad } else { &good };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| C.complete_all()));
    assert!(
        r.is_err(),
        "the waker's panic reaches complete_all's caller"
    );
    // The queue's lock still works (each of these takes it), on another CPU.
    let t = thread::spawn(move || {
        assert!(C.try_wait_for_completion());
        drop(waits);
        C.complete();
    });
    t.join().unwrap();
    let woken = count.0.load(Ordering::SeqCst);
    println!("woken: {woken}");
    assert!(
        woken >= 11,
        "only {woken} of the 11 other waiters were woken"
    );
    println!("queue usable, all woken");
}

/// A task whose `Waker` owns its future, queued on the same queue (an
/// executor's `Arc<Task>`); its field is only ever dropped.
#[allow(dead_code)]
struct OwningTask(StdMutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>);

impl Wake for OwningTask {
    fn wake(self: Arc<Self>) {}
}

/// Re-polling a queued future with another waker replaces the node's old
/// `Waker`; it used to be dropped under the queue lock, and dropping the
/// last reference to a task drops its future, whose `Drop` takes the same
/// lock (a hang, or a panic under the lock in debug builds). Now the old
/// waker is dropped after the unlock.
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn replacing_a_waker_does_not_drop_it_under_the_queue_lock() {
    const CHILD: &str = "KSYNC_TEST_WAKER_DROP_CHILD";
    if std::env::var_os(CHILD).is_some() {
        waker_drop_child();
        return;
    }
    let (status, stdout, stderr) = run_child(
        "replacing_a_waker_does_not_drop_it_under_the_queue_lock",
        CHILD,
        "1",
        HANG,
    );
    assert!(
        status.is_some_and(|s| s.success())
            && stdout.contains("old waker dropped after the unlock")
            && stdout.contains("mutex: old waker dropped after the unlock"),
        "re-polling with a new waker dropped the old one under the queue lock, and its \
         task's future deadlocked on that lock (None: hung, killed): \
         {status:?}\n{stdout}\n{stderr}"
    );
}

fn waker_drop_child() {
    static Q: WaitQueue = WaitQueue::new();
    let noop = Waker::from(Arc::new(NoopWake));
    // The task's own future, queued on Q.
    let mut other: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(Q.wait_until(|| false));
    assert!(
        other
            .as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    let task = Arc::new(OwningTask(StdMutex::new(Some(other))));
    let old = Waker::from(task.clone());
    drop(task);
    // A future polled first by that task, then with another waker.
    let mut f = Box::pin(Q.wait_until(|| false));
    assert!(f.as_mut().poll(&mut Context::from_waker(&old)).is_pending());
    drop(old); // the node's clone is now the task's last reference
    assert!(
        f.as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    println!("old waker dropped after the unlock");
    // The same through an async `Mutex` waiter (its own poll path).
    static M: Mutex<()> = Mutex::new(());
    let held = M.lock();
    let mut other: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async {
        drop(ksync::mutex::lock_async(&M).await);
    });
    assert!(
        other
            .as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    let task = Arc::new(OwningTask(StdMutex::new(Some(other))));
    let old = Waker::from(task.clone());
    drop(task);
    // SAFETY: the raw lock's future; the guard is not built from it.
    let mut f = Box::pin(unsafe { M.raw() }.lock_async());
    assert!(f.as_mut().poll(&mut Context::from_waker(&old)).is_pending());
    drop(old);
    assert!(
        f.as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    drop(f);
    drop(held);
    println!("mutex: old waker dropped after the unlock");
}

/// A thread-local destructor registered BEFORE the thread's first ksync
/// call runs after the host kernel's per-thread records are torn down; a
/// wait in it (here a contended `Mutex::lock`) used to read the CPU id
/// through a destroyed thread-local: a panic in a destructor, an abort.
/// The host now gives the dying thread a CPU id of its own.
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn a_destructor_registered_before_the_first_ksync_call_takes_a_contended_mutex() {
    const CHILD: &str = "KSYNC_TEST_TLS_FIRST_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let name = "a_destructor_registered_before_the_first_ksync_call_takes_a_contended_mutex";
        let (status, stdout, stderr) = run_child(name, CHILD, "1", HANG);
        assert!(
            status.is_some_and(|s| s.success()) && stdout.contains("destructor took the mutex"),
            "the child failed ({status:?}):\n{stderr}"
        );
        return;
    }
    let held = EXIT_MUTEX.lock();
    let t = thread::spawn(|| {
        LOCK_AT_EXIT.with(|_| {}); // registered first: runs last
        let _ = ksync::kernel::cpu_id();
        let s = Semaphore::new(0);
        let _ = s.down_timeout(Duration::from_millis(1));
    });
    thread::sleep(Duration::from_millis(200)); // the thread is exiting
    drop(held);
    t.join().unwrap();
    assert_eq!(*EXIT_MUTEX.lock(), 1);
    println!("destructor took the mutex");
}

/// The same, uncontended: debug builds' `might_sleep` reads the CPU id
/// even then (an RCU and per-CPU check), which used to abort.
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn a_destructor_registered_before_the_first_ksync_call_takes_a_free_mutex() {
    const CHILD: &str = "KSYNC_TEST_TLS_FIRST_FREE_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let name = "a_destructor_registered_before_the_first_ksync_call_takes_a_free_mutex";
        let (status, stdout, stderr) = run_child(name, CHILD, "1", HANG);
        assert!(
            status.is_some_and(|s| s.success()) && stdout.contains("destructor took the mutex"),
            "the child failed ({status:?}):\n{stderr}"
        );
        return;
    }
    let t = thread::spawn(|| {
        LOCK_AT_EXIT.with(|_| {});
        let _ = ksync::kernel::cpu_id();
    });
    t.join().unwrap();
    assert_eq!(*EXIT_MUTEX.lock(), 1);
    println!("destructor took the mutex");
}

type SweepEntry = fn();

fn sweep_entries() -> Vec<(&'static str, SweepEntry)> {
    vec![
        ("Completion::wait_for_completion_timeout", || {
            let c = Completion::new();
            c.complete();
            let _ = c.wait_for_completion_timeout(Duration::from_secs(1));
        }),
        ("RwSemaphore::try_read_for", || {
            let s = ksync::rwsem::RwSemaphore::new(0);
            drop(s.try_read_for(Duration::from_secs(1)));
        }),
        ("RwSemaphore::try_write_for", || {
            let s = ksync::rwsem::RwSemaphore::new(0);
            drop(s.try_write_for(Duration::from_secs(1)));
        }),
        ("WaitQueue::wait_event_exclusive", || {
            WaitQueue::new().wait_event_exclusive(|| true)
        }),
        ("WaitQueue::wait_event_exclusive_timeout", || {
            let _ = WaitQueue::new().wait_event_exclusive_timeout(|| true, Duration::from_secs(1));
        }),
        ("Semaphore::down", || Semaphore::new(1).down()),
        ("Mutex::lock", || drop(Mutex::new(0).lock())),
    ]
}

type SweepContext = fn() -> Box<dyn std::any::Any>;

fn sweep_contexts() -> Vec<(&'static str, SweepContext)> {
    vec![
        ("rcu::read_lock", || Box::new(ksync::rcu::read_lock())),
        ("preempt_disable", || {
            Box::new(ksync::kernel::preempt_disable())
        }),
        ("TtasMutex held", || {
            static S: ksync::spinlock::TtasMutex<u32> = ksync::spinlock::TtasMutex::new(0);
            Box::new(S.lock())
        }),
        ("RwSpinLock read", || {
            static S: ksync::spinlock::RwSpinLock<u32> = ksync::spinlock::RwSpinLock::new(0);
            Box::new(S.read())
        }),
        ("RwSpinLock write", || {
            static S: ksync::spinlock::RwSpinLock<u32> = ksync::spinlock::RwSpinLock::new(0);
            Box::new(S.write())
        }),
        ("PerCpu::get", || {
            static P: ksync::percpu::PerCpu<AtomicU32> = ksync::percpu::PerCpu::new();
            Box::new(P.get())
        }),
        ("LockRef::lock", || {
            let l: &'static ksync::lockref::LockRef =
                Box::leak(Box::new(ksync::lockref::LockRef::new(1)));
            Box::new(l.lock())
        }),
        ("ArchIrqTicketMutex held", || {
            static S: ksync::spinlock::ArchIrqTicketMutex<u32> =
                ksync::spinlock::ArchIrqTicketMutex::new(0);
            Box::new(S.lock())
        }),
    ]
}

/// Every sleeping entry point (timed and exclusive forms too) panics on
/// the uncontended path in debug builds in every atomic context. Without
/// `lockdep`, a spinlock masking with `ArchIrq` (`ArchIrqTicketMutex`)
/// used to go unreported: ksync counted `ArchIrq` masking only with
/// lockdep, and the host's `irqs_disabled` does not see it.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn every_sleeping_entry_reports_every_atomic_context() {
    let mut missed = Vec::new();
    for (cname, ctx) in sweep_contexts() {
        for (ename, entry) in sweep_entries() {
            let msg = thread::spawn(move || {
                let guard = ctx();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(entry));
                drop(guard);
                match r {
                    Ok(()) => String::new(),
                    Err(p) => panic_text(&p),
                }
            })
            .join()
            .unwrap_or_else(|p| format!("(the thread itself failed: {})", panic_text(&p)));
            if msg.is_empty() {
                missed.push(format!("{ename} in {cname}"));
            }
        }
    }
    assert!(missed.is_empty(), "no might_sleep report for: {missed:?}");
}

/// The same for `wake_all` on a wait queue: a `Waker` that panics in the
/// first batch used to stop the wake there (the queue lock released
/// twice, and the waiters past the batch, here a blocked task among
/// them, left asleep). Now every other waiter is woken, the panic reaches
/// the caller, and the queue stays usable.
#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "spawns itself: not under qemu-user"
)]
fn a_panicking_waker_in_wake_all_wakes_every_other_waiter() {
    const CHILD: &str = "KSYNC_TEST_PANIC_WAKE_ALL_CHILD";
    if std::env::var_os(CHILD).is_some() {
        panicking_wake_all_child();
        return;
    }
    let (status, stdout, stderr) = run_child(
        "a_panicking_waker_in_wake_all_wakes_every_other_waiter",
        CHILD,
        "1",
        HANG,
    );
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains("every other waiter woken"),
        "after a Waker panicked in wake_all's first batch, the child failed or hung \
         ({status:?}):\n{stdout}\n{stderr}"
    );
}

fn panicking_wake_all_child() {
    static Q: WaitQueue = WaitQueue::new();
    static GO: AtomicBool = AtomicBool::new(false);
    static CHECKS: AtomicUsize = AtomicUsize::new(0);
    let bad = Waker::from(Arc::new(PanicOnWake));
    let count = Arc::new(CountWake(AtomicUsize::new(0)));
    let good = Waker::from(count.clone());
    let mut waits: Vec<Pin<Box<_>>> = (0..11)
        .map(|_| Box::pin(Q.wait_until(|| GO.load(Ordering::Acquire))))
        .collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &bad } else { &good };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    // A blocked task, queued last (past the first batch): `wait_event`
    // checks its condition a second time once its node is queued.
    let sleeper = thread::spawn(|| {
        Q.wait_event(|| {
            CHECKS.fetch_add(1, Ordering::SeqCst);
            GO.load(Ordering::Acquire)
        })
    });
    let deadline = Instant::now() + HANG;
    while CHECKS.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the sleeper never queued");
        thread::sleep(Duration::from_millis(1));
    }
    GO.store(true, Ordering::Release);
    let r = std::panic::catch_unwind(|| Q.wake_all());
    assert!(r.is_err(), "the waker's panic reaches wake_all's caller");
    let woken = count.0.load(Ordering::SeqCst);
    assert_eq!(woken, 10, "the 10 other futures were woken");
    // The blocked task was woken too (else this hangs: the parent's
    // watchdog), and the queue's lock works (the sleeper's exit takes it).
    sleeper.join().unwrap();
    drop(waits);
    assert!(!Q.has_waiters());
    assert_eq!(Q.wake_all(), 0);
    println!("every other waiter woken");
}
