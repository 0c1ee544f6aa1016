//! Without `lockdep` every lock is exactly as big as before lockdep
//! existed (the sizes below are those of the commit before it, on 64-bit
//! hosts); with it, the locks carry their class.

use core::mem::size_of;

use ksync::LockRef;
use ksync::lockdep::Map;

#[cfg(all(not(feature = "lockdep"), target_pointer_width = "64"))]
#[test]
fn locks_are_unchanged_without_lockdep() {
    use ksync::brlock::BrLock;
    use ksync::lockdep::Acquired;
    use ksync::seqlock::{SeqLock, SeqLockWriteGuard};

    assert_eq!(size_of::<Map>(), 0);
    assert_eq!(size_of::<Acquired<'_>>(), 0);
    assert_eq!(size_of::<LockRef>(), 8);
    assert_eq!(size_of::<ksync::LockRefGuard<'_>>(), 16);
    // The sequence (4 bytes), the writers' ticket lock (8), the data.
    assert_eq!(size_of::<SeqLock<u64>>(), 32);
    assert_eq!(size_of::<SeqLock<[u64; 4]>>(), 56);
    assert_eq!(size_of::<SeqLockWriteGuard<'_, u64>>(), 40);
    // One cache-padded slot per CPU holding an 8-byte lock and the `u64`.
    assert_eq!(
        size_of::<BrLock<u64>>(),
        size_of::<ksync::percpu::PerCpu<[u64; 2]>>()
    );
    assert_eq!(size_of::<ksync::brlock::LocalGuard<'_, u64>>(), 32);
    assert_eq!(size_of::<ksync::brlock::GlobalGuard<'_, u64>>(), 24);
}

/// The spinlocks and the per-CPU rw lock, without `lockdep`: the sizes
/// (and, for the single-word locks, the transparent layout) of the commit
/// before they took part; any pointer width.
#[cfg(not(feature = "lockdep"))]
#[test]
fn spinlocks_are_unchanged_without_lockdep() {
    use ksync::percpu::PerCpu;
    use ksync::percpu_rwlock::RawPerCpuRwLock;
    use ksync::spinlock::{
        IrqTicketMutex, RawIrqSave, RawQueuedLock, RawTicketLock, RawTtasLock, TicketMutex,
    };

    // Debug builds add the owner record (a `u32` after the word: the
    // holder checks' "which CPU holds it"); release builds keep the word
    // alone.
    let owner = if cfg!(debug_assertions) { 4 } else { 0 };
    // The ticket lock is two words (`owner`, `next`).
    let ticket = 8 + owner;
    assert_eq!(size_of::<RawTicketLock>(), ticket);
    assert_eq!(align_of::<RawTicketLock>(), 4);
    assert_eq!(
        size_of::<RawTtasLock>(),
        if cfg!(debug_assertions) { 8 } else { 1 }
    );
    // Two 16-bit halves, or two 32-bit ones past 8191 CPUs.
    let queued = if ksync::kernel::MAX_CPUS < 8192 { 4 } else { 8 };
    assert_eq!(size_of::<RawQueuedLock>(), queued + owner);
    assert_eq!(align_of::<RawQueuedLock>(), 4);
    // The guard policy that saves nothing costs nothing.
    assert_eq!(
        size_of::<
            ksync::spinlock::RawSpinlock<ksync::spinlock::TicketLock, ksync::spinlock::NoGuard>,
        >(),
        ticket
    );
    // The IRQ-saving adapter keeps the holder's saved state (the kernel
    // hook's word) in the lock: `lock_api` 0.4's guards carry no state.
    assert_eq!(
        size_of::<RawIrqSave<RawTicketLock>>(),
        size_of::<(RawTicketLock, usize)>()
    );
    assert_eq!(size_of::<TicketMutex<u32>>(), 12 + owner);
    assert_eq!(
        size_of::<IrqTicketMutex<u32>>(),
        size_of::<(RawIrqSave<RawTicketLock>, u32)>()
    );
    // The per-CPU counts and the writer flag (padded to the counts'
    // alignment).
    assert_eq!(
        size_of::<RawPerCpuRwLock>(),
        size_of::<PerCpu<core::sync::atomic::AtomicI32>>() + align_of::<PerCpu<u32>>()
    );
    // A guard is a reference: the lock keeps the saved state.
    assert_eq!(
        size_of::<ksync::lock_api::MutexGuard<'_, RawTicketLock, u32>>(),
        size_of::<&()>()
    );
}

#[cfg(feature = "lockdep")]
#[test]
fn locks_carry_their_class_with_lockdep() {
    assert!(size_of::<Map>() > 0);
    assert_eq!(size_of::<LockRef>(), 8 + size_of::<Map>());
    assert_eq!(align_of::<LockRef>(), 8);
    use ksync::spinlock::{RawQueuedLock, RawTicketLock, RawTtasLock};
    // Each lock's words, then its `Map`.
    assert!(size_of::<RawTicketLock>() >= 8 + size_of::<Map>());
    assert!(size_of::<RawTtasLock>() > size_of::<Map>());
    assert!(size_of::<RawQueuedLock>() >= 4 + size_of::<Map>());
}

/// The sleeping rw semaphores, without `lockdep`: no bytes for lockdep
/// (their `Map` is zero-sized and the writer's tracked flag is gone).
#[cfg(not(feature = "lockdep"))]
#[test]
fn rw_semaphores_carry_nothing_without_lockdep() {
    use ksync::percpu_rwlock::{Gated, RawPerCpuRwLock};
    use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    use ksync::rwsem::RawRwSemaphore;
    use ksync::wait::WaitQueue;

    // The state word and the owner hint, then the queue.
    assert_eq!(
        size_of::<RawRwSemaphore>(),
        size_of::<(usize, usize, WaitQueue)>()
    );
    // The gated core (its `Map` zero-sized too) and two queues.
    assert_eq!(
        size_of::<RawPerCpuRwSemaphore>(),
        size_of::<(RawPerCpuRwLock<Gated>, WaitQueue, WaitQueue)>()
    );
}

/// With `lockdep` the rw semaphores carry one `Map` each (the per-CPU one
/// in its gated core).
#[cfg(feature = "lockdep")]
#[test]
fn rw_semaphores_carry_their_class_with_lockdep() {
    use ksync::percpu_rwlock::{Gated, RawPerCpuRwLock};
    use ksync::percpu_rwsem::RawPerCpuRwSemaphore;
    use ksync::rwsem::RawRwSemaphore;
    use ksync::wait::WaitQueue;

    assert!(size_of::<RawRwSemaphore>() > size_of::<(usize, usize, WaitQueue, Map)>());
    assert_eq!(
        size_of::<RawPerCpuRwSemaphore>(),
        size_of::<(RawPerCpuRwLock<Gated>, WaitQueue, WaitQueue)>()
    );
}
