//! Runs the plan: every CPU goes through the same list of suites in lock
//! step, and the boot CPU judges and reports each one.
//!
//! For each suite:
//!
//! 1. The boot CPU resets the shared state, calls [`Suite::setup`], sets the
//!    deadline and makes the suite *active*: from then on every timer
//!    interrupt on every CPU also calls [`Suite::irq`].
//! 2. All CPUs meet at a barrier and call [`Suite::run`] in thread context,
//!    interrupts on, until [`Ctx::should_stop`].
//! 3. Each CPU disables its interrupts and meets the others at a barrier: an
//!    interrupt handler runs to completion before its CPU's thread code
//!    continues, so from now on no handler is running suite code anywhere.
//! 4. The boot CPU deactivates the suite, calls [`Suite::finish`], checks that
//!    every CPU took timer interrupts during the suite, and prints the
//!    `KSYNC-RESULT` line. A barrier later, everyone re-enables interrupts.
//!
//! RCU: `Ctx::should_stop` reports a quiescent state (the point between two
//! operations), and CPUs waiting at the barriers are idle (`kernel::rcu`),
//! so a suite whose `run` waits for grace periods never waits for a CPU
//! that already finished.
//!
//! RCU stall reports (`kernel::hooks`) fail the suite during which they
//! came, unless it expects them ([`Suite::expects_rcu_stalls`]); every
//! suite starts with the kernel's stall timeout and must leave it so.
//!
//! CPU hotplug churn (`kernel::hotplug`), when the run asks for it and the
//! suite allows it ([`Suite::hotplug`]): the boot CPU's timer interrupt
//! drives it, other CPUs go offline inside [`Ctx::should_stop`], and the
//! boot CPU brings every CPU back after its `run`, before the closing
//! barrier. The result line counts the events (`cpu_off=`, `cpu_on=`).
//!
//! A watchdog in the timer interrupt fails the run when a suite overstays its
//! budget by [`WATCHDOG_GRACE_MS`] (a deadlock, or a CPU that stopped), as
//! long as some CPU still takes interrupts; the runner's QEMU timeout covers
//! the rest.
//!
//! Scheduler mode (`sched` or `sched=N` in the arguments, [`set_threads`]):
//! on every CPU the suite's `run` runs as N kernel threads (`crate::sched`)
//! at once, preempted by the timer: the CPU's boot thread, which keeps the
//! lock step above, and N - 1 workers it starts on its own CPU after the
//! opening barrier. Each has its own [`Ctx`] with the CPU's index; workers
//! stay on their CPU. The boot thread waits for its workers to end
//! (yielding to them) before it disables interrupts for step 3, so the
//! barriers, the deadline and the quiescing still count CPUs. No churn in
//! this mode.
//!
//! Output lines that start with `KSYNC-` are the protocol with the host
//! runner (`xtask/src/qemu.rs`); README.md lists them.

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ksync::spinlock::IrqTicketMutex;

use super::{Kind, Registry, Suite};
use crate::arch;
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::{Counters, MAX_CPUS};
use crate::kernel::{self, hooks, hotplug, irq, rcu, time};
use crate::println;
use crate::sched;

/// How long past its budget a suite may run before the watchdog fails it.
pub const WATCHDOG_GRACE_MS: u64 = 10_000;

const NONE: usize = usize::MAX;
/// Suites in one plan: the scheduler configurations run 53 in one boot
/// (`xtask/src/qemu/arch.rs` checks `SCHED_SUITES` against it).
const MAX_PLAN: usize = 64;

/// The suites the plan's indices refer to, given by the boot CPU (see
/// [`release`]).
static REGISTRY: spin::Once<&'static Registry> = spin::Once::new();
/// The suites to run, as indices into the registry's
/// [`all`](Registry::all); written by the boot CPU before it releases the
/// others.
static PLAN: [AtomicUsize; MAX_PLAN] = [const { AtomicUsize::new(NONE) }; MAX_PLAN];
static PLAN_LEN: AtomicUsize = AtomicUsize::new(0);
static CPUS: AtomicUsize = AtomicUsize::new(0);
static RELEASED: AtomicBool = AtomicBool::new(false);

