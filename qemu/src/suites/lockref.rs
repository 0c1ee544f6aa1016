//! lockref torture: every CPU mixes `get`, `get_not_dead`, `put_return`,
//! `put_or_lock` and lock holders on one [`LockRef`], in thread context and
//! from its timer interrupt.
//!
//! # Checks
//!
//! * A lock holder re-reads the count many times while it holds the lock:
//!   it must never change (the lockless fast path must back off while the
//!   lock is held).
//! * Now and then two CPUs meet for a *probe* ([`super::probe`]): one
//!   announces it is ready, another takes the lock and tells it so, and the
//!   first calls `put_return` while the lock is held. The lockless put must
//!   be refused and the count must not move. Unlike the re-reads above, this
//!   check does not depend on two vCPUs happening to run at the same moment,
//!   which a loaded host running four vCPUs on two cores rarely guarantees.
//! * `put_or_lock` may hand over the lock only at count 1 (the caller holds a
//!   reference), and no put ever sees fewer references than are held.
//! * Every context takes and drops references in balance, so the final
//!   count must be exactly 0; then `mark_dead` must stick.
//!
//! # Interrupt context
//!
//! The timer handler takes and drops references and holds the lock too. Any
//! operation that can fall back to the lock (`get`, `get_not_dead`,
//! `put_or_lock`, `lock`) therefore runs in thread context with interrupts
//! disabled (ksync's [`IrqState::save`]), the rule for every lock also taken
//! by an interrupt handler; otherwise the handler could spin on the lock
//! held by the code it interrupted. `put_return` never takes the lock and
//! runs with interrupts on.
//!
//! # The control
//!
//! [`BrokenLockRef`] runs the same mix against a real `LockRef` whose
//! lockless `get`/`put` ignore the lock half of the word (a copy of the
//! compare-exchange loop without the lock check). Lock holders then see the
//! count change under them, probes see `put_return` go through, and updates
//! made under the lock get lost.

use core::sync::atomic::{AtomicU64, Ordering};

use ksync::spinlock::IrqState;
use ksync::{LockRef, LockRefGuard};

use super::probe::Probe;
use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel;
use crate::kernel::cpu::Counters;

/// The lockref operations the suite drives: implemented by ksync's
/// [`LockRef`] and by the control's [`BrokenLockRef`].
pub trait RefCount: Sync {
    /// `LockRef::get`.
    fn get(&self);
    /// `LockRef::get_not_dead`.
    fn get_not_dead(&self) -> bool;
    /// `LockRef::put_return`.
    fn put_return(&self) -> Option<i32>;
    /// `LockRef::put_or_lock`.
    fn put_or_lock(&self) -> Option<LockRefGuard<'_>>;
    /// `LockRef::lock`.
    fn lock(&self) -> LockRefGuard<'_>;
    /// `LockRef::count`.
    fn count(&self) -> i32;
    /// Checks that the implementation is what the suite thinks it is.
    fn self_check(&self) -> Result<(), &'static str> {
        Ok(())
    }
}

impl RefCount for LockRef {
    fn get(&self) {
        LockRef::get(self)
    }
    fn get_not_dead(&self) -> bool {
        LockRef::get_not_dead(self)
    }
    fn put_return(&self) -> Option<i32> {
        LockRef::put_return(self)
    }
    fn put_or_lock(&self) -> Option<LockRefGuard<'_>> {
        LockRef::put_or_lock(self)
    }
    fn lock(&self) -> LockRefGuard<'_> {
        LockRef::lock(self)
    }
    fn count(&self) -> i32 {
        LockRef::count(self)
    }
}

/// The control: a real [`LockRef`] (its lock, its word) whose lockless
/// `get`/`get_not_dead`/`put_return`/`put_or_lock` ignore the lock half of
/// the word. Everything else is ksync's.
pub struct BrokenLockRef(LockRef);

