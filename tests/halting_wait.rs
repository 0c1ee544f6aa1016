//! Lost wake-ups with a `SpinWait` that really halts.
//!
//! Every waiter of every ksync lock halts in [`SpinWait::wait`] once its
//! bounded spin runs out, and stays halted until a kick (a per-thread
//! latched event, `tests/common/halting.rs`). A wait that sleeps for 10 s
//! without a kick is a lost wake-up and fails the test: some store that
//! made the waiter's condition true was not followed by a kick. Each lock
//! (queued, ticket, TTAS, `LockRef`'s) is hammered by 4 and 8 threads on
//! this 2-core machine in FIFO mode, in preemptible mode, and with the
//! mode switched back and forth while the lock is contended. A control
//! with the kick dropped must time out.
//!
//! A binary of its own: the spin-wait policy and the mode are
//! process-wide, and the tests here run one at a time.

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

#[path = "common/halting.rs"]
mod halting;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use ksync::LockRef;
use ksync::kernel::{self, SpinWait};
use ksync::lock_api::RawMutex;
use ksync::spinlock::{RawQueuedLock, RawTicketLock, RawTtasLock};

/// How long each run hammers its lock.
const RUN: Duration = Duration::from_millis(if cfg!(debug_assertions) { 150 } else { 300 });

/// One test at a time: the policy and the mode are process-wide.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Fifo,
    Preemptible,
    /// Switched every millisecond while the lock is contended.
    Switching,
}

/// A counter that only exclusion keeps exact: a load and a store, not an
/// atomic increment.
struct Racy(AtomicU64);

impl Racy {
    fn bump(&self) {
        self.0.store(self.0.load(Relaxed) + 1, Relaxed);
    }
}

/// Runs `op` (one critical section that bumps the counter it returns from
/// `count`) on `threads` threads for [`RUN`] in `mode`, with `policy`.
/// Returns `(operations, timeouts, slept)`; checks the count is exact.
fn hammer(
    what: &str,
    policy: &'static SpinWait,
    mode: Mode,
    threads: usize,
    op: &(dyn Fn() + Sync),
    count: &dyn Fn() -> u64,
) -> (u64, usize, usize) {
    kernel::set_spin_wait(policy);
    kernel::set_vcpu_preemptible(!matches!(mode, Mode::Fifo));
    halting::reset();
    let before = count();
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let start = Instant::now();
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut ops = 0;
                while !stop.load(Relaxed) {
                    op();
                    ops += 1;
                }
                done.fetch_add(ops, Relaxed);
            });
        }
        let mut preemptible = false;
        while start.elapsed() < RUN && halting::counts().0 == 0 {
            if let Mode::Switching = mode {
                kernel::set_vcpu_preemptible(preemptible);
                preemptible = !preemptible;
            }
            thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Relaxed);
    });
    let done = done.load(Relaxed);
    let (timeouts, slept, kicks) = halting::counts();
    eprintln!(
        "{what} {mode:?} x{threads}: {done} ops in {:?}, {slept} halts, {kicks} kicks, {timeouts} lost wake-ups",
        start.elapsed()
    );
    assert_eq!(
        count() - before,
        done,
        "{what} {mode:?} x{threads}: exclusion"
    );
    (done, timeouts, slept)
}

/// Every mode at 4 and 8 threads with the halting policy: no lost
/// wake-up, and waiters did halt.
fn every_mode(what: &str, op: &(dyn Fn() + Sync), count: &dyn Fn() -> u64) {
    let _serial = serial();
    halting::set_timeout(halting::TIMEOUT);
    let mut slept = 0;
    for mode in [Mode::Fifo, Mode::Preemptible, Mode::Switching] {
        for threads in [4, 8] {
            let (ops, timeouts, halts) = hammer(what, &halting::HALTING, mode, threads, op, count);
            assert_eq!(
                timeouts,
                0,
                "{what} {mode:?} x{threads}: a waiter halted for {:?} without a kick (lost wake-up) after {ops} operations",
                halting::TIMEOUT
            );
            slept += halts;
        }
    }
    assert!(
        slept > 0,
        "{what}: no waiter ever halted (the test tests nothing)"
    );
}

#[test]
fn queued_lock() {
    let lock = <RawQueuedLock as RawMutex>::INIT;
    let n = Racy(AtomicU64::new(0));
    let op = || {
        lock.lock();
        n.bump();
        // SAFETY: locked just above on this thread.
        unsafe { lock.unlock() };
    };
    every_mode("queued", &op, &|| n.0.load(Relaxed));
}

#[test]
fn ticket_lock() {
    let lock = <RawTicketLock as RawMutex>::INIT;
    let n = Racy(AtomicU64::new(0));
    let op = || {
        lock.lock();
        n.bump();
        // SAFETY: locked just above on this thread.
        unsafe { lock.unlock() };
    };
    every_mode("ticket", &op, &|| n.0.load(Relaxed));
}

#[test]
fn ttas_lock() {
    let lock = <RawTtasLock as RawMutex>::INIT;
    let n = Racy(AtomicU64::new(0));
    let op = || {
        lock.lock();
        n.bump();
        // SAFETY: locked just above on this thread.
        unsafe { lock.unlock() };
    };
    every_mode("TTAS", &op, &|| n.0.load(Relaxed));
}

