//! The sleeping reader-writer semaphores on the host's scheduler hooks:
//! [`RwSemaphore`] and the scalable [`PerCpuRwSemaphore`], blocking and
//! async, with more threads than the machine has cores. Holders sleep
//! (`thread::sleep`) inside their sections; per-CPU readers migrate.
//!
//! Grace periods (the per-CPU semaphore's gate): these threads never call
//! `rcu::cpu_online`, so RCU does not watch them and a writer's grace
//! period ends at once (see `ksync::percpu_rwsem`, "Grace periods in the
//! host test kernel").

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::channel;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use ksync::lock_api::{RawRwLock, RwLock, RwLockWriteGuard};
use ksync::percpu_rwsem::PerCpuRwSemaphore;
use ksync::rwsem::{RwSemaphore, read_async, write_async};

mod common;

/// Threads per test: more than the 2 cores of the CI machine.
const THREADS: usize = 8;

/// A generous bound that turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn waker() -> Waker {
    Waker::from(Arc::new(ThreadWaker(thread::current())))
}

/// A minimal executor: polls `fut` on this thread, parking between polls.
fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = waker();
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

/// Waits for `cond` (sleeping a little between looks); panics after
/// [`HANG`] naming `what`.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG, "hung waiting for {what}");
        thread::sleep(Duration::from_micros(200));
    }
}

/// Joins `handle`, failing (not hanging) if it does not finish in
/// [`HANG`]; a panic in it goes on here.
fn join<T>(handle: thread::JoinHandle<T>, what: &str) -> T {
    wait_for(what, || handle.is_finished());
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs a test body on a thread of its own, so that a hang (a broken
/// lock, its threads stuck in a scope) fails after [`HANG`] instead.
fn bounded(body: impl FnOnce() + Send + 'static) {
    join(thread::spawn(body), "the test body");
}

/// Runs `f` on a thread and returns its result, failing if it does not
/// return within [`HANG`] (for calls that must not wait).
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what} did not return"))
}

// ---- what both locks must do ----------------------------------------------

/// Writers against readers against writers, 8 threads: a writer-active
/// flag and a reader count never seen together, the protected pair equal,
/// and every write (a non-atomic read-modify-write) counted.
fn excludes<R: RawRwLock + Sync>(lock: &RwLock<R, (u64, u64)>) {
    let iters = if cfg!(debug_assertions) {
        2_000
    } else {
        10_000
    };
    common::check_rwlock_exclusion(lock, THREADS, iters, 8, false);
}

#[test]
fn rwsem_excludes() {
    bounded(|| excludes(&RwSemaphore::new((0, 0))));
}

#[test]
fn percpu_rwsem_excludes() {
    bounded(|| excludes(&PerCpuRwSemaphore::new((0, 0))));
}

/// Sections that sleep: readers and writers alike hold the lock across
/// `thread::sleep`, with the same checks.
fn sections_may_sleep<R: RawRwLock + Sync>(lock: &RwLock<R, (u64, u64)>) {
    let writer_in = AtomicBool::new(false);
    let readers_in = AtomicUsize::new(0);
    let max_readers = AtomicUsize::new(0);
    let writes = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (writer_in, readers_in, max_readers, writes) =
                (&writer_in, &readers_in, &max_readers, &writes);
            s.spawn(move || {
                for i in 0..40 {
                    if (i + t) % 5 == 0 {
                        let mut g = lock.write();
                        assert!(!writer_in.swap(true, SeqCst), "two writers");
                        assert_eq!(readers_in.load(SeqCst), 0, "a writer with readers");
                        let v = g.0;
                        thread::sleep(Duration::from_micros(300));
                        g.0 = v + 1;
                        g.1 += 1;
                        writes.fetch_add(1, SeqCst);
                        writer_in.store(false, SeqCst);
                    } else {
                        let g = lock.read();
                        let n = readers_in.fetch_add(1, SeqCst) + 1;
                        max_readers.fetch_max(n, SeqCst);
                        assert!(!writer_in.load(SeqCst), "a reader with a writer");
                        thread::sleep(Duration::from_micros(300));
                        assert_eq!(g.0, g.1);
                        assert!(!writer_in.load(SeqCst), "a reader with a writer");
                        readers_in.fetch_sub(1, SeqCst);
                    }
                }
            });
        }
    });
    let g = lock.read();
    assert_eq!(g.0 as usize, writes.load(SeqCst));
    assert_eq!(g.0, g.1);
}

