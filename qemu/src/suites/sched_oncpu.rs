//! `sched-wake-oncpu-fifo`: the wake path of ArceOS's wait queue
//! (arceos-org/arceos 8d2e6f97, `modules/axtask`), with strict FIFO
//! spinlock hand-off forced, in the shape of its `wait_queue` app's
//! `test_wait()`, which hung with FIFO forced at SMP 8 on a two-core host
//! (issue 37, part 3; `docs/fifo-hang.md`).
//!
//! What it copies from ArceOS, and `sched-waitqueue` does not:
//!
//! * **The waiter queues itself and switches out with interrupts off.**
//!   `WaitQueue::wait_until` takes the run queue with preemption and
//!   interrupts off (`NoPreemptIrqSave`), then the queue's `SpinNoIrq`
//!   lock, checks, pushes itself, drops the queue lock and reschedules,
//!   interrupts still off: here [`ArceWq::wait_until`], interrupts off
//!   from before the queue lock until `sched::block` switches out.
//! * **The waker waits for the woken task's switch, holding the queue
//!   lock with interrupts off.** `notify_one` pops a task under the queue
//!   lock and, still holding it, `put_task_with_state` spins while the task
//!   is `on_cpu` (its CPU has not finished switching away from it; that
//!   CPU needs its own run-queue lock, FIFO, to get there), then takes the
//!   run-queue lock of a CPU picked round-robin (`select_run_queue`) and
//!   queues it. Here [`ArceWq::notify_one`] spins while
//!   `sched::is_running(id)` (which turns false once the task's CPU holds
//!   its run-queue lock in the switch), then `sched::wake(id, cpu)` onto a
//!   round-robin CPU (that CPU's run-queue lock, FIFO), the queue lock held.
//! * **The app's rounds.** A "main" thread spawns up to [`TASKS`] tasks
//!   round-robin over the CPUs; each adds 1 to a counter, wakes main
//!   (`WQ1.notify_one`), waits on `WQ2`, then subtracts 1 and wakes main
//!   again. Main waits on `WQ1` for the counter to reach the task count,
//!   waits (yielding) until every task is on `WQ2`, wakes them all, waits
//!   on `WQ1` for the counter to come back to 0 and for the tasks to end.
//!   The CPUs' boot threads yield, or sleep until the next interrupt, in
//!   a loop, as ArceOS's idle tasks do; the runner's extra threads in
//!   scheduler mode end at once.
//!
//! A round that takes longer than [`STUCK_MS`] fails the suite (and the
//! boot's timeout catches a hang that stops every CPU). `finish` reports
//! the rounds, the longest round and the longest wait of a waker for a
//! task's switch with the queue lock held.
//!
//! `sched-wake-oncpu` is the same in the mode the kernel found (ksync's
//! default), for comparison.

// Orderings: the counter, the round and the release are SeqCst (the
// ArceOS app's Acquire/Release, made SeqCst so the queue lock's order and
// theirs agree); statistics are Relaxed, read after the runner's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ksync::spinlock::IrqTicketMutex;

use crate::arch;
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::time;
use crate::sched::{self, NR_THREADS};

/// The spin-wait policy of these suites: ksync's bare-metal default (keep
/// spinning), counting the calls (a lock waiter that spun `SPIN_LIMIT`
/// rounds) by whether interrupts were masked: with a `wait` that halts
/// with `hlt` each masked one would never return, and with one that opens
/// interrupts (`sti; hlt`) each is a window in which a handler taking the
/// same lock deadlocks under FIFO hand-off (`docs/fifo-hang.md`).
static COUNTING: ksync::kernel::SpinWait = ksync::kernel::SpinWait {
    wait: counting_wait,
    kick: None,
};
static MASKED_WAITS: AtomicU64 = AtomicU64::new(0);
static OPEN_WAITS: AtomicU64 = AtomicU64::new(0);

fn counting_wait() {
    // Relaxed: statistics, read after the runner's barriers.
    if arch::irq_enabled() {
        OPEN_WAITS.fetch_add(1, Ordering::Relaxed);
    } else {
        MASKED_WAITS.fetch_add(1, Ordering::Relaxed);
    }
    core::hint::spin_loop();
}

/// Tasks main spawns per round (ArceOS's `NUM_TASKS`); fewer when the
/// worker pool has fewer free slots.
pub const TASKS: usize = 16;
/// A round that takes longer fails the suite: a normal round takes a few
/// ms at `-smp 8` on two host cores; 100 times that is far beyond a slow
/// but live FIFO convoy, and short enough to end inside the boot's
/// timeout.
pub const STUCK_MS: u64 = 10_000;

