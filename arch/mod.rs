//! Per-architecture backends, mounted as `crate::arch`: the only home of
//! `asm!` and of target `cfg`s beyond the atomics shim.
//!
//! Four services are chosen here, each arm with its reason, each list
//! ending in a portable fallback:
//!
//! * **lockref's lockless step** — one attempt at a `Rule`: "if the lock
//!   half of the word is free and the count is in range, add a delta to the
//!   count". The word's layout, the rule and the check belong to
//!   `lockref::word`; a backend supplies the atomic update (the LL/SC block
//!   makes the check in asm, with that module's shifts as operands):
//!   - loom and Miri always take the portable step, which they can check;
//!   - `--cfg ksync_generic` (below) takes it too;
//!   - aarch64 with LSE (`target_feature = "lse"`): `cas`, inlined (core's
//!     atomics call an out-of-line helper on `aarch64-*-linux-gnu`);
//!   - aarch64 without LSE: the whole check-and-update in one LDXR/STXR
//!     `asm!` block (an LL/SC pair must never be split across functions);
//!   - anything else with 64-bit atomics, x86_64 included: core's
//!     `compare_exchange`, which is exactly `lock cmpxchg` on x86_64 (the
//!     compiler already uses its ZF result; hand-written asm bought nothing
//!     measurable, see the README's benchmark notes);
//!   - no 64-bit compare-and-swap: no step; lockref takes its lock.
//! * **local interrupt save/restore**, the default of the kernel's
//!   `Kernel::irq_save`/`irq_restore` hooks and of `ArchIrq`:
//!   - x86_64, aarch64 and riscv64 bare metal (`target_os = "none"`):
//!     `pushfq`/`cli`, `DAIF`, `sstatus.SIE` (per CPU, no shared state);
//!   - everything else (single-core MCUs, hosted builds where `cli` would
//!     fault, Miri): the `critical-section` implementation the final
//!     binary provides (the right tool on one core; a multi-core kernel on
//!     such a target overrides the hooks); loom: nothing to mask.
//! * **hypervisor detection**, the default of `kernel::vcpu_preemptible`:
//!   CPUID's hypervisor bit on x86_64, nothing elsewhere.
//! * **the stall clock**, with which a FIFO lock waiter measures how long
//!   it has seen no hand-off (`kernel::spin`'s stall watch), and its rate
//!   where the architecture states it (the kernel may state it instead,
//!   `kernel::set_stall_clock_rate`; nothing is assumed):
//!   - loom and Miri: none (the watch is not modelled);
//!   - x86_64: `rdtsc`, its rate from CPUID (leaf 0x15, 0x16, or the
//!     hypervisor's 0x40000010) where present;
//!   - aarch64: `cntvct_el0`, its rate from `cntfrq_el0`;
//!   - riscv64 bare metal: `rdtime` (the `time` CSR; its rate is in the
//!     device tree only: none here);
//!   - everything else: none; the watch counts its spin rounds instead.
//! * **per-CPU local add** — add to this CPU's slot of a per-CPU counter
//!   (`local_add` on an `i32`), atomic with respect to interrupts on this
//!   CPU (only this CPU writes the slot, so no cross-CPU atomicity is
//!   needed):
//!   - loom, Miri and `--cfg ksync_generic`: the portable `fetch_add`;
//!   - x86_64: a plain `add` to memory, one instruction, no `lock` prefix;
//!   - aarch64 with LSE: `stadd`;
//!   - everything else: a Relaxed `fetch_add` on the slot, an atomic
//!     read-modify-write and so interrupt-atomic with no masking (riscv64:
//!     one `amoadd.w`; aarch64 without LSE: an LL/SC loop; loom sees the
//!     real interleavings).
//!
//! The portable module is compiled under `cfg(test)` on every arch, so the
//! fallback is exercised by the unit tests on x86_64 and aarch64 too.
//!
//! **`--cfg ksync_generic`** (in `RUSTFLAGS`) switches the two fallback
//! questions, the lockref step and the local add, to the portable paths on
//! every architecture, so the fallback that riscv64 and the other targets
//! get can be tortured on x86_64's and aarch64's SMP guests too (`cargo
//! xtask test` boots such images: `x86_64-generic`, `aarch64-generic`). It
//! is a test switch, not a tuning knob: the native paths are as fast or
//! faster. Interrupt masking and hypervisor detection are no fallback
//! question (the portable masking is for one core) and stay native.

