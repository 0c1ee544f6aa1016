//! RCU stall detection, end to end: a CPU that stays in a read section
//! holds up a grace period, and the kernel's stall check (every timer
//! interrupt, `kernel::rcu::tick`) must report it, naming that CPU
//! and no other, through the kernel's `rcu_stall` hook; once the CPU
//! leaves, the grace period must end.
//!
//! The suite sets a short stall timeout ([`timeout_ms`]) for itself; the
//! runner sets the kernel's own ([`rcu::STALL_TIMEOUT_MS`](crate::kernel::rcu::STALL_TIMEOUT_MS)) back
//! before the next suite, and [`finish`](Suite::finish) does too.
//!
//! # A round (one per CPU other than CPU 0, each stuck in turn)
//!
//! 1. CPU 0 names the CPU to get stuck;
//! 2. that CPU enters a read section and stays there, interrupts on (its
//!    timer interrupts keep running, stall checks and readers included),
//!    reporting no quiescent state, until the kernel's stall log shows a
//!    report (or [`GIVE_UP_MS`] passed: a failure); then it records the
//!    report it saw, marks that it left, and leaves;
//! 3. meanwhile CPU 0 starts a grace period (`start_poll`) and waits for
//!    it (`cond_synchronize`); every other CPU keeps passing quiescent
//!    states between short read sections;
//! 4. when the grace period has ended, CPU 0 checks: the stuck CPU had
//!    left before (RCU's guarantee: its read section happened before the
//!    end); a report was issued, for this grace period or a later one,
//!    at least [`timeout_ms`] old, naming exactly the stuck CPU (the one
//!    the stuck CPU saw and the latest one); the hook saw as many reports
//!    as `rcu::stall_count()` counted.
//!
//! After the rounds, with nobody stuck, a few more grace periods must end
//! without a report for a CPU that was running. A vCPU the host did not
//! run for a timeout is stalled as far as RCU can tell (a kernel on
//! hardware would report it too), so a report there is no failure when
//! every CPU it names saw a gap of at least half the timeout between two
//! of its 1 kHz timer interrupts (the guest clock runs on while the
//! vCPU's thread waits for a host core); the clean grace periods then run
//! again, up to [`CLEAN_TRIES`] times. A CPU named while its timer ticks
//! kept coming is a failure.
//!
//! In scheduler mode (several threads per CPU, `harness::runner`) the
//! roles are the threads 0's: thread 0 of CPU 0 drives, thread 0 of the
//! stuck CPU holds the read section (which keeps its CPU's other threads
//! off it: a read section holds preemption off), every other thread
//! follows. To keep the scheduler boots short only the last CPU gets
//! stuck there ([`stuck_cpus`]).
//!
//! Those boots also run at `-smp 8` on a 2-core host, which can leave a
//! vCPU unscheduled for over 300 ms (seen under a load of 18: a stall
//! report for a CPU that was not stuck, in the grace periods after the
//! rounds), and over 1 s at a load of 24 (the same report with a 1 s
//! timeout); above 4 CPUs the timeout is [`TIMEOUT_MANY_MS`].
//!
//! The round handshake is Release/Acquire (commented where used); the
//! per-round statistics are Relaxed, ordered before `finish` by the
//! runner's barriers.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ksync::rcu::{self, StallReport};
use ksync::spinlock::IrqTicketMutex;

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary, runner};
use crate::kernel::cpu::{Counters, MAX_CPUS};
use crate::kernel::{self, hooks, time};

/// The stall timeout while this suite runs, in milliseconds: long enough
/// that a CPU that is not stuck (its vCPU descheduled by a loaded host for
/// a while) is not named with the stuck one, short enough for a few rounds
/// within the budget.
pub const TIMEOUT_MS: u64 = 300;
/// [`TIMEOUT_MS`] with more than 4 CPUs (see the module docs).
pub const TIMEOUT_MANY_MS: u64 = 2500;
/// How long a stuck CPU waits for the report before it gives up (a
/// failure) and leaves.
pub const GIVE_UP_MS: u64 = 3 * TIMEOUT_MANY_MS;
/// Grace periods CPU 0 waits for at the end, with nobody stuck.
const CLEAN_GPS: usize = 8;
/// How many times the clean grace periods may run, each earlier try
/// excused by a report for CPUs the host did not run (module docs).
const CLEAN_TRIES: usize = 3;
/// The CPU that starts the grace periods.
const WRITER: usize = 0;
/// [`StallTest::round`]: the stuck CPU in the low bits, the round above.
const ROUND_SHIFT: u32 = 8;

