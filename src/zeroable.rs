//! [`bytemuck::Zeroable`] for the types whose all-zero bytes are a valid
//! new value (feature `bytemuck`). The table of which types those are, and
//! why the others are not, is the crate docs' "Zeroed memory"; each type's
//! own docs have a "Zeroed memory" section, and `tests/zeroed.rs` checks
//! every claim made here against the type's constructor.
//!
//! Every impl holds in every build of the crate, `lockdep` included (its
//! [`Map`] is valid at zero, see there), so turning a feature on never
//! takes an impl away. Not under loom, whose atomics are registered with
//! the running model and are never valid as zero bytes.

use bytemuck::Zeroable;

use crate::brlock::BrLock;
use crate::completion::Completion;
use crate::kernel::irq::{ArchIrq, IrqControl, KernelIrq};
use crate::lockdep::Map;
use crate::lockref::LockRef;
use crate::mutex::RawMutex;
use crate::percpu::PerCpu;
use crate::percpu_counter::PerCpuCounter;
use crate::percpu_rwlock::{Fenced, Gated, RawPerCpuRwLock};
use crate::percpu_rwsem::RawPerCpuRwSemaphore;
use crate::rcu::list::{Hlist, Link, RcuHashTable, RcuList};
use crate::rcu::srcu::Srcu;
use crate::rcu::{RcuHead, RcuPtr, RcuSync};
use crate::rwsem::RawRwSemaphore;
use crate::semaphore::Semaphore;
use crate::seqlock::{SeqCount, SeqData, SeqLock};
use crate::spinlock::{QueuedLock, RawIrqSave, RawSpinlock, SpinGuardian, TicketLock, TtasLock};
use crate::wait::WaitQueue;

// ---- locks ---------------------------------------------------------------------

// SAFETY: two `AtomicU32` (zero: owner 0, next 0, which is free: the
// tickets are equal) and a `PhantomData`. Zero is what `new` builds.
unsafe impl<R> Zeroable for TicketLock<R> {}

// SAFETY: one `AtomicBool` (zero: `false`, unlocked) and a `PhantomData`.
unsafe impl<R> Zeroable for TtasLock<R> {}

// SAFETY: one `AtomicU32` (zero: not locked, nobody pending, empty queue
// tail) and a `PhantomData`.
unsafe impl<R> Zeroable for QueuedLock<R> {}

// SAFETY: the algorithm `A` (zero-valid by the bound); the guard policy's
// saved state, a `MaybeUninit` in an `UnsafeCell` (valid whatever its
// bytes: each holder writes it before it is read); in debug builds the
// owner record, an `AtomicU32` whose zero means "free"; a `Map`
// (zero-valid in every build, see its impl below); a `PhantomData`.
unsafe impl<A: Zeroable, G: SpinGuardian> Zeroable for RawSpinlock<A, G> {}

// SAFETY: the inner lock (zero-valid by the bound); the saved flags are a
// `MaybeUninit` in an `UnsafeCell`, valid whatever their bytes (they are
// written by each holder before they are read); `PhantomData<I>` has no
// bytes.
unsafe impl<L: Zeroable, I: IrqControl> Zeroable for RawIrqSave<L, I> {}

// SAFETY: unit structs, no bytes.
unsafe impl Zeroable for KernelIrq {}
// SAFETY: as above.
unsafe impl Zeroable for ArchIrq {}

// SAFETY: without `lockdep`, `()`. With it, a `MapKey` (`repr(usize)`,
// discriminant 0 is the fieldless `Instance`) and an `AtomicU32` class
// cache (0: not registered yet): the map of a per-instance class that has
// not been taken yet, which `Drop` and the engine handle as any other.
unsafe impl Zeroable for Map {}

/// A zeroed `LockRef` is `LockRef::new(0)`: an object from zero-filled
/// memory (Linux's `kzalloc`) starts unlocked, with no references.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use bytemuck::Zeroable;
/// use ksync::LockRef;
///
/// struct Inode { i_count: LockRef, i_ino: u64 }
/// // SAFETY: every field is valid as zero bytes.
/// unsafe impl Zeroable for Inode {}
///
/// let inode = Inode::zeroed(); // as `kzalloc(sizeof(struct inode))` gives it
/// assert_eq!((inode.i_count.count(), inode.i_ino), (0, 0));
/// assert!(inode.i_count.get_not_dead()); // the first reference
/// ```
// SAFETY: with 64-bit atomics, an `AtomicU64` whose zero has the lock half
// free and the count 0 (`LockRef::new(0)`); without, a `TicketLock` and an
// `AtomicI32`, both zero-valid, the same value. Plus a `Map`.
unsafe impl<G: SpinGuardian> Zeroable for LockRef<G> {}

// ---- seqlock ---------------------------------------------------------------------

// SAFETY: one `AtomicU32`; zero is even (no write in progress).
unsafe impl Zeroable for SeqCount {}

