//! Review 38b: `complete_all` wakes in batches of 8 and drops the queue
//! lock between them. A task that re-arms the completion meanwhile
//! (`reinit`) and completes it once (`complete`) must leave one "done"
//! for the next generation: `complete_all` had begun before the `reinit`,
//! so every waiter queued before it is released by it (as Linux's
//! `complete_all`, one step under the lock, would have). Here the
//! `complete` goes to the front of the queue, a waiter of the old
//! generation that `complete_all` was about to release anyway
//! (src/sleeping/semaphore.rs `give_inner` takes `locked.front()` whatever
//! its generation), and the new generation's `complete` is lost: the next
//! waiter sleeps with nothing left to wake it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use ksync::completion::Completion;

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn a_complete_after_a_reinit_between_batches_of_complete_all_is_not_lost() {
    static C: Completion = Completion::new();
    static REARMED: AtomicBool = AtomicBool::new(false);
    /// The first waiter's task re-arms the completion and signals the next
    /// round (here from the wake itself, as its executor would once it ran,
    /// while `complete_all` is between two batches).
    struct RearmAndComplete;
    impl Wake for RearmAndComplete {
        fn wake(self: Arc<Self>) {
            if !REARMED.swap(true, Ordering::SeqCst) {
                C.reinit();
                C.complete();
            }
        }
    }
    let first = Waker::from(Arc::new(RearmAndComplete));
    let noop = Waker::from(Arc::new(NoopWake));
    // Nine queued async waiters: one more than a batch of wakes.
    let mut waits: Vec<Pin<Box<_>>> = (0..9).map(|_| Box::pin(C.wait())).collect();
    for (i, w) in waits.iter_mut().enumerate() {
        let waker = if i == 0 { &first } else { &noop };
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    C.complete_all();
    assert!(REARMED.load(Ordering::SeqCst), "the first waiter was woken");
    // Every waiter queued before complete_all goes through.
    for w in &mut waits {
        assert!(w.as_mut().poll(&mut Context::from_waker(&noop)).is_ready());
    }
    drop(waits);
    // reinit then one complete, both after complete_all began: the next
    // waiter of the new generation must pass.
    assert!(
        C.try_wait_for_completion(),
        "the complete() made after reinit was used up by a waiter that \
         complete_all (begun before the reinit) released: lost for the new generation"
    );
}
