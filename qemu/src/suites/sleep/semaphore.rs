//! `sleep-semaphore`: ksync's [`Semaphore`] on the scheduler: never more
//! holders than units, no unit lost or made up, every thread served, no
//! waiter left asleep.
//!
//! Every member takes a unit again and again (`down` mostly, sometimes
//! `try_down`, sometimes `down_timeout` with a 1 ms timeout in a loop),
//! holds it (busy work, a yield, a 300 µs sleep, or a move to another CPU
//! while holding) and gives it back with `up`. Inside, a holder count
//! (incremented after `down`, decremented before `up`) must never exceed
//! [`UNITS`]: `up` hands its unit over through the semaphore's lock, which
//! orders the giver's decrement before the taker's increment. The timer
//! interrupt of CPU 0 watches every untimed `down` ([`Waits`]): one that
//! waits over [`WAIT_BOUND_MS`] fails the suite (a lost hand-off or
//! starvation; with FIFO hand-off the longest waits seen at `-smp 8` under
//! TCG were a few hundred milliseconds). At the end the
//! count must be [`UNITS`] again, every member must have held a unit, and
//! some waits must have slept.

// Orderings: the holder count is SeqCst only to keep the check's argument
// simple (the semaphore orders it, see above); statistics and `setup`'s
// resets are Relaxed, ordered by the harness's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;

use ksync::kernel::Kernel;
use ksync::semaphore::Semaphore;

use super::{Member, Team, Waits, check_timed_out, maybe_migrate, snooze, start};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::hooks::QemuKernel;
use crate::kernel::time;
use crate::sched::{self, NR_THREADS};
use crate::suites::{Rng, busy_work};

/// The semaphore's units.
pub const UNITS: usize = 3;
/// The longest an untimed `down` may wait.
pub const WAIT_BOUND_MS: u64 = 5_000;
/// The timed `down`'s timeout.
const TIMEOUT: Duration = Duration::from_millis(1);

/// See the module docs.
pub struct SemaphoreSuite {
    info: Info,
    team: Team,
    sem: Semaphore,
    holders: AtomicUsize,
    most: AtomicUsize,
    /// Per thread: whether it takes part, and units it held.
    member: [AtomicBool; NR_THREADS],
    held: [AtomicU64; NR_THREADS],
    waits: Waits,
    /// Per CPU: units held there, `try_down`s refused, timed `down`s that
    /// timed out, `down`s that slept.
    sections: Counters,
    refused: Counters,
    timeouts: Counters,
    slept: Counters,
}

impl SemaphoreSuite {
    const fn new(name: &'static str, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, Kind::Test, budget_ms),
            team: Team::new(),
            sem: Semaphore::new(UNITS),
            holders: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            member: [const { AtomicBool::new(false) }; NR_THREADS],
            held: [const { AtomicU64::new(0) }; NR_THREADS],
            waits: Waits::new(),
            sections: Counters::new(),
            refused: Counters::new(),
            timeouts: Counters::new(),
            slept: Counters::new(),
        }
    }

    /// Takes a unit one of three ways; whether it got one (`false`: a
    /// `try_down` refused, or the run ended during timed waits).
    fn take(&self, ctx: &Ctx, me: usize, rng: &mut Rng) -> bool {
        let blocks = sched::blocks_of(me);
        let got = match rng.below(8) {
            0 => {
                let got = self.sem.try_down();
                if !got {
                    self.refused.add(cpu::current(), 1);
                }
                got
            }
            1 => loop {
                let start = QemuKernel::clock_ns();
                if self.sem.down_timeout(TIMEOUT) {
                    break true;
                }
                check_timed_out(ctx, start, TIMEOUT);
                self.timeouts.add(cpu::current(), 1);
                if self.team.should_stop(ctx) {
                    break false;
                }
            },
            _ => {
                self.waits.begin(me);
                self.sem.down();
                self.waits.end(me);
                true
            }
        };
        if sched::blocks_of(me) != blocks {
            self.slept.add(cpu::current(), 1);
        }
        got
    }

    /// Holds the unit for a while, maybe sleeping or moving meanwhile.
    fn hold(&self, ctx: &Ctx, rng: &mut Rng) {
        let holders = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        if holders > UNITS {
            ctx.fail("more semaphore holders than units");
        }
        self.most.fetch_max(holders, Ordering::Relaxed);
        match rng.below(8) {
            0 => sched::yield_now(),
            1 => snooze(ctx, 300),
            2 => maybe_migrate(ctx, rng, 1),
            _ => busy_work(rng.below(4_000) as u32),
        }
        self.holders.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Member for SemaphoreSuite {
    fn team(&self) -> &Team {
        &self.team
    }

    fn body(&self, ctx: &Ctx) {
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x2545_F491));
        self.member[me].store(true, Ordering::Relaxed);
        self.team.arrive();
        while !self.team.should_stop(ctx) {
            if !self.take(ctx, me, &mut rng) {
                continue;
            }
            self.hold(ctx, &mut rng);
            self.held[me].fetch_add(1, Ordering::Relaxed);
            self.sections.add(cpu::current(), 1);
            self.sem.up();
            busy_work(rng.below(512) as u32);
        }
        self.team.leave();
    }
}

impl Suite for SemaphoreSuite {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        self.holders.store(0, Ordering::Relaxed);
        self.most.store(0, Ordering::Relaxed);
        for (member, held) in self.member.iter().zip(&self.held) {
            member.store(false, Ordering::Relaxed);
            held.store(0, Ordering::Relaxed);
        }
        self.waits.reset();
        self.sections.reset();
        self.refused.reset();
        self.timeouts.reset();
        self.slept.reset();
    }

    fn run(&self, ctx: &Ctx) {
        start(self, ctx);
    }

    /// CPU 0 watches the untimed waits.
    fn irq(&self, ctx: &Ctx) {
        if ctx.cpu == 0
            && self
                .waits
                .overdue(0..NR_THREADS, time::now(), WAIT_BOUND_MS)
        {
            ctx.fail("a down() waited over 5 s: a lost hand-off?");
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        let sections = self.sections.sum(cpus);
        let most = self.most.load(Ordering::Relaxed);
        let count = self.sem.count();
        let slept = self.slept.sum(cpus);
        let members = (0..NR_THREADS).filter(|&id| self.member[id].load(Ordering::Relaxed));
        let unserved = members
            .filter(|&id| self.held[id].load(Ordering::Relaxed) == 0)
            .count();
        self.info.report(format_args!(
            "{sections} units held, at most {most} at once, count {count} at the end; {} try_down refused, {} timed downs timed out, {slept} downs slept, longest down {} ms; {unserved} threads never served; {} migrations",
            self.refused.sum(cpus),
            self.timeouts.sum(cpus),
            self.waits.longest_ms(),
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("held", &self.sections),
                ("refused", &self.refused),
                ("timeouts", &self.timeouts),
                ("slept", &self.slept),
            ],
        );
        let failure = (count != UNITS)
            .then_some("the count is not the units it started with: a unit was lost or made up")
            .or((most != UNITS).then_some("the units were never all held at once"))
            .or((unserved > 0).then_some("a thread never got a unit"))
            .or((slept == 0).then_some("no down() ever slept"));
        Summary::new(sections, self.sections.min_max(cpus), failure)
    }
}

/// ksync's semaphore.
pub static SLEEP_SEMAPHORE: SemaphoreSuite = SemaphoreSuite::new("sleep-semaphore", 1_000);