#[test]
fn rwsem_sections_may_sleep() {
    bounded(|| sections_may_sleep(&RwSemaphore::new((0, 0))));
}

#[test]
fn percpu_rwsem_sections_may_sleep() {
    bounded(|| sections_may_sleep(&PerCpuRwSemaphore::new((0, 0))));
}

/// Readers share: all 8 inside at once (each waits, holding its read lock
/// and sleeping, until it sees the other 7 inside; a lock that let one
/// reader in at a time would hang here).
fn readers_share<R: RawRwLock + Sync>(lock: &RwLock<R, u32>) {
    let inside = AtomicUsize::new(0);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let g = lock.read();
                    inside.fetch_add(1, SeqCst);
                    wait_for("all readers inside", || inside.load(SeqCst) == THREADS);
                    assert_eq!(*g, 7);
                })
            })
            .collect();
        for h in handles {
            wait_for("a reader", || h.is_finished());
        }
    });
}

#[test]
fn rwsem_readers_share() {
    bounded(|| readers_share(&RwSemaphore::new(7)));
}

#[test]
fn percpu_rwsem_readers_share() {
    bounded(|| readers_share(&PerCpuRwSemaphore::new(7)));
}

/// The batch: readers queued behind a writer all get in together when it
/// leaves (each waits, holding its read lock, for all the others).
fn queued_readers_go_in_together<R: RawRwLock + Sync>(lock: &RwLock<R, u32>) {
    const QUEUED: usize = THREADS - 1;
    let inside = AtomicUsize::new(0);
    let started = AtomicUsize::new(0);
    thread::scope(|s| {
        let w = lock.write();
        let handles: Vec<_> = (0..QUEUED)
            .map(|_| {
                s.spawn(|| {
                    started.fetch_add(1, SeqCst);
                    let g = lock.read();
                    inside.fetch_add(1, SeqCst);
                    wait_for("all queued readers inside", || {
                        inside.load(SeqCst) == QUEUED
                    });
                    assert_eq!(*g, 1);
                })
            })
            .collect();
        wait_for("the readers to start", || started.load(SeqCst) == QUEUED);
        thread::sleep(Duration::from_millis(30));
        assert_eq!(inside.load(SeqCst), 0, "a reader beside the writer");
        let mut w = w;
        *w = 1;
        drop(w);
        for h in handles {
            wait_for("a reader", || h.is_finished());
        }
    });
}

#[test]
fn rwsem_queued_readers_go_in_together() {
    bounded(|| queued_readers_go_in_together(&RwSemaphore::new(0)));
}

#[test]
fn percpu_rwsem_queued_readers_go_in_together() {
    bounded(|| queued_readers_go_in_together(&PerCpuRwSemaphore::new(0)));
}

/// A writer waits for the readers inside, and readers arriving while it
/// waits wait for it (and get in after it).
fn writer_waits_for_readers_and_blocks_new_ones<R: RawRwLock + Sync + 'static>(
    lock: &'static RwLock<R, u32>,
) {
    let reader = lock.read();
    let writer = thread::spawn(move || *lock.write() += 1);
    // The writer is waiting (a try_read fails once it is: it either queued
    // or closed the gate and blocks readers).
    wait_for("the writer to wait", || match lock.try_read() {
        Some(g) => {
            drop(g);
            false
        }
        None => true,
    });
    let late = thread::spawn(move || *lock.read());
    thread::sleep(Duration::from_millis(50));
    assert!(
        !writer.is_finished(),
        "the writer did not wait for the reader"
    );
    assert!(!late.is_finished(), "a reader overtook the waiting writer");
    drop(reader);
    join(writer, "the writer");
    assert_eq!(
        join(late, "the late reader"),
        1,
        "the late reader went first"
    );
}

