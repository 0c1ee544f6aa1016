//! The scheduler's own suites (`crate::sched`): a spinlock holder is never
//! preempted, and the run-queue lock's hand-over across a context switch
//! is complete on both sides.
//!
//! # `sched-lock-holder`
//!
//! Every CPU's boot thread starts [`SPAWN`] worker threads on its CPU
//! (more in the harness's `sched` mode, whose workers run the same body);
//! every thread takes one spinlock shared by all CPUs, again and again,
//! with a long critical section ([`HOLD_WORK`]), while the timer preempts
//! whatever runs with preemption enabled. Inside, a holder checks:
//!
//! * that it is alone (a holder word, swapped in and out);
//! * that it was not switched out by preemption since just before it took
//!   the lock (its thread's preemption count, `sched::preemptions_of`,
//!   unchanged) — the property "a lock holder is never preempted".
//!
//! Between sections workers move to random CPUs (`sched::migrate_to`)
//! and must then read that CPU's index (`kernel::cpu::current`), and
//! threads yield now and then. At the end (`finish`), with every thread
//! gone, each CPU's run-queue lock must be free and the switches counted
//! by the outgoing side (the thread that took the lock) must equal those
//! counted by the incoming side (the thread that released it, in
//! `sched::finish_switch`); some switches must have been preemptions and
//! some threads must have migrated, or the suite tested nothing.
//!
//! Until ksync's spinlocks disable preemption themselves, the test takes
//! `ksync::kernel::preempt_disable()` around its `TicketMutex`, as Linux's
//! `spin_lock` does inside; once they do, the explicit guard only nests.
//!
//! # The control: `sched-lock-holder-preemptible`
//!
//! The same with ksync's bare ticket algorithm (`TicketLock`, Linux's
//! `arch_spinlock_t`), which does not disable preemption: the timer
//! preempts holders, and the suite must catch it.

// Orderings: the holder word and the counter pair are Relaxed on purpose
// (the lock under test orders them; a broken lock shows in them); the
// statistics (`moves`, the per-CPU counters) and `RUN_CPUS` are Relaxed,
// written before or during the run and read after the harness's closing
// barrier (or, for `RUN_CPUS`, after the spawn that publishes it through
// the run-queue lock).

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::spinlock::{TicketLock, TicketMutex};

use super::{Rng, bump_pair, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters, MAX_CPUS};
use crate::sched;

/// Workers each CPU's boot thread starts for the suite.
pub const SPAWN: usize = 3;
/// The critical section's length (`busy_work` iterations): long enough
/// that timer ticks often land inside one.
pub const HOLD_WORK: u32 = 20_000;
/// A worker moves to a random CPU once per this many sections, on average.
const MIGRATE_ONE_IN: u64 = 32;
/// A thread yields once per this many sections, on average.
const YIELD_ONE_IN: u64 = 16;

/// One flavour: the lock, with or without preemption disabled.
pub struct LockHolder {
    info: Info,
    /// Whether holders disable preemption (the test) or not (the control).
    preempt_off: bool,
    mutex: TicketMutex<()>,
    bare: TicketLock,
    /// The holder's thread id + 1, or 0.
    holder: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    /// Per CPU: sections completed there.
    sections: Counters,
    /// Per CPU: holders found preempted there.
    preempted_holders: Counters,
    /// Migrations the workers made.
    moves: AtomicU64,
}

impl LockHolder {
    const fn new(name: &'static str, kind: Kind, preempt_off: bool) -> Self {
        Self {
            info: Info::new(name, kind, 750),
            preempt_off,
            mutex: TicketMutex::new(()),
            bare: TicketLock::new(),
            holder: AtomicUsize::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            sections: Counters::new(),
            preempted_holders: Counters::new(),
            moves: AtomicU64::new(0),
        }
    }

    /// One critical section of thread `me`.
    fn section(&self, ctx: &Ctx, me: usize) {
        if self.preempt_off {
            let _preempt = ksync::kernel::preempt_disable();
            let _guard = self.mutex.lock();
            self.inside(ctx, me);
        } else {
            self.bare.lock();
            self.inside(ctx, me);
            // SAFETY: taken just above by this thread.
            unsafe { self.bare.unlock() };
        }
    }

    /// The critical section, lock held. The preemption count is read
    /// here, not before the lock: a preemption while waiting for the lock
    /// (or before `preempt_disable`) is allowed.
    fn inside(&self, ctx: &Ctx, me: usize) {
        let before = sched::preemptions_of(me);
        // Relaxed: the lock under test orders the holder word.
        if self.holder.swap(me + 1, Ordering::Relaxed) != 0 {
            ctx.fail("two lock holders at once");
        }
        bump_pair(
            ctx,
            &self.first,
            &self.second,
            HOLD_WORK,
            "torn update inside the critical section",
        );
        if self.preempt_off && sched::preempt_count() == 0 {
            ctx.fail("a lock holder's preempt count is 0");
        }
        if sched::preemptions_of(me) != before {
            self.preempted_holders.add(cpu::current(), 1);
            ctx.fail("a spinlock holder was preempted inside its critical section");
        }
        self.holder.store(0, Ordering::Relaxed);
    }

