//! the host kernel registers a thread as a task at its first
//! `current_task`, allocating its record (src/host/tasks.rs `SLOT`'s
//! initializer: "Allocated before the slot is published: nothing shared is
//! held while the allocator runs (it may wake a queue, re-entering)"). But
//! the first `current_task` of a thread whose first ksync call is a wait
//! that sleeps runs in `Locked::enqueue` (src/sleeping/wait.rs), under the
//! wait queue's lock: a global allocator that wakes that queue (the case
//! `tests/host_reentrant_wake.rs` makes deterministic) takes the queue's
//! ticket lock again on the same thread, and the thread spins for ever.
//!
//! The second test: the process's first CPU id is claimed with the id
//! table's `std::sync::Mutex` held while the table is sized
//! (src/host/threads.rs `claim`, `used.resize(MAX_CPUS, false)`, which
//! allocates): a global allocator that wakes a wait queue there runs the
//! queue lock's `preempt_disable`, whose `cpu_id` claims an id, locking the
//! same std mutex on the same thread: a deadlock, the first time any
//! thread of the process asks for its CPU id.
//!
//! (Its own test binary: the global allocator is process-wide. Each case
//! runs in a child process under a 60 s watchdog.)

#![cfg(not(ksync_loom))]

use std::time::Duration;

use ksync::wait::WaitQueue;

#[path = "common/child.rs"]
mod child;
#[path = "common/waking_alloc.rs"]
mod waking_alloc;

use waking_alloc::{WakingAlloc, wake_on_alloc};

static Q: WaitQueue = WaitQueue::new();

#[global_allocator]
static A: WakingAlloc = WakingAlloc(&Q);

const CHILD: &str = "KSYNC_TEST_HOST_REGISTER_CHILD";

/// Runs `case` in a child process (this binary, running only `name`)
/// under a 60 s watchdog: its status and its output.
fn run_child(name: &str, case: &str) -> (Option<std::process::ExitStatus>, String) {
    let (status, stdout, stderr) = child::run_child(name, CHILD, case, Duration::from_secs(60));
    (status, format!("{stdout}\n{stderr}"))
}

#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn a_first_wait_does_not_register_the_task_under_the_queue_lock() {
    if std::env::var_os(CHILD).is_some() {
        // The id table sized first, with no wake on allocation: only the
        // task registration is left for the wait below.
        let _ = ksync::kernel::cpu_id();
        child();
        return;
    }
    let (status, text) = run_child(
        "a_first_wait_does_not_register_the_task_under_the_queue_lock",
        "slot",
    );
    assert!(
        status.is_some_and(|s| s.success()) && text.contains("waited"),
        "a thread whose first ksync call is a wait that sleeps hung (registered as a task \
         under the queue lock, its allocator woke the queue) or failed ({status:?}):\n{text}"
    );
}

#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn the_first_cpu_id_is_not_claimed_while_the_allocator_may_wake() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let (status, text) = run_child(
        "the_first_cpu_id_is_not_claimed_while_the_allocator_may_wake",
        "claim",
    );
    assert!(
        status.is_some_and(|s| s.success()) && text.contains("waited"),
        "the process's first CPU id claim hung (the id table sized under its std mutex, the \
         allocator's wake asked for a CPU id) or failed ({status:?}):\n{text}"
    );
}

fn child() {
    let t = std::thread::spawn(|| {
        // The thread's allocations from now on wake Q, as a kernel heap
        // that wakes its reclaim waiters might.
        wake_on_alloc(true);
        // Its first ksync call that needs its task token: a wait that
        // sleeps (1 ms, nobody wakes it).
        let got = Q.wait_event_timeout(|| false, Duration::from_millis(1));
        wake_on_alloc(false);
        got
    });
    let got = t.join().unwrap();
    println!("waited: {got}");
}
