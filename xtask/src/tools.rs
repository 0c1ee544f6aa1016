//! What every command shares: where the workspace is, how to start cargo,
//! and installing what the checks need (rustup targets and components,
//! Debian packages).
//!
//! Installing is done only when it is missing, and with apt only as root;
//! otherwise the error names the exact command to run.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// The workspace root (the parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// `cargo ARGS` in the workspace root, with the cargo this driver runs
/// under. The driver runs under `cargo run --release`; its own rustflags
/// must not leak into the commands it starts.
pub fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(args)
        .current_dir(root())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

/// Runs `cmd` with inherited output; whether it started and succeeded.
pub fn status_ok(cmd: &mut Command) -> bool {
    cmd.status().is_ok_and(|s| s.success())
}

/// Whether `program ARGS` runs and succeeds (output discarded).
pub fn runs(program: &str, args: &[&str]) -> bool {
    status_ok(
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Whether this process runs as root: `/proc/self` belongs to the
/// process's effective user (Linux), else ask `id -u`.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = fs::metadata("/proc/self") {
        return meta.uid() == 0;
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

// ---- timings ------------------------------------------------------------------

/// What took how long in this run (every command of the host checks, every
/// QEMU configuration, the kernel builds...), for the slowest list at the
/// end of `cargo xtask test`.
static TIMES: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

/// Records that `what` took `took` (wall time; QEMU configurations that
/// boot at the same time overlap).
pub fn record_time(what: impl Into<String>, took: Duration) {
    TIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((what.into(), took));
}

/// The `n` longest of the recorded times, longest first.
pub fn slowest(n: usize) -> Vec<(String, Duration)> {
    let mut times = TIMES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    times.sort_by_key(|&(_, took)| std::cmp::Reverse(took));
    times.truncate(n);
    times
}

// ---- apt ----------------------------------------------------------------------

/// Installs the Debian `packages` without ever removing or downgrading an
/// installed package. `what` names what is missing, for the messages.
///
/// Machines often carry QEMU packages newer than their distribution's (a
/// `qemu-utils` from backports, or the whole QEMU 10 from backports), and
/// QEMU's packages pin each other to one version: installing the
/// distribution's `qemu-system-*` next to them makes apt remove the newer
/// package, or fail on an unmet dependency. So the packages of QEMU's
/// source are asked for at the version already installed (`pkg=VERSION`,
/// the newest such version an apt source still offers), and every plan is
/// first simulated (`apt-get -s`): one that removes or downgrades anything
/// is refused with what it would have done and what to do instead. The
/// real install runs with `--no-remove` too.
///
/// Only as root; otherwise an error with the command to run.
pub fn apt_install(what: &str, packages: &[&str]) -> Result<(), String> {
    if packages.is_empty() {
        return Ok(());
    }
    let root = is_root();
    let plan = match plan_install(packages) {
        Ok(plan) => plan,
        // A stale or missing package list is the usual reason; refresh once.
        Err(_) if root && apt_get(&["update", "-qq"], &[]) => plan_install(packages)?,
        Err(e) => return Err(e),
    };
    let list = plan.join(" ");
    let install = format!("apt-get install -y --no-install-recommends --no-remove {list}");
    if !root {
        return Err(format!(
            "{what} not found; run: sudo apt-get update && sudo {install}"
        ));
    }
    println!("xtask: {install}");
    let args = [
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        "--no-remove",
    ];
    let plan: Vec<&str> = plan.iter().map(String::as_str).collect();
    if apt_get(&args, &plan) {
        Ok(())
    } else {
        Err(format!("`{install}` failed"))
    }
}

fn apt_get(args: &[&str], packages: &[&str]) -> bool {
    status_ok(
        Command::new("apt-get")
            .args(args)
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )
}

/// Whether `package` is built from QEMU's source package (so apt holds it
/// to the version of the other QEMU packages).
fn qemu_family(package: &str) -> bool {
    package.starts_with("qemu-") || package == "qemu"
}

/// The versions of the installed packages built from QEMU's source, newest
/// first, each with the packages that have it.
fn installed_qemu_versions() -> Vec<(String, Vec<String>)> {
    let Ok(out) = Command::new("dpkg-query")
        .args([
            "-W",
            "-f",
            "${db:Status-Abbrev} ${Package} ${Version} ${source:Package}\\n",
        ])
        .output()
    else {
        return Vec::new();
    };
    let mut versions: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [status, package, version, source] = words[..] else {
            continue;
        };
        if status != "ii" || source != "qemu" {
            continue;
        }
        match versions.iter_mut().find(|(v, _)| v == version) {
            Some((_, packages)) => packages.push(package.to_string()),
            None => versions.push((version.to_string(), vec![package.to_string()])),
        }
    }
    versions.sort_by(|(a, _), (b, _)| {
        if version_lt(a, b) {
            std::cmp::Ordering::Greater
        } else if version_lt(b, a) {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Equal
        }
    });
    versions
}

/// Debian's version order (`dpkg --compare-versions A lt B`).
fn version_lt(a: &str, b: &str) -> bool {
    runs("dpkg", &["--compare-versions", a, "lt", b])
}

/// Whether an apt source offers `package` at `version`.
fn apt_offers(package: &str, version: &str) -> bool {
    Command::new("apt-cache")
        .args(["madison", package])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|line| line.split('|').nth(1).is_some_and(|v| v.trim() == version))
        })
}