/// The suite.
pub struct StallTest {
    info: Info,
    /// What CPU 0 asks for: `round << ROUND_SHIFT | stuck CPU`; 0 before
    /// the first round.
    round: AtomicUsize,
    /// The latest round whose stuck CPU is inside its read section ...
    holding: AtomicUsize,
    /// ... and the latest it left.
    left: AtomicUsize,
    /// CPU 0 is done: everyone returns.
    done: AtomicBool,
    /// The report the stuck CPU saw, for CPU 0 to check.
    seen: IrqTicketMutex<Option<StallReport>>,
    rounds_ok: AtomicU64,
    /// Per round (indexed by the stuck CPU): how long it held its read
    /// section, the reported age, CPU 0's wait for the grace period (ms)
    /// and the reports issued.
    held_ms: [AtomicU64; MAX_CPUS],
    age_ms: [AtomicU64; MAX_CPUS],
    wait_ms: [AtomicU64; MAX_CPUS],
    reports: [AtomicU64; MAX_CPUS],
    reads: Counters,
    irq_reads: Counters,
    /// Per CPU: when its latest timer interrupt ran (ticks; 0: none yet)
    /// and the longest gap between two, since the clean phase began.
    last_tick: [AtomicU64; MAX_CPUS],
    max_gap: [AtomicU64; MAX_CPUS],
    /// Clean-phase tries excused by a descheduled vCPU.
    excused: AtomicU64,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST];

/// The test.
// The budget bounds a hang only (the rounds end the suite): at -smp 8
// outside scheduler mode, 7 rounds of at least `TIMEOUT_MANY_MS` each.
pub static TEST: StallTest = StallTest::new(Info::new("rcu-stall", Kind::Test, 25_000));

impl StallTest {
    const fn new(info: Info) -> Self {
        Self {
            info,
            round: AtomicUsize::new(0),
            holding: AtomicUsize::new(0),
            left: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            seen: IrqTicketMutex::new(None),
            rounds_ok: AtomicU64::new(0),
            held_ms: [const { AtomicU64::new(0) }; MAX_CPUS],
            age_ms: [const { AtomicU64::new(0) }; MAX_CPUS],
            wait_ms: [const { AtomicU64::new(0) }; MAX_CPUS],
            reports: [const { AtomicU64::new(0) }; MAX_CPUS],
            reads: Counters::new(),
            irq_reads: Counters::new(),
            last_tick: [const { AtomicU64::new(0) }; MAX_CPUS],
            max_gap: [const { AtomicU64::new(0) }; MAX_CPUS],
            excused: AtomicU64::new(0),
        }
    }

    /// CPU 0: runs the rounds, then the clean grace periods.
    fn drive(&self, ctx: &Ctx) {
        for stuck in stuck_cpus(ctx.cpus) {
            if ctx.failed() || !self.round(ctx, stuck) {
                return;
            }
            self.rounds_ok.fetch_add(1, Ordering::Relaxed);
        }
        for _ in 0..CLEAN_TRIES {
            self.reset_gaps(ctx.cpus);
            let before = hooks::stall_log().count;
            for _ in 0..CLEAN_GPS {
                rcu::synchronize();
            }
            let log = hooks::stall_log();
            if log.count == before {
                return;
            }
            let descheduled = log
                .last
                .is_some_and(|report| report.cpus().all(|cpu| self.descheduled(cpu, ctx.cpus)));
            if !descheduled {
                ctx.fail("a stall was reported for a CPU whose timer ticks kept coming, while no CPU was stuck");
                return;
            }
            self.excused.fetch_add(1, Ordering::Relaxed);
        }
        ctx.fail("a stall was reported in every try of the clean grace periods (each for a CPU the host did not run)");
    }

