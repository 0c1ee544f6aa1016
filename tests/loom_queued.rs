//! loom models of the queued spinlock (`RawQueuedLock`): uncontended
//! `try_lock`, the pending path, the MCS queue hand-off, an
//! "interrupt-level" acquisition of a second lock while queued on the
//! first, the test-and-set mode for preemptible CPUs, and FIFO waiters
//! that really halt until kicked (`park`/`unpark`: a lost wake-up is a
//! deadlock loom reports).
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 KSYNC_MAX_CPUS=4 cargo test --release --test loom_queued`
//! (a 4-CPU build keeps the per-CPU node table, built afresh in every
//! execution, small). loom's `UnsafeCell` stands for the protected data,
//! so a missing happens-before between critical sections is reported as a
//! data race; a lost hand-off shows as a model that never ends (loom
//! reports the exceeded branch limit).
//!
//! The mode ([`set_vcpu_preemptible`]) and the spin-wait hook are
//! process-wide, so the models run one at a time ([`SERIAL`]) and each
//! execution sets the mode it models. As in `tests/loom.rs`, every racing
//! role runs in a spawned thread and the main thread only joins.

#![cfg(ksync_loom)]

use std::sync::Mutex;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use ksync::kernel::{self, SpinWait, set_vcpu_preemptible};
use ksync::spinlock::RawQueuedLock;

#[path = "common/loom_halting.rs"]
mod halting;
use halting::{HALTING, YIELD, haltable, unhaltable};

#[path = "common/outcomes.rs"]
mod outcomes;
use outcomes::Outcomes;

/// One model at a time: they set process-wide settings.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A model builder for three spinning CPUs: as in `tests/loom.rs`, a
/// preemption bound of 2 does not finish in reasonable time there (loom
/// explores the spinning), so it is at most 1.
fn three_cpus() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(1, |b| b.min(1)));
    builder
}

/// A queued lock and the data it protects.
struct Locked {
    lock: RawQueuedLock,
    data: UnsafeCell<usize>,
}

// SAFETY: `data` is only accessed with `lock` held (loom checks it).
unsafe impl Sync for Locked {}

impl Locked {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            lock: RawQueuedLock::new(),
            data: UnsafeCell::new(0),
        })
    }

    /// The critical section: adds one to the data under the lock and
    /// returns the lock's `Debug` text as seen while held.
    fn bump(&self) -> String {
        self.lock.lock();
        let seen = format!("{:?}", self.lock);
        // SAFETY: the lock is held (that is what the model checks).
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.unlock() };
        seen
    }

    /// The critical section alone: adds one to the data under the lock
    /// (no look at the lock while held: each such read is one more point
    /// for loom to schedule at).
    fn bump_quiet(&self) {
        self.lock.lock();
        // SAFETY: the lock is held (that is what the model checks).
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.unlock() };
    }

    /// `try_lock`, and on success the same critical section as `bump`:
    /// how many times it got in (0 or 1).
    fn try_bump(&self) -> usize {
        if !self.lock.try_lock() {
            return 0;
        }
        // SAFETY: the lock is held.
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.unlock() };
        1
    }

    /// `cpus` CPUs `bump` at once; for each, whether the lock's `Debug`
    /// text it saw while holding the lock contained `marker`. Checks that
    /// every bump counted and the lock ended free.
    fn bump_from(this: &Arc<Self>, cpus: usize, marker: &'static str) -> Vec<bool> {
        let threads: Vec<_> = (0..cpus)
            .map(|_| {
                let l = Arc::clone(this);
                thread::spawn(move || l.bump().contains(marker))
            })
            .collect();
        let seen = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(this.value(), cpus);
        assert!(!this.lock.is_locked());
        seen
    }

    /// The final value, once every thread has been joined.
    fn value(&self) -> usize {
        // SAFETY: all users are joined.
        self.data.with(|d| unsafe { *d })
    }
}

/// `try_lock` from two CPUs on a free lock: at least the first succeeds,
/// the data counts exactly the successes, and a success after an unlock
/// sees the earlier critical section.
#[test]
fn uncontended_try_lock() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        set_vcpu_preemptible(false);
        let l = Locked::new();
        let tries: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.try_bump())
            })
            .collect();
        let wins: usize = tries.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(wins >= 1, "neither try_lock of a free lock succeeded");
        assert_eq!(l.value(), wins);
        assert!(!l.lock.is_locked());
        seen.record(wins - 1);
    });
    outcomes.assert_all_seen(2);
}

/// Two CPUs lock: the second either finds the lock free or becomes the
/// pending CPU (the holder sees `pending: true`) and takes over.
#[test]
fn pending_path() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        set_vcpu_preemptible(false);
        let pending = Locked::bump_from(&Locked::new(), 2, "pending: true").contains(&true);
        seen.record(usize::from(pending));
    });
    outcomes.assert_all_seen(2);
}

/// Three CPUs lock: with one holding and one pending, the third queues
/// (a holder sees a tail) and is handed the head, then the lock.
#[test]
fn queue_hand_off() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    three_cpus().check(move || {
        set_vcpu_preemptible(false);
        let queued = Locked::bump_from(&Locked::new(), 3, "tail: Some").contains(&true);
        seen.record(usize::from(queued));
    });
    outcomes.assert_all_seen(2);
}

/// Four CPUs lock: with one holding, one pending and a queue head, the
/// fourth queues behind the head, which hands the head over through the
/// fourth's node (its `locked` flag) when it takes the lock.
#[test]
fn mcs_node_hand_off() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    three_cpus().check(move || {
        set_vcpu_preemptible(false);
        let seen_tail = Locked::bump_from(&Locked::new(), 4, "tail: Some");
        seen.record(seen_tail.iter().filter(|&&t| t).count().min(2));
    });
    outcomes.assert_all_seen(3);
}

impl Locked {
    /// The critical section of `bump`, returning whether the lock's
    /// `Debug` text showed a pending CPU while held, and the data's value
    /// after this bump (its place in the order of acquisitions).
    fn bump_seeing_pending(&self) -> (bool, usize) {
        self.lock.lock();
        let pending = format!("{:?}", self.lock).contains("pending: true");
        // SAFETY: the lock is held (that is what the model checks).
        let place = self.data.with_mut(|d| unsafe {
            *d += 1;
            *d
        });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.unlock() };
        (pending, place)
    }
}

/// The uncontended path is two steps (read `pending_tail`, then take
/// `locked`), so a CPU whose read came before another CPU set the pending
/// bit may take the lock ahead of it; but only once: a CPU that has seen
/// the bit (here: while holding the lock) never passes that pending CPU
/// again (the bound of "The price" in `QueuedLock`'s docs). The main
/// thread holds the lock while a CPU becomes pending and another takes it
/// twice; the second CPU's later acquisition must come after the pending
/// CPU's whenever it saw the bit. Both orders of the first two
/// acquisitions are reached. (A preemption bound of 1, as the other
/// three-CPU models: at 2 loom reports its branch limit, the spinning.)
#[test]
fn fast_path_passes_a_pending_cpu_at_most_once() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    three_cpus().check(move || {
        set_vcpu_preemptible(false);
        let l = Locked::new();
        l.lock.lock();
        let pending = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.bump_seeing_pending().1)
        };
        let twice = {
            let l = Arc::clone(&l);
            thread::spawn(move || [l.bump_seeing_pending(), l.bump_seeing_pending()])
        };
        // SAFETY: locked above on this thread.
        unsafe { l.lock.unlock() };
        let p = pending.join().unwrap();
        let [(saw, first), (_, second)] = twice.join().unwrap();
        assert_eq!(l.value(), 3);
        if saw {
            assert!(
                p < second,
                "a CPU that saw the pending bit took the lock again before the pending CPU \
                 (pending CPU's place {p}, its places {first} and {second})"
            );
        }
        seen.record(usize::from(first < p));
    });
    outcomes.assert_all_seen(2);
}

loom::thread_local! {
    /// What this thread's "interrupt" does, once, from the spin-wait hook
    /// while it waits for another lock.
    static IRQ: std::cell::RefCell<Option<Irq>> = std::cell::RefCell::new(None);
}

/// An "interrupt handler" that takes lock `b`, noting whether its CPU
/// was queued on lock `a` (its node 0 in use) when it arrived.
struct Irq {
    a: Arc<Locked>,
    b: Arc<Locked>,
    cpu: usize,
    while_queued: Arc<loom::sync::atomic::AtomicBool>,
}

impl Irq {
    fn run(self) {
        let queued =
            format!("{:?}", self.a.lock).contains(&format!("tail: Some(({}, 0))", self.cpu));
        self.while_queued
            .store(queued, loom::sync::atomic::Ordering::Relaxed);
        self.b.bump();
    }
}

/// The spin-wait hook: on a thread with an `IRQ`, run it once (an
/// interrupt arriving mid-wait); otherwise yield to the model.
fn irq_hook() {
    match IRQ.with(|i| i.borrow_mut().take()) {
        Some(irq) => irq.run(),
        None => thread::yield_now(),
    }
}

static IRQ_HOOK: SpinWait = SpinWait {
    wait: irq_hook,
    kick: None,
};

/// A CPU waiting for lock A is "interrupted" and takes lock B, which
/// another CPU uses too; a third CPU contends for A. Exclusion holds on
/// both locks and both drain, including the executions in which the
/// handler ran while its CPU was queued on A (A's tail naming its node 0,
/// so a contended B takes node 1).
#[test]
fn nested_acquisition_while_queued() {
    let _serial = serial();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    three_cpus().check(move || {
        set_vcpu_preemptible(false);
        kernel::set_spin_wait(&IRQ_HOOK);
        let (a, b) = (Locked::new(), Locked::new());
        let while_queued = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let holder = {
            let a = Arc::clone(&a);
            thread::spawn(move || {
                a.bump();
            })
        };
        let other = {
            let (a, b) = (Arc::clone(&a), Arc::clone(&b));
            thread::spawn(move || {
                a.bump();
                b.bump();
            })
        };
        let nester = {
            let (a, b, flag) = (Arc::clone(&a), Arc::clone(&b), Arc::clone(&while_queued));
            thread::spawn(move || {
                let cpu = kernel::cpu_id();
                let irq = Irq {
                    a: Arc::clone(&a),
                    b,
                    cpu,
                    while_queued: flag,
                };
                IRQ.with(|i| *i.borrow_mut() = Some(irq));
                a.bump();
                // The wait for A was too short for the hook: the
                // "interrupt" comes after it.
                if let Some(irq) = IRQ.with(|i| i.borrow_mut().take()) {
                    irq.run();
                }
            })
        };
        for t in [holder, other, nester] {
            t.join().unwrap();
        }
        assert_eq!(a.value(), 3);
        assert_eq!(b.value(), 2);
        assert!(!a.lock.is_locked() && !b.lock.is_locked());
        seen.record(usize::from(
            while_queued.load(loom::sync::atomic::Ordering::Relaxed),
        ));
    });
    outcomes.assert_all_seen(2);
}

/// Preemptible CPUs: lock is test-and-set on `locked`, tried while both
/// halves read zero (no pending bit, no queue). Exclusion, and `try_lock`
/// from a third CPU.
#[test]
fn test_and_set_mode() {
    let _serial = serial();
    three_cpus().check(|| {
        set_vcpu_preemptible(true);
        let l = Locked::new();
        let mut cpus: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    let seen = l.bump();
                    assert!(
                        !seen.contains("pending: true") && !seen.contains("tail: Some"),
                        "a test-and-set waiter marked the word: {seen}"
                    );
                    1
                })
            })
            .collect();
        cpus.push({
            let l = Arc::clone(&l);
            thread::spawn(move || l.try_bump())
        });
        let done: usize = cpus.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(l.value(), done);
        assert!(!l.lock.is_locked());
        set_vcpu_preemptible(false);
    });
}

/// FIFO mode, every waiter halts until kicked: the main thread holds the
/// lock while three CPUs arrive (a pending CPU, a queue head and its
/// successor), then unlocks. The head takes the lock while its successor
/// is between its tail exchange and its link store, waits for the link
/// and halts; before the link store kicked, nobody woke it (loom reports
/// the deadlock: every thread parked). Also covers the unlock's kicks in
/// FIFO mode and the pending CPU's wait.
///
/// The event register (see `halting::EVENT`) must not lose a kick itself: a
/// register kept in a loom atomic did (a kick's store ordered before an
/// earlier halt's clear), and this model then reported a deadlock of the
/// queue head and its successor that was the register's, not the lock's.
///
/// The model can fail: without the kick after the link store (the bug
/// above) it reports the head and its successor parked after 8 s at
/// preemption bound 2 (2026-12-06, load ~7 on 2 cores); at bound 1 it
/// passes that bug, so it needs the driver's bound 2. At bound 2 the
/// previous queued lock (one word, merge-base 530b15c) passes in 69 s
/// wall (18 s CPU); the two-halves lock passes too, but in 926 s wall
/// (10.5 min CPU); with the critical section's `Debug` read of the lock
/// left out, 849 s wall (11 min CPU, 2026-12-06). Too long for the CI's
/// loom group: [`halting_hand_offs`] covers the same roles with one
/// thread fewer and runs there; this one is run by hand (`--ignored`).
#[test]
#[ignore = "the full three-waiter model: 15 minutes at preemption bound 2 (halting_hand_offs runs in CI)"]
fn halting_waiters_fifo() {
    let _serial = serial();
    // Halted waiters do not spin, so the model stays small enough for the
    // driver's preemption bound (2).
    loom::model::Builder::new().check(|| {
        set_vcpu_preemptible(false);
        kernel::set_spin_wait(&HALTING);
        // Not the main thread: it never waits for the lock, and an unpark
        // would wake it from its `join` (loom's unpark wakes any block).
        halting::reset();
        let l = Locked::new();
        l.lock.lock();
        let cpus: Vec<_> = (0..3)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    l.bump_quiet();
                })
            })
            .collect();
        // SAFETY: locked above on this thread.
        unsafe { l.lock.unlock() };
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 3);
        assert!(!l.lock.is_locked());
        kernel::set_spin_wait(&YIELD);
    });
}

/// [`halting_waiters_fifo`]'s roles with one thread fewer, so that loom
/// explores it at the driver's preemption bound 2 in CI: the main thread
/// holds the lock while two CPUs arrive (the first takes the pending bit,
/// the second heads the queue), unlocks, then takes the lock again, and
/// joins the queue behind the head if both are still waiting. Every waiter
/// halts until kicked. The lost wake-up it exists for: the head takes the
/// lock while the main thread is between its tail exchange and its link
/// store, waits for the link and halts; without the kick after the link
/// store nobody wakes it (loom: every thread parked).
///
/// Checked (2026-12-06): with that kick removed, loom reports "deadlock"
/// (the main thread and the head blocked) in 3 s at preemption bound 2;
/// at bound 1 it passes that bug, so it needs the driver's bound 2. With
/// the kick, it passes at bound 2 in 5 s.
#[test]
fn halting_hand_offs() {
    let _serial = serial();
    loom::model::Builder::new().check(|| {
        set_vcpu_preemptible(false);
        kernel::set_spin_wait(&HALTING);
        halting::reset();
        haltable();
        let l = Locked::new();
        l.lock.lock();
        let cpus: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    l.bump_quiet();
                })
            })
            .collect();
        // SAFETY: locked above on this thread.
        unsafe { l.lock.unlock() };
        l.bump_quiet();
        unhaltable();
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 3);
        assert!(!l.lock.is_locked());
        kernel::set_spin_wait(&YIELD);
    });
}
