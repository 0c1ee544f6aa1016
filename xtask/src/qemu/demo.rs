//! `demo`: the main job's boots and the per-architecture tables it prints.

use std::fmt::Write as _;

use super::arch::{Accel, Config};
use super::build::Kernels;
use super::run::{Marker, Run, run_qemu};
use super::{CPUS, RUN_SLACK};

/// The main job: boots the demo (every test suite, then the benchmark) on
/// each architecture's demo image (x86_64, aarch64 `+lse`, riscv64) with 4 CPUs, and
/// prints per architecture a table of
/// the suites (passed, operations per CPU, fairness) and of the in-guest
/// benchmark, then the lock suites at 2, 4 and 8 CPUs ([`SCALING_CPUS`]).
/// Err if a suite fails or a kernel does not come up.
pub fn demo() -> Result<(), String> {
    let configs: Vec<Config> = Config::all_tcg(CPUS)
        .into_iter()
        .filter(|c| c.variant.demo)
        .collect();
    let kernels = Kernels::build(&configs);
    let mut errors = Vec::new();
    for config in &configs {
        let kernel = kernels.get(config)?;
        // The demo runs the tests and the benchmarks, about 43 s of
        // budgets: generous, as a loaded host stretches what surrounds
        // them.
        let run = run_qemu(config, kernel, "demo", RUN_SLACK * 3, "demo")?;
        print!("{}", demo_table(config, &run));
        print!("{}", seeds_table(config, &run));
        match scaling_table(config, kernel, &run) {
            Ok(table) => print!("{table}"),
            Err(e) => errors.push(e),
        }
        if let Some(trouble) = run.trouble(config) {
            errors.push(format!(
                "{}: {trouble} (log: {})",
                config.name,
                run.log.display()
            ));
        }
        let failed: Vec<String> = run
            .markers("KSYNC-RESULT")
            .filter(|m| m.get("status") != Some("PASS"))
            .map(|m| {
                format!(
                    "{}/{}: {}",
                    config.name,
                    m.get("suite").unwrap_or("?"),
                    m.get("reason").unwrap_or("?")
                )
            })
            .collect();
        errors.extend(failed);
        if run.markers("KSYNC-RESULT").next().is_none() {
            errors.push(format!(
                "{}: no suite reported (log: {})",
                config.name,
                run.log.display()
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// The lock suites of the scaling table (one boot per CPU count but the
/// demo's own).
const SCALING_SUITES: &[&str] = &[
    "spinlock-ticket",
    "spinlock-ttas",
    "spinlock-queued",
    "lockref",
];
/// The CPU counts of the scaling table; `CPUS` comes from the demo run.
const SCALING_CPUS: [usize; 3] = [2, CPUS, 8];

/// Boots the lock suites at the other CPU counts of [`SCALING_CPUS`] and
/// tabulates operations per CPU and fairness with the demo run's figures.
/// Err (the failures) when a suite fails or a boot goes wrong.
fn scaling_table(config: &Config, kernel: &std::path::Path, demo: &Run) -> Result<String, String> {
    let mut out = String::new();
    let mut errors = Vec::new();
    let mut runs = Vec::new();
    for cpus in SCALING_CPUS {
        if cpus == config.cpus {
            runs.push((cpus, None));
            continue;
        }
        let scaled = config.with_cpus(cpus);
        let label = format!("scaling-smp{cpus}");
        let run = run_qemu(
            &scaled,
            kernel,
            &SCALING_SUITES.join(" "),
            RUN_SLACK,
            &label,
        )?;
        if let Some(trouble) = run.trouble(&scaled) {
            errors.push(format!(
                "{}/{label}: {trouble} (log: {})",
                config.name,
                run.log.display()
            ));
        }
        runs.push((cpus, Some(run)));
    }
    let _ = writeln!(
        out,
        "locks by CPU count (TCG on this host: emulation, NOT hardware performance; ksync's \
         default mode, see the letters below):"
    );
    let _ = write!(out, "{:<17}", "suite");
    for (cpus, _) in &runs {
        let _ = write!(out, " {:>28}", format!("-smp {cpus}: ops/CPU (min/max)"));
    }
    let _ = writeln!(out);
    for suite in SCALING_SUITES {
        let _ = write!(out, "{suite:<17}");
        for (cpus, run) in &runs {
            let run = run.as_ref().unwrap_or(demo);
            let cell = match run.result(suite) {
                Some(r) => {
                    let ops = r.num("ops").unwrap_or(0.0);
                    let (lo, hi) = (
                        r.num("cpu_min").unwrap_or(0.0),
                        r.num("cpu_max").unwrap_or(0.0),
                    );
                    if r.get("status") != Some("PASS") {
                        errors.push(format!(
                            "{}/-smp {cpus}/{suite}: {}",
                            config.name,
                            r.get("reason").unwrap_or("?")
                        ));
                    }
                    let fair = if hi > 0.0 { lo / hi } else { 0.0 };
                    let mode = spin_letter(r.get("spin"));
                    format!("{:.0} ({fair:.2}) {mode}", ops / *cpus as f64)
                }
                None => "-".to_string(),
            };
            let _ = write!(out, " {cell:>28}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "  (ops: thread and interrupt acquisitions in the suite's budget; min/max: thread-context\n   \
         acquisitions of the slowest CPU over the fastest's; lockref: operations of all kinds;\n   \
         the letter: the FIFO locks' mode after the suite, P test-and-set from the start (x86_64's\n   \
         hypervisor bit), D test-and-set since a FIFO waiter detected a stall, W FIFO still watching,\n   \
         F strict FIFO)"
    );
    if errors.is_empty() {
        Ok(out)
    } else {
        print!("{out}");
        Err(errors.join("\n"))
    }
}

/// One letter for the `spin` field of a `KSYNC-RESULT` line (the FIFO
/// locks' mode after the suite, `qemu/src/kernel/spin.rs`).
fn spin_letter(mode: Option<&str>) -> &'static str {
    match mode {
        Some("preemptible") => "P",
        Some("detected") => "D",
        Some("watching") => "W",
        Some("fifo") => "F",
        _ => "?",
    }
}

/// The per-architecture table of a demo run.
fn demo_table(config: &Config, run: &Run) -> String {
    let mut out = String::new();
    let boot = run.markers("KSYNC-BOOT").next();
    let arch = boot
        .as_ref()
        .and_then(|m| m.get("arch"))
        .unwrap_or(config.arch.name)
        .to_string();
    let online = run
        .markers("KSYNC-CPUS")
        .next()
        .and_then(|m| m.get("online").map(str::to_string))
        .unwrap_or("?".into());
    let _ = writeln!(
        out,
        "\n== {arch}: {} — {online} CPUs online ==",
        config.describe()
    );
    let results: Vec<Marker> = run
        .markers("KSYNC-RESULT")
        .filter(|m| m.get("kind") == Some("test"))
        .collect();
    let passed = results
        .iter()
        .filter(|m| m.get("status") == Some("PASS"))
        .count();
    let _ = writeln!(out, "suites passed: {passed}/{}", results.len());
    let _ = writeln!(
        out,
        "{:<21} {:<6} {:>10} {:>21} {:>14} {:>16}",
        "suite", "result", "ops", "ops/CPU min..max", "fairness", "IRQs/CPU (work)"
    );
    for r in &results {
        let (lo, hi) = (
            r.num("cpu_min").unwrap_or(0.0),
            r.num("cpu_max").unwrap_or(0.0),
        );
        let fairness = if lo > 0.0 {
            format!("max/min {:.2}", hi / lo)
        } else {
            "max/min inf".to_string()
        };
        let _ = writeln!(
            out,
            "{:<21} {:<6} {:>10} {:>21} {:>14} {:>16}",
            r.get("suite").unwrap_or("?"),
            r.get("status").unwrap_or("?"),
            r.get("ops").unwrap_or("?"),
            format!(
                "{}..{}",
                r.get("cpu_min").unwrap_or("?"),
                r.get("cpu_max").unwrap_or("?")
            ),
            fairness,
            format!(
                "{}..{}",
                r.get("irq_min").unwrap_or("?"),
                r.get("irq_max").unwrap_or("?")
            ),
        );
        if r.get("status") != Some("PASS") {
            let _ = writeln!(out, "  reason: {}", r.get("reason").unwrap_or("?"));
        }
    }
    let bench: Vec<Marker> = run.markers("KSYNC-BENCH").collect();
    if !bench.is_empty() {
        let counter = config.arch.counter;
        let hz = bench[0].num("counter_hz").unwrap_or(0.0);
        let label = match config.accel {
            Accel::Tcg => "TCG: emulated cost, NOT hardware performance",
            Accel::TcgIcount => "TCG icount: guest instructions, NOT time",
            Accel::Kvm => "KVM: nested virtualisation, noisy",
        };
        let _ = writeln!(
            out,
            "benchmark: one get+put pair per op, counter {counter} at {:.1} MHz ({label})",
            hz / 1e6
        );
        let _ = writeln!(
            out,
            "{:<20} {:>26} {:>7} {:>26} {:>7}",
            "op",
            "1 CPU: ticks (ns) / op",
            "vs xv6",
            format!("{online} CPUs: ticks (ns) / op"),
            "vs xv6"
        );
        let mut ops: Vec<&str> = Vec::new();
        for b in &bench {
            if let Some(op) = b.get("op")
                && !ops.contains(&op)
            {
                ops.push(op);
            }
        }
        let phase = |op: &str, one: bool| {
            bench
                .iter()
                .find(|b| b.get("op") == Some(op) && (b.get("cpus") == Some("1")) == one)
        };
        for op in ops {
            let cell = |one: bool| {
                phase(op, one)
                    .map(|b| {
                        format!(
                            "{} ({})",
                            b.get("ticks_per_op").unwrap_or("?"),
                            b.get("ns_per_op").unwrap_or("?")
                        )
                    })
                    .unwrap_or_else(|| "-".into())
            };
            // The IRQ-saving locks' operations over the xv6 lock's in the
            // same phase (>= 1.00x: at least as fast as the baseline).
            let ratio = |one: bool| {
                let ops = |op| phase(op, one).and_then(|b| b.num("ops"));
                match (ops(op), ops(XV6_OP)) {
                    (Some(ops), Some(base)) if is_vs_xv6(op) && base > 0.0 => {
                        format!("{:.2}x", ops / base)
                    }
                    _ => "".into(),
                }
            };
            let _ = writeln!(
                out,
                "{:<20} {:>26} {:>7} {:>26} {:>7}",
                op,
                cell(true),
                ratio(true),
                cell(false),
                ratio(false)
            );
        }
        let _ = writeln!(
            out,
            "  (vs xv6: the op's operations over {XV6_OP}'s in the same phase, for the IRQ-saving locks;\n   \
             one boot: under TCG on a loaded host take the median of several, see README.md)"
        );
        if config.accel == Accel::Tcg {
            let _ = writeln!(
                out,
                "  (several vCPUs on fewer host cores: the guest runs ksync's oversubscribed mode, where the\n   \
                 ticket lock hands off by test-and-set; with strict FIFO (run word `fifo`) its {online}-CPU\n   \
                 figure measures the host scheduling each waiting vCPU in turn; see qemu/README.md)"
            );
        }
    }
    let costs: Vec<String> = run
        .markers("KSYNC-COST")
        .map(|m| {
            format!(
                "{} {}",
                m.get("op").unwrap_or("?"),
                m.get("ns_per_op").unwrap_or("?")
            )
        })
        .collect();
    if !costs.is_empty() {
        let _ = writeln!(
            out,
            "one instruction's cost on one CPU, ns (the `cost` suite; an x86_64 `pause` under TCG\n  \
             leaves the translated code, see docs/qemu.md): {}",
            costs.join(", ")
        );
    }
    out
}

/// Boots of the in-guest benchmark per architecture and CPU count in
/// `cargo xtask bench` (the median is each cell's figure).
pub const GUEST_BENCH_BOOTS: usize = 5;

/// Which part of the in-guest table to measure (`cargo xtask bench
/// --guest --arch A --smp N --boots N`): by default all of it.
#[derive(Default)]
pub struct GuestFilter {
    /// Under `-icount shift=0` (one TCG thread, the counter counting the
    /// guest's instructions): each cell is then xv6's instructions per
    /// operation over the lock's, the same in every boot.
    pub icount: bool,
    /// One architecture (`x86_64`, ...) or configuration name.
    pub arch: Option<String>,
    /// One CPU count of [`GUEST_BENCH_SMP`].
    pub smp: Option<usize>,
    /// Boots per cell instead of [`GUEST_BENCH_BOOTS`].
    pub boots: Option<usize>,
}

/// The CPU counts of the in-guest table (`-smp`; 4 and 8 oversubscribe a
/// two-core host).
const GUEST_BENCH_SMP: [usize; 4] = [1, 2, 4, 8];

/// The locks of the in-guest table, measured against [`XV6_OP`].
const GUEST_BENCH_OPS: [&str; 3] = ["irq-ticket", "irq-queued", "irq-ttas"];

/// The FIFO locks of the benchmark: their contended cells are reported,
/// not held to the goal (see [`guest_bench`]).
const FIFO_OPS: &[&str] = &["irq-ticket", "irq-queued"];

/// The goal of the in-guest table: a cell at or above this ratio to the
/// xv6 lock.
const GOAL: f64 = 0.95;

/// `cargo xtask bench`'s in-guest table: the `bench` suite booted
/// `boots` times on each architecture's demo image at each CPU count of
/// [`GUEST_BENCH_SMP`], the boots interleaved (every architecture and
/// count once, then again) so that a change in the host's load falls on
/// every cell alike; per cell (architecture x `-smp` x phase: one CPU or
/// all) and lock, the median over the boots of the lock's operations over
/// the xv6 lock's in the same phase, with the range. The goal: the
/// test-and-set lock's cells and every lock's one-CPU cells at or above
/// [`GOAL`]; the FIFO locks' contended cells are reported with what
/// fairness costs.
pub fn guest_bench(boots: usize, filter: &GuestFilter) -> Result<String, String> {
    let configs: Vec<Config> = Config::all_tcg(CPUS)
        .into_iter()
        .filter(|c| c.variant.demo)
        .filter(|c| {
            filter
                .arch
                .as_deref()
                .is_none_or(|a| c.arch.name == a || c.name == a)
        })
        .map(|c| Config {
            accel: if filter.icount {
                Accel::TcgIcount
            } else {
                c.accel
            },
            ..c
        })
        .collect();
    if configs.is_empty() {
        return Err(format!(
            "no in-guest bench configuration matches --arch {}",
            filter.arch.as_deref().unwrap_or("")
        ));
    }
    // Under icount one TCG thread takes the vCPUs in turn, a time slice
    // each: a lock handed to another vCPU waits for the turn, and the
    // boots of more than one CPU crawl. One CPU only.
    let smps: Vec<usize> = GUEST_BENCH_SMP
        .into_iter()
        .filter(|&n| filter.smp.is_none_or(|s| s == n))
        .filter(|&n| !filter.icount || n == 1)
        .collect();
    if smps.is_empty() {
        return Err(format!(
            "--smp {}: the in-guest table's CPU counts are {GUEST_BENCH_SMP:?} (with --icount, 1 only)",
            filter.smp.unwrap_or(0)
        ));
    }
    let kernels = Kernels::build(&configs);
    // (arch index, smp, phase CPUs, op) -> ratios over the boots
    type Key = (usize, usize, usize, &'static str);
    let mut cells: Vec<(Key, Vec<f64>)> = Vec::new();
    let mut failed = Vec::new();
    for boot in 0..boots {
        for (a, config) in configs.iter().enumerate() {
            for &smp in &smps {
                let config = config.with_cpus(smp);
                let kernel = kernels.get(&config)?;
                let label = format!("guest-bench-smp{smp}-{boot}");
                let run = run_qemu(&config, kernel, "bench", RUN_SLACK * 2, &label)?;
                if let Some(trouble) = run.trouble(&config) {
                    return Err(format!(
                        "{} -smp {smp}: {trouble} (log: {})",
                        config.name,
                        run.log.display()
                    ));
                }
                if let Some(r) = run
                    .result("bench")
                    .filter(|r| r.get("status") != Some("PASS"))
                {
                    failed.push(format!(
                        "{} -smp {smp} boot {}: {} (log: {})",
                        config.name,
                        boot + 1,
                        r.get("reason").unwrap_or("?"),
                        run.log.display()
                    ));
                }
                let bench: Vec<Marker> = run.markers("KSYNC-BENCH").collect();
                let ops = |op: &str, cpus: usize| {
                    bench
                        .iter()
                        .find(|b| b.get("op") == Some(op) && b.num("cpus") == Some(cpus as f64))
                        .and_then(|b| b.num("ops"))
                };
                let mut phases = vec![1, smp];
                phases.dedup();
                for cpus in phases {
                    for op in GUEST_BENCH_OPS {
                        let (Some(mine), Some(base)) = (ops(op, cpus), ops(XV6_OP, cpus)) else {
                            continue;
                        };
                        if base <= 0.0 {
                            continue;
                        }
                        let key = (a, smp, cpus, op);
                        match cells.iter_mut().find(|(k, _)| *k == key) {
                            Some((_, v)) => v.push(mine / base),
                            None => cells.push((key, vec![mine / base])),
                        }
                    }
                }
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nin-guest locks against xv6's lock: the lock's operations over xv6-irq-lock's in the same \
         phase,\nmedian of {boots} interleaved boots (min..max); {}:",
        if filter.icount {
            "TCG with -icount shift=0 (-smp 1 only): the counter counts guest instructions, so \
             each cell is\nxv6's instructions per operation over the lock's"
        } else {
            "TCG, QEMU's emulation, not hardware"
        }
    );
    let _ = write!(out, "{:<8} {:>4} {:>7}", "arch", "-smp", "phase");
    for op in GUEST_BENCH_OPS {
        let _ = write!(out, " {op:>21}");
    }
    let _ = writeln!(out);
    let mut misses = Vec::new();
    let mut fifo = Vec::new();
    let mut met = 0;
    for (a, config) in configs.iter().enumerate() {
        for &smp in &smps {
            let mut phases = vec![1, smp];
            phases.dedup();
            for cpus in phases {
                let phase = if cpus == 1 {
                    "1 CPU".to_string()
                } else {
                    format!("{cpus} CPUs")
                };
                let _ = write!(out, "{:<8} {smp:>4} {phase:>7}", config.arch.name);
                for op in GUEST_BENCH_OPS {
                    let Some((_, v)) = cells.iter().find(|(k, _)| *k == (a, smp, cpus, op)) else {
                        let _ = write!(out, " {:>21}", "-");
                        continue;
                    };
                    let med = median(v);
                    let (lo, hi) = v
                        .iter()
                        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    let cell = format!("{} -smp {smp} {phase} {med:.2}x", config.arch.name);
                    // As printed (two decimals): 0.95x never reads as a miss.
                    let mark = if (med * 100.0).round() / 100.0 >= GOAL {
                        met += 1;
                        " "
                    } else if FIFO_OPS.contains(&op) && cpus != 1 {
                        fifo.push(format!("{op} {cell}"));
                        "f"
                    } else {
                        misses.push(format!("{op} {cell}"));
                        "!"
                    };
                    let n = if v.len() < boots {
                        format!(" n={}", v.len())
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        out,
                        " {:>21}",
                        format!("{med:.2} ({lo:.2}..{hi:.2}){n}{mark}")
                    );
                }
                let _ = writeln!(out);
            }
        }
    }
    let _ = writeln!(
        out,
        "  goal: >= {GOAL:.2}x in every cell of the test-and-set lock (irq-ttas) and every lock's 1-CPU cells\n  \
         (met in {met}); f: a FIFO lock contended ({} cells), below by the cost of fairness: each release\n  \
         hands the lock and its line to the next waiter in line, whose vCPU the host may not be running,\n  \
         where xv6's test-and-set lets the releasing CPU take it straight back; !: below the goal",
        fifo.len()
    );
    if !failed.is_empty() {
        let _ = writeln!(
            out,
            "  boots whose benchmark failed (their phases before the failure count; n= cells have fewer boots):\n    {}",
            failed.join("\n    ")
        );
    }
    if misses.is_empty() {
        let _ = writeln!(out, "  every goal cell met");
    } else {
        let _ = writeln!(out, "  below the goal: {}", misses.join(", "));
    }
    Ok(out)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The benchmark's baseline: xv6's spinlock as a hobby kernel ports it
/// (`qemu/src/suites/bench.rs`).
const XV6_OP: &str = "xv6-irq-lock";

/// Whether the benchmark op `op` is measured against [`XV6_OP`]: the
/// IRQ-saving locks (`irq-*`) and the baseline itself.
fn is_vs_xv6(op: &str) -> bool {
    op == XV6_OP || op.starts_with("irq-")
}

/// The seed workloads' table of a demo run (the `seed-bench` suite's
/// `KSYNC-SEED` lines): per workload, operations per second of each
/// variant on every CPU, and the first variant's (the design ksync's
/// primitive made) ratio to it. Empty if the suite did not run.
fn seeds_table(config: &Config, run: &Run) -> String {
    let mut out = String::new();
    let rows: Vec<Marker> = run.markers("KSYNC-SEED").collect();
    let Some(first) = rows.first() else {
        return out;
    };
    let label = match config.accel {
        Accel::Tcg => "TCG: emulation, NOT hardware performance",
        Accel::TcgIcount => "TCG icount: guest instructions, NOT time",
        Accel::Kvm => "KVM: nested virtualisation, noisy",
    };
    let _ = writeln!(
        out,
        "seed workloads: {} CPUs, measured configurations ({label})",
        first.get("cpus").unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "{:<14} {:<32} {:>12} {:>12}",
        "workload", "variant", "ops/s", "after/this"
    );
    let mut after: Option<(&str, f64)> = None;
    for r in &rows {
        let workload = r.get("workload").unwrap_or("?");
        let ops = r.num("ops_per_s").unwrap_or(0.0);
        let base = match after {
            Some((w, base)) if w == workload => base,
            _ => {
                after = Some((workload, ops));
                ops
            }
        };
        let ratio = if ops > 0.0 {
            format!("{:.2}x", base / ops)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{:<14} {:<32} {:>12.0} {:>12}",
            workload,
            r.get("variant").unwrap_or("?"),
            ops,
            ratio
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark table gives each IRQ-saving lock its operations over
    /// the xv6 lock's, per phase, and no ratio to the other ops.
    #[test]
    fn bench_table_shows_the_ratio_to_xv6() {
        let config = &Config::all_tcg(2)[0];
        let line = |op: &str, cpus: u32, ops: u32| {
            format!(
                "KSYNC-BENCH op={op} cpus={cpus} ops={ops} ticks_per_op=1.0 ns_per_op=1.0 counter_hz=1000000"
            )
        };
        let run = Run {
            lines: vec![
                line("spinlock-inc-dec", 1, 300),
                line("xv6-irq-lock", 1, 400),
                line("irq-ticket", 1, 500),
                line("spinlock-inc-dec", 2, 300),
                line("xv6-irq-lock", 2, 800),
                line("irq-ticket", 2, 600),
            ],
            status: Some(0),
            elapsed: std::time::Duration::ZERO,
            log: "test.log".into(),
        };
        let table = demo_table(config, &run);
        let row = |op: &str| {
            table
                .lines()
                .find(|l| l.starts_with(op))
                .unwrap_or_else(|| panic!("no {op} row in\n{table}"))
                .to_string()
        };
        assert!(row("irq-ticket").contains("1.25x"), "{table}");
        assert!(row("irq-ticket").contains("0.75x"), "{table}");
        assert!(row("xv6-irq-lock").contains("1.00x"), "{table}");
        assert!(!row("spinlock-inc-dec").contains('x'), "{table}");
    }
}
