//! riscv64: local interrupt control in S-mode (bare metal).
//!
//! `sstatus.SIE` (bit 1) enables supervisor interrupts on this hart. Saving
//! is one `csrrci`, which reads `sstatus` and clears SIE in the same
//! instruction, so no interrupt can slip in between the read and the
//! clear. Restoring sets SIE again only if it was set (`csrsi`), rather
//! than writing the whole saved `sstatus` back: that would also undo
//! changes to other fields (SUM, FS) made inside the critical section.
//! Both are per-hart: no lock is shared between harts.
//!
//! lockref's step and the per-CPU local add use the portable code: core's
//! 64-bit `compare_exchange` is an LR/SC loop the compiler emits, and a
//! relaxed `fetch_add` on a CPU's own slot is one `amoadd.w`.
//!
//! The stall clock is the `time` CSR (`rdtime`), which S-mode may read
//! (OpenSBI delegates it or emulates it; with `sstc` it is direct). Its
//! rate is the device tree's `timebase-frequency`, which the library
//! cannot read and does not guess (boards run it at 1-24 MHz, QEMU `virt`
//! at 10 MHz): the kernel states it with
//! `kernel::set_stall_clock_rate`; until it does, the stall watch counts
//! spin rounds.

/// Saved `sstatus`.
pub(crate) type IrqFlags = usize;

/// `sstatus.SIE`.
const SSTATUS_SIE: usize = 1 << 1;

/// Saves `sstatus` and disables supervisor interrupts on this hart.
#[inline(always)]
pub(crate) fn irq_save() -> IrqFlags {
    let flags: usize;
    // SAFETY: reads `sstatus` and clears SIE atomically; touches no
    // memory. Not `nomem`: it must be a compiler barrier so protected
    // accesses do not move before it.
    unsafe {
        core::arch::asm!("csrrci {}, sstatus, {sie}", out(reg) flags, sie = const SSTATUS_SIE, options(nostack))
    };
    flags
}

/// Re-enables supervisor interrupts if they were enabled when `flags` was
/// saved.
///
/// # Safety
/// `flags` must come from the matching [`irq_save`] on this hart, restored
/// in reverse nesting order.
#[inline(always)]
pub(crate) unsafe fn irq_restore(flags: IrqFlags) {
    if flags & SSTATUS_SIE != 0 {
        // SAFETY: the caller's `flags` says interrupts were enabled before
        // the matching save. Not `nomem`: a compiler barrier, so protected
        // accesses do not move after it.
        unsafe {
            core::arch::asm!("csrsi sstatus, {sie}", sie = const SSTATUS_SIE, options(nostack))
        };
    }
}

/// The stall clock: the `time` CSR now.
#[inline]
pub(crate) fn stall_clock() -> Option<u64> {
    let now: u64;
    // SAFETY: reads the `time` CSR, which S-mode may read; no memory, no
    // flags (riscv has none).
    unsafe {
        core::arch::asm!("rdtime {}", out(reg) now, options(nomem, nostack, preserves_flags))
    };
    Some(now)
}

/// The `time` CSR's rate is the device tree's, unknown here (the kernel
/// states it: see the module docs).
pub(crate) fn stall_clock_rate() -> Option<u64> {
    None
}