static BARRIER: Barrier = Barrier::new();
/// Index of the suite whose interrupt handler runs, or `NONE`.
static ACTIVE: AtomicUsize = AtomicUsize::new(NONE);
static DEADLINE: AtomicU64 = AtomicU64::new(0);
static WATCHDOG: AtomicU64 = AtomicU64::new(u64::MAX);
static STOP: AtomicBool = AtomicBool::new(false);
/// Whether a failure was flagged (see [`Ctx::failed`]).
static FAILED: AtomicBool = AtomicBool::new(false);
/// RCU stall reports received before the active suite started.
static STALLS_BEFORE: AtomicUsize = AtomicUsize::new(0);
/// The first failure a suite flagged while running (see [`Ctx::fail`]).
static FAILURE: IrqTicketMutex<Option<&'static str>> = IrqTicketMutex::new(None);
/// Per CPU: timer interrupts that ran the active suite's handler.
static IRQ_WORK: Counters = Counters::new();
/// Per CPU: timer interrupts that skipped it (see [`on_tick`]).
static IRQ_SKIPPED: Counters = Counters::new();
/// Per CPU: when its last run of the suite's handler ended.
static IRQ_WORK_END: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// The run's seed (`seed=`) and whether it asked for churn (`hotplug`).
static SEED: AtomicU64 = AtomicU64::new(0);
static HOTPLUG: AtomicBool = AtomicBool::new(false);
/// Whether churn runs during the active suite.
static CHURN: AtomicBool = AtomicBool::new(false);
/// `ksync::rcu::gp_seq()` when the active suite started.
static GP_START: AtomicUsize = AtomicUsize::new(0);
/// Threads per CPU that run each suite's `run` (1: the boot thread alone;
/// see the module docs, "Scheduler mode").
static THREADS: AtomicUsize = AtomicUsize::new(1);
/// The most threads per CPU `sched=N` may ask for: the boot thread and
/// every worker slot of the CPU.
pub const MAX_THREADS: usize = 1 + sched::WORKERS_PER_CPU;

/// Per CPU: whether it has returned from the active suite's `run`.
static FINISHED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// What a suite sees of the run: who it is, how many CPUs take part, and
/// when to stop.
pub struct Ctx {
    /// This CPU's index.
    pub cpu: usize,
    /// CPUs running the suite (indices `0..cpus`).
    pub cpus: usize,
    /// Which of the CPU's threads this is: 0 for its boot thread (the only
    /// one outside scheduler mode), `1..` for the workers the runner
    /// starts in scheduler mode. A suite that gives one CPU a role of its
    /// own (the RCU torture's writer) gives it to thread 0.
    pub thread: usize,
    polls: Cell<u32>,
}

/// [`Ctx::should_stop`] reads the clock once per this many calls. On
/// aarch64 under TCG a counter read is an I/O register access that takes
/// QEMU's global lock: reading it on every iteration of four CPUs' hot loops
/// turns that lock into the bottleneck, and the resulting stalls inside
/// critical sections into lock convoys.
const POLLS_PER_CLOCK_READ: u32 = 64;

impl Ctx {
    fn new(cpu: usize, cpus: usize, thread: usize) -> Self {
        Self {
            cpu,
            cpus,
            thread,
            polls: Cell::new(0),
        }
    }

    /// A context for a thread a suite started itself (`crate::sched`),
    /// with the CPU it runs on now and the run's CPU count.
    /// Its [`thread`](Self::thread) is `usize::MAX`.
    pub fn for_thread(cpus: usize) -> Self {
        Self::new(crate::kernel::cpu::current(), cpus, usize::MAX)
    }