/// ArceOS's wait queue: thread ids in arrival order under a lock taken
/// with interrupts off (`SpinNoIrq<VecDeque<AxTaskRef>>`).
struct ArceWq {
    waiters: IrqTicketMutex<Ids>,
}

struct Ids {
    ids: [u8; NR_THREADS],
    len: usize,
}

impl ArceWq {
    const fn new() -> Self {
        Self {
            waiters: IrqTicketMutex::new(Ids {
                ids: [0; NR_THREADS],
                len: 0,
            }),
        }
    }

    /// ArceOS's `wait_until`: interrupts off (its `NoPreemptIrqSave`; in
    /// this scheduler a thread with interrupts off is never preempted),
    /// then the queue lock; check; push itself, drop the lock and switch
    /// out with interrupts still off. A wake-up that comes between the
    /// unlock and the switch makes `block` return at once.
    fn wait_until(&self, suite: &OnCpu, mut condition: impl FnMut() -> bool) {
        let me = sched::current();
        loop {
            let was_on = arch::irq_enabled();
            arch::irq_disable();
            let mut waiters = self.waiters.lock();
            if condition() {
                drop(waiters);
                if was_on {
                    arch::irq_enable();
                }
                return;
            }
            let len = waiters.len;
            waiters.ids[len] = me as u8;
            waiters.len += 1;
            // The guard restores the state it saved: interrupts off.
            drop(waiters);
            suite.blocks.add(cpu::current(), 1);
            sched::block();
            if was_on {
                arch::irq_enable();
            }
        }
    }

    /// ArceOS's `notify_one` + `unblock_one_task` + `put_task_with_state`:
    /// pops the first waiter and, holding the queue lock with interrupts
    /// off, waits until its CPU has switched away from it (`on_cpu`), then
    /// queues it on a CPU picked round-robin.
    fn notify_one(&self, suite: &OnCpu) -> bool {
        let was_on = arch::irq_enabled();
        arch::irq_disable();
        let mut waiters = self.waiters.lock();
        let woke = waiters.len > 0;
        if woke {
            let id = usize::from(waiters.ids[0]);
            let len = waiters.len;
            waiters.ids.copy_within(1..len, 0);
            waiters.len = len - 1;
            let start = time::now();
            while sched::is_running(id) {
                core::hint::spin_loop();
            }
            let waited = time::now().saturating_sub(start);
            suite.oncpu_max.fetch_max(waited, Ordering::Relaxed);
            // Relaxed: a placement counter, as ArceOS's `RUN_QUEUE_INDEX`.
            let target = suite.next_rq.fetch_add(1, Ordering::Relaxed) % suite.cpus();
            sched::wake(id, target);
            suite.wakes.add(cpu::current(), 1);
        }
        drop(waiters);
        if was_on {
            arch::irq_enable();
        }
        woke
    }

    fn len(&self) -> usize {
        self.waiters.lock().len
    }

    /// Empty again (setup, every CPU quiet).
    fn reset(&self) {
        self.waiters.lock().len = 0;
    }
}

/// The suite.
pub struct OnCpu {
    info: Info,
    fifo: bool,
    wq1: ArceWq,
    wq2: ArceWq,
    counter: AtomicUsize,
    /// The round main runs, and the last round main released from `WQ2`.
    round: AtomicU64,
    released: AtomicU64,
    /// Tasks spawned in the running round.
    spawned: AtomicUsize,
    main_done: AtomicBool,
    cpus: AtomicUsize,
    next_rq: AtomicUsize,
    rounds: AtomicU64,
    /// Counter ticks: the round's start, the longest round, the longest
    /// wait of a waker for a task's switch (queue lock held).
    round_start: AtomicU64,
    round_max: AtomicU64,
    oncpu_max: AtomicU64,
    stuck: AtomicBool,
    /// The spin mode the run had (`VcpuMode::Fifo` for the FIFO suite).
    fifo_run: AtomicBool,
    wakes: Counters,
    blocks: Counters,
}

