//! The portable backend: core atomics for lockref's step and the
//! `critical-section` implementation for local interrupt control.
//!
//! Used on every target that has no hand-written path (x86_64 included,
//! where `compare_exchange` already is `lock cmpxchg`), under loom and Miri,
//! and compiled under test everywhere so that it stays exercised on the
//! arches that normally use their own.

#[cfg(target_has_atomic = "64")]
use super::{Attempt, Rule, count_delta, count_of, lock_is_free};
#[cfg(target_has_atomic = "64")]
use crate::sync::{AtomicU64, Ordering};

/// One lockless lockref attempt with `compare_exchange`.
///
/// `seen` is the caller's latest view of the word; on a lost race it is
/// refreshed with the value the compare-exchange returned, so a retry needs
/// no extra load. `order` is the success ordering (`Relaxed`, `Acquire` or
/// `Release`); a failed exchange is `Relaxed` because the caller only
/// retries or falls back to the lock, which orders itself.
#[cfg(target_has_atomic = "64")]
#[inline(always)]
pub(crate) fn lockref_attempt(
    word: &AtomicU64,
    seen: &mut u64,
    rule: Rule,
    order: Ordering,
) -> Attempt {
    let old = *seen;
    if !lock_is_free(old) {
        return Attempt::Locked;
    }
    let count = count_of(old);
    if count < rule.lo || count > rule.hi {
        return Attempt::Refused(count);
    }
    let new = old.wrapping_add(count_delta(rule.delta));
    match word.compare_exchange(old, new, order, Ordering::Relaxed) {
        Ok(_) => Attempt::Done(count + rule.delta),
        Err(current) => {
            *seen = current;
            Attempt::Lost
        }
    }
}

/// Saved local interrupt state: whatever the `critical-section`
/// implementation restores.
pub(crate) type IrqFlags = critical_section::RestoreState;

/// Disables local interrupts (enters the critical section) and returns the
/// state to restore.
#[inline]
pub(crate) fn irq_save() -> IrqFlags {
    // SAFETY: every acquire is paired with exactly one `release` of the same
    // state, in reverse nesting order, by `irq_restore`'s callers (the
    // IRQ-saving lock guards), as critical-section requires.
    unsafe { critical_section::acquire() }
}

/// Restores the local interrupt state saved by [`irq_save`].
///
/// # Safety
/// `flags` must come from the matching `irq_save` on this CPU, and saves
/// must be restored in reverse order.
#[inline]
pub(crate) unsafe fn irq_restore(flags: IrqFlags) {
    // SAFETY: the caller passes the state of the matching acquire, in
    // nesting order.
    unsafe { critical_section::release(flags) }
}
