//! The Cortex-M runner: builds the single-core test firmware in `mcu/` (its
//! own cargo workspace) for two boards, boots it under `qemu-system-arm`,
//! decodes its `defmt` output and judges the decoded text (see
//! `mcu/README.md` for what the firmware checks).
//!
//! | board | QEMU | target | atomics |
//! |---|---|---|---|
//! | `cortex-m4` | `-M mps2-an386` | `thumbv7em-none-eabihf` | 32-bit LDREX/STREX, no 64-bit CAS |
//! | `cortex-m0` | `-M microbit` | `thumbv6m-none-eabi` | loads and stores only, no CAS at all |
//!
//! Each board boots three times: the checks (every `KSYNC-MCU check=` line
//! must say PASS, every `defmt::Format` line must decode to the exact text
//! expected here, ksync's own stall warning must appear, exit status 0),
//! and two must-fail controls (exit status 1 and a FAIL line naming the
//! lost updates). Output is semihosting stdout: raw defmt frames, decoded
//! with the `defmt-decoder` crate against the firmware's ELF; the decoded
//! text is logged to `mcu/target/logs/`. Every boot has a timeout.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const QEMU_ARM: &str = "qemu-system-arm";
/// A boot takes well under a second; this only turns a hang into a failure.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// One board and the image built for it.
#[derive(Clone, Copy)]
struct Board {
    /// Name in results: `cortex-m/<name>/<check>`.
    name: &'static str,
    machine: &'static str,
    target: &'static str,
    /// For `cargo xtask run`'s line.
    describe: &'static str,
    /// Built with `--no-default-features` and `--cfg
    /// portable_atomic_unsafe_assume_single_core` instead of the firmware's
    /// default portable-atomic choice (`critical-section`), into its own
    /// target directory.
    assume_single_core: bool,
}

const BOARDS: [Board; 3] = [
    Board {
        name: "cortex-m4",
        machine: "mps2-an386",
        target: "thumbv7em-none-eabihf",
        describe: "Cortex-M4, mps2-an386, thumbv7em: no 64-bit CAS",
        assume_single_core: false,
    },
    Board {
        name: "cortex-m0",
        machine: "microbit",
        target: "thumbv6m-none-eabi",
        describe: "Cortex-M0, microbit, thumbv6m: no CAS at all; portable-atomic through critical-section",
        assume_single_core: false,
    },
    // The same firmware with the other portable-atomic choice a single-core
    // binary may make.
    Board {
        name: "cortex-m0-single-core",
        machine: "microbit",
        target: "thumbv6m-none-eabi",
        describe: "Cortex-M0, microbit, thumbv6m: portable-atomic with --cfg portable_atomic_unsafe_assume_single_core",
        assume_single_core: true,
    },
];

/// The checks the firmware runs, in order: each must print a PASS line.
const CHECKS: [&str; 8] = [
    "spinlock-ticket-irqsave",
    "spinlock-ttas-archirq",
    "spinlock-ticket-trylock",
    "lockref",
    "seqlock",
    "percpu-counter",
    "percpu-read-bound",
    "rcu",
];

/// The must-fail controls (firmware command-line words).
const CONTROLS: [&str; 2] = ["control-spinlock-noexcl", "control-percpu-unmasked"];

/// `KSYNC-MCU format=NAME TEXT`: ksync's `defmt::Format` impls, decoded.
const FORMATS: [(&str, &str); 10] = [
    ("lockref", "LockRef { count: 3 }"),
    ("lockref-guard", "LockRefGuard { count: 3 }"),
    ("ticket-held", "TicketLock { owner: 2, next: 3 }"),
    ("ticket-free", "TicketLock { owner: 3, next: 3 }"),
    ("ttas-held", "TtasLock { locked: true }"),
    ("ttas-free", "TtasLock { locked: false }"),
    ("lockref-stats", "Stats { saturated: 0, get_on_dead: 0 }"),
    ("srcu-cookie", "SrcuCookie(2)"),
    ("rcu-cookie", "Cookie(4)"),
    (
        "stall-report",
        "rcu: grace period 0x1 stalled for 150, 1 CPU(s) waiting: [0]",
    ),
];

/// What ksync itself logs through `Kernel::rcu_stall`'s default.
const STALL_WARNING: &str = "WARN rcu: grace period 0x1 stalled for 150, 1 CPU(s) waiting: [0]";

// ---- tools ------------------------------------------------------------------