#[test]
fn rwsem_writer_waits_for_readers_and_blocks_new_ones() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    writer_waits_for_readers_and_blocks_new_ones(&LOCK);
}

#[test]
fn percpu_rwsem_writer_waits_for_readers_and_blocks_new_ones() {
    static LOCK: PerCpuRwSemaphore<u32> = PerCpuRwSemaphore::new(0);
    writer_waits_for_readers_and_blocks_new_ones(&LOCK);
}

/// `try_read` and `try_write` never wait: each runs while the other side
/// holds the lock and sleeps (until told to let go), so one that waited
/// would never return.
fn tries_never_wait<R: RawRwLock + Sync + 'static>(lock: &'static RwLock<R, u32>) {
    // A reader holds it and sleeps.
    let (release_tx, release_rx) = channel::<()>();
    let (held_tx, held_rx) = channel::<()>();
    let holder = thread::spawn(move || {
        let _g = lock.read();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap(); // sleeps holding the read lock
    });
    held_rx.recv_timeout(HANG).unwrap();
    assert!(
        returns("try_write against a sleeping reader", move || lock
            .try_write()
            .is_none()),
        "try_write got in beside a reader"
    );
    assert!(!holder.is_finished());
    release_tx.send(()).unwrap();
    join(holder, "the reader");

    // A writer holds it and sleeps.
    let (release_tx, release_rx) = channel::<()>();
    let (held_tx, held_rx) = channel::<()>();
    let holder = thread::spawn(move || {
        let _g = lock.write();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    held_rx.recv_timeout(HANG).unwrap();
    assert!(returns("try_read against a sleeping writer", move || lock
        .try_read()
        .is_none()));
    assert!(returns("try_write against a sleeping writer", move || lock
        .try_write()
        .is_none()));
    release_tx.send(()).unwrap();
    join(holder, "the writer");
    assert!(lock.try_read().is_some());
}

#[test]
fn rwsem_tries_never_wait() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    tries_never_wait(&LOCK);
    assert!(LOCK.try_write().is_some(), "free, and nobody waits");
}

#[test]
fn percpu_rwsem_tries_never_wait() {
    static LOCK: PerCpuRwSemaphore<u32> = PerCpuRwSemaphore::new(0);
    tries_never_wait(&LOCK);
}

// ---- no writer starvation, and the control that shows the test can fail --

/// How long a reader of the stream holds on once the next reader is
/// inside `read()` without getting in (queued behind the writer).
const PASS_ON: Duration = Duration::from_millis(250);

/// A writer against a continuous stream of readers that always overlap:
/// six reader threads take the read lock in turn, round a ring, and each
/// one holds it (sleeping) until the next one is inside, so the lock is
/// never free of readers. The holder lets go without a successor inside
/// only once the successor has been in its `read()` call for [`PASS_ON`]
/// (blocked: a lock that keeps new readers out for a waiting writer),
/// never because the successor was slow to be scheduled. Whether one
/// writer got in within `bound`.
fn writer_gets_in_under_a_reader_stream<R: RawRwLock + Sync>(
    lock: &RwLock<R, u64>,
    bound: Duration,
) -> bool {
    const READERS: usize = 6;
    let turn = AtomicUsize::new(0);
    // `read()` calls begun, and readers that got in: call `k` is made
    // only after reader `k - 1` got in, so they alternate.
    let calls = AtomicUsize::new(0);
    let entries = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for i in 0..READERS {
            let (turn, calls, entries, stop) = (&turn, &calls, &entries, &stop);
            s.spawn(move || {
                loop {
                    while turn.load(SeqCst) != i && !stop.load(SeqCst) {
                        thread::sleep(Duration::from_micros(50));
                    }
                    if stop.load(SeqCst) {
                        return;
                    }
                    calls.fetch_add(1, SeqCst);
                    let g = lock.read();
                    let me = entries.fetch_add(1, SeqCst);
                    turn.store((i + 1) % READERS, SeqCst);
                    // Hold until the next reader is in, or blocked.
                    let mut blocked_since = None;
                    while entries.load(SeqCst) == me + 1 && !stop.load(SeqCst) {
                        if calls.load(SeqCst) > me + 1 {
                            let since = *blocked_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= PASS_ON {
                                break;
                            }
                        }
                        thread::sleep(Duration::from_micros(50));
                    }
                    std::hint::black_box(*g);
                    drop(g);
                }
            });
        }
        wait_for("the reader stream", || entries.load(SeqCst) >= 2 * READERS);
        let (tx, rx) = channel();
        s.spawn(move || {
            *lock.write() += 1;
            let _ = tx.send(());
        });
        let got_in = rx.recv_timeout(bound).is_ok();
        // Readers stop; a starved writer then gets in and the scope ends.
        stop.store(true, SeqCst);
        got_in
    })
}

