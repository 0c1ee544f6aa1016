//! Spinlocks: a fair ticket lock (two 32-bit words), a queued (MCS) lock in 32 bits, a
//! test-and-test-and-set lock, and an adapter that makes any of them save
//! and disable local interrupts.
//!
//! All of them implement [`lock_api::RawMutex`], so the usual way to use them
//! is through [`lock_api::Mutex`] (aliases: [`TicketMutex`], [`QueuedMutex`],
//! [`TtasMutex`], [`IrqTicketMutex`], [`IrqQueuedMutex`], [`IrqTtasMutex`]); the raw types also have inherent
//! `lock`/`try_lock`/`unlock` for code that pairs them by hand.
//!
//! # Which lock
//!
//! | lock | hand-off | cost uncontended | under contention | use it for |
//! |---|---|---|---|---|
//! | [`RawTicketLock`] | FIFO: strict arrival order | one `fetch_add` on `next` to lock, a load and a store of `owner` to unlock (the two are separate 32-bit words: Rust has no mixed-size atomics for Linux's halfword store) | every waiter spins on the same line; no starvation | locks that several CPUs fight over, where a starving CPU would be a bug (run queues, shared allocators) |
//! | [`RawQueuedLock`] | FIFO: the pending CPU, then an MCS queue of per-CPU nodes | a load and one compare-exchange to lock, one store to unlock | each waiter spins on its own node's line: a hand-off costs one line transfer however many wait | heavily contended locks on many CPUs; needs [`set_kernel!`](crate::set_kernel) |
//! | [`RawTtasLock`] | none: whoever wins the race | one compare-exchange, a plain store | waiters only read until it looks free; the holder often re-takes it (good throughput, unfair) | rarely contended locks, and locks taken mostly by one CPU |
//! | [`SpinLock<T, IrqDisabled, A>`](SpinLock) (the `Irq*Mutex` aliases) | as `A` | plus saving and masking local interrupts | as `A` | any lock also taken from an interrupt handler |
//! | [`RawIrqSave<R>`] | as `R` | plus saving and masking local interrupts, and two preemption hook calls | as `R` | the same, around a raw lock that is not a [`RawSpinlock`] |
//!
//! When CPUs may be descheduled while they spin
//! ([`crate::kernel::vcpu_preemptible`]: a guest with
//! more vCPUs than host cores, host tests), the FIFO locks (ticket, queued)
//! hand off by test-and-set with bounded backoff instead: a FIFO hand-off
//! to a CPU that is not running stalls everyone behind it (throughput
//! falls by two orders of magnitude: the README's lock tables), so
//! fairness is traded for progress. On bare metal with one CPU per core
//! they stay strictly FIFO.
//!
//! A spinlock that an interrupt handler may take must be taken with local
//! interrupts disabled everywhere else too, or the handler can interrupt
//! the holder on the same CPU and spin forever: that is what
//! [`RawIrqSave`] is for. It disables interrupts *before* it starts to spin
//! and restores the saved state (it does not blindly re-enable) when the
//! guard drops, like Linux's `spin_lock_irqsave`/`spin_unlock_irqrestore`.
//! As with those, nested IRQ-saving guards must be dropped in reverse order
//! of acquisition; dropping an outer one first re-enables interrupts early.
//!
//! Waiting spins with a [`RelaxStrategy`] type parameter (default
//! [`Spin`]: the CPU's spin-loop hint, `pause` or `yield`).
//!
//! # What a lock disables while held
//!
//! As Linux's `spin_lock`, every lock here disables preemption from before
//! it spins until after it is released, through
//! [`Kernel::preempt_disable`](crate::kernel::Kernel::preempt_disable) and
//! `preempt_enable` (two calls of empty hooks in a kernel that never
//! preempts): a holder is never switched out while other CPUs spin for
//! it. So these locks need [`set_kernel!`](crate::set_kernel). What a
//! lock disables is its guard policy, a type ([`SpinGuardian`]):
//!
//! * [`PreemptDisabled`], the default of every alias;
//! * [`NoGuard`]: nothing (Linux's `arch_spin_lock`), for a scheduler's
//!   own locks and for binaries without `set_kernel!`;
//! * [`IrqDisabled`]: local interrupts saved and masked, then preemption
//!   (`spin_lock_irqsave`); on release interrupts are restored, then
//!   preemption enabled (`spin_unlock_irqrestore`). The `Irq*Mutex`
//!   aliases are this policy ([`IrqTicketMutex<T>`] is
//!   `SpinLock<T, IrqDisabled>`: one type, one cost); the `ArchIrq*Mutex`
//!   aliases are `IrqDisabled<ArchIrq>`, which masks with the CPU's own
//!   instructions and calls no hook. The [`RawIrqSave`] adapter does the
//!   same around a lock it knows nothing of, for two more preemption hook
//!   calls per release.
//!
//! [`SpinLock<T, G, A>`](SpinLock) is one lock generic over the policy and
//! the algorithm; its guard [`SpinLockGuard`] can be named and passed
//! between functions. The state a policy saves is kept in the lock, so a
//! held lock can be released from another function, or by the next task
//! after a context switch on the same CPU (`force_unlock`, with
//! [`RawSpinlock::replace_saved`] and the lockdep hand-over
//! [`RawSpinlock::lockdep_release`]/[`lockdep_acquire`](RawSpinlock::lockdep_acquire)).
//! A guard of a policy that disables something is `!Send`: what it
//! disabled belongs to its CPU.
//!
//! # Holder checks
//!
//! [`RawSpinlock::is_held`] and [`assert_held`](RawSpinlock::assert_held)
//! (and on the mutexes, through [`HolderCheck`]) ask whether this CPU holds
//! a lock: exact with `lockdep`, and in debug builds from an owner record
//! in the lock, which also reports "spinlock recursion" (a CPU taking a
//! lock it holds) and a release on another CPU, instead of hanging or
//! corrupting the preemption count. Free in release builds without
//! `lockdep`.
//!
//! # Layers
//!
//! As in Linux (`arch_spinlock_t` below `raw_spinlock_t`) and
//! Rust-for-Linux (`Lock<T, B: Backend>`), each algorithm is a small
//! untracked lock ([`TicketLock`], [`TtasLock`], [`QueuedLock`]: an
//! [`ArchSpinlock`]), and one generic [`RawSpinlock<A>`] above them holds
//! the lockdep map, the entry points that tell lockdep, `#[track_caller]`
//! and the `lock_api` impls. The names kernels use are its aliases
//! ([`RawTicketLock`], [`RawTtasLock`], [`RawQueuedLock`]); `LockRef`,
//! `BrLock` and `SeqLock`, which record at their own level, embed the
//! algorithm. Without `lockdep`, in release builds, the wrapper adds only
//! the guard policy's saved state (none for [`PreemptDisabled`] and
//! [`NoGuard`]) and its hook calls; debug builds add the owner record.
//!
//! # Lock-order checking
//!
//! With the `lockdep` feature every lock here takes part in
//! [`lockdep`](crate::lockdep): `lock` (and `lock_nested`, for deliberate
//! nesting of one class) records the acquisition before it spins,
//! `try_lock` once it succeeded, `unlock` the release; the IRQ-saving
//! forms are recorded as taken with interrupts off. Without the feature the
//! locks are byte for byte and instruction for instruction what they are
//! without it.
//!
//! A lock's class is the place it was built: `RawTicketLock::new()` (and
//! the other constructors) are `#[track_caller]` with `lockdep`, or take an
//! explicit key ([`RawTicketLock::with_class`], `set_lock_class`).
//! `lock_api`'s `Mutex::new` builds its raw lock from the `INIT` constant,
//! which has no call site: such a mutex is a class of its own (named by
//! its address in reports). To name the class by a line or a key, build
//! the mutex from a raw lock:
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::lock_class;
//! use ksync::spinlock::{RawTicketLock, TicketMutex};
//!
//! // Every runqueue's lock is one class, "runqueue".
//! static RQ: TicketMutex<u32> =
//!     TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("runqueue")), 0);
//! *RQ.lock() += 1;
//! ```
//!
//! Guards are as `Send` with `lockdep` as without it (a feature must not
//! make code that compiled stop compiling): only [`NoGuard`] guards are.
//! lockdep keeps held locks per CPU, so a guard dropped on another CPU
//! than the one that locked is reported there as a
//! [`BadUnlock`](crate::lockdep::ReportKind::BadUnlock): tell it of a
//! deliberate move with [`RawSpinlock::lockdep_release`] before and
//! [`RawSpinlock::lockdep_acquire`] after.
//!
//! # One CPU
//!
//! Built with `KSYNC_MAX_CPUS=1` ([`MAX_CPUS`](crate::kernel::MAX_CPUS)
//! is 1), the ticket, TTAS and queued locks take and release themselves
//! with a relaxed load and a relaxed store of their word and a compiler
//! fence: no atomic read-modify-write, no memory barrier (on x86_64 no
//! `lock`-prefixed instruction; on a Cortex-M0, whose "atomics" are
//! critical sections, no interrupt masking). `try_lock` of a held lock
//! still fails. Every other build is unchanged: the choice is a `const`
//! at the top of each fast path, and the dead branch compiles away.
//!
//! Why a load and a store exclude there: on one CPU, the only code that
//! can run between two instructions of a lock operation is an interrupt
//! handler on that CPU (the build's promise, below), and a handler runs
//! to its end before the code it interrupted goes on, seeing that code's
//! writes in program order (a CPU sees its own accesses in order; the
//! compiler fences keep the compiler from moving the critical section
//! across the lock word's accesses). A handler that lands between a
//! lock's load and its store
//!
//! * takes *and releases* the lock: the word means "free" again when it
//!   returns (the ticket lock's two fields may both have moved on by one;
//!   the store writes the state computed from the older word, also a
//!   valid "held once" state), and the interrupted operation goes on as
//!   if the handler had run before it;
//! * only tries and fails, or reads: the word is unchanged;
//! * cannot find the lock held by the code it interrupted and *wait*:
//!   that code cannot run again until the handler returns, so on an SMP
//!   machine this is a deadlock too (the reason a lock shared with
//!   handlers is taken with interrupts masked, [`RawIrqSave`]). On one CPU
//!   ksync can tell: `lock` of a held lock is such a recursion (the same
//!   context taking it twice, or a handler taking a lock that the code it
//!   interrupted holds). Debug builds panic with "spinlock recursion";
//!   release builds spin, as the SMP lock would.
//!
//! `unlock` needs no read-modify-write either: while a lock is held
//! nobody changes its word (a handler that tries fails without writing,
//! one that waits never returns), so the queued lock never sees a
//! pending bit or a tail and never calls a kernel hook. Nor does `unlock`
//! kick halted waiters ([`SpinWait`](crate::kernel::SpinWait)): on one
//! CPU the only waiter there can be is a recursion's, which nothing
//! releases.
//!
//! What a single-CPU build promises:
//!
//! 1. ksync's locks run on one CPU only (as its per-CPU types need: 0 is
//!    the only CPU id);
//! 2. no other *thread* runs on that CPU in the middle of a lock
//!    operation, and none waits in `lock` for a lock whose holder was
//!    switched out (debug builds would report it as a recursion): the
//!    kernel does not preempt kernel code, or keeps preemption off while
//!    it takes, holds and releases ksync spinlocks (Linux's rule: on a
//!    uniprocessor kernel, `spin_lock` is `preempt_disable`). The locks'
//!    default policy, [`PreemptDisabled`], does exactly that through the
//!    kernel's hooks; a [`NoGuard`] lock leaves it to the kernel;
//! 3. an interrupt handler releases every ksync spinlock it takes before
//!    it returns (a lock taken in a handler and released by another
//!    context could be taken at the same time by the operation the
//!    handler interrupted).
//!
//! Interrupt handlers may otherwise run anywhere. A kernel that cannot
//! promise this builds with `KSYNC_MAX_CPUS=2` and gets the SMP locks.
//!
//! The lock inside [`LockRef`](crate::LockRef) keeps its read-modify-
//! writes on targets with 64-bit atomics: its word also holds the count,
//! which a handler may change for good between a load and a store (a
//! lockless `get`), so a plain store could lose that change. Without
//! 64-bit atomics the lockref's lock is a [`TicketLock`] and takes the
//! single-CPU path too. `cargo xtask check single-cpu` runs the
//! single-CPU tests (`tests/uniprocessor.rs`, whose "interrupts" are
//! signals to the test's one thread) and checks the x86_64 assembly of
//! each lock operation for `lock` prefixes, `xchg` and fences.
//!
//! # Zeroed memory
//!
//! All-zero bytes are a valid unlocked lock for every lock here, in every
//! build: the algorithms ([`TicketLock`], [`TtasLock`], [`QueuedLock`])
//! are a zero word, exactly what `new` builds; their tracked forms
//! ([`RawTicketLock`], [`RawTtasLock`], [`RawQueuedLock`]) add a lockdep
//! [`Map`](crate::lockdep::Map), which is nothing without `lockdep` and a
//! lock that is its own class with it; [`RawIrqSave<L, I>`] is valid at
//! zero whenever `L` is (its saved flags are `MaybeUninit`). With the
//! `bytemuck` feature they are all `bytemuck::Zeroable`. The `lock_api`
//! mutexes ([`TicketMutex<T>`] and the others) hold the raw lock and an
//! `UnsafeCell<T>`, so a zeroed one is an unlocked mutex around a zeroed
//! `T` when that is a valid `T`; `lock_api` does not promise its layout
//! and ksync cannot implement `Zeroable` for its types, so a structure
//! meant for zero-filled memory embeds the raw lock (or builds the mutex
//! with `Mutex::from_raw`).
//!
//! # Example
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::spinlock::{TicketMutex, TtasMutex};
//!
//! static RUNQUEUE_LEN: TicketMutex<usize> = TicketMutex::new(0);
//! static STATS: TtasMutex<[u64; 4]> = TtasMutex::new([0; 4]);
//!
//! *RUNQUEUE_LEN.lock() += 1;
//! STATS.lock()[2] += 5;
//! if let Some(mut len) = RUNQUEUE_LEN.try_lock() {
//!     *len -= 1;
//! }
//! assert_eq!(*RUNQUEUE_LEN.lock(), 0);
//! ```

