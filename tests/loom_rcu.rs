//! loom models of the RCU grace-period engine (`ksync::rcu`), its polled
//! cookies and the `RcuSync` gate.
//!
//! Run with `RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --test loom_rcu` (`cargo xtask test` does). Each
//! loom thread is a CPU. CPUs start offline, and under loom a thread that
//! exits does *not* go offline by itself (the host hooks do that only
//! outside loom), so every CPU that comes online goes offline or idle by
//! hand. With `KSYNC_MAX_CPUS=4` the engine has four CPUs; the ones a
//! model does not use never come online and must not hold a grace period
//! up.
//!
//! The protected data are loom `UnsafeCell`s: a reader reads an element
//! inside its read section and the writer "frees" it (writes to it) after
//! the grace period, so loom reports a data race when the read does not
//! happen-before the free (and the reader asserts that it did not see the
//! freed value). A grace period that never ends shows as loom's "Model
//! exceeded maximum number of branches": the waiter spins forever.
//!
//! Where loom is blind (each checked by removing the barrier and seeing no
//! model fail):
//!
//! * loom joins every `SeqCst` fence into one global clock, so its fences
//!   happen-before the ones that run after them, which is stronger than
//!   the Rust/C++ model. A barrier whose job another `SeqCst` fence on the
//!   same path already does in loom's eyes cannot be missed: Q1 in
//!   `report`, the waiter's W1, `get_state`'s fence, and the orderings of
//!   the pending-mask clear and of the grace period's end. (G1 still shows,
//!   as a grace period that never ends.)
//! * loom never switches threads between an atomic operation and the fence
//!   after it (fences are not scheduling points), so Q1 in the entry to an
//!   extended quiescent state, which orders the read sections before the
//!   `watching` increment that the second fence follows at once, is out of
//!   reach.
//! * loom 0.7 can let a thread's read-modify-write read a value older than
//!   the thread's own preceding plain store, when another thread's
//!   read-modify-write of the word ran concurrently (tokio-rs/loom#254). A
//!   plain store to the pending mask, which other CPUs clear with
//!   `fetch_and`, can so be "lost", and loom reports a grace period that
//!   never ends; publishing the mask with a read-modify-write avoids it.
//!
//! Every racing role runs in its own thread or is the model's main thread
//! after the spawns, as in the SRCU models; most models count their
//! outcomes to check that loom explored the interesting ones. With two
//! threads spinning while a third must make progress, loom livelocks (it
//! switches between the two spinners forever): the models avoid that, or
//! run at preemption bound 1.

#![cfg(ksync_loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use loom::thread;

use ksync::rcu::{self, RcuSync};

/// The value a freed element holds.
const FREED: usize = usize::MAX;

#[path = "common/outcomes.rs"]
mod outcomes;
use outcomes::Outcomes;

