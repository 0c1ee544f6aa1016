//! Zeroed memory: every type whose docs say "all-zero bytes are a valid new
//! value" is built here from zero bytes and checked to behave exactly as
//! its constructor's value (lock and unlock, counts at zero, empty lists,
//! the same `Debug`), and, where the docs say zero *is* `new()` and the
//! type has no padding, that `new()` still writes only zero bytes, so that
//! a change which makes a constructor non-zero fails here. With the
//! `bytemuck` feature, the `Zeroable` impls are checked against the same
//! list (`cargo xtask check zeroed` runs this file with `bytemuck`, with
//! and without `lockdep`).

// Under loom the crate is built for the models only (and no type is
// valid as zero bytes there).
#![cfg(not(ksync_loom))]

use core::mem::{MaybeUninit, size_of};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use ksync::LockRef;
use ksync::brlock::BrLock;
use ksync::impl_linked;
use ksync::lock_api::{self, RawMutex, RawRwLock};
use ksync::lockdep::Map;
use ksync::percpu::PerCpu;
use ksync::percpu_counter::PerCpuCounter;
use ksync::percpu_rwlock::{Fenced, Gated, RawPerCpuRwLock};
use ksync::rcu::srcu::Srcu;
use ksync::rcu::{self, Hlist, Link, RcuHashTable, RcuHead, RcuList, RcuPtr, RcuSync};
use ksync::seqlock::{SeqCount, SeqLock};
use ksync::spinlock::{
    ArchIrq, IrqTicketMutex, QueuedLock, RawIrqSave, RawQueuedLock, RawTicketLock, RawTtasLock,
    TicketLock, TicketMutex, TtasLock,
};