/// Installs/checks what the Cortex-M runs need: `qemu-system-arm` (apt
/// package `qemu-system-arm`, `--no-install-recommends`, installed when
/// missing and we are root; otherwise an error with the exact command) and
/// the rustup targets `thumbv7em-none-eabihf` and `thumbv6m-none-eabi`.
/// The decoder is the `defmt-decoder` crate, built with the driver.
pub fn ensure_tools() -> Result<(), String> {
    if !runs(QEMU_ARM, &["--version"]) {
        // The driver's one apt path: at the installed QEMU version, never
        // removing or downgrading a package (`tools::apt_install`).
        crate::tools::apt_install(QEMU_ARM, &["qemu-system-arm"])?;
        if !runs(QEMU_ARM, &["--version"]) {
            return Err(format!(
                "{QEMU_ARM} still not found after installing qemu-system-arm"
            ));
        }
    }
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(mcu_dir())
        .output()
        .map_err(|e| format!("rustup not found ({e}); the firmware needs rustup targets"))?;
    let installed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for board in BOARDS {
        if !installed.lines().any(|line| line.trim() == board.target) {
            println!("[cortex-m] rustup target add {}", board.target);
            let status = Command::new("rustup")
                .args(["target", "add", board.target])
                .current_dir(mcu_dir())
                .status()
                .map_err(|e| format!("rustup target add {}: {e}", board.target))?;
            if !status.success() {
                return Err(format!("`rustup target add {}` failed", board.target));
            }
        }
    }
    Ok(())
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

// ---- building ------------------------------------------------------------------

fn mcu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .join("mcu")
}

