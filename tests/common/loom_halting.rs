//! The halting CPU of the loom models (`SpinWait` hooks that really halt
//! until kicked, as `WFE`/`SEV`): shared by `tests/loom_queued.rs`,
//! `tests/loom_queued_nesting.rs` and `tests/loom_rwspinlock_halting.rs`.
#![allow(dead_code)]

use std::sync::Mutex;

use ksync::kernel::SpinWait;
use loom::thread;

/// The CPUs of the current halting model: every modelled thread that may
/// halt registers itself, and its place in this list names its event
/// register.
pub(crate) static HALTABLE: Mutex<Vec<Option<thread::Thread>>> = Mutex::new(Vec::new());

/// Each halting CPU's event register (`WFE`'s), set by a kick and
/// consumed by a halt; cleared at the start of every execution.
///
/// A `std` atomic on purpose, not a loom one. loom runs one thread at a
/// time, so a set here is seen by every later halt: the register keeps
/// the real-time order of kicks and halts, as the hardware's does. As a
/// loom atomic it could lose a kick: a kick's `store(true)` that no
/// happens-before orders after a halt's `swap(false)` may be placed before
/// it in the location's modification order (the C++ model allows it, loom
/// explores it), so a halt after both reads the cleared register; and
/// loom's own unpark token, which would cover that halt, is dropped when
/// the unpark lands while the thread is in the `yield_now` of its relax
/// round. Both were traced as the deadlock this model reported (branch
/// `queued`, 2026-12-06): the queue head halted on a clear register after
/// two unlocks had kicked it. The memory ordering a kick gives (the kicker's
/// stores before it are seen by the kicked CPU after it) is loom's
/// `unpark`, which joins the kicker's history into the target's at once,
/// whatever the target is doing.
pub(crate) static EVENT: [std::sync::atomic::AtomicBool; 4] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 4];

loom::thread_local! {
    /// This thread's place in `HALTABLE`.
    pub(crate) static SLOT: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX);
}

/// Registers this thread as a CPU that may halt.
pub(crate) fn haltable() {
    let mut all = HALTABLE.lock().unwrap();
    SLOT.with(|s| s.set(all.len()));
    all.push(Some(thread::current()));
}

/// Takes this thread out of the kicks (its event register stays): for the
/// main thread before it joins, as an unpark would wake it from its `join`
/// (loom's unpark wakes any block).
pub(crate) fn unhaltable() {
    HALTABLE.lock().unwrap()[SLOT.with(std::cell::Cell::get)] = None;
}

/// `SpinWait::wait` that really halts, as `WFE` does: returns at once if
/// this CPU's event register is set (clearing it), else parks until a kick
/// (whose register it leaves set: one stale return later, as `WFE`). The
/// register, not loom's unpark token, is what latches a kick (see
/// [`EVENT`]); a stale token only makes a later park return at once. A
/// model in which every thread is parked is reported by loom as a
/// deadlock: a lost wake-up.
pub(crate) fn halt() {
    // (Not a loom operation: no scheduling point between the test and the
    // park, as between `WFE`'s test of the register and the sleep.)
    if !EVENT[SLOT.with(std::cell::Cell::get)].swap(false, std::sync::atomic::Ordering::SeqCst) {
        thread::park();
    }
}

/// `SpinWait::kick`: sets every registered CPU's event register, then
/// unparks it (loom's unpark orders the kicker's earlier accesses before
/// the kicked thread's later ones, whether it is parked or not).
pub(crate) fn kick_all() {
    let all = HALTABLE.lock().unwrap().clone();
    for (slot, t) in all.into_iter().enumerate() {
        EVENT[slot].store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = t {
            t.unpark();
        }
    }
}

pub(crate) static HALTING: SpinWait = SpinWait {
    wait: halt,
    kick: Some(kick_all),
};

/// Back to a policy that never sleeps (the other models assume one).
pub(crate) static YIELD: SpinWait = SpinWait {
    wait: thread::yield_now,
    kick: None,
};

/// A model's start: no CPU registered, every event register clear.
pub(crate) fn reset() {
    HALTABLE.lock().unwrap().clear();
    for e in &EVENT {
        e.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
