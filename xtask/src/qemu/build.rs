//! Building the kernel images in `qemu/` (their own cargo workspace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

use super::arch::{ARCHES, Arch, Config, Variant};
use super::qemu_dir;
use crate::tools::cargo;

/// Where one image is built: its own target directory (see
/// [`Variant::target_subdir`]).
fn target_dir(variant: &Variant) -> PathBuf {
    let target = qemu_dir().join("target");
    if variant.target_subdir.is_empty() {
        target
    } else {
        target.join(variant.target_subdir)
    }
}

/// `CARGO_TARGET_<TARGET>_RUSTFLAGS`.
fn rustflags_var(target: &str) -> String {
    format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        target.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// `cargo build --release` of one kernel inside `qemu/`, with exactly the
/// flags it needs: whatever the caller's environment says about rustflags
/// or target directories is removed, so `qemu/.cargo/config.toml` applies
/// (the x86_64 relocation model) plus the variant's own rustflags.
fn build(arch: &Arch, variant: &Variant) -> Result<PathBuf, String> {
    let dir = target_dir(variant);
    let mut cmd = cargo(&[
        "build",
        "--release",
        "--target",
        arch.target,
        "--target-dir",
    ]);
    cmd.arg(&dir).current_dir(qemu_dir());
    if !variant.features.is_empty() {
        cmd.args(["--features", variant.features]);
    }
    for var in [
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    for other in ARCHES {
        cmd.env_remove(rustflags_var(other.target));
    }
    if !variant.rustflags.is_empty() {
        cmd.env(rustflags_var(arch.target), variant.rustflags);
    }
    let output = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "building the {} kernel failed:\n{}",
            variant.label,
            tail(&stderr, 40)
        ));
    }
    Ok(dir.join(arch.target).join("release").join("ksync-qemu"))
}

/// Images built at once: the kernel crate and ksync compile mostly on one
/// core each (one crate at a time), so two builds keep a two-core host
/// busy. Builds that share a target directory (`Variant::target_subdir`
/// empty) wait for each other on cargo's lock, which is only slower.
const BUILD_JOBS: usize = 2;

/// The images of some configurations, each built once; a failed build is
/// kept as its error.
pub struct Kernels(BTreeMap<&'static str, Result<PathBuf, String>>);

impl Kernels {
    /// Builds the images `configs` need, [`BUILD_JOBS`] at a time,
    /// reporting progress.
    pub fn build(configs: &[Config]) -> Self {
        let mut jobs: Vec<(&'static Arch, &'static Variant)> = Vec::new();
        for config in configs {
            if !jobs.iter().any(|(_, v)| v.label == config.variant.label) {
                jobs.push((config.arch, config.variant));
            }
        }
        let queue = Mutex::new(jobs.into_iter());
        let map = Mutex::new(BTreeMap::new());
        thread::scope(|scope| {
            for _ in 0..BUILD_JOBS {
                scope.spawn(|| {
                    loop {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((arch, variant)) = next else { break };
                        let start = Instant::now();
                        let result = build(arch, variant);
                        crate::tools::record_time(
                            format!("qemu build of the {} kernel", variant.label),
                            start.elapsed(),
                        );
                        match &result {
                            Ok(_) => println!(
                                "[qemu] built the {} kernel ({:.1} s)",
                                variant.label,
                                start.elapsed().as_secs_f64()
                            ),
                            Err(e) => println!("[qemu] {e}"),
                        }
                        map.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(variant.label, result);
                    }
                });
            }
        });
        Self(map.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// The image `config` boots, or the first line of why it is missing.
    pub fn get(&self, config: &Config) -> Result<&Path, String> {
        let label = config.variant.label;
        match self.0.get(label) {
            Some(Ok(path)) => Ok(path),
            Some(Err(e)) => Err(e.lines().next().unwrap_or("build failed").to_string()),
            None => Err(format!("the {label} kernel was not built")),
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
