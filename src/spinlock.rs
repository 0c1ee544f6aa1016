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
//! ```
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
//! # Example
//!
//! ```
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

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

use crate::kernel::{Backoff, kick_waiters, vcpu_preemptible};
use crate::lockdep::Map;
use crate::sync::{AtomicU32, Ordering, const_fn, relax};
pub use spin::relax::{Loop, RelaxStrategy, Spin};

mod queued;
mod ttas;
pub use queued::{IrqQueuedMutex, QueuedMutex, RawQueuedLock};
pub use ttas::RawTtasLock;

/// A [`lock_api::Mutex`] over a [`RawTicketLock`].
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

// ---- ticket lock ------------------------------------------------------------

/// Width of each ticket: 16 bits, or 2 under loom, so that a model can wrap
/// the tickets in four acquisitions (`ticket_try_lock_across_a_wrap`).
const TICKET_BITS: u32 = if cfg!(loom) { 2 } else { u16::BITS };
/// One ticket's mask, at bit 0.
const TICKET_MASK: u32 = (1 << TICKET_BITS) - 1;
/// Adding this hands out the next ticket (`next + 1`). `next` is the top
/// field of the word, so its carry leaves the word (16-bit tickets) or
/// lands in bits no field reads (loom's 2-bit tickets): it never reaches
/// `owner`.
const NEXT_ONE: u32 = 1 << TICKET_BITS;

/// How many distinct tickets there are: this many acquisitions bring the
/// word's fields back to the values they started from. Models of the
/// wrap (loom only) need it.
#[cfg(loom)]
#[doc(hidden)]
pub const TICKETS: u32 = 1 << TICKET_BITS;

/// The ticket being served.
#[inline(always)]
const fn owner_of(word: u32) -> u32 {
    word & TICKET_MASK
}

/// The next ticket to hand out.
#[inline(always)]
const fn next_of(word: u32) -> u32 {
    (word >> TICKET_BITS) & TICKET_MASK
}

/// A fair (FIFO) ticket spinlock in 32 bits.
///
/// One 32-bit word: `owner` (the ticket being served) in the low half,
/// `next` (the ticket the next arrival takes) in the high half; the lock
/// is free when they are equal. Locking takes a ticket with one
/// `fetch_add` on the word (the carry out of `next` leaves the word) and
/// spins until `owner` reaches it; unlocking adds one to `owner` (only the
/// holder writes it; at `u16::MAX` it subtracts `u16::MAX` instead, so it
/// never carries into `next`). Up to 65 535 CPUs may wait at once
/// ([`MAX_CPUS`](crate::kernel::MAX_CPUS) is bounded below that).
///
/// `try_lock` compares the whole word, as Linux's ticket trylock does: a
/// compare of `next` alone succeeds again once 65 536 acquisitions have
/// wrapped it while the lock is held, and two CPUs would then hold it.
///
/// With [`lockdep`](crate::lockdep), the lock's class is the place it was
/// built (see [lock classes](crate::lockdep#lock-classes)), and `lock`,
/// `try_lock` and `unlock` record themselves (see the
/// [module docs](self#lock-order-checking)).
///
/// # Invariants
/// `owner` only changes by the holder's unlock, by +1 (mod 2^16), and
/// `next - owner` (mod 2^16) is the number of holders plus waiters.
#[doc(alias = "arch_spinlock_t")]
#[repr(C, align(4))]
pub struct RawTicketLock<R = Spin> {
    /// `owner | next << 16`.
    word: AtomicU32,
    relax: PhantomData<R>,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
}

impl<R> RawTicketLock<R> {
    const_fn! {
        fn with_map(dep_map: Map) -> Self {
            Self { word: AtomicU32::new(0), relax: PhantomData, dep_map }
        }
    }

    /// `(owner, next)` now (a snapshot).
    #[inline]
    fn tickets(&self) -> (u32, u32) {
        let word = self.word.load(Ordering::Relaxed);
        (owner_of(word), next_of(word))
    }

