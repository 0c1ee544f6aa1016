//! aarch64: lockref's lockless step and local interrupt control.
//!
//! # lockref
//!
//! ARMv8.0 has only load-exclusive/store-exclusive (LL/SC) pairs; ARMv8.1
//! adds the LSE atomics, among them `cas`. With `target_feature = "lse"`
//! the step checks the word it saw in Rust (`Rule::check`, as the portable
//! step does) and swaps it with one `cas` (`casa` for acquire, `casl` for
//! release). The instructions are written out rather than left to
//! `compare_exchange` because on `aarch64-unknown-linux-gnu` core atomics
//! call an out-of-line helper that picks LL/SC or LSE at run time, a call
//! the lockref fast path should not pay.
//!
//! Without LSE, the whole step — load-exclusive, the lock-free and range
//! checks, the add and the store-exclusive — is one `asm!` block: the
//! architecture allows no memory accesses between an `ldxr` and its `stxr`
//! if progress is to be guaranteed, which a compiler-generated split would
//! not promise. The block makes the same check as `Rule::check`, with the
//! field positions of `lockref::word` as `const` operands. Acquire and
//! release variants use `ldaxr` and `stlxr`.
//!
//! References: Arm ARM (DDI 0487) B2.9 "Synchronization and semaphores"
//! and C6.2 (`LDXR`, `STXR`, `CAS`).
//!
//! # Interrupts
//!
//! `DAIF` holds the mask bits; saving reads it and sets I and F with
//! `msr daifset, #3`; restoring writes the saved value back. Used only on
//! bare metal (`target_os = "none"`), where the kernel runs at EL1.
//!
//! # The stall clock
//!
//! The generic timer's virtual count, `CNTVCT_EL0`, at the rate
//! `CNTFRQ_EL0` states (firmware sets it; 62.5 MHz under QEMU `virt`, 1
//! GHz from Armv8.6). EL1 reads both; Linux lets EL0 read them too, so
//! hosted builds use them as well.

#[cfg(not(target_feature = "lse"))]
use crate::lockref::word as layout;
use crate::lockref::word::{Attempt, Rule};
use crate::sync::{AtomicU64, Ordering};

// ---- LSE: cas ------------------------------------------------------------

#[cfg(target_feature = "lse")]
macro_rules! cas {
    ($name:ident, $insn:literal) => {
        /// Compare-and-swap of the 64-bit word at `ptr`: returns the value
        /// found, which equals `old` exactly when `new` was stored.
        ///
        /// # Safety
        /// `ptr` must be valid for atomic access and 8-byte aligned (the
        /// instruction faults otherwise).
        #[inline(always)]
        unsafe fn $name(ptr: *mut u64, old: u64, new: u64) -> u64 {
            debug_assert!(ptr.is_aligned());
            let mut found = old;
            // SAFETY: the caller guarantees `ptr` is valid and aligned; the
            // instruction reads and writes only that word. `nostack`: no
            // stack use; `preserves_flags`: `cas` does not set NZCV.
            unsafe {
                core::arch::asm!(
                    concat!($insn, " {found}, {new}, [{ptr}]"),
                    found = inout(reg) found,
                    new = in(reg) new,
                    ptr = in(reg) ptr,
                    options(nostack, preserves_flags),
                );
            }
            found
        }
    };
}

#[cfg(target_feature = "lse")]
cas!(cas_relaxed, "cas");
#[cfg(target_feature = "lse")]
cas!(cas_acquire, "casa");
#[cfg(target_feature = "lse")]
cas!(cas_release, "casl");

/// The `cas` step compares against the caller's `seen`.
#[cfg(target_feature = "lse")]
pub(crate) const STEP_LOADS_WORD: bool = false;

/// One lockless lockref attempt with `cas`. Same contract as the portable
/// step in `generic.rs`.
#[cfg(target_feature = "lse")]
#[inline(always)]
pub(crate) fn lockref_attempt(
    word: &AtomicU64,
    seen: &mut u64,
    rule: Rule,
    order: Ordering,
) -> Attempt {
    let old = *seen;
    let update = match rule.check(old) {
        Ok(update) => update,
        Err(outcome) => return outcome,
    };
    let new = update.word;
    let ptr = word.as_ptr();
    // SAFETY: `ptr` points into a live `AtomicU64`, which is 8-byte aligned
    // and only ever accessed atomically.
    let found = unsafe {
        match order {
            Ordering::Relaxed => cas_relaxed(ptr, old, new),
            Ordering::Acquire => cas_acquire(ptr, old, new),
            Ordering::Release => cas_release(ptr, old, new),
            _ => unreachable!("lockref steps are Relaxed, Acquire or Release"),
        }
    };
    if found == old {
        Attempt::Done(update.count)
    } else {
        *seen = found;
        Attempt::Lost
    }
}

