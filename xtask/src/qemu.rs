//! The QEMU runner: builds the SMP test kernels in `qemu/` (their own cargo
//! workspace), boots them on x86_64 and aarch64, and judges them by their
//! `KSYNC-` marker lines (see `qemu/README.md` for the protocol).
//!
//! Configurations:
//!
//! | name | QEMU | kernel |
//! |---|---|---|
//! | `x86_64-tcg` | `-M q35 -cpu qemu64 -smp 4`, TCG | x86_64 |
//! | `aarch64-lse` | `-M virt -cpu max -smp 4`, TCG | aarch64 built with `+lse` (CAS) |
//! | `aarch64-llsc` | `-M virt -cpu cortex-a57 -smp 4`, TCG | aarch64 without LSE (LDXR/STXR) |
//! | `x86_64-kvm` | `-accel kvm -cpu qemu64 -smp min(4, host cores)` | x86_64; only with `kvm` (or `KSYNC_QEMU_KVM=1`) and a usable `/dev/kvm` |
//!
//! Every run has a timeout, so a hang becomes a failure that names the suite
//! and the configuration. The exit status is only cross-checked: x86_64's
//! `isa-debug-exit` turns the kernel's verdict into 33 (pass) or 1 (fail),
//! and a triple fault or plain shutdown exits 0, which counts as failure;
//! aarch64's semihosting exit gives 0 or 1. The verdict comes from the
//! marker lines.
//!
//! Only `std` is used: processes, pipes and a polling timeout.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The result of one suite, control or step in one configuration.
pub struct Outcome {
    /// `config/suite`, e.g. `x86_64-tcg/lockref` or
    /// `aarch64-lse/control:spinlock-noexcl`.
    pub name: String,
    /// For a control: its failure was detected.
    pub passed: bool,
    /// What happened, in one or a few lines.
    pub detail: String,
}

const QEMU_X86: &str = "qemu-system-x86_64";
const QEMU_ARM: &str = "qemu-system-aarch64";
const APT_INSTALL: &str =
    "apt-get install -y --no-install-recommends qemu-system-x86 qemu-system-arm";
const TARGETS: [&str; 2] = ["x86_64-unknown-none", "aarch64-unknown-none"];
/// CPUs in the TCG configurations and the demo.
const CPUS: usize = 4;
/// Time allowed beyond the suites' budgets: boot, secondary start-up,
/// output, and the kernel's own watchdog (10 s past a budget) firing first.
const RUN_SLACK: Duration = Duration::from_secs(40);
/// Extra time under KVM, where nested virtualisation boots slowly.
const KVM_SLACK: Duration = Duration::from_secs(60);

// ---- tools ------------------------------------------------------------------

/// Installs/checks what QEMU runs need: `qemu-system-x86_64` and
/// `qemu-system-aarch64` (apt packages `qemu-system-x86`, `qemu-system-arm`
/// with `--no-install-recommends`, installed when missing and we are root;
/// otherwise an error with the exact command), and the rustup targets
/// `x86_64-unknown-none` and `aarch64-unknown-none`.
pub fn ensure_tools() -> Result<(), String> {
    let missing: Vec<&str> = [QEMU_X86, QEMU_ARM]
        .into_iter()
        .filter(|bin| !runs(bin, &["--version"]))
        .collect();
    if !missing.is_empty() {
        if !is_root() {
            return Err(format!(
                "{} not found; install with: sudo {APT_INSTALL}",
                missing.join(" and ")
            ));
        }
        println!("[qemu] installing QEMU: {APT_INSTALL}");
        let args: Vec<&str> = APT_INSTALL.split_whitespace().skip(1).collect();
        let installed = apt_get(&args) || {
            // A stale package list is the usual reason; refresh once.
            apt_get(&["update"]) && apt_get(&args)
        };
        let still: Vec<&str> = [QEMU_X86, QEMU_ARM]
            .into_iter()
            .filter(|bin| !runs(bin, &["--version"]))
            .collect();
        if !installed || !still.is_empty() {
            return Err(format!("installing QEMU failed; run: {APT_INSTALL}"));
        }
    }
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(workspace_root())
        .output()
        .map_err(|e| {
            format!(
                "rustup not found ({e}); the kernels need rustup targets {}",
                TARGETS.join(", ")
            )
        })?;
    let installed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for target in TARGETS {
        if !installed.lines().any(|line| line.trim() == target) {
            println!("[qemu] rustup target add {target}");
            let status = Command::new("rustup")
                .args(["target", "add", target])
                .current_dir(workspace_root())
                .status()
                .map_err(|e| format!("rustup target add {target}: {e}"))?;
            if !status.success() {
                return Err(format!("`rustup target add {target}` failed"));
            }
        }
    }
    Ok(())
}

