//! `sched-waitqueue`: many threads on every CPU block on one wait queue
//! (`sched::WaitQueue`, a list under a ksync `IrqTicketMutex`) and are
//! woken by another, with no wake-up lost.
//!
//! A broadcast in rounds: CPU 0's boot thread bumps a generation number,
//! then wakes every waiter (`wake_all`); then it waits (yielding) until
//! every registered taker has seen the new generation. Every other thread
//! (the workers each boot thread starts, [`SPAWN`] per CPU, and in the
//! harness's `sched` mode its workers too) registers, then loops: wait
//! until the generation differs from the last one it saw, record it, do a
//! little work, now and then move to a random CPU. A lost wake-up leaves a
//! taker asleep on a generation it has not seen: the round never
//! completes, and after [`ROUND_TIMEOUT_MS`] the poster fails the suite.
//! At the end the poster closes the queue and the boot threads wake
//! everyone until every worker has ended.
//!
//! # The control: `sched-waitqueue-checkfirst`
//!
//! Takers check the generation first and only then queue themselves and
//! block ("check, then sleep"): a bump and `wake_all` between the check and
//! the queueing find the taker not queued, and it sleeps through the
//! round. It must be caught.

// Orderings: the generation, the close and the registrations are SeqCst
// (see `now`); each taker's `seen` is Relaxed (the poster only waits for
// it to arrive); the round count, the per-CPU statistics and `setup`'s
// resets are Relaxed, ordered by the harness's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters, MAX_CPUS};
use crate::kernel::time;
use crate::sched::{self, NR_THREADS, WaitQueue};

/// Takers each CPU's boot thread starts.
pub const SPAWN: usize = 3;
/// How long the poster waits for every taker to see a round.
pub const ROUND_TIMEOUT_MS: u64 = 1_000;
/// The control's window between its check and its queueing
/// (`busy_work` iterations, then a yield).
const CHECK_FIRST_WINDOW: u32 = 2_000;
/// A taker moves to a random CPU once per this many rounds, on average.
const MIGRATE_ONE_IN: u64 = 16;

/// The suite, or its control (`check_first`).
pub struct WaitTorture {
    info: Info,
    check_first: bool,
    /// Strict FIFO spinlock hand-off for the run (`sched-waitqueue-fifo`):
    /// the shape of a wait queue of many tasks on 8 vCPUs that hung a
    /// kernel with FIFO forced.
    fifo: bool,
    queue: WaitQueue,
    generation: AtomicU64,
    /// Per thread: the last generation it saw, and whether it takes part.
    seen: [AtomicU64; NR_THREADS],
    registered: [AtomicBool; NR_THREADS],
    closing: AtomicBool,
    rounds: AtomicU64,
    /// Per CPU: wake-ups that brought a new generation.
    wakes: Counters,
    /// Per CPU: times a taker blocked there.
    blocks: Counters,
}

