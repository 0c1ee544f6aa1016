//! Review of issue 38 (adversarial): a thread-local destructor that takes
//! a contended `Mutex` at thread exit, where the destructor was registered
//! BEFORE the thread's first ksync call (so the host kernel's per-thread
//! CPU record, registered later, is torn down before it runs). The fixed
//! test (`tests/sleeping_defects.rs`) only covers the other order.

#![cfg(not(ksync_loom))]

use std::thread;
use std::time::Duration;

use ksync::mutex::Mutex;
use ksync::semaphore::Semaphore;

static EXIT_MUTEX: Mutex<u32> = Mutex::new(0);

struct LockAtExit;

impl Drop for LockAtExit {
    fn drop(&mut self) {
        *EXIT_MUTEX.lock() += 1;
    }
}

thread_local! {
    static LOCK_AT_EXIT: LockAtExit = const { LockAtExit };
}

const CHILD: &str = "KSYNC_REVIEW38_TLS_CHILD";

fn run_child(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("destructor took the mutex"),
        "REVIEW38: the child failed ({:?}):\n{stderr}",
        out.status,
    );
}

/// The destructor is registered first, the host's records after it
/// (the thread's first ksync call comes later): contended.
#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn a_destructor_registered_before_the_first_ksync_call_takes_a_contended_mutex() {
    if std::env::var_os(CHILD).is_none() {
        run_child("a_destructor_registered_before_the_first_ksync_call_takes_a_contended_mutex");
        return;
    }
    let held = EXIT_MUTEX.lock();
    let t = thread::spawn(|| {
        LOCK_AT_EXIT.with(|_| {}); // registered first: runs last
        let _ = ksync::kernel::cpu_id();
        let s = Semaphore::new(0);
        let _ = s.down_timeout(Duration::from_millis(1));
    });
    thread::sleep(Duration::from_millis(200)); // the thread is exiting
    drop(held);
    t.join().unwrap();
    assert_eq!(*EXIT_MUTEX.lock(), 1);
    println!("destructor took the mutex");
}

/// The same, uncontended: even that must not abort.
#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn a_destructor_registered_before_the_first_ksync_call_takes_a_free_mutex() {
    if std::env::var_os(CHILD).is_none() {
        run_child("a_destructor_registered_before_the_first_ksync_call_takes_a_free_mutex");
        return;
    }
    let t = thread::spawn(|| {
        LOCK_AT_EXIT.with(|_| {});
        let _ = ksync::kernel::cpu_id();
    });
    t.join().unwrap();
    assert_eq!(*EXIT_MUTEX.lock(), 1);
    println!("destructor took the mutex");
}