/// A `T` made of zero bytes.
///
/// # Safety
/// All-zero bytes are a valid `T`: the claim of `T`'s "Zeroed memory"
/// docs that the caller is testing.
unsafe fn zeroed<T>() -> T {
    // SAFETY: forwarded caller contract.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

/// The bytes of `value`.
///
/// # Safety
/// `T` has no padding (every byte of a value is initialised), and nobody
/// writes `value` while the slice lives.
unsafe fn bytes_of<T>(value: &T) -> &[u8] {
    // SAFETY: in bounds of `value`; initialised bytes (no padding, the
    // caller's contract); atomics read through `u8` without a concurrent
    // writer (the caller's contract) are plain reads.
    unsafe { core::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Asserts that `new` builds a value whose bytes are all zero.
///
/// # Safety
/// As for [`bytes_of`].
unsafe fn assert_new_is_zero<T>(what: &str, new: T) {
    // SAFETY: forwarded caller contract; `new` is ours alone.
    let bytes = unsafe { bytes_of(&new) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "{what}: `new` no longer writes only zero bytes ({bytes:?}): fix its \"Zeroed memory\" docs, the Zeroable impl and this test"
    );
}

/// A spinlock behaves as a fresh one: free, then held by `lock`, refused
/// by `try_lock` while held, free again after `unlock`, and `try_lock`
/// takes it then.
fn check_raw_mutex<L: RawMutex>(what: &str, lock: &L) {
    assert!(!lock.is_locked(), "{what}: zeroed lock is held");
    lock.lock();
    assert!(lock.is_locked(), "{what}");
    assert!(!lock.try_lock(), "{what}: try_lock took a held lock");
    // SAFETY: held by this context since `lock` above.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked(), "{what}");
    assert!(lock.try_lock(), "{what}: try_lock refused a free lock");
    // SAFETY: held since the `try_lock` above.
    unsafe { lock.unlock() };
    for _ in 0..3 {
        lock.lock();
        // SAFETY: held since the line above.
        unsafe { lock.unlock() };
    }
    assert!(!lock.is_locked(), "{what}");
}

/// A sleeping rw lock behaves as a fresh one: free; readers share it and
/// keep a writer out; a writer excludes readers; and contended, a reader
/// on another thread sleeps until the writer here leaves, then a writer
/// there sleeps until the reader here leaves.
fn check_raw_rwlock_contended<L: RawRwLock + Sync>(what: &str, lock: &L) {
    use std::sync::atomic::AtomicBool;
    use std::thread;
    use std::time::Duration;

    assert!(!lock.is_locked(), "{what}: zeroed lock is held");
    lock.lock_shared();
    assert!(lock.try_lock_shared(), "{what}: readers do not share it");
    assert!(!lock.try_lock_exclusive(), "{what}: a writer got in");
    // SAFETY: the two read locks taken above.
    unsafe { lock.unlock_shared() };
    // SAFETY: as above.
    unsafe { lock.unlock_shared() };
    lock.lock_exclusive();
    assert!(
        !lock.try_lock_shared(),
        "{what}: a reader got past a writer"
    );
    if ksync::kernel::MAX_CPUS < 2 {
        // The single-CPU build (`KSYNC_MAX_CPUS=1`) has one CPU id for the
        // host's threads: no second thread may take the lock.
        // SAFETY: the write lock taken above.
        unsafe { lock.unlock_exclusive() };
        return;
    }
    let inside = AtomicBool::new(false);
    thread::scope(|s| {
        let reader = s.spawn(|| {
            lock.lock_shared();
            inside.store(true, Relaxed);
            // SAFETY: taken above, on this thread.
            unsafe { lock.unlock_shared() };
        });
        thread::sleep(Duration::from_millis(20));
        assert!(!inside.load(Relaxed), "{what}: a reader got past a writer");
        // SAFETY: the write lock taken above.
        unsafe { lock.unlock_exclusive() };
        reader.join().unwrap();
    });
    assert!(inside.load(Relaxed), "{what}");
    lock.lock_shared();
    inside.store(false, Relaxed);
    thread::scope(|s| {
        let writer = s.spawn(|| {
            lock.lock_exclusive();
            inside.store(true, Relaxed);
            // SAFETY: taken above, on this thread.
            unsafe { lock.unlock_exclusive() };
        });
        thread::sleep(Duration::from_millis(20));
        assert!(!inside.load(Relaxed), "{what}: a writer got past a reader");
        // SAFETY: the read lock taken above.
        unsafe { lock.unlock_shared() };
        writer.join().unwrap();
    });
    assert!(inside.load(Relaxed), "{what}");
    assert!(!lock.is_locked(), "{what}");
}

#[test]
fn the_algorithms_are_zero_and_work_from_zero() {
    // SAFETY: (each `assert_new_is_zero`) one atomic word, no padding, and
    // the value is a local nobody else writes.
    unsafe {
        assert_new_is_zero("TicketLock", TicketLock::new());
        assert_new_is_zero("TtasLock", TtasLock::new());
        assert_new_is_zero("QueuedLock", QueuedLock::new());
    }
    // SAFETY: (each `zeroed`) the types' docs: zero is `new()`.
    let (ticket, ttas, queued): (TicketLock, TtasLock, QueuedLock) =
        unsafe { (zeroed(), zeroed(), zeroed()) };
    assert_eq!(format!("{ticket:?}"), format!("{:?}", TicketLock::new()));
    assert_eq!(format!("{ttas:?}"), format!("{:?}", TtasLock::new()));
    assert_eq!(format!("{queued:?}"), format!("{:?}", QueuedLock::new()));
    for (what, lock) in [
        ("TicketLock", &ticket as &dyn DynLock),
        ("TtasLock", &ttas),
        ("QueuedLock", &queued),
    ] {
        assert!(!lock.held(), "{what}");
        lock.take();
        assert!(lock.held() && !lock.try_take(), "{what}");
        // SAFETY: held since `take`.
        unsafe { lock.release() };
        assert!(!lock.held() && lock.try_take(), "{what}");
        // SAFETY: held since `try_take`.
        unsafe { lock.release() };
    }
    // The ticket lock's fields from zero are those of `new` after the
    // same history (the tickets moved on by two).
    let fresh = TicketLock::new();
    fresh.lock();
    // SAFETY: held since the line above.
    unsafe { fresh.unlock() };
    assert!(fresh.try_lock());
    // SAFETY: held since `try_lock`.
    unsafe { fresh.unlock() };
    assert_eq!(format!("{ticket:?}"), format!("{fresh:?}"));
}

/// The algorithms' inherent methods behind one object-safe trait, for
/// the loop above.
trait DynLock {
    fn take(&self);
    fn try_take(&self) -> bool;
    /// # Safety
    /// Held by the caller.
    unsafe fn release(&self);
    fn held(&self) -> bool;
}

macro_rules! dyn_lock {
    ($($ty:ty),*) => {$(
        impl DynLock for $ty {
            fn take(&self) { self.lock() }
            fn try_take(&self) -> bool { self.try_lock() }
            unsafe fn release(&self) {
                // SAFETY: forwarded caller contract.
                unsafe { self.unlock() }
            }
            fn held(&self) -> bool { self.is_locked() }
        }
    )*};
}
dyn_lock!(TicketLock, TtasLock, QueuedLock);

#[test]
fn the_tracked_and_irq_saving_locks_work_from_zero() {
    // Without lockdep the tracked locks are the algorithm: `new` is zero.
    #[cfg(not(feature = "lockdep"))]
    // SAFETY: (each) one atomic word (the map is zero-sized), a local.
    unsafe {
        assert_new_is_zero("RawTicketLock", RawTicketLock::new());
        assert_new_is_zero("RawTtasLock", RawTtasLock::new());
        assert_new_is_zero("RawQueuedLock", RawQueuedLock::new());
        assert_new_is_zero("Map", Map::new());
    }
    // SAFETY: (each `zeroed`) the docs of each type (`RawIrqSave`: zero
    // is valid when it is for the inner lock).
    unsafe {
        check_raw_mutex("RawTicketLock", &zeroed::<RawTicketLock>());
        check_raw_mutex("RawTtasLock", &zeroed::<RawTtasLock>());
        check_raw_mutex("RawQueuedLock", &zeroed::<RawQueuedLock>());
        check_raw_mutex(
            "RawIrqSave<RawTicketLock>",
            &zeroed::<RawIrqSave<RawTicketLock>>(),
        );
        check_raw_mutex(
            "RawIrqSave<RawQueuedLock, ArchIrq>",
            &zeroed::<RawIrqSave<RawQueuedLock, ArchIrq>>(),
        );
    }
    // A zeroed lock in lockdep's eyes: a class of its own, not registered
    // until first taken; taking it in order reports nothing.
    {
        // SAFETY: `Map`'s docs.
        let map: Map = unsafe { zeroed() };
        map.acquire(0, false, false);
        map.release();
        #[cfg(feature = "lockdep")]
        assert!(format!("{map:?}").contains("Instance"), "{map:?}");
    } // the map drops: with lockdep, its class is freed
    // Two zeroed locks nest in one order, again and again: no report (with
    // lockdep a report panics).
    // SAFETY: `RawTicketLock`'s docs.
    let (a, b): (RawTicketLock, RawTicketLock) = unsafe { (zeroed(), zeroed()) };
    for _ in 0..2 {
        a.lock();
        b.lock();
        // SAFETY: both held, released in reverse order.
        unsafe {
            b.unlock();
            a.unlock();
        }
    }
}

#[test]
fn the_mutexes_work_from_zero() {
    // `lock_api`'s mutexes are the raw lock and an `UnsafeCell<T>`: zero is
    // an unlocked mutex around a zeroed `T` (see `spinlock`'s docs).
    // SAFETY: the raw locks and `u64` are valid at zero.
    let m: TicketMutex<u64> = unsafe { zeroed() };
    *m.lock() += 5;
    assert!(m.try_lock().is_some());
    assert_eq!(*m.lock(), 5);
    // SAFETY: as above.
    let m: IrqTicketMutex<[u32; 3]> = unsafe { zeroed() };
    m.lock()[1] = 7;
    assert_eq!(*m.lock(), [0, 7, 0]);
    // The way the docs recommend: the zeroed raw lock, then `from_raw`.
    // SAFETY: `RawTicketLock`'s docs.
    let m = TicketMutex::from_raw(unsafe { zeroed::<RawTicketLock>() }, 1u8);
    assert_eq!(*m.lock(), 1);
}

#[test]
fn lockref_from_zero_is_new_0() {
    #[cfg(not(feature = "lockdep"))]
    // SAFETY: one 64-bit word (or a lock and a count word, no padding),
    // a local.
    unsafe {
        assert_new_is_zero("LockRef::new(0)", LockRef::new(0));
    }
    // SAFETY: `LockRef`'s docs.
    let r: LockRef = unsafe { zeroed() };
    assert_eq!(r.count(), 0);
    assert!(!r.is_dead());
    assert!(!r.get_not_zero());
    r.get();
    assert_eq!(r.count(), 1);
    {
        let guard = r.lock();
        assert_eq!(guard.count(), 1);
    }
    assert_eq!(r.put_return(), Some(0));
    assert_eq!(format!("{r:?}"), format!("{:?}", LockRef::new(0)));
}

#[test]
fn seqlock_types_from_zero() {
    // SAFETY: one atomic word, a local.
    unsafe { assert_new_is_zero("SeqCount", SeqCount::new()) };
    // SAFETY: `SeqCount`'s docs.
    let seq: SeqCount = unsafe { zeroed() };
    assert_eq!(seq.sequence(), SeqCount::new().sequence());
    let start = seq.read_begin();
    assert!(!seq.read_retry(start));
    // SAFETY: the only writer (a local nobody else sees), no reader in
    // an interrupt handler.
    drop(unsafe { seq.write() });
    assert!(seq.read_retry(start));

    // SAFETY: `SeqLock`'s docs: valid when zero is a valid `T` (`[u32; 3]`).
    let lock: SeqLock<[u32; 3]> = unsafe { zeroed() };
    assert_eq!(lock.read(), [0; 3]);
    lock.write()[2] = 9;
    assert_eq!(lock.read(), [0, 0, 9]);
    // SAFETY: as above (`u64`).
    let mut lock: SeqLock<u64> = unsafe { zeroed() };
    *lock.get_mut() += 1;
    assert_eq!(lock.into_inner(), 1);
}

#[test]
fn percpu_types_from_zero() {
    // SAFETY: `PerCpu`'s docs: valid when zero is a valid `T`.
    let slots: PerCpu<AtomicUsize> = unsafe { zeroed() };
    let fresh: PerCpu<AtomicUsize> = PerCpu::new();
    assert_eq!(slots.iter().count(), fresh.iter().count());
    assert!(slots.iter().all(|s| s.load(Relaxed) == 0));
    slots.get().fetch_add(3, Relaxed);
    assert_eq!(slots.iter().map(|s| s.load(Relaxed)).sum::<usize>(), 3);

    // SAFETY: `PerCpuCounter`'s docs.
    let counter: PerCpuCounter = unsafe { zeroed() };
    let fresh = PerCpuCounter::new();
    assert_eq!(counter.batch(), fresh.batch());
    assert_eq!((counter.read(), counter.sum()), (0, 0));
    for _ in 0..1000 {
        counter.inc();
        fresh.inc();
    }
    counter.add(-1);
    fresh.add(-1);
    assert_eq!(counter.sum(), 999);
    assert_eq!(counter.read(), fresh.read());

    // SAFETY: `BrLock`'s docs: valid when zero is a valid `T` (`u64`).
    let br: BrLock<u64> = unsafe { zeroed() };
    *br.local_lock() += 2;
    {
        let mut all = br.global_lock();
        assert_eq!(all.iter_mut().map(|v| *v).sum::<u64>(), 2);
    }
    assert_eq!(*br.local_lock(), 2);
}

/// A read and a write, by the raw interface, on a zeroed rw lock.
fn check_raw_rwlock<L: RawRwLock>(what: &str, lock: &L) {
    assert!(!lock.is_locked(), "{what}");
    lock.lock_shared();
    assert!(
        !lock.try_lock_exclusive(),
        "{what}: a writer got in past a reader"
    );
    // SAFETY: the shared lock taken above.
    unsafe { lock.unlock_shared() };
    lock.lock_exclusive();
    assert!(
        !lock.try_lock_shared(),
        "{what}: a reader got in past a writer"
    );
    // SAFETY: the exclusive lock taken above.
    unsafe { lock.unlock_exclusive() };
    assert!(!lock.is_locked(), "{what}");
}

#[test]
fn percpu_rwlocks_from_zero() {
    // SAFETY: (each) `RawPerCpuRwLock`'s docs, for both flavours.
    unsafe {
        check_raw_rwlock("RawPerCpuRwLock", &zeroed::<RawPerCpuRwLock<Fenced>>());
        check_raw_rwlock(
            "RawPerCpuRwLock<Gated>",
            &zeroed::<RawPerCpuRwLock<Gated>>(),
        );
    }
    // SAFETY: as above.
    let lock = lock_api::RwLock::<RawPerCpuRwLock<Gated>, u32>::from_raw(unsafe { zeroed() }, 4);
    *lock.write() += 1;
    assert_eq!(*lock.read(), 5);
}

struct Node {
    value: u32,
    link: Link,
}
impl_linked!(Node, link);

#[test]
fn rcu_types_from_zero() {
    // SAFETY: (each) pointers and words without padding, locals.
    unsafe {
        assert_new_is_zero("RcuPtr", RcuPtr::<u32>::null());
        assert_new_is_zero("Link", Link::new());
        assert_new_is_zero("RcuList", RcuList::<Node>::new());
        assert_new_is_zero("Hlist", Hlist::<Node>::new());
        assert_new_is_zero("RcuHashTable", RcuHashTable::<Node, 4>::new());
        assert_new_is_zero("RcuHead", RcuHead::new());
    }
    rcu::cpu_online();
    // SAFETY: (each `zeroed` below) the types' docs.
    let ptr: RcuPtr<u32> = unsafe { zeroed() };
    {
        let guard = rcu::read_lock();
        assert!(ptr.read(&guard).is_none());
    }

    // Zeroed nodes on a zeroed list, a zeroed hash chain and table (one
    // node each: a removed node may be reused only after a grace period).
    let node = || -> &'static Node {
        Box::leak(Box::new(Node {
            value: 3,
            // SAFETY: `Link`'s docs.
            link: unsafe { zeroed() },
        }))
    };
    let (node, chained, hashed) = (node(), node(), node());
    assert!(!node.link.is_linked());
    let writers = TicketMutex::new(());
    // SAFETY: as above.
    let list: RcuList<Node> = unsafe { zeroed() };
    assert!(list.is_empty());
    // SAFETY: `node` is leaked (never freed) and on no other list.
    unsafe { list.push_back(&mut writers.lock(), node) };
    {
        let guard = rcu::read_lock();
        assert_eq!(list.iter(&guard).map(|n| n.value).collect::<Vec<_>>(), [3]);
    }
    list.remove(&mut writers.lock(), node);
    assert!(list.is_empty() && !node.link.is_linked());
    // SAFETY: as above.
    let chain: Hlist<Node> = unsafe { zeroed() };
    assert!(chain.is_empty());
    // SAFETY: `chained` is leaked and on no list.
    unsafe { chain.push_front(&mut writers.lock(), chained) };
    assert!(!chain.is_empty());
    chain.remove(&mut writers.lock(), chained);
    // SAFETY: as above.
    let table: RcuHashTable<Node, 4> = unsafe { zeroed() };
    assert!(table.buckets().iter().all(Hlist::is_empty));
    assert_eq!(table.buckets().len(), 4);
    // SAFETY: `hashed` is leaked and on no list.
    unsafe { table.insert(&mut writers.lock(), 7, hashed) };
    {
        let guard = rcu::read_lock();
        assert!(table.find(7, &guard, |n| n.value == 3).is_some());
    }
    table.remove(&mut writers.lock(), hashed);

    // A zeroed callback head, queued and run.
    static RAN: AtomicUsize = AtomicUsize::new(0);
    unsafe fn ran(_: *mut RcuHead) {
        RAN.fetch_add(1, Relaxed);
    }
    // SAFETY: as above.
    let head: &'static mut RcuHead = Box::leak(Box::new(unsafe { zeroed::<RcuHead>() }));
    // SAFETY: nobody else can reach the head yet.
    assert!(!unsafe { head.is_queued() });
    // SAFETY: the head is leaked (lives past the callback) and not queued.
    unsafe { rcu::call_rcu(head, ran) };
    rcu::barrier();
    assert_eq!(RAN.load(Relaxed), 1);

    // SAFETY: as above.
    let gate: RcuSync = unsafe { zeroed() };
    assert!(gate.is_idle());
    gate.enter();
    assert!(!gate.is_idle());
    gate.exit();
    while !gate.poll_idle() {
        rcu::quiescent_state();
    }
    rcu::cpu_offline();

    // SAFETY: as above.
    let srcu: Srcu = unsafe { zeroed() };
    assert_eq!(srcu.gp_seq(), Srcu::new().gp_seq());
    let guard = srcu.read_lock();
    assert_eq!(guard.index(), Srcu::new().read_lock().index());
    drop(guard);
    let cookie = srcu.get_state();
    srcu.synchronize();
    assert!(srcu.poll(cookie));
}

#[test]
fn sleeping_primitives_from_zero() {
    use ksync::completion::Completion;
    use ksync::mutex::RawMutex as SleepingMutex;
    use ksync::semaphore::Semaphore;
    use ksync::wait::WaitQueue;

    // SAFETY: the "Zeroed memory" claims of these types.
    let (queue, sem, done, mutex) = unsafe {
        (
            zeroed::<WaitQueue>(),
            zeroed::<Semaphore>(),
            zeroed::<Completion>(),
            zeroed::<SleepingMutex>(),
        )
    };
    assert_eq!(queue.wake_all(), 0);
    queue.wait_event(|| true);
    assert!(!queue.has_waiters());
    assert_eq!(sem.count(), 0);
    assert!(!sem.try_down());
    sem.up();
    assert!(sem.try_down());
    assert!(!done.is_done());
    done.complete();
    done.wait_for_completion();
    check_raw_mutex("sleeping RawMutex", &mutex);
    // SAFETY: the "Zeroed memory" claims of the two rw semaphores.
    let (rwsem, percpu) = unsafe {
        (
            zeroed::<ksync::rwsem::RawRwSemaphore>(),
            zeroed::<ksync::percpu_rwsem::RawPerCpuRwSemaphore>(),
        )
    };
    check_raw_rwlock_contended("RawRwSemaphore", &rwsem);
    check_raw_rwlock_contended("RawPerCpuRwSemaphore", &percpu);
    // Not compared with `new()` byte for byte: their queue lock keeps an
    // uninitialised saved-state slot (written by each holder), so `new()`'s
    // bytes are not all initialised.
}

/// The `Zeroable` impls are exactly the types tested above, and
/// `Zeroable::zeroed` (safe code) gives values that work.
#[cfg(feature = "bytemuck")]
#[test]
fn zeroable_impls_cover_the_documented_types() {
    use bytemuck::Zeroable;

    fn zeroable<T: Zeroable>() {}
    zeroable::<TicketLock>();
    zeroable::<TtasLock>();
    zeroable::<QueuedLock>();
    zeroable::<RawTicketLock>();
    zeroable::<RawTtasLock>();
    zeroable::<RawQueuedLock>();
    zeroable::<RawIrqSave<RawTicketLock>>();
    zeroable::<RawIrqSave<RawTtasLock, ArchIrq>>();
    zeroable::<Map>();
    zeroable::<LockRef>();
    zeroable::<SeqCount>();
    zeroable::<SeqLock<[u64; 2]>>();
    zeroable::<PerCpu<AtomicUsize>>();
    zeroable::<PerCpuCounter>();
    zeroable::<RawPerCpuRwLock>();
    zeroable::<RawPerCpuRwLock<Gated>>();
    zeroable::<BrLock<u32>>();
    zeroable::<BrLock>();
    zeroable::<RcuPtr<Node>>();
    zeroable::<Link>();
    zeroable::<RcuList<Node>>();
    zeroable::<Hlist<Node>>();
    zeroable::<RcuHashTable<Node, 8>>();
    zeroable::<RcuHead>();
    zeroable::<RcuSync>();
    zeroable::<Srcu>();
    zeroable::<ksync::wait::WaitQueue>();
    zeroable::<ksync::semaphore::Semaphore>();
    zeroable::<ksync::completion::Completion>();
    zeroable::<ksync::mutex::RawMutex>();
    zeroable::<ksync::rwsem::RawRwSemaphore>();
    zeroable::<ksync::percpu_rwsem::RawPerCpuRwSemaphore>();
    zeroable::<ksync::RefCount>();
    zeroable::<ksync::spinlock::RawRwSpinLock>();
    zeroable::<ksync::RwSpinLock<u64>>();
    zeroable::<ksync::Once<u64>>();
    check_raw_rwlock_contended(
        "Zeroable RawRwSemaphore",
        &ksync::rwsem::RawRwSemaphore::zeroed(),
    );
    check_raw_rwlock_contended(
        "Zeroable RawPerCpuRwSemaphore",
        &ksync::percpu_rwsem::RawPerCpuRwSemaphore::zeroed(),
    );

    // A kernel's object, zero-allocated and derived (by hand here; the
    // derive macro does the same): every field is `Zeroable`.
    struct Inode {
        lock: RawTicketLock,
        refs: LockRef,
        nlink: PerCpuCounter,
        seq: SeqLock<u64>,
        link: Link,
        rcu: RcuHead,
    }
    // SAFETY: every field is `Zeroable`.
    unsafe impl Zeroable for Inode {}
    let inode = Inode::zeroed();
    check_raw_mutex("Inode::lock", &inode.lock);
    inode.refs.get();
    assert_eq!(inode.refs.count(), 1);
    inode.nlink.inc();
    assert_eq!(inode.nlink.sum(), 1);
    *inode.seq.write() = 4;
    assert_eq!(inode.seq.read(), 4);
    assert!(!inode.link.is_linked());
    // SAFETY: the object is ours alone.
    assert!(!unsafe { inode.rcu.is_queued() });
    check_raw_mutex("RawIrqSave", &RawIrqSave::<RawQueuedLock>::zeroed());
}

#[test]
fn spin_replacements_from_zero() {
    // SAFETY: the RefCount docs: zero is `RefCount::new(0)`.
    let refs: ksync::RefCount = unsafe { zeroed() };
    assert_eq!(refs.read(), 0);
    assert!(!refs.inc_not_zero(), "a zeroed count is dead");
    // SAFETY: the RawRwSpinLock docs: zero is an unlocked lock.
    let raw: ksync::spinlock::RawRwSpinLock = unsafe { zeroed() };
    check_raw_rwlock_contended("zeroed RawRwSpinLock", &raw);
    // SAFETY: the Once docs: zero is an uninitialised Once.
    let once: ksync::Once<u64> = unsafe { zeroed() };
    assert!(once.get().is_none());
    assert_eq!(*once.call_once(|| 3), 3);
    // SAFETY: one `AtomicI32`, no padding, ours alone.
    unsafe { assert_new_is_zero("RefCount::new(0)", ksync::RefCount::new(0)) };
}