    /// Whether the budget is spent or some CPU flagged a failure.
    ///
    /// Suites call it between two operations, so it is also this kernel's
    /// `cond_resched()`: it reports an RCU quiescent state (`kernel::rcu`).
    /// Never call it inside an RCU read section (it panics, in every build).
    ///
    /// It is also where CPU hotplug churn takes this CPU offline for a
    /// while (`kernel::hotplug`): it returns once the CPU is back.
    #[inline]
    pub fn should_stop(&self) -> bool {
        ksync::rcu::quiescent_state();
        if hotplug::requested(self.cpu) {
            hotplug::offline_point(self.cpu);
        }
        // Relaxed: a flag and a deadline, no data hangs on them.
        if STOP.load(Ordering::Relaxed) {
            return true;
        }
        let polls = self.polls.get();
        self.polls.set(polls.wrapping_add(1));
        polls.is_multiple_of(POLLS_PER_CLOCK_READ)
            && time::now() >= DEADLINE.load(Ordering::Relaxed)
    }

    /// Flags a failure of the running suite (the first reason is reported)
    /// and stops every CPU early. Callable from interrupt handlers.
    pub fn fail(&self, reason: &'static str) {
        FAILURE.lock().get_or_insert(reason);
        // Relaxed: flags; the reason travels under the lock.
        FAILED.store(true, Ordering::Relaxed);
        STOP.store(true, Ordering::Relaxed);
    }

    /// The run's seed (`seed=`, default 0): suites mix it into their
    /// generators, so that a run is replayed by its seed.
    pub fn seed(&self) -> u64 {
        SEED.load(Ordering::Relaxed)
    }

    /// The suite moved on (the benchmark: a slice ended on every CPU): the
    /// watchdog's [`WATCHDOG_GRACE_MS`] counts from now if that is later
    /// than past the budget. For a suite whose work is a fixed amount, not
    /// a deadline, so that a busy host, which stretches every step, cannot
    /// run it past the watchdog while it still moves; a hang (no progress
    /// for the grace) still fails. Callable from any CPU.
    pub fn progress(&self) {
        let at = time::now() + time::ms_to_ticks(WATCHDOG_GRACE_MS);
        // Relaxed: a deadline the timer interrupt compares against.
        WATCHDOG.fetch_max(at, Ordering::Relaxed);
    }

    /// Whether some CPU flagged a failure of the running suite (unlike
    /// [`should_stop`](Self::should_stop), not the deadline): for suites
    /// whose CPUs wait for each other past the deadline.
    pub fn failed(&self) -> bool {
        // Relaxed: a flag, as in `fail`.
        FAILED.load(Ordering::Relaxed)
    }
}

/// Sets the run's seed (boot CPU, while parsing the arguments).
pub fn set_seed(seed: u64) {
    SEED.store(seed, Ordering::Relaxed);
}

/// Asks for CPU hotplug churn during the suites that allow it (boot CPU,
/// while parsing the arguments).
pub fn set_hotplug(on: bool) {
    HOTPLUG.store(on, Ordering::Relaxed);
}

/// Runs every suite's `run` as `n` threads per CPU (boot CPU, while
/// parsing the arguments).
pub fn set_threads(n: usize) -> Result<(), &'static str> {
    if !(1..=MAX_THREADS).contains(&n) {
        return Err("sched=N wants 1 to 6 threads per CPU");
    }
    THREADS.store(n, Ordering::Relaxed);
    Ok(())
}

/// Threads per CPU in this run.
pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// Appends suite `index` to the plan (boot CPU, before [`release`]).
pub fn plan_push(index: usize) -> Result<(), &'static str> {
    let len = PLAN_LEN.load(Ordering::Relaxed);
    if len == MAX_PLAN {
        return Err("too many suites in the plan");
    }
    PLAN[len].store(index, Ordering::Relaxed);
    PLAN_LEN.store(len + 1, Ordering::Relaxed);
    Ok(())
}

/// Lets the secondary CPUs, waiting in [`run`], start on the plan of
/// `registry`'s suites with `cpus` CPUs in all.
pub fn release(registry: &'static Registry, cpus: usize) {
    REGISTRY.call_once(|| registry);
    CPUS.store(cpus, Ordering::Relaxed);
    // Release pairs with the Acquire in `run`: the plan and the CPU count
    // are visible to every CPU that sees the flag.
    RELEASED.store(true, Ordering::Release);
}

