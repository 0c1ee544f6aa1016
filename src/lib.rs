//! ksync: the Linux kernel's scalable synchronization toolbox for `no_std`,
//! no-`alloc` Rust kernels.
//!
//! * [`lockref`]: a spinlock and a reference count in one 64-bit word,
//!   updated without the lock while it is free ([`LockRef`]).
//! * [`spinlock`]: a fair ticket lock, a TTAS lock and IRQ-saving variants,
//!   all usable through [`lock_api`].
//! * [`percpu`]: [`PerCpu<T>`](percpu::PerCpu), one cache-padded slot per
//!   CPU, and [`percpu_counter`]: counters whose updates stay on this CPU's
//!   line.
//! * [`percpu_rwlock`]: a reader-writer lock whose readers touch only
//!   their own CPU's count; [`brlock`]: per-CPU spinlocks.
//! * [`rcu`]: read-copy-update with quiescent-state-based grace periods,
//!   polled cookies, allocation-free [`rcu::call_rcu`] and
//!   [`rcu::barrier`], stall detection, [`rcu::RcuSync`], and
//!   [`rcu::srcu`] domains whose readers may sleep.
//! * Sleeping primitives on the kernel's scheduler hooks: [`wait`] queues,
//!   [`semaphore`], [`completion`], the [`mutex`], the reader-writer
//!   [`rwsem`], and [`percpu_rwsem`], whose readers touch only their own
//!   CPU's count and may sleep holding it.
//! * [`seqlock`]: sequence counters and seqlocks whose readers copy the
//!   data with atomic loads and retry, free of undefined behaviour.
//! * [`kernel`]: the hooks a kernel provides once ([`set_kernel!`]): CPU id,
//!   CPU count, preemption control.
//! * [`lockdep`]: lock-order checking (feature `lockdep`): reports lock
//!   orders that could deadlock the first time they are seen.
//!
//! Everything is usable from `static`s (`const fn new`) and needs no
//! allocator. A kernel provides the hooks once ([`set_kernel!`]); host
//! tests take the host kernel of the `test-hooks` feature instead, in
//! which every thread is a CPU, as here:
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::LockRef;
//! use ksync::percpu_counter::PerCpuCounter;
//! use ksync::spinlock::TicketMutex;
//!
//! static RUNQUEUE: TicketMutex<Vec<u32>> = TicketMutex::new(Vec::new());
//! static FORKS: PerCpuCounter = PerCpuCounter::new();
//! static INODE: LockRef = LockRef::new(1);
//!
//! let cpus: Vec<_> = (0..2u32)
//!     .map(|task| {
//!         std::thread::spawn(move || {
//!             INODE.get(); // lockless
//!             RUNQUEUE.lock().push(task); // preemption off while held
//!             FORKS.add(1); // this CPU's slot
//!             assert!(INODE.put_return().is_some());
//!         })
//!     })
//!     .collect();
//! for cpu in cpus {
//!     cpu.join().unwrap();
//! }
//! assert_eq!(RUNQUEUE.lock().len(), 2);
//! assert_eq!(FORKS.sum(), 2);
//! assert_eq!(INODE.count(), 1);
//! # }
//! ```
//!
//! The README is the user guide (install, the first example, targets,
//! embedding, troubleshooting); the repository's `docs/` holds the design,
//! testing and benchmarks. Names follow Linux; the C names are doc aliases, so searching
//! the docs for `lockref_get_not_dead` finds [`LockRef::get_not_dead`].
//!
//! # Interrupts and `critical-section`
//!
//! Masking local interrupts is a kernel service
//! ([`Kernel::irq_save`](kernel::Kernel::irq_save)), per CPU and never a
//! machine-wide lock. Its defaults are the CPU's own instructions on
//! x86_64, aarch64 and riscv64 bare metal; `critical-section` is used only
//! where it is the right tool: targets without a native path (single-core
//! MCUs) and `portable-atomic`'s small atomics on targets without
//! compare-and-swap. See [`kernel::irq`].
//!
//! # Layout
//!
//! Layers, each using only those below it: `sync` (the atomics shim) and
//! `arch/` (the only `asm!`) -> [`kernel`] (the hooks and settings a kernel
//! provides: CPU id, preemption, interrupts, spin policy) -> [`spinlock`],
//! [`lockref`], [`seqlock`], [`percpu`] -> [`percpu_counter`],
//! [`percpu_rwlock`], [`brlock`], [`rcu`] -> [`wait`] -> [`semaphore`],
//! [`completion`], [`mutex`] -> [`rwsem`], [`percpu_rwsem`] -> `host` (the
//! test kernel, with `test-hooks`). `xtask/src/layers.rs` checks the order.
//!
//! # Features
//!
//! * `defmt`: `defmt::Format` for the types a firmware logs: [`LockRef`],
//!   [`LockRefGuard`], [`lockref::Stats`], the raw spinlocks
//!   ([`spinlock::RawTicketLock`], [`spinlock::RawTtasLock`],
//!   [`spinlock::RawQueuedLock`]), the grace-period cookies
//!   ([`rcu::Cookie`], [`rcu::srcu::SrcuCookie`]),
//!   [`kernel::StallReport`] and lockdep's [`lockdep::Report`] and
//!   [`lockdep::ReportKind`]; not the guards, lock wrappers or per-CPU
//!   types.
//! * `alloc`: `rcu::defer_free` (Linux's `kfree_rcu`), which allocates.
//! * `lockdep`: lock-order checking for every ksync lock ([`lockdep`]); a
//!   debug aid, off by default (off, the locks are unchanged).
//! * `bytemuck`: `bytemuck::Zeroable` for the types of the table below.
//! * `test-hooks`: kernel hooks for host tests in which threads play CPUs
//!   (`host`); pulls in `std`, never for kernels. With it on,
//!   [`set_kernel!`] defines nothing (the host kernel has the hooks).
//! * `loom`: with `--cfg loom`, ksync's locks, per-CPU types and RCU run on
//!   loom's atomics, so a dependent's own loom models can contain them
//!   (constructors are not `const` there: a spinlock mutex is built with
//!   `SpinLock::from_raw(RawTicketLock::new(), value)`).
//!   Enables `test-hooks`. Without it no dependent resolves loom.
//!
//! # Zeroed memory
//!
//! Linux embeds locks, counters and list heads in objects that come from
//! zero-filled memory (`kzalloc`) and relies on all-zero bytes being their
//! initial state. In ksync that holds for every type a kernel embeds, in
//! every build (`lockdep` included: a zeroed lock is then a class of its
//! own, see [`lockdep::Map`]), and each type's docs say so under "Zeroed
//! memory". With the `bytemuck` feature they implement
//! `bytemuck::Zeroable`. `tests/zeroed.rs` checks every entry against the
//! type's constructor (and that `new` still writes only zeroes, where the
//! table says zero *is* `new`).
//!
//! | type | all-zero bytes are |
//! |---|---|
//! | [`spinlock::TicketLock`], [`spinlock::TtasLock`], [`spinlock::QueuedLock`] | `new()`: unlocked |
//! | [`spinlock::RawTicketLock`], [`spinlock::RawTtasLock`], [`spinlock::RawQueuedLock`] | unlocked; `new()` without `lockdep`, a lock of its own class with it |
//! | [`spinlock::RawIrqSave<L, I>`] | unlocked, when zero is a valid `L` |
//! | [`LockRef`] | `LockRef::new(0)` |
//! | [`seqlock::SeqCount`] | `new()` |
//! | [`seqlock::SeqLock<T>`], [`brlock::BrLock<T>`], [`percpu::PerCpu<T>`] | the value with zeroed `T`s, when zero is a valid `T` |
//! | [`percpu_counter::PerCpuCounter`] | `new()`: 0, default batch |
//! | [`percpu_rwlock::RawPerCpuRwLock`] (both flavours) | `new()` / `gated()`: unlocked |
//! | [`rcu::RcuPtr<T>`] | `null()` |
//! | [`rcu::Link`], [`rcu::RcuList`], [`rcu::Hlist`], [`rcu::RcuHashTable`] (`N > 0`) | `new()`: unlinked, empty |
//! | [`rcu::RcuHead`] | `new()`: not queued |
//! | [`rcu::srcu::Srcu`], [`rcu::RcuSync`] | `new()` |
//! | [`lockdep::Map`] | a map of its own class, not yet registered |
//! | [`wait::WaitQueue`], [`completion::Completion`] | `new()`: empty, not done |
//! | [`semaphore::Semaphore`] | `Semaphore::new(0)` |
//! | [`mutex::RawMutex`] | unlocked; `new()` without `lockdep`, a lock of its own class with it |
//! | [`rwsem::RawRwSemaphore`], [`percpu_rwsem::RawPerCpuRwSemaphore`] | unlocked, no waiters (the per-CPU one's gate idle); `new()` without `lockdep`, a lock of its own class with it |
//!
//! Not valid as zero bytes, and not meant to be embedded in zeroed objects:
//! [`lockdep::LockClassKey`] and [`kernel::SpinWait`] (they hold a
//! reference and function pointers; both live in `static`s), and the
//! guards, which only a lock hands out. The `lock_api` mutexes: see
//! [`spinlock`'s "Zeroed memory"](spinlock#zeroed-memory). Under loom no
//! type is (its atomics are registered with the model).

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
// loom builds: the architecture's IRQ state is `()` (nothing to mask).
#![cfg_attr(ksync_loom, allow(clippy::unit_arg, clippy::let_unit_value))]