impl WaitTorture {
    const fn new(name: &'static str, kind: Kind, check_first: bool, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            check_first,
            fifo: false,
            queue: WaitQueue::new(),
            generation: AtomicU64::new(0),
            seen: [const { AtomicU64::new(0) }; NR_THREADS],
            registered: [const { AtomicBool::new(false) }; NR_THREADS],
            closing: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            wakes: Counters::new(),
            blocks: Counters::new(),
        }
    }

    const fn fifo(mut self) -> Self {
        self.fifo = true;
        self
    }

    /// The generation, or the close.
    ///
    /// SeqCst, with the poster's SeqCst bump and close: the wait queue's
    /// lock orders the waiter's queueing and the waker's `wake_all`, and
    /// these words are read after queueing and written before waking.
    fn now(&self) -> (u64, bool) {
        (
            self.generation.load(Ordering::SeqCst),
            self.closing.load(Ordering::SeqCst),
        )
    }

    /// Waits until the generation is no longer `old` (or the close);
    /// returns the new one.
    fn wait_for_change(&self, old: u64) -> u64 {
        let mut generation = old;
        if self.check_first {
            loop {
                let (g, closing) = self.now();
                generation = g;
                if g != old || closing {
                    break;
                }
                // The control's mistake: queued only after the check. The
                // window is widened by a yield (as a preemption would),
                // so that the poster often runs inside it.
                busy_work(CHECK_FIRST_WINDOW);
                sched::yield_now();
                self.queue.prepare();
                self.blocks.add(cpu::current(), 1);
                sched::block();
            }
            self.queue.finish();
        } else {
            let mut first = true;
            self.queue.wait_until(|| {
                let (g, closing) = self.now();
                generation = g;
                if !first {
                    self.blocks.add(cpu::current(), 1);
                }
                first = false;
                g != old || closing
            });
        }
        generation
    }

    /// What every thread but the boot threads runs.
    fn taker(&self, ctx: &Ctx) {
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x2545_F491));
        // Relaxed for `seen`: the poster reads it only for progress; SeqCst
        // for the registration, so the poster never waits for a taker that
        // left.
        let mut seen = self.generation.load(Ordering::SeqCst);
        self.seen[me].store(seen, Ordering::Relaxed);
        self.registered[me].store(true, Ordering::SeqCst);
        loop {
            seen = self.wait_for_change(seen);
            if self.closing.load(Ordering::SeqCst) {
                break;
            }
            self.seen[me].store(seen, Ordering::Relaxed);
            self.wakes.add(cpu::current(), 1);
            busy_work(rng.below(256) as u32);
            if ctx.cpus > 1 && rng.below(MIGRATE_ONE_IN) == 0 {
                sched::migrate_to(rng.below(ctx.cpus as u64) as usize);
            }
        }
        self.registered[me].store(false, Ordering::SeqCst);
    }

    /// CPU 0's boot thread.
    fn poster(&self, ctx: &Ctx) {
        while !ctx.should_stop() {
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            self.queue.wake_all();
            let deadline = time::now() + time::ms_to_ticks(ROUND_TIMEOUT_MS);
            while (MAX_CPUS..NR_THREADS).any(|id| {
                self.registered[id].load(Ordering::SeqCst)
                    && self.seen[id].load(Ordering::Relaxed) != generation
            }) {
                if time::now() > deadline {
                    ctx.fail("lost wake-up: a taker slept through a round");
                    return;
                }
                ksync::rcu::quiescent_state();
                sched::yield_now();
            }
            self.rounds.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A taker the suite started: `arg` is the address of its suite.
fn worker(arg: usize) {
    // SAFETY: `arg` is the address of one of this file's `static`s, given
    // by `run` below.
    let suite = unsafe { &*(arg as *const WaitTorture) };
    suite.taker(&Ctx::for_thread(cpu::possible()));
}

impl Suite for WaitTorture {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        self.generation.store(0, Ordering::Relaxed);
        self.rounds.store(0, Ordering::Relaxed);
        for (seen, registered) in self.seen.iter().zip(&self.registered) {
            seen.store(0, Ordering::Relaxed);
            registered.store(false, Ordering::Relaxed);
        }
        self.closing.store(false, Ordering::Relaxed);
        self.wakes.reset();
        self.blocks.reset();
        if self.fifo {
            crate::kernel::spin::set_fifo_for_suite();
        }
    }

    fn run(&self, ctx: &Ctx) {
        if sched::current() >= MAX_CPUS {
            self.taker(ctx);
            return;
        }
        for _ in 0..SPAWN {
            let _ = sched::spawn_on(ctx.cpu, worker, self as *const Self as usize);
        }
        if ctx.cpu == 0 {
            self.poster(ctx);
            self.closing.store(true, Ordering::SeqCst);
        }
        // Every worker of the machine, woken until it has seen the close.
        while sched::workers_busy() {
            if self.closing.load(Ordering::SeqCst) {
                self.queue.wake_all();
            }
            ksync::rcu::quiescent_state();
            sched::yield_now();
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        if self.fifo {
            crate::kernel::spin::restore();
        }
        let rounds = self.rounds.load(Ordering::Relaxed);
        let wakes = self.wakes.sum(cpus);
        let blocks = self.blocks.sum(cpus);
        self.info.report(format_args!(
            "{rounds} rounds, {wakes} wake-ups with a new generation, {blocks} blocks; {} migrations",
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info
            .report_per_cpu(cpus, &[("wakes", &self.wakes), ("blocks", &self.blocks)]);
        let failure = (rounds == 0)
            .then_some("no round completed")
            .or((blocks == 0).then_some("no taker ever blocked"));
        Summary::new(wakes, self.wakes.min_max(cpus), failure)
    }
}

/// Prepare, re-check, block: no lost wake-ups.
pub static SCHED_WAITQUEUE: WaitTorture =
    WaitTorture::new("sched-waitqueue", Kind::Test, false, 1_000);
/// The same with strict FIFO hand-off forced for the run: the run-queue
/// and wait-queue locks queue every waiter, and a waiter whose vCPU the
/// host descheduled holds up everyone behind it; the rounds must still
/// end in time (FIFO waiters give the CPU away every `SPIN_LIMIT` rounds).
pub static SCHED_WAITQUEUE_FIFO: WaitTorture =
    WaitTorture::new("sched-waitqueue-fifo", Kind::Test, false, 1_000).fifo();
/// The control: check, then sleep. A longer budget (it ends at the first
/// lost wake-up): at -smp 8 on two host cores a round takes ~100 ms, and
/// each round is one chance to lose one.
pub static SCHED_WAITQUEUE_CHECKFIRST: WaitTorture =
    WaitTorture::new("sched-waitqueue-checkfirst", Kind::Control, true, 2_000);

/// This file's suites, for the registry.
pub static SUITES: &[&dyn Suite] = &[
    &SCHED_WAITQUEUE,
    &SCHED_WAITQUEUE_FIFO,
    &SCHED_WAITQUEUE_CHECKFIRST,
];