/// Every CPU: runs the plan. The boot CPU ends the machine when done; the
/// others park.
pub fn run(cpu: usize) -> ! {
    rcu::idle_wait(|| RELEASED.load(Ordering::Acquire));
    let cpus = CPUS.load(Ordering::Relaxed);
    if cpu >= cpus {
        rcu::halt();
    }
    let registry = registry();
    arch::timer_start();
    irq::enable();
    let ctx = Ctx::new(cpu, cpus, 0);
    let (mut passed, mut failed) = (0, 0);
    for slot in PLAN.iter().take(PLAN_LEN.load(Ordering::Relaxed)) {
        let index = slot.load(Ordering::Relaxed);
        let suite = registry.get(index);
        if cpu == 0 {
            prepare(index, suite, cpus);
        }
        BARRIER.wait(cpus);
        run_threads(cpu, index, suite, &ctx);
        if cpu == 0
            && let Err(reason) = hotplug::settle()
        {
            ctx.fail(reason);
        }
        irq::disable();
        FINISHED[cpu].store(true, Ordering::Relaxed);
        BARRIER.wait(cpus);
        if cpu == 0 {
            // Release/Acquire not needed: the barriers order this.
            ACTIVE.store(NONE, Ordering::Relaxed);
            if judge(suite, cpus) {
                passed += 1;
            } else {
                failed += 1;
            }
        }
        BARRIER.wait(cpus);
        irq::enable();
    }
    if cpu == 0 {
        println!(
            "KSYNC-DONE status={} passed={passed} failed={failed}",
            verdict_word(failed == 0)
        );
        arch::exit(failed == 0);
    }
    irq::disable();
    rcu::halt()
}

/// This CPU's part of a suite: `suite.run` on the boot thread and, in
/// scheduler mode, on its workers; returns once every worker thread of
/// the machine has ended.
fn run_threads(cpu: usize, index: usize, suite: &dyn Suite, ctx: &Ctx) {
    for thread in 1..threads() {
        if sched::spawn_on(cpu, worker, index * MAX_THREADS + thread).is_none() {
            kernel::fatal(format_args!("KSYNC-PANIC cpu={cpu} no free thread slot"));
        }
    }
    suite.run(ctx);
    // Every worker of every CPU, not only ours: a suite's threads may
    // migrate (the `sched-*` suites), and once this boot thread meets the
    // others at the barrier (preemption off) nothing else runs here.
    while sched::workers_busy() {
        // The boot thread holds no RCU reference here.
        ksync::rcu::quiescent_state();
        sched::yield_now();
    }
}

/// A worker of scheduler mode, `arg` = suite index * `MAX_THREADS` +
/// thread: that suite's `run` on the CPU it was started on (the runner's
/// workers do not migrate by themselves).
fn worker(arg: usize) {
    let cpu = crate::kernel::cpu::current();
    let ctx = Ctx::new(cpu, CPUS.load(Ordering::Relaxed), arg % MAX_THREADS);
    registry().get(arg / MAX_THREADS).run(&ctx);
}

/// The registry [`release`] was given.
fn registry() -> &'static Registry {
    REGISTRY
        .get()
        .expect("the boot CPU gives the registry before it releases the plan")
}

