//! `sleep-completion`: ksync's [`Completion`] on the scheduler:
//! `complete` lets exactly one waiter through, `complete_all` every
//! waiter, `reinit` starts over, completions from interrupt handlers wake
//! sleeping threads, and timed waits time out on time.
//!
//! The leader (CPU 0's boot thread) runs rounds; every other member
//! (a *waiter*) goes through each round in two steps:
//!
//! 1. the round's gate: `all[r % 2]`, which the leader opens with
//!    `complete_all` and every waiter passes (`wait_for_completion`, or
//!    `wait_for_completion_timeout` with a 1 ms timeout in a loop); the
//!    leader waits until every waiter has passed it. Before it opens
//!    round `r`'s gate it re-arms the other one with `reinit`, which no
//!    waiter uses then: they have all passed round `r - 1`'s gate and
//!    counter;
//! 2. the counter: `one`, which gets one `complete` per waiter per round,
//!    half from the leader and half from the timer interrupts of every
//!    CPU ([`Suite::irq`]); each waiter passes it once
//!    (`try_wait_for_completion` first, then one of the waits above) and
//!    goes on to the next round's gate. The leader waits until the passes
//!    reach the completes issued, and fails the suite if they ever exceed
//!    them (a `complete` that let two through).
//!
//! A lost wake-up keeps a round from completing: after
//! [`ROUND_TIMEOUT_MS`] the leader fails the suite, saying which step. At
//! the end it closes: `complete_all` on all three, until every waiter has
//! left. [`CompletionSuite`] is generic over the completion ([`Done`]).
//!
//! # The control: `sleep-completion-checkfirst`
//!
//! The same suite on [`CheckFirst`], a completion written here from a
//! ksync [`WaitQueue`] and an atomic done count whose waiter checks the
//! count *before* it queues itself and then sleeps until a wake, without
//! looking at the count again, and whose `complete` wakes only if it sees
//! a waiter queued. A `complete` (or `complete_all`) between a waiter's
//! check and its queueing finds nobody to wake: the waiter sleeps with a
//! unit there for it (the classic lost wake-up). The window is widened by
//! a short sleep (up to a tick), as a preemption would. It must be caught
//! by the round timeout.

// Orderings: the round state (`passed`, `issued`, the per-thread rounds,
// the close) is SeqCst, read by the leader while it waits; the completion
// itself orders what the completer did before `complete` with what the
// waiter does after its wait (in [`CheckFirst`]: its count's AcqRel
// read-modify-writes, see there). `irq_quota` is a SeqCst counter shared with
// the interrupt handlers. Statistics and `setup`'s resets are Relaxed,
// ordered by the harness's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;

use ksync::completion::Completion;
use ksync::kernel::Kernel;
use ksync::wait::WaitQueue;

use super::{Member, Team, check_timed_out, maybe_migrate, start, wait_for};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::hooks::QemuKernel;
use crate::sched::{self, NR_THREADS};
use crate::suites::{Rng, busy_work};

/// How long the leader waits for each step of a round.
pub const ROUND_TIMEOUT_MS: u64 = 1_000;
/// The waiters' timed waits.
const TIMEOUT: Duration = Duration::from_millis(1);
/// A waiter waits with a timeout once in this many waits.
const TIMED_ONE_IN: u64 = 4;
/// A worker moves to a random CPU once per this many rounds, on average.
const MIGRATE_ONE_IN: u64 = 8;

/// The control's window between its check and its queueing: `busy_work`
/// iterations, then a sleep of this many nanoseconds (a timer tick at
/// most, as a preemption).
const CHECK_FIRST_WINDOW: u32 = 2_000;
const CHECK_FIRST_SLEEP_NS: u64 = 300_000;

/// A completion the suite runs on: ksync's, or the control's.
pub trait Done: Sync + 'static {
    /// Not done.
    const INIT: Self;
    fn complete(&self);
    fn complete_all(&self);
    fn wait_for_completion(&self);
    fn wait_for_completion_timeout(&self, timeout: Duration) -> bool;
    fn try_wait_for_completion(&self) -> bool;
    fn reinit(&self);
}

impl Done for Completion {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Completion::new();

    fn complete(&self) {
        Completion::complete(self);
    }

