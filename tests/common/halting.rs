//! A `SpinWait` whose `wait` really halts the calling "CPU" (thread) until
//! it is kicked: a per-thread latched event, as Arm's event register is
//! for `WFE`/`SEV`. `kick` sets every thread's event and wakes them; `wait`
//! returns at once if its event is set (clearing it), else sleeps until it
//! is. A wait that sleeps longer than [`TIMEOUT`] is a lost wake-up: it is
//! counted in [`timeouts`] (the tests fail on any) and then returns, which
//! the contract allows (a spurious return), so that a broken run ends
//! instead of hanging. Included by the tests that use it with `#[path]`.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use ksync::kernel::SpinWait;

/// How long a waiter may sleep before the wait counts as a lost wake-up.
/// Far longer than any critical section or scheduling delay here.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The timeout in use, in milliseconds (the dropped-kick control shortens
/// it: it expects the timeouts).
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(TIMEOUT.as_millis() as u64);

/// Waits that timed out (lost wake-ups).
static TIMEOUTS: AtomicUsize = AtomicUsize::new(0);
/// Waits that slept (the event was not yet set): shows the test halts.
static SLEPT: AtomicUsize = AtomicUsize::new(0);
/// Kicks sent.
static KICKS: AtomicUsize = AtomicUsize::new(0);

/// One thread's event register.
struct Event {
    set: Mutex<bool>,
    wake: Condvar,
}

impl Event {
    /// A new thread's event starts set, so its first `wait` returns at
    /// once (the one stale return the contract allows). A kick sent before
    /// the thread registered its event reached no event of its: without
    /// this the thread's first `wait` would sleep through it. A real event
    /// register exists before the CPU first waits; this one exists only
    /// from the thread's first `wait`, after the waiter's last check.
    fn new() -> Self {
        Self {
            set: Mutex::new(true),
            wake: Condvar::new(),
        }
    }
}

/// Every live thread's event, so that a kick reaches them all.
static EVENTS: Mutex<Vec<Weak<Event>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Arc<Event> = {
        let event = Arc::new(Event::new());
        let mut all = EVENTS.lock().unwrap();
        all.retain(|e| e.strong_count() > 0);
        all.push(Arc::downgrade(&event));
        event
    };
}

/// Halts until this thread's event is set (or the timeout), then clears it.
fn wait() {
    MINE.with(|event| {
        let timeout = Duration::from_millis(TIMEOUT_MS.load(Relaxed));
        let set = event.set.lock().unwrap();
        let mut set = if *set {
            set
        } else {
            SLEPT.fetch_add(1, Relaxed);
            let (set, result) = event
                .wake
                .wait_timeout_while(set, timeout, |set| !*set)
                .unwrap();
            if result.timed_out() {
                TIMEOUTS.fetch_add(1, Relaxed);
            }
            set
        };
        *set = false;
    });
}

/// Sets every thread's event and wakes it. The mutex orders the kicker's
/// earlier stores before the woken thread's later loads.
fn kick() {
    KICKS.fetch_add(1, Relaxed);
    let all: Vec<Arc<Event>> = EVENTS
        .lock()
        .unwrap()
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for event in all {
        *event.set.lock().unwrap() = true;
        event.wake.notify_one();
    }
}

/// The halting policy.
pub(crate) static HALTING: SpinWait = SpinWait {
    wait,
    kick: Some(kick),
};

/// The control: `wait` halts, but the lock's kicks are dropped (as if the
/// kick were `None`), so waiters sleep until the timeout. Its `kick` is
/// `Some` (so the waiters advertise, and the unlocks call it) but sends
/// nothing.
pub(crate) static DROPPED_KICK: SpinWait = SpinWait {
    wait,
    kick: Some(drop_kick),
};

fn drop_kick() {
    KICKS.fetch_add(1, Relaxed);
}

/// Sets the timeout (the control uses a short one).
pub(crate) fn set_timeout(timeout: Duration) {
    TIMEOUT_MS.store(timeout.as_millis() as u64, Relaxed);
}

/// `(timeouts, slept, kicks)` since the last reset.
pub(crate) fn counts() -> (usize, usize, usize) {
    (
        TIMEOUTS.load(Relaxed),
        SLEPT.load(Relaxed),
        KICKS.load(Relaxed),
    )
}

/// Zeroes the counts.
pub(crate) fn reset() {
    TIMEOUTS.store(0, Relaxed);
    SLEPT.store(0, Relaxed);
    KICKS.store(0, Relaxed);
}