/// What `apt-get -s install` would do that the driver refuses: every
/// removal (`Remv`) and downgrade (`Inst P [OLD] (NEW ...)` with NEW
/// older than OLD), in words. `lt` is the version order.
fn refused_actions(simulation: &str, lt: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let mut refused = Vec::new();
    for line in simulation.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("Remv"), Some(package), old, _) => {
                let old = old.map_or("", |o| o.trim_matches(['[', ']']));
                refused.push(format!("remove {package} {old}").trim_end().to_string());
            }
            (Some("Inst"), Some(package), Some(old), Some(new)) if old.starts_with('[') => {
                let (old, new) = (old.trim_matches(['[', ']']), new.trim_start_matches('('));
                if lt(new, old) {
                    refused.push(format!("downgrade {package} {old} to {new}"));
                }
            }
            _ => {}
        }
    }
    refused
}

/// The `apt-get install` arguments that install `packages` without a
/// removal or downgrade (see [`apt_install`]), or why there are none.
fn plan_install(packages: &[&str]) -> Result<Vec<String>, String> {
    let installed = installed_qemu_versions();
    // QEMU's packages at an installed version (newest first), then as apt
    // would choose them.
    let mut plans: Vec<(String, Vec<String>)> = Vec::new();
    for (version, _) in &installed {
        let pinned: Vec<&str> = packages
            .iter()
            .copied()
            .filter(|p| qemu_family(p))
            .collect();
        if pinned.is_empty() || !pinned.iter().all(|p| apt_offers(p, version)) {
            continue;
        }
        let plan = packages
            .iter()
            .map(|p| {
                if qemu_family(p) {
                    format!("{p}={version}")
                } else {
                    (*p).to_string()
                }
            })
            .collect();
        plans.push((format!("at the installed QEMU version {version}"), plan));
    }
    plans.push((
        "as apt chooses them".to_string(),
        packages.iter().map(|p| (*p).to_string()).collect(),
    ));
    let mut tried = Vec::new();
    for (how, plan) in &plans {
        let out = Command::new("apt-get")
            .args(["-s", "install", "--no-install-recommends"])
            .args(plan)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                format!(
                    "apt-get not found ({e}); install {} by hand",
                    packages.join(" ")
                )
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let refused = refused_actions(&text, version_lt);
        if out.status.success() && refused.is_empty() {
            return Ok(plan.clone());
        }
        let why = if refused.is_empty() {
            let error = text
                .lines()
                .find(|l| l.starts_with("E:") || l.contains("Depends:"));
            format!(
                "apt cannot ({})",
                error.unwrap_or("apt-get -s failed").trim()
            )
        } else {
            format!("apt would {}", refused.join(", "))
        };
        tried.push(format!("{} {how}: {why}", packages.join(" ")));
    }
    let mut advice = String::new();
    let offered = |v: &str, ps: &[String]| ps.iter().any(|p| apt_offers(p, v));
    for (version, have) in &installed {
        if !offered(version, have) {
            advice += &format!(
                "; the installed {} {version} comes from no apt source listed now",
                have.join(", ")
            );
            if version.contains("bpo") {
                advice += &format!(
                    " (Debian backports: add `deb http://deb.debian.org/debian {}-backports main` to the apt sources, run apt-get update and rerun, or install {} from backports yourself)",
                    os_codename().unwrap_or_else(|| "<release>".into()),
                    packages.join(" ")
                );
            }
        }
    }
    Err(format!(
        "not installing: the driver never removes or downgrades an installed package. Tried {}{advice}",
        tried.join("; ")
    ))
}