    fn complete_all(&self) {
        Completion::complete_all(self);
    }

    fn wait_for_completion(&self) {
        Completion::wait_for_completion(self);
    }

    fn wait_for_completion_timeout(&self, timeout: Duration) -> bool {
        Completion::wait_for_completion_timeout(self, timeout)
    }

    fn try_wait_for_completion(&self) -> bool {
        Completion::try_wait_for_completion(self)
    }

    fn reinit(&self) {
        Completion::reinit(self);
    }
}

/// See the module docs.
pub struct CompletionSuite<C: Done> {
    info: Info,
    team: Team,
    /// The rounds' gates (`complete_all`), used alternately.
    all: [C; 2],
    /// One waiter per `complete`.
    one: C,
    /// Per thread: the rounds whose gate it has passed; whether it waits.
    passed_gate: [AtomicU64; NR_THREADS],
    waiter: [AtomicBool; NR_THREADS],
    waiters: AtomicU64,
    /// Completes of `one` issued (counted before they are made) and
    /// passes through it.
    issued: AtomicU64,
    passed: AtomicU64,
    /// Completes of `one` left for the interrupt handlers.
    irq_quota: AtomicU64,
    closing: AtomicBool,
    rounds: AtomicU64,
    /// Per CPU: completes made by its timer interrupt, passes through
    /// `one`, timed waits that timed out, waits that slept.
    irq_completes: Counters,
    passes: Counters,
    timeouts: Counters,
    slept: Counters,
}

impl<C: Done> CompletionSuite<C> {
    const fn new(name: &'static str, kind: Kind, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            team: Team::new(),
            all: [C::INIT, C::INIT],
            one: C::INIT,
            passed_gate: [const { AtomicU64::new(0) }; NR_THREADS],
            waiter: [const { AtomicBool::new(false) }; NR_THREADS],
            waiters: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            irq_quota: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            irq_completes: Counters::new(),
            passes: Counters::new(),
            timeouts: Counters::new(),
            slept: Counters::new(),
        }
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Waits for `completion`, untimed or (one in [`TIMED_ONE_IN`]) by
    /// timed waits in a loop; counts a wait that blocked.
    fn wait(&self, ctx: &Ctx, rng: &mut Rng, me: usize, completion: &C) {
        let blocks = sched::blocks_of(me);
        if rng.below(TIMED_ONE_IN) == 0 {
            loop {
                let start = QemuKernel::clock_ns();
                if completion.wait_for_completion_timeout(TIMEOUT) {
                    break;
                }
                check_timed_out(ctx, start, TIMEOUT);
                self.timeouts.add(cpu::current(), 1);
            }
        } else {
            completion.wait_for_completion();
        }
        if sched::blocks_of(me) != blocks {
            self.slept.add(cpu::current(), 1);
        }
    }

    fn waiter(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        self.waiter[me].store(true, Ordering::SeqCst);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.team.arrive();
        let mut round = 0u64;
        loop {
            self.wait(ctx, rng, me, &self.all[(round % 2) as usize]);
            if self.closing() {
                break;
            }
            self.passed_gate[me].store(round + 1, Ordering::SeqCst);
            if !self.one.try_wait_for_completion() {
                self.wait(ctx, rng, me, &self.one);
            }
            if self.closing() {
                break;
            }
            self.passed.fetch_add(1, Ordering::SeqCst);
            self.passes.add(cpu::current(), 1);
            busy_work(rng.below(256) as u32);
            maybe_migrate(ctx, rng, MIGRATE_ONE_IN);
            round += 1;
        }
        self.waiter[me].store(false, Ordering::SeqCst);
    }

