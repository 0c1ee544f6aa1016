//! A global allocator that wakes a wait queue from inside an allocation,
//! on threads that ask for it: a kernel heap (or a signal handler) that
//! re-enters the wake path wherever the host kernel allocates. A test
//! binary installs it with
//! `#[global_allocator] static A: WakingAlloc = WakingAlloc(&QUEUE);`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ksync::wait::WaitQueue;

std::thread_local! {
    /// This thread's allocations wake the queue (no destructor: readable
    /// to the thread's end).
    static WAKE_ON_ALLOC: Cell<bool> = const { Cell::new(false) };
}

/// From now on this thread's allocations wake the allocator's queue (or
/// no longer do).
pub(crate) fn wake_on_alloc(on: bool) {
    WAKE_ON_ALLOC.with(|w| w.set(on));
}

/// The allocator: `System`, plus one `wake_one` of its queue before each
/// allocation of a thread that asked ([`wake_on_alloc`]).
pub(crate) struct WakingAlloc(pub(crate) &'static WaitQueue);

impl WakingAlloc {
    fn wake(&self) {
        // Off while the wake runs: it must not recurse through itself.
        let on = WAKE_ON_ALLOC
            .try_with(|w| w.replace(false))
            .unwrap_or(false);
        if on {
            self.0.wake_one();
            let _ = WAKE_ON_ALLOC.try_with(|w| w.set(true));
        }
    }
}

// SAFETY: forwards to `System`; the wake allocates nothing.
unsafe impl GlobalAlloc for WakingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.wake();
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        self.wake();
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}
