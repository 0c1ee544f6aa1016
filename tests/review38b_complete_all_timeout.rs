//! Review 38b: `complete_all` wakes in batches of 8 and drops the queue
//! lock between them, with the completion already "done for all" (the
//! count is `ALL` from its start). A timed waiter queued before it began,
//! further back than the first batch, whose deadline passes in that window
//! takes itself off the queue and reports a timeout
//! (src/sleeping/wait.rs `WaitQueue::sleep`'s deadline path, then
//! src/sleeping/semaphore.rs `Units::take` returns `sleep(..) == GRANTED`):
//! `wait_for_completion_timeout` says "not completed" while `is_done()` is
//! already true, and a waiter that comes after it goes through at once.
//! Linux's `do_wait_for_common` looks at `done` under the lock when its
//! timeout ends, and `complete_all` is one step under the lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use ksync::completion::Completion;

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn a_waiter_queued_before_complete_all_does_not_time_out_once_it_is_done() {
    #[cfg(feature = "hostile")]
    ksync::host::hostile::set_enabled(false);
    static C: Completion = Completion::new();
    static DONE_SEEN: AtomicBool = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(bool, u64)>();
    let rx = std::sync::Mutex::new(rx);
    let result = Arc::new(std::sync::Mutex::new(None));
    /// The first waiter's executor, woken in complete_all's first batch,
    /// runs a while (here: until the timed waiter is back).
    struct SlowExecutor {
        rx: std::sync::Mutex<mpsc::Receiver<(bool, u64)>>,
        result: Arc<std::sync::Mutex<Option<(bool, u64)>>>,
    }
    impl Wake for SlowExecutor {
        fn wake(self: Arc<Self>) {
            DONE_SEEN.store(C.is_done(), Ordering::SeqCst);
            let got = self
                .rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(60));
            *self.result.lock().unwrap() = got.ok();
        }
    }
    let first = Waker::from(Arc::new(SlowExecutor {
        rx,
        result: Arc::clone(&result),
    }));
    let noop = Waker::from(Arc::new(NoopWake));
    // Eight queued async waiters: a full first batch.
    let mut waits: Vec<Pin<Box<_>>> = (0..8).map(|_| Box::pin(C.wait())).collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &first } else { &noop };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    // The ninth: a blocked task with a timeout.
    let timed = std::thread::spawn(move || {
        let got = C.wait_for_completion_timeout(Duration::from_millis(500));
        tx.send((got, ksync::host::blocks())).unwrap();
    });
    // Let it queue and sleep (it has 500 ms).
    std::thread::sleep(Duration::from_millis(150));
    C.complete_all();
    timed.join().unwrap();
    assert!(
        DONE_SEEN.load(Ordering::SeqCst),
        "done for all from the first wake on"
    );
    let (got, blocks) = result.lock().unwrap().expect("the timed waiter returned");
    assert!(
        blocks > 0,
        "inconclusive: the timed waiter was not queued before complete_all"
    );
    assert!(
        got,
        "wait_for_completion_timeout of a waiter queued before complete_all returned \
         'timed out' while the completion was already done (is_done() true since \
         complete_all's first batch)"
    );
    drop(waits);
}
