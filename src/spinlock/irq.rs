//! The IRQ-saving adapter: any raw lock, taken with local interrupts saved
//! and masked first (its items are re-exported by `spinlock`).

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

pub use crate::kernel::irq::{ArchIrq, IrqControl, IrqState, KernelIrq};

/// Adapter that saves and disables local interrupts *before* spinning on
/// the inner lock `L`, and restores the saved state after unlocking.
///
/// The holder's saved state is kept in the lock while it is held (a
/// word beside the inner lock; `lock_api` 0.4's guards carry no state):
/// written after the inner lock is taken, read back before it is released,
/// so each holder restores exactly what it saved.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
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
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked `RawIrqSave<L, I>` whenever they are
/// a valid `L` (every lock of this crate): the saved flags are
/// `MaybeUninit`, written by each holder before they are read, and `I` has
/// no bytes here. So the IRQ-saving mutexes in zero-filled memory are
/// unlocked too (see [`spinlock`](super#zeroed-memory)).
#[doc(alias = "spin_lock_irqsave")]
pub struct RawIrqSave<L, I: IrqControl = KernelIrq> {
    inner: L,
    /// The interrupt state the holder saved before it took `inner`:
    /// written after taking it, read before releasing it, by the holder
    /// only (`lock_api` 0.4's guards carry no state, so it is kept here,
    /// one per lock, as in a `spin_lock_irqsave` caller's `flags`).
    #[cfg_attr(
        ksync_loom,
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
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lock_api::Mutex;
    /// use ksync::spinlock::{RawIrqSave, RawTtasLock};
    ///
    /// // Any raw lock becomes `spin_lock_irqsave`-safe: here a TTAS lock.
    /// type IrqTtas<T> = Mutex<RawIrqSave<RawTtasLock>, T>;
    /// let events: IrqTtas<u32> = Mutex::from_raw(RawIrqSave::new(RawTtasLock::new()), 0);
    /// *events.lock() += 1;
    /// ```
    pub const fn new(inner: L) -> Self {
        Self::with_irq(inner)
    }
}

impl<L, I: IrqControl> RawIrqSave<L, I> {
    /// Wraps `inner`, masking with `I` (name it:
    /// `RawIrqSave::<_, ArchIrq>::with_irq(lock)`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::ArchIrq;
    /// use ksync::lock_api::Mutex;
    /// use ksync::spinlock::{NoGuard, RawIrqSave, RawTicketLock, Spin};
    ///
    /// // Firmware without `set_kernel!`: mask with the CPU's instructions
    /// // around a lock that calls no hook.
    /// let raw = RawIrqSave::<_, ArchIrq>::with_irq(RawTicketLock::<Spin, NoGuard>::with_relax());
    /// let uart_tx = Mutex::from_raw(raw, Vec::<u8>::new());
    /// uart_tx.lock().push(b'!');
    /// ```
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
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lock_api::Mutex;
    /// use ksync::spinlock::{RawIrqSave, RawTicketLock};
    ///
    /// let timers = Mutex::from_raw(RawIrqSave::new(RawTicketLock::new()), 0u32);
    /// // Inside the timer interrupt handler, interrupts are already off: take
    /// // the inner lock only (Linux's plain `spin_lock` there).
    /// ksync::host::enter_interrupt();
    /// // SAFETY: only the raw lock is used, and released just below.
    /// let raw = unsafe { timers.raw() }.inner();
    /// raw.lock();
    /// // SAFETY: taken just above by this context.
    /// unsafe { raw.unlock() };
    /// ksync::host::exit_interrupt();
    /// ```
    #[inline]
    pub const fn inner(&self) -> &L {
        &self.inner
    }

    /// Keeps the state the new holder saved.
    ///
    /// # Safety
    /// The caller holds `inner` and took it after saving `irq`.
    #[cfg(not(ksync_loom))]
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
    #[cfg(not(ksync_loom))]
    #[inline]
    unsafe fn take(&self) -> IrqState<I> {
        // SAFETY: only the holder touches `saved`, which `keep` initialised
        // when this holder took the lock (caller contract); the flags were
        // saved on this CPU (the guard is `!Send`).
        unsafe { IrqState::from_flags((*self.saved.get()).assume_init()) }
    }
}

#[cfg(not(ksync_loom))]
impl<L, I: IrqControl> RawIrqSave<L, I> {
    /// Releases the held lock with `unlock` (the inner lock's plain or fair
    /// unlock), then restores the interrupt state its holder saved.
    ///
    /// The inner lock's unlock may end with `preempt_enable` (a
    /// [`PreemptDisabled`](super::PreemptDisabled) lock), a preemption
    /// point that must not run with interrupts still masked
    /// (`spin_unlock_irqrestore` restores interrupts first). Through the
    /// kernel's hooks ([`KernelIrq`]) the adapter holds preemption off
    /// across the inner unlock and the restore, so the point comes after
    /// the restore: two more hook calls than the [`IrqDisabled`] policy,
    /// which does the same in one place (and which the `Irq*Mutex` aliases
    /// use). With other maskings ([`ArchIrq`]: no hooks) the inner lock's
    /// `preempt_enable`, if it has one, runs before the restore: pair
    /// those with a [`NoGuard`](super::NoGuard) inner lock, as the
    /// `ArchIrq` forms of this crate do.
    ///
    /// [`IrqDisabled`]: super::IrqDisabled
    ///
    /// # Safety
    /// The caller holds the lock, taken through `lock` or `try_lock`; as
    /// for `unlock`.
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn release(&self, unlock: impl FnOnce(&L)) {
        // SAFETY: the caller holds the lock, so the state it saved is there.
        let irq = unsafe { self.take() };
        if I::KERNEL_HOOKS {
            crate::kernel::preempt_disable_hook();
        }
        unlock(&self.inner);
        // Restore only once the lock is free.
        drop(irq);
        if I::KERNEL_HOOKS {
            // The preemption point, with interrupts as the holder found
            // them.
            crate::kernel::preempt_enable_hook();
        }
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

#[cfg(not(ksync_loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
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
        if I::KERNEL_HOOKS {
            // As in `release`: the inner lock's failed attempt enables
            // preemption again, which must not happen with interrupts
            // still masked by us (a lost preemption point).
            crate::kernel::preempt_disable_hook();
        }
        let taken = self.inner.try_lock();
        if I::KERNEL_HOOKS && taken {
            // Held: the inner lock's own count keeps preemption off.
            crate::kernel::preempt_enable_hook();
        }
        if !taken {
            // Interrupts first, then the preemption point.
            drop(irq);
            if I::KERNEL_HOOKS {
                crate::kernel::preempt_enable_hook();
            }
            return false;
        }
        // SAFETY: the lock is held by this context.
        unsafe { self.keep(irq) };
        true
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { self.release(|inner| inner.unlock()) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

#[cfg(not(ksync_loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: as for `RawMutex` above, with the inner lock's fair unlock.
unsafe impl<L: lock_api::RawMutexFair, I: IrqControl> lock_api::RawMutexFair for RawIrqSave<L, I> {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { self.release(|inner| inner.unlock_fair()) }
    }
}