#![allow(dead_code)]

#[cfg(target_has_atomic = "64")]
use crate::lockref::word::{Attempt, Rule};
#[cfg(target_has_atomic = "64")]
use crate::sync::{AtomicU64, Ordering};

// Always compiled: it is the fallback of both services, and the unit tests
// run its lockref step on every arch (dead code where a native path exists).
pub(crate) mod generic;

#[cfg(all(target_arch = "x86_64", not(any(ksync_loom, miri))))]
mod x86_64;

#[cfg(all(target_arch = "aarch64", not(any(ksync_loom, miri))))]
mod aarch64;

#[cfg(all(
    target_arch = "riscv64",
    target_os = "none",
    not(any(ksync_loom, miri))
))]
mod riscv64;

// ---- lockref step -------------------------------------------------------

// First match wins (written as `#[cfg]`s rather than `cfg_select!`, which
// needs Rust 1.95):
// 1. loom and Miri run no `asm!`; they check the portable step;
// 2. `--cfg ksync_generic`: the portable step everywhere, to torture it
//    under SMP;
// 3. aarch64: LL/SC must be one asm block; LSE `cas` avoids core's
//    outlined helper;
// 4. x86_64 and the rest: `compare_exchange` (`lock cmpxchg` on x86_64);
// 5. no 64-bit CAS: no lockless step (lockref takes its lock every time).
#[cfg(all(
    target_arch = "aarch64",
    not(any(ksync_loom, miri, all(ksync_generic, target_has_atomic = "64")))
))]
pub(crate) use aarch64::{STEP_LOADS_WORD, lockref_attempt};
#[cfg(any(
    ksync_loom,
    miri,
    all(ksync_generic, target_has_atomic = "64"),
    all(target_has_atomic = "64", not(target_arch = "aarch64"))
))]
pub(crate) use generic::{STEP_LOADS_WORD, lockref_attempt};

// ---- local interrupt control -------------------------------------------

// First match wins:
// 1. loom models no interrupts; Miri runs no `asm!`: `critical-section`;
// 2. x86_64: ring 0 may `cli` (a hosted build would fault, hence `none`);
// 3. aarch64: EL1 may write `DAIF`;
// 4. riscv64: S-mode (what OpenSBI enters) owns `sstatus.SIE`;
// 5. single-core MCUs, hosted builds: `critical-section`.
#[cfg(all(
    target_arch = "aarch64",
    target_os = "none",
    not(any(ksync_loom, miri))
))]
pub(crate) use aarch64::{IrqFlags, irq_restore, irq_save};
#[cfg(any(
    ksync_loom,
    miri,
    not(all(
        target_os = "none",
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        )
    ))
))]
pub(crate) use generic::{IrqFlags, irq_restore, irq_save};
#[cfg(all(
    target_arch = "riscv64",
    target_os = "none",
    not(any(ksync_loom, miri))
))]
pub(crate) use riscv64::{IrqFlags, irq_restore, irq_save};
#[cfg(all(target_arch = "x86_64", target_os = "none", not(any(ksync_loom, miri))))]
pub(crate) use x86_64::{IrqFlags, irq_restore, irq_save};

/// What the kernel's `usize` interrupt hook needs to know of a backend's
/// saved state: the native paths save a machine word (RFLAGS, DAIF,
/// sstatus) that the hook carries as it is; `critical-section`'s opaque
/// state is not one, and the default hook keeps it on a per-CPU stack
/// (`kernel::irq`).
pub(crate) trait IrqWord: Copy {
    /// Whether the state is a word ([`into_word`](IrqWord::into_word) and
    /// [`from_word`](IrqWord::from_word) are only called if so).
    const IS_WORD: bool;
    /// A placeholder, for storage written before it is read.
    const EMPTY: Self;
    /// The state as a word.
    fn into_word(self) -> usize;
    /// The state back from [`into_word`](IrqWord::into_word).
    fn from_word(word: usize) -> Self;
}

