//! Review of issue 38 (adversarial): a wake of more waiters than one batch
//! drops the queue lock, makes the batch's wakes and takes the lock again
//! (`Locked::relock`: `unlock_and_wake(); lock()`). A `Waker` "may run any
//! code" and may panic: then `relock` unwinds with the queue lock NOT
//! retaken, and the `Locked` guard's drop unlocks it a second time (a
//! ticket lock released twice); the waiters past the batch, granted by
//! `complete_all`'s count, stay queued and are never woken.

#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use ksync::completion::Completion;

struct PanicOnWake;
impl Wake for PanicOnWake {
    fn wake(self: Arc<Self>) {
        panic!("executor gone");
    }
}

struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

const CHILD: &str = "KSYNC_REVIEW38_PANIC_WAKER_CHILD";

#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore = "spawns itself")]
fn a_panicking_waker_past_one_batch_leaves_the_queue_usable() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let name = "a_panicking_waker_past_one_batch_leaves_the_queue_usable";
    let mut proc = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Watchdog: 60 s.
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = proc.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(60) {
            proc.kill().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = proc.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains("queue usable, all woken"),
        "REVIEW38: after a Waker panicked in complete_all's first batch, the child \
         failed or hung ({status:?}):\n{stdout}\n{stderr}"
    );
}

fn child() {
    static C: Completion = Completion::new();
    let c = &C;
    let bad = Waker::from(Arc::new(PanicOnWake));
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let good = Waker::from(count.clone());
    let mut waits: Vec<Pin<Box<_>>> = (0..12).map(|_| Box::pin(c.wait())).collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &bad } else { &good };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.complete_all()));
    assert!(
        r.is_err(),
        "the waker's panic reaches complete_all's caller"
    );
    // The queue's lock must still work (each of these takes it).
    let t = std::thread::spawn(move || {
        let c = &C;
        assert!(c.try_wait_for_completion());
        drop(waits);
        c.complete();
    });
    t.join().unwrap();
    // The waiters past the first batch (9..12) were granted by complete_all
    // but, the panic having ended it, never woken.
    let woken = count.0.load(Ordering::SeqCst);
    println!("woken: {woken}");
    assert!(
        woken >= 11,
        "REVIEW38: only {woken} of the 11 other waiters were woken"
    );
    println!("queue usable, all woken");
}