    /// [`try_lock`](Self::try_lock) without telling lockdep (for locks
    /// that record at their own level: `BrLock`, `SeqLock`, `LockRef`).
    #[inline]
    pub(crate) fn try_lock_untracked(&self) -> bool {
        // Read first, so that a held lock costs no exclusive access to its
        // line (the exchange below would fail anyway). Relaxed: only the
        // exchange's outcome counts.
        let word = self.word.load(Ordering::Relaxed);
        if owner_of(word) != next_of(word) {
            return false;
        }
        // One compare-exchange over the whole word: it succeeds only if
        // the lock is free at that instant, with the same (owner, next)
        // as read. (A compare of `next` alone would succeed after a ticket
        // wrap with the lock held.) Acquire pairs with the Release RMW in
        // `unlock`: the previous critical section happens-before ours.
        self.word
            .compare_exchange(
                word,
                word.wrapping_add(NEXT_ONE),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Whether the lock is held. A snapshot, stale the moment it returns: do
    /// not use it for synchronization.
    #[inline]
    pub fn is_locked(&self) -> bool {
        let (owner, next) = self.tickets();
        owner != next
    }

    /// Whether other CPUs wait for the lock (a snapshot, like
    /// [`is_locked`](Self::is_locked)).
    #[doc(alias = "arch_spin_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        let (owner, next) = self.tickets();
        (next.wrapping_sub(owner) & TICKET_MASK) > 1
    }

    /// [`unlock`](Self::unlock) without telling lockdep.
    ///
    /// # Safety
    /// As for [`unlock`](Self::unlock).
    #[inline]
    pub(crate) unsafe fn unlock_untracked(&self) {
        // Relaxed: only the holder (this CPU) writes `owner`.
        let word = self.word.load(Ordering::Relaxed);
        let owner = owner_of(word);
        debug_assert!(
            owner != next_of(word),
            "unlock of a ticket lock that is not held"
        );
        // Serve the next ticket with one RMW that cannot carry into `next`
        // (a plain store of the word would lose a concurrent `fetch_add`).
        // Release pairs with the Acquire loads in `lock` and the Acquire
        // compare-exchange in `try_lock`.
        if owner == TICKET_MASK {
            self.word.fetch_sub(TICKET_MASK, Ordering::Release);
        } else {
            self.word.fetch_add(1, Ordering::Release);
        }
        // In every mode: a test-and-set waiter from before a mode switch
        // may be halted (the `SpinWait` contract).
        kick_waiters();
    }
}

impl<R: RelaxStrategy> RawTicketLock<R> {
    /// [`lock`](Self::lock) without telling lockdep.
    #[inline]
    pub(crate) fn lock_untracked(&self) {
        if vcpu_preemptible() {
            return self.lock_preemptible_untracked();
        }
        // Acquire pairs with the Release RMW in `unlock`: when the word we
        // replaced already serves our ticket (the lock was free), the
        // previous critical section happens-before ours without a second
        // load.
        let old = self.word.fetch_add(NEXT_ONE, Ordering::Acquire);
        let ticket = next_of(old);
        if owner_of(old) == ticket {
            return;
        }
        // Acquire pairs with the Release RMW in `unlock`.
        while owner_of(self.word.load(Ordering::Acquire)) != ticket {
            relax::<R>();
        }
    }

    /// Takes the lock without a ticket: waits (read-only, with bounded
    /// exponential backoff, giving the CPU away now and then through the
    /// kernel's [`SpinWait`](crate::kernel::SpinWait)) until it looks free,
    /// then tries [`try_lock`](Self::try_lock). A waiter that is
    /// descheduled holds no place in a queue, so the lock never waits for
    /// it: fairness is traded for progress, as Linux's `virt_spin_lock`
    /// does in guests. Used by [`lock`](Self::lock) when
    /// [`vcpu_preemptible`] is set; a lock may be taken both ways at once
    /// (a test-and-set taker only succeeds when no ticket is outstanding).
    #[doc(alias = "virt_spin_lock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lock_preemptible(&self) {
        self.dep_map.acquire(0, false, false);
        self.lock_preemptible_untracked();
    }

