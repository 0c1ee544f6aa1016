//! `cargo xtask torture`: soak runs. Boots the test kernels again and again,
//! each boot with a fresh random seed, running the suites that allow CPU
//! hotplug churn with churn on (`hotplug seed=N ...`, see
//! `qemu/src/kernel/hotplug.rs`), and totals what the kernels report on
//! their `KSYNC-RESULT` lines. A failing boot's log is kept under
//! `target/torture/` with the command that replays it (same
//! configuration, same seed).

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use super::arch::Config;
use super::build::Kernels;
use super::run::run_qemu;
use super::{Outcome, RUN_SLACK};
use crate::tools::root;

/// The suites of every torture boot, in order: those the issue names for
/// churn, and the two floods (all allow churn).
pub const SUITES: &[&str] = &[
    "rcu",
    "rwlock-gated",
    "percpu-counter",
    "brlock",
    "rcu-flood",
    "rwlock-flood",
];
/// Guest time of one boot's suites (their budgets, `list` says the same).
const SUITES_BUDGET: Duration = Duration::from_millis(8_000);

/// What `cargo xtask torture` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// How long to keep booting (a boot that started goes to its end).
    pub minutes: f64,
    /// QEMU's `-smp`.
    pub smp: usize,
    /// Only the configurations of this architecture (`x86_64`, `aarch64`)
    /// or this one configuration (`aarch64-lse`, ...).
    pub arch: Option<String>,
    /// Every boot with this seed instead of fresh ones (to replay).
    pub seed: Option<u64>,
    /// Stop after this many boots.
    pub boots: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            minutes: 10.0,
            smp: 4,
            arch: None,
            seed: None,
            boots: None,
        }
    }
}

/// The totals of a soak.
#[derive(Default, Debug)]
pub struct Totals {
    pub boots: u64,
    pub suites: u64,
    pub ops: u64,
    pub grace_periods: u64,
    pub cb_queued: u64,
    pub cb_invoked: u64,
    pub cpu_off: u64,
    pub cpu_on: u64,
    pub stalls: u64,
    /// One line per failed boot: what, the seed, the log, the replay.
    pub failures: Vec<String>,
}

/// A fresh seed from the standard library's per-process random keys and the
/// clock.
fn fresh_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one(nanos)
}

/// The configurations `options` selects.
/// The architectures and configurations the soak boots (what `--arch`
/// accepts), from the architecture table.
pub fn soak_names() -> (Vec<&'static str>, Vec<&'static str>) {
    let all: Vec<Config> = Config::all_tcg(4)
        .into_iter()
        .filter(|c| c.variant.suites.is_empty() && !c.variant.lockdep())
        .collect();
    let mut arches: Vec<&'static str> = all.iter().map(|c| c.arch.name).collect();
    arches.dedup();
    (arches, all.iter().map(|c| c.name).collect())
}

fn configs(options: &Options) -> Result<Vec<Config>, String> {
    // Images built for a few suites only (the `--cfg ksync_generic` ones)
    // cannot run the torture boots' suites; the lockdep image checks lock
    // order, which the soak's time is better spent without.
    let all: Vec<Config> = Config::all_tcg(options.smp)
        .into_iter()
        .filter(|c| c.variant.suites.is_empty() && !c.variant.lockdep())
        .collect();
    let chosen: Vec<Config> = match &options.arch {
        None => all,
        Some(a) => all
            .into_iter()
            .filter(|c| c.arch.name == a || c.name == a)
            .collect(),
    };
    if chosen.is_empty() {
        let names: Vec<&str> = Config::all_tcg(options.smp)
            .iter()
            .flat_map(|c| [c.arch.name, c.name])
            .collect();
        return Err(format!(
            "no configuration matches --arch {}; try one of: {}",
            options.arch.as_deref().unwrap_or(""),
            names.join(", ")
        ));
    }
    Ok(chosen)
}

/// The command that replays a boot.
fn replay_command(config: &Config, smp: usize, seed: u64) -> String {
    format!(
        "cargo xtask torture --arch {} --smp {smp} --seed {seed} --boots 1",
        config.name
    )
}