impl OnCpu {
    const fn new(name: &'static str, fifo: bool) -> Self {
        Self {
            info: Info::new(name, Kind::Test, 1_500),
            fifo,
            wq1: ArceWq::new(),
            wq2: ArceWq::new(),
            counter: AtomicUsize::new(0),
            round: AtomicU64::new(0),
            released: AtomicU64::new(0),
            spawned: AtomicUsize::new(0),
            main_done: AtomicBool::new(false),
            cpus: AtomicUsize::new(1),
            next_rq: AtomicUsize::new(0),
            rounds: AtomicU64::new(0),
            round_start: AtomicU64::new(0),
            round_max: AtomicU64::new(0),
            oncpu_max: AtomicU64::new(0),
            stuck: AtomicBool::new(false),
            fifo_run: AtomicBool::new(false),
            wakes: Counters::new(),
            blocks: Counters::new(),
        }
    }

    fn cpus(&self) -> usize {
        self.cpus.load(Ordering::Relaxed).max(1)
    }

    /// The app's task body.
    fn task(&self) {
        let round = self.round.load(Ordering::SeqCst);
        self.counter.fetch_add(1, Ordering::SeqCst);
        self.wq1.notify_one(self);
        self.wq2
            .wait_until(self, || self.released.load(Ordering::SeqCst) >= round);
        self.counter.fetch_sub(1, Ordering::SeqCst);
        self.wq1.notify_one(self);
    }

    /// The app's main task, round after round until the budget is spent.
    fn main(&self, ctx: &Ctx) {
        let mut ids = [0usize; TASKS];
        while !ctx.should_stop() {
            let round = self.round.fetch_add(1, Ordering::SeqCst) + 1;
            self.round_start.store(time::now(), Ordering::Relaxed);
            let mut n = 0;
            for (i, slot) in ids.iter_mut().enumerate() {
                let arg = self as *const Self as usize;
                match sched::spawn_on(i % self.cpus(), task_entry, arg) {
                    Some(id) => {
                        *slot = id;
                        n += 1;
                    }
                    None => break,
                }
            }
            if n == 0 {
                ctx.fail("no worker slot free for a task");
                break;
            }
            self.spawned.store(n, Ordering::SeqCst);
            self.wq1
                .wait_until(self, || self.counter.load(Ordering::SeqCst) == n);
            while self.wq2.len() < n {
                sched::yield_now();
            }
            self.released.store(round, Ordering::SeqCst);
            while self.wq2.notify_one(self) {}
            self.wq1
                .wait_until(self, || self.counter.load(Ordering::SeqCst) == 0);
            while ids[..n].iter().any(|&id| !sched::is_free(id)) {
                sched::yield_now();
            }
            let took = time::now().saturating_sub(self.round_start.load(Ordering::Relaxed));
            self.round_max.fetch_max(took, Ordering::Relaxed);
            self.rounds.fetch_add(1, Ordering::Relaxed);
        }
        self.main_done.store(true, Ordering::SeqCst);
    }

    /// CPU 0's boot thread while main runs: fails the suite if a round
    /// takes longer than [`STUCK_MS`] (then lets main's tasks go: the
    /// boot must end for the report).
    fn watch(&self, ctx: &Ctx) {
        while !self.main_done.load(Ordering::SeqCst) {
            let start = self.round_start.load(Ordering::Relaxed);
            if start != 0 && time::now() > start + time::ms_to_ticks(STUCK_MS) {
                self.stuck.store(true, Ordering::Relaxed);
                ctx.fail("a round of the ArceOS wait-queue pattern made no progress for 10 s");
                return;
            }
            sched::relax();
        }
    }
}

/// A task of main's round: `arg` is the address of its suite.
fn task_entry(arg: usize) {
    // SAFETY: `arg` is the address of one of this file's `static`s, given
    // by `OnCpu::main`.
    let suite = unsafe { &*(arg as *const OnCpu) };
    suite.task();
}

/// Main: `arg` is the address of its suite.
fn main_entry(arg: usize) {
    // SAFETY: as in `task_entry`.
    let suite = unsafe { &*(arg as *const OnCpu) };
    suite.main(&Ctx::for_thread(suite.cpus()));
}