    /// Starts a new window for [`descheduled`](Self::descheduled).
    fn reset_gaps(&self, cpus: usize) {
        // Relaxed: statistics of the timer interrupts, read after the grace
        // periods that follow (a gap from before only excuses less).
        for gap in &self.max_gap[..cpus] {
            gap.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the host did not run `cpu` for half the stall timeout since
    /// the last [`reset_gaps`](Self::reset_gaps): a gap that long between
    /// two of its timer interrupts (see the module docs).
    fn descheduled(&self, cpu: usize, cpus: usize) -> bool {
        let long = time::ms_to_ticks(timeout_ms(cpus) / 2);
        self.max_gap[cpu].load(Ordering::Relaxed) >= long
    }

    /// CPU 0: one round with `stuck` stuck (it is also the round number).
    /// Returns whether it passed.
    fn round(&self, ctx: &Ctx, stuck: usize) -> bool {
        let log_before = hooks::stall_log();
        let count_before = rcu::stall_count();
        self.reset_gaps(ctx.cpus);
        *self.seen.lock() = None;
        // Release pairs with the followers' Acquire load: they see `seen`
        // cleared.
        self.round
            .store(stuck << ROUND_SHIFT | stuck, Ordering::Release);
        // Acquire pairs with the stuck CPU's Release: it is inside its read
        // section now. Waiting holds no RCU reference: quiescent states.
        while self.holding.load(Ordering::Acquire) != stuck {
            if ctx.failed() {
                return false;
            }
            rcu::quiescent_state();
            core::hint::spin_loop();
        }
        let gp_before = rcu::gp_seq();
        let start = time::now();
        let cookie = rcu::start_poll();
        rcu::cond_synchronize(cookie);
        let waited = time::ticks_to_ms(time::now() - start);
        self.wait_ms[stuck].store(waited, Ordering::Relaxed);
        // Acquire: RCU's guarantee orders the stuck CPU's read section,
        // and the Release store of `left` in it, before the end of the
        // grace period we waited for; this load must see it.
        if self.left.load(Ordering::Acquire) != stuck {
            ctx.fail("a grace period ended while a CPU was still inside its read section");
            return false;
        }
        let log = hooks::stall_log();
        let reports = log.count - log_before.count;
        self.reports[stuck].store(reports as u64, Ordering::Relaxed);
        if reports == 0 {
            ctx.fail("no stall report while a CPU was stuck in a read section");
            return false;
        }
        if rcu::stall_count() - count_before != reports {
            ctx.fail("the rcu_stall hook and rcu::stall_count() disagree");
            return false;
        }
        let Some(seen) = *self.seen.lock() else {
            ctx.fail("the stuck CPU left without seeing a stall report");
            return false;
        };
        let descheduled = |cpu: usize| self.descheduled(cpu, ctx.cpus);
        for report in [Some(seen), log.last].into_iter().flatten() {
            if let Err(reason) = check(&report, stuck, gp_before, ctx.cpus, descheduled) {
                ctx.fail(reason);
                return false;
            }
        }
        self.age_ms[stuck].store(seen.age(), Ordering::Relaxed);
        true
    }

    /// Every other CPU: short read sections with quiescent states between
    /// them, and a turn as the stuck CPU, until CPU 0 is done (the budget
    /// does not end this suite: the rounds do).
    fn follow(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 7);
        let mut reads = 0;
        loop {
            // A quiescent state, whatever it says about the deadline.
            let _ = ctx.should_stop();
            // Acquire pairs with CPU 0's Release stores of `done` and
            // `round`.
            if self.done.load(Ordering::Acquire) || ctx.failed() {
                break;
            }
            let round = self.round.load(Ordering::Acquire);
            let stuck = round & ((1 << ROUND_SHIFT) - 1);
            // Relaxed: only this CPU's thread 0 writes `left` for its own
            // round.
            if stuck == ctx.cpu && ctx.thread == 0 && self.left.load(Ordering::Relaxed) != stuck {
                self.hold(ctx, stuck);
            } else {
                let _reading = rcu::read_lock();
                busy_work(rng.below(64) as u32);
                reads += 1;
            }
        }
        self.reads.add(ctx.cpu, reads);
    }

    /// The stuck CPU of round `round`: stays in a read section until a
    /// stall is reported.
    fn hold(&self, ctx: &Ctx, round: usize) {
        let count_before = hooks::stall_log().count;
        let reading = rcu::read_lock();
        // Release pairs with CPU 0's Acquire wait: only then does it start
        // the grace period, which must therefore wait for us.
        self.holding.store(round, Ordering::Release);
        let start = time::now();
        let give_up = start + time::ms_to_ticks(GIVE_UP_MS);
        let report = loop {
            // Interrupts stay on: the timer interrupt checks for stalls
            // (here too) and runs readers; nothing reports a quiescent
            // state for us.
            busy_work(20_000);
            let log = hooks::stall_log();
            if log.count != count_before {
                break log.last;
            }
            if time::now() > give_up || ctx.failed() {
                break None;
            }
        };
        self.held_ms[round].store(time::ticks_to_ms(time::now() - start), Ordering::Relaxed);
        *self.seen.lock() = report;
        // Release: see CPU 0's Acquire load after its grace period.
        self.left.store(round, Ordering::Release);
        drop(reading);
        if report.is_none() && !ctx.failed() {
            ctx.fail("no stall report while this CPU was stuck in a read section");
        }
    }
}

/// The CPUs that get stuck in turn, one per round: every CPU but CPU 0,
/// or in scheduler mode the last (see the module docs).
fn stuck_cpus(cpus: usize) -> impl Iterator<Item = usize> {
    let every = runner::threads() == 1;
    (1..cpus).filter(move |&cpu| every || cpu == cpus - 1)
}

/// The stall timeout with `cpus` CPUs (see the module docs).
pub fn timeout_ms(cpus: usize) -> u64 {
    if cpus > 4 {
        TIMEOUT_MANY_MS
    } else {
        TIMEOUT_MS
    }
}

/// Whether `report` is right for a grace period started after `gp_before`
/// that only `stuck` held up: it names `stuck`, and any other CPU it names
/// is one the host did not run for half the timeout (`descheduled`, see
/// the module docs).
fn check(
    report: &StallReport,
    stuck: usize,
    gp_before: usize,
    cpus: usize,
    descheduled: impl Fn(usize) -> bool,
) -> Result<(), &'static str> {
    if report.gp_seq() & 3 != 1 || (report.gp_seq().wrapping_sub(gp_before) as isize) < 0 {
        return Err("a stall report named a grace period that was not running");
    }
    if !report.cpus().any(|cpu| cpu == stuck)
        || !report.cpus().all(|cpu| cpu == stuck || descheduled(cpu))
    {
        return Err(
            "a stall report did not name exactly the stuck CPU (and CPUs the host did not run)",
        );
    }
    if report.age() < timeout_ms(cpus) {
        return Err("a stall was reported before the timeout");
    }
    Ok(())
}