// `LockRef` is `repr(C, align(8))` around its one 64-bit word on targets
// with 64-bit atomics (its documented layout: lock in bits 0..32, count in
// bits 32..64), first; only a `lockdep` build adds a field after it (the
// lock's class). `self_check` verifies the rest at run time.
#[cfg(not(feature = "lockdep"))]
const _: () = assert!(size_of::<LockRef>() == 8 && align_of::<LockRef>() == 8);
#[cfg(feature = "lockdep")]
const _: () = assert!(size_of::<LockRef>() > 8 && align_of::<LockRef>() == 8);

impl BrokenLockRef {
    const fn new(count: i32) -> Self {
        Self(LockRef::new(count))
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: `LockRef` is an 8-aligned `repr(C)` struct whose first
        // field is its `AtomicU64` word (asserted above for size and
        // alignment, checked by `self_check` for the layout of the word), so
        // a pointer to it is a valid pointer to that atomic, which ksync
        // also only ever accesses atomically.
        unsafe { &*(&raw const self.0).cast::<AtomicU64>() }
    }

    /// The broken fast path: add `delta` to the count if it is at least
    /// `lo`, *whatever the lock half says*. Returns the new count.
    fn update_ignoring_lock(&self, lo: i32, delta: i32) -> Option<i32> {
        let word = self.word();
        let mut old = word.load(Ordering::Relaxed);
        loop {
            let count = (old >> 32) as i32;
            if count < lo {
                return None;
            }
            let new = old.wrapping_add(((delta as i64) << 32) as u64);
            // AcqRel: as strong as ksync's own steps; the bug is elsewhere.
            match word.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(count + delta),
                Err(current) => old = current,
            }
        }
    }
}

impl RefCount for BrokenLockRef {
    fn get(&self) {
        self.update_ignoring_lock(0, 1);
    }
    fn get_not_dead(&self) -> bool {
        self.update_ignoring_lock(0, 1).is_some()
    }
    fn put_return(&self) -> Option<i32> {
        self.update_ignoring_lock(1, -1)
    }
    fn put_or_lock(&self) -> Option<LockRefGuard<'_>> {
        match self.update_ignoring_lock(2, -1) {
            Some(_) => None,
            None => self.0.put_or_lock(),
        }
    }
    fn lock(&self) -> LockRefGuard<'_> {
        self.0.lock()
    }
    fn count(&self) -> i32 {
        self.0.count()
    }
    fn self_check(&self) -> Result<(), &'static str> {
        let probe = Self::new(7);
        let word = probe.word().load(Ordering::Relaxed);
        let guard = probe.0.lock();
        let locked = probe.word().load(Ordering::Relaxed);
        drop(guard);
        let lock_free = |w: u64| (w as u16) == ((w >> 16) as u16);
        if word >> 32 != 7 || !lock_free(word) || locked >> 32 != 7 || lock_free(locked) {
            return Err("LockRef's word layout is not the documented one: the control cannot work");
        }
        Ok(())
    }
}

/// References one context holds at most (few, so that the count often
/// drops to 1 and `put_or_lock` hands over the lock).
const MAX_HELD: u32 = 4;
/// How often a lock holder re-reads the count (with a little work between
/// reads) before it lets go.
const HOLD_CHECKS: u32 = 128;

/// The suite, over any [`RefCount`].
pub struct LockrefTorture<L: 'static> {
    info: Info,
    lockref: L,
    probe: Probe,
    ops: Counters,
    gets: Counters,
    puts: Counters,
    locked_puts: Counters,
    last_refs: Counters,
    holds: Counters,
    irq_ops: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// The test: ksync's `LockRef`.
pub static TEST: LockrefTorture<LockRef> =
    LockrefTorture::new(Info::new("lockref", Kind::Test, 1000), LockRef::new(0));