    fn leader(&self, ctx: &Ctx) {
        self.team.arrive();
        if !self.team.await_all(ctx) {
            return;
        }
        let waiters = self.waiters.load(Ordering::SeqCst);
        let mut round = 0u64;
        // At least one round, whatever the clock says.
        loop {
            // Nobody waits on the other gate: every waiter has passed
            // the previous round (its gate and its counter).
            self.all[((round + 1) % 2) as usize].reinit();
            self.all[(round % 2) as usize].complete_all();
            let through = wait_for(ROUND_TIMEOUT_MS, || {
                (0..NR_THREADS).all(|id| {
                    !self.waiter[id].load(Ordering::SeqCst)
                        || self.passed_gate[id].load(Ordering::SeqCst) > round
                })
            });
            if !through {
                ctx.fail("lost wake-up: complete_all left a waiter asleep");
                return;
            }
            // One complete per waiter: half here, half from interrupts.
            let target = self.issued.fetch_add(waiters, Ordering::SeqCst) + waiters;
            let mine = waiters / 2;
            self.irq_quota.fetch_add(waiters - mine, Ordering::SeqCst);
            for _ in 0..mine {
                self.one.complete();
            }
            let mut excess = false;
            let done = wait_for(ROUND_TIMEOUT_MS, || {
                let passed = self.passed.load(Ordering::SeqCst);
                excess |= passed > self.issued.load(Ordering::SeqCst);
                excess || passed >= target
            });
            if excess {
                ctx.fail("a complete() let more than one waiter through");
                return;
            }
            if !done {
                ctx.fail(if self.irq_quota.load(Ordering::SeqCst) > 0 {
                    "the timer interrupts did not make their completes"
                } else {
                    "lost wake-up: a complete() left its waiter asleep"
                });
                return;
            }
            self.rounds.fetch_add(1, Ordering::Relaxed);
            round += 1;
            if self.team.should_stop(ctx) {
                break;
            }
        }
    }

    /// The leader, after its rounds: every completion done for good,
    /// until every waiter has left.
    fn close(&self, ctx: &Ctx) {
        self.closing.store(true, Ordering::SeqCst);
        let others = self.team.size() - 1;
        for completion in self.all.iter().chain([&self.one]) {
            completion.complete_all();
        }
        if !wait_for(super::CLOSE_TIMEOUT_MS, || self.team.left() >= others) {
            ctx.fail("a waiter never saw the close");
        }
    }
}

impl<C: Done> Member for CompletionSuite<C> {
    fn team(&self) -> &Team {
        &self.team
    }

    fn body(&self, ctx: &Ctx) {
        let me = sched::current();
        if ctx.cpu == 0 && ctx.thread == 0 {
            self.leader(ctx);
            self.close(ctx);
            return;
        }
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x9E37_79B9));
        self.waiter(ctx, me, &mut rng);
        self.team.leave();
    }
}

impl<C: Done> Suite for CompletionSuite<C> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        for completion in self.all.iter().chain([&self.one]) {
            completion.reinit();
        }
        for (passed, waiter) in self.passed_gate.iter().zip(&self.waiter) {
            passed.store(0, Ordering::Relaxed);
            waiter.store(false, Ordering::Relaxed);
        }
        for word in [
            &self.waiters,
            &self.issued,
            &self.passed,
            &self.irq_quota,
            &self.rounds,
        ] {
            word.store(0, Ordering::Relaxed);
        }
        self.closing.store(false, Ordering::Relaxed);
        self.irq_completes.reset();
        self.passes.reset();
        self.timeouts.reset();
        self.slept.reset();
    }

    fn run(&self, ctx: &Ctx) {
        start(self, ctx);
    }

    /// Makes one of the completes the leader left for the interrupts.
    fn irq(&self, ctx: &Ctx) {
        let claimed = self
            .irq_quota
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| q.checked_sub(1))
            .is_ok();
        if claimed {
            self.one.complete();
            self.irq_completes.add(ctx.cpu, 1);
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        let rounds = self.rounds.load(Ordering::Relaxed);
        let passes = self.passes.sum(cpus);
        let from_irq = self.irq_completes.sum(cpus);
        let slept = self.slept.sum(cpus);
        self.info.report(format_args!(
            "{rounds} rounds, {passes} passes through complete() ({from_irq} completes from interrupts), {} timed waits timed out, {slept} waits slept; {} migrations",
            self.timeouts.sum(cpus),
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("passes", &self.passes),
                ("irq_completes", &self.irq_completes),
                ("timeouts", &self.timeouts),
                ("slept", &self.slept),
            ],
        );
        let failure = (rounds == 0)
            .then_some("no round completed")
            .or((from_irq == 0).then_some("no complete() came from an interrupt"))
            .or((slept == 0).then_some("no waiter ever slept"));
        Summary::new(passes, self.passes.min_max(cpus), failure)
    }
}

