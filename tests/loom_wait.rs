//! loom models of the wait-queue protocol, through the real `WaitQueue`,
//! `Completion`, `Semaphore` and `RawMutex` code:
//!
//! * (a) no lost wake-up: `wait_event(flag)` against `flag = true;
//!   wake_one()`, and `wait_for_completion` against `complete` (with the
//!   completer's write seen by the waiter); woken waiters that exit at
//!   once, while the waker's `Kernel::wake` (made after it dropped the
//!   queue lock) may still be to come;
//! * (b) the wake that lands between the waiter's enqueue and its park;
//! * (c) a timeout racing a wake: `wait_event_timeout` against a wake, and
//!   `Semaphore::down_timeout` against `up` (the unit ends in the count or
//!   with the waiter, exactly once);
//! * (d) cancelled async waiters: an exclusive `wait_until` future and a
//!   `down_async` future polled once, woken (or handed a unit) and dropped:
//!   the wake goes to the second waiter, the unit to it or back to the count;
//!   the same for a `lock_async` future in front of a blocking locker;
//! * (e) the mutex's hand-off: a woken waiter that loses the lock to a
//!   spinner asks for it, and the next unlock hands it over; loom's
//!   `UnsafeCell` is the protected data, and the lock ends free with
//!   `WAITERS` and `HANDOFF` clear.
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=3 KSYNC_MAX_CPUS=4 cargo test --release --test loom_wait`
//! (the driver's bound for these models: about 26 s; 2 takes 8 s, 4
//! 103 s).
//!
//! The wait queue's lock is a blocking lock under loom (`QueueLock` in
//! `src/sleeping/wait.rs`; the ticket lock it is otherwise has its own models in
//! `tests/loom.rs`): with the spinlock, every spin round of a thread
//! waiting for it was a point where loom tried every other thread, and
//! `e_mutex_three_lockers` took 312 s against 6 s now.
//!
//! The host kernel under loom (`src/host/model.rs`): `block` is loom's
//! `park`, `wake` its `unpark` (a wake before the park makes the park
//! return at once, as `Kernel::block` requires; a wake for a task whose
//! thread has ended fails the model), a timed `block` is a
//! yield and the clock advances by one at every reading, so a timeout of a
//! few nanoseconds runs out after a few rounds of the waiter's loop,
//! anywhere among the other threads' steps. A lost wake-up is a waiter
//! parked for ever: loom reports a deadlock (and the test binary aborts
//! on the panics of the nodes dropped while the parked thread unwinds:
//! the report is printed first). (loom drops an `unpark` that
//! reaches a thread while it yields rather than keeping it for the next
//! `park`; no waiter here yields between queueing and parking, and the
//! timed waiters, whose block is a yield, re-read their node's state.)
//!
//! Each group has a control: the same model with a bug written into the
//! test through the public API (a waiter that checks before it queues, a
//! waker that wakes before it sets the flag, a hand-off recorded after its
//! wake, a cancelled future leaked instead of dropped, a locker that skips
//! the lock), which loom must catch ([`must_fail`]). As in `tests/loom.rs`,
//! every racing role runs in a spawned thread and the main thread only
//! joins and checks the end state. Under loom the `lock_api` impls are
//! compiled out, so the mutex models use `RawMutex`'s inherent API.
//!
//! Checked against the library broken on purpose, one bug at a time (not
//! kept: a note of what the models catch): without the check after
//! queueing, (a) deadlocks; a timeout that ignores a hand-off fails (c);
//! a `wait_until` drop or a `down_async` drop that passes nothing on fails
//! (d); a `lock_async` drop that does not pass its wake on, or does not
//! unlock after a hand-off, no `HANDOFF` request, a hand-off that never
//! wakes its new owner, and a Relaxed uncontended unlock each fail (e); a
//! woken waiter that does not wait for its waker to be done with the
//! node (the "wake pending" bit ignored) fails (a) to (c) and (e): the
//! waker's last store reaches a node whose owner has returned (loom's
//! object store reports a reference it cannot resolve).

#![cfg(ksync_loom)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::AtomicBool;
use loom::sync::atomic::AtomicUsize;
use loom::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use loom::thread;

use ksync::completion::Completion;
use ksync::mutex::RawMutex;
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

#[path = "common/outcomes.rs"]
mod outcomes;
use outcomes::Outcomes;

/// A timeout that runs out after a round or two of the waiter's loop (the
/// model clock advances by one nanosecond per reading).
const TIMEOUT: Duration = Duration::from_nanos(2);

/// `loom::model` with the preemption bound of the environment
/// (`LOOM_MAX_PREEMPTIONS`; the driver sets 3), and 2 when it sets none
/// (unbounded, the `e_` models run for many minutes).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(2));
    builder.check(f);
}

/// `loom::model` for three racing threads: as in `tests/loom.rs`, a bound
/// of at most 1 (`e_mutex_three_lockers` runs in about 6 s with it, 285 s
/// with 2).
fn model_three(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(1, |b| b.min(1)));
    builder.check(f);
}

/// The environment variable under which a control's child process runs
/// the broken model itself (see [`must_fail`]).
const CONTROL: &str = "KSYNC_LOOM_CONTROL";

/// Runs the control `name` (the name of the calling test), a model that
/// must fail, and checks that its failure message contains `expected`
/// (loom's deadlock report, its data-race report, or a failed assertion of
/// the model).
///
/// The model runs in a child process (this test binary, running only
/// `name`): a deadlock panics inside a parked model thread, and the nodes
/// and futures dropped while that thread unwinds take the queue lock, a
/// loom atomic, which panics again once loom has stopped the execution: a
/// panic while panicking, which aborts the process.
fn must_fail(name: &str, expected: &str, f: impl Fn() + Sync + Send + 'static) {
    if std::env::var(CONTROL).as_deref() == Ok(name) {
        model(f);
        return; // the parent reports that the control passed
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CONTROL, name)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running the control's child process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("running 1 test"),
        "the control's child did not run {name}: {text}"
    );
    assert!(
        !out.status.success(),
        "the control passed: the model cannot tell the bug"
    );
    assert!(
        text.contains(expected),
        "the control failed, but not as expected ({expected:?}): {text}"
    );
}

/// A waker that only records that it was woken: the futures here are
/// polled by hand, with no executor.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: StdArc<Self>) {
        self.0.store(true, Release);
    }
}

impl Flag {
    fn new() -> (StdArc<Flag>, Waker) {
        let flag = StdArc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        (flag, waker)
    }

    fn woken(&self) -> bool {
        self.0.load(Acquire)
    }
}

/// Polls `future` once with `waker`.
fn poll<F: Future + ?Sized>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Spins (yielding to loom's scheduler) until `flag` is set.
fn wait_for(flag: &AtomicBool) {
    while !flag.load(Acquire) {
        thread::yield_now();
    }
}

/// A wait queue, the condition its waiters wait for, data the waker
/// writes before it sets the condition, and two signals between the
/// threads of a model.
struct Event {
    queue: WaitQueue,
    flag: AtomicBool,
    data: UnsafeCell<usize>,
    /// The waiters are queued (the futures were polled).
    queued: AtomicBool,
    /// The waker is done.
    woke: AtomicBool,
}

// SAFETY: `data` is written by the waker before it sets `flag` (Release)
// and read by a waiter only after it saw `flag` set (Acquire): the model
// checks exactly that.
unsafe impl Sync for Event {}

impl Event {
    fn new() -> Arc<Self> {
        Arc::new(Event {
            queue: WaitQueue::new(),
            flag: AtomicBool::new(false),
            data: UnsafeCell::new(0),
            queued: AtomicBool::new(false),
            woke: AtomicBool::new(false),
        })
    }

    /// The condition.
    fn is_set(&self) -> bool {
        self.flag.load(Acquire)
    }

    /// The waker's half: the data, then the condition.
    fn set(&self) {
        // SAFETY: only the waker writes, before it publishes the flag.
        self.data.with_mut(|d| unsafe { *d = 1 });
        self.flag.store(true, Release);
    }

    /// A waiter that saw the condition reads the data.
    fn check_data(&self) {
        // SAFETY: called after `is_set` returned true (the model checks
        // that the write happened before).
        assert_eq!(self.data.with(|d| unsafe { *d }), 1);
    }
}

fn spawn<T: Send + 'static>(
    event: &Arc<Event>,
    f: impl FnOnce(&Event) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let event = Arc::clone(event);
    thread::spawn(move || f(&event))
}

// ---- (a) no lost wake-up -------------------------------------------------------

/// `wait_event(flag)` against `flag = true; wake_one()`: the waiter always
/// returns (a lost wake-up is a deadlock), sees the waker's data, and
/// leaves no node queued. Both outcomes of the race occur: the wake finds
/// the waiter queued, or finds the queue empty.
#[test]
fn a_wait_event_never_loses_the_wake() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model(move || {
        let e = Event::new();
        let waiter = spawn(&e, |e| {
            e.queue.wait_event(|| e.is_set());
            e.check_data();
        });
        let waker = spawn(&e, |e| {
            e.set();
            e.queue.wake_one()
        });
        waiter.join().unwrap();
        let woken = waker.join().unwrap();
        assert!(!e.queue.has_waiters(), "a node stayed queued");
        seen.record(woken);
    });
    outcomes.assert_all_seen(2);
}

/// The wake is made after the queue lock is dropped: a woken waiter must
/// not return (and its task exit) before the waker's `Kernel::wake`
/// returned. Two waiters, woken by one `wake_all`, exit at once; the model
/// kernel fails a `wake` for a task that has exited (every model here
/// checks that, this one with more than one deferred wake per unlock).
#[test]
fn a_woken_waiters_outlive_the_wake() {
    model_three(|| {
        let e = Event::new();
        let waiters: Vec<_> = (0..2)
            .map(|_| spawn(&e, |e| e.queue.wait_event(|| e.is_set())))
            .collect();
        let waker = spawn(&e, |e| {
            e.set();
            e.queue.wake_all()
        });
        for waiter in waiters {
            waiter.join().unwrap();
        }
        waker.join().unwrap();
        assert!(!e.queue.has_waiters(), "a node stayed queued");
    });
}

/// The control of (a): a waiter that looks at the flag only before it
/// queues (its condition repeats that look until a wake comes), the
/// classic check-then-sleep. loom must find the waker running between the
/// look and the enqueue: the wake finds nobody, the waiter sleeps for ever.
#[test]
fn a_control_check_before_enqueue_loses_the_wake() {
    must_fail(
        "a_control_check_before_enqueue_loses_the_wake",
        "deadlock",
        || {
            let e = Event::new();
            let waiter = spawn(&e, |e| {
                let looked = e.is_set();
                let mut checks = 0;
                e.queue.wait_event(|| {
                    checks += 1;
                    // The check before queueing and the one right after it
                    // both answer the early look.
                    if checks <= 2 { looked } else { e.is_set() }
                });
            });
            let waker = spawn(&e, |e| {
                e.set();
                e.queue.wake_one();
            });
            waiter.join().unwrap();
            waker.join().unwrap();
        },
    );
}

/// `wait_for_completion` against `complete`: the waiter always returns,
/// sees what the completer wrote before `complete` (the crate's promise:
/// the queue lock orders them; loom checks the `UnsafeCell`), and the one
/// `complete` is used up.
#[test]
fn a_completion_never_loses_the_complete() {
    struct Done {
        completion: Completion,
        data: UnsafeCell<usize>,
    }
    // SAFETY: `data` is written before `complete` and read after the wait
    // returned; that this orders them is what the model checks.
    unsafe impl Sync for Done {}
    model(|| {
        let done = Arc::new(Done {
            completion: Completion::new(),
            data: UnsafeCell::new(0),
        });
        let waiter = {
            let done = Arc::clone(&done);
            thread::spawn(move || {
                done.completion.wait_for_completion();
                // SAFETY: after the wait (the model checks the order).
                assert_eq!(done.data.with(|d| unsafe { *d }), 1);
            })
        };
        let completer = {
            let done = Arc::clone(&done);
            thread::spawn(move || {
                // SAFETY: written once, before `complete`.
                done.data.with_mut(|d| unsafe { *d = 1 });
                done.completion.complete();
            })
        };
        waiter.join().unwrap();
        completer.join().unwrap();
        assert!(!done.completion.is_done(), "the complete was not used up");
    });
}

// ---- (b) the wake before the block ------------------------------------------------

/// The waker starts only once the waiter is queued, so every step of it
/// lands in the window between the enqueue and the park: before the
/// check after queueing (the waiter leaves on that check), between the
/// check and the state read, or between the state read and the park (the
/// kernel's `wake` must make the park return at once). Both outcomes
/// occur: the check after queueing saw the flag, or the waiter went on to
/// sleep and the wake found it.
#[test]
fn b_a_wake_between_enqueue_and_park_is_kept() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model(move || {
        let e = Event::new();
        let waiter = spawn(&e, |e| {
            let mut checks = 0;
            e.queue.wait_event(|| {
                checks += 1;
                e.is_set()
            });
            e.check_data();
            checks
        });
        let waker = spawn(&e, |e| {
            while !e.queue.has_waiters() {
                thread::yield_now();
            }
            e.set();
            e.queue.wake_one()
        });
        let checks = waiter.join().unwrap();
        let woken = waker.join().unwrap();
        // 2: the check after queueing saw the flag; 3: the waiter slept
        // (or was about to) and the wake took its node.
        assert!(
            checks == 2 || (checks == 3 && woken == 1),
            "{checks} checks, {woken} woken"
        );
        assert!(!e.queue.has_waiters(), "a node stayed queued");
        seen.record(checks - 2);
    });
    outcomes.assert_all_seen(2);
}

/// The control of (b): a waker that wakes before it sets the flag. The
/// woken waiter may re-check before the store, queue again and sleep with
/// nobody left to wake it: loom must report the deadlock.
#[test]
fn b_control_wake_before_the_store_is_lost() {
    must_fail(
        "b_control_wake_before_the_store_is_lost",
        "deadlock",
        || {
            let e = Event::new();
            let waiter = spawn(&e, |e| e.queue.wait_event(|| e.is_set()));
            let waker = spawn(&e, |e| {
                while !e.queue.has_waiters() {
                    thread::yield_now();
                }
                e.queue.wake_one();
                e.set();
            });
            waiter.join().unwrap();
            waker.join().unwrap();
        },
    );
}

// ---- (c) a timeout racing a wake ----------------------------------------------------

/// `wait_event_timeout` against `flag = true; wake_one()`: both finish,
/// the timed-out (or woken) waiter leaves no node queued, and a waiter
/// that reports the condition true sees the waker's data. Both results
/// occur.
#[test]
fn c_wait_event_timeout_racing_a_wake() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model(move || {
        let e = Event::new();
        let waiter = spawn(&e, |e| {
            let ok = e.queue.wait_event_timeout(|| e.is_set(), TIMEOUT);
            if ok {
                e.check_data();
            }
            ok
        });
        let waker = spawn(&e, |e| {
            e.set();
            e.queue.wake_one();
        });
        let ok = waiter.join().unwrap();
        waker.join().unwrap();
        assert!(!e.queue.has_waiters(), "a timed-out waiter stayed queued");
        seen.record(usize::from(ok));
    });
    outcomes.assert_all_seen(2);
}

/// `down_timeout` on an empty semaphore against `up`: the unit is never
/// lost nor doubled. Either the waiter got it (from the count, or handed
/// over, also when the hand-off races the timeout) or it is in the count.
/// Both results occur.
#[test]
fn c_down_timeout_racing_up_keeps_the_unit() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model(move || {
        let s = Arc::new(Semaphore::new(0));
        let down = {
            let s = Arc::clone(&s);
            thread::spawn(move || s.down_timeout(TIMEOUT))
        };
        let up = {
            let s = Arc::clone(&s);
            thread::spawn(move || s.up())
        };
        let got = down.join().unwrap();
        up.join().unwrap();
        assert_eq!(
            s.count() + usize::from(got),
            1,
            "the unit was lost or doubled (got: {got})"
        );
        seen.record(usize::from(got));
    });
    outcomes.assert_all_seen(2);
}

/// A semaphore written on the public `WaitQueue` API with the hand-off
/// done wrong: an `up` that woke a waiter records the unit for it only
/// after the wake, outside the queue lock. A waiter whose timeout runs
/// out between the wake and the record returns without the unit.
struct BrokenSemaphore {
    queue: WaitQueue,
    count: AtomicUsize,
    handed: AtomicBool,
}

impl BrokenSemaphore {
    fn up(&self) {
        if self.queue.wake_one() == 0 {
            self.count.fetch_add(1, AcqRel);
        } else {
            self.handed.store(true, Release);
        }
    }

    /// One downer only: the count cannot change between load and sub.
    fn down_timeout(&self) -> bool {
        let take = || {
            self.handed.swap(false, AcqRel)
                || (self.count.load(Acquire) > 0 && self.count.fetch_sub(1, AcqRel) > 0)
        };
        take() || self.queue.wait_event_timeout(take, TIMEOUT)
    }
}

/// The control of (c): the model of `c_down_timeout_racing_up_keeps_the_unit`
/// on [`BrokenSemaphore`]. loom must find the timeout that runs out after
/// the wake and before the hand-off is recorded: the unit is lost.
#[test]
fn c_control_a_hand_off_recorded_after_its_wake_is_lost() {
    must_fail(
        "c_control_a_hand_off_recorded_after_its_wake_is_lost",
        "the unit was lost or doubled",
        || {
            let s = Arc::new(BrokenSemaphore {
                queue: WaitQueue::new(),
                count: AtomicUsize::new(0),
                handed: AtomicBool::new(false),
            });
            let down = {
                let s = Arc::clone(&s);
                thread::spawn(move || s.down_timeout())
            };
            let up = {
                let s = Arc::clone(&s);
                thread::spawn(move || s.up())
            };
            let got = down.join().unwrap();
            up.join().unwrap();
            assert_eq!(
                s.count.load(Relaxed) + usize::from(got),
                1,
                "the unit was lost or doubled"
            );
        },
    );
}

// ---- (d) cancelled async waiters -------------------------------------------------

/// Two exclusive `wait_until` futures, polled once each (queued); then the
/// waker's `flag = true; wake_one()` races the first future's drop. The
/// one wake must reach the second future: directly if the first was gone
/// already, or passed on by the first's drop. Both orders occur.
/// `leak_first` is the control: the first future is leaked instead of
/// dropped (a cancellation that passes nothing on).
fn cancelled_wait_until(leak_first: bool, seen: Outcomes) -> impl Fn() + Sync + Send + 'static {
    move || {
        let e = Event::new();
        let canceller = spawn(&e, move |e| {
            let (first_flag, first_waker) = Flag::new();
            let (second_flag, second_waker) = Flag::new();
            let mut first = Box::pin(e.queue.wait_until_exclusive(|| e.is_set()));
            let mut second = Box::pin(e.queue.wait_until_exclusive(|| e.is_set()));
            assert!(poll(first.as_mut(), &first_waker).is_pending());
            assert!(poll(second.as_mut(), &second_waker).is_pending());
            e.queued.store(true, Release);
            if leak_first {
                std::mem::forget(first);
            } else {
                drop(first);
            }
            wait_for(&e.woke);
            assert!(
                second_flag.woken(),
                "the wake was lost with the cancelled waiter"
            );
            assert!(poll(second.as_mut(), &second_waker).is_ready());
            first_flag.woken()
        });
        let waker = spawn(&e, |e| {
            wait_for(&e.queued);
            e.set();
            let woken = e.queue.wake_one();
            e.woke.store(true, Release);
            woken
        });
        let first_woken = canceller.join().unwrap();
        assert_eq!(waker.join().unwrap(), 1, "one exclusive waiter woken");
        assert!(!e.queue.has_waiters(), "a node stayed queued");
        seen.record(usize::from(first_woken));
    }
}

#[test]
fn d_a_cancelled_wait_until_passes_the_wake_on() {
    let outcomes = Outcomes::new();
    model(cancelled_wait_until(false, outcomes.clone()));
    outcomes.assert_all_seen(2);
}

#[test]
fn d_control_a_leaked_wait_until_keeps_the_wake() {
    must_fail(
        "d_control_a_leaked_wait_until_keeps_the_wake",
        "the wake was lost with the cancelled waiter",
        cancelled_wait_until(true, Outcomes::new()),
    );
}

/// `waiters` `down_async` futures on an empty semaphore, polled once each
/// (queued); `up` races the first future's drop. With one waiter the unit
/// must end in the count (given back if it was handed to the cancelled
/// future); with two it must reach the second future, which then
/// completes. Both orders occur. `leak_first`: the control, as above.
fn cancelled_down_async(
    waiters: usize,
    leak_first: bool,
    seen: Outcomes,
) -> impl Fn() + Sync + Send + 'static {
    struct Sem {
        sem: Semaphore,
        queued: AtomicBool,
        upped: AtomicBool,
    }
    move || {
        let s = Arc::new(Sem {
            sem: Semaphore::new(0),
            queued: AtomicBool::new(false),
            upped: AtomicBool::new(false),
        });
        let canceller = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let (first_flag, first_waker) = Flag::new();
                let (second_flag, second_waker) = Flag::new();
                let mut first = Box::pin(s.sem.down_async());
                let mut second = Box::pin(s.sem.down_async());
                assert!(poll(first.as_mut(), &first_waker).is_pending());
                if waiters == 2 {
                    assert!(poll(second.as_mut(), &second_waker).is_pending());
                }
                s.queued.store(true, Release);
                if leak_first {
                    std::mem::forget(first);
                } else {
                    drop(first);
                }
                wait_for(&s.upped);
                if waiters == 2 {
                    assert!(
                        second_flag.woken(),
                        "the unit was lost with the cancelled waiter"
                    );
                    assert!(poll(second.as_mut(), &second_waker).is_ready());
                }
                first_flag.woken()
            })
        };
        let up = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                wait_for(&s.queued);
                s.sem.up();
                s.upped.store(true, Release);
            })
        };
        let first_woken = canceller.join().unwrap();
        up.join().unwrap();
        // Two waiters: the second holds the unit now.
        let expected = if waiters == 2 { 0 } else { 1 };
        assert_eq!(
            s.sem.count(),
            expected,
            "the unit was lost with the cancelled waiter"
        );
        seen.record(usize::from(first_woken));
    }
}

#[test]
fn d_a_cancelled_down_async_gives_the_unit_back() {
    let outcomes = Outcomes::new();
    model(cancelled_down_async(1, false, outcomes.clone()));
    outcomes.assert_all_seen(2);
}

#[test]
fn d_a_cancelled_down_async_passes_the_unit_on() {
    let outcomes = Outcomes::new();
    model(cancelled_down_async(2, false, outcomes.clone()));
    outcomes.assert_all_seen(2);
}

#[test]
fn d_control_a_leaked_down_async_keeps_the_unit() {
    must_fail(
        "d_control_a_leaked_down_async_keeps_the_unit",
        "the unit was lost with the cancelled waiter",
        cancelled_down_async(1, true, Outcomes::new()),
    );
}

#[test]
fn d_control_a_leaked_down_async_keeps_the_unit_from_the_next_waiter() {
    must_fail(
        "d_control_a_leaked_down_async_keeps_the_unit_from_the_next_waiter",
        "the unit was lost with the cancelled waiter",
        cancelled_down_async(2, true, Outcomes::new()),
    );
}

// ---- (e) the mutex ----------------------------------------------------------------

/// A sleeping mutex and the data it protects (loom's `UnsafeCell`: a
/// critical section not ordered after the previous one is a data race).
struct Locked {
    mutex: RawMutex,
    data: UnsafeCell<usize>,
}

// SAFETY: `data` is accessed only with `mutex` held (the model checks it).
unsafe impl Sync for Locked {}

impl Locked {
    fn new() -> Arc<Self> {
        Arc::new(Locked {
            mutex: RawMutex::new(),
            data: UnsafeCell::new(0),
        })
    }

    /// The critical section, with the lock held: one increment, with a
    /// yield in the middle (a holder that takes a while, or is preempted),
    /// so that waiters queue, and a hand-off can happen, without spending
    /// the preemption bound. Returns whether a waiter had asked for the
    /// hand-off by the end (the unlock that follows then hands over).
    fn bump(&self) -> bool {
        // SAFETY: the lock is held (what the model checks).
        let v = self.data.with(|d| unsafe { *d });
        thread::yield_now();
        // SAFETY: as above.
        self.data.with_mut(|d| unsafe { *d = v + 1 });
        format!("{:?}", self.mutex).contains("handoff: true")
    }

    /// `lock`, [`bump`](Self::bump), `unlock`.
    fn locked_bump(&self) -> bool {
        self.mutex.lock();
        let handoff = self.bump();
        // SAFETY: locked above on this thread.
        unsafe { self.mutex.unlock() };
        handoff
    }

    /// Once every thread is joined: the count of critical sections, and
    /// the lock free with no flag left.
    fn check_end(&self, sections: usize) {
        // SAFETY: every user is joined.
        assert_eq!(self.data.with(|d| unsafe { *d }), sections);
        assert_eq!(
            format!("{:?}", self.mutex),
            "RawMutex { locked: false, waiters: false, handoff: false, woken_in_flight: false, .. }"
        );
    }
}

/// The relocking hog: one thread takes the lock twice in a row while
/// another waits. The waiter sleeps, the first unlock wakes it, the hog
/// takes the lock again before the woken waiter runs; the waiter then
/// queues at the front with `HANDOFF`, and the hog's second unlock must
/// make it the owner. Exclusion holds throughout, the lock ends free and
/// clear, and the hand-off path is taken in some executions.
#[test]
fn e_mutex_hands_off_to_a_waiter_that_lost_the_race() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model(move || {
        let l = Locked::new();
        let hog = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.locked_bump() | l.locked_bump())
        };
        let waiter = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.locked_bump())
        };
        let handoff = hog.join().unwrap() | waiter.join().unwrap();
        l.check_end(3);
        seen.record(usize::from(handoff));
    });
    outcomes.assert_all_seen(2);
}

/// Three lockers, once each: any of them may sleep, be woken, lose to a
/// spinner and get the lock handed over. Exclusion, and the lock free and
/// clear at the end; the hand-off path is taken in some executions.
#[test]
fn e_mutex_three_lockers() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model_three(move || {
        let l = Locked::new();
        let lockers: Vec<_> = (0..3)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.locked_bump())
            })
            .collect();
        let handoff = lockers
            .into_iter()
            .fold(false, |any, t| t.join().unwrap() | any);
        l.check_end(3);
        seen.record(usize::from(handoff));
    });
    outcomes.assert_all_seen(2);
}

/// A `lock_async` future cancelled after a wake, with a blocking locker
/// racing it. One thread takes the lock, polls the future (queued behind
/// itself), unlocks and then, with `repoll`, polls it once more, and drops
/// it; the other thread locks and unlocks once, arriving anywhere.
///
/// Without `repoll`: the unlock woke the future if it was first in the
/// queue, and its drop must pass the wake on to the blocking locker (a lost
/// one is a deadlock). With `repoll`: the second poll takes the lock, or
/// finds it taken again by the other thread and asks for the hand-off; the
/// other thread's unlock then makes the future the owner, and its drop must
/// unlock. Whatever the order, exclusion holds and the lock ends free and
/// clear. The outcomes: 0, the future was never woken; 1, the unlock woke
/// it; 2, the second poll took the lock; 3, the lock was handed to the
/// future before its drop.
///
/// (No thread here waits for a signal: several spinners waiting for one
/// thread make loom alternate between them without bound.)
fn cancelled_lock_async(repoll: bool, seen: Outcomes) -> impl Fn() + Sync + Send + 'static {
    move || {
        let l = Locked::new();
        let canceller = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let mut sections = 1;
                let (first_flag, first_waker) = Flag::new();
                let (second_flag, second_waker) = Flag::new();
                l.mutex.lock();
                l.bump();
                let mut future = Box::pin(l.mutex.lock_async());
                assert!(poll(future.as_mut(), &first_waker).is_pending());
                // SAFETY: locked above on this thread.
                unsafe { l.mutex.unlock() };
                let mut outcome = usize::from(first_flag.woken());
                if repoll {
                    if poll(future.as_mut(), &second_waker).is_ready() {
                        outcome = 2;
                        sections += 1;
                        l.bump();
                        // SAFETY: the future is ready: this task holds it.
                        unsafe { l.mutex.unlock() };
                    } else if second_flag.woken() {
                        outcome = 3;
                    }
                }
                drop(future);
                // Handed over after the check above: the drop unlocked.
                if repoll && outcome != 2 && second_flag.woken() {
                    outcome = 3;
                }
                (sections, outcome)
            })
        };
        let blocking = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                l.locked_bump();
            })
        };
        let (sections, outcome) = canceller.join().unwrap();
        blocking.join().unwrap();
        l.check_end(sections + 1);
        seen.record(outcome);
    }
}

#[test]
fn e_a_cancelled_lock_async_passes_the_wake_on() {
    let outcomes = Outcomes::new();
    model(cancelled_lock_async(false, outcomes.clone()));
    outcomes.assert_all_seen(2);
}

#[test]
fn e_a_cancelled_lock_async_after_a_hand_off_unlocks() {
    let outcomes = Outcomes::new();
    model(cancelled_lock_async(true, outcomes.clone()));
    outcomes.assert_all_seen(4);
}

/// The control of (e): a locker that goes on without the lock when
/// `try_lock` fails. loom must report the data race on the protected data.
#[test]
fn e_control_a_locker_without_the_lock_races() {
    must_fail(
        "e_control_a_locker_without_the_lock_races",
        "Causality violation",
        || {
            let l = Locked::new();
            let careless = {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    let got = l.mutex.try_lock();
                    l.bump();
                    if got {
                        // SAFETY: locked by the `try_lock` above.
                        unsafe { l.mutex.unlock() };
                    }
                })
            };
            let careful = {
                let l = Arc::clone(&l);
                thread::spawn(move || l.locked_bump())
            };
            careless.join().unwrap();
            careful.join().unwrap();
        },
    );
}