    /// What every thread runs.
    fn body(&self, ctx: &Ctx) {
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x9E37_79B9));
        while !ctx.should_stop() {
            self.section(ctx, me);
            self.sections.add(cpu::current(), 1);
            if me >= MAX_CPUS && ctx.cpus > 1 && rng.below(MIGRATE_ONE_IN) == 0 {
                let target = rng.below(ctx.cpus as u64) as usize;
                sched::migrate_to(target);
                if cpu::current() != target {
                    ctx.fail("after migrate_to, the CPU id is not the new CPU's");
                }
                self.moves.fetch_add(1, Ordering::Relaxed);
            }
            if rng.below(YIELD_ONE_IN) == 0 {
                sched::yield_now();
            }
            busy_work(rng.below(64) as u32);
        }
    }
}

/// A worker the suite started: `arg` is the address of its suite.
fn worker(arg: usize) {
    // SAFETY: `arg` is the address of one of this file's `static`s, given
    // by `run` below.
    let suite = unsafe { &*(arg as *const LockHolder) };
    let cpus = RUN_CPUS.load(Ordering::Relaxed);
    suite.body(&Ctx::for_thread(cpus));
}

/// The run's CPU count, for the workers' contexts.
static RUN_CPUS: AtomicUsize = AtomicUsize::new(1);

impl Suite for LockHolder {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        RUN_CPUS.store(cpus, Ordering::Relaxed);
        self.holder.store(0, Ordering::Relaxed);
        self.first.store(0, Ordering::Relaxed);
        self.second.store(0, Ordering::Relaxed);
        self.moves.store(0, Ordering::Relaxed);
        self.sections.reset();
        self.preempted_holders.reset();
    }

    fn run(&self, ctx: &Ctx) {
        let boot_thread = sched::current() < MAX_CPUS;
        if boot_thread {
            for _ in 0..SPAWN {
                // Fewer when the pool is short: the suite needs only some.
                let _ = sched::spawn_on(ctx.cpu, worker, self as *const Self as usize);
            }
        }
        self.body(ctx);
        // Workers move between CPUs: wait for all of them, anywhere, or
        // one that moved here would be stranded once this boot thread
        // stops switching.
        while boot_thread && sched::workers_busy() {
            ksync::rcu::quiescent_state();
            sched::yield_now();
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        let sections = self.sections.sum(cpus);
        let preempted = self.preempted_holders.sum(cpus);
        let switches = sched::SWITCH_OUT.sum(cpus);
        let preemptions = sched::PREEMPTIONS.sum(cpus);
        let moves = self.moves.load(Ordering::Relaxed);
        let handed_over =
            (0..cpus).all(|cpu| sched::SWITCH_OUT.get(cpu) == sched::SWITCH_IN.get(cpu));
        let rq_free = (0..cpus).all(|cpu| !sched::rq_locked(cpu));
        self.info.report(format_args!(
            "{sections} sections, {preempted} holders found preempted; {switches} switches ({preemptions} preemptions), {moves} migrations; counters {}/{}",
            self.first.load(Ordering::Relaxed),
            self.second.load(Ordering::Relaxed),
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("sections", &self.sections),
                ("switches_out", &sched::SWITCH_OUT),
                ("switches_in", &sched::SWITCH_IN),
                ("preemptions", &sched::PREEMPTIONS),
                ("arrivals", &sched::MIGRATIONS),
            ],
        );
        let failure = (!handed_over)
            .then_some("a run-queue lock hand-over was counted on one side only")
            .or((!rq_free).then_some("a run-queue lock is still held after the suite"))
            .or((preemptions == 0).then_some("no thread was ever preempted by the timer"))
            .or((cpus > 1 && moves == 0).then_some("no thread migrated"))
            .or(
                (self.first.load(Ordering::Relaxed) != self.second.load(Ordering::Relaxed))
                    .then_some("lost updates: the two counters differ"),
            );
        Summary::new(sections, self.sections.min_max(cpus), failure)
    }
}

/// Holders disable preemption: never preempted.
pub static SCHED_LOCK_HOLDER: LockHolder = LockHolder::new("sched-lock-holder", Kind::Test, true);
/// The control: a bare ticket lock, holders preemptible: must be caught.
pub static SCHED_LOCK_HOLDER_PREEMPTIBLE: LockHolder =
    LockHolder::new("sched-lock-holder-preemptible", Kind::Control, false);

/// This file's suites, for the registry.
pub static SUITES: &[&dyn Suite] = &[&SCHED_LOCK_HOLDER, &SCHED_LOCK_HOLDER_PREEMPTIBLE];
