//! `cargo xtask test`: every check the project has, installing what it
//! needs, tallied into one closing line `N passed, N failed` (tests and
//! checks counted together).

use std::fs;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::qemu;
use crate::tools::{
    cargo, ensure_apt_files, ensure_rust_targets, ensure_toolchain, record_time, root, runs,
    rustup_toolchain, slowest, toolchain_targets,
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
const TORTURE_MINUTES: f64 = 0.5;

#[derive(Default)]
pub struct Tally {
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
    let took = start.elapsed();
    record_time(name.trim_end(), took);
    println!(
        "    ({:.1} s, {})",
        took.as_secs_f64(),
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
/// The host checks of `cargo xtask test`, in order: what each runs, and
/// the function that runs it (each adds to the tally). The QEMU runs and
/// the Cortex-M firmware follow unless `--host-only`.
pub const HOST_CHECKS: &[Check] = &[
    Check {
        name: "setup",
        about: "rustup targets and the qemu-user packages",
        run: check_setup,
    },
    Check {
        name: "layers",
        about: "the layer rule (xtask/src/layers.rs)",
        run: check_layers,
    },
    Check {
        name: "lints",
        about: "cargo fmt, clippy (host, lockdep with bytemuck, bare metal, ksync_generic, loom), rustdoc",
        run: check_lints,
    },
    Check {
        name: "builds",
        about: "the library for every target of rust-toolchain.toml, with and without features",
        run: check_builds,
    },
    Check {
        name: "publish",
        about: "the published crate: package, MSRV and nightly, public API, loom dependent, portable-atomic",
        run: check_publish,
    },
    Check {
        name: "host-tests",
        about: "host tests and doc tests: debug, release, lockdep",
        run: check_host_tests,
    },
    Check {
        name: "zeroed",
        about: "tests/zeroed.rs with the bytemuck feature, with and without lockdep",
        run: check_zeroed,
    },
    Check {
        name: "single-cpu",
        about: "KSYNC_MAX_CPUS=1: tests/uniprocessor.rs (debug, release) and tests/zeroed.rs, and the x86_64 fast paths without a lock prefix",
        run: check_single_cpu,
    },
    Check {
        name: "benches",
        about: "the benches and the seed workloads, --quick (results checked, timings not)",
        run: check_benches,
    },
    Check {
        name: "loom",
        about: "the loom models",
        run: check_loom,
    },
    Check {
        name: "hostile",
        about: "the torture suites under the hostile host kernel (preemption, migration and interrupts at every atomic step), release and debug, fixed seeds",
        run: check_hostile,
    },
    Check {
        name: "miri",
        about: "Miri on the seqlock tests",
        run: check_miri,
    },
    Check {
        name: "qemu-user",
        about: "the host suite under qemu-user, every run of the architecture table",
        run: check_qemu_user,
    },
];

/// Rustup targets and the qemu-user packages.
fn check_setup(t: &mut Tally) {
    let setup = ensure_toolchain().and_then(|()| ensure_apt_files(&qemu::user_packages()));
    if let Err(e) = &setup {
        println!("setup: {e}");
    }
    t.check(
        "setup: rustup targets and qemu-user packages",
        setup.is_ok(),
    );
}

/// The layer rule (xtask/src/layers.rs).
fn check_layers(t: &mut Tally) {
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
    let boot = crate::layers::check_qemu_boot(&root());
    if let Ok(lines) = &boot {
        for (file, line, text) in lines {
            println!(
                "  {}:{line}: boot code names hotplug: {text}",
                file.display()
            );
        }
    }
    t.check(
        "layer rule: the QEMU boot code names no hotplug code",
        boot.is_ok_and(|v| v.is_empty()),
    );
}

/// Cargo fmt, clippy (host, lockdep, bare metal, ksync_generic, loom), rustdoc.
fn check_lints(t: &mut Tally) {
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
            "ksync/test-hooks,ksync/lockdep,ksync/bytemuck",
            "--",
            "-D",
            "warnings",
        ]),
    );
    t.check("clippy host lockdep", ok);
    // The hostile host kernel (its atomics wrappers exist only then), in
    // the hostile check's own target directory.
    let (ok, _) = run_logged(
        "clippy (host, all targets, hostile)",
        cargo(&[
            "clippy",
            "--all-targets",
            "--features",
            "hostile,alloc",
            "--",
            "-D",
            "warnings",
        ])
        .env("CARGO_TARGET_DIR", root().join("target/hostile")),
    );
    t.check("clippy host hostile", ok);
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
    // The loom build of the library (its constructors and atomics differ);
    // the loom dependency comes with the `loom` feature.
    let mut loom_clippy = cargo(&[
        "clippy",
        "--lib",
        "--features",
        "loom",
        "--",
        "-D",
        "warnings",
    ]);
    loom_clippy
        .env("RUSTFLAGS", "--cfg ksync_loom")
        .env("KSYNC_MAX_CPUS", "4")
        .env("CARGO_TARGET_DIR", root().join("target/loom"));
    let (ok, _) = run_logged("clippy --lib --cfg ksync_loom", &mut loom_clippy);
    t.check("clippy --lib --cfg ksync_loom", ok);
    let mut doc = cargo(&["doc", "--no-deps", "--lib"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    let (ok, _) = run_logged("cargo doc -D warnings", &mut doc);
    t.check("rustdoc", ok);
}

/// The library for every target of rust-toolchain.toml, with and without features.
fn check_builds(t: &mut Tally) {
    // Build matrix: every target in rust-toolchain.toml, with and without
    // the optional features.
    for target in toolchain_targets().unwrap_or_default() {
        for features in [
            &[][..],
            &["--features", "defmt,alloc,bytemuck"][..],
            &["--features", "lockdep"][..],
        ] {
            let mut args = vec!["build", "--lib", "--target", &target];
            args.extend_from_slice(features);
            let name = format!("build {target} {}", features.join(" "));
            let mut cmd = cargo(&args);
            if !has_cas(&target) {
                // A library build takes one of the two choices a binary
                // makes (see `portable_atomic_choices`).
                cmd.env("RUSTFLAGS", ASSUME_SINGLE_CORE)
                    .env("CARGO_TARGET_DIR", root().join("target/single-core"));
            }
            let (ok, _) = run_logged(&name, &mut cmd);
            t.check(name.trim_end(), ok);
        }
    }
    let mut lse = cargo(&["build", "--lib", "--target", "aarch64-unknown-none"]);
    lse.env("RUSTFLAGS", "-C target-feature=+lse")
        .env("CARGO_TARGET_DIR", root().join("target/lse"));
    let (ok, _) = run_logged("build aarch64-unknown-none +lse", &mut lse);
    t.check("build aarch64-unknown-none +lse", ok);
    check_embedding_example(t);
    check_bad_kernel(t);
}

/// tests/bad_kernel: a host kernel that breaks the `Kernel` contract on
/// purpose (an out-of-range CPU id), whose breaches ksync must report.
fn check_bad_kernel(t: &mut Tally) {
    let mut cmd = cargo(&["test"]);
    cmd.current_dir(root().join("tests/bad_kernel"))
        .env_remove("RUSTFLAGS")
        .env("CARGO_TARGET_DIR", root().join("target/bad_kernel"));
    let name = "tests/bad_kernel (a kernel that breaks the contract)";
    let (ok, text) = run_logged(name, &mut cmd);
    tally_tests(t, name, ok, &text);
}

/// The embedding checklist's example (examples/embedding): a bare-metal
/// kernel that links for x86_64-unknown-none, debug and release, shown in
/// docs/embedding.md unchanged.
fn check_embedding_example(t: &mut Tally) {
    let dir = root().join("examples/embedding");
    for profile in [&[][..], &["--release"][..]] {
        let mut args = vec!["build", "--target", "x86_64-unknown-none"];
        args.extend_from_slice(profile);
        let name = format!(
            "build examples/embedding x86_64-unknown-none {}",
            profile.join(" ")
        );
        let mut cmd = cargo(&args);
        cmd.current_dir(&dir)
            .env_remove("RUSTFLAGS")
            .env("CARGO_TARGET_DIR", root().join("target/embedding"));
        let (ok, _) = run_logged(&name, &mut cmd);
        t.check(name.trim_end(), ok);
    }
    let example = std::fs::read_to_string(dir.join("src/main.rs")).unwrap_or_default();
    let page = std::fs::read_to_string(root().join("docs/embedding.md")).unwrap_or_default();
    let shown = format!("```rust,ignore\n{example}```");
    let same = !example.is_empty() && page.contains(&shown);
    if !same {
        println!(
            "  docs/embedding.md must show examples/embedding/src/main.rs whole, in a ```rust,ignore block"
        );
    }
    t.check(
        "docs/embedding.md shows examples/embedding/src/main.rs unchanged",
        same,
    );
}

/// The published crate: package, MSRV and nightly, public API, loom dependent, portable-atomic.
fn check_publish(t: &mut Tally) {
    // The published crate, the toolchains it promises, its public API and
    // the portable-atomic choices it leaves to binaries.
    for check in PUBLISH_CHECKS {
        (check.run)(t);
    }
}

/// Host tests and doc tests: debug, release, lockdep.
fn check_host_tests(t: &mut Tally) {
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
        tally_tests(t, name, ok, &text);
    }
}

/// tests/zeroed.rs with the bytemuck feature, with and without lockdep.
fn check_zeroed(t: &mut Tally) {
    // The host suite runs tests/zeroed.rs without `bytemuck`; here its
    // `Zeroable` test too, in both lockdep configurations (the impls must
    // hold in every build).
    for (name, features) in [
        ("zeroed (bytemuck)", "test-hooks,alloc,bytemuck"),
        (
            "zeroed (bytemuck, lockdep)",
            "test-hooks,alloc,bytemuck,lockdep",
        ),
    ] {
        let (ok, text) = run_logged(
            name,
            &mut cargo(&["test", "--test", "zeroed", "--features", features]),
        );
        tally_tests(t, name, ok, &text);
    }
}

/// The single-CPU build (`KSYNC_MAX_CPUS=1`, `src/spinlock/up.rs`): its
/// tests, and the fast paths' instructions.
fn check_single_cpu(t: &mut Tally) {
    // One directory for the build with one CPU (the setting is compiled
    // in: sharing `target` would rebuild the suite's artefacts each time).
    let dir = root().join("target/max-cpus-1");
    for (name, args) in [
        // One test at a time: there is one CPU id for the host threads.
        (
            "single-cpu tests (debug)",
            &[
                "test",
                "--test",
                "uniprocessor",
                "--test",
                "zeroed",
                "--",
                "--test-threads=1",
            ][..],
        ),
        (
            "single-cpu tests (release)",
            &["test", "--release", "--test", "uniprocessor"][..],
        ),
    ] {
        let mut cmd = cargo(args);
        cmd.env("KSYNC_MAX_CPUS", "1").env("CARGO_TARGET_DIR", &dir);
        let (ok, text) = run_logged(name, &mut cmd);
        tally_tests(t, name, ok, &text);
    }
    // The instructions: the fixture's functions (one per lock operation)
    // built for x86_64 bare metal. With one CPU they must hold no atomic
    // read-modify-write (a `lock` prefix, or `xchg` with memory, which is
    // locked without one) and no fence; with the default, the same
    // functions must show them (so that the scan is known to look at the
    // right code).
    let target = "x86_64-unknown-none";
    if let Err(e) = ensure_rust_targets(&[target]) {
        println!("    {e}");
    }
    for (max_cpus, sub, expect_atomics) in [("1", "up", false), ("64", "smp", true)] {
        let name = format!(
            "{target} KSYNC_MAX_CPUS={max_cpus}: lock operations {} atomic RMW or fence",
            if expect_atomics { "with" } else { "without" }
        );
        let out_dir = root().join("target/uniprocessor-asm").join(sub);
        let mut cmd = cargo(&[
            "rustc",
            "--release",
            "--lib",
            "--target",
            target,
            "--",
            "--emit",
            "asm",
        ]);
        cmd.current_dir(root().join("xtask/fixtures/uniprocessor-asm"))
            .env("KSYNC_MAX_CPUS", max_cpus)
            .env("CARGO_TARGET_DIR", &out_dir);
        let (ok, _) = run_logged(&name, &mut cmd);
        let asm = ok
            .then(|| {
                newest_file(
                    &out_dir.join(target).join("release/deps"),
                    "uniprocessor_asm",
                    ".s",
                )
            })
            .flatten()
            .and_then(|file| fs::read_to_string(file).ok());
        let Some(asm) = asm else {
            t.check(&format!("{name}: assembly built"), false);
            continue;
        };
        let functions = atomic_instructions(&asm, "ksync_asm_");
        let mut good = functions.len() == 6;
        for (function, found) in &functions {
            println!("    {function}: {found:?}");
            good &= found.is_empty() != expect_atomics;
        }
        t.check(&name, good);
    }
}

/// The newest file in `dir` whose name starts with `prefix` and ends with
/// `suffix`.
fn newest_file(dir: &std::path::Path, prefix: &str, suffix: &str) -> Option<std::path::PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

/// For each function of the (AT&T syntax) assembly `asm` whose label
/// starts with `prefix`: its atomic read-modify-writes and fences (`lock`
/// prefixed instructions, `xchg`, `mfence`), as written.
fn atomic_instructions(asm: &str, prefix: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in asm.lines() {
        let text = line.trim();
        if let Some(label) = text.strip_suffix(':').filter(|l| l.starts_with(prefix)) {
            out.push((label.to_string(), Vec::new()));
            inside = true;
        } else if text.starts_with(".Lfunc_end") {
            inside = false;
        } else if inside
            && (text.starts_with("lock") || text.starts_with("xchg") || text.starts_with("mfence"))
        {
            // `inside` only after a label pushed an entry.
            let found = &mut out.last_mut().expect("a function's entry").1;
            found.push(text.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

/// The benches and the seed workloads, --quick (results checked, timings not).
fn check_benches(t: &mut Tally) {
    // The benches run (quick settings): each checks its own results (for
    // example that every callback ran); their timings are not judged here.
    let mut benches = cargo(&[
        "bench", "--bench", "lockref", "--bench", "percpu", "--bench", "rcu", "--bench", "locks",
        "--bench", "lockdep", "--bench", "sleeping", "--bench", "spin", "--", "--quick",
    ]);
    let (ok, _) = run_logged("benches (--quick smoke run)", &mut benches);
    t.check("benches run (--quick)", ok);
    // The seed workloads: results checked, timings not judged.
    let mut seeds = cargo(&["bench", "-p", "seeds", "--bench", "seeds", "--", "--quick"]);
    let (ok, _) = run_logged("seeds bench (--quick smoke run)", &mut seeds);
    t.check("seeds bench run (--quick)", ok);
}

/// The loom models.
fn check_loom(t: &mut Tally) {
    // Each group: its test files and the preemption bound. A 4-CPU build
    // keeps the per-CPU models small. The wait-queue models take one
    // preemption more (tests/loom_wait.rs says what each bound costs).
    let groups: [(&str, &[&str], &str); 2] = [
        (
            "loom models",
            &[
                "loom",
                "loom_preemptible",
                "loom_queued",
                "loom_queued_nesting",
                "loom_percpu",
                "loom_seqlock",
                "loom_rcu",
                "loom_call_rcu",
                "loom_rculist",
                "loom_spin",
                "loom_rwspinlock_halting",
                "srcu",
            ],
            "2",
        ),
        ("loom models: wait queue", &["loom_wait"], "3"),
    ];
    for (name, files, bound) in groups {
        let mut args = vec!["test", "--release"];
        for file in files {
            args.extend(["--test", file]);
        }
        let mut loom = cargo(&args);
        loom.env("RUSTFLAGS", "--cfg ksync_loom")
            .env("LOOM_MAX_PREEMPTIONS", bound)
            .env("KSYNC_MAX_CPUS", "4")
            .env("CARGO_TARGET_DIR", root().join("target/loom"));
        let name = format!("{name} (preemption bound {bound})");
        let (ok, text) = run_logged(&name, &mut loom);
        tally_tests(t, &name, ok, &text);
    }
}

/// The suites that run under the hostile host kernel (`--features
/// hostile`): each must hold whatever the kernel does at every atomic step.
/// Left out: suites that pin a thread to one CPU or time a step on
/// purpose (the callbacks' per-CPU batches; `tests/rcu_preempt.rs`, whose
/// hand-placed points migrate to fixed ids and whose gate test checks
/// that no grace period passes between two calls; `tests/rwsem.rs`, whose
/// readers migrate to fixed ids), the lockdep suites
/// (debug tables, their own tests of contexts) and the loom models.
pub const HOSTILE_SUITES: &[&str] = &[
    "hostile",
    "rcu",
    "srcu",
    "rculist",
    "lockref",
    "spinlock",
    "queued_nesting",
    "spinlock_guard",
    "preempt_count_balance",
    "percpu_rwlock",
    "seqlock",
    "sleeping",
    "sleeping_stress",
];

/// The seeds CI runs (a failure names its seed; `KSYNC_HOSTILE_SEED=N`
/// replays it): two in release, one in debug (assertions on).
const HOSTILE_RUNS: &[(&str, &str)] = &[("release", "1"), ("release", "2"), ("debug", "3")];

/// The torture suites under the hostile host kernel.
fn check_hostile(t: &mut Tally) {
    for (profile, seed) in HOSTILE_RUNS {
        let mut args = vec!["test", "--features", "hostile"];
        if *profile == "release" {
            args.push("--release");
        }
        for suite in HOSTILE_SUITES {
            args.extend(["--test", suite]);
        }
        let mut cmd = cargo(&args);
        // The default 64 CPUs: room for every suite's threads, the idle
        // loops' thread and free CPUs to migrate to.
        // Strict: ksync's own code must restore interrupts before it
        // enables preemption (a lost preemption point is a breach).
        cmd.env("KSYNC_HOSTILE_SEED", seed)
            .env("KSYNC_HOSTILE_STRICT", "1")
            .env("CARGO_TARGET_DIR", root().join("target/hostile"));
        let name = format!("hostile kernel ({profile}, seed {seed})");
        let (ok, text) = run_logged(&name, &mut cmd);
        tally_tests(t, &name, ok, &text);
    }
}

/// Miri on the seqlock tests.
fn check_miri(t: &mut Tally) {
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
        tally_tests(t, "miri", ok, &text);
    } else {
        t.check(
            "miri: rustup component add miri rust-src --toolchain nightly",
            false,
        );
    }
}

/// The host suite under qemu-user, every run of the architecture table.
fn check_qemu_user(t: &mut Tally) {
    // The same host suite under qemu-user on each other architecture of
    // the table, every run its row lists.
    for arch in qemu::ARCHES {
        let Some(user) = &arch.user else { continue };
        for run in user.runs {
            let name = format!("{} qemu-user, {}", arch.name, run.label);
            let mut args = vec!["test", "--release", "--target", user.target];
            if run.tests.is_empty() {
                args.push("--tests");
            }
            for test in run.tests {
                args.extend(["--test", test]);
            }
            let mut cmd = cargo(&args);
            match run.cpu {
                Some(cpu) => cmd.env("QEMU_CPU", cpu),
                None => cmd.env_remove("QEMU_CPU"),
            };
            cmd.env("RUSTFLAGS", run.rustflags)
                .env("CARGO_TARGET_DIR", root().join(run.dir));
            let (ok, text) = run_logged(&name, &mut cmd);
            tally_tests(t, &name, ok, &text);
        }
    }
}

pub fn test(options: &Options) -> ExitCode {
    let start = Instant::now();
    let mut t = Tally::default();
    // Each group's total, printed at the end beside the slowest commands.
    let mut groups: Vec<(&str, Duration)> = Vec::new();
    for check in HOST_CHECKS {
        let group = Instant::now();
        (check.run)(&mut t);
        groups.push((check.name, group.elapsed()));
    }

    // The SMP kernels under QEMU.
    if !options.host_only {
        let group = Instant::now();
        match qemu::ensure_tools() {
            Ok(()) => {
                let mut outcomes = qemu::test_all(options.kvm);
                let torture = Instant::now();
                outcomes.extend(qemu::torture_short(TORTURE_MINUTES));
                record_time("qemu torture (short soak)", torture.elapsed());
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
        groups.push(("qemu", group.elapsed()));
        // The Cortex-M firmware (one core, no 64-bit CAS, defmt read back).
        let group = Instant::now();
        for (name, passed, detail) in crate::mcu::run_all() {
            if !passed {
                println!("    {detail}");
            }
            t.check(&name, passed);
        }
        groups.push(("cortex-m", group.elapsed()));
    }

    print_times(&groups);
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

/// The end of `cargo xtask test`: each group's time, and the ten slowest
/// commands and QEMU configurations (where to look when the run grows).
fn print_times(groups: &[(&str, Duration)]) {
    println!("\ntime by group:");
    let line: Vec<String> = groups
        .iter()
        .map(|(name, took)| format!("{name} {:.0} s", took.as_secs_f64()))
        .collect();
    println!("    {}", line.join(", "));
    println!("the ten slowest (wall time; QEMU configurations booting at once overlap):");
    for (what, took) in slowest(10) {
        println!("    {:>7.1} s  {what}", took.as_secs_f64());
    }
}

// ---- the published crate -------------------------------------------------------

/// portable-atomic's choice for a single-core binary without CAS, as
/// `RUSTFLAGS` (the other choice is its `critical-section` feature).
const ASSUME_SINGLE_CORE: &str = "--cfg portable_atomic_unsafe_assume_single_core";

/// Targets without compare-and-swap, where portable-atomic needs the
/// binary's choice.
fn has_cas(target: &str) -> bool {
    !target.starts_with("thumbv6m") && !target.starts_with("riscv32i-")
}

/// One group of checks: its name, what it runs, and the function that
/// runs it (adding to the tally). The publish checks run alone with
/// `cargo xtask check NAME`.
pub struct Check {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(&mut Tally),
}

/// The checks `cargo xtask test` runs on the published crate (and `cargo
/// xtask check` runs one by one).
pub const PUBLISH_CHECKS: &[Check] = &[
    Check {
        name: "package",
        about: "cargo package; the unpacked .crate built alone for four bare-metal targets and its tests run",
        run: package,
    },
    Check {
        name: "msrv",
        about: "the library built at the rust-version of Cargo.toml for x86_64, aarch64, riscv64 bare metal and thumbv6m; cargo check on nightly",
        run: msrv,
    },
    Check {
        name: "api",
        about: "the public API against api/public-api.txt (`cargo xtask api --bless` rewrites it)",
        run: api,
    },
    Check {
        name: "loom-dependent",
        about: "a dependent crate: set_kernel! with test-hooks in its tests, its loom models with and without ksync's loom feature; a fresh dependent resolves no loom",
        run: loom_dependent,
    },
    Check {
        name: "portable-atomic",
        about: "thumbv6m with each portable-atomic choice a binary may make",
        run: portable_atomic_choices,
    },
];

/// `cargo xtask check NAME...`: the named publish checks alone, tallied.
pub fn run_named(names: &[String]) -> ExitCode {
    let mut t = Tally::default();
    let all: Vec<String> = PUBLISH_CHECKS.iter().map(|c| c.name.to_string()).collect();
    for name in if names.is_empty() { &all } else { names } {
        if name == "qemu-sched" || name == "qemu-tcg" {
            // The scheduler configurations of `test` alone, or its TCG
            // configurations at -smp 4.
            match crate::qemu::ensure_tools() {
                Ok(()) => {
                    let outcomes = if name == "qemu-sched" {
                        crate::qemu::test_sched()
                    } else {
                        crate::qemu::test_tcg()
                    };
                    for outcome in outcomes {
                        if !outcome.passed {
                            println!("    {}", outcome.detail);
                        }
                        t.check(&format!("qemu {}", outcome.name), outcome.passed);
                    }
                }
                Err(e) => t.check(&format!("qemu setup: {e}"), false),
            }
            continue;
        }
        if name == "cortex-m" {
            // The firmware boots (part of `test` without `--host-only`).
            for (name, passed, detail) in crate::mcu::run_all() {
                if !passed {
                    println!("    {detail}");
                }
                t.check(&name, passed);
            }
            continue;
        }
        match PUBLISH_CHECKS
            .iter()
            .chain(HOST_CHECKS)
            .find(|c| c.name == name)
        {
            Some(check) => {
                println!("\n#### {}: {}", check.name, check.about);
                (check.run)(&mut t);
            }
            None => {
                let host: Vec<&str> = HOST_CHECKS.iter().map(|c| c.name).collect();
                t.check(
                    &format!(
                        "unknown check `{name}` (known: {all:?}, and the host groups {host:?})"
                    ),
                    false,
                );
            }
        }
    }
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

/// `package.<key>` of the root Cargo.toml, as a string.
fn manifest_value(key: &str) -> Option<String> {
    let text = fs::read_to_string(root().join("Cargo.toml")).ok()?;
    let table: toml::Table = text.parse().ok()?;
    table.get("package")?.get(key)?.as_str().map(str::to_string)
}

/// What the package must hold, and nothing else (cargo's own
/// `Cargo.toml.orig`, `Cargo.lock` and `.cargo_vcs_info.json` aside).
fn package_file_allowed(file: &str) -> bool {
    matches!(
        file,
        "Cargo.toml"
            | "Cargo.toml.orig"
            | "Cargo.lock"
            | ".cargo_vcs_info.json"
            | "README.md"
            | "build.rs"
            | "LICENSE-MIT"
            | "LICENSE-APACHE"
    ) || ((file.starts_with("src/") || file.starts_with("arch/")) && file.ends_with(".rs"))
}

/// `cargo package`, then the `.crate` unpacked into a temporary directory
/// and built there alone (no workspace, no `.cargo/config.toml`, no
/// `rust-toolchain.toml`): the library for four bare-metal targets, and its
/// shipped tests (unit tests and doc tests, README examples included) on
/// the host with the features they need.
fn package(t: &mut Tally) {
    let mut list = cargo(&["package", "--list", "-p", "ksync", "--allow-dirty"]);
    let (ok, text) = run_logged("cargo package --list", &mut list);
    let files: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.contains(' ') && !l.starts_with('|'))
        .collect();
    let stray: Vec<&&str> = files.iter().filter(|f| !package_file_allowed(f)).collect();
    if !stray.is_empty() {
        println!("    not meant to ship: {stray:?}");
    }
    let complete = [
        "Cargo.toml",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "src/lib.rs",
        "arch/mod.rs",
    ]
    .iter()
    .all(|f| files.contains(f));
    t.check(
        "package: ships src/, arch/, Cargo.toml, build.rs, README and licences only",
        ok && stray.is_empty() && complete,
    );

    // The checks below build it: `--no-verify` skips cargo's own build.
    let (ok, _) = run_logged(
        "cargo package",
        &mut cargo(&[
            "package",
            "-p",
            "ksync",
            "--allow-dirty",
            "--no-verify",
            "--quiet",
        ]),
    );
    t.check("package: cargo package", ok);
    if !ok {
        return;
    }
    let version = manifest_value("version").unwrap_or_default();
    let krate = root().join(format!("target/package/ksync-{version}.crate"));
    let dir = std::env::temp_dir().join("ksync-package-check");
    let _ = fs::remove_dir_all(&dir);
    let unpacked = fs::create_dir_all(&dir)
        .ok()
        .filter(|()| {
            runs(
                "tar",
                &[
                    "xzf",
                    &krate.to_string_lossy(),
                    "-C",
                    &dir.to_string_lossy(),
                ],
            )
        })
        .map(|()| dir.join(format!("ksync-{version}")));
    t.check("package: unpack the .crate", unpacked.is_some());
    let Some(unpacked) = unpacked else {
        return;
    };
    let in_package = |args: &[&str]| {
        let mut cmd = cargo(args);
        cmd.current_dir(&unpacked)
            .env("CARGO_TARGET_DIR", root().join("target/package-check"));
        cmd
    };
    for target in [
        "x86_64-unknown-none",
        "aarch64-unknown-none",
        "riscv64gc-unknown-none-elf",
        "thumbv6m-none-eabi",
    ] {
        let mut cmd = in_package(&["build", "--lib", "--target", target]);
        let mut name = format!("package: unpacked crate builds for {target}");
        if !has_cas(target) {
            cmd.env("RUSTFLAGS", ASSUME_SINGLE_CORE).env(
                "CARGO_TARGET_DIR",
                root().join("target/package-check/single-core"),
            );
            name += &format!(" ({ASSUME_SINGLE_CORE})");
        }
        let (ok, _) = run_logged(&name, &mut cmd);
        t.check(&name, ok);
    }
    // A newcomer's first run: the README's first example pasted into a
    // fresh binary depending on the unpacked crate (no feature), run as
    // printed, and its Cargo.lock free of loom.
    let name = "package: the README's first example runs in a fresh binary";
    let example = readme_first_example();
    let fresh = example
        .as_deref()
        .and_then(|main| fresh_dependent("first-example", &unpacked.to_string_lossy(), main));
    let ran = fresh.as_ref().is_some_and(|dir| {
        let mut run = cargo(&["run", "--quiet"]);
        run.current_dir(dir)
            .env("CARGO_TARGET_DIR", root().join("target/first-example"));
        run_logged(name, &mut run).0
    });
    t.check(name, ran);
    let lock = fresh.and_then(|dir| fs::read_to_string(dir.join("Cargo.lock")).ok());
    t.check(
        "package: the fresh binary's Cargo.lock has no loom",
        lock.is_some_and(|lock| !lock.lines().any(|l| l == "name = \"loom\"")),
    );
    // As a reviewer runs it: without the host kernel (the path-only self
    // dev-dependency that turns `test-hooks` on in the repository is not in
    // the package), the unit tests are compiled out and the examples are
    // ignored, and `cargo test` passes.
    let name = "package: unpacked crate's plain cargo test";
    let (ok, _) = run_logged(name, &mut in_package(&["test"]));
    t.check(name, ok);
    // With the host kernel, every unit test and example runs.
    let name = "package: unpacked crate's tests (--features test-hooks,alloc)";
    let (ok, text) = run_logged(
        name,
        &mut in_package(&["test", "--features", "test-hooks,alloc"]),
    );
    tally_tests(t, name, ok, &text);
}

/// The first ```` ```rust ```` block of README.md: a whole program.
fn readme_first_example() -> Option<String> {
    let readme = fs::read_to_string(root().join("README.md")).ok()?;
    let start = readme.find("\n```rust\n")? + "\n```rust\n".len();
    let len = readme[start..].find("\n```\n")? + 1;
    Some(readme[start..start + len].to_string())
}

/// `cargo +TOOLCHAIN check --lib` (host and `targets`) with no optional
/// feature and with all of a kernel's, installing the toolchain (minimal
/// profile) and its targets when missing.
fn check_with(t: &mut Tally, toolchain: &str, targets: &[&str]) {
    if !toolchain_ready(t, toolchain, targets) {
        return;
    }
    for target in [None].into_iter().chain(targets.iter().copied().map(Some)) {
        for features in [None, Some(KERNEL_FEATURES)] {
            let mut args = vec!["check", "--lib", "-p", "ksync"];
            if let Some(target) = target {
                args.extend(["--target", target]);
            }
            if let Some(features) = features {
                args.extend(["--features", features]);
            }
            let name = format!("cargo +{toolchain} {}", args.join(" "));
            let (ok, _) = run_logged(&name, &mut toolchain_cargo(toolchain, &args));
            t.check(&name, ok);
        }
    }
}

/// The optional features a kernel may enable (not `test-hooks` or `loom`,
/// which are for host tests).
const KERNEL_FEATURES: &str = "defmt,alloc,lockdep,bytemuck";

/// Installs `toolchain` and its `targets` if missing, tallied.
fn toolchain_ready(t: &mut Tally, toolchain: &str, targets: &[&str]) -> bool {
    let setup = rustup_toolchain(toolchain, targets);
    if let Err(e) = &setup {
        println!("    {e}");
    }
    t.check(&format!("rustup toolchain {toolchain}"), setup.is_ok());
    setup.is_ok()
}

/// `cargo` of rustup's `toolchain` in the repository, with a target
/// directory of its own and none of the calling cargo's settings.
fn toolchain_cargo(toolchain: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", toolchain, "cargo"])
        .args(args)
        .current_dir(root())
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env(
            "CARGO_TARGET_DIR",
            root().join(format!("target/toolchain-{toolchain}")),
        );
    cmd
}

/// The MSRV (`rust-version` in Cargo.toml, read from there): the library
/// built, as a kernel pinned to that toolchain builds it, for the four
/// bare-metal targets ksync names, with no optional feature and with a
/// kernel's; then `cargo check` on nightly. rustup ships the MSRV's
/// standard library for x86_64-unknown-none and thumbv6m; for aarch64 and
/// riscv64 bare metal the MSRV compiler builds `core` and `alloc` from its
/// `rust-src` (`-Zbuild-std`, allowed on a stable compiler by
/// `RUSTC_BOOTSTRAP=1`). thumbv6m takes the portable-atomic choice the
/// README prescribes for a single core.
fn msrv(t: &mut Tally) {
    let Some(msrv) = manifest_value("rust-version") else {
        t.check("msrv: rust-version in Cargo.toml", false);
        return;
    };
    let prebuilt = ["x86_64-unknown-none", "thumbv6m-none-eabi"];
    let from_source = ["aarch64-unknown-none", "riscv64gc-unknown-none-elf"];
    if toolchain_ready(t, &msrv, &prebuilt) {
        let rust_src = Command::new("rustup")
            .args(["component", "add", "rust-src", "--toolchain", &msrv])
            .env_remove("RUSTUP_TOOLCHAIN")
            .status()
            .is_ok_and(|s| s.success());
        t.check(&format!("rustup component add rust-src ({msrv})"), rust_src);
        for target in prebuilt.into_iter().chain(from_source) {
            let build_std = from_source.contains(&target);
            if build_std && !rust_src {
                continue;
            }
            for features in [None, Some(KERNEL_FEATURES)] {
                let mut args = vec!["build", "--lib", "-p", "ksync", "--target", target];
                if build_std {
                    args.push("-Zbuild-std=core,alloc");
                }
                if let Some(features) = features {
                    args.extend(["--features", features]);
                }
                let mut name = format!("cargo +{msrv} {}", args.join(" "));
                let mut cmd = toolchain_cargo(&msrv, &args);
                if build_std {
                    cmd.env("RUSTC_BOOTSTRAP", "1");
                    name = format!("RUSTC_BOOTSTRAP=1 {name}");
                }
                if !has_cas(target) {
                    // One target directory for all: with `--target`,
                    // RUSTFLAGS reach only the target's crates, so the
                    // host's proc macros (defmt's) are built once.
                    cmd.env("RUSTFLAGS", ASSUME_SINGLE_CORE);
                    name = format!("RUSTFLAGS=\"{ASSUME_SINGLE_CORE}\" {name}");
                }
                let (ok, _) = run_logged(&name, &mut cmd);
                t.check(&name, ok);
            }
        }
    }
    check_with(t, "nightly", &["x86_64-unknown-none"]);
}

/// A dependent crate as users write one (xtask/fixtures/loom-dependent):
///
/// * `cargo test`: it calls `set_kernel!`, and its tests turn on
///   `test-hooks` through `[dev-dependencies]` (the host kernel's hooks
///   win; these were duplicate symbols once);
/// * `--cfg loom`, as loom's docs tell users: without ksync's `loom`
///   feature ksync builds as usual (`const` constructors, `lock_api`)
///   and the dependent's own model runs;
/// * `--cfg loom` with ksync's `loom` feature: a ksync spinlock inside the
///   dependent's model is visible to loom (the model completes; its
///   control, without the lock, is reported as a data race);
/// * and a fresh dependent without the feature resolves no loom at all.
fn loom_dependent(t: &mut Tally) {
    let dir = root().join("xtask/fixtures/loom-dependent");
    let runs: [(&str, Option<&str>, &[&str]); 3] = [
        (
            "loom-dependent: set_kernel! with test-hooks in its tests",
            None,
            &["test"],
        ),
        (
            "loom-dependent: --cfg loom, ksync without its loom feature",
            Some("--cfg loom"),
            &["test", "--release"],
        ),
        (
            "loom-dependent: --cfg loom with ksync's loom feature (a ksync lock in its model)",
            Some("--cfg loom"),
            &["test", "--release", "--features", "ksync-loom"],
        ),
    ];
    for (name, rustflags, args) in runs {
        let mut cmd = cargo(args);
        cmd.current_dir(&dir)
            .env("LOOM_MAX_PREEMPTIONS", "2")
            .env("CARGO_TARGET_DIR", root().join("target/loom-dependent"));
        if let Some(flags) = rustflags {
            cmd.env("RUSTFLAGS", flags);
        }
        let (ok, text) = run_logged(name, &mut cmd);
        tally_tests(t, name, ok, &text);
    }
    let name = "loom-dependent: a fresh dependent's Cargo.lock has no loom";
    let lock =
        fresh_dependent("no-loom", &root().to_string_lossy(), "fn main() {}\n").and_then(|dir| {
            let (ok, _) = run_logged(
                "cargo generate-lockfile (fresh dependent)",
                cargo(&["generate-lockfile"]).current_dir(&dir),
            );
            ok.then(|| fs::read_to_string(dir.join("Cargo.lock")).ok())
                .flatten()
        });
    let clean = lock
        .as_deref()
        .is_some_and(|lock| !lock.lines().any(|l| l == "name = \"loom\""));
    t.check(name, clean);
}

/// A new binary crate `name` under the system's temporary directory, as
/// `cargo new` makes one, depending on ksync at `ksync` (a path), with
/// `main` as its src/main.rs. Its own workspace, so no enclosing one
/// claims it.
fn fresh_dependent(name: &str, ksync: &str, main: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("ksync-fresh-{name}"));
    let _ = fs::remove_dir_all(&dir);
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\nksync = {{ path = {ksync:?} }}\n\n[workspace]\n"
    );
    fs::create_dir_all(dir.join("src")).ok()?;
    fs::write(dir.join("Cargo.toml"), manifest).ok()?;
    fs::write(dir.join("src/main.rs"), main).ok()?;
    Some(dir)
}

/// The public API list (see `api.rs`).
fn api(t: &mut Tally) {
    println!("\n==> public API (api/public-api.txt)");
    let setup = rustup_toolchain("nightly", &[]);
    let result = setup.and_then(|()| crate::api::check(false));
    if let Err(e) = &result {
        println!("    {e}");
    }
    t.check("public API matches api/public-api.txt", result == Ok(true));
}

/// thumbv6m, no CAS: portable-atomic's two choices a binary may make,
/// neither made by ksync. The `critical-section` feature, enabled by a
/// dependent crate (the Cortex-M firmware in `mcu/`, whose default
/// feature does it), and `--cfg portable_atomic_unsafe_assume_single_core`
/// (the firmware with `--no-default-features`, and the library alone). The
/// firmware builds are booted under QEMU by the Cortex-M runs
/// (`cortex-m0` and `cortex-m0-single-core`).
fn portable_atomic_choices(t: &mut Tally) {
    let target = "thumbv6m-none-eabi";
    if let Err(e) = ensure_rust_targets(&[target]) {
        println!("    {e}");
    }
    let mut lib = cargo(&["build", "--lib", "--target", target]);
    lib.env("RUSTFLAGS", ASSUME_SINGLE_CORE)
        .env("CARGO_TARGET_DIR", root().join("target/single-core"));
    let name = format!("{target}: ksync alone with {ASSUME_SINGLE_CORE}");
    let (ok, _) = run_logged(&name, &mut lib);
    t.check(&name, ok);
    // Without a choice the build must fail (ksync makes none); its errors
    // are expected, so not echoed.
    let mut none = cargo(&["build", "--lib", "--target", target]);
    none.env("CARGO_TARGET_DIR", root().join("target/no-choice"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let built = none.status().is_ok_and(|s| s.success());
    t.check(
        &format!(
            "{target}: ksync alone, with no portable-atomic choice, does not build (it makes none)"
        ),
        !built,
    );
    for (board, what) in [
        (
            "cortex-m0",
            "portable-atomic/critical-section from the firmware's Cargo.toml",
        ),
        ("cortex-m0-single-core", ASSUME_SINGLE_CORE),
    ] {
        let name = format!("{target}: the mcu/ firmware ({board}) builds with {what}");
        println!("\n==> {name}");
        let result = crate::mcu::build_board(board);
        if let Err(e) = &result {
            println!("    {e}");
        }
        t.check(&name, result.is_ok());
    }
}