#[test]
fn rwsem_a_writer_is_not_starved_by_a_reader_stream() {
    bounded(|| {
        let lock = RwSemaphore::new(0);
        assert!(
            writer_gets_in_under_a_reader_stream(&lock, HANG),
            "writer starved"
        );
        assert_eq!(*lock.read(), 1);
    });
}

#[test]
fn percpu_rwsem_a_writer_is_not_starved_by_a_reader_stream() {
    bounded(|| {
        let lock = PerCpuRwSemaphore::new(0);
        assert!(
            writer_gets_in_under_a_reader_stream(&lock, HANG),
            "writer starved"
        );
        assert_eq!(*lock.read(), 1);
    });
}

/// The control: a reader-preferring lock (readers go in whenever no writer
/// is inside, waiting writers notwithstanding).
struct RawReaderPreferring(AtomicUsize);

const RP_WRITER: usize = 1 << (usize::BITS - 1);

// SAFETY: readers count themselves by CAS only while no writer is in, the
// writer gets in by CAS from 0 (no reader, no writer); Acquire on taking,
// Release on leaving.
unsafe impl RawRwLock for RawReaderPreferring {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawReaderPreferring(AtomicUsize::new(0));
    type GuardMarker = ksync::lock_api::GuardSend;

    fn lock_shared(&self) {
        while !self.try_lock_shared() {
            thread::yield_now();
        }
    }

    fn try_lock_shared(&self) -> bool {
        let s = self.0.load(SeqCst);
        s & RP_WRITER == 0 && self.0.compare_exchange(s, s + 1, SeqCst, SeqCst).is_ok()
    }

    unsafe fn unlock_shared(&self) {
        self.0.fetch_sub(1, SeqCst);
    }

    fn lock_exclusive(&self) {
        while !self.try_lock_exclusive() {
            thread::sleep(Duration::from_micros(20));
        }
    }

    fn try_lock_exclusive(&self) -> bool {
        self.0
            .compare_exchange(0, RP_WRITER, SeqCst, SeqCst)
            .is_ok()
    }

    unsafe fn unlock_exclusive(&self) {
        self.0.store(0, SeqCst);
    }
}

/// The must-fail control of the two tests above: the same stream starves
/// a reader-preferring lock's writer (so the stream really never leaves
/// the lock free, and the tests above would catch a lock that let new
/// readers pass a waiting writer).
#[test]
fn control_a_reader_preferring_lock_starves_its_writer() {
    bounded(|| {
        let lock = RwLock::<RawReaderPreferring, u64>::new(0);
        assert!(
            !writer_gets_in_under_a_reader_stream(&lock, PASS_ON * 8),
            "the reader stream let a reader-preferring writer in: it proves nothing"
        );
        assert_eq!(*lock.read(), 1, "the writer got in once the stream stopped");
    });
}

// ---- RwSemaphore: async, timeouts, downgrade -------------------------------

