//! `sleep-percpu-rwsem`: ksync's sleeping per-CPU rw semaphore,
//! [`PerCpuRwSemaphore`](ksync::percpu_rwsem::PerCpuRwSemaphore), in the
//! `sleep-rwsem` suite ([`RwSuite`], see `rwsem.rs`): exclusion with
//! readers that sleep a tick, yield and migrate while they hold it (their
//! release then decrements another CPU's count) and writers that sleep
//! waiting for them to drain; no writer starved by the hogs' relay of
//! readers (a writer closes the readers' fast path, so the relay's next
//! reader queues behind it, and the holder passes on).
//!
//! # The control: `sleep-percpu-rwsem-nodrain`
//!
//! The same suite on [`NoDrain`]: readers take ksync's per-CPU read side
//! as they are, but a writer does not wait for them: writers exclude each
//! other with ksync's sleeping mutex and neither close the readers' gate
//! nor wait for the reader counts to drain (a per-CPU rw semaphore whose
//! writer skips the drain). Writers then come in over readers inside,
//! and the suite must be caught: a reader seeing a half-done write or the
//! data change under it, or a writer finding readers inside.

use ksync::lock_api::{GuardSend, RawMutex, RawRwLock};
use ksync::percpu_rwsem::RawPerCpuRwSemaphore;

use super::rwsem::RwSuite;
use crate::harness::Kind;

/// ksync's sleeping per-CPU rw semaphore.
pub static SLEEP_PERCPU_RWSEM: RwSuite<RawPerCpuRwSemaphore> =
    RwSuite::new("sleep-percpu-rwsem", Kind::Test, 700);
/// The control: writers that do not wait for the readers. It ends once
/// the first overlap is caught.
pub static SLEEP_PERCPU_RWSEM_NODRAIN: RwSuite<NoDrain> =
    RwSuite::new("sleep-percpu-rwsem-nodrain", Kind::Control, 700);

/// The control's lock: ksync's per-CPU read side, and writers that only
/// exclude each other (ksync's sleeping mutex), never the readers.
pub struct NoDrain {
    readers: RawPerCpuRwSemaphore,
    writers: ksync::mutex::RawMutex,
}

// SAFETY: deliberately broken, for the control only: the read side is
// ksync's per-CPU rw semaphore's, forwarded, so each read unlock matches
// a read lock of it; the write side is ksync's mutex, forwarded, so
// writers exclude each other, but not readers (what the control must be
// caught at). Nothing belongs to the task that took it, so the guards
// may move.
unsafe impl RawRwLock for NoDrain {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        readers: RawPerCpuRwSemaphore::new(),
        writers: <ksync::mutex::RawMutex as RawMutex>::INIT,
    };
    type GuardMarker = GuardSend;

    fn lock_shared(&self) {
        self.readers.read();
    }

    fn try_lock_shared(&self) -> bool {
        self.readers.try_read()
    }

    unsafe fn unlock_shared(&self) {
        // SAFETY: forwarded: the guard holds a read lock of `readers`.
        unsafe { self.readers.unlock_read() }
    }

    fn lock_exclusive(&self) {
        // No gate closed, no drain waited for: only the other writers.
        RawMutex::lock(&self.writers);
    }

    fn try_lock_exclusive(&self) -> bool {
        RawMutex::try_lock(&self.writers)
    }

    unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded: the guard holds `writers`.
        unsafe { RawMutex::unlock(&self.writers) }
    }

    fn is_locked(&self) -> bool {
        self.readers.is_locked() || RawMutex::is_locked(&self.writers)
    }
}
