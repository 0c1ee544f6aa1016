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

// ---- apt ----------------------------------------------------------------------

/// Installs the Debian `packages` (with `--no-install-recommends`: without
/// it apt may refuse on machines with a newer `qemu-utils`). `what` names
/// what is missing, for the messages. Only as root; otherwise an error with
/// the command to run.
pub fn apt_install(what: &str, packages: &[&str]) -> Result<(), String> {
    if packages.is_empty() {
        return Ok(());
    }
    let list = packages.join(" ");
    let install = format!("apt-get install -y --no-install-recommends {list}");
    if !is_root() {
        return Err(format!(
            "{what} not found; run: sudo apt-get update && sudo {install}"
        ));
    }
    println!("xtask: {install}");
    let install_args = ["install", "-y", "-qq", "--no-install-recommends"];
    let ok = apt_get(&install_args, packages) || {
        // A stale or missing package list is the usual reason; refresh once.
        apt_get(&["update", "-qq"], &[]) && apt_get(&install_args, packages)
    };
    if ok {
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