/// `cargo build --release` of the firmware for `board`, inside `mcu/` so
/// that `mcu/.cargo/config.toml` applies (linker scripts, `KSYNC_MAX_CPUS`,
/// `DEFMT_LOG`); the caller's rustflags and target dirs are removed.
fn build(board: Board) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = if board.assume_single_core {
        mcu_dir().join("target/single-core")
    } else {
        mcu_dir().join("target")
    };
    let mut cmd = Command::new(cargo);
    cmd.current_dir(mcu_dir())
        .args([
            "build",
            "--release",
            "--target",
            board.target,
            "--target-dir",
        ])
        .arg(&target_dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "KSYNC_MAX_CPUS",
        "DEFMT_LOG",
    ] {
        cmd.env_remove(var);
    }
    if board.assume_single_core {
        // Joined with `mcu/.cargo/config.toml`'s `target.'cfg(..)'.rustflags`
        // (the linker scripts), which `RUSTFLAGS` would replace.
        cmd.arg("--no-default-features").env(
            "CARGO_TARGET_THUMBV6M_NONE_EABI_RUSTFLAGS",
            "--cfg portable_atomic_unsafe_assume_single_core",
        );
    }
    let output = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        return Err(format!(
            "building the {} firmware failed:\n{}",
            board.name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(target_dir
        .join(board.target)
        .join("release")
        .join("ksync-mcu"))
}

// ---- booting and decoding ----------------------------------------------------------

/// One boot: decoded lines (`LEVEL message`) and how it ended.
struct Boot {
    lines: Vec<String>,
    /// `None` when killed at the timeout.
    status: Option<i32>,
    elapsed: Duration,
    /// Decoder trouble or QEMU's complaints, for the failure message.
    trouble: Option<String>,
}

impl Boot {
    /// The message of the first line starting with `prefix` (level
    /// stripped).
    fn find(&self, prefix: &str) -> Option<&str> {
        self.lines
            .iter()
            .filter_map(|line| line.split_once(' ').map(|(_, msg)| msg))
            .find(|msg| msg.starts_with(prefix))
    }

    /// The `KSYNC-MCU check=NAME ...` line's text after `check=NAME `.
    fn check(&self, name: &str) -> Option<&str> {
        self.find(&format!("KSYNC-MCU check={name} "))
            .map(|msg| &msg[format!("KSYNC-MCU check={name} ").len()..])
    }

    fn panic_line(&self) -> Option<&str> {
        self.find("KSYNC-MCU panic")
            .or_else(|| self.find("KSYNC-MCU hardfault"))
            .or_else(|| self.find("KSYNC-MCU error"))
    }

    fn ending(&self) -> String {
        let status = match self.status {
            Some(code) => format!("exit status {code}"),
            None => format!("killed after {} s", BOOT_TIMEOUT.as_secs()),
        };
        match (&self.trouble, self.panic_line()) {
            (_, Some(panic)) => format!("{status}; {panic}"),
            (Some(trouble), None) => format!("{status}; {trouble}"),
            (None, None) => status,
        }
    }
}

/// Boots `elf` on `board` with the firmware argument `arg` (`all` or a
/// control) and decodes what it printed.
fn boot(board: Board, elf: &Path, arg: &str) -> Result<Boot, String> {
    let elf_bytes = fs::read(elf).map_err(|e| format!("cannot read {}: {e}", elf.display()))?;
    let table = defmt_decoder::Table::parse(&elf_bytes)
        .map_err(|e| format!("{}: bad defmt data: {e}", elf.display()))?
        .ok_or_else(|| format!("{}: no defmt data", elf.display()))?;
    let start = Instant::now();
    let mut child = Command::new(QEMU_ARM)
        .args(["-M", board.machine])
        .args(["-display", "none", "-monitor", "none", "-serial", "none"])
        .arg("-nodefaults")
        .arg("-semihosting-config")
        .arg(format!("enable=on,target=native,arg=ksync-mcu,arg={arg}"))
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {QEMU_ARM}: {e}"))?;
    let readers = [
        drain(child.stdout.take().map(|s| Box::new(s) as _)),
        drain(child.stderr.take().map(|s| Box::new(s) as _)),
    ];
    let status = crate::tools::wait_with_timeout(&mut child, BOOT_TIMEOUT);
    let [stdout, stderr] = readers.map(|r| r.join().unwrap_or_default());
    let elapsed = start.elapsed();

    let mut decoder = table.new_stream_decoder();
    decoder.received(&stdout);
    let mut lines = Vec::new();
    let mut trouble = None;
    loop {
        match decoder.decode() {
            Ok(frame) => {
                let level = frame.level().map_or("PRINT", |l| l.as_str());
                lines.push(format!(
                    "{} {}",
                    level.to_ascii_uppercase(),
                    frame.display_message()
                ));
            }
            Err(defmt_decoder::DecodeError::UnexpectedEof) => break,
            Err(defmt_decoder::DecodeError::Malformed) => {
                trouble = Some("malformed defmt frame".to_string());
                break;
            }
        }
    }
    let stderr = String::from_utf8_lossy(&stderr);
    let complaints: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if trouble.is_none() && lines.is_empty() {
        trouble = Some(match complaints.first() {
            Some(first) => format!("no defmt output; QEMU said: {first}"),
            None => "no defmt output".to_string(),
        });
    }

    let logs = mcu_dir().join("target").join("logs");
    let _ = fs::create_dir_all(&logs);
    let mut log = lines.join("\n");
    log.push('\n');
    for line in &complaints {
        log.push_str(&format!("[qemu stderr] {line}\n"));
    }
    let _ = fs::write(logs.join(format!("{}-{arg}.log", board.name)), log);
    Ok(Boot {
        lines,
        status,
        elapsed,
        trouble,
    })
}

/// Reads a pipe to its end on a thread.
fn drain(pipe: Option<Box<dyn Read + Send>>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

// ---- judging ----------------------------------------------------------------------

/// One result: (`cortex-m/<board>/<check>`, passed, one-line detail).
pub type Outcome = (String, bool, String);

/// The checks run's results: one per check, one for the formats.
fn judge_checks(board: Board, boot: &Boot) -> Vec<Outcome> {
    let mut out = Vec::new();
    let name = |what: &str| format!("cortex-m/{}/{what}", board.name);
    for check in CHECKS {
        let (passed, detail) = match boot.check(check) {
            Some(rest) if rest.starts_with("result=PASS") => (true, rest.to_string()),
            Some(rest) => (false, rest.to_string()),
            None => (false, format!("no result line; {}", boot.ending())),
        };
        out.push((name(check), passed, detail));
    }
    let mut wrong = Vec::new();
    for (format, expected) in FORMATS {
        match boot.find(&format!("KSYNC-MCU format={format} ")) {
            Some(msg) if msg.ends_with(&format!(" {expected}")) => {}
            Some(msg) => wrong.push(format!("{format}: got {msg:?}, expected {expected:?}")),
            None => wrong.push(format!("{format}: missing")),
        }
    }
    if !boot.lines.iter().any(|line| line == STALL_WARNING) {
        wrong.push(format!(
            "ksync's own stall warning missing ({STALL_WARNING:?})"
        ));
    }
    let done = boot.find("KSYNC-MCU done");
    let clean = boot.status == Some(0) && boot.trouble.is_none() && done.is_some();
    if !clean {
        wrong.push(format!(
            "{}; last line: {}",
            boot.ending(),
            boot.lines.last().map_or("-", String::as_str)
        ));
    }
    let detail = if wrong.is_empty() {
        format!(
            "{} Format impls decoded as expected, plus ksync's stall warning; {} in {:.1} s",
            FORMATS.len(),
            done.unwrap_or("-"),
            boot.elapsed.as_secs_f64()
        )
    } else {
        wrong.join("; ")
    };
    out.push((name("defmt-formats"), wrong.is_empty(), detail));
    out
}

/// A control is caught when it fails: exit status 1 and its FAIL line.
fn judge_control(board: Board, control: &str, boot: &Boot) -> Outcome {
    let name = format!("cortex-m/{}/control:{control}", board.name);
    match boot.check(control) {
        Some(rest) if rest.starts_with("result=FAIL") && boot.status == Some(1) => {
            (name, true, format!("caught as expected: {rest}"))
        }
        Some(rest) if rest.starts_with("result=PASS") => (
            name,
            false,
            format!("NOT caught (the control passed): {rest}"),
        ),
        other => (
            name,
            false,
            format!(
                "no verdict ({}): {}",
                other.unwrap_or("no result line"),
                boot.ending()
            ),
        ),
    }
}

/// Builds and boots one board; every step that cannot happen is a failed
/// outcome named after it.
fn run_board(board: Board) -> (Vec<Outcome>, Option<Boot>) {
    let fail = |what: &str, why: String| (format!("cortex-m/{}/{what}", board.name), false, why);
    let start = Instant::now();
    let elf = match build(board) {
        Ok(elf) => elf,
        Err(e) => return (vec![fail("build", e)], None),
    };
    println!(
        "[cortex-m] built the {} firmware ({:.1} s)",
        board.name,
        start.elapsed().as_secs_f64()
    );
    let mut out = Vec::new();
    let checks = match boot(board, &elf, "all") {
        Ok(b) => {
            out.extend(judge_checks(board, &b));
            Some(b)
        }
        Err(e) => {
            out.push(fail("boot", e));
            None
        }
    };
    for control in CONTROLS {
        // A control's race needs the timer interrupt inside its window,
        // which QEMU delivers between translated blocks at host-timed
        // moments: a boot can miss it (the Cortex-M0's
        // `control-percpu-unmasked`: 500 interrupts, none in the window,
        // once in a fresh-clone run). An uncaught control gets up to
        // two more boots, as the QEMU runner gives one; uncaught in all
        // three, it fails.
        let mut outcome = None;
        for _ in 0..3 {
            let o = match boot(board, &elf, control) {
                Ok(b) => judge_control(board, control, &b),
                Err(e) => fail(&format!("control:{control}"), e),
            };
            let caught = o.1;
            outcome = Some(o);
            if caught {
                break;
            }
        }
        out.extend(outcome);
    }
    (out, checks)
}

/// Builds the firmware for the board named `name` (no boot): the
/// portable-atomic checks build both thumbv6m choices this way.
pub fn build_board(name: &str) -> Result<PathBuf, String> {
    let board = BOARDS
        .into_iter()
        .find(|b| b.name == name)
        .ok_or_else(|| format!("no board `{name}`"))?;
    build(board)
}

/// Every board: build, boot the checks and the controls, judge. For
/// `cargo xtask test`.
pub fn run_all() -> Vec<Outcome> {
    if let Err(e) = ensure_tools() {
        return vec![("cortex-m/tools".to_string(), false, e)];
    }
    BOARDS.into_iter().flat_map(|b| run_board(b).0).collect()
}

/// One line per board for `cargo xtask run`: what ran and how it went.
pub fn demo_lines() -> Vec<String> {
    if let Err(e) = ensure_tools() {
        return vec![format!("Cortex-M: not run: {e}")];
    }
    BOARDS
        .into_iter()
        .map(|board| {
            let (outcomes, boot) = run_board(board);
            let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.1).collect();
            let controls = outcomes.iter().filter(|o| o.0.contains("/control:")).count();
            let Some(boot) = boot.filter(|_| failed.is_empty()) else {
                let first = failed.first().map_or("-".to_string(), |o| format!("{}: {}", o.0, o.2));
                return format!("{} ({}): FAILED: {first}", board.name, board.describe);
            };
            let irq_ops: u64 = CHECKS
                .iter()
                .filter_map(|c| boot.check(c))
                .filter_map(|rest| field(rest, "irq"))
                .sum();
            let thread_ops: u64 = CHECKS
                .iter()
                .filter_map(|c| boot.check(c))
                .filter_map(|rest| field(rest, "thread"))
                .sum();
            format!(
                "{} ({}): {} checks passed with SysTick on the same objects ({thread_ops} thread / {irq_ops} handler ops), {} defmt formats read back, {controls} controls caught, {:.1} s",
                board.name,
                board.describe,
                CHECKS.len(),
                FORMATS.len(),
                boot.elapsed.as_secs_f64()
            )
        })
        .collect()
}

/// `key=N` in a check line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}
