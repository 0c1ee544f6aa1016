//! `sleep-waitqueue`: ksync's [`WaitQueue`] on the scheduler, with
//! non-exclusive and exclusive waiters on one queue, timed waits, and no
//! wake-up lost.
//!
//! The leader (CPU 0's boot thread) runs rounds. In each it bumps a
//! generation number and calls `wake_all` (the broadcast), then adds 1 to
//! 4 items and calls `wake_one` (one item) or `wake_n(k)`; then it waits
//! until every *taker* has seen the new generation and every item has been
//! consumed. Members other than the leader are takers (threads 0 and 2 of
//! each CPU) or *consumers* (thread 1):
//!
//! * a taker waits, non-exclusively, until the generation differs from
//!   the last one it saw: by `wait_event` mostly, sometimes by
//!   `wait_event_timeout` with a 2 ms timeout in a loop (a timeout must
//!   not end early: [`check_timed_out`]); then it records the generation,
//!   works a little, and now and then moves to a random CPU;
//! * a consumer waits, exclusively, until it can take an item (its
//!   condition takes one, as Linux's `wait_event_exclusive` users do).
//!
//! A lost wake-up leaves a taker asleep on an old generation or an item
//! unconsumed with consumers asleep: the round does not complete, and
//! after [`ROUND_TIMEOUT_MS`] the leader fails the suite, saying which.
//! At the end it closes the queue and wakes everyone until every member
//! has left. `finish` checks that rounds completed, that items were
//! produced and consumed in equal numbers, and that waiters really slept
//! (`sched::blocks_of`).
//!
//! # The control: `sleep-waitqueue-checkfirst`
//!
//! The takers wait on [`CheckFirstQueue`] instead, a wait queue written
//! here on the same hooks (`Kernel::current_task`, `block`, `wake`) that
//! checks the condition *before* it queues the waiter ("check, then
//! sleep"): a broadcast between a taker's check and its queueing finds
//! it not queued, and it sleeps through the round (until a later wake).
//! The window is widened by a short sleep (up to a tick), as a preemption
//! would. It must be caught by the round timeout.

// Orderings: the generation, the items, the close and the takers'
// registrations are SeqCst: the wait queue's lock orders a waiter's
// queueing and a waker's wake, and these words are read after queueing and
// written before waking (the protocol `WaitQueue` documents). Each taker's
// `seen` is Relaxed (the leader only waits for it to arrive); statistics
// and `setup`'s resets are Relaxed, ordered by the harness's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;

use ksync::kernel::Kernel;
use ksync::spinlock::IrqTicketMutex;
use ksync::wait::WaitQueue;

use super::{Member, Team, check_timed_out, maybe_migrate, start, wait_for};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::hooks::QemuKernel;
use crate::sched::{self, NR_THREADS};
use crate::suites::{Rng, busy_work};

/// How long the leader waits for a round to complete.
pub const ROUND_TIMEOUT_MS: u64 = 1_000;
/// The takers' timed waits.
const TAKER_TIMEOUT: Duration = Duration::from_millis(2);
/// A taker waits with a timeout once in this many waits.
const TIMED_ONE_IN: u64 = 4;
/// A worker moves to a random CPU once per this many waits, on average.
const MIGRATE_ONE_IN: u64 = 16;
/// The control's window between its check and its queueing: `busy_work`
/// iterations, then a sleep of this many nanoseconds (a timer tick at
/// most, as a preemption).
const CHECK_FIRST_WINDOW: u32 = 2_000;
const CHECK_FIRST_SLEEP_NS: u64 = 300_000;

/// The suite, or its control (`check_first`).
pub struct WaitSuite {
    info: Info,
    check_first: bool,
    team: Team,
    /// ksync's queue: the consumers, and the takers of the test.
    queue: WaitQueue,
    /// The control's takers' queue.
    broken: CheckFirstQueue,
    generation: AtomicU64,
    items: AtomicU64,
    closing: AtomicBool,
    /// Per thread: the last generation it saw, and whether it is a taker.
    seen: [AtomicU64; NR_THREADS],
    taker: [AtomicBool; NR_THREADS],
    consumers: AtomicU64,
    rounds: AtomicU64,
    produced: AtomicU64,
    /// Per CPU: generations seen, items consumed, timed waits that timed
    /// out, and waits that slept (the waiter blocked at least once).
    seen_count: Counters,
    consumed: Counters,
    timeouts: Counters,
    slept: Counters,
}