impl Suite for OnCpu {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.wq1.reset();
        self.wq2.reset();
        self.counter.store(0, Ordering::Relaxed);
        self.round.store(0, Ordering::Relaxed);
        self.released.store(0, Ordering::Relaxed);
        self.spawned.store(0, Ordering::Relaxed);
        self.main_done.store(false, Ordering::Relaxed);
        self.cpus.store(cpus, Ordering::Relaxed);
        self.next_rq.store(0, Ordering::Relaxed);
        self.rounds.store(0, Ordering::Relaxed);
        self.round_start.store(0, Ordering::Relaxed);
        self.round_max.store(0, Ordering::Relaxed);
        self.oncpu_max.store(0, Ordering::Relaxed);
        self.stuck.store(false, Ordering::Relaxed);
        self.wakes.reset();
        self.blocks.reset();
        MASKED_WAITS.store(0, Ordering::Relaxed);
        OPEN_WAITS.store(0, Ordering::Relaxed);
        // Every CPU is quiet here: the policy is in place before any
        // lock of the run is contended (`set_spin_wait`'s rule).
        ksync::kernel::set_spin_wait(&COUNTING);
        if self.fifo {
            crate::kernel::spin::set_fifo_for_suite();
        }
        self.fifo_run.store(
            ksync::kernel::vcpu_mode() == ksync::kernel::VcpuMode::Fifo,
            Ordering::Relaxed,
        );
    }

    fn run(&self, ctx: &Ctx) {
        if ctx.thread != 0 {
            // The runner's extra threads in scheduler mode: not part of
            // the app (with them yielding to each other the rounds took
            // seconds in both modes, measured at a host load of 29).
            return;
        }
        if ctx.cpu == 0 {
            if sched::spawn_on(0, main_entry, self as *const Self as usize).is_none() {
                ctx.fail("no worker slot free for main");
                self.main_done.store(true, Ordering::SeqCst);
            }
            self.watch(ctx);
        }
        // Everyone else, as ArceOS's idle tasks: yield, or sleep until the
        // next interrupt when nothing else is runnable here (`yield_now`
        // then `hlt`), until main is done.
        // After a failure main's tasks may be stuck on a queue: keep
        // releasing and waking them so that the boot can end and report.
        while !self.main_done.load(Ordering::SeqCst) {
            if ctx.failed() {
                self.released.store(u64::MAX, Ordering::SeqCst);
                self.counter.store(0, Ordering::SeqCst);
                self.wq1.notify_one(self);
                self.wq2.notify_one(self);
            }
            sched::relax();
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        ksync::kernel::set_spin_wait(&crate::kernel::spin::SPINNING);
        if self.fifo {
            crate::kernel::spin::restore();
        }
        let rounds = self.rounds.load(Ordering::Relaxed);
        let wakes = self.wakes.sum(cpus);
        let blocks = self.blocks.sum(cpus);
        self.info.report(format_args!(
            "{} mode: {rounds} rounds of {} tasks, longest round {} ms, longest wait for a task's switch with the queue lock held {} us; {wakes} wake-ups, {blocks} blocks",
            if self.fifo_run.load(Ordering::Relaxed) {
                "fifo"
            } else {
                "default"
            },
            self.spawned.load(Ordering::Relaxed),
            time::ticks_to_ms(self.round_max.load(Ordering::Relaxed)),
            time::ticks_to_ns(self.oncpu_max.load(Ordering::Relaxed)) / 1_000,
        ));
        self.info
            .report_per_cpu(cpus, &[("wakes", &self.wakes), ("blocks", &self.blocks)]);
        self.info.report(format_args!(
            "lock waiters that spun SPIN_LIMIT rounds and called SpinWait::wait: {} with interrupts masked, {} with interrupts on",
            MASKED_WAITS.load(Ordering::Relaxed),
            OPEN_WAITS.load(Ordering::Relaxed),
        ));
        let failure = if self.stuck.load(Ordering::Relaxed) {
            Some("a round made no progress for 10 s")
        } else if self.fifo && !self.fifo_run.load(Ordering::Relaxed) {
            Some("strict FIFO was not in force")
        } else if rounds == 0 {
            Some("no round completed")
        } else {
            None
        };
        Summary::new(wakes, self.wakes.min_max(cpus), failure)
    }
}

/// The pattern with strict FIFO hand-off forced for the run.
pub static SCHED_WAKE_ONCPU_FIFO: OnCpu = OnCpu::new("sched-wake-oncpu-fifo", true);
/// The same in the mode the kernel found, for comparison.
pub static SCHED_WAKE_ONCPU: OnCpu = OnCpu::new("sched-wake-oncpu", false);

/// This file's suites, for the registry.
pub static SUITES: &[&dyn Suite] = &[&SCHED_WAKE_ONCPU_FIFO, &SCHED_WAKE_ONCPU];
