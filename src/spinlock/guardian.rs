//! What a spinlock disables while it is held: its guard policy, a type
//! parameter of [`RawSpinlock`](super::RawSpinlock) (its items are
//! re-exported by `spinlock`).

use crate::kernel::irq::{ArchIrq, IrqControl, KernelIrq};

/// What a [`RawSpinlock`](super::RawSpinlock) disables from before it
/// spins until after it is released, as Asterinas's `SpinGuardian` and the
/// Linux call a kernel picks (`arch_spin_lock`, `spin_lock`,
/// `spin_lock_irqsave`):
///
/// | policy | disables | Linux | needs [`set_kernel!`](crate::set_kernel) |
/// |---|---|---|---|
/// | [`NoGuard`] | nothing | `arch_spin_lock` | no |
/// | [`PreemptDisabled`] (the default) | preemption | `spin_lock` | yes |
/// | [`IrqDisabled`] | local interrupts, then preemption | `spin_lock_irqsave` | yes |
/// | [`IrqDisabled<ArchIrq>`](IrqDisabled) | local interrupts, with the CPU's own instructions | `arch_local_irq_save` + `arch_spin_lock` | no |
///
/// A kernel may write its own (say, interrupts and soft interrupts off).
/// The state [`enter`](Self::enter) returns is kept in the lock while it is
/// held and handed to [`exit`](Self::exit) by whoever releases it, so a
/// guard carries nothing and can be passed between functions, or released
/// by the next task after a context switch on the same CPU.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lock_api;
/// use ksync::spinlock::{SpinGuardian, SpinLock};
/// # mod softirq { pub fn local_bh_disable() {} pub fn local_bh_enable() {} }
///
/// /// Linux's `spin_lock_bh`: softirqs off while the lock is held.
/// struct BhDisabled;
///
/// impl SpinGuardian for BhDisabled {
///     type Saved = ();
///     type GuardMarker = lock_api::GuardNoSend; // softirq state is this CPU's
///     const RECORDS_OWNER: bool = false;
///     fn enter() { softirq::local_bh_disable() }
///     unsafe fn exit((): ()) { softirq::local_bh_enable() }
/// }
///
/// // Shared with the network receive softirq.
/// static NEIGH_TABLE: SpinLock<u32, BhDisabled> = SpinLock::new(0);
/// *NEIGH_TABLE.lock() += 1;
/// ```
pub trait SpinGuardian {
    /// What `enter` saves and `exit` restores (`()` when nothing is).
    type Saved: Copy;

    /// `lock_api`'s guard marker: [`lock_api::GuardNoSend`] when the
    /// state belongs to the CPU that saved it (preemption or interrupts
    /// off), [`lock_api::GuardSend`] otherwise.
    type GuardMarker;

    /// Whether the lock may ask [`kernel::cpu_id`](crate::kernel::cpu_id)
    /// for its debug-build owner record (only for policies that need the
    /// kernel's hooks anyway: a [`NoGuard`] lock links without them).
    const RECORDS_OWNER: bool;

    /// Disables what the policy disables, before the lock spins.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{PreemptDisabled, SpinGuardian};
    ///
    /// // What a lock does before it spins, by hand: `preempt_disable()`.
    /// PreemptDisabled::enter();
    /// assert_eq!(ksync::host::preempt_count(), 1);
    /// // SAFETY: undoes the `enter` just above, on this CPU.
    /// unsafe { PreemptDisabled::exit(()) };
    /// ```
    fn enter() -> Self::Saved;

    /// Undoes one [`enter`](Self::enter), after the lock is released.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{IrqDisabled, SpinGuardian};
    ///
    /// let flags = <IrqDisabled>::enter(); // `local_irq_save`, `preempt_disable`
    /// assert!(ksync::host::irqs_disabled());
    /// // SAFETY: `flags` comes from the matching `enter` on this CPU.
    /// unsafe { <IrqDisabled>::exit(flags) }; // restored, then preemption on
    /// assert!(!ksync::host::irqs_disabled());
    /// ```
    ///
    /// # Safety
    /// `saved` comes from the matching `enter` on this CPU, and `exit`s
    /// come in the reverse order of their `enter`s.
    unsafe fn exit(saved: Self::Saved);

    /// [`enter`](Self::enter), and this CPU's id if the policy read it
    /// on the way (ksync's own policies in debug builds, where they count
    /// the preemption disable on that id), so that the lock's debug owner
    /// record does not ask the kernel again. `None` by default. ksync's
    /// locks call it; a kernel has no reason to.
    #[doc(hidden)]
    #[inline]
    fn enter_with_cpu() -> (Self::Saved, Option<usize>) {
        (Self::enter(), None)
    }

    /// [`exit`](Self::exit), given this CPU's id when the lock knows it
    /// (its debug owner record, just checked against this CPU); `None`:
    /// unknown. The default ignores it. ksync's locks call it.
    ///
    /// # Safety
    /// As [`exit`](Self::exit); `cpu`, if given, is this CPU's id.
    #[doc(hidden)]
    #[inline]
    unsafe fn exit_on_cpu(saved: Self::Saved, cpu: Option<usize>) {
        let _ = cpu;
        // SAFETY: forwarded caller contract.
        unsafe { Self::exit(saved) }
    }
}

