//! Review of issue 38 (adversarial): a `reinit` made while `complete_all`
//! is between two batches of wakes (its waiters past the eighth are woken
//! after the queue lock was dropped once) is undone by `complete_all`'s
//! final `count = ALL`: the completion is done again with no `complete`.

#![cfg(not(ksync_loom))]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use ksync::completion::Completion;

static C: Completion = Completion::new();
static REINIT_DONE: AtomicBool = AtomicBool::new(false);

/// The first waiter's waker: the woken task re-arms the completion for
/// the next round (the common "reuse" pattern), as its executor would
/// once it ran; here at once, from the wake itself.
struct ReinitOnWake;

impl Wake for ReinitOnWake {
    fn wake(self: Arc<Self>) {
        if !REINIT_DONE.swap(true, Ordering::SeqCst) {
            C.reinit();
        }
    }
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn a_reinit_after_the_first_batch_of_complete_all_is_not_undone() {
    let first = Waker::from(Arc::new(ReinitOnWake));
    let noop = Waker::from(Arc::new(Noop));
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
    assert!(
        REINIT_DONE.load(Ordering::SeqCst),
        "the first waiter was woken"
    );
    drop(waits);
    // The reinit came after complete_all had woken the first waiter (it
    // ran from that wake): complete_all's "done" is undone by it.
    assert!(
        !C.is_done(),
        "REVIEW38: complete_all undid a reinit made after it woke the first waiter \
         (done again with no complete)"
    );
    // Nor may a fresh waiter pass.
    assert!(
        !C.try_wait_for_completion(),
        "REVIEW38: a wait after reinit passed with no complete"
    );
}
