//! The single-CPU build of the spinlocks: when
//! [`MAX_CPUS`](crate::kernel::MAX_CPUS) is 1 (`KSYNC_MAX_CPUS=1`), the
//! ticket, TTAS and queued locks take and release themselves with a
//! relaxed load and a relaxed store of their word and a compiler fence:
//! no atomic read-modify-write, no memory barrier. Every other build is
//! unchanged: the choice is a `const` ([`UP`]) tested at the top of each
//! fast path, so the compiler removes whichever branch is dead.
//!
//! # Why a load and a store exclude on one CPU
//!
//! With one CPU, the only code that can run between two instructions of a
//! lock operation is an interrupt handler on that same CPU (the build's
//! contract, below), and a handler runs to completion before the code it
//! interrupted resumes, seeing that code's earlier writes in program order
//! (one CPU always sees its own accesses in order; the compiler fences
//! keep the compiler from moving them across the lock word's accesses,
//! which is exactly what `compiler_fence` is for: a handler on the same
//! thread of execution). So consider a handler that lands between the
//! lock's load and its store:
//!
//! * If it takes *and releases* the lock, the word means "free" again when
//!   it returns (the ticket lock's fields may have moved on by one ticket
//!   each; the store then writes the state computed from the older word,
//!   which is also a valid "held once" state, since only `owner == next`
//!   and their difference carry meaning). The interrupted operation goes on
//!   as if the handler had run before it.
//! * If it only tries and fails, or only reads, the word is unchanged.
//! * It cannot find the lock held by the code it interrupted and *wait*:
//!   that code cannot run again until the handler returns, so on a real
//!   SMP machine too this is a deadlock (the reason IRQ-shared locks are
//!   taken with interrupts masked, [`RawIrqSave`](super::RawIrqSave)). On
//!   one CPU ksync can tell: `lock` of a held lock is such a recursion
//!   (the same context taking it twice, or a handler taking a lock that
//!   the code it interrupted holds). Debug builds panic with "spinlock
//!   recursion"; release builds spin, as the SMP lock would.
//!
//! `try_lock` of a held lock still returns `false`, and `unlock` needs no
//! read-modify-write either: while the lock is held nobody changes its
//! word (a handler that tries fails without writing; one that waits never
//! returns).
//!
//! # The contract of a single-CPU build
//!
//! Building with `KSYNC_MAX_CPUS=1` says: (1) ksync's locks are used from
//! one CPU only (as for every per-CPU type: CPU id 0 is the only one);
//! (2) no other *thread* runs in the middle of a lock operation on this
//! CPU: the kernel does not preempt kernel code, or keeps preemption off
//! while it takes, holds and releases ksync spinlocks (Linux's rule: on a
//! uniprocessor kernel `spin_lock` is `preempt_disable`). Interrupt
//! handlers may run anywhere. A kernel that cannot promise this builds
//! with `KSYNC_MAX_CPUS=2` and gets the SMP locks.
//!
//! The lock inside [`LockRef`](crate::LockRef) keeps its atomic
//! read-modify-writes on targets with 64-bit atomics: its word also holds
//! the count, which a handler may change for good between a load and a
//! store (a lockless `get`), so a plain store could lose it. (Without
//! 64-bit atomics the lockref's lock is a [`TicketLock`](super::TicketLock)
//! and takes this path too.)

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