// ---- LL/SC: ldxr/stxr ------------------------------------------------------

/// Status codes of the LL/SC block. `DONE` and `LOST` are what `stxr`
/// writes to its status register.
#[cfg(not(target_feature = "lse"))]
mod status {
    pub(super) const DONE: u64 = 0;
    pub(super) const LOST: u64 = 1;
    pub(super) const LOCKED: u64 = 2;
    pub(super) const REFUSED: u64 = 3;
}

// The LL/SC block extracts the owner ticket with a mask, not a shift.
#[cfg(not(target_feature = "lse"))]
const _: () = assert!(layout::OWNER_SHIFT == 0);

#[cfg(not(target_feature = "lse"))]
macro_rules! llsc {
    ($name:ident, $ld:literal, $st:literal) => {
        /// One exclusive-pair attempt: returns a `status` code and the word
        /// that was loaded.
        ///
        /// # Safety
        /// `ptr` must be valid for atomic access and 8-byte aligned (the
        /// exclusive instructions fault otherwise).
        #[inline(always)]
        unsafe fn $name(ptr: *mut u64, lo: i64, span: u64, add: u64) -> (u64, u64) {
            debug_assert!(ptr.is_aligned());
            let status: u64;
            let old: u64;
            // SAFETY: the caller guarantees `ptr` is valid and aligned. The
            // block reads and conditionally writes only that word; between
            // the load- and store-exclusive there are only register
            // operations, as the architecture requires for forward
            // progress. `nostack`: no stack use. Flags are clobbered
            // (`cmp`), so no `preserves_flags`.
            unsafe {
                core::arch::asm!(
                    concat!($ld, " {old}, [{ptr}]"),
                    // Lock half free? owner == next. The owner is the low
                    // ticket (`OWNER_SHIFT` is 0, asserted below), so a
                    // mask extracts it.
                    "ubfx {t1}, {old}, #{next_shift}, #{ticket_bits}",
                    "and  {t2}, {old}, #{ticket_mask}",
                    "cmp  {t1}, {t2}",
                    "b.ne 2f",
                    // Count (the signed high half) within [lo, lo + span]?
                    // One unsigned compare of count - lo against span.
                    "asr  {t1}, {old}, #{count_shift}",
                    "sub  {t1}, {t1}, {lo}",
                    "cmp  {t1}, {span}",
                    "b.hi 3f",
                    "add  {t1}, {old}, {add}",
                    concat!($st, " {st:w}, {t1}, [{ptr}]"),
                    // st = 0 (DONE) on success, 1 (LOST) on failure.
                    "mov  {status}, {st}",
                    "b    4f",
                    "2:",
                    "clrex",
                    "mov  {status}, #{locked}",
                    "b    4f",
                    "3:",
                    "clrex",
                    "mov  {status}, #{refused}",
                    "4:",
                    old = out(reg) old,
                    status = out(reg) status,
                    st = out(reg) _,
                    t1 = out(reg) _,
                    t2 = out(reg) _,
                    ptr = in(reg) ptr,
                    lo = in(reg) lo,
                    span = in(reg) span,
                    add = in(reg) add,
                    next_shift = const layout::NEXT_SHIFT,
                    ticket_bits = const layout::TICKET_BITS,
                    ticket_mask = const layout::TICKET_MASK,
                    count_shift = const layout::COUNT_SHIFT,
                    locked = const status::LOCKED,
                    refused = const status::REFUSED,
                    options(nostack),
                );
            }
            (status, old)
        }
    };
}

#[cfg(not(target_feature = "lse"))]
llsc!(llsc_relaxed, "ldxr", "stxr");
#[cfg(not(target_feature = "lse"))]
llsc!(llsc_acquire, "ldaxr", "stxr");
#[cfg(not(target_feature = "lse"))]
llsc!(llsc_release, "ldxr", "stlxr");

/// The LL/SC step loads the word with its exclusive load: the caller need
/// not load it first.
#[cfg(not(target_feature = "lse"))]
pub(crate) const STEP_LOADS_WORD: bool = true;