/// The distribution's code name (`VERSION_CODENAME` in `/etc/os-release`).
fn os_codename() -> Option<String> {
    let text = fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// Installs the packages whose file (`(package, path)`) is missing, each
/// package once.
pub fn ensure_apt_files(what: &[(&str, &str)]) -> Result<(), String> {
    let mut missing: Vec<&str> = Vec::new();
    for (package, path) in what {
        if !Path::new(path).exists() && !missing.contains(package) {
            missing.push(package);
        }
    }
    apt_install("packages", &missing)
}

// ---- rustup -------------------------------------------------------------------

/// The targets listed in `rust-toolchain.toml` (`[toolchain] targets`).
pub fn toolchain_targets() -> Result<Vec<String>, String> {
    let path = root().join("rust-toolchain.toml");
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(targets) = table.get("toolchain").and_then(|t| t.get("targets")) else {
        return Ok(Vec::new());
    };
    let targets = targets
        .as_array()
        .ok_or_else(|| format!("{}: `toolchain.targets` is not a list", path.display()))?;
    targets
        .iter()
        .map(|t| {
            t.as_str().map(str::to_string).ok_or_else(|| {
                format!("{}: `toolchain.targets` holds a non-string", path.display())
            })
        })
        .collect()
}

/// Adds the rustup `targets` the workspace's toolchain does not have yet.
pub fn ensure_rust_targets<T: AsRef<str>>(targets: &[T]) -> Result<(), String> {
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("rustup not found ({e}); it is needed to add rustup targets"))?;
    let installed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let missing: Vec<&str> = targets
        .iter()
        .map(AsRef::as_ref)
        .filter(|t| !installed.lines().any(|line| line.trim() == *t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    println!("xtask: rustup target add {list}");
    if status_ok(
        Command::new("rustup")
            .args(["target", "add"])
            .args(&missing)
            .current_dir(root()),
    ) {
        Ok(())
    } else {
        Err(format!("`rustup target add {list}` failed"))
    }
}

/// rustup does not add the targets of `rust-toolchain.toml` to a toolchain
/// that is already installed: adds the missing ones, and makes sure of the
/// listed components (clippy, rustfmt).
pub fn ensure_toolchain() -> Result<(), String> {
    ensure_rust_targets(&toolchain_targets()?)?;
    let _ = Command::new("rustup")
        .args(["component", "add", "clippy", "rustfmt"])
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    Ok(())
}

/// Polls the child until it exits or `timeout` passes (then kills it).
/// Returns the exit code, or `None` on timeout.
pub fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<i32> {
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

/// Installs rustup `toolchain` (minimal profile) if it is missing, and its
/// `targets` (for the MSRV and nightly checks, whose toolchains are not the
/// workspace's).
pub fn rustup_toolchain(toolchain: &str, targets: &[&str]) -> Result<(), String> {
    let installed = Command::new("rustup")
        .args(["run", toolchain, "rustc", "--version"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        println!("xtask: rustup toolchain install {toolchain} --profile minimal");
        if !status_ok(
            Command::new("rustup")
                .args(["toolchain", "install", toolchain, "--profile", "minimal"])
                .env_remove("RUSTUP_TOOLCHAIN"),
        ) {
            return Err(format!(
                "`rustup toolchain install {toolchain} --profile minimal` failed"
            ));
        }
    }
    if targets.is_empty() {
        return Ok(());
    }
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed", "--toolchain", toolchain])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .map_err(|e| format!("rustup: {e}"))?;
    let have = String::from_utf8_lossy(&listed.stdout).into_owned();
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !have.lines().any(|line| line.trim() == *t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!(
        "xtask: rustup target add --toolchain {toolchain} {}",
        missing.join(" ")
    );
    if status_ok(
        Command::new("rustup")
            .args(["target", "add", "--toolchain", toolchain])
            .args(&missing)
            .env_remove("RUSTUP_TOOLCHAIN"),
    ) {
        Ok(())
    } else {
        Err(format!(
            "`rustup target add --toolchain {toolchain} {}` failed",
            missing.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    /// The simulation of `apt-get install qemu-system-x86` on a machine
    /// with `qemu-utils` 10 from backports and only bookworm's 7.2 on
    /// offer (as measured on such a machine), and an explicit downgrade.
    #[test]
    fn removals_and_downgrades_are_refused() {
        let simulation = "\
The following packages will be REMOVED:
  qemu-utils
Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]
Inst ipxe-qemu (1.0.0+git-20190125.36a4c85-5.1 Debian:12.14/oldstable [all])
Inst qemu-block-extra [1:10.0.2+ds-2] (1:7.2+dfsg-7+deb12u18+b2 Debian:12.14/oldstable [amd64])
Inst seabios [1.16.0-1] (1.16.2-1 Debian:12.14/oldstable [all])
Conf ipxe-qemu (1.0.0+git-20190125.36a4c85-5.1 Debian:12.14/oldstable [all])
";
        // A stand-in for dpkg's order, enough for these versions: by the
        // number after the epoch.
        let major = |v: &str| -> u32 {
            let v = v.trim_start_matches("1:");
            v[..v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len())]
                .parse()
                .unwrap_or(0)
        };
        let lt = |a: &str, b: &str| major(a) < major(b);
        let refused = super::refused_actions(simulation, lt);
        assert_eq!(
            refused,
            [
                "remove qemu-utils 1:10.0.2+ds-2+deb13u1~bpo12+1",
                "downgrade qemu-block-extra 1:10.0.2+ds-2 to 1:7.2+dfsg-7+deb12u18+b2",
            ]
        );
        assert!(super::refused_actions("Inst a (1 x)\nConf a (1 x)\n", lt).is_empty());
    }

    #[test]
    fn qemu_family_is_by_name() {
        assert!(super::qemu_family("qemu-system-arm"));
        assert!(super::qemu_family("qemu-user-static"));
        assert!(!super::qemu_family("gcc-aarch64-linux-gnu"));
    }

    #[test]
    fn toolchain_targets_are_read() {
        let targets = super::toolchain_targets().expect("rust-toolchain.toml parses");
        assert!(
            targets.iter().any(|t| t == "x86_64-unknown-none"),
            "{targets:?}"
        );
        assert!(targets.iter().all(|t| !t.is_empty() && !t.contains('"')));
    }

    /// Every cross linker and qemu-user runner `.cargo/config.toml` names
    /// is installed by a row's qemu-user packages, with its sysroot, and its
    /// target is one the driver adds.
    #[test]
    fn cross_packages_cover_the_runners() {
        let path = super::root().join(".cargo/config.toml");
        let text = std::fs::read_to_string(&path).expect("the workspace's cargo config");
        let config: toml::Table = text.parse().expect("it parses");
        let targets = super::toolchain_targets().expect("rust-toolchain.toml parses");
        let packages = crate::qemu::user_packages();
        let provided = |file: &str| packages.iter().any(|(_, p)| *p == file);
        let per_target = config["target"].as_table().expect("[target.*] tables");
        assert!(per_target.len() >= 2, "{per_target:?}");
        for (target, table) in per_target {
            assert!(
                targets.contains(target),
                "{target} not in rust-toolchain.toml"
            );
            let linker = table["linker"].as_str().expect("a linker");
            assert!(provided(&format!("/usr/bin/{linker}")), "{linker}");
            let runner: Vec<&str> = table["runner"]
                .as_str()
                .expect("a runner")
                .split_whitespace()
                .collect();
            assert!(provided(&format!("/usr/bin/{}", runner[0])), "{runner:?}");
            let sysroot = runner[runner.iter().position(|w| *w == "-L").expect("-L") + 1];
            assert!(
                packages
                    .iter()
                    .any(|(_, p)| p.starts_with(&format!("{sysroot}/"))),
                "{sysroot}"
            );
        }
    }
}
