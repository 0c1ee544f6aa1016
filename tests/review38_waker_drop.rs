//! Review of issue 38 (adversarial): defect 2 says no waker code may run
//! under the wait-queue lock, and the fix defers every *wake*; but a
//! re-poll with a different waker replaces the node's old `Waker` under
//! the lock (`Locked::set_waker`: `*wake = Wake::Async(Some(..))` drops the
//! old one there). Dropping a `Waker` runs the executor's code too: the
//! last reference to a task drops the task's future, which (queued on the
//! same queue) takes the queue lock in its `Drop`: the CPU deadlocks on
//! its own queue lock (or, in debug builds, panics under it).

#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use ksync::wait::WaitQueue;

/// A task: its waker owns its future (an executor's `Arc<Task>`).
/// (The field is only ever dropped: that is the point.)
#[allow(dead_code)]
struct Task(StdMutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>);
impl Wake for Task {
    fn wake(self: Arc<Self>) {}
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

const CHILD: &str = "KSYNC_REVIEW38_WAKER_DROP_CHILD";

#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn replacing_a_waker_does_not_drop_it_under_the_queue_lock() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let name = "replacing_a_waker_does_not_drop_it_under_the_queue_lock";
    let mut proc = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = proc.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(30) {
            proc.kill().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = proc.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        status.is_some_and(|s| s.success())
            && stdout.contains("old waker dropped after the unlock"),
        "REVIEW38: re-polling with a new waker dropped the old one under the queue lock, \
         and its task's future deadlocked on that lock (None = hung 30 s, killed): \
         {status:?}\n{stdout}\n{stderr}"
    );
}

fn child() {
    static Q: WaitQueue = WaitQueue::new();
    let noop = Waker::from(Arc::new(Noop));
    // The task's own future, queued on Q.
    let mut other: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(Q.wait_until(|| false));
    assert!(
        other
            .as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    let task = Arc::new(Task(StdMutex::new(Some(other))));
    let old = Waker::from(task.clone());
    drop(task);
    // A future polled first by that task, then (moved to another executor,
    // or by a combinator) with another waker.
    let mut f = Box::pin(Q.wait_until(|| false));
    assert!(f.as_mut().poll(&mut Context::from_waker(&old)).is_pending());
    drop(old); // the node's clone is now the task's last reference
    assert!(
        f.as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending()
    );
    println!("old waker dropped after the unlock");
}