/// Blocking and async lockers on one semaphore exclude each other; writes
/// are non-atomic read-modify-writes.
#[test]
fn rwsem_async_and_blocking_mixed() {
    bounded(|| {
        static LOCK: RwSemaphore<(u64, u64)> = RwSemaphore::new((0, 0));
        static WRITES: AtomicUsize = AtomicUsize::new(0);
        const ITERS: usize = 1500;
        thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    for i in 0..ITERS {
                        let write = (i + t) % 4 == 0;
                        let asynchronous = t % 2 == 1;
                        match (write, asynchronous) {
                            (true, false) => {
                                let mut g = LOCK.write();
                                let v = g.0;
                                g.0 = std::hint::black_box(v) + 1;
                                g.1 += 1;
                            }
                            (true, true) => block_on(async {
                                let mut g = write_async(&LOCK).await;
                                let v = g.0;
                                g.0 = std::hint::black_box(v) + 1;
                                g.1 += 1;
                            }),
                            (false, false) => {
                                let g = LOCK.read();
                                assert_eq!(g.0, g.1);
                            }
                            (false, true) => block_on(async {
                                let g = read_async(&LOCK).await;
                                assert_eq!(g.0, g.1);
                            }),
                        }
                        if write {
                            WRITES.fetch_add(1, SeqCst);
                        }
                    }
                });
            }
        });
        let g = LOCK.read();
        assert_eq!(g.0 as usize, WRITES.load(SeqCst));
        assert_eq!(g.0, g.1);
    });
}

/// A future granted the lock and dropped before it saw the grant releases
/// it.
#[test]
fn rwsem_a_cancelled_granted_future_releases_the_lock() {
    let lock = RwSemaphore::new(0u32);
    let waker = waker();
    let mut cx = Context::from_waker(&waker);
    // SAFETY: the raw lock is used only through its futures, which take
    // and (here, on drop) release it.
    let raw = unsafe { lock.raw() };

    let w = lock.write();
    let mut reader = Box::pin(raw.read_async());
    assert!(reader.as_mut().poll(&mut cx).is_pending());
    drop(w); // granted to the queued future
    assert!(lock.is_locked(), "the grant did not count the reader");
    assert!(lock.try_write().is_none());
    drop(reader);
    assert!(!lock.is_locked(), "the granted read lock leaked");

    let r = lock.read();
    let mut writer = Box::pin(raw.write_async());
    assert!(writer.as_mut().poll(&mut cx).is_pending());
    drop(r);
    assert!(
        lock.is_locked_exclusive(),
        "the writer future was not granted"
    );
    drop(writer);
    assert!(!lock.is_locked(), "the granted write lock leaked");
    assert!(lock.try_write().is_some());
}

/// A queued writer future dropped while readers hold the lock lets the
/// readers queued behind it in at once.
#[test]
fn rwsem_a_cancelled_queued_writer_lets_the_readers_behind_it_in() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    let waker = waker();
    let mut cx = Context::from_waker(&waker);
    // SAFETY: used only through the future, which leaves the queue on drop.
    let raw = unsafe { LOCK.raw() };
    let held = LOCK.read();
    let mut writer = Box::pin(raw.write_async());
    assert!(writer.as_mut().poll(&mut cx).is_pending());
    let reader = thread::spawn(|| *LOCK.read());
    thread::sleep(Duration::from_millis(50));
    assert!(!reader.is_finished(), "a reader passed the queued writer");
    drop(writer);
    assert_eq!(join(reader, "the reader behind the cancelled writer"), 0);
    drop(held);
    assert!(!LOCK.is_locked());
}

