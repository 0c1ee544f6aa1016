//! Torture of the sleeping primitives together: 16 threads (eight times
//! the CI machine's cores) mixing the sleeping mutex, a semaphore with 3
//! units, a pool of 8 tokens on a wait queue, and a ping-pong between
//! partner threads through completions and a wait queue, each through its
//! blocking, timed, async and cancelled-async forms, for a fixed number of
//! iterations.
//!
//! Each thread draws its sequence of operations from its own seeded
//! generator, so what runs is the same every time and only the timing
//! varies; the outcome is exact: every critical section counted, never
//! more than the semaphore's units inside, every token back in the pool,
//! every `complete` used up once, every ping-pong round played, the
//! semaphore back at its count, and nothing left queued. A lost wake-up
//! hangs a thread (in the ping-pong nobody else would wake it), blocking
//! or async: the executor of the async forms parks without a timeout, so
//! it is woken only by the future's waker. A watchdog fails the run when
//! no thread has made a step for [`STALL`], naming what each unfinished
//! thread waits in (the primitive and the form of the wait). The loom models
//! (`tests/loom_wait.rs`) are the precise check of each race; this is
//! the check under load, with real preemption and timeouts running out
//! (it prints how often they did).

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use ksync::completion::Completion;
use ksync::mutex::{Mutex, lock_async};
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

/// Threads: many more than cores, so waiters really sleep and wakers run
/// while the woken are descheduled.
const THREADS: usize = 16;

/// Iterations per thread; each does one operation on each primitive.
const ITERS: usize = if cfg!(debug_assertions) { 1000 } else { 3000 };

/// Units of the semaphore.
const UNITS: usize = 3;

/// Tokens in the wait queue's pool.
const TOKENS: usize = 8;

/// The watchdog's bound: no step by any thread for this long is a hang
/// (the run takes a few seconds; a step is a fraction of a millisecond,
/// even on a loaded 2-core machine).
const STALL: Duration = Duration::from_secs(60);

/// A timeout short enough to run out often under this load.
const SHORT: Duration = Duration::from_micros(20);

/// The shared world.
struct World {
    mutex: Mutex<u64>,
    sem: Semaphore,
    /// Threads inside the semaphore now, and the most seen.
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    /// The ping-pong channels of threads `2j` and `2j + 1`.
    pairs: Vec<Pair>,
    queue: WaitQueue,
    /// Tokens free in the pool (the wait queue's condition).
    tokens: AtomicUsize,
    /// Each thread's finished iterations: the hang report.
    progress: Vec<AtomicUsize>,
    /// What each thread is doing now (the wait it is in): the hang
    /// report.
    doing: Vec<StdMutex<&'static str>>,
    /// Steps made by every thread together: the watchdog's clock.
    steps: AtomicUsize,
    /// How often a timed wait ran out, and how often a cancelled future
    /// was still pending at its drop: printed, to show the slow paths ran
    /// (how often depends on the timing, so nothing asserts it).
    timeouts: AtomicUsize,
    cancelled_pending: AtomicUsize,
}

/// What threads `2j` and `2j + 1` play ping-pong through ([`ping_pong`]).
struct Pair {
    to_even: Completion,
    to_odd: Completion,
    queue: WaitQueue,
    turn: AtomicUsize,
}