    /// The uncontended case inline, waiting out of line.
    #[inline]
    fn lock_preemptible_untracked(&self) {
        if !self.try_lock_untracked() {
            self.lock_preemptible_slow();
        }
    }

    #[inline(never)]
    fn lock_preemptible_slow(&self) {
        let mut backoff = Backoff::new();
        // `try_lock` reads before it writes: waiting is read-only.
        while !self.try_lock_untracked() {
            backoff.backoff::<R>();
        }
    }
}

impl<R> fmt::Debug for RawTicketLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (owner, next) = self.tickets();
        f.debug_struct("RawTicketLock")
            .field("owner", &owner)
            .field("next", &next)
            .finish()
    }
}

// ---- IRQ saving -------------------------------------------------------------

pub use crate::kernel::irq::{ArchIrq, IrqControl, IrqState, KernelIrq};

/// Adapter that saves and disables local interrupts *before* spinning on
/// the inner lock `L`, and restores the saved state after unlocking.
///
/// The holder's saved state is kept in the lock while it is held (a
/// word beside the inner lock; `lock_api` 0.4's guards carry no state):
/// written after the inner lock is taken, read back before it is released,
/// so each holder restores exactly what it saved.
///
/// ```
/// use ksync::spinlock::IrqTicketMutex;
///
/// // Shared with a timer interrupt handler.
/// static TICKS: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
///
/// *TICKS.lock() += 1; // interrupts off from before the spin to the drop
/// assert_eq!(*TICKS.lock(), 1);
/// ```
///
/// `I` is how interrupts are masked ([`KernelIrq`]: the kernel's hooks;
/// [`ArchIrq`]: the architecture's instructions, no hooks needed).
#[doc(alias = "spin_lock_irqsave")]
pub struct RawIrqSave<L, I: IrqControl = KernelIrq> {
    inner: L,
    /// The interrupt state the holder saved before it took `inner`:
    /// written after taking it, read before releasing it, by the holder
    /// only (`lock_api` 0.4's guards carry no state, so it is kept here,
    /// one per lock, as in a `spin_lock_irqsave` caller's `flags`).
    #[cfg_attr(
        loom,
        allow(dead_code, reason = "used by the lock_api impl, which loom lacks")
    )]
    saved: UnsafeCell<MaybeUninit<I::Flags>>,
    irq: PhantomData<I>,
}

// SAFETY: `inner` is shared as `L` allows; `saved` is written and read
// only by the context that holds `inner` (see the `RawMutex` impl), so no
// two contexts touch it at once, and the flags are plain `Copy` data.
unsafe impl<L: Sync, I: IrqControl> Sync for RawIrqSave<L, I> {}
// SAFETY: moving the lock moves a state that nobody holds (a held lock is
// borrowed, so it cannot move).
unsafe impl<L: Send, I: IrqControl> Send for RawIrqSave<L, I> {}

impl<L> RawIrqSave<L> {
    /// Wraps `inner`, masking through the kernel's hooks.
    pub const fn new(inner: L) -> Self {
        Self::with_irq(inner)
    }
}

impl<L, I: IrqControl> RawIrqSave<L, I> {
    /// Wraps `inner`, masking with `I` (name it:
    /// `RawIrqSave::<_, ArchIrq>::with_irq(lock)`).
    pub const fn with_irq(inner: L) -> Self {
        Self {
            inner,
            saved: UnsafeCell::new(MaybeUninit::uninit()),
            irq: PhantomData,
        }
    }

    /// The lock inside, which masks nothing: for code that knows
    /// interrupts are already off (Linux's plain `spin_lock` on an
    /// IRQ-safe lock inside an interrupt handler).
    #[inline]
    pub const fn inner(&self) -> &L {
        &self.inner
    }