fn apt_get(args: &[&str]) -> bool {
    Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this process runs as root: `/proc/self` belongs to the
/// process's effective user (Linux), else ask `id -u`.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = fs::metadata("/proc/self") {
        return meta.uid() == 0;
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

// ---- configurations and builds ---------------------------------------------

/// One kernel image.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Build {
    X86_64,
    /// aarch64 with LL/SC atomics (runs on every ARMv8 CPU).
    Aarch64LlSc,
    /// aarch64 with `-C target-feature=+lse` (needs ARMv8.1 atomics).
    Aarch64Lse,
}

impl Build {
    fn target(self) -> &'static str {
        match self {
            Build::X86_64 => "x86_64-unknown-none",
            Build::Aarch64LlSc | Build::Aarch64Lse => "aarch64-unknown-none",
        }
    }

    /// Separate target directories: a different `RUSTFLAGS` would otherwise
    /// rebuild everything each time the two aarch64 flavours alternate.
    fn target_dir(self) -> PathBuf {
        let target = qemu_dir().join("target");
        match self {
            Build::Aarch64Lse => target.join("lse"),
            _ => target,
        }
    }

    fn kernel(self) -> PathBuf {
        self.target_dir()
            .join(self.target())
            .join("release")
            .join("ksync-qemu")
    }

    fn label(self) -> &'static str {
        match self {
            Build::X86_64 => "x86_64",
            Build::Aarch64LlSc => "aarch64 (LL/SC)",
            Build::Aarch64Lse => "aarch64 (+lse)",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Accel {
    Tcg,
    Kvm,
}

/// One way of running a kernel.
struct Config {
    name: &'static str,
    build: Build,
    accel: Accel,
    /// QEMU's `-cpu`.
    cpu: &'static str,
    cpus: usize,
}

impl Config {
    fn x86_64(&self) -> bool {
        self.build == Build::X86_64
    }

    fn describe(&self) -> String {
        let machine = if self.x86_64() { "q35" } else { "virt" };
        let accel = match self.accel {
            Accel::Tcg => "TCG",
            Accel::Kvm => "KVM",
        };
        format!(
            "-M {machine} -cpu {} -smp {}, {accel}, {} kernel",
            self.cpu,
            self.cpus,
            self.build.label()
        )
    }

    fn qemu_command(&self, kernel: &Path, run: &str) -> Command {
        let mut cmd = Command::new(if self.x86_64() { QEMU_X86 } else { QEMU_ARM });
        let accel = match self.accel {
            // One host thread per vCPU, so races between vCPUs are real.
            Accel::Tcg => "tcg,thread=multi",
            Accel::Kvm => "kvm",
        };
        cmd.args([
            "-accel",
            accel,
            "-cpu",
            self.cpu,
            "-smp",
            &self.cpus.to_string(),
            "-m",
            "128M",
        ]);
        cmd.args([
            "-nodefaults",
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
        ]);
        if self.x86_64() {
            // A triple fault must end QEMU (status 0), not reboot forever.
            cmd.args([
                "-M",
                "q35",
                "-no-reboot",
                "-device",
                "isa-debug-exit,iobase=0xf4,iosize=0x04",
            ]);
        } else {
            cmd.args([
                "-M",
                "virt",
                "-semihosting-config",
                "enable=on,target=native",
            ]);
        }
        cmd.arg("-kernel").arg(kernel);
        cmd.args(["-fw_cfg", &format!("name=opt/ksync/run,string={run}")]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// The exit status QEMU gives when the kernel reports `pass`.
    fn exit_code(&self, pass: bool) -> i32 {
        match (self.x86_64(), pass) {
            (true, true) => 33,
            (true, false) => 1,
            (false, true) => 0,
            (false, false) => 1,
        }
    }
}

const X86_64_TCG: Config = Config {
    name: "x86_64-tcg",
    build: Build::X86_64,
    accel: Accel::Tcg,
    cpu: "qemu64",
    cpus: CPUS,
};
const AARCH64_LSE: Config = Config {
    name: "aarch64-lse",
    build: Build::Aarch64Lse,
    accel: Accel::Tcg,
    cpu: "max",
    cpus: CPUS,
};
const AARCH64_LLSC: Config = Config {
    name: "aarch64-llsc",
    build: Build::Aarch64LlSc,
    accel: Accel::Tcg,
    cpu: "cortex-a57",
    cpus: CPUS,
};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

fn qemu_dir() -> PathBuf {
    workspace_root().join("qemu")
}

/// `cargo build --release` of one kernel inside `qemu/`, with exactly the
/// flags it needs: whatever the caller's environment says about rustflags
/// or target directories is removed, so `qemu/.cargo/config.toml` applies
/// (the x86_64 relocation model) plus `+lse` for that flavour.
fn build(build: Build) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(qemu_dir())
        .args([
            "build",
            "--release",
            "--target",
            build.target(),
            "--target-dir",
        ])
        .arg(build.target_dir());
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_TARGET_X86_64_UNKNOWN_NONE_RUSTFLAGS",
        "CARGO_TARGET_AARCH64_UNKNOWN_NONE_RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    if build == Build::Aarch64Lse {
        cmd.env(
            "CARGO_TARGET_AARCH64_UNKNOWN_NONE_RUSTFLAGS",
            "-C target-feature=+lse",
        );
    }
    let output = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "building the {} kernel failed:\n{}",
            build.label(),
            tail(&stderr, 40)
        ));
    }
    Ok(build.kernel())
}