/// One lockless lockref attempt with an LL/SC pair. Same contract as the
/// portable step in `generic.rs`; `seen` is only refreshed (the exclusive
/// load reads the word afresh every time).
#[cfg(not(target_feature = "lse"))]
#[inline(always)]
pub(crate) fn lockref_attempt(
    word: &AtomicU64,
    seen: &mut u64,
    rule: Rule,
    order: Ordering,
) -> Attempt {
    let ptr = word.as_ptr();
    let lo = i64::from(rule.lo);
    let span = (i64::from(rule.hi) - lo) as u64;
    let add = layout::count_delta(rule.delta);
    // SAFETY: `ptr` points into a live `AtomicU64`, which is 8-byte aligned
    // and only ever accessed atomically.
    let (st, old) = unsafe {
        match order {
            Ordering::Relaxed => llsc_relaxed(ptr, lo, span, add),
            Ordering::Acquire => llsc_acquire(ptr, lo, span, add),
            Ordering::Release => llsc_release(ptr, lo, span, add),
            _ => unreachable!("lockref steps are Relaxed, Acquire or Release"),
        }
    };
    *seen = old;
    match st {
        status::DONE => Attempt::Done(layout::count_of(old) + rule.delta),
        status::LOST => Attempt::Lost,
        status::LOCKED => Attempt::Locked,
        _ => Attempt::Refused(layout::count_of(old)),
    }
}

// ---- per-CPU local add ---------------------------------------------------

/// Adds `amount` to this CPU's slot with LSE `stadd`: one atomic
/// instruction that returns nothing, so it needs no exclusive pair and no
/// retry loop. (Without LSE the portable interrupts-off load/store is used.)
#[cfg(target_feature = "lse")]
#[inline(always)]
pub(crate) fn local_add(slot: &crate::sync::AtomicI32, amount: i32) {
    let ptr = slot.as_ptr();
    debug_assert!(ptr.is_aligned());
    // SAFETY: `ptr` points into a live, 4-byte aligned `AtomicI32`; the
    // instruction reads and writes only it. `nostack`; `stadd` leaves NZCV
    // alone (`preserves_flags`).
    unsafe {
        core::arch::asm!("stadd {amount:w}, [{ptr}]", ptr = in(reg) ptr, amount = in(reg) amount, options(nostack, preserves_flags))
    };
}

// ---- interrupts ----------------------------------------------------------

/// Saved `DAIF`.
#[cfg(target_os = "none")]
pub(crate) type IrqFlags = u64;

/// Saves `DAIF` and masks IRQ and FIQ.
#[cfg(target_os = "none")]
#[inline(always)]
pub(crate) fn irq_save() -> IrqFlags {
    let flags: u64;
    // SAFETY: reads DAIF and sets its I and F bits; EL1 may do both. Not
    // `nomem`: a compiler barrier, so protected accesses stay after it.
    unsafe {
        core::arch::asm!(
            "mrs {}, daif",
            "msr daifset, #3",
            out(reg) flags,
            options(nostack, preserves_flags)
        )
    };
    flags
}

/// Writes back the `DAIF` saved by [`irq_save`].
///
/// # Safety
/// `flags` must come from the matching [`irq_save`] on this CPU, restored in
/// reverse nesting order.
#[cfg(target_os = "none")]
#[inline(always)]
pub(crate) unsafe fn irq_restore(flags: IrqFlags) {
    // SAFETY: writes back a DAIF value read on this CPU by the matching
    // save. Not `nomem`: a compiler barrier, so protected accesses stay
    // before it.
    unsafe { core::arch::asm!("msr daif, {}", in(reg) flags, options(nostack, preserves_flags)) };
}

// ---- the stall clock -----------------------------------------------------

/// The stall clock: `CNTVCT_EL0` now. No `isb` before the read: a stall
/// of milliseconds does not care where in the stream it is read.
#[inline]
pub(crate) fn stall_clock() -> Option<u64> {
    let now: u64;
    // SAFETY: reads a generic-timer register that EL1 (and EL0 under
    // Linux) may read; no memory, no flags.
    unsafe {
        core::arch::asm!(
            "mrs {now}, cntvct_el0",
            now = out(reg) now,
            options(nomem, nostack, preserves_flags)
        )
    };
    Some(now)
}

/// The counter's rate in ticks per ms, from `CNTFRQ_EL0` (which firmware
/// sets); `None` if it was left at zero.
pub(crate) fn stall_clock_rate() -> Option<u64> {
    let hz: u64;
    // SAFETY: as in `stall_clock`: a register read, no memory, no flags.
    unsafe {
        core::arch::asm!(
            "mrs {hz}, cntfrq_el0",
            hz = out(reg) hz,
            options(nomem, nostack, preserves_flags)
        )
    };
    let per_ms = hz / 1000;
    (per_ms != 0).then_some(per_ms)
}
