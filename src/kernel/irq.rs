//! Local interrupt masking: a kernel service, never a machine-wide lock.
//!
//! A spinlock that an interrupt handler may take must be held with local
//! interrupts disabled, and ksync's own per-CPU machinery (the per-CPU
//! counter's fold, the RCU callback lists, the grace-period engine) masks
//! them the same way. What "disable interrupts on this CPU" means is the
//! kernel's business, so it is a hook of [`Kernel`](super::Kernel):
//! [`Kernel::irq_save`](super::Kernel::irq_save) and
//! [`Kernel::irq_restore`](super::Kernel::irq_restore), whose defaults are
//! the architecture's own instructions:
//!
//! | target | default | shared between CPUs? |
//! |---|---|---|
//! | x86_64 bare metal | `pushfq; cli`, conditional `sti` | no |
//! | aarch64 bare metal | `DAIF` (`mrs`, `msr daifset`) | no |
//! | riscv64 bare metal | `sstatus.SIE` (`csrrci`, `csrsi`) | no |
//! | anything else | the binary's `critical-section` implementation | on multi-core, yes: implement the hooks |
//! | host tests (`test-hooks`) | a per-thread "interrupts off" flag | no |
//!
//! `critical-section` stays where it is the right tool: single-core MCUs
//! (where masking interrupts *is* mutual exclusion) and `portable-atomic`'s
//! small atomics on targets without compare-and-swap. On a multi-core
//! target without a native path, its contract (exclusion across all cores)
//! would serialise the machine; such a kernel overrides the two hooks.
//!
//! # Two ways to mask: [`KernelIrq`] and [`ArchIrq`]
//!
//! [`IrqState`] and the IRQ-saving locks are generic over an
//! [`IrqControl`]: the default, [`KernelIrq`], calls the kernel's hooks
//! (so it needs [`set_kernel!`](crate::set_kernel), like every per-CPU
//! type); [`ArchIrq`] uses the architecture default directly and needs no
//! hooks at all. A binary that never calls `set_kernel!` (firmware that
//! only uses spinlocks, lockref and seqlocks) names it, or uses the
//! `ArchIrq*` lock aliases:
//!
//! ```
//! use ksync::spinlock::ArchIrqTicketMutex;
//!
//! // Masks interrupts with the CPU's instructions (here, on the host, the
//! // critical-section implementation): no `set_kernel!` needed.
//! static TICKS: ArchIrqTicketMutex<u64> = ArchIrqTicketMutex::new(0);
//! *TICKS.lock() += 1;
//! assert_eq!(*TICKS.lock(), 1);
//! ```

use core::fmt;
use core::marker::PhantomData;

use crate::arch;

/// A way to save and disable local interrupts, and restore them.
///
/// # Safety
/// Between [`save`](IrqControl::save) and the matching
/// [`restore`](IrqControl::restore), interrupt handlers that take
/// IRQ-saving locks do not run on this CPU, and the calling context stays
/// on it. `restore` re-establishes the state before the matching `save`.
pub unsafe trait IrqControl {
    /// The saved state.
    type Flags: Copy;

    /// Saves the local interrupt state and disables interrupts.
    fn save() -> Self::Flags;

    /// Restores a state saved by [`save`](IrqControl::save).
    ///
    /// # Safety
    /// `flags` comes from the matching `save` on this CPU; saves are
    /// restored in reverse order.
    unsafe fn restore(flags: Self::Flags);
}

/// Interrupt masking through the kernel's hooks
/// ([`Kernel::irq_save`](super::Kernel::irq_save)): the default of
/// [`IrqState`] and the IRQ-saving locks. Needs
/// [`set_kernel!`](crate::set_kernel).
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelIrq;

// SAFETY: forwarded to the kernel's hooks, whose contract (`Kernel`'s
// `# Safety`) is this trait's.
unsafe impl IrqControl for KernelIrq {
    type Flags = usize;

    #[inline]
    fn save() -> usize {
        super::irq_save_hook()
    }

    #[inline]
    unsafe fn restore(flags: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { super::irq_restore_hook(flags) }
    }
}

/// Interrupt masking with the architecture's default (the table in the
/// module docs), without the kernel's hooks: for binaries that never call
/// [`set_kernel!`](crate::set_kernel).
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchIrq;

// SAFETY: the native instructions mask this CPU's interrupts (and the
// caller's privilege level allows them: bare metal only); the
// `critical-section` fallback masks them or excludes all CPUs, as its
// implementation's contract says.
unsafe impl IrqControl for ArchIrq {
    type Flags = arch::IrqFlags;

    #[inline]
    fn save() -> Self::Flags {
        arch::irq_save()
    }

    #[inline]
    unsafe fn restore(flags: Self::Flags) {
        // SAFETY: forwarded caller contract.
        unsafe { arch::irq_restore(flags) }
    }
}

/// Saved local interrupt state, restored when dropped.
///
/// `!Send`: interrupt state belongs to the CPU that saved it.
#[must_use = "dropping the state restores interrupts at once"]
pub struct IrqState<I: IrqControl = KernelIrq> {
    flags: I::Flags,
    not_send: PhantomData<*mut ()>,
}

impl IrqState {
    /// Saves the local interrupt state and disables interrupts on this CPU,
    /// through the kernel's hook ([`KernelIrq`]).
    #[doc(alias = "local_irq_save")]
    #[inline]
    pub fn save() -> Self {
        Self::save_with()
    }
}

impl<I: IrqControl> IrqState<I> {
    /// Saves and disables local interrupts with `I` (for example
    /// `IrqState::<ArchIrq>::save_with()`).
    #[inline]
    pub fn save_with() -> Self {
        Self {
            flags: I::save(),
            not_send: PhantomData,
        }
    }
}

impl<I: IrqControl> Drop for IrqState<I> {
    #[doc(alias = "local_irq_restore")]
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `flags` came from `I::save` on this CPU (the type is not
        // `Send`); nesting order is the documented duty of the user, as
        // for `local_irq_restore`.
        unsafe { I::restore(self.flags) }
    }
}

impl<I: IrqControl> fmt::Debug for IrqState<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IrqState")
    }
}
