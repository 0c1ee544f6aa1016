//! lockdep end to end: CPU 0 takes lock `A` then lock `B` and lets both
//! go; later, once CPU 0 is done with them for good, CPU 1 takes `B` then
//! `A`. Nothing can deadlock (the two never overlap), but the order is the
//! one that deadlocks the day they do: in an image built with the
//! `lockdep` feature, lockdep must report the cycle, naming both classes
//! (`"lockdep-A"` and `"lockdep-B"`), through the kernel's
//! `lockdep_report` hook (`kernel::hooks`, a `KSYNC-LOCKDEP` line and the
//! report).
//!
//! The same suite in an image without `lockdep` is its control: the same
//! locks in the same orders, and no report may appear. The suite judges
//! both itself (the hook counts the reports), and prints a
//! `KSYNC-LOCKDEP-EXPECT` line naming the classes so that the host runner
//! checks the report's text too (and, in every other suite, that there is
//! no report at all).
//!
//! Every CPU then idles until the budget is spent (each must take timer
//! interrupts during a suite).
//!
//! In scheduler mode (several threads per CPU, `harness::runner`) the two
//! orders are thread 0's of CPUs 0 and 1; CPU 1's waits for CPU 0's
//! giving its CPU away between looks (`sched::relax`), and every other
//! thread idles. (ksync's lockdep keeps held locks per task, the
//! kernel's `current_task`: a thread here.)

use core::sync::atomic::{AtomicUsize, Ordering};

use ksync::lock_class;
use ksync::spinlock::{RawTicketLock, TicketMutex};

use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::{hooks, time};
use crate::println;
use crate::sched;

/// The two locks, each its own class, named for the report.
static A: TicketMutex<u64> =
    TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("lockdep-A")), 0);
static B: TicketMutex<u64> =
    TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("lockdep-B")), 0);

/// [`LockdepSuite::step`]: CPU 0 took `A` then `B` and let both go.
const FIRST_ORDER_DONE: usize = 1;
/// [`LockdepSuite::step`]: CPU 1 took `B` then `A` and let both go.
const SECOND_ORDER_DONE: usize = 2;

/// The suite.
pub struct LockdepSuite {
    info: Info,
    step: AtomicUsize,
    /// The hook's counts at `setup`.
    before: [AtomicUsize; 2],
    /// Per CPU: idle rounds until the deadline.
    rounds: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST];

/// The test (its control is this suite in an image without `lockdep`).
pub static TEST: LockdepSuite = LockdepSuite::new(Info::new("lockdep", Kind::Test, BUDGET_MS));

/// How long every CPU keeps running once both orders are taken (so that
/// each takes timer interrupts during the suite, as the runner checks).
const RUN_MS: u64 = 400;
/// The budget: the suite ends [`RUN_MS`] after CPU 1 took its order, so
/// this only bounds a CPU that never gets there. Generous: at 400 ms (the
/// old budget and run) scheduler mode at -smp 8 on a two-core host at a
/// load of 24 failed with "CPU 0 did not take A then B in time".
const BUDGET_MS: u64 = 10_000;

impl LockdepSuite {
    const fn new(info: Info) -> Self {
        Self {
            info,
            step: AtomicUsize::new(0),
            before: [AtomicUsize::new(0), AtomicUsize::new(0)],
            rounds: Counters::new(),
        }
    }
}

impl Suite for LockdepSuite {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // Relaxed: the runner's barrier orders `setup` before `run`.
        self.step.store(0, Ordering::Relaxed);
        let (reports, cycles) = hooks::lockdep_log();
        self.before[0].store(reports, Ordering::Relaxed);
        self.before[1].store(cycles, Ordering::Relaxed);
        self.rounds.reset();
    }

    fn run(&self, ctx: &Ctx) {
        if ctx.cpus < 2 {
            ctx.fail("needs two CPUs");
        } else if ctx.cpu == 0 && ctx.thread == 0 {
            {
                let mut a = A.lock();
                let mut b = B.lock();
                *a += 1;
                *b += 1;
            }
            // Release pairs with CPU 1's Acquire: both locks are free and
            // CPU 0 never takes them again.
            self.step.store(FIRST_ORDER_DONE, Ordering::Release);
        } else if ctx.cpu == 1 && ctx.thread == 0 {
            // Acquire pairs with CPU 0's Release.
            while self.step.load(Ordering::Acquire) != FIRST_ORDER_DONE {
                if ctx.should_stop() {
                    ctx.fail("CPU 0 did not take A then B in time");
                    return;
                }
                // CPU 0 may be slow to get there; so may this CPU's
                // other threads, in scheduler mode.
                sched::relax();
            }
            {
                let mut b = B.lock();
                // With lockdep: the report, from inside this acquisition.
                let mut a = A.lock();
                *b += 1;
                *a += 1;
            }
            // Relaxed: read in `finish`, after the runner's barriers.
            self.step.store(SECOND_ORDER_DONE, Ordering::Relaxed);
        }
        let end = time::now() + time::ms_to_ticks(RUN_MS);
        // Relaxed: a stop condition only; `finish` reads `step` after the
        // runner's barriers.
        while !ctx.should_stop()
            && (self.step.load(Ordering::Relaxed) != SECOND_ORDER_DONE || time::now() < end)
        {
            self.rounds.add(ctx.cpu, 1);
            core::hint::spin_loop();
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        let (reports, cycles) = hooks::lockdep_log();
        // Relaxed: the runner's barriers order every CPU's `run` first.
        let reports = reports - self.before[0].load(Ordering::Relaxed);
        let cycles = cycles - self.before[1].load(Ordering::Relaxed);
        let lockdep = cfg!(feature = "lockdep");
        self.info.report(format_args!(
            "lockdep feature {}, reports {reports}, of which cycles {cycles}",
            if lockdep { "on" } else { "off" },
        ));
        println!(
            "KSYNC-LOCKDEP-EXPECT suite=lockdep lockdep={lockdep} classes=lockdep-A,lockdep-B"
        );
        let failure = if self.step.load(Ordering::Relaxed) != SECOND_ORDER_DONE {
            Some("the two lock orders did not both run")
        } else if lockdep && (reports != 1 || cycles != 1) {
            Some("lockdep did not report the A/B cycle exactly once")
        } else if !lockdep && reports != 0 {
            Some("a lockdep report in an image without lockdep")
        } else {
            None
        };
        let (min, max) = self.rounds.min_max(cpus);
        Summary::new(2, (min, max), failure)
    }
}
