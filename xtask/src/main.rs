//! The project driver: `cargo xtask run | test | bench`.
//!
//! * `run`: the main job — boots the SMP demo kernels under QEMU on x86_64
//!   and aarch64 with 4 CPUs and prints their tables.
//! * `test`: every check the project has, installing what it needs; ends
//!   with the line `N passed, N failed` (tests and checks counted together).
//! * `bench`: the host benchmarks (`cargo bench`), side by side with peers.
//!
//! Only `std`: the driver must build on a fresh machine before anything is
//! installed.

mod qemu;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let kvm = args.iter().any(|a| a == "--kvm");
    match args.first().map(String::as_str) {
        Some("run") => match run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask run: {e}");
                ExitCode::FAILURE
            }
        },
        Some("test") => test(kvm, args.iter().any(|a| a == "--host-only")),
        Some("bench") => {
            let quick = args.iter().any(|a| a == "--quick");
            let mut cmd = cargo(&[
                "bench", "--bench", "lockref", "--bench", "percpu", "--bench", "rcu", "--bench",
                "locks", "--",
            ]);
            if quick {
                cmd.arg("--quick");
            }
            if status_ok(&mut cmd) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!(
                "usage: cargo xtask run             boot the SMP demo on QEMU (x86_64, aarch64)\n\
                 \x20      cargo xtask test [--kvm]    every test and check; ends with `N passed, N failed`\n\
                 \x20      cargo xtask test --host-only  skip the QEMU system runs\n\
                 \x20      cargo xtask bench [--quick] host benchmarks with peers"
            );
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (parent of this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args).current_dir(root());
    // The driver runs under `cargo run --release`; its own profile settings
    // must not leak into the commands it starts.
    cmd.env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

fn status_ok(cmd: &mut Command) -> bool {
    cmd.status().map(|s| s.success()).unwrap_or(false)
}

fn run() -> Result<(), String> {
    ensure_rust_targets()?;
    qemu::ensure_tools()?;
    qemu::demo()
}

// ---- installing what the checks need ----------------------------------------

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Installs Debian packages that provide the given commands or files.
fn ensure_apt(what: &[(&str, &str)]) -> Result<(), String> {
    let missing: Vec<&str> = what
        .iter()
        .filter(|(_, path)| !Path::new(path).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    if !is_root() {
        return Err(format!(
            "missing packages; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends {list}"
        ));
    }
    println!("xtask: installing {list}");
    let ok = status_ok(Command::new("apt-get").args(["update", "-qq"]))
        && status_ok(
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        );
    if ok {
        Ok(())
    } else {
        Err(format!("apt-get install {list} failed"))
    }
}

/// The targets listed in rust-toolchain.toml.
fn toolchain_targets() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("rust-toolchain.toml")).unwrap_or_default();
    let Some(start) = text.find("targets") else {
        return Vec::new();
    };
    let list = &text[start..];
    let list = &list[list.find('[').unwrap_or(0) + 1..list.find(']').unwrap_or(0)];
    list.split(',')
        .map(|t| t.trim().trim_matches('"').to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// rustup does not add the targets of rust-toolchain.toml to an installed
/// toolchain by itself: add the missing ones.
fn ensure_rust_targets() -> Result<(), String> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("rustup: {e}"))?;
    let installed = String::from_utf8_lossy(&installed.stdout).to_string();
    let missing: Vec<String> = toolchain_targets()
        .into_iter()
        .filter(|t| !installed.lines().any(|l| l.trim() == t))
        .collect();
    if !missing.is_empty() {
        println!("xtask: rustup target add {}", missing.join(" "));
        if !status_ok(
            Command::new("rustup")
                .args(["target", "add"])
                .args(&missing)
                .current_dir(root()),
        ) {
            return Err(format!("rustup target add {} failed", missing.join(" ")));
        }
    }
    // clippy and rustfmt are listed as components; make sure of them too.
    let _ = Command::new("rustup")
        .args(["component", "add", "clippy", "rustfmt"])
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    Ok(())
}

// ---- the test command -------------------------------------------------------

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

fn test(kvm: bool, host_only: bool) -> ExitCode {
    let start = Instant::now();
    let mut t = Tally::default();

    let setup = ensure_rust_targets().and_then(|()| {
        ensure_apt(&[
            ("qemu-user-static", "/usr/bin/qemu-aarch64-static"),
            ("gcc-aarch64-linux-gnu", "/usr/bin/aarch64-linux-gnu-gcc"),
            (
                "libc6-dev-arm64-cross",
                "/usr/aarch64-linux-gnu/lib/libc.so",
            ),
        ])
    });
    if let Err(e) = &setup {
        println!("setup: {e}");
    }
    t.check(
        "setup: rustup targets and qemu-user packages",
        setup.is_ok(),
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
    for (target, flags) in [
        ("aarch64-unknown-none", ""),
        ("aarch64-unknown-none", "-C target-feature=+lse"),
        ("x86_64-unknown-none", ""),
    ] {
        let name = format!("clippy --lib {target} {flags}");
        let mut cmd = cargo(&[
            "clippy", "--lib", "--target", target, "--", "-D", "warnings",
        ]);
        let dir = if flags.is_empty() {
            "target"
        } else {
            "target/lse"
        };
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
    for target in toolchain_targets() {
        for features in [&[][..], &["--features", "defmt,alloc"][..]] {
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
    ] {
        let (ok, text) = run_logged(name, &mut cargo(args));
        tally_tests(&mut t, name, ok, &text);
    }

    // The benches run (quick settings): each checks its own results (for
    // example that every callback ran); their timings are not judged here.
    let mut benches = cargo(&[
        "bench", "--bench", "lockref", "--bench", "percpu", "--bench", "rcu", "--", "--quick",
    ]);
    let (ok, _) = run_logged("benches (--quick smoke run)", &mut benches);
    t.check("benches run (--quick)", ok);

    // loom models (a 4-CPU build keeps the per-CPU models small).
    let mut loom = cargo(&[
        "test",
        "--release",
        "--test",
        "loom",
        "--test",
        "loom_percpu",
        "--test",
        "loom_seqlock",
        "--test",
        "loom_rcu",
        "--test",
        "loom_call_rcu",
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
    let miri_setup = Command::new("rustup")
        .args([
            "component",
            "add",
            "miri",
            "rust-src",
            "--toolchain",
            "nightly",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
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

    // The SMP kernels under QEMU.
    if !host_only {
        match qemu::ensure_tools() {
            Ok(()) => {
                for outcome in qemu::test_all(kvm) {
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