macro_rules! word_states {
    ($($ty:ty),*) => {$(
        impl IrqWord for $ty {
            const IS_WORD: bool = true;
            const EMPTY: Self = 0;
            #[inline(always)]
            fn into_word(self) -> usize {
                self as usize
            }
            #[inline(always)]
            fn from_word(word: usize) -> Self {
                word as $ty
            }
        }
    )*};
}
word_states!(u64, usize);

// ---- hypervisor detection ---------------------------------------------------

// - x86_64: CPUID's hypervisor bit (any privilege level);
#[cfg(all(target_arch = "x86_64", not(any(ksync_loom, miri))))]
pub(crate) use x86_64::hypervisor_present;
// - elsewhere nothing reliable to read: the kernel says so itself.
#[cfg(not(all(target_arch = "x86_64", not(any(ksync_loom, miri)))))]
pub(crate) use generic::hypervisor_present;

// ---- the stall clock ---------------------------------------------------------

// First match wins (each backend: `stall_clock() -> Option<now>`, `None`
// where there is no counter, and `stall_clock_rate() -> Option<ticks per
// ms>`, `None` where the architecture does not state it):
// 1. loom and Miri run no `asm!` (and the watch is inert under loom);
// 2. x86_64: the TSC, readable at every privilege level;
// 3. aarch64: the virtual counter, which EL1 (and Linux's EL0) may read;
// 4. riscv64 bare metal: the `time` CSR (S-mode reads it; OpenSBI or the
//    `sstc` extension provides it);
// 5. everything else: no counter.
#[cfg(all(target_arch = "aarch64", not(any(ksync_loom, miri))))]
pub(crate) use aarch64::{stall_clock, stall_clock_rate};
#[cfg(not(any(
    all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(ksync_loom, miri))
    ),
    all(
        target_arch = "riscv64",
        target_os = "none",
        not(any(ksync_loom, miri))
    )
)))]
pub(crate) use generic::{stall_clock, stall_clock_rate};
#[cfg(all(
    target_arch = "riscv64",
    target_os = "none",
    not(any(ksync_loom, miri))
))]
pub(crate) use riscv64::{stall_clock, stall_clock_rate};
#[cfg(all(target_arch = "x86_64", not(any(ksync_loom, miri))))]
pub(crate) use x86_64::{stall_clock, stall_clock_rate};

/// Keeps every backend's stall clock the same shape.
const _: fn() -> Option<u64> = stall_clock;
const _: fn() -> Option<u64> = stall_clock_rate;

// ---- per-CPU local add -----------------------------------------------------

// First match wins:
// 1. loom and Miri run no `asm!`; loom sees the `fetch_add`'s
//    interleavings;
// 2. `--cfg ksync_generic`: the portable add everywhere, to torture it
//    under SMP;
// 3. x86_64: a plain `add` to memory, interrupt-atomic as one instruction;
// 4. aarch64 with LSE: `stadd`, one instruction;
// 5. everything else: a Relaxed `fetch_add` (an atomic RMW, so
//    interrupt-atomic).
#[cfg(all(
    target_arch = "aarch64",
    target_feature = "lse",
    not(any(ksync_loom, miri, ksync_generic))
))]
pub(crate) use aarch64::local_add;
#[cfg(not(all(
    not(any(ksync_loom, miri, ksync_generic)),
    any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "lse")
    )
)))]
pub(crate) use generic::local_add;
#[cfg(all(target_arch = "x86_64", not(any(ksync_loom, miri, ksync_generic))))]
pub(crate) use x86_64::local_add;

/// Keeps the signature of every backend's step identical (checked at
/// compile time on every target that has one).
#[cfg(target_has_atomic = "64")]
const _: fn(&AtomicU64, &mut u64, Rule, Ordering) -> Attempt = lockref_attempt;