impl Suite for StallTest {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        Err("each CPU in turn must stay in a read section on cue")
    }

    fn setup(&self, cpus: usize) {
        // The runner has just set the kernel's timeout; ours is shorter.
        kernel::rcu::set_stall_timeout(timeout_ms(cpus));
        // Relaxed: the runner's barrier orders `setup` before every
        // CPU's `run`.
        for flag in [&self.round, &self.holding, &self.left] {
            flag.store(0, Ordering::Relaxed);
        }
        self.done.store(false, Ordering::Relaxed);
        *self.seen.lock() = None;
        self.rounds_ok.store(0, Ordering::Relaxed);
        for stat in self
            .held_ms
            .iter()
            .chain(&self.age_ms)
            .chain(&self.wait_ms)
            .chain(&self.reports)
        {
            stat.store(0, Ordering::Relaxed);
        }
        self.reads.reset();
        self.irq_reads.reset();
        for stat in self.last_tick.iter().chain(&self.max_gap) {
            stat.store(0, Ordering::Relaxed);
        }
        self.excused.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        if ctx.cpus < 2 {
            ctx.fail("needs a second CPU to get stuck");
        } else if ctx.cpu == WRITER && ctx.thread == 0 {
            self.drive(ctx);
            // Release pairs with the followers' Acquire load.
            self.done.store(true, Ordering::Release);
        } else {
            self.follow(ctx);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        // A reader in the interrupt, inside the stuck CPU's read section
        // too: nested, it changes nothing.
        let _reading = rcu::read_lock();
        busy_work(64);
        self.irq_reads.add(ctx.cpu, 1);
        // Relaxed: this CPU's own statistics (see `drive`).
        let now = time::now();
        let last = self.last_tick[ctx.cpu].swap(now, Ordering::Relaxed);
        if last != 0 {
            self.max_gap[ctx.cpu].fetch_max(now.saturating_sub(last), Ordering::Relaxed);
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        // The kernel's own timeout again (the runner checks).
        kernel::rcu::reset_stall_timeout();
        for stuck in stuck_cpus(cpus) {
            self.info.report(format_args!(
                "round {stuck}: CPU {stuck} held its read section {} ms, {} report(s), reported age {} ms, CPU 0 waited {} ms for the grace period",
                self.held_ms[stuck].load(Ordering::Relaxed),
                self.reports[stuck].load(Ordering::Relaxed),
                self.age_ms[stuck].load(Ordering::Relaxed),
                self.wait_ms[stuck].load(Ordering::Relaxed),
            ));
        }
        let excused = self.excused.load(Ordering::Relaxed);
        if excused > 0 {
            self.info.report(format_args!(
                "clean grace periods: {excused} try(s) with a stall report for a CPU the host did not run (timer gap >= half the timeout), run again"
            ));
        }
        self.info.report_per_cpu(
            cpus,
            &[("reads", &self.reads), ("irq_reads", &self.irq_reads)],
        );
        let rounds = self.rounds_ok.load(Ordering::Relaxed);
        let failure =
            (rounds as usize != stuck_cpus(cpus).count()).then_some("not every round completed");
        let spread = if cpus > 1 {
            (1..cpus)
                .map(|cpu| self.reads.get(cpu))
                .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
        } else {
            (0, 0)
        };
        Summary::new(
            self.reads.sum(cpus) + self.irq_reads.sum(cpus) + rounds,
            spread,
            failure,
        )
    }

    fn expects_rcu_stalls(&self) -> bool {
        true
    }
}
