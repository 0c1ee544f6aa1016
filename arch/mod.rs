//! Per-architecture backends, mounted as `crate::arch`: the only home of
//! `asm!` and of target `cfg`s beyond the atomics shim.
//!
//! Two services are chosen here, each arm with its reason, each list ending
//! in a portable fallback:
//!
//! * **lockref's lockless step** — one attempt at "if the lock half of the
//!   word is free and the count is in range, add a delta to the count":
//!   - aarch64 with LSE (`target_feature = "lse"`): `cas`, inlined (core's
//!     atomics call an out-of-line helper on `aarch64-*-linux-gnu`);
//!   - aarch64 without LSE: the whole check-and-update in one LDXR/STXR
//!     `asm!` block (an LL/SC pair must never be split across functions);
//!   - anything else with 64-bit atomics, x86_64 included: core's
//!     `compare_exchange`, which is exactly `lock cmpxchg` on x86_64 (the
//!     compiler already uses its ZF result; hand-written asm bought nothing
//!     measurable, see the README's benchmark notes);
//!   - loom and Miri always take the portable step, which they can check.
//! * **local interrupt save/restore** for the IRQ-saving locks:
//!   - x86_64 and aarch64 bare metal (`target_os = "none"`): `pushfq`/`cli`
//!     and `DAIF`;
//!   - everything else (other arches, hosted test builds where `cli` would
//!     fault, loom, Miri): the `critical-section` implementation the final
//!     binary provides.
//!
//! * **per-CPU local add** — add to this CPU's slot of a per-CPU counter,
//!   atomic with respect to interrupts on this CPU (only this CPU writes the
//!   slot, so no cross-CPU atomicity is needed):
//!   - x86_64: a plain `add` to memory, one instruction, no `lock` prefix;
//!   - aarch64 with LSE: `stadd`;
//!   - everything else: interrupts off around a load and a store (loom and
//!     Miri: the load and store alone, they model no interrupts).
//!
//! The portable module is compiled under `cfg(test)` on every arch, so the
//! fallback is exercised by the unit tests on x86_64 and aarch64 too.

#![allow(dead_code)]

#[cfg(target_has_atomic = "64")]
use crate::sync::{AtomicU64, Ordering};

/// The rule of one lockless lockref update: if the lock is free and
/// `lo <= count <= hi`, the count becomes `count + delta`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    pub(crate) lo: i32,
    pub(crate) hi: i32,
    pub(crate) delta: i32,
}

impl Rule {
    /// Whether `count` is in `lo..=hi`, as one unsigned comparison.
    #[inline(always)]
    pub(crate) const fn admits(self, count: i32) -> bool {
        (count.wrapping_sub(self.lo) as u32) <= (self.hi.wrapping_sub(self.lo) as u32)
    }
}

/// The outcome of one lockless attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The update was made; the new count.
    Done(i32),
    /// The lock is free but the count (given) is outside the rule's range.
    Refused(i32),
    /// The lock half is held.
    Locked,
    /// Another CPU changed the word first (or an exclusive store failed).
    Lost,
}

/// Lock half of the lockref word (low 32 bits): owner ticket in bits 0..16,
/// next ticket in bits 16..32; free when they are equal.
#[inline(always)]
pub(crate) const fn lock_is_free(word: u64) -> bool {
    (word as u16) == ((word >> 16) as u16)
}

/// Count half of the lockref word (high 32 bits, signed).
#[inline(always)]
pub(crate) const fn count_of(word: u64) -> i32 {
    (word >> 32) as u32 as i32
}

/// The value to add to a word to add `delta` to its count.
#[inline(always)]
pub(crate) const fn count_delta(delta: i32) -> u64 {
    ((delta as i64) << 32) as u64
}

// Always compiled: it is the fallback of both services, and the unit tests
// run its lockref step on every arch (dead code where a native path exists).
pub(crate) mod generic;

#[cfg(all(target_arch = "x86_64", not(any(loom, miri))))]
mod x86_64;

#[cfg(all(target_arch = "aarch64", not(any(loom, miri))))]
mod aarch64;

#[cfg(all(target_arch = "riscv64", target_os = "none", not(any(loom, miri))))]
mod riscv64;

// ---- lockref step -------------------------------------------------------