/// ksync's completion.
pub static SLEEP_COMPLETION: CompletionSuite<Completion> =
    CompletionSuite::new("sleep-completion", Kind::Test, 1_000);
/// The control: check, then sleep; wake only a waiter already queued. It
/// ends at the first lost wake-up, a round timeout after it.
pub static SLEEP_COMPLETION_CHECKFIRST: CompletionSuite<CheckFirst> =
    CompletionSuite::new("sleep-completion-checkfirst", Kind::Control, 1_000);

/// [`CheckFirst`]'s count after `complete_all`: every wait goes through.
const ALL: u64 = u64::MAX;

/// The control's broken completion: a done count and a ksync wait queue.
/// A waiter takes a unit if there is one, else (after a window) queues
/// itself and sleeps until the queue's wake generation moves, without
/// looking at the count after queueing; `complete` raises the count and
/// wakes (moving the generation) only if it sees a waiter queued.
pub struct CheckFirst {
    done: AtomicU64,
    /// Moved by every wake; what a sleeping waiter waits for.
    wakes: AtomicU64,
    queue: WaitQueue,
}

impl CheckFirst {
    /// Takes a unit if there is one (leaves [`ALL`] as it is).
    fn try_take(&self) -> bool {
        // AcqRel: pairs with `give`'s, so what the completer did before
        // `complete` happens before what the waiter does after.
        self.done
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| match d {
                0 => None,
                ALL => Some(ALL),
                d => Some(d - 1),
            })
            .is_ok()
    }

    /// Raises the count to `to(count)`, then wakes only if someone is
    /// queued: the check without the waiter's re-check is the bug.
    fn give(&self, to: impl FnMut(u64) -> Option<u64>, all: bool) {
        // AcqRel: pairs with `try_take`'s.
        let _ = self
            .done
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, to);
        if self.queue.has_waiters() {
            // SeqCst: before the wake, read by the woken waiter's
            // condition after its queueing (the queue's protocol).
            self.wakes.fetch_add(1, Ordering::SeqCst);
            if all {
                self.queue.wake_all();
            } else {
                self.queue.wake_one();
            }
        }
    }

    /// One wait: a unit, or (check first) a sleep until a wake or
    /// `deadline_ns`; whether it took a unit.
    fn wait_once(&self, deadline_ns: Option<u64>) -> bool {
        if self.try_take() {
            return true;
        }
        // The window a wake-up is lost in, widened as a preemption would:
        // a short sleep (up to a tick) that nobody ends early.
        busy_work(CHECK_FIRST_WINDOW);
        QemuKernel::block(Some(QemuKernel::clock_ns() + CHECK_FIRST_SLEEP_NS));
        // SeqCst: as in `give`.
        let seen = self.wakes.load(Ordering::SeqCst);
        let woken = || self.wakes.load(Ordering::SeqCst) != seen;
        match deadline_ns {
            None => self.queue.wait_event_exclusive(woken),
            Some(deadline) => {
                let left = deadline.saturating_sub(QemuKernel::clock_ns());
                let _ = self
                    .queue
                    .wait_event_exclusive_timeout(woken, Duration::from_nanos(left));
            }
        }
        false
    }
}

impl Done for CheckFirst {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        done: AtomicU64::new(0),
        wakes: AtomicU64::new(0),
        queue: WaitQueue::new(),
    };

    fn complete(&self) {
        self.give(|d| (d != ALL).then(|| d + 1), false);
    }

    fn complete_all(&self) {
        self.give(|_| Some(ALL), true);
    }

    fn wait_for_completion(&self) {
        while !self.wait_once(None) {}
    }

    fn wait_for_completion_timeout(&self, timeout: Duration) -> bool {
        let deadline = QemuKernel::clock_ns() + timeout.as_nanos() as u64;
        loop {
            if self.wait_once(Some(deadline)) {
                return true;
            }
            if QemuKernel::clock_ns() >= deadline {
                return self.try_take();
            }
        }
    }

    fn try_wait_for_completion(&self) -> bool {
        self.try_take()
    }

    fn reinit(&self) {
        // Relaxed: nobody waits (the suite's rule, as for ksync's).
        self.done.store(0, Ordering::Relaxed);
    }
}
