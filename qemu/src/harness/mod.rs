//! The test harness: what a suite is ([`Suite`], [`Info`], [`Kind`],
//! [`Summary`]), what it sees of the run ([`Ctx`]), the [`Registry`] of
//! suites the kernel knows, the run's arguments ([`args`]) and the runner
//! that runs them on every CPU in lock step and reports ([`runner`]).
//!
//! The harness knows no suite by name: `main.rs` hands it the registry
//! (`suites::REGISTRY`), so the suites build on the harness and never the
//! other way round.

pub mod args;
pub mod runner;

use core::fmt;

pub use self::runner::Ctx;
use crate::kernel::cpu::Counters;
use crate::println;

/// The suites a kernel image holds: one slice per suite file, in the order
/// `tests` and `controls` run them.
pub struct Registry {
    files: &'static [&'static [&'static dyn Suite]],
}

impl Registry {
    /// A registry of `files`.
    pub const fn new(files: &'static [&'static [&'static dyn Suite]]) -> Self {
        Self { files }
    }

    /// Every registered suite, in order.
    pub fn all(&self) -> impl Iterator<Item = &'static dyn Suite> + use<> {
        self.files.iter().flat_map(|file| file.iter().copied())
    }

    /// The suite at `index` in [`all`](Self::all).
    pub fn get(&self, index: usize) -> &'static dyn Suite {
        self.all().nth(index).expect("suite index from the plan")
    }
}

/// What a suite is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Must pass.
    Test,
    /// Deliberately broken: must be reported as failing.
    Control,
    /// Measures; passes unless its sanity checks fail.
    Bench,
}

impl Kind {
    /// The word used on `KSYNC-` lines.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Test => "test",
            Kind::Control => "control",
            Kind::Bench => "bench",
        }
    }
}

/// What a suite is, as the runner, `list` and the `KSYNC-` lines say: its
/// name, kind and budget. Every suite keeps one and also prints its
/// statistics through it.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// Short name, used on the command line and in reports.
    pub name: &'static str,
    /// Test, control or benchmark.
    pub kind: Kind,
    /// Guest time [`Suite::run`] may take, in milliseconds.
    pub budget_ms: u64,
}

impl Info {
    /// A suite called `name`, of `kind`, that runs for `budget_ms`.
    pub const fn new(name: &'static str, kind: Kind, budget_ms: u64) -> Self {
        Self {
            name,
            kind,
            budget_ms,
        }
    }

    /// Prints one statistics line of [`Suite::finish`]: `  <name>: <text>`.
    pub fn report(&self, text: fmt::Arguments<'_>) {
        println!("  {}: {text}", self.name);
    }

    /// Prints one CPU's statistics line: `  <name> cpu<cpu>: <text>`.
    pub fn report_cpu(&self, cpu: usize, text: fmt::Arguments<'_>) {
        println!("  {} cpu{cpu}: {text}", self.name);
    }

    /// Prints one [`report_cpu`](Self::report_cpu) line for each of the
    /// first `cpus` CPUs, listing `key=value` for each of `stats`.
    pub fn report_per_cpu(&self, cpus: usize, stats: &[(&str, &dyn PerCpuStat)]) {
        for cpu in 0..cpus {
            self.report_cpu(cpu, format_args!("{}", CpuStats { cpu, stats }));
        }
    }
}

/// A statistic kept per CPU, printed by [`Info::report_per_cpu`].
pub trait PerCpuStat {
    /// Writes CPU `cpu`'s value.
    fn fmt_cpu(&self, cpu: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl PerCpuStat for Counters {
    fn fmt_cpu(&self, cpu: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get(cpu))
    }
}

/// One CPU's `key=value` list.
struct CpuStats<'a> {
    cpu: usize,
    stats: &'a [(&'a str, &'a dyn PerCpuStat)],
}

impl fmt::Display for CpuStats<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, stat)) in self.stats.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{key}=")?;
            stat.fmt_cpu(self.cpu, f)?;
        }
        Ok(())
    }
}

/// What [`Suite::finish`] reports.
pub struct Summary {
    /// Operations done in all, thread and interrupt context.
    pub ops: u64,
    /// Fewest thread-context operations of one CPU.
    pub cpu_min: u64,
    /// Most thread-context operations of one CPU.
    pub cpu_max: u64,
    /// Why the suite failed, if its final checks found a problem.
    pub failure: Option<&'static str>,
    /// `call_rcu` callbacks the suite queued and saw invoked (0, 0 for a
    /// suite that queues none); on the result line for the soak totals.
    pub callbacks: (u64, u64),
}

impl Summary {
    /// `ops` in all, `(cpu_min, cpu_max)` the spread of thread-context
    /// operations over the CPUs (`Counters::min_max`), and the verdict.
    pub fn new(ops: u64, (cpu_min, cpu_max): (u64, u64), failure: Option<&'static str>) -> Self {
        Self {
            ops,
            cpu_min,
            cpu_max,
            failure,
            callbacks: (0, 0),
        }
    }

    /// The same, with `queued` callbacks queued and `invoked` invoked.
    pub fn with_callbacks(self, queued: u64, invoked: u64) -> Self {
        Self {
            callbacks: (queued, invoked),
            ..self
        }
    }
}

/// A torture test, control or benchmark run on every CPU at once.
///
/// State lives in the implementing value (a `static`), so every method takes
/// `&self` and the type must be `Sync`.
pub trait Suite: Sync {
    /// Name, kind and budget.
    fn info(&self) -> &Info;

    /// Short name, used on the command line and in reports.
    fn name(&self) -> &'static str {
        self.info().name
    }

    /// Test, control or benchmark.
    fn kind(&self) -> Kind {
        self.info().kind
    }

    /// Guest time [`run`](Self::run) may take, in milliseconds.
    fn budget_ms(&self) -> u64 {
        self.info().budget_ms
    }

    /// Boot CPU, before the run: reset the state for `cpus` CPUs.
    fn setup(&self, cpus: usize);

    /// Every CPU, thread context, interrupts on: work until
    /// [`Ctx::should_stop`]; call [`Ctx::fail`] on a violation.
    fn run(&self, ctx: &Ctx);

    /// From the timer interrupt of any CPU while the suite runs (interrupts
    /// off, may interrupt that CPU's `run` anywhere interrupts are on).
    fn irq(&self, ctx: &Ctx);

    /// Boot CPU after every CPU returned from `run` and no handler runs:
    /// final checks and statistics (printed here).
    fn finish(&self, cpus: usize) -> Summary;

    /// Whether CPU hotplug churn may run during the suite when the run asks
    /// for it (`hotplug`, see `kernel::hotplug`): `Ok`, or why not (printed
    /// on a `KSYNC-HOTPLUG` line). Churn takes CPUs other than CPU 0
    /// offline inside [`Ctx::should_stop`], so a suite that allows it must
    /// not wait in `run` for a given other CPU without a way out, and must
    /// not mind a CPU pausing for a while between two operations.
    fn hotplug(&self) -> Result<(), &'static str> {
        Err("not written for CPU hotplug")
    }

    /// Whether RCU stall reports during the suite are expected. For every
    /// other suite a report fails it (`runner::STALL_REASON`).
    fn expects_rcu_stalls(&self) -> bool {
        false
    }
}