/// Builds each image once, reporting progress; `None` for a failed build.
struct Kernels(BTreeMap<&'static str, Result<PathBuf, String>>);

impl Kernels {
    fn build(builds: &[Build]) -> Self {
        let mut map = BTreeMap::new();
        for &b in builds {
            if map.contains_key(b.label()) {
                continue;
            }
            let start = Instant::now();
            let result = build(b);
            match &result {
                Ok(_) => println!(
                    "[qemu] built the {} kernel ({:.1} s)",
                    b.label(),
                    start.elapsed().as_secs_f64()
                ),
                Err(e) => println!("[qemu] {e}"),
            }
            map.insert(b.label(), result);
        }
        Self(map)
    }

    fn get(&self, b: Build) -> Result<&Path, String> {
        match self.0.get(b.label()) {
            Some(Ok(path)) => Ok(path),
            Some(Err(e)) => Err(e.lines().next().unwrap_or("build failed").to_string()),
            None => Err(format!("the {} kernel was not built", b.label())),
        }
    }
}

// ---- running ----------------------------------------------------------------

/// What one QEMU run printed and how it ended.
struct Run {
    lines: Vec<String>,
    /// `None` when the run was killed at its timeout.
    status: Option<i32>,
    elapsed: Duration,
    log: PathBuf,
}

impl Run {
    /// The `KSYNC-` lines with the given tag, parsed.
    fn markers<'a>(&'a self, tag: &'a str) -> impl Iterator<Item = Marker> + 'a {
        self.lines
            .iter()
            .filter_map(move |line| Marker::parse(line, tag))
    }

    fn result(&self, suite: &str) -> Option<Marker> {
        self.markers("KSYNC-RESULT")
            .find(|m| m.get("suite") == Some(suite))
    }

    /// Why the run went wrong, in words, if it did.
    fn trouble(&self, config: &Config) -> Option<String> {
        let mut trouble = String::new();
        if let Some(cpus) = self.markers("KSYNC-CPUS").next() {
            let online = cpus.get("online").unwrap_or("?");
            if online != config.cpus.to_string() {
                let _ = write!(trouble, "only {online} of {} CPUs came up; ", config.cpus);
            }
        }
        for tag in ["KSYNC-FAULT", "KSYNC-PANIC"] {
            if let Some(line) = self.lines.iter().find(|l| l.starts_with(tag)) {
                let _ = write!(trouble, "{line}; ");
            }
        }
        match self.status {
            None => {
                let last = self.markers("KSYNC-START").last();
                let suite = last.as_ref().and_then(|m| m.get("suite")).unwrap_or("boot");
                let _ = write!(
                    trouble,
                    "timed out after {:.0} s in suite `{suite}` ({}); ",
                    self.elapsed.as_secs_f64(),
                    config.name
                );
            }
            Some(code) => {
                let done = self.markers("KSYNC-DONE").next();
                match done.as_ref().and_then(|m| m.get("status")) {
                    None if config.x86_64() && code == 0 => trouble
                        .push_str("QEMU exited 0 without a verdict (triple fault or shutdown); "),
                    None => {
                        let _ = write!(trouble, "QEMU exited {code} without a verdict; ");
                    }
                    Some(status) => {
                        let expected = config.exit_code(status == "PASS");
                        if code != expected {
                            let _ = write!(
                                trouble,
                                "the kernel said {status} but QEMU exited {code} (expected {expected}); "
                            );
                        }
                    }
                }
            }
        }
        (!trouble.is_empty()).then(|| trouble.trim_end_matches("; ").to_string())
    }
}

/// A `KSYNC-TAG key=value key="quoted value" ...` line.
struct Marker(Vec<(String, String)>);

impl Marker {
    fn parse(line: &str, tag: &str) -> Option<Self> {
        let rest = line.strip_prefix(tag)?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let mut fields = Vec::new();
        let mut rest = rest.trim_start();
        while let Some(eq) = rest.find('=') {
            let key = rest[..eq].trim().to_string();
            let after = &rest[eq + 1..];
            let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (
                    quoted[..end].to_string(),
                    quoted.get(end + 1..).unwrap_or(""),
                )
            } else {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_string(), &after[end..])
            };
            fields.push((key, value));
            rest = next.trim_start();
        }
        Some(Self(fields))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, key: &str) -> Option<f64> {
        self.get(key)?.parse().ok()
    }
}