#[cfg(any(test, ksync_loom, feature = "test-hooks"))]
extern crate std;

#[cfg(all(ksync_loom, not(feature = "loom")))]
compile_error!(
    "`--cfg ksync_loom` needs ksync's `loom` feature (the loom dependency): add `--features loom` (ksync's own tests get it from their dev-dependency)"
);

#[cfg(all(ksync_loom, feature = "lockdep"))]
compile_error!(
    "the `lockdep` feature is not modelled under loom: build the loom models without it"
);

#[cfg(feature = "alloc")]
extern crate alloc;

#[path = "../arch/mod.rs"]
mod arch;
mod sync;

#[cfg(feature = "test-hooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-hooks")))]
pub mod host;
pub mod kernel;
pub mod lockdep;
pub mod lockref;
pub mod once;
pub mod percpu;
pub mod rcu;
pub mod refcount;
pub mod seqlock;
pub mod sleeping;
pub mod spinlock;

// The families' modules at the crate root, where earlier versions had them
// (and where the crate's own code names them).
pub use percpu::brlock;
pub use percpu::counter as percpu_counter;
pub use percpu::rwlock as percpu_rwlock;
pub use sleeping::{completion, mutex, percpu_rwsem, rwsem, semaphore, wait};
#[cfg(all(feature = "bytemuck", not(ksync_loom)))]
mod zeroable;

pub use lock_api;
pub use lockref::{LockRef, LockRefGuard};
pub use once::{Lazy, Once};
pub use refcount::{Kref, KrefRef, RefCount};
pub use spinlock::RwSpinLock;

/// The README's examples, compiled and run as doc tests (with the host
/// kernel of `test-hooks`, which they need).
#[cfg(all(doctest, feature = "test-hooks"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/design.md` (in the repository, not the package:
/// build.rs sets `ksync_docs` where the file exists), as doc tests.
#[cfg(all(doctest, feature = "test-hooks", ksync_docs))]
#[doc = include_str!("../docs/design.md")]
pub struct DesignDoctests;