#[test]
fn rwsem_timeouts() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    // The timed attempts run in another task than the holder's: with
    // lockdep, one task waiting for a lock it holds is reported.
    let other = |f: &(dyn Fn() + Sync)| thread::scope(|s| s.spawn(f).join().unwrap());
    let r = LOCK.read();
    other(&|| {
        let start = Instant::now();
        assert!(LOCK.try_write_for(Duration::from_millis(30)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(
            LOCK.try_read_for(Duration::from_millis(30)).is_some(),
            "a timed-out writer left the readers blocked"
        );
    });
    drop(r);
    let w = LOCK.write();
    other(&|| {
        let start = Instant::now();
        assert!(returns("a timed read", || LOCK
            .try_read_for(Duration::from_millis(30))
            .is_none()));
        assert!(start.elapsed() >= Duration::from_millis(30));
    });
    drop(w);
    assert!(LOCK.try_write_for(Duration::from_millis(30)).is_some());
    assert!(LOCK.try_read_for(Duration::ZERO).is_some());
    assert!(!LOCK.is_locked());
}

/// A writer that times out at the head of the queue while readers hold
/// the lock lets the readers queued behind it in.
#[test]
fn rwsem_a_timed_out_writer_lets_the_readers_behind_it_in() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    let held = LOCK.read();
    let writer = thread::spawn(|| LOCK.try_write_for(Duration::from_millis(400)).is_some());
    wait_for("the writer to queue", || match LOCK.try_read() {
        Some(g) => {
            drop(g);
            false
        }
        None => true,
    });
    let reader = thread::spawn(|| *LOCK.read());
    thread::sleep(Duration::from_millis(50));
    if !writer.is_finished() {
        assert!(!reader.is_finished(), "a reader passed the queued writer");
    }
    assert!(!join(writer, "the timed writer"), "got in beside a reader");
    assert_eq!(join(reader, "the reader behind the timed-out writer"), 0);
    drop(held);
}

/// `downgrade` keeps writers out and lets the queued readers in.
#[test]
fn rwsem_downgrade() {
    static LOCK: RwSemaphore<u32> = RwSemaphore::new(0);
    let mut w = LOCK.write();
    *w = 5;
    let reader = thread::spawn(|| *LOCK.read());
    thread::sleep(Duration::from_millis(30));
    assert!(!reader.is_finished());
    let r = RwLockWriteGuard::downgrade(w);
    assert_eq!(*r, 5);
    assert_eq!(join(reader, "a reader after the downgrade"), 5);
    assert!(LOCK.try_write().is_none());
    let writer = thread::spawn(|| *LOCK.write() += 1);
    thread::sleep(Duration::from_millis(30));
    assert!(
        !writer.is_finished(),
        "a writer beside the downgraded reader"
    );
    drop(r);
    join(writer, "the writer");
    assert_eq!(*LOCK.read(), 6);
}

/// Many rounds of write-then-downgrade against readers and writers.
#[test]
fn rwsem_downgrade_under_contention() {
    bounded(|| {
        static LOCK: RwSemaphore<(u64, u64)> = RwSemaphore::new((0, 0));
        thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    for i in 0..500 {
                        if (i + t) % 3 == 0 {
                            let mut w = LOCK.write();
                            w.0 += 1;
                            w.1 += 1;
                            let r = RwLockWriteGuard::downgrade(w);
                            assert_eq!(r.0, r.1);
                        } else {
                            let r = LOCK.read();
                            assert_eq!(r.0, r.1);
                        }
                    }
                });
            }
        });
        assert!(!LOCK.is_locked());
    });
}

// ---- PerCpuRwSemaphore: migration, the gate, no RCU section held -----------

/// A reader holds no RCU read section (it may sleep): `might_sleep` is
/// fine inside, on both paths.
#[test]
fn percpu_rwsem_readers_hold_no_rcu_read_section() {
    let lock = PerCpuRwSemaphore::new(0u32);
    let g = lock.read(); // fast path: the gate is idle
    assert!(!ksync::rcu::read_lock_held());
    ksync::wait::might_sleep();
    drop(g);
    drop(lock.write()); // the gate may stay closed a while: the slow path
    let g = lock.read();
    assert!(!ksync::rcu::read_lock_held());
    ksync::wait::might_sleep();
    drop(g);
}

/// `try_write` mirrors the gated lock's: it fails while the gate is open
/// (closing it takes a grace period) and succeeds, with nobody inside,
/// while it is still closed from a writer that just left.
#[test]
fn percpu_rwsem_try_write_and_the_gate() {
    let lock = PerCpuRwSemaphore::new(0u32);
    assert!(
        lock.try_write().is_none(),
        "closing the gate takes a grace period"
    );
    *lock.write() += 1;
    *lock.try_write().expect("the gate is still closed") += 1;
    let r = lock.try_read().expect("no writer");
    assert!(lock.try_write().is_none(), "a reader is inside");
    drop(r);
    assert_eq!(*lock.read(), 2);
}