#[cfg(all(target_arch = "aarch64", not(any(loom, miri))))]
pub(crate) use aarch64::{STEP_LOADS_WORD, lockref_attempt};

#[cfg(all(
    target_has_atomic = "64",
    any(loom, miri, not(target_arch = "aarch64"))
))]
pub(crate) use generic::{STEP_LOADS_WORD, lockref_attempt};

// ---- local interrupt control -------------------------------------------

// One positive chain, ending in the fallback:
// - x86_64 bare metal: `pushfq`/`cli` (ring 0 may; hosted builds would fault);
#[cfg(all(target_arch = "x86_64", target_os = "none", not(any(loom, miri))))]
pub(crate) use x86_64::{IrqFlags, irq_restore, irq_save};
// - aarch64 bare metal: `DAIF` (EL1 may);
#[cfg(all(target_arch = "aarch64", target_os = "none", not(any(loom, miri))))]
pub(crate) use aarch64::{IrqFlags, irq_restore, irq_save};
// - riscv64 bare metal: `sstatus.SIE` (S-mode, what OpenSBI enters);
#[cfg(all(target_arch = "riscv64", target_os = "none", not(any(loom, miri))))]
pub(crate) use riscv64::{IrqFlags, irq_restore, irq_save};
// - everything else (single-core MCUs, hosted builds, loom, Miri):
//   `critical-section`, the right tool on one core (loom: nothing to mask).
#[cfg(not(all(
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ),
    target_os = "none",
    not(any(loom, miri))
)))]
pub(crate) use generic::{IrqFlags, irq_restore, irq_save};

/// The default of [`Kernel::irq_save`](crate::kernel::Kernel::irq_save):
/// the native instructions as a word, or (no native path) the
/// `critical-section` state kept on a per-CPU stack.
#[inline(always)]
pub(crate) fn kernel_irq_save(cpu_id: fn() -> usize) -> usize {
    #[cfg(all(
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ),
        target_os = "none",
        not(any(loom, miri))
    ))]
    {
        let _ = cpu_id;
        irq_save() as usize
    }
    #[cfg(not(all(
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ),
        target_os = "none",
        not(any(loom, miri))
    )))]
    generic::kernel_irq_save(cpu_id)
}

/// The default of [`Kernel::irq_restore`](crate::kernel::Kernel::irq_restore).
///
/// # Safety
/// `flags` must come from the matching [`kernel_irq_save`] on this CPU, in
/// reverse nesting order.
#[inline(always)]
pub(crate) unsafe fn kernel_irq_restore(cpu_id: fn() -> usize, flags: usize) {
    #[cfg(all(
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ),
        target_os = "none",
        not(any(loom, miri))
    ))]
    {
        let _ = cpu_id;
        // SAFETY: forwarded caller contract; the word is the native flags.
        unsafe { irq_restore(flags as IrqFlags) }
    }
    #[cfg(not(all(
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ),
        target_os = "none",
        not(any(loom, miri))
    )))]
    // SAFETY: forwarded caller contract.
    unsafe {
        generic::kernel_irq_restore(cpu_id, flags)
    }
}

// ---- hypervisor detection ---------------------------------------------------

// - x86_64: CPUID's hypervisor bit (any privilege level);
#[cfg(all(target_arch = "x86_64", not(any(loom, miri))))]
pub(crate) use x86_64::hypervisor_present;
// - elsewhere nothing reliable to read: the kernel says so itself.
#[cfg(not(all(target_arch = "x86_64", not(any(loom, miri)))))]
pub(crate) use generic::hypervisor_present;

// ---- per-CPU local add -----------------------------------------------------

#[cfg(all(target_arch = "x86_64", not(any(loom, miri))))]
pub(crate) use x86_64::local_add;

#[cfg(all(target_arch = "aarch64", target_feature = "lse", not(any(loom, miri))))]
pub(crate) use aarch64::local_add;

#[cfg(not(all(
    any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "lse")
    ),
    not(any(loom, miri))
)))]
pub(crate) use generic::local_add;

/// Keeps the signature of every backend's step identical (checked at
/// compile time on every target that has one).
#[cfg(target_has_atomic = "64")]
const _: fn(&AtomicU64, &mut u64, Rule, Ordering) -> Attempt = lockref_attempt;