pub use spin::relax::{Loop, RelaxStrategy, Spin};

mod guardian;
mod irq;
mod queued;
mod rw;
mod ticket;
mod tracked;
mod ttas;
mod up;
pub use guardian::{IrqDisabled, NoGuard, PreemptDisabled, SpinGuardian};
pub use irq::{ArchIrq, IrqControl, IrqState, KernelIrq, RawIrqSave};
pub use queued::{IrqQueuedMutex, QueuedLock, QueuedMutex, RawQueuedLock};
pub use rw::{
    IrqRwSpinLock, QR_BIAS, RawRwSpinLock, RwSpinLock, RwSpinLockReadGuard,
    RwSpinLockUpgradableGuard, RwSpinLockWriteGuard,
};
#[cfg(ksync_loom)]
#[doc(hidden)]
pub use ticket::TICKETS;
pub use ticket::{RawTicketLock, TicketLock};
pub(crate) use ticket::{lock_irqsave, try_lock};
pub use tracked::{ArchSpinlock, FairArchSpinlock, HolderCheck, RawSpinlock};
pub use ttas::{RawTtasLock, TtasLock};

/// A [`lock_api::Mutex`] over a [`RawTicketLock`] (preemption disabled
/// while held).
#[doc(alias = "spinlock_t")]
pub type TicketMutex<T> = lock_api::Mutex<RawTicketLock, T>;
/// A [`lock_api::Mutex`] over a [`RawTtasLock`] (preemption disabled
/// while held).
pub type TtasMutex<T> = lock_api::Mutex<RawTtasLock, T>;