    /// Keeps the state the new holder saved.
    ///
    /// # Safety
    /// The caller holds `inner` and took it after saving `irq`.
    #[cfg(not(loom))]
    #[inline]
    unsafe fn keep(&self, irq: IrqState<I>) {
        // SAFETY: only the holder touches `saved` (caller contract).
        unsafe { (*self.saved.get()).write(irq.into_flags()) };
    }

    /// The state the holder saved, to restore after the unlock.
    ///
    /// # Safety
    /// The caller holds `inner`, taken through `lock` or `try_lock` (which
    /// kept a state).
    #[cfg(not(loom))]
    #[inline]
    unsafe fn take(&self) -> IrqState<I> {
        // SAFETY: only the holder touches `saved`, which `keep` initialised
        // when this holder took the lock (caller contract); the flags were
        // saved on this CPU (the guard is `!Send`).
        unsafe { IrqState::from_flags((*self.saved.get()).assume_init()) }
    }
}

impl<L: Default, I: IrqControl> Default for RawIrqSave<L, I> {
    fn default() -> Self {
        Self::with_irq(L::default())
    }
}

impl<L: fmt::Debug, I: IrqControl> fmt::Debug for RawIrqSave<L, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawIrqSave")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

// ---- lock_api ---------------------------------------------------------------

/// The entry points every raw lock here has in the same shape, around its
/// own `with_map`, `lock_untracked`, `try_lock_untracked` and
/// `unlock_untracked`: the constructors (`new`, `with_class`,
/// `with_relax`, `Default`), `set_lock_class`, and `lock`, `lock_nested`,
/// `try_lock` and `unlock`, which tell lockdep. One definition for the
/// ticket, TTAS and queued locks; the invocation gives each lock's own
/// docs for `lock`, `try_lock` and `unlock`.
macro_rules! impl_lock_entry_points {
    (
        $lock:ident, $name:literal,
        lock: { $(#[$lock_attr:meta])* },
        try_lock: { $(#[$try_attr:meta])* },
        unlock: { $(#[$unlock_attr:meta])* } $(,)?
    ) => {
        impl $lock {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " that spins with [`Spin`](crate::spinlock::Spin).")]
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn new() -> Self {
                    Self::with_relax()
                }
            }

            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " in `key`'s [lockdep](crate::lockdep)")]
                /// class (Linux's `lockdep_set_class`); exactly `new`
                /// without `lockdep`. `const`, for a `lock_api` mutex in a
                /// `static`: `TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("runqueue")), 0)`.
                #[doc(alias = "lockdep_set_class")]
                pub fn with_class(key: &'static $crate::lockdep::LockClassKey) -> Self {
                    Self::with_map($crate::lockdep::Map::with_key(key))
                }
            }
        }

        impl<R> $lock<R> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " with the relax strategy `R` (name")]
                #[doc = concat!("it: `", stringify!($lock), "::<Loop>::with_relax()`).")]
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn with_relax() -> Self {
                    Self::with_map($crate::lockdep::Map::new())
                }
            }

            /// Puts the lock in `key`'s [lockdep](crate::lockdep) class instead of
            /// the class of the place it was built. Does nothing without `lockdep`.
            #[doc(alias = "lockdep_set_class")]
            #[inline]
            pub fn set_lock_class(&mut self, key: &'static $crate::lockdep::LockClassKey) {
                self.dep_map.set_class(key);
            }

            $(#[$try_attr])*
            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            pub fn try_lock(&self) -> bool {
                let locked = self.try_lock_untracked();
                if locked {
                    self.dep_map.acquire(0, true, false);
                }
                locked
            }

            /// Releases the lock.
            ///
            /// # Safety
            /// The lock must be held by the caller's context.
            $(#[$unlock_attr])*
            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            pub unsafe fn unlock(&self) {
                self.dep_map.release();
                // SAFETY: forwarded caller contract.
                unsafe { self.unlock_untracked() }
            }
        }

        impl<R: $crate::spinlock::RelaxStrategy> $lock<R> {
            $(#[$lock_attr])*
            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            pub fn lock(&self) {
                // Recorded before spinning, so a deadlock is reported first.
                self.dep_map.acquire(0, false, false);
                self.lock_untracked();
            }

            /// [`lock`](Self::lock) for deliberate nesting of two locks of one
            /// [lockdep](crate::lockdep) class (Linux's `spin_lock_nested`): the
            /// outer one with `lock`, the inner one with `lock_nested(1)`.
            /// Without `lockdep`, exactly `lock`.
            ///
            /// # Panics
            /// With `lockdep`, if `subclass` is not below
            /// [`MAX_SUBCLASSES`](crate::lockdep::MAX_SUBCLASSES).
            #[doc(alias = "spin_lock_nested")]
            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            pub fn lock_nested(&self, subclass: u8) {
                self.dep_map.acquire(subclass, false, false);
                self.lock_untracked();
            }
        }

        impl<R> Default for $lock<R> {
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn default() -> Self {
                Self::with_relax()
            }
        }
    };
}
pub(crate) use impl_lock_entry_points;