/// `LockRef`'s embedded lock: locked increments mixed with lockless ones
/// (which change the word under the waiters, and fall back to the lock
/// while it is held).
#[test]
fn lockref_lock() {
    let r = LockRef::new(0);
    let flip = AtomicBool::new(false);
    let op = || {
        if flip.fetch_xor(true, Relaxed) {
            r.get();
        } else {
            let mut g = r.lock();
            let c = g.count();
            g.set_count(c + 1);
        }
    };
    every_mode("lockref", &op, &|| r.count() as u64);
}

/// The harness itself: a kick sent after a waiter's last check but before
/// its thread first called `wait` must still end that `wait` (the event
/// is latched). The harness's events used to exist only from a thread's
/// first `wait`, so such a kick reached nothing and the wait slept until
/// the timeout: the rare "lost wake-ups" the queued lock's stress showed
/// under qemu-user were this, not the lock (a 5 ms delay before a new
/// thread registered its event made them happen on every run).
#[test]
fn a_kick_before_a_threads_first_wait_is_latched() {
    let _serial = serial();
    halting::set_timeout(Duration::from_millis(500));
    halting::reset();
    let kicked = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            // The waiter has checked its condition (false) and is about to
            // halt when the kick lands.
            while !kicked.load(Relaxed) {
                thread::yield_now();
            }
            (halting::HALTING.wait)();
        });
        (halting::HALTING.kick.unwrap())();
        kicked.store(true, Relaxed);
    });
    let (timeouts, _, kicks) = halting::counts();
    halting::set_timeout(halting::TIMEOUT);
    assert_eq!(kicks, 1);
    assert_eq!(
        timeouts, 0,
        "a kick before a thread's first wait was lost by the harness"
    );
}

/// The control: `wait` halts and the kicks are dropped. Waiters must time
/// out (the harness can see a lost wake-up at all).
#[test]
fn dropped_kick_times_out() {
    let _serial = serial();
    halting::set_timeout(Duration::from_millis(100));
    let lock = <RawQueuedLock as RawMutex>::INIT;
    let n = Racy(AtomicU64::new(0));
    let op = || {
        lock.lock();
        n.bump();
        // SAFETY: locked just above on this thread.
        unsafe { lock.unlock() };
    };
    let (_, timeouts, _) = hammer(
        "queued, kick dropped",
        &halting::DROPPED_KICK,
        Mode::Fifo,
        4,
        &op,
        &|| n.0.load(Relaxed),
    );
    halting::set_timeout(halting::TIMEOUT);
    kernel::set_spin_wait(&halting::HALTING);
    assert!(timeouts > 0, "halting waiters with no kick never timed out");
}

/// A waiter that halted in preemptible mode, then the mode switched to
/// FIFO, then the holder unlocked: the unlock must kick it (before the
/// fix the unlocks kicked only in preemptible mode, and the queued lock's
/// only when the word showed FIFO waiters, which a test-and-set waiter
/// does not leave: the waiter slept until the timeout).
fn kicked_across_a_mode_switch(
    what: &str,
    hold: &dyn Fn(),
    release: &dyn Fn(),
    take: &(dyn Fn() + Sync),
) {
    let _serial = serial();
    halting::set_timeout(halting::TIMEOUT);
    kernel::set_spin_wait(&halting::HALTING);
    kernel::set_vcpu_preemptible(true);
    halting::reset();
    hold();
    let start = Instant::now();
    thread::scope(|s| {
        let waiter = s.spawn(take);
        while halting::counts().1 == 0 {
            assert!(
                start.elapsed() < halting::TIMEOUT,
                "{what}: the waiter never halted"
            );
            thread::sleep(Duration::from_millis(1));
        }
        kernel::set_vcpu_preemptible(false);
        release();
        waiter.join().unwrap();
    });
    let (timeouts, _, _) = halting::counts();
    eprintln!(
        "{what}: the waiter got the lock {:?} after it halted",
        start.elapsed()
    );
    assert_eq!(
        timeouts, 0,
        "{what}: the waiter halted in preemptible mode was not kicked by a FIFO-mode unlock (lost wake-up)"
    );
}

/// [`kicked_across_a_mode_switch`] for a raw `lock_api` lock.
fn raw_mode_switch<L: RawMutex + Sync>(what: &str) {
    let lock = L::INIT;
    kicked_across_a_mode_switch(
        what,
        &|| lock.lock(),
        // SAFETY: `hold` locked it on this thread.
        &|| unsafe { lock.unlock() },
        &|| {
            lock.lock();
            // SAFETY: locked just above on this thread.
            unsafe { lock.unlock() };
        },
    );
}

#[test]
fn queued_mode_switch() {
    raw_mode_switch::<RawQueuedLock>("queued");
}

#[test]
fn ticket_mode_switch() {
    raw_mode_switch::<RawTicketLock>("ticket");
}

#[test]
fn ttas_mode_switch() {
    raw_mode_switch::<RawTtasLock>("TTAS");
}

#[test]
fn lockref_mode_switch() {
    let r = LockRef::new(0);
    let held = Mutex::new(None);
    kicked_across_a_mode_switch(
        "lockref",
        &|| *held.lock().unwrap() = Some(r.lock()),
        &|| drop(held.lock().unwrap().take()),
        &|| drop(r.lock()),
    );
}
