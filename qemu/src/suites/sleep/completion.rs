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
//! left.

// Orderings: the round state (`passed`, `issued`, the per-thread rounds,
// the close) is SeqCst, read by the leader while it waits; the completion
// itself orders what the completer did before `complete` with what the
// waiter does after its wait. `irq_quota` is a SeqCst counter shared with
// the interrupt handlers. Statistics and `setup`'s resets are Relaxed,
// ordered by the harness's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;

use ksync::completion::Completion;
use ksync::kernel::Kernel;

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

/// See the module docs.
pub struct CompletionSuite {
    info: Info,
    team: Team,
    /// The rounds' gates (`complete_all`), used alternately.
    all: [Completion; 2],
    /// One waiter per `complete`.
    one: Completion,
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

impl CompletionSuite {
    const fn new(name: &'static str, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, Kind::Test, budget_ms),
            team: Team::new(),
            all: [Completion::new(), Completion::new()],
            one: Completion::new(),
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
    fn wait(&self, ctx: &Ctx, rng: &mut Rng, me: usize, completion: &Completion) {
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

impl Member for CompletionSuite {
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

impl Suite for CompletionSuite {
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
pub static SLEEP_COMPLETION: CompletionSuite = CompletionSuite::new("sleep-completion", 1_000);