impl World {
    /// Thread `me` is about to do `what` (a wait, named by primitive and
    /// form): a step, and the hang report's entry for it.
    fn at(&self, me: usize, what: &'static str) {
        *self.doing[me].lock().unwrap() = what;
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a token if one is free (the waiters' condition, which
    /// consumes).
    fn take_token(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A tiny deterministic generator (xorshift64*), one per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: usize) -> Self {
        Rng(0x9E37_79B9_7F4A_7C15 ^ (seed as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    /// One of `n` choices.
    fn pick(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % n
    }
}

struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it is ready, parking between polls
/// without a timeout: only the future's waker (or a spurious unpark)
/// makes it poll again, so a lost async wake hangs this thread, and the
/// watchdog reports it.
fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

/// Polls `fut` once with a waker that does nothing and drops it (a
/// cancelled async waiter, the common way: a `select!` that lost);
/// whether it was ready.
fn poll_once_and_cancel<F: Future>(fut: F) -> bool {
    let mut fut = pin!(fut);
    fut.as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}

/// One critical section of the mutex: a non-atomic read-modify-write,
/// which a broken exclusion loses, around a yield (the holder gives its
/// core away, so that lockers stop spinning and sleep).
fn bump(counter: &mut u64) {
    let v = *counter;
    thread::yield_now();
    *counter = std::hint::black_box(v) + 1;
}

/// Counts a timed wait that ran out (`!ok`) and returns `ok`.
fn timed(w: &World, ok: bool) -> bool {
    if !ok {
        w.timeouts.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

/// [`poll_once_and_cancel`], counting the futures still pending.
fn cancel<F: Future>(w: &World, fut: F) -> bool {
    let ready = poll_once_and_cancel(fut);
    if !ready {
        w.cancelled_pending.fetch_add(1, Ordering::Relaxed);
    }
    ready
}

/// The mutex, one of its forms.
fn mutex_op(w: &World, me: usize, rng: &mut Rng) {
    match rng.pick(4) {
        0 => {
            w.at(me, "mutex: lock (blocking)");
            bump(&mut w.mutex.lock());
        }
        1 => {
            w.at(me, "mutex: lock_async (async, block_on)");
            block_on(async { bump(&mut *lock_async(&w.mutex).await) });
        }
        2 => {
            // One step for the whole loop: it spins while the mutex is
            // held, which a hand-off to a waiter never woken would make
            // for ever (a hang the watchdog must see).
            w.at(me, "mutex: try_lock loop");
            loop {
                if let Some(mut g) = w.mutex.try_lock() {
                    bump(&mut g);
                    break;
                }
                thread::yield_now();
            }
        }
        _ => {
            // A cancelled async locker: it may have been woken or handed
            // the lock before its drop, which passes either on. Then the
            // section, blocking.
            w.at(me, "mutex: cancelled lock_async, then lock (blocking)");
            let _ = cancel(w, lock_async(&w.mutex));
            bump(&mut w.mutex.lock());
        }
    }
}

/// The semaphore: take a unit (one of its forms), check the bound, give
/// it back.
fn semaphore_op(w: &World, me: usize, rng: &mut Rng) {
    match rng.pick(4) {
        0 => {
            w.at(me, "semaphore: down (blocking)");
            w.sem.down();
        }
        1 => {
            w.at(me, "semaphore: down_timeout loop");
            while !timed(w, w.sem.down_timeout(SHORT)) {}
        }
        2 => {
            w.at(me, "semaphore: down_async (async, block_on)");
            block_on(w.sem.down_async());
        }
        _ => {
            w.at(me, "semaphore: cancelled down_async, then down (blocking)");
            // A cancelled async down gives back a unit it was handed;
            // one that completed at its only poll holds the unit.
            if !cancel(w, w.sem.down_async()) {
                w.sem.down();
            }
        }
    }
    let now = w.inside.fetch_add(1, Ordering::SeqCst) + 1;
    w.max_inside.fetch_max(now, Ordering::SeqCst);
    thread::yield_now();
    w.inside.fetch_sub(1, Ordering::SeqCst);
    w.sem.up();
}

/// Threads `2j` and `2j + 1` play ping-pong, one round per iteration,
/// through their pair of completions (even iterations) or their own wait
/// queue and turn counter (odd ones), so the odd thread always waits for
/// a wake still to come, from the one thread that will send it (and the
/// even one often does): with nobody else to wake them, a lost wake-up
/// hangs the pair.
fn ping_pong(w: &World, me: usize, iteration: usize, rng: &mut Rng) {
    let at = |what| w.at(me, what);
    let pair = &w.pairs[me / 2];
    let even = me % 2 == 0;
    if iteration % 2 == 1 {
        // Round `iteration / 2` on the queue: the even thread's turn is
        // `2 * round`, the odd one's the next.
        let turn = 2 * (iteration / 2) + usize::from(!even);
        let my_turn = || pair.turn.load(Ordering::Acquire) == turn;
        match rng.pick(4) {
            0 => {
                at("ping-pong wait queue: wait_event (blocking)");
                pair.queue.wait_event(my_turn);
            }
            1 => {
                at("ping-pong wait queue: wait_event_timeout loop");
                while !timed(w, pair.queue.wait_event_timeout(my_turn, SHORT)) {}
            }
            2 => {
                at("ping-pong wait queue: wait_until (async, block_on)");
                block_on(pair.queue.wait_until(my_turn));
            }
            _ => {
                at("ping-pong wait queue: cancelled wait_until, then wait_event");
                if !cancel(w, pair.queue.wait_until(my_turn)) {
                    pair.queue.wait_event(my_turn);
                }
            }
        }
        pair.turn.store(turn + 1, Ordering::Release);
        if rng.pick(2) == 0 {
            pair.queue.wake_one();
        } else {
            pair.queue.wake_all();
        }
        return;
    }
    let (mine, theirs) = if even {
        (&pair.to_even, &pair.to_odd)
    } else {
        (&pair.to_odd, &pair.to_even)
    };
    if even {
        theirs.complete();
    }
    match rng.pick(4) {
        0 => {
            at("ping-pong completion: wait_for_completion (blocking)");
            mine.wait_for_completion();
        }
        1 => {
            at("ping-pong completion: wait_for_completion_timeout loop");
            while !timed(w, mine.wait_for_completion_timeout(SHORT)) {}
        }
        2 => {
            at("ping-pong completion: wait (async, block_on)");
            block_on(mine.wait());
        }
        _ => {
            at("ping-pong completion: cancelled wait, then wait_for_completion");
            if !cancel(w, mine.wait()) {
                mine.wait_for_completion();
            }
        }
    }
    if !even {
        theirs.complete();
    }
}

/// The wait queue as a pool of [`TOKENS`] tokens: take one (one of the
/// waits), hold it a while, give it back and wake, with exclusive and
/// plain waiters, timed, async and cancelled ones. With 16 threads and 8
/// tokens, takers really sleep.
fn queue_op(w: &World, me: usize, rng: &mut Rng) {
    let take = || w.take_token();
    match rng.pick(6) {
        0 => {
            w.at(me, "token wait queue: wait_event (blocking)");
            w.queue.wait_event(take);
        }
        1 => {
            w.at(me, "token wait queue: wait_event_exclusive (blocking)");
            w.queue.wait_event_exclusive(take);
        }
        2 => {
            w.at(me, "token wait queue: wait_event_exclusive_timeout loop");
            while !timed(w, w.queue.wait_event_exclusive_timeout(take, SHORT)) {}
        }
        3 => {
            w.at(me, "token wait queue: wait_event_timeout loop");
            while !timed(w, w.queue.wait_event_timeout(take, SHORT)) {}
        }
        4 => {
            w.at(
                me,
                "token wait queue: wait_until_exclusive (async, block_on)",
            );
            block_on(w.queue.wait_until_exclusive(take));
        }
        _ => {
            w.at(
                me,
                "token wait queue: cancelled wait_until_exclusive, then wait_event_exclusive",
            );
            // Cancelled after one poll: if an exclusive wake reached it,
            // its drop passes the wake on. A poll that found a token took it.
            if !cancel(w, w.queue.wait_until_exclusive(take)) {
                w.queue.wait_event_exclusive(take);
            }
        }
    }
    thread::yield_now();
    w.tokens.fetch_add(1, Ordering::AcqRel);
    if rng.pick(2) == 0 {
        w.queue.wake_one();
    } else {
        w.queue.wake_all();
    }
}

#[test]
fn sixteen_threads_mix_every_sleeping_primitive() {
    let world = Arc::new(World {
        mutex: Mutex::new(0),
        sem: Semaphore::new(UNITS),
        inside: AtomicUsize::new(0),
        max_inside: AtomicUsize::new(0),
        pairs: (0..THREADS / 2)
            .map(|_| Pair {
                to_even: Completion::new(),
                to_odd: Completion::new(),
                queue: WaitQueue::new(),
                turn: AtomicUsize::new(0),
            })
            .collect(),
        queue: WaitQueue::new(),
        tokens: AtomicUsize::new(TOKENS),
        progress: (0..THREADS).map(|_| AtomicUsize::new(0)).collect(),
        doing: (0..THREADS).map(|_| StdMutex::new("starting")).collect(),
        steps: AtomicUsize::new(0),
        timeouts: AtomicUsize::new(0),
        cancelled_pending: AtomicUsize::new(0),
    });
    let start = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let w = Arc::clone(&world);
            thread::spawn(move || {
                let mut rng = Rng::new(i);
                for iteration in 0..ITERS {
                    // The order of the first three varies too.
                    let first = rng.pick(3);
                    for k in 0..3 {
                        match (first + k) % 3 {
                            0 => mutex_op(&w, i, &mut rng),
                            1 => semaphore_op(&w, i, &mut rng),
                            _ => queue_op(&w, i, &mut rng),
                        }
                    }
                    // The ping-pong comes at the same place in every
                    // iteration of both partners.
                    ping_pong(&w, i, iteration, &mut rng);
                    w.progress[i].fetch_add(1, Ordering::Relaxed);
                }
                w.at(i, "finished");
            })
        })
        .collect();
    // The watchdog: fails when no thread made a step for STALL.
    let (mut steps, mut since) = (world.steps.load(Ordering::Relaxed), Instant::now());
    while !threads.iter().all(|t| t.is_finished()) {
        let now = world.steps.load(Ordering::Relaxed);
        if now != steps {
            (steps, since) = (now, Instant::now());
        } else if since.elapsed() > STALL {
            let stuck: Vec<String> = (0..THREADS)
                .filter(|&i| !threads[i].is_finished())
                .map(|i| {
                    format!(
                        "thread {i} (iteration {} of {ITERS}) in {}",
                        world.progress[i].load(Ordering::Relaxed),
                        world.doing[i].lock().unwrap()
                    )
                })
                .collect();
            panic!(
                "no progress for {} s (a lost wake-up?):\n  {}",
                STALL.as_secs(),
                stuck.join("\n  ")
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
    for t in threads {
        t.join().unwrap();
    }
    let total = (THREADS * ITERS) as u64;
    assert_eq!(*world.mutex.lock(), total, "a critical section was lost");
    assert!(!world.mutex.is_locked());
    assert!(
        world.max_inside.load(Ordering::SeqCst) <= UNITS,
        "{} threads inside a {UNITS}-unit semaphore",
        world.max_inside.load(Ordering::SeqCst)
    );
    assert_eq!(
        world.sem.count(),
        UNITS,
        "a semaphore unit was lost or made"
    );
    for pair in &world.pairs {
        assert!(
            !pair.to_even.is_done() && !pair.to_odd.is_done(),
            "a complete was left over (a wait went through without one)"
        );
        assert_eq!(pair.turn.load(Ordering::SeqCst), ITERS, "ping-pong rounds");
        assert!(!pair.queue.has_waiters(), "a waiter stayed queued");
    }
    assert_eq!(
        world.tokens.load(Ordering::SeqCst),
        TOKENS,
        "a token was lost or made"
    );
    assert!(!world.queue.has_waiters(), "a waiter stayed queued");
    eprintln!(
        "{THREADS} threads x {ITERS} iterations in {:.2} s: {} timed waits ran out, {} cancelled \
         futures were pending",
        start.elapsed().as_secs_f64(),
        world.timeouts.load(Ordering::Relaxed),
        world.cancelled_pending.load(Ordering::Relaxed)
    );
}