/// One spinlock generic over what it disables while held, `G` (a
/// [`SpinGuardian`]: [`NoGuard`], [`PreemptDisabled`], [`IrqDisabled`], or
/// a kernel's own), and over its algorithm `A` ([`TicketLock`] unless
/// named; [`QueuedLock`], [`TtasLock`]). Its guard,
/// [`SpinLockGuard`], can be named and passed between functions. The
/// other mutex aliases are fixed choices of it: [`TicketMutex<T>`] is
/// `SpinLock<T, PreemptDisabled>`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{IrqDisabled, NoGuard, QueuedLock, SpinLock, SpinLockGuard};
///
/// // The scheduler's own lock: it manages preemption itself.
/// static RUNQUEUE: SpinLock<u32, NoGuard> = SpinLock::new(0);
/// // Shared with an interrupt handler; queued algorithm.
/// static TIMERS: SpinLock<u64, IrqDisabled, QueuedLock> = SpinLock::new(0);
///
/// fn bump(mut len: SpinLockGuard<'_, u32, NoGuard>) -> u32 {
///     *len += 1;
///     *len
/// }
/// assert_eq!(bump(RUNQUEUE.lock()), 1);
/// *TIMERS.lock() += 1;
/// ```
#[doc(alias("spinlock_t", "SpinGuardian"))]
pub type SpinLock<T, G = PreemptDisabled, A = TicketLock> = lock_api::Mutex<RawSpinlock<A, G>, T>;
/// The guard of a [`SpinLock`].
pub type SpinLockGuard<'a, T, G = PreemptDisabled, A = TicketLock> =
    lock_api::MutexGuard<'a, RawSpinlock<A, G>, T>;
