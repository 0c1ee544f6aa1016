//! `test_all`: every configuration x every suite and control, one boot per
//! suite, each judged by its marker lines.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use super::arch::{Accel, Config, SHARED_BOOT, in_family};
use super::build::Kernels;
use super::run::{Marker, Run, run_qemu};
use super::{CPUS, KVM_SLACK, Outcome, RUN_SLACK};

#[derive(Clone)]
struct SuiteInfo {
    name: String,
    kind: String,
    budget: Duration,
}

/// Asks a kernel for its suites (`list`): the kernel is the one source of
/// truth, so a new suite needs no change here.
fn list_suites(config: &Config, kernel: &Path) -> Result<Vec<SuiteInfo>, String> {
    let run = run_qemu(config, kernel, "list", RUN_SLACK, "list")?;
    let suites: Vec<SuiteInfo> = run
        .markers("KSYNC-SUITE")
        .map(|m| SuiteInfo {
            name: m.get("name").unwrap_or("?").to_string(),
            kind: m.get("kind").unwrap_or("?").to_string(),
            budget: Duration::from_millis(m.num("budget_ms").unwrap_or(1000.0) as u64),
        })
        .collect();
    if suites.is_empty() || run.trouble(config).is_some() {
        return Err(format!(
            "listing the suites failed in {}: {} (log: {})",
            config.name,
            run.trouble(config)
                .unwrap_or_else(|| "no KSYNC-SUITE lines".into()),
            run.log.display()
        ));
    }
    Ok(suites)
}

// ---- test_all -------------------------------------------------------------------

/// Builds and runs every configuration x every suite and control, one boot
/// per suite; a control counts as passed when its failure was detected.
/// Prints progress lines as it goes. `kvm` (or `KSYNC_QEMU_KVM=1`) adds the
/// KVM configurations (x86_64) when `/dev/kvm` is usable.
pub fn test_all(kvm: bool) -> Vec<Outcome> {
    let kvm = kvm || std::env::var("KSYNC_QEMU_KVM").is_ok_and(|v| v == "1");
    let mut configs = Config::all_tcg(CPUS);
    // The lock suites at -smp 8 too: oversubscribed on a small host.
    configs.extend(Config::all_oversubscribed());
    // Three threads per CPU, preempted by the timer, -smp 4 and 8: one
    // boot each.
    configs.extend(Config::all_scheduled());
    if kvm {
        let cpus = thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(CPUS);
        let kvm_configs = Config::all_kvm(cpus);
        if kvm_usable() {
            configs.extend(kvm_configs);
        } else {
            let names: Vec<&str> = kvm_configs.iter().map(|c| c.name).collect();
            println!(
                "[qemu] KVM requested but /dev/kvm is not usable here: skipping {}",
                names.join(", ")
            );
        }
    }
    run_configs(&configs)
}

/// The TCG configurations at -smp 4 alone (`cargo xtask check qemu-tcg`):
/// every image of every architecture, one boot per suite (the suites of
/// `SHARED_BOOT` in one), as `cargo xtask test` runs them first.
pub fn test_tcg() -> Vec<Outcome> {
    run_configs(&Config::all_tcg(CPUS))
}

/// The scheduler configurations alone (`cargo xtask check qemu-sched`):
/// every architecture at -smp 8 (aarch64 LL/SC also at 4) with 3 threads per CPU.
pub fn test_sched() -> Vec<Outcome> {
    run_configs(&Config::all_scheduled())
}

