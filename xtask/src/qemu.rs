//! The QEMU runner: builds the SMP test kernels in `qemu/` (their own cargo
//! workspace), boots them on x86_64, aarch64 and riscv64, and judges them
//! by their `KSYNC-` marker lines (see `qemu/README.md` for the protocol).
//!
//! Configurations (one TCG configuration per kernel image of each row of
//! [`arch::ARCHES`], plus the KVM ones):
//!
//! | name | QEMU | kernel |
//! |---|---|---|
//! | `x86_64-tcg` | `-M q35 -cpu qemu64 -smp 4`, TCG | x86_64 |
//! | `aarch64-lse` | `-M virt -cpu max -smp 4`, TCG | aarch64 built with `+lse` (CAS) |
//! | `aarch64-llsc` | `-M virt -cpu cortex-a57 -smp 4`, TCG | aarch64 without LSE (LDXR/STXR); tests and controls, no benchmarks |
//! | `x86_64-lockdep` | `-M q35 -cpu qemu64 -smp 4`, TCG | x86_64 with `--features lockdep`; the tests only (the controls' checks are proven on `x86_64-tcg`) |
//! | `x86_64-generic` | `-M q35 -cpu qemu64 -smp 4`, TCG | x86_64 with `--cfg ksync_generic`; lockref, per-CPU counter and rw lock suites only |
//! | `aarch64-generic` | `-M virt -cpu cortex-a57 -smp 4`, TCG | aarch64 LL/SC with `--cfg ksync_generic`; the same suites |
//! | `riscv64-tcg` | `-M virt -bios default -cpu rv64 -smp 4`, TCG | riscv64 (the generic paths: LR/SC, `amoadd`) |
//! | `x86_64-tcg-smp8`, `aarch64-lse-smp8`, `riscv64-tcg-smp8` | as above with `-smp 8` | the same images; the lock suites and the shared boot's (`RwSpinLock`, `Once`, `RefCount`), riscv64 only the shared boot's ([`arch::OVERSUBSCRIBED`]) |
//! | `x86_64-sched-smp8`, `aarch64-sched-smp4`, `aarch64-sched-smp8`, `riscv64-sched-smp8` | the image's TCG settings at `-smp 8` (aarch64's LL/SC image at `-smp 4`), kernel word `sched` | scheduler mode (3 preempted threads per CPU): [`arch::SCHED_SUITES`] in one boot each ([`arch::SCHEDULED`]) |
//! | `x86_64-kvm` | `-accel kvm -cpu qemu64 -smp min(4, host cores)` | x86_64; only with `kvm` (or `KSYNC_QEMU_KVM=1`) and a usable `/dev/kvm` |
//!
//! Every run has a timeout, so a hang becomes a failure that names the suite
//! and the configuration. The exit status is only cross-checked (each
//! architecture's [`arch::ExitCodes`]): x86_64's `isa-debug-exit` turns the
//! kernel's verdict into 33 (pass) or 1 (fail), and a triple fault or plain
//! shutdown exits 0, which counts as failure; aarch64's semihosting exit
//! gives 0 or 1, and so does riscv64's `sifive_test`. The verdict comes
//! from the marker lines.
//!
//! The parts:
//!
//! * `arch`: the per-architecture table and the configurations;
//! * `build`: building the kernel images;
//! * `run`: the QEMU command line, a run with its timeout, marker lines;
//! * `suites`: [`test_all`], the suite registry and judging each suite;
//! * `demo`: [`demo`] and its tables;
//! * `torture`: [`torture`], the soak runs with CPU hotplug churn and fresh
//!   seeds (`cargo xtask torture`; `cargo xtask test` runs a short one).

mod arch;
pub use arch::{ARCHES, user_packages};
mod build;
mod demo;
mod run;
mod suites;
mod torture;

use std::path::PathBuf;
use std::time::Duration;

use crate::tools::{apt_install, ensure_rust_targets, root, runs};

pub use demo::{GUEST_BENCH_BOOTS, GuestFilter, demo, guest_bench};
pub use suites::{test_all, test_sched, test_tcg};
pub use torture::{Options as TortureOptions, short as torture_short, soak_names, torture};

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

/// CPUs in the TCG configurations and the demo.
const CPUS: usize = 4;
/// Time allowed beyond the suites' budgets: boot, secondary start-up,
/// output, and the kernel's own watchdog (10 s past a budget) firing first.
const RUN_SLACK: Duration = Duration::from_secs(40);
/// Extra time under KVM, where nested virtualisation boots slowly.
const KVM_SLACK: Duration = Duration::from_secs(60);

/// The test kernel's workspace.
fn qemu_dir() -> PathBuf {
    root().join("qemu")
}

/// The oldest QEMU the suites run on (Debian bookworm's); they are tested
/// on 7.2 and 10.0 (bookworm-backports).
pub const MIN_QEMU: (u32, u32) = (7, 2);

/// The `(major, minor)` of a `qemu-system-* --version` text ("QEMU
/// emulator version 7.2.19 (Debian ...)").
fn qemu_version(text: &str) -> Option<(u32, u32)> {
    let rest = text.split("version ").nth(1)?;
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Installs/checks what QEMU runs need: every architecture's QEMU system
/// emulator and its kernel's rustup target. An emulator already present is
/// used when it is [`MIN_QEMU`] or newer (never replaced); a missing one
/// is installed from apt when we are root ([`apt_install`]: at the version
/// of the QEMU packages already installed, never removing or downgrading
/// one), otherwise the error has the exact command.
pub fn ensure_tools() -> Result<(), String> {
    let old: Vec<String> = ARCHES
        .iter()
        .filter_map(|arch| {
            let out = std::process::Command::new(arch.qemu)
                .arg("--version")
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let version = qemu_version(&text)?;
            (version < MIN_QEMU)
                .then(|| format!("{} is QEMU {}.{}", arch.qemu, version.0, version.1))
        })
        .collect();
    if !old.is_empty() {
        return Err(format!(
            "{}; the suites need QEMU {}.{} or newer (the driver does not replace an installed QEMU: upgrade it, e.g. from your distribution's backports)",
            old.join(", "),
            MIN_QEMU.0,
            MIN_QEMU.1
        ));
    }
    let missing = || -> Vec<&arch::Arch> {
        ARCHES
            .iter()
            .filter(|arch| !runs(arch.qemu, &["--version"]))
            .collect()
    };
    let absent = missing();
    if !absent.is_empty() {
        let bins: Vec<&str> = absent.iter().map(|a| a.qemu).collect();
        let mut packages: Vec<&str> = absent.iter().map(|a| a.apt_package).collect();
        packages.sort_unstable();
        packages.dedup();
        apt_install(&bins.join(" and "), &packages)?;
        let still: Vec<&str> = missing().iter().map(|a| a.qemu).collect();
        if !still.is_empty() {
            return Err(format!(
                "{} still not found after installing {}",
                still.join(" and "),
                packages.join(" ")
            ));
        }
    }
    let targets: Vec<&str> = ARCHES.iter().map(|a| a.target).collect();
    ensure_rust_targets(&targets)
}

#[cfg(test)]
mod tests {
    #[test]
    fn qemu_versions_are_read() {
        let v = super::qemu_version(
            "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18+b2)\nCopyright",
        );
        assert_eq!(v, Some((7, 2)));
        assert_eq!(
            super::qemu_version("QEMU emulator version 10.0.2"),
            Some((10, 0))
        );
        assert!(super::qemu_version("QEMU emulator version 10.0.2") >= Some(super::MIN_QEMU));
        assert_eq!(super::qemu_version("garbage"), None);
    }
}