// SAFETY: a `SeqCount`, a `TicketLock`, a `Map` (all zero-valid), a
// `PhantomData` of the policy (no bytes), and the storage: an
// `UnsafeCell` of `T` (zero-valid by the bound) with zero tail bytes (what
// `new` writes there). `T: SeqData` promises no padding
// where no check can see it (a struct's impl); where the rule depends on
// the layout (tuples), `SeqData::LAYOUT_CHECK` fails the build of every
// word copy in and out of the storage, so a lock of a padded `T` made from
// zeros can be built but never read or written (and `zeroed` itself
// checks too).
unsafe impl<T: SeqData + Zeroable, G: SpinGuardian> Zeroable for SeqLock<T, G> {
    #[inline]
    fn zeroed() -> Self {
        let () = T::LAYOUT_CHECK;
        // SAFETY: all-zero bytes are a valid `SeqLock<T>` (the impl's
        // comment).
        unsafe { core::mem::zeroed() }
    }
}

/// Compile-time tests of the padding check on a zeroed
/// [`SeqLock`] (doc tests only, never built otherwise). A tuple without
/// padding is accepted, through `Zeroable` and through zero-filled memory:
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(
    not(all(feature = "bytemuck", feature = "test-hooks")),
    doc = " ```ignore"
)]
/// # use bytemuck::Zeroable;
/// # use ksync::seqlock::SeqLock;
/// type Data = (u64, u32, u32);
/// let lock = <SeqLock<Data> as Zeroable>::zeroed();
/// lock.write().1 = 5;
/// assert_eq!(lock.read(), (0, 5, 0));
/// // SAFETY: zero bytes are a valid `SeqLock<Data>`.
/// let lock: SeqLock<Data> = unsafe { core::mem::zeroed() };
/// assert_eq!(lock.read(), (0, 0, 0));
/// ```
///
/// The same code with padding in the tuple (`(u64, u32)`: four bytes after
/// the `u32`) does not build (the word copies would load padding bytes,
/// undefined behaviour that Miri reports). Through `Zeroable`:
///
#[cfg_attr(
    all(feature = "bytemuck", feature = "test-hooks"),
    doc = " ```compile_fail,E0080"
)]
#[cfg_attr(
    not(all(feature = "bytemuck", feature = "test-hooks")),
    doc = " ```ignore"
)]
/// # use bytemuck::Zeroable;
/// # use ksync::seqlock::SeqLock;
/// type Data = (u64, u32);
/// let lock = <SeqLock<Data> as Zeroable>::zeroed();
/// ```
///
/// Through zero-filled memory, on the first read or write:
///
#[cfg_attr(
    all(feature = "bytemuck", feature = "test-hooks"),
    doc = " ```compile_fail,E0080"
)]
#[cfg_attr(
    not(all(feature = "bytemuck", feature = "test-hooks")),
    doc = " ```ignore"
)]
/// # use bytemuck::Zeroable;
/// # use ksync::seqlock::SeqLock;
/// type Data = (u64, u32);
/// // SAFETY: zero bytes are a valid `SeqLock<Data>`.
/// let lock: SeqLock<Data> = unsafe { core::mem::zeroed() };
/// lock.read();
/// ```
///
#[cfg_attr(
    all(feature = "bytemuck", feature = "test-hooks"),
    doc = " ```compile_fail,E0080"
)]
#[cfg_attr(
    not(all(feature = "bytemuck", feature = "test-hooks")),
    doc = " ```ignore"
)]
/// # use bytemuck::Zeroable;
/// # use ksync::seqlock::SeqLock;
/// type Data = (u64, u32);
/// // SAFETY: zero bytes are a valid `SeqLock<Data>`.
/// let lock: SeqLock<Data> = unsafe { core::mem::zeroed() };
/// lock.write().1 = 5;
/// ```
#[cfg(doctest)]
pub struct SeqLockZeroedChecks;

// ---- per-CPU data ----------------------------------------------------------------

// SAFETY: an array of `CachePadded<T>`, each a `T` (zero-valid by the
// bound) and padding.
unsafe impl<T: Zeroable> Zeroable for PerCpu<T> {}

/// A zeroed `PerCpuCounter` is `PerCpuCounter::new()`: 0, the default
/// batch.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use bytemuck::Zeroable;
/// use ksync::percpu_counter::{self, PerCpuCounter};
///
/// // A filesystem's in-memory superblock from zero-filled memory.
/// let free_blocks = PerCpuCounter::zeroed();
/// free_blocks.add(8);
/// assert_eq!(free_blocks.sum(), 8);
/// assert_eq!(free_blocks.batch(), percpu_counter::default_batch());
/// ```
// SAFETY: a `RawTicketLock`, the total (an `AtomicI64`, or an
// `UnsafeCell<i64>` without 64-bit atomics), `batch` 0 (which means the
// default batch, as `new` stores), and a `PerCpu<AtomicI32>` of zeros:
// exactly `PerCpuCounter::new()`.
unsafe impl Zeroable for PerCpuCounter {}

// SAFETY: a unit struct.
unsafe impl Zeroable for Fenced {}

// SAFETY: one `RcuSync` (zero-valid, below).
unsafe impl Zeroable for Gated {}

