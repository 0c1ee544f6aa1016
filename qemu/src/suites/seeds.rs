//! The seed workloads (the `seeds` crate: RCU fd lookup, fget_light, the
//! lockref `stat()` storm, store-free path walk, the per-CPU `mmap_sem`)
//! as 4-CPU torture suites, with the timer interrupt running, and a
//! benchmark of every variant.
//!
//! * `seed-<workload>` (test): every correct variant in turn, each for an
//!   equal share of the budget, under [`Config::TORTURE`] (CPU 0 writes
//!   before every operation, race windows widened); after each variant
//!   the workload's own final check must pass.
//! * `seed-<workload>-control` (control): the workload's broken variant
//!   under torture, in rounds of [`CONTROL_ROUND_MS`] until its check
//!   catches it (the suite then fails, as a control must) or the budget
//!   ends (the control passed: the runner reports that as a failure).
//! * `seed-bench` (benchmark): every correct variant of every workload
//!   under the workload's measured configuration ([`Workload::BENCH`]) on
//!   all CPUs for [`BENCH_PHASE_MS`], one `KSYNC-SEED` line each
//!   (`workload= variant= cpus= ops= ms= ops_per_s=`); results are checked
//!   too. Under TCG these are emulation figures.
//!
//! The timer interrupt does not touch the workloads' objects (their locks
//! are not interrupt-safe, as in Linux, where none of these paths runs in
//! interrupt context); it preempts the steps anywhere and runs the
//! kernel's RCU tick (callbacks, grace-period reporting) under them, and
//! [`Suite::irq`] counts it, for the harness's per-CPU interrupt check.
//!
//! Between rounds the CPUs meet at a [`Barrier`] (idle for RCU); CPU 0
//! sets the next variant up and runs the check while the others wait.
//!
//! In scheduler mode (several threads per CPU, `harness::runner`) every
//! thread is one of the workload's CPUs: thread `t` of CPU `c` steps as
//! the workload's CPU `t * cpus + c` (so thread 0 of CPU 0 is its writer,
//! and outside scheduler mode the workload's CPU is the CPU), the barrier
//! counts threads and its waiters yield ([`Barrier::wait_threads`]), the
//! set-ups and checks are thread 0 of CPU 0's, and a test's variants share
//! [`SCHED_TEST_MS`] instead of its budget, to keep the one boot that runs
//! every suite short.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use seeds::fd::FdLookup;
use seeds::fget_light::FgetLight;
use seeds::mmap::MmapSem;
use seeds::stat::StatStorm;
use seeds::walk::PathWalk;
use seeds::{Config, Counts, Rng, Violation, Workload};

use crate::harness::{Ctx, Info, Kind, Suite, Summary, runner};
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::Counters;
use crate::kernel::time;
use crate::println;

/// Operations per step between two looks at the clock and the stop flag.
const STEP: u64 = 32;
/// A test suite's budget (shared by its variants).
const TEST_MS: u64 = 1200;
/// What a test suite's variants share in scheduler mode, where one boot
/// runs every suite (see the module docs).
const SCHED_TEST_MS: u64 = 600;
/// A control's budget, and the length of one of its rounds.
const CONTROL_MS: u64 = 4000;
/// See [`CONTROL_MS`].
pub const CONTROL_ROUND_MS: u64 = 250;
/// Guest time per variant in the benchmark.
pub const BENCH_PHASE_MS: u64 = 150;

/// A workload seen through its variant indices (so that one suite type
/// serves the five workload types).
pub trait Seed: Sync {
    /// The workload's name.
    fn name(&self) -> &'static str;
    /// How many variants it has (controls included).
    fn variants(&self) -> usize;
    /// Variant `i`'s label.
    fn label(&self, i: usize) -> &'static str;
    /// Whether variant `i` is the broken control.
    fn is_control(&self, i: usize) -> bool;
    /// The index of the control.
    fn control(&self) -> usize {
        (0..self.variants())
            .find(|&i| self.is_control(i))
            .expect("every workload has a control")
    }
    /// The measured configuration.
    fn bench(&self) -> Config;
    /// [`Workload::set_threads`].
    fn set_threads(&self, threads: usize);
    /// [`Workload::setup`] of variant `i`.
    fn setup(&self, i: usize, config: Config);
    /// [`Workload::step`].
    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts;
    /// [`Workload::check`].
    fn check(&self) -> Result<(), Violation>;
}

/// A [`Workload`] as a [`Seed`].
pub struct Of<W: 'static>(&'static W);