/// Runs the soak and prints progress and the totals.
pub fn torture(options: &Options) -> Result<Totals, String> {
    let configs = configs(options)?;
    let kernels = Kernels::build(&configs);
    let failed_dir = root().join("target").join("torture");
    let plan = format!("hotplug {}", SUITES.join(" "));
    let budget = Duration::from_secs_f64(options.minutes.max(0.0) * 60.0);
    let start = Instant::now();
    let mut totals = Totals::default();
    println!(
        "[torture] {} on {} with -smp {}, churn on, for {:.1} min: {}",
        if options.seed.is_some() {
            "fixed seed"
        } else {
            "fresh seeds"
        },
        configs
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", "),
        options.smp,
        options.minutes,
        SUITES.join(" ")
    );
    'soak: loop {
        for config in &configs {
            let out_of_time = totals.boots > 0 && start.elapsed() >= budget;
            if out_of_time || options.boots.is_some_and(|n| totals.boots >= n) {
                break 'soak;
            }
            let kernel = kernels.get(config)?;
            let seed = options.seed.unwrap_or_else(fresh_seed);
            let run = run_qemu(
                config,
                kernel,
                &format!("seed={seed} {plan}"),
                SUITES_BUDGET + RUN_SLACK,
                "torture",
            )?;
            totals.boots += 1;
            let mut problems = Vec::new();
            let mut boot = Totals::default();
            for suite in SUITES {
                let Some(r) = run.result(suite) else {
                    problems.push(format!("{suite}: no result"));
                    continue;
                };
                let num = |key: &str| r.num(key).unwrap_or(0.0) as u64;
                boot.suites += 1;
                boot.ops += num("ops");
                boot.grace_periods += num("gps");
                boot.cb_queued += num("cb_queued");
                boot.cb_invoked += num("cb_invoked");
                boot.cpu_off += num("cpu_off");
                boot.cpu_on += num("cpu_on");
                if r.get("status") != Some("PASS") {
                    problems.push(format!("{suite}: {}", r.get("reason").unwrap_or("failed")));
                }
                if num("cb_queued") != num("cb_invoked") {
                    problems.push(format!("{suite}: callbacks queued != invoked"));
                }
            }
            boot.stalls = run.markers("KSYNC-RCU-STALL").count() as u64;
            if let Some(trouble) = run.trouble(config) {
                problems.push(trouble);
            }
            totals.suites += boot.suites;
            totals.ops += boot.ops;
            totals.grace_periods += boot.grace_periods;
            totals.cb_queued += boot.cb_queued;
            totals.cb_invoked += boot.cb_invoked;
            totals.cpu_off += boot.cpu_off;
            totals.cpu_on += boot.cpu_on;
            totals.stalls += boot.stalls;
            let elapsed = start.elapsed().as_secs();
            if problems.is_empty() {
                println!(
                    "[torture] {:>3}:{:02} boot {:>3} {:<13} seed={seed:<20} ok   {} ops, {} GPs, {} callbacks, {} CPUs off/on",
                    elapsed / 60,
                    elapsed % 60,
                    totals.boots,
                    config.name,
                    boot.ops,
                    boot.grace_periods,
                    boot.cb_invoked,
                    boot.cpu_off,
                );
            } else {
                let _ = fs::create_dir_all(&failed_dir);
                let log: PathBuf = failed_dir.join(format!("{}-seed-{seed}.log", config.name));
                let _ = fs::write(&log, run.lines.join("\n") + "\n");
                let line = format!(
                    "{} seed={seed}: {} (log: {}; replay: {})",
                    config.name,
                    problems.join("; "),
                    log.display(),
                    replay_command(config, options.smp, seed)
                );
                println!(
                    "[torture] {:>3}:{:02} boot {:>3} FAIL {line}",
                    elapsed / 60,
                    elapsed % 60,
                    totals.boots
                );
                totals.failures.push(line);
            }
        }
    }
    print_totals(&totals, start.elapsed());
    Ok(totals)
}

fn print_totals(t: &Totals, elapsed: Duration) {
    println!(
        "[torture] totals after {:.1} min: {} boots, {} suite runs, {} operations, {} grace periods, {} callbacks queued = {} invoked{}, {} CPU hotplug events ({} offline, {} back online), {} RCU stalls, {} failures",
        elapsed.as_secs_f64() / 60.0,
        t.boots,
        t.suites,
        t.ops,
        t.grace_periods,
        t.cb_queued,
        t.cb_invoked,
        if t.cb_queued == t.cb_invoked {
            ""
        } else {
            " (MISMATCH)"
        },
        t.cpu_off + t.cpu_on,
        t.cpu_off,
        t.cpu_on,
        t.stalls,
        t.failures.len()
    );
    for failure in &t.failures {
        println!("[torture]   FAIL {failure}");
    }
}

/// `cargo xtask test`'s short soak (about `minutes`), as outcomes: one for
/// the soak, one per failed boot.
pub fn short(minutes: f64) -> Vec<Outcome> {
    let options = Options {
        minutes,
        ..Options::default()
    };
    match torture(&options) {
        Err(e) => vec![Outcome {
            name: "torture".into(),
            passed: false,
            detail: e,
        }],
        Ok(t) => {
            let mut outcomes: Vec<Outcome> = t
                .failures
                .iter()
                .map(|f| Outcome {
                    name: "torture boot".into(),
                    passed: false,
                    detail: f.clone(),
                })
                .collect();
            let ok = t.stalls == 0 && t.cb_queued == t.cb_invoked && t.boots > 0;
            outcomes.push(Outcome {
                name: format!("torture ({} boots, churn on)", t.boots),
                passed: ok && t.failures.is_empty(),
                detail: format!(
                    "{} ops, {} grace periods, {} callbacks, {} hotplug events, {} stalls",
                    t.ops,
                    t.grace_periods,
                    t.cb_invoked,
                    t.cpu_off + t.cpu_on,
                    t.stalls
                ),
            });
            outcomes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_selection() {
        let names = |arch: &str| -> Vec<&'static str> {
            let options = Options {
                arch: Some(arch.into()),
                ..Options::default()
            };
            configs(&options).unwrap().iter().map(|c| c.name).collect()
        };
        assert_eq!(names("x86_64"), ["x86_64-tcg"]);
        assert_eq!(names("aarch64"), ["aarch64-lse", "aarch64-llsc"]);
        assert_eq!(names("aarch64-llsc"), ["aarch64-llsc"]);
        let none = Options {
            arch: Some("sparc".into()),
            ..Options::default()
        };
        assert!(configs(&none).is_err());
    }
}
