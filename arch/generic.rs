//! The portable backend: core atomics for lockref's step and the
//! `critical-section` implementation for local interrupt control.
//!
//! Used on every target that has no hand-written path (x86_64 included,
//! where `compare_exchange` already is `lock cmpxchg`), under loom and Miri,
//! and compiled under test everywhere so that it stays exercised on the
//! arches that normally use their own.

#[cfg(target_has_atomic = "64")]
use crate::lockref::word::{Attempt, Rule};
#[cfg(target_has_atomic = "64")]
use crate::sync::{AtomicU64, Ordering};

/// The step compares against the caller's `seen`, which the caller loads
/// first.
pub(crate) const STEP_LOADS_WORD: bool = false;

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
    let update = match rule.check(old) {
        Ok(update) => update,
        Err(outcome) => return outcome,
    };
    match word.compare_exchange(old, update.word, order, Ordering::Relaxed) {
        Ok(_) => Attempt::Done(update.count),
        Err(current) => {
            *seen = current;
            Attempt::Lost
        }
    }
}

/// Adds `amount` to this CPU's per-CPU counter slot: one relaxed
/// `fetch_add`.
///
/// No interrupt masking is needed: an atomic read-modify-write on the
/// slot cannot be split by an interrupt handler on this CPU (riscv64: one
/// `amoadd.w`; aarch64 without LSE: an LL/SC loop, whose store fails if an
/// interrupt intervened; targets without atomic RMWs: portable-atomic's,
/// which these single-core targets run in a critical section). Only this
/// CPU writes the slot, so the RMW never contends. Under loom it is the
/// same `fetch_add`, so the models see the real interleavings.
///
/// Relaxed: the slot orders nothing by itself; its users pair their own
/// fences with it (the rw lock's A/B, SRCU's A/B) or read it under a lock
/// (the counter's fold and sum).
#[inline]
pub(crate) fn local_add(slot: &crate::sync::AtomicI32, amount: i32) {
    slot.fetch_add(amount, crate::sync::Ordering::Relaxed);
}

/// Saved local interrupt state: whatever the `critical-section`
/// implementation restores.
#[cfg(not(ksync_loom))]
pub(crate) type IrqFlags = critical_section::RestoreState;

// `critical-section`'s state is opaque: not a word.
#[cfg(not(ksync_loom))]
impl super::IrqWord for IrqFlags {
    const IS_WORD: bool = false;
    const EMPTY: Self = critical_section::RestoreState::invalid();
    fn into_word(self) -> usize {
        unreachable!("ksync: critical-section's state is not a word")
    }
    fn from_word(_: usize) -> Self {
        unreachable!("ksync: critical-section's state is not a word")
    }
}

/// Disables local interrupts (enters the critical section) and returns the
/// state to restore.
#[cfg(not(ksync_loom))]
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
#[cfg(not(ksync_loom))]
#[inline]
pub(crate) unsafe fn irq_restore(flags: IrqFlags) {
    // SAFETY: the caller passes the state of the matching acquire, in
    // nesting order.
    unsafe { critical_section::release(flags) }
}

/// loom models no interrupts: saving and restoring do nothing.
#[cfg(ksync_loom)]
pub(crate) type IrqFlags = ();

// loom: nothing to carry.
#[cfg(ksync_loom)]
impl super::IrqWord for IrqFlags {
    const IS_WORD: bool = true;
    const EMPTY: Self = ();
    fn into_word(self) -> usize {
        0
    }
    fn from_word(_: usize) -> Self {}
}

/// No interrupts under loom.
#[cfg(ksync_loom)]
#[inline]
pub(crate) fn irq_save() -> IrqFlags {}

/// No interrupts under loom.
///
/// # Safety
/// None needed; kept `unsafe` to match the other backends.
#[cfg(ksync_loom)]
#[inline]
pub(crate) unsafe fn irq_restore(_flags: IrqFlags) {}

#[cfg(all(
    test,
    feature = "test-hooks",
    target_has_atomic = "64",
    not(ksync_loom)
))]
mod tests {
    //! The portable lockref step, tested directly (it is compiled under test
    //! on every arch, so this covers the fallback on x86_64 and aarch64).

    use std::sync::Arc;
    use std::thread;
    use std::vec::Vec;

    use super::lockref_attempt;
    use crate::lockref::word::{self as layout, Attempt, Rule};
    use crate::sync::{AtomicU64, Ordering};

    const MAX: i32 = i32::MAX;
    const GET: Rule = Rule {
        lo: 0,
        hi: MAX - 1,
        delta: 1,
    };
    const PUT: Rule = Rule {
        lo: 1,
        hi: MAX - 1,
        delta: -1,
    };
    const ORDERS: [Ordering; 3] = [Ordering::Relaxed, Ordering::Acquire, Ordering::Release];