/// `lock_api::RawMutex` for a raw lock whose inherent `lock`, `try_lock`,
/// `unlock` and `is_locked` already do the work and whose `with_map` builds
/// it from a lockdep map: one definition for the ticket, TTAS and queued
/// locks. The caller states why its lock excludes (the impl's `SAFETY`).
macro_rules! impl_raw_mutex {
    ($lock:ident) => {
        #[cfg(not(loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
        // SAFETY: exclusion and Acquire/Release are the inherent methods'
        // (see the invocation's comment); forgetting a guard leaves the lock
        // held, which is safe; a lock cannot unwind.
        unsafe impl<R: RelaxStrategy> lock_api::RawMutex for $lock<R> {
            // No call site to name a class after: with lockdep, each mutex
            // built from `INIT` (`Mutex::new`) is a class of its own.
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = Self::with_map(Map::per_instance());
            type GuardMarker = lock_api::GuardSend;

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn lock(&self) {
                $lock::lock(self)
            }

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn try_lock(&self) -> bool {
                $lock::try_lock(self)
            }

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            unsafe fn unlock(&self) {
                // SAFETY: forwarded caller contract (the lock is held).
                unsafe { $lock::unlock(self) }
            }

            #[inline]
            fn is_locked(&self) -> bool {
                $lock::is_locked(self)
            }
        }
    };
}
pub(crate) use impl_raw_mutex;

impl_lock_entry_points!(
    RawTicketLock, "ticket lock",
    lock: {
        /// Takes a ticket and spins until it is served; when CPUs may be
        /// descheduled while spinning ([`vcpu_preemptible`]), takes the lock
        /// by test-and-set instead (see [`lock_preemptible`](Self::lock_preemptible)).
        #[doc(alias = "arch_spin_lock")]
    },
    try_lock: {
        /// Tries to take the lock without spinning: succeeds only when nobody
        /// holds it or waits for it.
        #[doc(alias = "arch_spin_trylock")]
    },
    unlock: {
        #[doc(alias = "arch_spin_unlock")]
    },
);

// Why it excludes: `lock` returns only once this CPU's ticket is served, and
// `owner` moves on only by the holder's unlock: one holder at a time.
// Acquire/Release as documented on the methods. Forgetting a guard leaves
// the lock held, which is safe; a lock cannot unwind.
impl_raw_mutex!(RawTicketLock);

#[cfg(not(loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: a ticket unlock always hands the lock to the next ticket in FIFO
// order, so the plain unlock already is the fair one.
unsafe impl<R: RelaxStrategy> lock_api::RawMutexFair for RawTicketLock<R> {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawTicketLock::unlock(self) }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn bump(&self) {
        if self.is_contended() {
            // SAFETY: forwarded caller contract; re-locked before return.
            unsafe { RawTicketLock::unlock(self) };
            RawTicketLock::lock(self);
        }
    }
}

