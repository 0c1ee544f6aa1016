//! `cargo xtask test`: every check the project has, installing what it
//! needs, tallied into one closing line `N passed, N failed` (tests and
//! checks counted together).

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::qemu;
use crate::tools::{
    CROSS_PACKAGES, cargo, ensure_apt_files, ensure_toolchain, root, runs, toolchain_targets,
};

/// What `cargo xtask test` was asked for.
pub struct Options {
    /// Add the x86_64 KVM configuration to the QEMU runs.
    pub kvm: bool,
    /// Skip the QEMU system runs.
    pub host_only: bool,
}

/// The short soak with CPU hotplug churn at the end of the QEMU runs
/// (`cargo xtask torture`), in minutes.
const TORTURE_MINUTES: f64 = 1.0;

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    failures: Vec<String>,
}

impl Tally {
    fn check(&mut self, name: &str, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            self.failures.push(name.to_string());
        }
        println!("{} {name}", if ok { "PASS" } else { "FAIL" });
    }
}

/// Runs a command, echoing its output; returns success and the output.
fn run_logged(name: &str, cmd: &mut Command) -> (bool, String) {
    println!("\n==> {name}");
    let start = Instant::now();
    let out = match cmd.stderr(Stdio::piped()).stdout(Stdio::piped()).output() {
        Ok(out) => out,
        Err(e) => return (false, format!("could not start: {e}")),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Keep the log readable: per-test lines and summaries, not compile noise.
    for line in text.lines() {
        let keep = line.starts_with("test ")
            || line.contains("test result:")
            || line.starts_with("error")
            || line.starts_with("warning")
            || line.contains("panicked")
            || line.starts_with("failures")
            || line.starts_with("  -->")
            || line.starts_with("Diff in");
        if keep || !out.status.success() {
            println!("    {line}");
        }
    }
    println!(
        "    ({:.1} s, {})",
        start.elapsed().as_secs_f64(),
        if out.status.success() { "ok" } else { "FAILED" }
    );
    (out.status.success(), text)
}

/// Adds the `test result:` counts of a cargo test run; a run that failed
/// without reporting a failed test (a build error, a crash) counts as one
/// failure.
fn tally_tests(t: &mut Tally, name: &str, ok: bool, text: &str) {
    let (mut passed, mut failed) = (0, 0);
    for line in text.lines().filter(|l| l.contains("test result:")) {
        let num = |key: &str| -> usize {
            line.split(';')
                .find(|part| part.trim_end().ends_with(key))
                .and_then(|part| part.split_whitespace().rev().nth(1))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        passed += num("passed");
        failed += num("failed");
    }
    t.passed += passed;
    t.failed += failed;
    if failed > 0 {
        t.failures.push(format!("{name}: {failed} failed"));
    }
    if !ok && failed == 0 {
        t.failed += 1;
        t.failures
            .push(format!("{name}: did not run to completion"));
    }
    println!(
        "{} {name}: {passed} passed, {failed} failed",
        if ok { "PASS" } else { "FAIL" }
    );
}

/// Runs everything; success when nothing failed.
pub fn test(options: &Options) -> ExitCode {
    let start = Instant::now();
    let mut t = Tally::default();

    let setup = ensure_toolchain().and_then(|()| ensure_apt_files(CROSS_PACKAGES));
    if let Err(e) = &setup {
        println!("setup: {e}");
    }
    t.check(
        "setup: rustup targets and qemu-user packages",
        setup.is_ok(),
    );

    // The layer rule: no module of the library imports one above it.
    println!("==> layer rule (xtask/src/layers.rs)");
    let layers = crate::layers::check(&root());
    match &layers {
        Ok(violations) => {
            for (file, line, from, to, text) in violations {
                println!("  {}:{line}: {from} imports {to}: {text}", file.display());
            }
        }
        Err(e) => println!("  {e}"),
    }
    t.check(
        "layer rule: no module imports one above it",
        layers.is_ok_and(|v| v.is_empty()),
    );

    // Formatting and lints.
    let (ok, _) = run_logged(
        "cargo fmt --check",
        &mut cargo(&["fmt", "--all", "--check"]),
    );
    t.check("fmt --check", ok);
    let (ok, _) = run_logged(
        "clippy (host, all targets)",
        &mut cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    );
    t.check("clippy host", ok);
    // With lock-order checking on (its code only exists then).
    let (ok, _) = run_logged(
        "clippy (host, all targets, lockdep)",
        &mut cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            "ksync/test-hooks,ksync/lockdep",
            "--",
            "-D",
            "warnings",
        ]),
    );
    t.check("clippy host lockdep", ok);
    // Each set of rustflags builds in its own directory, or the runs would
    // rebuild each other's artefacts.
    for (target, flags, dir) in [
        ("aarch64-unknown-none", "", "target"),
        (
            "aarch64-unknown-none",
            "-C target-feature=+lse",
            "target/lse",
        ),
        ("x86_64-unknown-none", "", "target"),
        // The portable lockref step and local add on the two arches that
        // have native ones (arch/mod.rs).
        (
            "aarch64-unknown-none",
            "--cfg ksync_generic",
            "target/generic",
        ),
        (
            "x86_64-unknown-none",
            "--cfg ksync_generic",
            "target/generic",
        ),
    ] {
        let name = format!("clippy --lib {target} {flags}");
        let mut cmd = cargo(&[
            "clippy", "--lib", "--target", target, "--", "-D", "warnings",
        ]);
        cmd.env("RUSTFLAGS", flags)
            .env("CARGO_TARGET_DIR", root().join(dir));
        let (ok, _) = run_logged(&name, &mut cmd);
        t.check(&name, ok);
    }
    // The loom build of the library (its constructors and atomics differ).
    let mut loom_clippy = cargo(&["clippy", "--lib", "--", "-D", "warnings"]);
    loom_clippy
        .env("RUSTFLAGS", "--cfg loom")
        .env("KSYNC_MAX_CPUS", "4")
        .env("CARGO_TARGET_DIR", root().join("target/loom"));
    let (ok, _) = run_logged("clippy --lib --cfg loom", &mut loom_clippy);
    t.check("clippy --lib --cfg loom", ok);
    let mut doc = cargo(&["doc", "--no-deps", "--lib"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    let (ok, _) = run_logged("cargo doc -D warnings", &mut doc);
    t.check("rustdoc", ok);

    // Build matrix: every target in rust-toolchain.toml, with and without
    // the optional features.
    for target in toolchain_targets().unwrap_or_default() {
        for features in [
            &[][..],
            &["--features", "defmt,alloc"][..],
            &["--features", "lockdep"][..],
        ] {
            let mut args = vec!["build", "--lib", "--target", &target];
            args.extend_from_slice(features);
            let name = format!("build {target} {}", features.join(" "));
            let (ok, _) = run_logged(&name, &mut cargo(&args));
            t.check(name.trim_end(), ok);
        }
    }
    let mut lse = cargo(&["build", "--lib", "--target", "aarch64-unknown-none"]);
    lse.env("RUSTFLAGS", "-C target-feature=+lse")
        .env("CARGO_TARGET_DIR", root().join("target/lse"));
    let (ok, _) = run_logged("build aarch64-unknown-none +lse", &mut lse);
    t.check("build aarch64-unknown-none +lse", ok);

    // Host tests (unit, integration, doc), debug and release.
    for (name, args) in [
        ("host tests (debug)", &["test", "--workspace"][..]),
        (
            "host tests (release)",
            &["test", "--workspace", "--release", "--tests"][..],
        ),
        // The whole suite once more with lock-order checking: correct
        // programs must produce no report (debug only, for time).
        (
            "host tests (lockdep)",
            &["test", "--features", "test-hooks,alloc,lockdep"][..],
        ),
    ] {
        let (ok, text) = run_logged(name, &mut cargo(args));
        tally_tests(&mut t, name, ok, &text);
    }

    // The benches run (quick settings): each checks its own results (for
    // example that every callback ran); their timings are not judged here.
    let mut benches = cargo(&[
        "bench", "--bench", "lockref", "--bench", "percpu", "--bench", "rcu", "--bench", "locks",
        "--bench", "lockdep", "--", "--quick",
    ]);
    let (ok, _) = run_logged("benches (--quick smoke run)", &mut benches);
    t.check("benches run (--quick)", ok);
    // The seed workloads: results checked, timings not judged.
    let mut seeds = cargo(&["bench", "-p", "seeds", "--bench", "seeds", "--", "--quick"]);
    let (ok, _) = run_logged("seeds bench (--quick smoke run)", &mut seeds);
    t.check("seeds bench run (--quick)", ok);

    // loom models (a 4-CPU build keeps the per-CPU models small).
    let mut loom = cargo(&[
        "test",
        "--release",
        "--test",
        "loom",
        "--test",
        "loom_preemptible",
        "--test",
        "loom_qspinlock",
        "--test",
        "loom_percpu",
        "--test",
        "loom_seqlock",
        "--test",
        "loom_rcu",
        "--test",
        "loom_call_rcu",
        "--test",
        "loom_rculist",
        "--test",
        "srcu",
    ]);
    loom.env("RUSTFLAGS", "--cfg loom")
        .env("LOOM_MAX_PREEMPTIONS", "2")
        .env("KSYNC_MAX_CPUS", "4")
        .env("CARGO_TARGET_DIR", root().join("target/loom"));
    let (ok, text) = run_logged("loom models", &mut loom);
    tally_tests(&mut t, "loom models", ok, &text);

    // Miri on the code that copies racy data (seqlock): nightly's Miri,
    // installed if missing.
    let miri_setup = runs(
        "rustup",
        &[
            "component",
            "add",
            "miri",
            "rust-src",
            "--toolchain",
            "nightly",
        ],
    );
    if miri_setup {
        // `rustup run` picks nightly whatever cargo this driver runs under.
        let mut miri = Command::new("rustup");
        miri.args([
            "run", "nightly", "cargo", "miri", "test", "--test", "seqlock",
        ])
        .current_dir(root())
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .env_remove("RUSTFLAGS")
        .env("CARGO_TARGET_DIR", root().join("target/miri"));
        let (ok, text) = run_logged("miri (seqlock)", &mut miri);
        tally_tests(&mut t, "miri", ok, &text);
    } else {
        t.check(
            "miri: rustup component add miri rust-src --toolchain nightly",
            false,
        );
    }

    // The same host suite on aarch64 under qemu-user: LL/SC build on the
    // default CPU and on a CPU without LSE, and the LSE build.
    for (name, cpu, flags, dir) in [
        (
            "aarch64 qemu-user, LL/SC build, -cpu max",
            "max",
            "",
            "target",
        ),
        (
            "aarch64 qemu-user, LL/SC build, -cpu cortex-a57",
            "cortex-a57",
            "",
            "target",
        ),
        (
            "aarch64 qemu-user, +lse build, -cpu max",
            "max",
            "-C target-feature=+lse",
            "target/lse",
        ),
    ] {
        let mut cmd = cargo(&[
            "test",
            "--release",
            "--tests",
            "--target",
            "aarch64-unknown-linux-gnu",
        ]);
        cmd.env("QEMU_CPU", cpu)
            .env("RUSTFLAGS", flags)
            .env("CARGO_TARGET_DIR", root().join(dir));
        let (ok, text) = run_logged(name, &mut cmd);
        tally_tests(&mut t, name, ok, &text);
    }

    // And on riscv64 (RVWMO, the library's portable paths: core atomics as
    // LR/SC and AMOs). The whole release suite takes well under a minute.
    let name = "riscv64 qemu-user, release build";
    let mut riscv = cargo(&[
        "test",
        "--release",
        "--tests",
        "--target",
        "riscv64gc-unknown-linux-gnu",
    ]);
    riscv
        .env_remove("QEMU_CPU")
        .env("CARGO_TARGET_DIR", root().join("target"));
    let (ok, text) = run_logged(name, &mut riscv);
    tally_tests(&mut t, name, ok, &text);

    // The SMP kernels under QEMU.
    if !options.host_only {
        match qemu::ensure_tools() {
            Ok(()) => {
                let mut outcomes = qemu::test_all(options.kvm);
                outcomes.extend(qemu::torture_short(TORTURE_MINUTES));
                for outcome in outcomes {
                    if !outcome.passed {
                        println!("    {}", outcome.detail);
                    }
                    t.check(&format!("qemu {}", outcome.name), outcome.passed);
                }
            }
            Err(e) => {
                println!("qemu setup: {e}");
                t.check("qemu setup", false);
            }
        }
        // The Cortex-M firmware (one core, no 64-bit CAS, defmt read back).
        for (name, passed, detail) in crate::cortex_m::run_all() {
            if !passed {
                println!("    {detail}");
            }
            t.check(&name, passed);
        }
    }

    println!("\n{:.0} s", start.elapsed().as_secs_f64());
    if !t.failures.is_empty() {
        println!("failures:");
        for f in &t.failures {
            println!("    {f}");
        }
    }
    println!("{} passed, {} failed", t.passed, t.failed);
    if t.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
