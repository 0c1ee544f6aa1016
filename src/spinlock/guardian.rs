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
    fn enter() -> Self::Saved;

    /// Undoes one [`enter`](Self::enter), after the lock is released.
    ///
    /// # Safety
    /// `saved` comes from the matching `enter` on this CPU, and `exit`s
    /// come in the reverse order of their `enter`s.
    unsafe fn exit(saved: Self::Saved);
}

/// Disables nothing (Linux's `arch_spin_lock`): for a scheduler's own
/// code, which manages preemption itself, and for binaries that never
/// call [`set_kernel!`](crate::set_kernel) (the lock calls no hook).
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
}

/// Saves and disables local interrupts, then preemption (Linux's
/// `spin_lock_irqsave`); on release restores the interrupts, then enables
/// preemption (`spin_unlock_irqrestore`). For a lock also taken in
/// interrupt handlers. `I` is how interrupts are masked: [`KernelIrq`]
/// (the kernel's hooks) or [`ArchIrq`] (the CPU's own instructions; then
/// no hook is called at all and preemption is left alone, which masked
/// interrupts already hold off).
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