/// A [`TicketMutex`] that saves and disables local interrupts while held
/// (then preemption): [`SpinLock<T, IrqDisabled>`](SpinLock), Linux's
/// `spin_lock_irqsave`. Interrupts are masked through the kernel's hooks
/// ([`KernelIrq`]); see [`ArchIrqTicketMutex`] for binaries without
/// [`set_kernel!`](crate::set_kernel). On release, interrupts are restored
/// before preemption is enabled (`spin_unlock_irqrestore`).
///
/// It is the [`IrqDisabled`] policy, not the [`RawIrqSave`] adapter over a
/// [`RawTicketLock`]: the same work in the same order, kept in one place
/// (the adapter wraps locks it knows nothing of, and pays two more
/// preemption hook calls per release to restore interrupts first).
pub type IrqTicketMutex<T> = SpinLock<T, IrqDisabled>;
/// A [`TtasMutex`] that saves and disables local interrupts while held:
/// [`SpinLock<T, IrqDisabled, TtasLock>`](SpinLock), as
/// [`IrqTicketMutex`].
pub type IrqTtasMutex<T> = SpinLock<T, IrqDisabled, TtasLock>;
/// An [`IrqTicketMutex`] that masks interrupts with the architecture's
/// instructions ([`ArchIrq`]) instead of the kernel's hooks: usable in a
/// binary that never calls [`set_kernel!`](crate::set_kernel).
///
/// [`SpinLock<T, IrqDisabled<ArchIrq>>`](SpinLock): it calls no hook at
/// all (preemption is held off by the masked interrupts).
pub type ArchIrqTicketMutex<T> = SpinLock<T, IrqDisabled<ArchIrq>>;
/// An [`IrqTtasMutex`] masking with [`ArchIrq`], as [`ArchIrqTicketMutex`].
pub type ArchIrqTtasMutex<T> = SpinLock<T, IrqDisabled<ArchIrq>, TtasLock>;
