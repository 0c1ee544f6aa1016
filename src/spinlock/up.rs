//! The single-CPU build of the spinlocks: when
//! [`MAX_CPUS`](crate::kernel::MAX_CPUS) is 1 (`KSYNC_MAX_CPUS=1`), the
//! ticket, TTAS and queued locks take and release themselves with a
//! relaxed load and a relaxed store of their word and a compiler fence.
//! Why that excludes, and what such a build promises, is the `spinlock`
//! module's "One CPU" (public docs). Every other build is unchanged: the
//! choice is a `const` ([`UP`]) tested at the top of each fast path, so
//! the compiler removes whichever branch is dead.

use crate::kernel::MAX_CPUS;
use crate::sync::{Ordering, compiler_fence};

/// Whether this is the single-CPU build (see the module docs).
pub(super) const UP: bool = MAX_CPUS == 1;

/// After the store that took a lock: nothing of the critical section may
/// be moved above that store or the load before it (a handler that
/// interrupts before the store must not see the section's effects).
/// `SeqCst`, because only it orders a store before later loads.
#[inline(always)]
pub(super) fn acquired() {
    compiler_fence(Ordering::SeqCst);
}

/// Before the store that releases a lock: nothing of the critical section
/// may be moved below it. Pairs with [`acquired`] in a handler that takes
/// the lock after this store (as Release with Acquire).
#[inline(always)]
pub(super) fn releasing() {
    compiler_fence(Ordering::Release);
}

/// `lock` found the lock held on the one CPU: a recursion (module docs).
/// Debug builds panic; release builds return, and the caller spins as the
/// SMP lock would.
#[cold]
#[inline(never)]
#[track_caller]
pub(super) fn held_on_entry(what: &str) {
    if cfg!(debug_assertions) {
        panic!(
            "spinlock recursion: lock of a {what} that is already held on the only CPU (KSYNC_MAX_CPUS=1): the same context took it twice, or an interrupt handler took it while the code it interrupted held it (mask interrupts around such a lock: RawIrqSave), or another thread was switched in while it was held (a single-CPU build needs preemption off across spinlocks)"
        );
    }
}