// SAFETY: a `PerCpu<AtomicI32>` (no readers), an `AtomicBool` (`block`
// false), the flavour (zero-valid by the bound), a `PhantomData` and a
// `Map`.
unsafe impl<F: Zeroable, R> Zeroable for RawPerCpuRwLock<F, R> {}

// SAFETY: a `PerCpu` of slots, each a `TicketLock` and an `UnsafeCell<T>`
// (zero-valid by the bound), and a `Map`.
unsafe impl<T: Zeroable> Zeroable for BrLock<T> {}

// ---- RCU -------------------------------------------------------------------------

// SAFETY: one `AtomicPtr<T>`; zero is null, what `RcuPtr::null` builds.
unsafe impl<T> Zeroable for RcuPtr<T> {}

// SAFETY: two `AtomicPtr`s (null) and an `AtomicUsize` state 0 (on no
// list): `Link::new()`.
unsafe impl Zeroable for Link {}

// SAFETY: a head (a null first pointer and a zero, unbound writers' lock
// id), a null last pointer and a `PhantomData`: `RcuList::new()`.
unsafe impl<T, Tag> Zeroable for RcuList<T, Tag> {}

// SAFETY: a head as above and a `PhantomData`: `Hlist::new()`.
unsafe impl<T, Tag> Zeroable for Hlist<T, Tag> {}

// SAFETY: an array of `Hlist`s (zero-valid, above). A zeroed table with
// `N == 0` (which `new` refuses) has no bucket; its methods then panic on
// the modulo by zero, they do not misbehave.
unsafe impl<T, const N: usize, Tag> Zeroable for RcuHashTable<T, N, Tag> {}

// SAFETY: a null `next` in an `UnsafeCell` and an `AtomicUsize` function
// word 0 (not queued): `RcuHead::new()`.
unsafe impl Zeroable for RcuHead {}

// SAFETY: two `AtomicU32` (state 0 is `IDLE`, no writers), an
// `AtomicUsize` cookie 0 and a `RawTicketLock`: `RcuSync::new()`.
unsafe impl Zeroable for RcuSync {}

// SAFETY: two `AtomicUsize` (index 0, sequence 0), an `AtomicBool` (free) and
// a `PerCpu` of zero counts: `Srcu::new()`.
unsafe impl Zeroable for Srcu {}

// ---- sleeping primitives -------------------------------------------------------

// SAFETY: a `RawSpinlock` (zero-valid, above) and a head and tail in an
// `UnsafeCell`, both null at zero: the empty queue `new()` builds.
unsafe impl Zeroable for WaitQueue {}

// SAFETY: an `AtomicUsize` count (0) and a `WaitQueue` (above):
// `Semaphore::new(0)`.
unsafe impl Zeroable for Semaphore {}

// SAFETY: as `Semaphore`: zero is "not done", `Completion::new()`.
unsafe impl Zeroable for Completion {}

// SAFETY: two `AtomicUsize` (state 0: unlocked, no waiters; owner 0: none),
// a `WaitQueue` (above), a `Map` (zero-valid) and with `lockdep` an
// `AtomicBool` `false`: `RawMutex::new()`, unlocked.
unsafe impl Zeroable for RawMutex {}

// SAFETY: two `AtomicUsize` (state 0: no writer, no readers, no waiters;
// owner 0: none), a `WaitQueue` (above), a `Map` (zero-valid) and with
// `lockdep` an `AtomicBool` `false`: `RawRwSemaphore::new()`, unlocked.
unsafe impl Zeroable for RawRwSemaphore {}

// SAFETY: a `RawPerCpuRwLock<Gated>` (zero-valid, above: no readers,
// `block` clear, the gate idle, a `Map`) and two `WaitQueue`s (above):
// `RawPerCpuRwSemaphore::new()`, unlocked.
unsafe impl Zeroable for RawPerCpuRwSemaphore {}

// ---- the types that replace spin's ---------------------------------------------

// SAFETY: one `AtomicI32`; zero is `RefCount::new(0)` (a dead count).
unsafe impl Zeroable for crate::refcount::RefCount {}

// SAFETY: the lock word (`AtomicU32`, zero: no writer, no reader), a
// `TicketLock` (zero-valid), a `Map` (zero-valid), with `lockdep` the
// upgrader's CPU and in debug builds the writer's (`AtomicU32`s whose zero
// means "none"), and a `PhantomData`: an unlocked lock.
unsafe impl<G: SpinGuardian> Zeroable for crate::spinlock::RawRwSpinLock<G> {}

// SAFETY: a `RawRwSpinLock` (above) and an `UnsafeCell<T>` (zero-valid
// when `T` is).
unsafe impl<T: Zeroable, G: SpinGuardian> Zeroable for crate::spinlock::RwSpinLock<T, G> {}

// SAFETY: the state word (`AtomicUsize`, zero: not initialised, nobody
// initialising) and an `UnsafeCell<MaybeUninit<T>>`, which any bytes are.
unsafe impl<T> Zeroable for crate::once::Once<T> {}