    /// A lockref word from its count and tickets.
    fn word(count: i32, owner: u16, next: u16) -> u64 {
        layout::compose(count, owner, next)
    }

    /// Makes one attempt against a fresh word holding `w`, starting from an
    /// up-to-date `seen`. Returns the outcome and the word afterwards.
    fn attempt_on(w: u64, rule: Rule, order: Ordering) -> (Attempt, u64) {
        let atomic = AtomicU64::new(w);
        let mut seen = w;
        let outcome = lockref_attempt(&atomic, &mut seen, rule, order);
        (outcome, atomic.load(Ordering::Relaxed))
    }

    #[test]
    fn done_updates_only_the_count_half() {
        for order in ORDERS {
            // Lock half free at several ticket values, including the wrap.
            for (owner, next) in [(0, 0), (3, 3), (0xffff, 0xffff), (0x8000, 0x8000)] {
                assert_eq!(
                    attempt_on(word(5, owner, next), PUT, order),
                    (Attempt::Done(4), word(4, owner, next))
                );
                assert_eq!(
                    attempt_on(word(5, owner, next), GET, order),
                    (Attempt::Done(6), word(6, owner, next))
                );
                // The boundaries of the ranges are inclusive.
                assert_eq!(
                    attempt_on(word(1, owner, next), PUT, order),
                    (Attempt::Done(0), word(0, owner, next))
                );
                assert_eq!(
                    attempt_on(word(0, owner, next), GET, order),
                    (Attempt::Done(1), word(1, owner, next))
                );
                assert_eq!(
                    attempt_on(word(MAX - 1, owner, next), GET, order),
                    (Attempt::Done(MAX), word(MAX, owner, next))
                );
            }
        }
    }

    #[test]
    fn done_across_the_sign_of_the_count_never_touches_the_lock_half() {
        // Borrows and carries of the count half must stay out of the lock
        // half (below) and be discarded at bit 64 (above).
        let wide = Rule {
            lo: i32::MIN,
            hi: MAX,
            delta: -1,
        };
        assert_eq!(
            attempt_on(word(0, 7, 7), wide, Ordering::Relaxed),
            (Attempt::Done(-1), word(-1, 7, 7))
        );
        let up = Rule {
            lo: i32::MIN,
            hi: MAX - 1,
            delta: 1,
        };
        assert_eq!(
            attempt_on(word(-1, 0xffff, 0xffff), up, Ordering::Relaxed),
            (Attempt::Done(0), word(0, 0xffff, 0xffff))
        );
        let big = Rule {
            lo: i32::MIN,
            hi: MAX,
            delta: 200,
        };
        assert_eq!(
            attempt_on(word(-128, 1, 1), big, Ordering::Relaxed),
            (Attempt::Done(72), word(72, 1, 1))
        );
    }

    #[test]
    fn refused_reports_the_count_and_changes_nothing() {
        for order in ORDERS {
            let cases = [
                (word(0, 0, 0), PUT, 0),
                (word(-128, 2, 2), PUT, -128),
                (word(-128, 2, 2), GET, -128),
                (word(-1, 0, 0), GET, -1),
                (word(MAX, 0, 0), GET, MAX),
                (word(MAX, 4, 4), PUT, MAX),
                (word(i32::MIN, 0, 0), GET, i32::MIN),
                (
                    word(1, 9, 9),
                    Rule {
                        lo: 2,
                        hi: MAX - 1,
                        delta: -1,
                    },
                    1,
                ),
            ];
            for (w, rule, count) in cases {
                assert_eq!(
                    attempt_on(w, rule, order),
                    (Attempt::Refused(count), w),
                    "word {w:#018x}, {rule:?}"
                );
            }
        }
    }

    #[test]
    fn locked_when_owner_differs_from_next() {
        for order in ORDERS {
            // Held (next = owner + 1), held with waiters, and held across
            // the 16-bit wrap; with counts inside and outside the range
            // (the lock is checked first).
            for (owner, next) in [(0, 1), (5, 9), (0xffff, 0), (0xfffe, 1), (1, 0)] {
                for count in [5, 0, -128, MAX] {
                    let w = word(count, owner, next);
                    assert_eq!(attempt_on(w, PUT, order), (Attempt::Locked, w));
                    assert_eq!(attempt_on(w, GET, order), (Attempt::Locked, w));
                }
            }
        }
    }

