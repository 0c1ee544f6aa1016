//! "wake_* may be called anywhere": the host kernel's `wake` used to look
//! the task up under a `std::sync::RwLock`, which a thread's first ksync
//! call write-locked to register itself (its `Vec::push` allocating under
//! it). A wake that ran re-entrantly on that thread inside that write
//! section (an interrupt handler, a POSIX signal as the other host
//! interrupt tests play it, or, as here, deterministically, a global
//! allocator that wakes a wait queue, as a kernel heap might) read-locked
//! the same lock on the same thread: the thread deadlocked. The task table
//! is lock-free now (`src/host/tasks.rs`). The signal form is too rare to
//! hit in a test; the allocator makes the same re-entry deterministic.
//! (Its own test binary: the global allocator is process-wide.)

#![cfg(not(ksync_loom))]

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ksync::wait::WaitQueue;

#[path = "common/child.rs"]
mod child;
#[path = "common/waking_alloc.rs"]
mod waking_alloc;

use child::run_child;
use waking_alloc::{WakingAlloc, wake_on_alloc};

static Q: WaitQueue = WaitQueue::new();
static STOP: AtomicBool = AtomicBool::new(false);

#[global_allocator]
static A: WakingAlloc = WakingAlloc(&Q);

static IDLE: ksync::mutex::Mutex<u32> = ksync::mutex::Mutex::new(0);

const CHILD: &str = "KSYNC_TEST_REENTRANT_CHILD";

#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn a_wake_made_while_the_host_registers_the_task_does_not_deadlock() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let name = "a_wake_made_while_the_host_registers_the_task_does_not_deadlock";
    let (status, stdout, stderr) = run_child(name, CHILD, "1", Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains("all registered"),
        "a wake made during the host's task registration deadlocked or failed \
         ({status:?}):\n{stdout}\n{stderr}"
    );
}

fn child() {
    // Blocked exclusive waiters: each wake of one looks its task up.
    let waiters: Vec<_> = (0..8)
        .map(|_| thread::spawn(|| Q.wait_event_exclusive(|| STOP.load(Relaxed))))
        .collect();
    thread::sleep(Duration::from_millis(100));
    // New tasks registered one at a time, all kept alive, so that the
    // table grows (and `push` reallocates) under its write lock.
    let mut alive = Vec::new();
    for i in 0..40 {
        let (tx, rx) = mpsc::channel();
        let t = thread::spawn(move || {
            wake_on_alloc(true);
            // The first look-up of this task's token registers it
            // (a try_lock claims no CPU id, only the owner token).
            drop(IDLE.try_lock());
            wake_on_alloc(false);
            tx.send(()).unwrap();
            while !STOP.load(Relaxed) {
                thread::park();
            }
        });
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            println!("task {i} never finished registering (deadlocked)");
            std::process::exit(1);
        }
        alive.push(t);
    }
    STOP.store(true, Relaxed);
    Q.wake_all();
    for w in waiters {
        w.join().unwrap();
    }
    for t in alive {
        t.thread().unpark();
        t.join().unwrap();
    }
    println!("all registered");
}