/// Boots `kernel` in `config` with `run` as the kernel's arguments, killing
/// QEMU at `timeout`. Output is logged to `qemu/target/logs/`.
fn run_qemu(
    config: &Config,
    kernel: &Path,
    run: &str,
    timeout: Duration,
    label: &str,
) -> Result<Run, String> {
    let start = Instant::now();
    let mut child = config
        .qemu_command(kernel, run)
        .spawn()
        .map_err(|e| format!("cannot start QEMU for {}: {e}", config.name))?;
    let (tx, rx) = mpsc::channel();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as _),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line.trim_end_matches('\r').to_string());
            }
        })
    })
    .collect();
    drop(tx);
    let status = wait_with_timeout(&mut child, timeout);
    for reader in readers {
        let _ = reader.join();
    }
    let lines: Vec<String> = rx.into_iter().collect();
    let logs = qemu_dir().join("target").join("logs");
    let log = logs.join(format!(
        "{}-{}.log",
        config.name,
        label.replace([':', ' ', '/'], "_")
    ));
    let _ = fs::create_dir_all(&logs);
    let _ = fs::write(&log, lines.join("\n") + "\n");
    Ok(Run {
        lines,
        status,
        elapsed: start.elapsed(),
        log,
    })
}

/// Polls the child until it exits or `timeout` passes (then kills it).
/// Returns the exit code, or `None` on timeout.
fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.code().unwrap_or(-1)),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

