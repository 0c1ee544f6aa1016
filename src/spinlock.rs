//! Spinlocks: a fair 32-bit ticket lock, a queued (MCS) lock in 32 bits, a
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
//! | [`RawTicketLock`] | FIFO: strict arrival order | one `fetch_add` to lock, one to unlock (an RMW, so it cannot carry into `next`: Rust has no mixed-size atomics for Linux's halfword store) | every waiter spins on the same line; no starvation | locks that several CPUs fight over, where a starving CPU would be a bug (run queues, shared allocators) |
//! | [`RawQueuedLock`] | FIFO: the pending CPU, then an MCS queue of per-CPU nodes | one compare-exchange to lock, one `fetch_sub` to unlock | each waiter spins on its own node's line: a hand-off costs one line transfer however many wait | heavily contended locks on many CPUs; needs [`set_kernel!`](crate::set_kernel) |
//! | [`RawTtasLock`] | none: whoever wins the race | one compare-exchange, a plain store | waiters only read until it looks free; the holder often re-takes it (good throughput, unfair) | rarely contended locks, and locks taken mostly by one CPU |
//! | [`RawIrqSave<R>`] | as `R` | plus saving and masking local interrupts | as `R` | any lock also taken from an interrupt handler |
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
//! algorithm. Without `lockdep` the wrapper is transparent: the same size
//! and the same instructions as the algorithm.
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
//! Guards stay `Send` with `lockdep` (`GuardSend`, as without it: a
//! feature must not make code that compiled stop compiling). lockdep keeps
//! held locks per CPU, so a guard dropped on another CPU than the one that
//! locked is reported there as a [`BadUnlock`](crate::lockdep::ReportKind::BadUnlock),
//! and the first CPU keeps the lock on its held stack: with `lockdep`, do
//! not move held guards between CPUs, nor let a holder migrate (these
//! locks do not disable preemption: keep it off across the critical
//! section, see [lockdep](crate::lockdep#where-it-runs-and-what-it-costs)).
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

mod irq;
mod queued;
mod ticket;
mod tracked;
mod ttas;
mod up;
pub use irq::{ArchIrq, IrqControl, IrqState, KernelIrq, RawIrqSave};
pub use queued::{IrqQueuedMutex, QueuedLock, QueuedMutex, RawQueuedLock};
#[cfg(ksync_loom)]
#[doc(hidden)]
pub use ticket::TICKETS;
pub use ticket::{RawTicketLock, TicketLock};
pub(crate) use ticket::{lock_irqsave, try_lock};
pub use tracked::{ArchSpinlock, FairArchSpinlock, RawSpinlock};
pub use ttas::{RawTtasLock, TtasLock};

/// A [`lock_api::Mutex`] over a [`RawTicketLock`].
#[doc(alias = "spinlock_t")]
pub type TicketMutex<T> = lock_api::Mutex<RawTicketLock, T>;
/// A [`lock_api::Mutex`] over a [`RawTtasLock`].
pub type TtasMutex<T> = lock_api::Mutex<RawTtasLock, T>;
/// A [`TicketMutex`] that saves and disables local interrupts while held.
/// Interrupts are masked through the kernel's hooks ([`KernelIrq`]); see
/// [`ArchIrqTicketMutex`] for binaries without [`set_kernel!`](crate::set_kernel).
pub type IrqTicketMutex<T> = lock_api::Mutex<RawIrqSave<RawTicketLock>, T>;
/// A [`TtasMutex`] that saves and disables local interrupts while held.
pub type IrqTtasMutex<T> = lock_api::Mutex<RawIrqSave<RawTtasLock>, T>;
/// An [`IrqTicketMutex`] that masks interrupts with the architecture's
/// instructions ([`ArchIrq`]) instead of the kernel's hooks: usable in a
/// binary that never calls [`set_kernel!`](crate::set_kernel).
pub type ArchIrqTicketMutex<T> = lock_api::Mutex<RawIrqSave<RawTicketLock, ArchIrq>, T>;
/// An [`IrqTtasMutex`] masking with [`ArchIrq`], as [`ArchIrqTicketMutex`].
pub type ArchIrqTtasMutex<T> = lock_api::Mutex<RawIrqSave<RawTtasLock, ArchIrq>, T>;