#[cfg(not(loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: exclusion, ordering and unwinding are the inner lock's. The
// saved interrupt state is kept in the lock while it is held (only the
// holder writes or reads it) and restored only after the inner unlock;
// the guard is `!Send` (`GuardNoSend`) because the state must be restored
// on the CPU that saved it.
unsafe impl<L: lock_api::RawMutex, I: IrqControl> lock_api::RawMutex for RawIrqSave<L, I> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::with_irq(L::INIT);
    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) {
        // Interrupts off before spinning: a handler on this CPU must not
        // find the lock held by the code it interrupted.
        let irq = IrqState::<I>::save_with();
        self.inner.lock();
        // SAFETY: the lock is held by this context.
        unsafe { self.keep(irq) };
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> bool {
        let irq = IrqState::<I>::save_with();
        if !self.inner.try_lock() {
            // `irq` drops here and restores the state.
            return false;
        }
        // SAFETY: the lock is held by this context.
        unsafe { self.keep(irq) };
        true
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock, so the state it saved is there.
        let irq = unsafe { self.take() };
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.unlock() };
        // Restore only once the lock is free.
        drop(irq);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

#[cfg(not(loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: as for `RawMutex` above, with the inner lock's fair unlock.
unsafe impl<L: lock_api::RawMutexFair, I: IrqControl> lock_api::RawMutexFair for RawIrqSave<L, I> {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self) {
        // SAFETY: as in `unlock`.
        let irq = unsafe { self.take() };
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.unlock_fair() };
        drop(irq);
    }
}

#[cfg(feature = "defmt")]
impl<R> defmt::Format for RawTicketLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "RawTicketLock {{ owner: {}, next: {} }}",
            self.tickets().0,
            self.tickets().1
        )
    }
}

// ---- crate-internal IRQ-saving guard ----------------------------------------

/// A [`RawTicketLock`] held by the crate's own code, released when the
/// guard drops: the RAII form of `lock`/`unlock` pairs inside the crate.
///
/// `I` is the saved interrupt state ([`IrqState`], from [`lock_irqsave`])
/// or `()` (from [`try_lock`]). Fields drop after [`Drop::drop`], so the
/// lock is free before interrupts are restored.
///
/// # Invariants
/// `lock` is held, taken by the function that built the guard, and is
/// released only by this guard's `Drop`.
#[must_use = "dropping the guard unlocks at once"]
pub(crate) struct LockGuard<'a, I = ()> {
    lock: &'a RawTicketLock,
    _irq: I,
}

/// Saves and masks local interrupts, then takes `lock`; the guard unlocks,
/// then restores the interrupt state (`spin_lock_irqsave` /
/// `spin_unlock_irqrestore`).
#[inline]
#[cfg_attr(feature = "lockdep", track_caller)]
pub(crate) fn lock_irqsave(lock: &RawTicketLock) -> LockGuard<'_, IrqState> {
    // Interrupts off before spinning: a handler on this CPU must not find
    // the lock held by the code it interrupted.
    let irq = IrqState::save();
    lock.lock();
    LockGuard { lock, _irq: irq }
}

/// Takes `lock` if nobody holds or waits for it, without touching the
/// interrupt state (for locks that are only ever try-locked, which never
/// spin, or never taken from interrupt handlers).
#[inline]
#[cfg_attr(feature = "lockdep", track_caller)]
pub(crate) fn try_lock(lock: &RawTicketLock) -> Option<LockGuard<'_>> {
    // `then`, not `then_some`: a guard built on failure would unlock a
    // lock that someone else holds when it drops.
    lock.try_lock().then(|| LockGuard { lock, _irq: () })
}

impl<I> Drop for LockGuard<'_, I> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard's invariant: the lock is held, and only this
        // drop releases it.
        unsafe { self.lock.unlock() }
    }
}