/// `loom::model` with the preemption bound set to `bound` whatever
/// `LOOM_MAX_PREEMPTIONS` says: higher where that stays cheap or the bug
/// needs it, lower for a model in which two threads can spin while a third
/// must make progress.
fn model_with_bound(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

// ---- the grace-period engine ------------------------------------------------

/// Element `i` is published while `current == i`; the writer replaces
/// element 1 by element 2 and frees element 1. `current` is Relaxed
/// everywhere: only RCU's barriers order anything.
struct World {
    current: AtomicUsize,
    elements: [UnsafeCell<usize>; 3],
}

impl World {
    fn new() -> Arc<Self> {
        Arc::new(World {
            current: AtomicUsize::new(1),
            elements: [UnsafeCell::new(0), UnsafeCell::new(1), UnsafeCell::new(2)],
        })
    }

    /// One read section: look up the current element and read it. Returns
    /// the element's index.
    fn read_section(&self) -> usize {
        let _guard = rcu::read_lock();
        let i = self.current.load(Relaxed);
        // SAFETY: a published element stays valid until a grace period
        // after it is unpublished, and this read section holds that grace
        // period up: that is the property under test, which loom checks.
        let v = self.elements[i].with(|p| unsafe { *p });
        assert_ne!(v, FREED, "read a freed element");
        assert_eq!(v, i);
        i
    }

    /// Unpublishes element 1, waits with `wait`, frees element 1.
    fn replace(&self, wait: Wait) {
        self.current.store(2, Relaxed);
        wait.run();
        // SAFETY: element 1 is unpublished and a grace period has passed,
        // so no reader can still be reading it (loom checks it).
        self.elements[1].with_mut(|p| unsafe { *p = FREED });
    }
}

/// How the writer waits for the grace period.
#[derive(Clone, Copy)]
enum Wait {
    /// `synchronize()`.
    Synchronize,
    /// `start_poll()`, then `poll()` until done, reporting this CPU's
    /// quiescent states meanwhile.
    Poll,
    /// `get_state()`, then `cond_synchronize()`.
    Cond,
}

impl Wait {
    fn run(self) {
        match self {
            Wait::Synchronize => rcu::synchronize(),
            Wait::Poll => {
                let cookie = rcu::start_poll();
                while !rcu::poll(cookie) {
                    rcu::quiescent_state();
                    thread::yield_now();
                }
            }
            Wait::Cond => rcu::cond_synchronize(rcu::get_state()),
        }
    }
}

/// A reader CPU: comes online, one read section, a quiescent state, goes
/// offline. Returns the element it read.
fn reader_cpu(w: &World) -> usize {
    rcu::cpu_online();
    let seen = w.read_section();
    rcu::quiescent_state();
    rcu::cpu_offline();
    seen
}

/// Two CPUs: a reader CPU, and the writer (the model's main thread)
/// replaces element 1 and frees it after waiting with `wait`. With
/// `writer_online` the writer's CPU is online for the whole grace period,
/// so that the grace period waits for its quiescent state too; without,
/// it never comes online, and may end the grace period in its own scan of
/// idle CPUs and see it ended at its first poll, without a spin.
///
/// Preemption bound 4: each model takes well under a second.
fn two_cpus(wait: Wait, writer_online: bool) {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model_with_bound(4, move || {
        let w = World::new();
        let reader = {
            let w = w.clone();
            thread::spawn(move || reader_cpu(&w))
        };
        if writer_online {
            rcu::cpu_online();
        }
        w.replace(wait);
        if writer_online {
            rcu::cpu_offline();
        }
        // 0: the reader saw the old element, 1: the new one.
        seen.record(reader.join().unwrap() / 2);
    });
    outcomes.assert_all_seen(2);
}

/// A reader on a CPU that RCU does not watch (it never comes online): its
/// section makes the CPU watched until it ends (E2 pairs with G1; the end
/// reports for a grace period whose scan saw the section), so the writer's
/// `synchronize` waits for it too. Without E2, or without the end's
/// report, loom finds the freed read or a grace period that never ends.
#[test]
fn synchronize_waits_for_reader_on_unwatched_cpu() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model_with_bound(3, move || {
        let w = World::new();
        let reader = {
            let w = w.clone();
            thread::spawn(move || w.read_section())
        };
        rcu::cpu_online();
        w.replace(Wait::Synchronize);
        rcu::cpu_offline();
        seen.record(reader.join().unwrap() / 2);
    });
    outcomes.assert_all_seen(2);
}

/// `synchronize` waits for a reader that may have seen the old element.
#[test]
fn synchronize_waits_for_reader() {
    two_cpus(Wait::Synchronize, true);
}

/// A polled wait (`start_poll` + `poll`) from a CPU that never came online.
#[test]
fn polled_wait_waits_for_reader() {
    two_cpus(Wait::Poll, false);
}

/// `cond_synchronize` on a fresh cookie.
#[test]
fn cond_synchronize_waits_for_reader() {
    two_cpus(Wait::Cond, true);
}

/// Three CPUs: the writer and a reader as in [`two_cpus`], and a CPU that
/// reads, goes idle without ever reporting a quiescent state, leaves idle,
/// reads again and goes idle for good. The grace period must neither wait
/// for it while it is idle (the model would not terminate) nor miss a read
/// section it runs while RCU watches it.
///
/// Preemption bound 2 (about a second; 3 takes ten).
#[test]
fn idle_cpu_does_not_stall_but_is_waited_for() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model_with_bound(2, move || {
        let w = World::new();
        let reader = {
            let w = w.clone();
            thread::spawn(move || reader_cpu(&w))
        };
        let idler = {
            let w = w.clone();
            thread::spawn(move || {
                rcu::cpu_online();
                let first = w.read_section();
                rcu::idle_enter();
                rcu::idle_exit();
                let second = w.read_section();
                rcu::idle_enter();
                (first, second)
            })
        };
        rcu::cpu_online();
        w.replace(Wait::Synchronize);
        rcu::cpu_offline();
        let r = reader.join().unwrap();
        let (first, second) = idler.join().unwrap();
        // 0/1: the reader saw the old/new element; 2/3: the idle CPU's
        // read after leaving idle saw the old/new element.
        seen.record(r / 2);
        seen.record(2 + second / 2);
        assert!(second >= first);
    });
    outcomes.assert_all_seen(4);
}

