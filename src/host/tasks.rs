//! The host's scheduler hooks on OS threads: every thread is a task whose
//! token indexes a process-wide table of thread handles, `block` is
//! `std::thread::park` (whose token is the "wake pending" flag the
//! `Kernel::block` contract asks for) and `wake` is `unpark`.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};
use std::vec::Vec;

/// One live task: its thread, and whether it is parked (for
/// `task_running`).
struct Task {
    thread: Thread,
    parked: AtomicBool,
}

/// Live tasks; token = index + 1. A slot is freed when its thread exits.
/// Read-locked by `wake` (and by `task_running` past [`FAST_SLOTS`]), so
/// wakers of different tasks do not queue behind each other.
static TASKS: RwLock<Vec<Option<Arc<Task>>>> = RwLock::new(Vec::new());

fn tasks() -> RwLockReadGuard<'static, Vec<Option<Arc<Task>>>> {
    TASKS.read().unwrap_or_else(|e| e.into_inner())
}

fn tasks_mut() -> RwLockWriteGuard<'static, Vec<Option<Arc<Task>>>> {
    TASKS.write().unwrap_or_else(|e| e.into_inner())
}

/// The first slots' "on a CPU" flags, outside the table: `task_running`
/// is what a mutex spinner asks on every few rounds, and a kernel answers
/// it with one load (Linux's `owner->on_cpu`), not with a lock that every
/// spinner and waker takes (which the table's lock was, and made the
/// sleeping mutex's contended figure the cost of this hook).
const FAST_SLOTS: usize = 1024;
/// Per fast slot: a live task, not parked. Relaxed: a hint for spinners,
/// as `on_cpu` is.
static RUNNING: [AtomicBool; FAST_SLOTS] = [const { AtomicBool::new(false) }; FAST_SLOTS];

/// Frees the thread's slot when it exits.
struct Slot(usize, Arc<Task>);

impl Drop for Slot {
    fn drop(&mut self) {
        // What the exiting task held is forgotten with it.
        #[cfg(feature = "lockdep")]
        crate::lockdep::task_exit(self.0);
        if let Some(running) = RUNNING.get(self.0 - 1) {
            running.store(false, Ordering::Relaxed);
        }
        tasks_mut()[self.0 - 1] = None;
    }
}

std::thread_local! {
    static SLOT: Slot = {
        let task = Arc::new(Task { thread: std::thread::current(), parked: AtomicBool::new(false) });
        let mut table = tasks_mut();
        let index = match table.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                table.push(None);
                table.len() - 1
            }
        };
        table[index] = Some(task.clone());
        if let Some(running) = RUNNING.get(index) {
            running.store(true, Ordering::Relaxed);
        }
        Slot(index + 1, task)
    };
}

std::thread_local! {
    /// Test hook: how long this thread stays "woken but not yet scheduled"
    /// after each `block` returns ([`set_wake_latency`]), and how many
    /// times `block` returned ([`blocks`]). No destructors: usable while
    /// the thread's other locals are torn down.
    static LATENCY_NS: Cell<u64> = const { Cell::new(0) };
    static BLOCKS: Cell<u64> = const { Cell::new(0) };
}

/// Test hook: from now on, each time this thread's `Kernel::block`
/// returns, the thread sleeps `latency` more before it goes on, as a task
/// that was woken and waits to be scheduled (zero: no delay).
///
/// ```
/// use std::time::Duration;
/// use ksync::completion::Completion;
/// use ksync::host;
///
/// // A woken waiter that is slow to get its CPU back: the race window
/// // between `complete` and the waiter running again widens.
/// static DONE: Completion = Completion::new();
/// let waiter = std::thread::spawn(|| {
///     host::set_wake_latency(Duration::from_millis(1));
///     DONE.wait_for_completion();
/// });
/// DONE.complete();
/// waiter.join().unwrap();
/// ```
pub fn set_wake_latency(latency: Duration) {
    LATENCY_NS.with(|l| l.set(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX)));
}

/// Test hook: how many times this thread's `Kernel::block` has returned.
///
/// ```
/// use std::time::Duration;
/// use ksync::host;
/// use ksync::semaphore::Semaphore;
///
/// # // A deep hostile preemption may eat the whole timeout before it blocks.
/// # #[cfg(feature = "hostile")]
/// # ksync::host::hostile::set_enabled(false);
/// // A test that a timed `down` really sleeps rather than spins:
/// let sem = Semaphore::new(0);
/// assert!(!sem.down_timeout(Duration::from_millis(1)));
/// assert!(host::blocks() >= 1);
/// ```
pub fn blocks() -> u64 {
    BLOCKS.with(Cell::get)
}

/// The token of a thread whose [`SLOT`] is gone (a thread-local destructor
/// that runs after it): no table slot, so `wake` cannot unpark it and its
/// `block` yields instead of parking (a wait there spins, with yields).
/// Stable for the thread: above every slot's token, one per CPU id (which
/// the thread keeps until its CPU's own destructor runs).
fn exiting_token() -> usize {
    usize::MAX / 2 + super::backend::cpu_id()
}

pub(super) fn current_task() -> usize {
    // While the thread's locals are torn down (an exiting thread's CPU
    // going offline takes locks), a token of its own above every slot's.
    SLOT.try_with(|slot| slot.0)
        .unwrap_or_else(|_| exiting_token())
}

fn lookup(token: usize) -> Option<Arc<Task>> {
    tasks().get(token.wrapping_sub(1)).cloned().flatten()
}

pub(super) fn block(deadline_ns: Option<u64>) {
    park(deadline_ns);
    BLOCKS.with(|b| b.set(b.get() + 1));
    let latency = LATENCY_NS.with(Cell::get);
    if latency != 0 {
        std::thread::sleep(Duration::from_nanos(latency));
    }
}

fn park(deadline_ns: Option<u64>) {
    let parked = SLOT.try_with(|slot| {
        slot.1.parked.store(true, Ordering::Relaxed);
        let running = RUNNING.get(slot.0 - 1);
        if let Some(running) = running {
            running.store(false, Ordering::Relaxed);
        }
        match deadline_ns {
            None => std::thread::park(),
            Some(deadline) => {
                let now = clock_ns();
                if deadline > now {
                    std::thread::park_timeout(Duration::from_nanos(deadline - now));
                }
            }
        }
        slot.1.parked.store(false, Ordering::Relaxed);
        if let Some(running) = running {
            running.store(true, Ordering::Relaxed);
        }
    });
    if parked.is_err() {
        // The thread's slot is gone (a wait in a thread-local destructor
        // that runs after it): nobody can unpark this thread, so it
        // returns after a yield, and the caller, which re-checks what it
        // waits for, spins. `block` may return early; the waker's wake
        // for this token finds no slot and does nothing.
        std::thread::yield_now();
    }
}

pub(super) fn wake(token: usize) {
    if let Some(task) = lookup(token) {
        task.thread.unpark();
    }
}

pub(super) fn task_running(token: usize) -> bool {
    if let Some(running) = RUNNING.get(token.wrapping_sub(1)) {
        return running.load(Ordering::Relaxed);
    }
    lookup(token).is_some_and(|task| !task.parked.load(Ordering::Relaxed))
}

/// `std::thread::yield_now` (`sched_yield`): the OS may run another
/// thread on this core, the lock holder among them.
pub(super) fn yield_now() {
    std::thread::yield_now();
}

pub(super) fn clock_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