/// The control: a `LockRef` whose fast path ignores the lock. It stops at
/// the first failure; the longer budget only matters if it goes unseen.
pub static CONTROL: LockrefTorture<BrokenLockRef> = LockrefTorture::new(
    Info::new("lockref-nolock", Kind::Control, 3000),
    BrokenLockRef::new(0),
);

/// Runs `f` with local interrupts disabled: required around every operation
/// that may take the lock, since the interrupt handler takes it too.
fn irqs_off<R>(f: impl FnOnce() -> R) -> R {
    let _irq = IrqState::save();
    f()
}

impl<L: RefCount> LockrefTorture<L> {
    const fn new(info: Info, lockref: L) -> Self {
        Self {
            info,
            lockref,
            probe: Probe::new(),
            ops: Counters::new(),
            gets: Counters::new(),
            puts: Counters::new(),
            locked_puts: Counters::new(),
            last_refs: Counters::new(),
            holds: Counters::new(),
            irq_ops: Counters::new(),
        }
    }

    /// Drops one reference the caller holds: lockless first; if that is
    /// refused (lock held, contention), under the lock with interrupts off.
    fn put(&self, ctx: &Ctx) {
        match self.lockref.put_return() {
            Some(count) if count >= 0 => self.puts.add(ctx.cpu, 1),
            Some(_) => ctx.fail("put_return returned a negative count"),
            None => irqs_off(|| {
                let mut guard = self.lockref.lock();
                let count = guard.count();
                if count < 1 {
                    ctx.fail("a put found the count below the references held");
                } else {
                    guard.set_count(count - 1);
                }
                self.locked_puts.add(ctx.cpu, 1);
            }),
        }
    }

    /// Drops one reference with `put_or_lock`; if that hands over the lock,
    /// ours must be the last reference, dropped under the lock (as `dput`
    /// does when it retains the dentry).
    fn put_or_lock(&self, ctx: &Ctx) {
        irqs_off(|| {
            if let Some(mut guard) = self.lockref.put_or_lock() {
                if guard.count() != 1 {
                    ctx.fail("put_or_lock handed over the lock with the count not 1");
                }
                guard.set_count(guard.count() - 1);
                self.last_refs.add(ctx.cpu, 1);
            }
        });
        self.puts.add(ctx.cpu, 1);
    }

    /// Holds the lock for a while, re-reading the count; then takes or drops
    /// one reference under the lock.
    fn hold(&self, ctx: &Ctx, held: &mut u32, take: bool) {
        irqs_off(|| {
            let mut guard = self.lockref.lock();
            let before = guard.count();
            for _ in 0..HOLD_CHECKS {
                busy_work(8);
                if guard.count() != before {
                    ctx.fail("the count changed while the lock was held");
                    break;
                }
            }
            if take && *held < MAX_HELD {
                guard.set_count(before + 1);
                *held += 1;
            } else if *held > 0 {
                guard.set_count(before - 1);
                *held -= 1;
            }
        });
        self.holds.add(ctx.cpu, 1);
    }

    /// The prober (thread context, holding a reference): a probe
    /// ([`super::probe`]) whose attempt is a lockless put, which must be
    /// refused.
    fn probe(&self, ctx: &Ctx, held: &mut u32) {
        // Interrupts off from announcing to answering: the CPU that takes
        // the lock for us waits for our answer, and our interrupt handler
        // could need that lock.
        irqs_off(|| {
            self.probe.probe(ctx.cpu, || {
                if self.lockref.put_return().is_some() {
                    ctx.fail("put_return went through while another CPU held the lock");
                    *held -= 1;
                    self.puts.add(ctx.cpu, 1);
                }
            })
        });
    }

    /// Every CPU, each iteration: serves a probe another CPU is ready for
    /// ([`super::probe`]): takes the lock for it and checks the count did
    /// not move while the prober tried its lockless put.
    fn serve_probe(&self, ctx: &Ctx) {
        self.probe.serve(ctx.cpu, |hand_over| {
            let guard = self.lockref.lock();
            let before = guard.count();
            hand_over();
            if guard.count() != before {
                ctx.fail("the count changed under the lock during a probe");
            }
        });
    }
}