/// A CPU's report can be stale: it read `gp_seq` and its pending bit
/// (Relaxed) for one grace period, and clears its bit only later, when
/// that grace period has ended and the next one is being set up. Here a
/// CPU comes online after the first grace period's scan cleared its bit
/// and reports on a stale view while the other CPU ends that grace period
/// and starts the next one: the next one must still end (the model must
/// terminate).
///
/// Preemption bound 3: the stale clear must land inside the start of the
/// next grace period.
#[test]
fn stale_report_does_not_stall_the_next_grace_period() {
    model_with_bound(3, || {
        let late = thread::spawn(|| {
            rcu::cpu_online();
            rcu::quiescent_state();
            rcu::cpu_offline();
        });
        let updater = thread::spawn(|| {
            rcu::cpu_online();
            rcu::synchronize();
            rcu::synchronize();
            rcu::cpu_offline();
        });
        late.join().unwrap();
        updater.join().unwrap();
    });
}

// ---- cookies ------------------------------------------------------------------

/// A cookie taken inside a read section never completes while that section
/// is open, whatever grace period was running when it was taken (the other
/// CPU runs one meanwhile); after the section it does complete.
#[test]
fn cookie_does_not_complete_inside_read_section() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let seen = seen.clone();
        let reader = thread::spawn(move || {
            rcu::cpu_online();
            let (polled, started) = {
                let _guard = rcu::read_lock();
                // 0: no grace period was running, 1: one was (it may end
                // meanwhile, but the cookie needs the next one).
                seen.record(rcu::gp_seq() & 1);
                let polled = rcu::get_state();
                let started = rcu::start_poll();
                for _ in 0..2 {
                    assert!(
                        !rcu::poll(polled) && !rcu::poll(started),
                        "a cookie completed inside the read section it was taken in"
                    );
                    thread::yield_now();
                }
                (polled, started)
            };
            rcu::cond_synchronize(polled);
            assert!(rcu::poll(polled));
            rcu::cond_synchronize(started);
            rcu::cpu_offline();
        });
        rcu::cpu_online();
        rcu::synchronize();
        rcu::cpu_offline();
        reader.join().unwrap();
    });
    outcomes.assert_all_seen(2);
}

// ---- rcu_sync -----------------------------------------------------------------

/// Two writers enter and leave the gate concurrently. A cookie taken while
/// the gate is idle, before either writer exists, must be complete when a
/// writer's `enter` returns, whichever way it got in (closing the gate and
/// waiting for a grace period, waiting for the writer that is closing it,
/// or finding it still closed): every reader that saw the gate idle before
/// it closed has then finished. After both leave, the gate becomes idle
/// only once a grace period has passed since the last `exit` (cookies
/// taken just before each `exit` are complete by then).
///
/// No reader thread: with a reader holding the first writer's grace period
/// up while both writers spin, loom livelocks (it switches between the two
/// spinning threads forever); the cookie stands for the reader.
/// [`rcu_sync_writers_wait_for_fast_readers`] has the reader, at a lower
/// bound.
#[test]
fn rcu_sync_writers_close_the_gate_for_a_grace_period() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let gate = Arc::new(RcuSync::new());
        let idle = rcu::get_state();
        let writer = |poll_first: bool| {
            let gate = gate.clone();
            thread::spawn(move || {
                rcu::cpu_online();
                let reopened = poll_first && gate.poll_idle();
                gate.enter();
                assert!(
                    rcu::poll(idle),
                    "a writer got in before a grace period since the gate was idle"
                );
                assert!(!gate.is_idle(), "idle with a writer inside");
                let before_exit = rcu::get_state();
                gate.exit();
                rcu::cpu_offline();
                (reopened, before_exit)
            })
        };
        let first = writer(false);
        let second = writer(true);
        let (_, first_exit) = first.join().unwrap();
        let (reopened, second_exit) = second.join().unwrap();
        while !gate.poll_idle() {
            rcu::quiescent_state();
            thread::yield_now();
        }
        assert!(
            rcu::poll(first_exit) && rcu::poll(second_exit),
            "the gate reopened before a grace period since the last exit"
        );
        // 0: the second writer found the gate idle again, 1: it did not.
        seen.record(usize::from(!reopened));
    });
    outcomes.assert_all_seen(2);
}

