//! The host's scheduler hooks on OS threads: every thread is a task whose
//! token indexes a process-wide table of thread handles, `block` is
//! `std::thread::park` (whose token is the "wake pending" flag the
//! `Kernel::block` contract asks for) and `wake` is `unpark`.
//!
//! # Re-entrancy
//!
//! `wake` and `task_running` take no lock and allocate nothing (atomics
//! on a fixed table, and `Thread::unpark`, a futex wake on Linux): they
//! may run re-entrantly on a thread that is registering or unregistering
//! itself (a global allocator that wakes a queue, a signal handler playing
//! an interrupt). A thread's registration (its first `current_task`)
//! allocates its record and is not signal-safe; its unregistration (at
//! thread exit) waits, spinning, for wakes in flight that use its record.

use std::boxed::Box;
use std::cell::Cell;
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// One live task: its thread.
struct Task {
    thread: Thread,
}

/// How many threads may be live tasks at once.
const MAX_TASKS: usize = 4096;

/// A slot of the task table.
struct Entry {
    /// Owned by a live thread (which stores `task` next).
    claimed: AtomicBool,
    /// The thread's record (a leaked `Box`), null while free.
    task: AtomicPtr<Task>,
    /// Wakes using `task` now: the exiting thread frees it once none is.
    users: AtomicUsize,
    /// A live task, not parked: what `task_running` answers, with one
    /// load (Linux's `owner->on_cpu`), as a mutex spinner asks it on
    /// every few rounds. Relaxed: a hint for spinners, as `on_cpu` is.
    running: AtomicBool,
}

/// Live tasks; token = index + 1. A slot is freed when its thread exits.
/// Lock-free, so that a wake never waits for a thread that registers
/// (which may be the waker's own thread, re-entered).
static TABLE: [Entry; MAX_TASKS] = [const {
    Entry {
        claimed: AtomicBool::new(false),
        task: AtomicPtr::new(ptr::null_mut()),
        users: AtomicUsize::new(0),
        running: AtomicBool::new(false),
    }
}; MAX_TASKS];

/// Frees the thread's slot when it exits.
struct Slot(usize);

impl Slot {
    fn entry(&self) -> &'static Entry {
        &TABLE[self.0 - 1]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // What the exiting task held is forgotten with it.
        #[cfg(feature = "lockdep")]
        crate::lockdep::task_exit(self.0);
        let entry = self.entry();
        entry.running.store(false, Ordering::Relaxed);
        // SeqCst, with the waker's increment of `users` and its load of
        // `task`: either the waker loads null, or this sees its count.
        let task = entry.task.swap(ptr::null_mut(), Ordering::SeqCst);
        while entry.users.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        // SAFETY: the slot's record, leaked by this thread's registration;
        // nobody loads it any more (swapped out) or uses it (no user left).
        drop(unsafe { Box::from_raw(task) });
        // Release: the next owner's claim (Acquire) comes after the above.
        entry.claimed.store(false, Ordering::Release);
    }
}

std::thread_local! {
    static SLOT: Slot = {
        // Allocated before the slot is published: nothing shared is held
        // while the allocator runs (it may wake a queue, re-entering).
        let task = Box::into_raw(Box::new(Task { thread: std::thread::current() }));
        let Some(index) = TABLE.iter().position(|e| {
            !e.claimed.load(Ordering::Relaxed)
                // Acquire: pairs with the Release of the slot's last owner.
                && e.claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        }) else {
            panic!(
                "ksync test hooks: more than {MAX_TASKS} threads are live tasks at once \
                 (MAX_TASKS = {MAX_TASKS})"
            );
        };
        let entry = &TABLE[index];
        entry.running.store(true, Ordering::Relaxed);
        // SeqCst: as in `Slot::drop`.
        entry.task.store(task, Ordering::SeqCst);
        Slot(index + 1)
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
        let running = &slot.entry().running;
        running.store(false, Ordering::Relaxed);
        match deadline_ns {
            None => std::thread::park(),
            Some(deadline) => {
                let now = clock_ns();
                if deadline > now {
                    std::thread::park_timeout(Duration::from_nanos(deadline - now));
                }
            }
        }
        running.store(true, Ordering::Relaxed);
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

/// Unparks the task's thread: lock-free (see the module docs). A token
/// without a live task (an exiting thread's, or a slot freed since) does
/// nothing; one whose slot was reused wakes its new thread spuriously,
/// which `block`'s contract allows.
pub(super) fn wake(token: usize) {
    let Some(entry) = TABLE.get(token.wrapping_sub(1)) else {
        return;
    };
    // SeqCst: as in `Slot::drop`.
    entry.users.fetch_add(1, Ordering::SeqCst);
    let task = entry.task.load(Ordering::SeqCst);
    // SAFETY: non-null, the record stays valid while `users` counts this
    // wake (its thread's `Slot::drop` waits for that before freeing it).
    if let Some(task) = unsafe { task.as_ref() } {
        task.thread.unpark();
    }
    // Release: the use of the record above comes before its free.
    entry.users.fetch_sub(1, Ordering::Release);
}

pub(super) fn task_running(token: usize) -> bool {
    TABLE
        .get(token.wrapping_sub(1))
        .is_some_and(|entry| entry.running.load(Ordering::Relaxed))
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