// ---- the suite registry -------------------------------------------------------

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
/// x86_64 KVM configuration when `/dev/kvm` is usable.
pub fn test_all(kvm: bool) -> Vec<Outcome> {
    let start = Instant::now();
    let mut outcomes = Vec::new();
    let kvm = kvm || std::env::var("KSYNC_QEMU_KVM").is_ok_and(|v| v == "1");
    let mut configs = vec![X86_64_TCG, AARCH64_LSE, AARCH64_LLSC];
    if kvm {
        if kvm_usable() {
            let cpus = thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(CPUS);
            configs.push(Config {
                name: "x86_64-kvm",
                build: Build::X86_64,
                accel: Accel::Kvm,
                cpu: "qemu64",
                cpus,
            });
        } else {
            println!("[qemu] KVM requested but /dev/kvm is not usable here: skipping x86_64-kvm");
        }
    }
    let builds: Vec<Build> = configs.iter().map(|c| c.build).collect();
    let kernels = Kernels::build(&builds);
    let mut registry: Option<Vec<SuiteInfo>> = None;
    for config in &configs {
        let kernel = match kernels.get(config.build) {
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
        let suites = registry.clone().unwrap_or_default();
        println!("[qemu] {}: {}", config.name, config.describe());
        for suite in &suites {
            let outcome = run_suite(config, kernel, suite);
            println!(
                "[qemu]   {:<40} {}  {}",
                outcome.name,
                if outcome.passed { "ok  " } else { "FAIL" },
                first_line(&outcome.detail)
            );
            outcomes.push(outcome);
        }
    }
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    println!(
        "[qemu] {} passed, {failed} failed ({:.0} s)",
        outcomes.len() - failed,
        start.elapsed().as_secs_f64()
    );
    outcomes
}

fn kvm_usable() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// One boot running one suite, judged.
fn run_suite(config: &Config, kernel: &Path, suite: &SuiteInfo) -> Outcome {
    let control = suite.kind == "control";
    let name = if control {
        format!("{}/control:{}", config.name, suite.name)
    } else {
        format!("{}/{}", config.name, suite.name)
    };
    let timeout = suite.budget
        + RUN_SLACK
        + if config.accel == Accel::Kvm {
            KVM_SLACK
        } else {
            Duration::ZERO
        };
    let run = match run_qemu(config, kernel, &suite.name, timeout, &suite.name) {
        Ok(run) => run,
        Err(e) => {
            return Outcome {
                name,
                passed: false,
                detail: e,
            };
        }
    };
    let result = run.result(&suite.name);
    let trouble = run.trouble(config);
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
            let clean_exit = run.status == Some(config.exit_code(false));
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

// ---- demo -------------------------------------------------------------------------

/// The main job: boots the demo (every test suite, then the benchmark) on
/// x86_64 and aarch64 with 4 CPUs, and prints per architecture a table of
/// the suites (passed, operations per CPU, fairness) and of the in-guest
/// benchmark. Err if a suite fails or a kernel does not come up.
pub fn demo() -> Result<(), String> {
    let configs = [X86_64_TCG, AARCH64_LSE];
    let kernels = Kernels::build(&configs.iter().map(|c| c.build).collect::<Vec<_>>());
    let mut errors = Vec::new();
    for config in &configs {
        let kernel = kernels.get(config.build)?;
        // The demo runs the tests (9 x about 1 s) and the benchmark: generous.
        let run = run_qemu(config, kernel, "demo", RUN_SLACK * 2, "demo")?;
        print!("{}", demo_table(config, &run));
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

/// The per-architecture table of a demo run.
fn demo_table(config: &Config, run: &Run) -> String {
    let mut out = String::new();
    let boot = run.markers("KSYNC-BOOT").next();
    let arch = boot
        .as_ref()
        .and_then(|m| m.get("arch"))
        .unwrap_or(config.name)
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
        "{:<17} {:<6} {:>10} {:>21} {:>14} {:>16}",
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
            "{:<17} {:<6} {:>10} {:>21} {:>14} {:>16}",
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
        let counter = if config.x86_64() {
            "TSC (rdtsc)"
        } else {
            "CNTVCT_EL0"
        };
        let hz = bench[0].num("counter_hz").unwrap_or(0.0);
        let label = match config.accel {
            Accel::Tcg => "TCG: emulated cost, NOT hardware performance",
            Accel::Kvm => "KVM: nested virtualisation, noisy",
        };
        let _ = writeln!(
            out,
            "benchmark: one get+put pair per op, counter {counter} at {:.1} MHz ({label})",
            hz / 1e6
        );
        let _ = writeln!(
            out,
            "{:<20} {:>26} {:>26}",
            "op",
            "1 CPU: ticks (ns) / op",
            format!("{online} CPUs: ticks (ns) / op")
        );
        let mut ops: Vec<&str> = Vec::new();
        for b in &bench {
            if let Some(op) = b.get("op")
                && !ops.contains(&op)
            {
                ops.push(op);
            }
        }
        for op in ops {
            let cell = |one: bool| {
                bench
                    .iter()
                    .find(|b| b.get("op") == Some(op) && (b.get("cpus") == Some("1")) == one)
                    .map(|b| {
                        format!(
                            "{} ({})",
                            b.get("ticks_per_op").unwrap_or("?"),
                            b.get("ns_per_op").unwrap_or("?")
                        )
                    })
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(out, "{:<20} {:>26} {:>26}", op, cell(true), cell(false));
        }
        if config.accel == Accel::Tcg {
            let _ = writeln!(
                out,
                "  (several vCPUs on fewer host cores: the shared ticket lock waits for the host to\n   \
                 schedule each waiting vCPU in turn, so its {online}-CPU figure measures that; see qemu/README.md)"
            );
        }
    }
    out
}

// ---- helpers --------------------------------------------------------------------

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