/// Two writers enter and leave the gate concurrently, each writing its own
/// cell in its critical section (the gate does not exclude writers from
/// each other); the second one first polls the gate, so that it may find
/// the first one's exit grace period over and close a gate that reopened.
/// A reader that finds the gate idle inside its read section reads both
/// cells (the fast path): loom reports a race if a writer's critical
/// section overlaps it. After everyone leaves, the gate becomes idle once
/// the exit grace period passes.
///
/// Preemption bound 1: the model did not finish in 20 minutes at 2 (loom
/// explores the two writers spinning while the reader holds up a grace
/// period), and at 1 loom does not reach the second writer waiting for the
/// first one's grace period while the reader is inside:
/// [`rcu_sync_writers_close_the_gate_for_a_grace_period`] covers that.
#[test]
fn rcu_sync_writers_wait_for_fast_readers() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    model_with_bound(1, move || {
        let shared = Arc::new((RcuSync::new(), [UnsafeCell::new(0), UnsafeCell::new(0)]));
        let writer = |poll_first: bool, i: usize| {
            let shared = shared.clone();
            thread::spawn(move || {
                let (gate, data) = &*shared;
                rcu::cpu_online();
                let reopened = poll_first && gate.poll_idle();
                gate.enter();
                assert!(!gate.is_idle(), "idle with a writer inside");
                // SAFETY: only this writer writes cell `i`, and readers that
                // saw the gate idle have finished (loom checks it).
                data[i].with_mut(|p| unsafe { *p += 1 });
                gate.exit();
                rcu::cpu_offline();
                reopened
            })
        };
        let first = writer(false, 0);
        let second = writer(true, 1);
        let reader = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (gate, data) = &*shared;
                rcu::cpu_online();
                let fast = {
                    let _guard = rcu::read_lock();
                    gate.is_idle().then(|| {
                        // SAFETY: the gate is idle, so no writer's critical
                        // section overlaps this read section (loom checks
                        // it).
                        data.iter()
                            .map(|c| c.with(|p| unsafe { *p }))
                            .sum::<usize>()
                    })
                };
                rcu::quiescent_state();
                rcu::cpu_offline();
                fast
            })
        };
        first.join().unwrap();
        let reopened = second.join().unwrap();
        let fast = reader.join().unwrap();
        let (gate, data) = &*shared;
        while !gate.poll_idle() {
            rcu::quiescent_state();
            thread::yield_now();
        }
        assert!(gate.is_idle());
        // SAFETY: every other thread has been joined.
        let sum: usize = data.iter().map(|c| c.with(|p| unsafe { *p })).sum();
        assert_eq!(sum, 2);
        // 0/1: the reader took the slow/fast path; 2: the second writer
        // found the gate reopened.
        seen.record(usize::from(fast.is_some()));
        if reopened {
            seen.record(2);
        }
    });
    outcomes.assert_all_seen(3);
}

/// One writer enters, writes, leaves, and polls the gate until it is idle
/// again, then enters and writes once more; a reader runs two read
/// sections, each taking the fast path if the gate is idle. A fast-path
/// read must not overlap a critical section (the writer's `enter` waits
/// for it), and a reader that finds the gate reopened must see the
/// writer's earlier write (the exit grace period orders it).
#[test]
fn rcu_sync_reopens_after_a_grace_period() {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let shared = Arc::new((RcuSync::new(), UnsafeCell::new(0usize)));
        let writer = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (gate, data) = &*shared;
                rcu::cpu_online();
                for round in 0..2 {
                    gate.enter();
                    // SAFETY: the only writer, and readers that saw the
                    // gate idle have finished (loom checks it).
                    data.with_mut(|p| unsafe { *p += 1 });
                    let before_exit = rcu::get_state();
                    gate.exit();
                    if round == 0 {
                        while !gate.poll_idle() {
                            rcu::quiescent_state();
                            thread::yield_now();
                        }
                        assert!(
                            rcu::poll(before_exit),
                            "the gate reopened before a grace period since the exit"
                        );
                    }
                }
                rcu::cpu_offline();
            })
        };
        let reader = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (gate, data) = &*shared;
                rcu::cpu_online();
                let mut fast = [None; 2];
                for slot in &mut fast {
                    let guard = rcu::read_lock();
                    if gate.is_idle() {
                        // SAFETY: the gate is idle, so no critical section
                        // overlaps this read section, and the ones before
                        // it are visible (loom checks it).
                        *slot = Some(data.with(|p| unsafe { *p }));
                    }
                    drop(guard);
                    rcu::quiescent_state();
                }
                rcu::cpu_offline();
                fast
            })
        };
        writer.join().unwrap();
        let fast = reader.join().unwrap();
        for v in fast.into_iter().flatten() {
            // 0: before the first critical section, 1: between the two.
            assert!(v <= 1, "fast path while the gate was closed");
            seen.record(v);
        }
        if fast.iter().all(Option::is_none) {
            seen.record(2);
        }
        let (gate, _) = &*shared;
        while !gate.poll_idle() {
            rcu::quiescent_state();
            thread::yield_now();
        }
    });
    outcomes.assert_all_seen(3);
}