impl WaitSuite {
    const fn new(name: &'static str, kind: Kind, check_first: bool, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            check_first,
            team: Team::new(),
            queue: WaitQueue::new(),
            broken: CheckFirstQueue::new(),
            generation: AtomicU64::new(0),
            items: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            seen: [const { AtomicU64::new(0) }; NR_THREADS],
            taker: [const { AtomicBool::new(false) }; NR_THREADS],
            consumers: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            produced: AtomicU64::new(0),
            seen_count: Counters::new(),
            consumed: Counters::new(),
            timeouts: Counters::new(),
            slept: Counters::new(),
        }
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Takes an item if there is one.
    fn take_item(&self) -> bool {
        let mut items = self.items.load(Ordering::SeqCst);
        while items > 0 {
            match self.items.compare_exchange_weak(
                items,
                items - 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => items = now,
            }
        }
        false
    }

    /// Waits until the generation is no longer `old` or the close; returns
    /// the generation.
    fn wait_for_change(&self, ctx: &Ctx, rng: &mut Rng, old: u64) -> u64 {
        let mut generation = old;
        let mut changed = || {
            generation = self.generation.load(Ordering::SeqCst);
            generation != old || self.closing()
        };
        if self.check_first {
            self.broken.wait_event(changed);
        } else if rng.below(TIMED_ONE_IN) == 0 {
            loop {
                let start = QemuKernel::clock_ns();
                if self.queue.wait_event_timeout(&mut changed, TAKER_TIMEOUT) {
                    break;
                }
                check_timed_out(ctx, start, TAKER_TIMEOUT);
                self.timeouts.add(cpu::current(), 1);
            }
        } else {
            self.queue.wait_event(changed);
        }
        generation
    }

    fn taker(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        let mut seen = self.generation.load(Ordering::SeqCst);
        self.seen[me].store(seen, Ordering::Relaxed);
        self.taker[me].store(true, Ordering::SeqCst);
        self.team.arrive();
        loop {
            let blocks = sched::blocks_of(me);
            seen = self.wait_for_change(ctx, rng, seen);
            if sched::blocks_of(me) != blocks {
                self.slept.add(cpu::current(), 1);
            }
            if self.closing() {
                break;
            }
            self.seen[me].store(seen, Ordering::Relaxed);
            self.seen_count.add(cpu::current(), 1);
            busy_work(rng.below(256) as u32);
            maybe_migrate(ctx, rng, MIGRATE_ONE_IN);
        }
    }

    fn consumer(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        self.consumers.fetch_add(1, Ordering::SeqCst);
        self.team.arrive();
        loop {
            let blocks = sched::blocks_of(me);
            let mut took = false;
            self.queue.wait_event_exclusive(|| {
                took = self.take_item();
                took || self.closing()
            });
            if sched::blocks_of(me) != blocks {
                self.slept.add(cpu::current(), 1);
            }
            if !took {
                break;
            }
            self.consumed.add(cpu::current(), 1);
            busy_work(rng.below(256) as u32);
            maybe_migrate(ctx, rng, MIGRATE_ONE_IN);
        }
    }

    /// The broadcast: every taker re-checks.
    fn broadcast(&self) {
        if self.check_first {
            self.broken.wake_all();
        } else {
            self.queue.wake_all();
        }
    }

    fn leader(&self, ctx: &Ctx, rng: &mut Rng) {
        self.team.arrive();
        if !self.team.await_all(ctx) {
            return;
        }
        let consumers = self.consumers.load(Ordering::SeqCst) > 0;
        // At least one round, whatever the clock says.
        loop {
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            self.broadcast();
            if consumers {
                let k = 1 + rng.below(4);
                self.items.fetch_add(k, Ordering::SeqCst);
                self.produced.fetch_add(k, Ordering::Relaxed);
                if k == 1 {
                    self.queue.wake_one();
                } else {
                    self.queue.wake_n(k as usize);
                }
            }
            let behind = |id: usize| {
                self.taker[id].load(Ordering::SeqCst)
                    && self.seen[id].load(Ordering::Relaxed) != generation
            };
            let done = wait_for(ROUND_TIMEOUT_MS, || {
                !(0..NR_THREADS).any(behind) && self.items.load(Ordering::SeqCst) == 0
            });
            if !done {
                ctx.fail(if (0..NR_THREADS).any(behind) {
                    "lost wake-up: a taker slept through a broadcast"
                } else {
                    "lost wake-up: an item stayed unconsumed with consumers asleep"
                });
                break;
            }
            self.rounds.fetch_add(1, Ordering::Relaxed);
            if self.team.should_stop(ctx) {
                break;
            }
        }
    }

    /// The leader, after its rounds: close and wake everyone until every
    /// member has left.
    fn close(&self, ctx: &Ctx) {
        self.closing.store(true, Ordering::SeqCst);
        let others = self.team.size() - 1;
        let left = wait_for(super::CLOSE_TIMEOUT_MS, || {
            self.broadcast();
            self.queue.wake_all();
            self.team.left() >= others
        });
        if !left {
            ctx.fail("a waiter never saw the close");
        }
    }
}