impl<W: Workload> Seed for Of<W> {
    fn name(&self) -> &'static str {
        W::NAME
    }
    fn variants(&self) -> usize {
        W::VARIANTS.len()
    }
    fn label(&self, i: usize) -> &'static str {
        W::VARIANTS[i].1
    }
    fn is_control(&self, i: usize) -> bool {
        W::VARIANTS[i].0 == W::CONTROL
    }
    fn bench(&self) -> Config {
        W::BENCH
    }
    fn set_threads(&self, threads: usize) {
        self.0.set_threads(threads);
    }
    fn setup(&self, i: usize, config: Config) {
        self.0.setup(W::VARIANTS[i].0, config);
    }
    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        self.0.step(cpu, n, rng)
    }
    fn check(&self) -> Result<(), Violation> {
        self.0.check()
    }
}

// One instance of each workload, shared by its suites (they run one at a
// time, and each round begins with `setup`).
static FD: FdLookup = FdLookup::new();
static LIGHT: FgetLight = FgetLight::new();
static STAT: StatStorm = StatStorm::new();
static WALK: PathWalk = PathWalk::new();
static MMAP: MmapSem = MmapSem::new();
static FD_SEED: Of<FdLookup> = Of(&FD);
static LIGHT_SEED: Of<FgetLight> = Of(&LIGHT);
static STAT_SEED: Of<StatStorm> = Of(&STAT);
static WALK_SEED: Of<PathWalk> = Of(&WALK);
static MMAP_SEED: Of<MmapSem> = Of(&MMAP);

/// The workloads, in table order.
static ALL: [&dyn Seed; 5] = [&FD_SEED, &LIGHT_SEED, &STAT_SEED, &WALK_SEED, &MMAP_SEED];

/// What a suite runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every correct variant, torture.
    Test,
    /// The control, torture, until caught.
    Control,
    /// Every correct variant of every workload, measured.
    Bench,
}

/// A seed suite.
pub struct SeedSuite {
    info: Info,
    /// The workload (unused by the benchmark, which runs [`ALL`]).
    seed: &'static dyn Seed,
    mode: Mode,
    barrier: Barrier,
    /// When the current round ends (counter ticks), set by CPU 0.
    round_end: AtomicU64,
    /// Whether another round follows, decided by CPU 0.
    go_on: AtomicBool,
    ops: Counters,
    writes: Counters,
    misses: Counters,
    retries: Counters,
    irqs: Counters,
    /// Operations of the current benchmark round.
    round_ops: Counters,
    rounds: AtomicU64,
}

impl SeedSuite {
    const fn new(info: Info, seed: &'static dyn Seed, mode: Mode) -> Self {
        Self {
            info,
            seed,
            mode,
            barrier: Barrier::new(),
            round_end: AtomicU64::new(0),
            go_on: AtomicBool::new(false),
            ops: Counters::new(),
            writes: Counters::new(),
            misses: Counters::new(),
            retries: Counters::new(),
            irqs: Counters::new(),
            round_ops: Counters::new(),
            rounds: AtomicU64::new(0),
        }
    }

    /// Every thread of the run meets the others between two rounds (see
    /// the module docs).
    fn meet(&self, ctx: &Ctx) {
        match runner::threads() {
            1 => self.barrier.wait(ctx.cpus),
            n => self.barrier.wait_threads(ctx.cpus * n),
        }
    }