fn prepare(index: usize, suite: &dyn Suite, cpus: usize) {
    STOP.store(false, Ordering::Relaxed);
    FAILED.store(false, Ordering::Relaxed);
    *FAILURE.lock() = None;
    IRQ_WORK.reset();
    IRQ_SKIPPED.reset();
    // No thread switches now: the other CPUs wait at the barrier with
    // preemption off and no workers exist.
    sched::SWITCH_OUT.reset();
    sched::SWITCH_IN.reset();
    sched::PREEMPTIONS.reset();
    sched::MIGRATIONS.reset();
    for (done, end) in FINISHED.iter().zip(&IRQ_WORK_END) {
        done.store(false, Ordering::Relaxed);
        end.store(0, Ordering::Relaxed);
    }
    // Every suite starts with the kernel's stall timeout, whatever the
    // previous one set.
    rcu::reset_stall_timeout();
    // Relaxed: only the boot CPU uses it, here and in `judge`.
    STALLS_BEFORE.store(hooks::stall_log().count, Ordering::Relaxed);
    suite.setup(cpus);
    GP_START.store(ksync::rcu::gp_seq(), Ordering::Relaxed);
    let churn = HOTPLUG.load(Ordering::Relaxed)
        && match (hotplug::supported(), suite.hotplug(), cpus) {
            _ if threads() > 1 => {
                note_no_churn(suite, "scheduler mode (sched) runs without churn");
                false
            }
            (false, _, _) => {
                note_no_churn(suite, "this architecture has no CPU hotplug yet");
                false
            }
            (_, Err(reason), _) => {
                note_no_churn(suite, reason);
                false
            }
            (_, Ok(()), 1) => {
                note_no_churn(suite, "a single CPU: nothing to take offline");
                false
            }
            _ => true,
        };
    CHURN.store(churn, Ordering::Relaxed);
    if churn {
        // A different sequence per suite of the plan, all from the seed.
        hotplug::start(
            cpus,
            SEED.load(Ordering::Relaxed) ^ (index as u64).wrapping_mul(0x5851_F42D_4C95_7F2D),
        );
    }
    println!(
        "KSYNC-START suite={} kind={} cpus={cpus} threads={} budget_ms={} hotplug={}",
        suite.name(),
        suite.kind().word(),
        threads(),
        suite.budget_ms(),
        if churn { "on" } else { "off" }
    );
    let deadline = time::now() + time::ms_to_ticks(suite.budget_ms());
    DEADLINE.store(deadline, Ordering::Relaxed);
    WATCHDOG.store(
        deadline + time::ms_to_ticks(WATCHDOG_GRACE_MS),
        Ordering::Relaxed,
    );
    // Release pairs with the Acquire in `on_tick`: an interrupt handler that
    // sees the suite active sees its setup.
    ACTIVE.store(index, Ordering::Release);
}

fn note_no_churn(suite: &dyn Suite, reason: &str) {
    println!(
        "KSYNC-HOTPLUG suite={} churn=off reason=\"{reason}\"",
        suite.name()
    );
}

/// Boot CPU, everyone else quiet: asks the suite for its verdict, adds the
/// runner's own checks, prints the result line. Returns whether it passed.
fn judge(suite: &dyn Suite, cpus: usize) -> bool {
    let summary = suite.finish(cpus);
    let flagged = *FAILURE.lock();
    let (irq_min, irq_max) = IRQ_WORK.min_max(cpus);
    let irq_skipped = IRQ_SKIPPED.sum(cpus);
    let quiet_cpu = (0..cpus).find(|&cpu| IRQ_WORK.get(cpu) == 0);
    let stalls = hooks::stall_log().count - STALLS_BEFORE.load(Ordering::Relaxed);
    let stalled = stalls != 0 && !suite.expects_rcu_stalls();
    let (cpu_off, cpu_on, restart_retries) = if CHURN.load(Ordering::Relaxed) {
        hotplug::events()
    } else {
        (0, 0, 0)
    };
    let gps = (ksync::rcu::gp_seq() >> 2).wrapping_sub(GP_START.load(Ordering::Relaxed) >> 2);
    let failure = flagged
        .or(summary.failure)
        .or(quiet_cpu.map(|_| "a CPU took no timer interrupt during the suite"))
        .or(stalled.then_some(STALL_REASON))
        .or((rcu::stall_timeout() != rcu::STALL_TIMEOUT_MS)
            .then_some("the suite left its own RCU stall timeout behind"))
        .or((cpu_off != cpu_on).then_some("hotplug: a CPU went offline and did not come back"));
    println!(
        "KSYNC-RESULT suite={} kind={} status={} cpus={cpus} ops={} cpu_min={} cpu_max={} irq_min={irq_min} irq_max={irq_max} irq_skipped={irq_skipped} gps={gps} cb_queued={} cb_invoked={} stalls={stalls} cpu_off={cpu_off} cpu_on={cpu_on} restart_retries={restart_retries} seed={} spin={} reason=\"{}\"",
        suite.name(),
        suite.kind().word(),
        verdict_word(failure.is_none()),
        summary.ops,
        summary.cpu_min,
        summary.cpu_max,
        summary.callbacks.0,
        summary.callbacks.1,
        SEED.load(Ordering::Relaxed),
        crate::kernel::spin::mode_word(),
        failure.unwrap_or("-"),
    );
    sched_line(suite, cpus);
    // The FIFO locks' mode, with the stall that switched it if one did.
    crate::kernel::spin::report();
    if suite.kind() == Kind::Control && failure.is_some() {
        println!(
            "  (a control: this failure is the expected outcome, it proves the checks can fire)"
        );
    }
    failure.is_none()
}

