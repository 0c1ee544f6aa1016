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
//! some waits must have slept. [`SemaphoreSuite`] is generic over the
//! semaphore ([`Units`]).
//!
//! # The control: `sleep-semaphore-racydown`
//!
//! The same suite on [`RacyDown`], a semaphore written here from an
//! atomic count and a ksync [`WaitQueue`]: `up` raises the count and wakes
//! the first waiter without handing the unit to it, and a `down` takes a
//! unit by checking the count and then decrementing it, two steps with a
//! window between them (busy work, or a preemption). Two takers that
//! both see the last unit both take it: more holders than units, which
//! the holder count must catch.

// Orderings: the holder count is SeqCst only to keep the check's argument
// simple (the semaphore orders it, see above); statistics and `setup`'s
// resets are Relaxed, ordered by the harness's barriers. [`RacyDown`]'s
// count is AcqRel/Acquire (see there).

use core::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;

use ksync::kernel::Kernel;
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

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

/// The control's window between its check and its decrement
/// (`busy_work` iterations).
const RACY_WINDOW: u32 = 2_000;

/// A semaphore of [`UNITS`] units the suite runs on: ksync's, or the
/// control's.
pub trait Units: Sync + 'static {
    /// [`UNITS`] units free.
    const INIT: Self;
    fn down(&self);
    fn try_down(&self) -> bool;
    fn down_timeout(&self, timeout: Duration) -> bool;
    fn up(&self);
    fn count(&self) -> usize;
}

impl Units for Semaphore {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Semaphore::new(UNITS);

    fn down(&self) {
        Semaphore::down(self);
    }

    fn try_down(&self) -> bool {
        Semaphore::try_down(self)
    }

    fn down_timeout(&self, timeout: Duration) -> bool {
        Semaphore::down_timeout(self, timeout)
    }

    fn up(&self) {
        Semaphore::up(self);
    }

    fn count(&self) -> usize {
        Semaphore::count(self)
    }
}

/// See the module docs.
pub struct SemaphoreSuite<S: Units> {
    info: Info,
    team: Team,
    sem: S,
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

impl<S: Units> SemaphoreSuite<S> {
    const fn new(name: &'static str, kind: Kind, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            team: Team::new(),
            sem: S::INIT,
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

impl<S: Units> Member for SemaphoreSuite<S> {
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

impl<S: Units> Suite for SemaphoreSuite<S> {
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
pub static SLEEP_SEMAPHORE: SemaphoreSuite<Semaphore> =
    SemaphoreSuite::new("sleep-semaphore", Kind::Test, 1_000);
/// The control: check, then decrement. It stops once caught.
pub static SLEEP_SEMAPHORE_RACYDOWN: SemaphoreSuite<RacyDown> =
    SemaphoreSuite::new("sleep-semaphore-racydown", Kind::Control, 1_000);

/// The control's broken semaphore: a count (negative after two takers
/// took one unit) and a ksync wait queue whose exclusive waiters re-check
/// after queueing (no lost wake-up: the bug is the take).
pub struct RacyDown {
    count: AtomicIsize,
    queue: WaitQueue,
}

impl RacyDown {
    /// "Check, then decrement": the mistake this control is about.
    fn take(&self) -> bool {
        // Acquire: pairs with `up`'s Release, so the giver's section
        // happens before the taker's (when the take is not a race).
        if self.count.load(Ordering::Acquire) <= 0 {
            return false;
        }
        // The window another taker sees the same unit in.
        busy_work(RACY_WINDOW);
        // AcqRel: as the load above.
        self.count.fetch_sub(1, Ordering::AcqRel);
        true
    }
}

impl Units for RacyDown {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        count: AtomicIsize::new(UNITS as isize),
        queue: WaitQueue::new(),
    };

    fn down(&self) {
        self.queue.wait_event_exclusive(|| self.take());
    }

    fn try_down(&self) -> bool {
        self.take()
    }

    fn down_timeout(&self, timeout: Duration) -> bool {
        self.queue
            .wait_event_exclusive_timeout(|| self.take(), timeout)
    }

    /// Raises the count and wakes the first waiter, which must take the
    /// unit itself (no hand-off).
    fn up(&self) {
        // Release: pairs with `take`'s Acquire.
        self.count.fetch_add(1, Ordering::Release);
        self.queue.wake_one();
    }

    fn count(&self) -> usize {
        // Relaxed: a snapshot for the report.
        self.count.load(Ordering::Relaxed).max(0) as usize
    }
}