    /// The (workload, variant, configuration, length in ms) of round
    /// `round`, or `None` after the last.
    fn round(&self, round: usize) -> Option<(&'static dyn Seed, usize, Config, u64)> {
        match self.mode {
            Mode::Test => {
                let seed = self.seed;
                let correct = (0..seed.variants()).filter(|&i| !seed.is_control(i));
                let total = match runner::threads() {
                    1 => TEST_MS,
                    _ => SCHED_TEST_MS,
                };
                let share = total * 9 / 10 / correct.clone().count() as u64;
                let i = correct.clone().nth(round)?;
                Some((seed, i, Config::TORTURE, share))
            }
            Mode::Control => Some((
                self.seed,
                self.seed.control(),
                Config::TORTURE,
                CONTROL_ROUND_MS,
            )),
            Mode::Bench => ALL
                .iter()
                .flat_map(|&s| {
                    (0..s.variants())
                        .filter(move |&i| !s.is_control(i))
                        .map(move |i| (s, i, s.bench(), BENCH_PHASE_MS))
                })
                .nth(round),
        }
    }
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[
    &FD_TEST,
    &FD_CONTROL,
    &LIGHT_TEST,
    &LIGHT_CONTROL,
    &STAT_TEST,
    &STAT_CONTROL,
    &WALK_TEST,
    &WALK_CONTROL,
    &MMAP_TEST,
    &MMAP_CONTROL,
    &BENCH,
];

macro_rules! pair {
    ($test:ident, $control:ident, $seed:ident, $name:literal) => {
        /// The workload's correct variants under torture.
        pub static $test: SeedSuite =
            SeedSuite::new(Info::new($name, Kind::Test, TEST_MS), &$seed, Mode::Test);
        /// The workload's broken variant: must be caught.
        pub static $control: SeedSuite = SeedSuite::new(
            Info::new(concat!($name, "-control"), Kind::Control, CONTROL_MS),
            &$seed,
            Mode::Control,
        );
    };
}

pair!(FD_TEST, FD_CONTROL, FD_SEED, "seed-fd");
pair!(LIGHT_TEST, LIGHT_CONTROL, LIGHT_SEED, "seed-fget-light");
pair!(STAT_TEST, STAT_CONTROL, STAT_SEED, "seed-stat");
pair!(WALK_TEST, WALK_CONTROL, WALK_SEED, "seed-walk");
pair!(MMAP_TEST, MMAP_CONTROL, MMAP_SEED, "seed-mmap");

/// The benchmark: every correct variant of every workload.
pub static BENCH: SeedSuite = SeedSuite::new(
    // 13 variants, plus slack for the barriers, setups and checks: a
    // loaded host stretches those, not the phases (see `bench::BENCH`'s
    // budget); the suite ends when its rounds do.
    Info::new("seed-bench", Kind::Bench, BENCH_PHASE_MS * 13 + 30_000),
    &FD_SEED,
    Mode::Bench,
);

impl Suite for SeedSuite {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        for c in [
            &self.ops,
            &self.writes,
            &self.misses,
            &self.retries,
            &self.irqs,
        ] {
            c.reset();
        }
        // Relaxed: the harness's start orders setup before the run.
        self.rounds.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        // The workload's CPU (see the module docs), and who leads.
        let id = ctx.thread * ctx.cpus + ctx.cpu;
        let leader = id == 0;
        let mut rng = Rng::new(id as u64 * 7919 + 17);
        let mut round = 0;
        while let Some((seed, variant, config, ms)) = self.round(round) {
            if leader {
                seed.set_threads(ctx.cpus * runner::threads());
                seed.setup(variant, config);
                self.round_ops.reset();
                // Relaxed: published by the barrier.
                self.round_end
                    .store(time::now() + time::ms_to_ticks(ms), Ordering::Relaxed);
            }
            self.meet(ctx);
            let (start, end) = (time::now(), self.round_end.load(Ordering::Relaxed));
            let mut c = Counts::default();
            let mut now = start;
            while now < end && !ctx.should_stop() {
                c += seed.step(id, STEP, &mut rng);
                now = time::now();
            }
            self.ops.add(ctx.cpu, c.ops);
            self.writes.add(ctx.cpu, c.writes);
            self.misses.add(ctx.cpu, c.misses);
            self.retries.add(ctx.cpu, c.retries);
            self.round_ops.add(ctx.cpu, c.ops);
            self.meet(ctx);
            if leader {
                let elapsed_ms = time::ticks_to_ms(now.max(end) - start).max(1);
                if let Err(v) = seed.check() {
                    self.info.report(format_args!(
                        "{} ({}): {v}",
                        seed.label(variant),
                        if config == Config::TORTURE {
                            "torture"
                        } else {
                            "measured"
                        }
                    ));
                    ctx.fail(v.what);
                }
                if self.mode == Mode::Bench {
                    let ops = self.round_ops.sum(ctx.cpus);
                    println!(
                        "KSYNC-SEED workload=\"{}\" variant=\"{}\" cpus={} ops={ops} ms={elapsed_ms} ops_per_s={}",
                        seed.name(),
                        seed.label(variant),
                        ctx.cpus,
                        ops * 1000 / elapsed_ms
                    );
                }
                self.rounds.fetch_add(1, Ordering::Relaxed);
                let stop = ctx.failed() || (self.mode == Mode::Control && ctx.should_stop());
                let more = !stop && self.round(round + 1).is_some();
                // Relaxed: published by the barrier.
                self.go_on.store(more, Ordering::Relaxed);
            }
            self.meet(ctx);
            if !self.go_on.load(Ordering::Relaxed) {
                break;
            }
            round += 1;
        }
    }

    fn irq(&self, ctx: &Ctx) {
        self.irqs.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        self.info.report_per_cpu(
            cpus,
            &[
                ("ops", &self.ops),
                ("writes", &self.writes),
                ("retries", &self.retries),
                ("misses", &self.misses),
                ("irqs", &self.irqs),
            ],
        );
        self.info.report(format_args!(
            "{} rounds, {} operations",
            self.rounds.load(Ordering::Relaxed),
            self.ops.sum(cpus)
        ));
        Summary::new(self.ops.sum(cpus), self.ops.min_max(cpus), None)
    }
}