/// Readers are preempted and migrate while holding the lock (the host's
/// preemption model: right after their reader step, and again while they
/// sleep), and release on another CPU than they took it on; a writer in
/// between still waits for them, and the counts sum to zero at the end.
#[test]
fn percpu_rwsem_readers_migrate_while_holding() {
    bounded(|| {
        static LOCK: PerCpuRwSemaphore<(u64, u64)> = PerCpuRwSemaphore::new((0, 0));
        static READERS_IN: AtomicUsize = AtomicUsize::new(0);
        const READERS: usize = 4;
        const ROUNDS: usize = 40;
        // CPU ids far above the ones threads claim by themselves.
        const BASE: usize = 40;
        let start = Arc::new(Barrier::new(READERS + 1));
        thread::scope(|s| {
            for t in 0..READERS {
                let start = start.clone();
                s.spawn(move || {
                    let [a, b, c] = [0, 1, 2].map(|k| BASE + 3 * t + k);
                    ksync::host::migrate_to(a);
                    start.wait();
                    for round in 0..ROUNDS {
                        // Taken on `here`, released on `there`.
                        let (here, there) = if round % 2 == 0 { (a, b) } else { (b, a) };
                        assert_eq!(ksync::kernel::cpu_id(), here);
                        // The scheduler switches this task out at its next
                        // preemption point (the end of the reader step) and
                        // back in on CPU `c`.
                        ksync::host::preempt_at_next_point(move || ksync::host::migrate_to(c));
                        let g = LOCK.read();
                        ksync::host::preemption_point(); // if the step had none
                        assert_eq!(ksync::kernel::cpu_id(), c, "not migrated");
                        READERS_IN.fetch_add(1, SeqCst);
                        thread::sleep(Duration::from_micros(200));
                        assert_eq!(g.0, g.1);
                        // While it sleeps, it moves again.
                        ksync::host::migrate_to(there);
                        thread::sleep(Duration::from_micros(100));
                        READERS_IN.fetch_sub(1, SeqCst);
                        drop(g);
                    }
                });
            }
            let start = start.clone();
            s.spawn(move || {
                start.wait();
                for _ in 0..ROUNDS / 2 {
                    let mut w = LOCK.write();
                    assert_eq!(READERS_IN.load(SeqCst), 0, "a writer beside a reader");
                    let v = w.0;
                    thread::sleep(Duration::from_micros(100));
                    w.0 = v + 1;
                    w.1 += 1;
                    drop(w);
                    thread::sleep(Duration::from_micros(300));
                }
            });
        });
        assert!(!LOCK.is_locked(), "the per-CPU counts do not sum to zero");
        let g = returns("a writer after the migrations", || *LOCK.write());
        assert_eq!(g.0, (ROUNDS / 2) as u64);
        assert_eq!(g.0, g.1);
    });
}

/// A reader that took the lock on the fast path, migrated and released on
/// the slow path (a writer waits meanwhile) wakes that writer.
#[test]
fn percpu_rwsem_a_migrated_reader_wakes_the_waiting_writer() {
    static LOCK: PerCpuRwSemaphore<u32> = PerCpuRwSemaphore::new(0);
    let (go_tx, go_rx) = channel::<()>();
    let (held_tx, held_rx) = channel::<()>();
    let reader = thread::spawn(move || {
        ksync::host::migrate_to(56);
        let g = LOCK.read();
        held_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        ksync::host::migrate_to(57);
        drop(g);
    });
    held_rx.recv_timeout(HANG).unwrap();
    let writer = thread::spawn(|| *LOCK.write() += 1);
    wait_for("the writer to block readers", || LOCK.is_locked_exclusive());
    thread::sleep(Duration::from_millis(30));
    assert!(
        !writer.is_finished(),
        "the writer did not wait for the reader"
    );
    go_tx.send(()).unwrap();
    join(reader, "the reader");
    join(writer, "the writer");
    assert_eq!(*LOCK.read(), 1);
}