impl<L: RefCount> Suite for LockrefTorture<L> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        if let Err(reason) = self.lockref.self_check() {
            kernel::fatal(format_args!(
                "KSYNC-FAULT suite={} setup: {reason}",
                self.info.name
            ));
        }
        self.probe.reset();
        for counters in [
            &self.ops,
            &self.gets,
            &self.puts,
            &self.locked_puts,
            &self.last_refs,
            &self.holds,
            &self.irq_ops,
        ] {
            counters.reset();
        }
        irqs_off(|| self.lockref.lock().set_count(0));
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 1);
        let mut held = 0u32;
        let mut ops = 0;
        while !ctx.should_stop() {
            self.serve_probe(ctx);
            // The mix: mostly lockless reference traffic, some of it
            // refused near zero (put_or_lock at count 1), and now and then a
            // lock holder. Few lock acquisitions keep ticket-lock convoys
            // (a waiter whose vCPU the host descheduled) rare under TCG.
            match rng.below(64) {
                0..=24 if held < MAX_HELD => {
                    irqs_off(|| self.lockref.get());
                    held += 1;
                    self.gets.add(ctx.cpu, 1);
                }
                25..=28 if held < MAX_HELD => {
                    if irqs_off(|| self.lockref.get_not_dead()) {
                        held += 1;
                        self.gets.add(ctx.cpu, 1);
                    } else {
                        ctx.fail("get_not_dead failed on a live lockref");
                    }
                }
                29..=58 if held > 0 => {
                    self.put(ctx);
                    held -= 1;
                }
                59..=61 if held > 0 => {
                    self.put_or_lock(ctx);
                    held -= 1;
                }
                62 => self.hold(ctx, &mut held, rng.below(2) == 0),
                63 if held > 0 && rng.below(2) == 0 => self.probe(ctx, &mut held),
                _ => continue,
            }
            ops += 1;
        }
        while held > 0 {
            self.put(ctx);
            held -= 1;
        }
        self.ops.add(ctx.cpu, ops);
    }

    fn irq(&self, ctx: &Ctx) {
        // Interrupts are off in the handler, and thread context never holds
        // this lock with interrupts on: every operation is allowed here.
        // Mostly reference traffic; every sixteenth tick, a lock holder.
        if self.irq_ops.get(ctx.cpu) % 16 != 15 {
            if self.lockref.get_not_dead() {
                self.put(ctx);
            } else {
                ctx.fail("get_not_dead failed on a live lockref (interrupt)");
            }
        } else {
            let mut none = 0;
            self.hold(ctx, &mut none, false);
        }
        self.irq_ops.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        let mut failure = None;
        let count = self.lockref.count();
        if count != 0 {
            failure = Some("the final count is not 0: updates were lost");
        } else {
            // Interrupts off as everywhere else in thread context (no
            // handler runs the suite now, but lockdep cannot know that).
            irqs_off(|| self.lockref.lock().mark_dead());
            if !self.lockref.count().is_negative() || self.lockref.get_not_dead() {
                failure = Some("mark_dead did not stick");
            }
        }
        self.info.report_per_cpu(
            cpus,
            &[
                ("ops", &self.ops),
                ("get", &self.gets),
                ("put", &self.puts),
                ("put_locked", &self.locked_puts),
                ("last_ref", &self.last_refs),
                ("lock_holds", &self.holds),
                ("probes", self.probe.done()),
                ("irq_ops", &self.irq_ops),
            ],
        );
        self.info
            .report(format_args!("final count {count} (expected 0)"));
        Summary::new(
            self.ops.sum(cpus) + self.irq_ops.sum(cpus),
            self.ops.min_max(cpus),
            failure,
        )
    }
}