    #[test]
    fn lost_refreshes_seen_and_a_retry_succeeds() {
        for order in ORDERS {
            // Another CPU changed the count since `seen` was read.
            let atomic = AtomicU64::new(word(7, 2, 2));
            let mut seen = word(6, 2, 2);
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, PUT, order),
                Attempt::Lost
            );
            assert_eq!(seen, word(7, 2, 2), "seen must be refreshed");
            assert_eq!(atomic.load(Ordering::Relaxed), word(7, 2, 2));
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, PUT, order),
                Attempt::Done(6)
            );
            assert_eq!(atomic.load(Ordering::Relaxed), word(6, 2, 2));

            // Another CPU took the lock since `seen` was read: Lost, and the
            // retry with the refreshed view reports Locked.
            let atomic = AtomicU64::new(word(7, 2, 3));
            let mut seen = word(7, 2, 2);
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, GET, order),
                Attempt::Lost
            );
            assert_eq!(seen, word(7, 2, 3));
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, GET, order),
                Attempt::Locked
            );
            assert_eq!(atomic.load(Ordering::Relaxed), word(7, 2, 3));

            // The word went dead since `seen` was read: Lost, then Refused.
            let atomic = AtomicU64::new(word(-128, 4, 4));
            let mut seen = word(1, 4, 4);
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, PUT, order),
                Attempt::Lost
            );
            assert_eq!(
                lockref_attempt(&atomic, &mut seen, PUT, order),
                Attempt::Refused(-128)
            );
            assert_eq!(atomic.load(Ordering::Relaxed), word(-128, 4, 4));
        }
    }

    /// Applies `rule` in a retry loop, as `LockRef`'s lockless path does,
    /// but waiting out the lock instead of taking it.
    fn apply(word: &AtomicU64, rule: Rule, order: Ordering) -> i32 {
        let mut seen = word.load(Ordering::Relaxed);
        let mut lost = 0u32;
        loop {
            match lockref_attempt(word, &mut seen, rule, order) {
                Attempt::Done(count) => return count,
                Attempt::Lost => {
                    // A refreshed `seen` wins soon; a stale one never does.
                    lost += 1;
                    assert!(lost < 10_000_000, "lost {lost} times in a row");
                }
                Attempt::Locked => {
                    core::hint::spin_loop();
                    seen = word.load(Ordering::Relaxed);
                }
                Attempt::Refused(count) => panic!("refused at count {count}"),
            }
        }
    }

    #[test]
    fn threaded_get_put_is_exact_and_respects_the_lock() {
        const THREADS: usize = 4;
        const ITERS: usize = if cfg!(debug_assertions) {
            200_000
        } else {
            1_000_000
        };
        const LOCKER_ROUNDS: u32 = 2_000;
        // Each worker owns one reference for the whole test.
        let base = THREADS as i32;
        let word = Arc::new(AtomicU64::new(self::word(base, 0, 0)));

        let mut workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let word = Arc::clone(&word);
                thread::spawn(move || {
                    for _ in 0..ITERS {
                        let up = apply(&word, GET, Ordering::Relaxed);
                        // We hold our own reference and the new one.
                        assert!(up >= 2, "count {up} after a get");
                        let down = apply(&word, PUT, Ordering::Release);
                        assert!(down >= 1, "count {down} after a put");
                    }
                })
            })
            .collect();

        // A lock holder (by hand: `next += 1` while free, then serve the
        // ticket) checks that no step changes the count under it.
        let locker = {
            let word = Arc::clone(&word);
            thread::spawn(move || {
                for _ in 0..LOCKER_ROUNDS {
                    let mut w = word.load(Ordering::Relaxed);
                    let ticket = loop {
                        let next = layout::next(w);
                        assert_eq!(layout::owner(w), next, "only this thread locks");
                        let taken = layout::take_ticket(w);
                        match word.compare_exchange(w, taken, Ordering::Acquire, Ordering::Relaxed)
                        {
                            Ok(_) => break next,
                            Err(now) => w = now,
                        }
                    };
                    let held = word.load(Ordering::Relaxed);
                    for _ in 0..20 {
                        core::hint::spin_loop();
                        assert_eq!(
                            word.load(Ordering::Relaxed),
                            held,
                            "the word changed while the lock was held"
                        );
                    }
                    if ticket == u16::MAX {
                        word.fetch_sub(layout::OWNER_WRAP, Ordering::Release);
                    } else {
                        word.fetch_add(layout::OWNER_ONE, Ordering::Release);
                    }
                }
            })
        };

        for w in workers.drain(..) {
            w.join().unwrap();
        }
        locker.join().unwrap();
        let w = word.load(Ordering::Relaxed);
        assert_eq!(layout::count_of(w), base);
        assert!(layout::lock_is_free(w), "lock left free");
        assert_eq!(
            layout::owner(w),
            LOCKER_ROUNDS as u16,
            "every lock was served"
        );
    }
}

/// No portable way to tell a vCPU from a CPU: the kernel says so itself
/// (`kernel::set_vcpu_preemptible`).
pub(crate) fn hypervisor_present() -> bool {
    false
}

/// No counter known: FIFO waiters measure a stall in spin rounds instead
/// (`kernel::spin`).
#[inline]
pub(crate) fn stall_clock() -> Option<u64> {
    None
}

/// No counter, no rate.
pub(crate) fn stall_clock_rate() -> Option<u64> {
    None
}
