//! The host hooks under loom: model threads are coroutines on one OS
//! thread, so each one's CPU lives in loom's thread locals.

use std::cell::Cell;

use crate::kernel::MAX_CPUS;

// Ids are never reused within one execution (a model has a handful of
// threads): handing an id from an exiting thread to a new one would need a
// modelled synchronization, or loom lets the new thread read the old one's
// slot stale. The counter is per execution.
loom::lazy_static! {
    static ref NEXT_ID: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
}

loom::thread_local! {
    static THIS_CPU: Cell<Option<usize>> = Cell::new(None);
    pub(super) static IRQS_OFF: Cell<bool> = Cell::new(false);
    pub(super) static IN_IRQ: Cell<(u32, bool)> = Cell::new((0, false));
}

fn claim() -> usize {
    let id = NEXT_ID.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
    assert!(
        id < MAX_CPUS,
        "ksync test hooks: more than {MAX_CPUS} loom threads use per-CPU data"
    );
    id
}

pub(super) fn cpu_id() -> usize {
    THIS_CPU.with(|cpu| match cpu.get() {
        Some(id) => id,
        None => {
            let id = claim();
            cpu.set(Some(id));
            id
        }
    })
}

// Loom models neither preempt nor migrate their threads.
pub(super) fn preempt_disable() {}

pub(super) fn preempt_enable() {}