/// QEMU boots at once for the configurations that may share the host: a
/// boot's suites run for their guest-time budgets, so a boot is bound by
/// the clock more than by the host's cores, and two `-smp 4` boots at once
/// on a two-core host take about the time of one. The oversubscribed and
/// scheduler configurations (more than [`CPUS`] vCPUs, or every suite in
/// one long boot, 3 threads per CPU) run alone afterwards: beside another
/// boot their bounds (a writer's longest wait, a round's progress) measure
/// the host's load. `KSYNC_QEMU_JOBS` sets another count (1: one boot at a
/// time, as on a host busy with other work).
fn qemu_jobs() -> usize {
    std::env::var("KSYNC_QEMU_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(2)
}

/// Builds the images of `configs` and runs their suites: the ones that may
/// share the host [`qemu_jobs`] at a time, then the others one by one.
/// Each configuration's lines are printed together when it ends, and the
/// outcomes keep the order of `configs`.
fn run_configs(configs: &[Config]) -> Vec<Outcome> {
    let start = Instant::now();
    let mut outcomes = Vec::new();
    let kernels = Kernels::build(configs);
    // The suites, listed by the first image that boots.
    let mut registry: Option<Vec<SuiteInfo>> = None;
    let mut runnable = Vec::new();
    for config in configs {
        let kernel = match kernels.get(config) {
            Ok(kernel) => kernel,
            Err(e) => {
                outcomes.push(Outcome {
                    name: format!("{}/build", config.name),
                    passed: false,
                    detail: e,
                });
                continue;
            }
        };
        if registry.is_none() {
            match list_suites(config, kernel) {
                Ok(suites) => registry = Some(suites),
                Err(e) => {
                    outcomes.push(Outcome {
                        name: format!("{}/list", config.name),
                        passed: false,
                        detail: e,
                    });
                    continue;
                }
            }
        }
        runnable.push((config, kernel));
    }
    let listed = registry.unwrap_or_default();
    let results: Vec<Mutex<Vec<Outcome>>> =
        runnable.iter().map(|_| Mutex::new(Vec::new())).collect();
    let alone = |i: &usize| runnable[*i].0.cpus > CPUS || runnable[*i].0.one_boot();
    let (last, first): (Vec<usize>, Vec<usize>) = (0..runnable.len()).partition(alone);
    let jobs = qemu_jobs();
    for (batch, jobs) in [(first, jobs), (last, 1)] {
        let queue = Mutex::new(batch.into_iter());
        thread::scope(|scope| {
            for _ in 0..jobs {
                scope.spawn(|| {
                    loop {
                        let next = lock(&queue).next();
                        let Some(i) = next else { break };
                        let (config, kernel) = runnable[i];
                        let mut log = String::new();
                        let ran = run_config(config, kernel, &listed, &mut log);
                        print!("{log}");
                        *lock(&results[i]) = ran;
                    }
                });
            }
        });
    }
    for result in results {
        outcomes.extend(result.into_inner().unwrap_or_else(|e| e.into_inner()));
    }
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    println!(
        "[qemu] {} passed, {failed} failed ({:.0} s; up to {jobs} boots at a time at -smp {CPUS})",
        outcomes.len() - failed,
        start.elapsed().as_secs_f64()
    );
    outcomes
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the suites of one configuration (every suite it lists, or the
/// ones its table row names), writing its progress lines to `log`.
fn run_config(
    config: &Config,
    kernel: &Path,
    listed: &[SuiteInfo],
    log: &mut String,
) -> Vec<Outcome> {
    let start = Instant::now();
    let mut outcomes = Vec::new();
    // An image may run some of the suites only (its table row says
    // which); a family that names no suite would silently test nothing.
    let suites: Vec<&SuiteInfo> = listed
        .iter()
        .filter(|s| config.variant.runs(&s.name, &s.kind))
        .collect();
    for family in config.variant.suites {
        if !listed.iter().any(|s| in_family(family, &s.name)) {
            outcomes.push(Outcome {
                name: format!("{}/{family}", config.name),
                passed: false,
                detail: format!("the kernel lists no suite `{family}` or `{family}-...`"),
            });
        }
    }
    let _ = writeln!(log, "[qemu] {}: {}", config.name, config.describe());
    let only = only_suites();
    let planned: Vec<&SuiteInfo> = suites
        .iter()
        .copied()
        .filter(|s| config.runs(&s.name))
        .filter(|s| only.as_ref().is_none_or(|o| o.contains(&s.name)))
        .collect();
    // One boot for all (the scheduler configurations), or one each but for
    // the suites that share one (`SHARED_BOOT`).
    let shared = |s: &&SuiteInfo| config.one_boot() || SHARED_BOOT.contains(&s.name.as_str());
    let together_planned: Vec<&SuiteInfo> = planned.iter().copied().filter(shared).collect();
    let together = (!together_planned.is_empty())
        .then(|| run_together(config, kernel, &together_planned, log));
    let mut boots_total = usize::from(together.is_some());
    for suite in planned {
        let alone = !shared(&suite);
        let mut outcome = match &together {
            _ if alone => run_suite(config, kernel, suite),
            Some(Ok(run)) => judge(config, run, suite),
            Some(Err(e)) => Outcome {
                name: outcome_name(config, suite),
                passed: false,
                detail: e.clone(),
            },
            None => unreachable!("a shared suite without its boot"),
        };
        // A control proves the checks can fail; a race it relies on
        // may be missed in one boot on an overloaded host (TCG vCPUs
        // on busy cores run few operations), so it gets up to
        // CONTROL_BOOTS boots to be caught. A test suite gets one.
        let mut boots = 1;
        boots_total += usize::from(alone);
        while suite.kind == "control" && !outcome.passed && boots < CONTROL_BOOTS {
            boots += 1;
            boots_total += 1;
            let _ = writeln!(
                log,
                "[qemu]   {:<40} not caught yet, boot {boots} of {CONTROL_BOOTS}",
                outcome.name
            );
            outcome = run_suite(config, kernel, suite);
        }
        let _ = writeln!(
            log,
            "[qemu]   {:<40} {}  {}",
            outcome.name,
            if outcome.passed { "ok  " } else { "FAIL" },
            first_line(&outcome.detail)
        );
        outcomes.push(outcome);
    }
    let took = start.elapsed();
    crate::tools::record_time(
        format!("qemu {} ({} boots)", config.name, boots_total),
        took,
    );
    let _ = writeln!(
        log,
        "[qemu] {} done in {:.0} s",
        config.name,
        took.as_secs_f64()
    );
    outcomes
}

/// `KSYNC_QEMU_ONLY=a,b,...`: run only these suites (exact names) in every
/// configuration, to time or debug a few; unset or empty: all.
fn only_suites() -> Option<Vec<String>> {
    let v = std::env::var("KSYNC_QEMU_ONLY").ok()?;
    let names: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!names.is_empty()).then_some(names)
}

fn kvm_usable() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// One boot running one suite, judged.
/// How many boots a control gets to show that its broken variant is caught.
const CONTROL_BOOTS: u32 = 3;

fn outcome_name(config: &Config, suite: &SuiteInfo) -> String {
    if suite.kind == "control" {
        format!("{}/control:{}", config.name, suite.name)
    } else {
        format!("{}/{}", config.name, suite.name)
    }
}

/// One boot running every suite of `suites` in turn (their budgets add up).
fn run_together(
    config: &Config,
    kernel: &Path,
    suites: &[&SuiteInfo],
    log: &mut String,
) -> Result<Run, String> {
    let names: Vec<&str> = suites.iter().map(|s| s.name.as_str()).collect();
    let budget: Duration = suites.iter().map(|s| s.budget).sum();
    let run = run_qemu(
        config,
        kernel,
        &names.join(" "),
        host_timeout(budget),
        "all",
    )?;
    let _ = writeln!(
        log,
        "[qemu]   {} suites in one boot: {:.1} s",
        suites.len(),
        run.elapsed.as_secs_f64()
    );
    Ok(run)
}

/// How long the host lets a boot whose suites' budgets add up to `budget`
/// run before it kills it: twice the budget, plus [`RUN_SLACK`]. The
/// suites end by the guest's clock, which follows the host's, so a boot
/// that works ends near its budget however busy the host is; what a busy
/// host stretches is everything around the suites (boot, bringing CPUs
/// up, barriers, set-ups and checks between rounds, in scheduler mode 3
/// threads per CPU), which in one boot of 57 suites adds up (43-72 s for
/// about 40 s of budgets at a host load of 15-20). A hang is still caught
/// by the kernel's own watchdog 10 s past a suite's budget; this timeout
/// is for a guest too stuck to report, and a generous one costs nothing
/// when nothing hangs.
fn host_timeout(budget: Duration) -> Duration {
    budget * 2 + RUN_SLACK
}

fn run_suite(config: &Config, kernel: &Path, suite: &SuiteInfo) -> Outcome {
    let name = outcome_name(config, suite);
    let timeout = host_timeout(suite.budget)
        + if config.accel == Accel::Kvm {
            KVM_SLACK
        } else {
            Duration::ZERO
        };
    match run_qemu(config, kernel, &suite.name, timeout, &suite.name) {
        Ok(run) => judge(config, &run, suite),
        Err(e) => Outcome {
            name,
            passed: false,
            detail: e,
        },
    }
}

/// The verdict on `suite` from a boot that ran it (alone or with others).
fn judge(config: &Config, run: &Run, suite: &SuiteInfo) -> Outcome {
    let control = suite.kind == "control";
    let name = outcome_name(config, suite);
    let result = run.result(&suite.name);
    let (name, lockdep) = judge_lockdep(config, run.suite_lines(&suite.name), name);
    let trouble = match (run.trouble(config), lockdep) {
        (Some(t), Some(l)) => Some(format!("{t}; {l}")),
        (t, l) => t.or(l),
    };
    let log = format!("log: {}", run.log.display());
    let (passed, detail) = match (&result, control) {
        (None, _) => (
            false,
            format!(
                "no result: {} ({log})",
                trouble.unwrap_or_else(|| "no KSYNC-RESULT line".into())
            ),
        ),
        (Some(r), false) => {
            let status = r.get("status").unwrap_or("?");
            let summary = summarize(r, run.elapsed);
            match (status, trouble) {
                ("PASS", None) => (true, summary),
                ("PASS", Some(t)) => (false, format!("{summary}; but {t} ({log})")),
                (_, _) => (
                    false,
                    format!("{}: {summary} ({log})", r.get("reason").unwrap_or("failed")),
                ),
            }
        }
        (Some(r), true) => {
            let status = r.get("status").unwrap_or("?");
            let reason = r.get("reason").unwrap_or("-");
            // Only the suite's own checks count: not a hang caught by the
            // watchdog, nor the runner's interrupt check, nor an RCU stall
            // report (the kernel's `runner::STALL_REASON`).
            let detected = status == "FAIL"
                && !reason.starts_with("watchdog")
                && !reason.contains("no timer interrupt")
                && !reason.starts_with("rcu stall");
            let clean_exit = run.status == Some(config.arch.exit.verdict(false));
            if detected && clean_exit {
                (
                    true,
                    format!(
                        "failure detected as it must be: \"{reason}\" after {} ops",
                        r.get("ops").unwrap_or("?")
                    ),
                )
            } else if detected {
                (
                    false,
                    format!(
                        "detected \"{reason}\" but the run ended badly: {} ({log})",
                        trouble.unwrap_or_default()
                    ),
                )
            } else {
                (
                    false,
                    format!(
                        "the broken variant was NOT caught (status {status}, reason \"{reason}\"): the checks cannot fail ({log})"
                    ),
                )
            }
        }
    };
    Outcome {
        name,
        passed,
        detail,
    }
}

/// What the lockdep reports (`KSYNC-LOCKDEP`) in a suite's part of the
/// run (`lines`, [`Run::suite_lines`]: in a boot that runs many suites,
/// only the lines of the one judged) say, as trouble (or `None`), and the
/// outcome's name.
///
/// * A suite that prints `KSYNC-LOCKDEP-EXPECT` (the `lockdep` suite)
///   provokes a lock-order cycle. In an image built with `lockdep` it needs
///   a cycle report naming every class the marker lists; in any other
///   image it is that test's control and must see no report at all (the
///   kernel ran the same locks in the same orders: what finds the cycle is
///   lockdep, not the suite).
/// * Every other suite, in every image: any report is trouble. (A control
///   is judged by its own detection only: its deliberately broken lock may
///   well give lockdep reports too.)
fn judge_lockdep(config: &Config, lines: &[String], name: String) -> (String, Option<String>) {
    let reports = Run::lockdep_reports(lines);
    let Some(expect) = lines
        .iter()
        .find_map(|line| Marker::parse(line, "KSYNC-LOCKDEP-EXPECT"))
    else {
        let trouble = reports.first().map(|(m, text)| {
            format!(
                "lockdep reported ({} in all): {} {}",
                reports.len(),
                m.get("kind").unwrap_or("?"),
                text.lines().next().unwrap_or("")
            )
        });
        return (name, trouble);
    };
    if !config.variant.lockdep() {
        let name = format!(
            "{}/control:{} (no lockdep)",
            config.name,
            expect.get("suite").unwrap_or("?")
        );
        let trouble = (!reports.is_empty()).then(|| {
            format!(
                "{} lockdep report(s) from an image built without lockdep",
                reports.len()
            )
        });
        return (name, trouble);
    }
    let classes: Vec<String> = expect
        .get("classes")
        .unwrap_or("")
        .split(',')
        .map(|c| format!("\"{c}\""))
        .collect();
    let found = reports.iter().any(|(m, text)| {
        m.get("kind") == Some("Cycle") && classes.iter().all(|c| text.contains(c.as_str()))
    });
    let trouble = if !found {
        Some(format!(
            "no lockdep cycle report naming {} ({} report(s))",
            classes.join(" and "),
            reports.len()
        ))
    } else if reports.len() != 1 {
        Some(format!(
            "{} lockdep reports, expected the one cycle",
            reports.len()
        ))
    } else {
        None
    };
    (name, trouble)
}

fn summarize(r: &Marker, elapsed: Duration) -> String {
    format!(
        "{} ops, per CPU {}..{}, timer IRQs with work per CPU {}..{} ({:.1} s)",
        r.get("ops").unwrap_or("?"),
        r.get("cpu_min").unwrap_or("?"),
        r.get("cpu_max").unwrap_or("?"),
        r.get("irq_min").unwrap_or("?"),
        r.get("irq_max").unwrap_or("?"),
        elapsed.as_secs_f64()
    )
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
