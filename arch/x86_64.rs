//! x86_64 bare metal: local interrupt control.
//!
//! lockref's step needs no assembly here: `compare_exchange` compiles to
//! `lock cmpxchg` and the compiler branches on its ZF result directly, so
//! the portable step in `generic.rs` is already the hand-tuned one.
//!
//! Interrupts: `pushfq; pop` reads RFLAGS, `cli` clears IF. Restoring sets
//! IF again only if it was set (`sti`), rather than `popfq`-ing the whole
//! saved RFLAGS back: that would also rewrite flags (AC, DF, ...) that may
//! have legitimately changed inside the critical section, and `popfq` is
//! slower than a conditional `sti`. Both need CPL 0 (or IOPL 3), which is
//! why this module is used only for `target_os = "none"`.

/// Saved RFLAGS.
pub(crate) type IrqFlags = u64;

/// RFLAGS.IF, the interrupt-enable flag.
const RFLAGS_IF: u64 = 1 << 9;

/// Saves RFLAGS and disables local interrupts.
#[inline(always)]
pub(crate) fn irq_save() -> IrqFlags {
    let flags: u64;
    // SAFETY: reads RFLAGS through the stack and clears IF; touches no
    // memory but the pushed slot. Not `nomem`: it must act as a compiler
    // barrier so accesses that the caller protects do not move before it.
    // Not `preserves_flags`: `cli` changes IF.
    unsafe { core::arch::asm!("pushfq", "pop {}", "cli", out(reg) flags) };
    flags
}

/// Re-enables local interrupts if they were enabled when `flags` was saved.
///
/// # Safety
/// `flags` must come from the matching [`irq_save`] on this CPU, restored in
/// reverse nesting order.
#[inline(always)]
pub(crate) unsafe fn irq_restore(flags: IrqFlags) {
    if flags & RFLAGS_IF != 0 {
        // SAFETY: the caller's `flags` says interrupts were enabled before
        // the matching save. Not `nomem`: a compiler barrier, so protected
        // accesses do not move after it.
        unsafe { core::arch::asm!("sti", options(nostack)) };
    }
}