/// Disables nothing (Linux's `arch_spin_lock`): for a scheduler's own
/// code, which manages preemption itself, and for binaries that never
/// call [`set_kernel!`](crate::set_kernel) (the lock calls no hook).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{NoGuard, SpinLock};
///
/// // A scheduler's own run-queue lock: it manages preemption itself
/// // (Linux's `raw_spin_lock` inside `__schedule`, `arch_spin_lock` below it).
/// static RQ: SpinLock<u32, NoGuard> = SpinLock::new(0);
/// *RQ.lock() += 1;
/// assert_eq!(ksync::host::preempt_count(), 0); // nothing was disabled
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGuard;

impl SpinGuardian for NoGuard {
    type Saved = ();
    type GuardMarker = lock_api::GuardSend;
    const RECORDS_OWNER: bool = false;

    #[inline(always)]
    fn enter() {}

    #[inline(always)]
    unsafe fn exit((): ()) {}
}

/// Disables preemption while held (Linux's `spin_lock`), through
/// [`Kernel::preempt_disable`](crate::kernel::Kernel::preempt_disable) and
/// `preempt_enable`: the holder cannot be switched out, so the CPUs that
/// spin for it wait for running code only. Free (two calls of empty hooks)
/// in a kernel that never preempts. The default policy.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{PreemptDisabled, SpinLock};
///
/// // The default policy (`spin_lock`): what `TicketMutex` is.
/// static INODE_HASH: SpinLock<u32, PreemptDisabled> = SpinLock::new(0);
/// let guard = INODE_HASH.lock();
/// assert_eq!(ksync::host::preempt_count(), 1); // the holder stays on its CPU
/// # drop(guard);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PreemptDisabled;

impl SpinGuardian for PreemptDisabled {
    type Saved = ();
    type GuardMarker = lock_api::GuardNoSend;
    const RECORDS_OWNER: bool = true;

    #[inline]
    fn enter() {
        crate::kernel::preempt_disable_hook();
    }

    #[inline]
    unsafe fn exit((): ()) {
        crate::kernel::preempt_enable_hook();
    }

    #[inline]
    fn enter_with_cpu() -> ((), Option<usize>) {
        ((), crate::kernel::preempt_disable_hook_cpu())
    }

    #[inline]
    unsafe fn exit_on_cpu((): (), cpu: Option<usize>) {
        crate::kernel::preempt_enable_hook_on(cpu);
    }
}

/// Saves and disables local interrupts, then preemption (Linux's
/// `spin_lock_irqsave`); on release restores the interrupts, then enables
/// preemption (`spin_unlock_irqrestore`). For a lock also taken in
/// interrupt handlers. `I` is how interrupts are masked: [`KernelIrq`]
/// (the kernel's hooks) or [`ArchIrq`] (the CPU's own instructions; then
/// no hook is called at all and preemption is left alone, which masked
/// interrupts already hold off).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{IrqDisabled, SpinLock};
///
/// // `spin_lock_irqsave`: a lock the timer interrupt handler also takes.
/// static TIMER_BASE: SpinLock<u64, IrqDisabled> = SpinLock::new(0);
/// let mut jiffies = TIMER_BASE.lock();
/// assert!(ksync::host::irqs_disabled());
/// *jiffies += 1;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct IrqDisabled<I: IrqControl = KernelIrq>(core::marker::PhantomData<I>);

impl SpinGuardian for IrqDisabled<KernelIrq> {
    type Saved = usize;
    type GuardMarker = lock_api::GuardNoSend;
    const RECORDS_OWNER: bool = true;

    #[inline]
    fn enter() -> usize {
        let flags = KernelIrq::save();
        crate::kernel::preempt_disable_hook();
        flags
    }

    #[inline]
    unsafe fn exit(flags: usize) {
        // SAFETY: forwarded caller contract (the matching save).
        unsafe { KernelIrq::restore(flags) };
        crate::kernel::preempt_enable_hook();
    }

    #[inline]
    fn enter_with_cpu() -> (usize, Option<usize>) {
        let flags = KernelIrq::save();
        (flags, crate::kernel::preempt_disable_hook_cpu())
    }

    #[inline]
    unsafe fn exit_on_cpu(flags: usize, cpu: Option<usize>) {
        // SAFETY: forwarded caller contract (the matching save).
        unsafe { KernelIrq::restore(flags) };
        crate::kernel::preempt_enable_hook_on(cpu);
    }
}

impl SpinGuardian for IrqDisabled<ArchIrq> {
    type Saved = <ArchIrq as IrqControl>::Flags;
    type GuardMarker = lock_api::GuardNoSend;
    const RECORDS_OWNER: bool = false;

    #[inline]
    fn enter() -> Self::Saved {
        ArchIrq::save()
    }

    #[inline]
    unsafe fn exit(flags: Self::Saved) {
        // SAFETY: forwarded caller contract (the matching save).
        unsafe { ArchIrq::restore(flags) }
    }
}
