//! loom models of `call_rcu`: a callback runs only after every read section
//! that could see its object has finished, and `barrier` returns only after
//! the callbacks queued before it ran.
//!
//! Run with `RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --test loom_call_rcu` (`cargo xtask test` does).
//! Each loom thread is a CPU. The object's data is a loom `UnsafeCell`: the
//! callback "frees" it by writing to it, so loom reports a reader whose
//! read is not ordered before the callback.
#![cfg(ksync_loom)]

use std::mem::offset_of;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::thread;

use ksync::rcu::{self, RcuHead};

struct Obj {
    head: RcuHead,
    data: UnsafeCell<u64>,
    freed: AtomicBool,
}

impl Obj {
    fn new() -> Self {
        Obj {
            head: RcuHead::new(),
            data: UnsafeCell::new(7),
            freed: AtomicBool::new(false),
        }
    }

    fn head(&self) -> *mut RcuHead {
        &self.head as *const RcuHead as *mut RcuHead
    }
}

unsafe fn free(head: *mut RcuHead) {
    // SAFETY: every head queued with `free` is the `head` of an `Obj` kept
    // alive by the model's `Arc`s until the threads are joined.
    let obj = unsafe { &*head.byte_sub(offset_of!(Obj, head)).cast::<Obj>() };
    // SAFETY: loom checks that no reader's access is concurrent with it.
    obj.data.with_mut(|p| unsafe { *p = 0xdead });
    obj.freed.store(true, SeqCst);
}

/// The writer unpublishes the object and queues its callback, then runs
/// callbacks until it ran; the reader may have found the object before it
/// was unpublished. The callback's write must not race the reader's read.
#[test]
fn callback_waits_for_reader() {
    loom::model(|| {
        let obj = Arc::new(Obj::new());
        let published = Arc::new(AtomicBool::new(true));
        let reader = {
            let (obj, published) = (obj.clone(), published.clone());
            thread::spawn(move || {
                rcu::cpu_online();
                {
                    let _g = rcu::read_lock();
                    if published.load(SeqCst) {
                        // SAFETY: loom checks the access.
                        let v = obj.data.with(|p| unsafe { *p });
                        assert_eq!(v, 7, "read a freed object");
                    }
                }
                rcu::cpu_offline();
            })
        };
        rcu::cpu_online();
        published.store(false, SeqCst);
        // SAFETY: the object outlives the callback (joined below); the head
        // is not queued.
        unsafe { rcu::call_rcu(obj.head(), free) };
        while !obj.freed.load(SeqCst) {
            rcu::process_callbacks();
            rcu::quiescent_state();
            thread::yield_now();
        }
        rcu::cpu_offline();
        reader.join().unwrap();
    });
}

/// Callbacks queued on two CPUs; `barrier` on one of them returns only
/// after both ran (the other CPU's was queued before, as the flag shows),
/// without the other CPU processing anything.
#[test]
fn barrier_waits_for_both_cpus() {
    loom::model(|| {
        let a = Arc::new(Obj::new());
        let b = Arc::new(Obj::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let other = {
            let (a, queued) = (a.clone(), queued.clone());
            thread::spawn(move || {
                rcu::cpu_online();
                // SAFETY: `a` outlives the callback; not queued.
                unsafe { rcu::call_rcu(a.head(), free) };
                queued.store(1, SeqCst);
                rcu::cpu_offline();
            })
        };
        rcu::cpu_online();
        // SAFETY: `b` outlives the callback; not queued.
        unsafe { rcu::call_rcu(b.head(), free) };
        let other_queued = queued.load(SeqCst) == 1;
        rcu::barrier();
        assert!(
            b.freed.load(SeqCst),
            "barrier returned before this CPU's callback"
        );
        if other_queued {
            assert!(
                a.freed.load(SeqCst),
                "barrier returned before the other CPU's callback"
            );
        }
        rcu::cpu_offline();
        other.join().unwrap();
        rcu::barrier();
        assert!(a.freed.load(SeqCst));
    });
}