/// The scheduler's statistics for the suite that just ended, as a
/// `KSYNC-SCHED` line: context switches (the run-queue lock taken by the
/// outgoing thread and released by the incoming one: the two counts
/// match), how many were preemptions, and migrations.
fn sched_line(suite: &dyn Suite, cpus: usize) {
    let out = sched::SWITCH_OUT.sum(cpus);
    let inn = sched::SWITCH_IN.sum(cpus);
    let (pre_min, pre_max) = sched::PREEMPTIONS.min_max(cpus);
    println!(
        "KSYNC-SCHED suite={} threads={} switches_out={out} switches_in={inn} preemptions={} preempt_cpu_min={pre_min} preempt_cpu_max={pre_max} migrations={}",
        suite.name(),
        threads(),
        sched::PREEMPTIONS.sum(cpus),
        sched::MIGRATIONS.sum(cpus),
    );
}

fn verdict_word(pass: bool) -> &'static str {
    if pass { "PASS" } else { "FAIL" }
}

/// The `reason` of a suite that passed its own checks but during which
/// RCU reported a stall (`KSYNC-RCU-STALL`): a grace period outlasted
/// `kernel::rcu::STALL_TIMEOUT_MS`. The host runner does not count it as a
/// control's detection.
pub const STALL_REASON: &str = "rcu stall: a grace period outlasted the stall timeout";

/// From the timer interrupt on `cpu` (interrupts off), `now` the counter
/// when it arrived: runs the watchdog and the active suite's handler.
///
/// The handler is skipped when less than one timer period has passed since
/// its last run on this CPU ended. Under emulation a contended lock can take
/// longer than a period to get (a waiting vCPU may be descheduled on the
/// host), and a handler that always outlasts the period would leave the
/// next tick pending on return, starving thread context for good.
pub fn on_tick(cpu: usize, now: u64) {
    let index = ACTIVE.load(Ordering::Acquire);
    if index == NONE {
        return;
    }
    let suite = registry().get(index);
    let cpus = CPUS.load(Ordering::Relaxed);
    if cpu == 0 {
        hotplug::tick(now);
    }
    if now > WATCHDOG.load(Ordering::Relaxed) {
        watchdog_fire(suite, cpus);
    }
    if now >= DEADLINE.load(Ordering::Relaxed) {
        STOP.store(true, Ordering::Relaxed);
    }
    // Relaxed: only this CPU, interrupts off, uses its slot.
    if now < IRQ_WORK_END[cpu].load(Ordering::Relaxed) + time::hz() / arch::TIMER_HZ {
        IRQ_SKIPPED.add(cpu, 1);
        return;
    }
    suite.irq(&Ctx::new(cpu, cpus, 0));
    IRQ_WORK.add(cpu, 1);
    IRQ_WORK_END[cpu].store(time::now(), Ordering::Relaxed);
}

fn watchdog_fire(suite: &dyn Suite, cpus: usize) -> ! {
    static FIRED: AtomicBool = AtomicBool::new(false);
    if FIRED.swap(true, Ordering::Relaxed) {
        arch::park();
    }
    if threads() > 1 || sched::workers_busy() {
        sched::dump();
    }
    let mut stuck = 0u32;
    for (cpu, done) in FINISHED.iter().enumerate().take(cpus) {
        if !done.load(Ordering::Relaxed) {
            stuck |= 1 << cpu;
        }
    }
    kernel::fatal(format_args!(
        "KSYNC-RESULT suite={} kind={} status=FAIL cpus={cpus} reason=\"watchdog: still running {} ms past the budget and the last progress; CPUs not done: {stuck:#x}\"",
        suite.name(),
        suite.kind().word(),
        WATCHDOG_GRACE_MS
    ))
}