impl Member for WaitSuite {
    fn team(&self) -> &Team {
        &self.team
    }

    fn body(&self, ctx: &Ctx) {
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x2545_F491));
        if ctx.cpu == 0 && ctx.thread == 0 {
            self.leader(ctx, &mut rng);
            self.close(ctx);
            return;
        }
        if ctx.thread % 3 == 1 {
            self.consumer(ctx, me, &mut rng);
        } else {
            self.taker(ctx, me, &mut rng);
            self.taker[me].store(false, Ordering::SeqCst);
        }
        self.team.leave();
    }
}

impl Suite for WaitSuite {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        self.generation.store(0, Ordering::Relaxed);
        self.items.store(0, Ordering::Relaxed);
        self.closing.store(false, Ordering::Relaxed);
        for (seen, taker) in self.seen.iter().zip(&self.taker) {
            seen.store(0, Ordering::Relaxed);
            taker.store(false, Ordering::Relaxed);
        }
        self.consumers.store(0, Ordering::Relaxed);
        self.rounds.store(0, Ordering::Relaxed);
        self.produced.store(0, Ordering::Relaxed);
        self.seen_count.reset();
        self.consumed.reset();
        self.timeouts.reset();
        self.slept.reset();
    }

    fn run(&self, ctx: &Ctx) {
        start(self, ctx);
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        let rounds = self.rounds.load(Ordering::Relaxed);
        let produced = self.produced.load(Ordering::Relaxed);
        let consumed = self.consumed.sum(cpus);
        let left = self.items.load(Ordering::Relaxed);
        let seen = self.seen_count.sum(cpus);
        let slept = self.slept.sum(cpus);
        self.info.report(format_args!(
            "{rounds} rounds, {seen} generations seen, {produced} items produced, {consumed} consumed ({left} left), {} timed waits timed out, {slept} waits slept; {} migrations",
            self.timeouts.sum(cpus),
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("seen", &self.seen_count),
                ("consumed", &self.consumed),
                ("timeouts", &self.timeouts),
                ("slept", &self.slept),
            ],
        );
        let failure = (rounds == 0)
            .then_some("no round completed")
            .or((produced != consumed + left).then_some("items were lost or made up"))
            .or((slept == 0).then_some("no waiter ever slept"));
        Summary::new(seen + consumed, self.seen_count.min_max(cpus), failure)
    }
}

/// ksync's wait queue: no lost wake-ups.
pub static SLEEP_WAITQUEUE: WaitSuite = WaitSuite::new("sleep-waitqueue", Kind::Test, false, 1_000);
/// The control: check, then sleep. A longer budget (it ends at the first
/// lost wake-up, a round timeout after it).
pub static SLEEP_WAITQUEUE_CHECKFIRST: WaitSuite =
    WaitSuite::new("sleep-waitqueue-checkfirst", Kind::Control, true, 2_000);

/// The control's broken wait queue: task tokens under a lock, woken by
/// the kernel's hooks as ksync's queue does, but its waiters check the
/// condition before they queue themselves.
pub struct CheckFirstQueue {
    tokens: IrqTicketMutex<Tokens>,
}

/// Queued task tokens, in arrival order.
struct Tokens {
    ids: [usize; NR_THREADS],
    len: usize,
}

impl CheckFirstQueue {
    const fn new() -> Self {
        Self {
            tokens: IrqTicketMutex::new(Tokens {
                ids: [0; NR_THREADS],
                len: 0,
            }),
        }
    }

    /// "Check, then sleep": the mistake this control is about.
    fn wait_event(&self, mut cond: impl FnMut() -> bool) {
        let me = QemuKernel::current_task();
        loop {
            if cond() {
                break;
            }
            // The window a wake-up is lost in, widened as a preemption
            // would: a short sleep (up to a tick) that nobody ends early.
            busy_work(CHECK_FIRST_WINDOW);
            QemuKernel::block(Some(QemuKernel::clock_ns() + CHECK_FIRST_SLEEP_NS));
            {
                let mut tokens = self.tokens.lock();
                let len = tokens.len;
                if !tokens.ids[..len].contains(&me) {
                    tokens.ids[len] = me;
                    tokens.len += 1;
                }
            }
            QemuKernel::block(None);
        }
        let mut tokens = self.tokens.lock();
        let len = tokens.len;
        if let Some(i) = tokens.ids[..len].iter().position(|&t| t == me) {
            tokens.ids.copy_within(i + 1..len, i);
            tokens.len -= 1;
        }
    }

    /// Wakes every queued waiter (under the lock, as ksync's queue does:
    /// a waiter leaves only after taking it).
    fn wake_all(&self) {
        let mut tokens = self.tokens.lock();
        for &token in &tokens.ids[..tokens.len] {
            QemuKernel::wake(token);
        }
        tokens.len = 0;
    }
}
