//! Building the kernel images in `qemu/` (their own cargo workspace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// The images of some configurations, each built once; a failed build is
/// kept as its error.
pub struct Kernels(BTreeMap<&'static str, Result<PathBuf, String>>);

impl Kernels {
    /// Builds the images `configs` need, reporting progress.
    pub fn build(configs: &[Config]) -> Self {
        let mut map = BTreeMap::new();
        for config in configs {
            let label = config.variant.label;
            if map.contains_key(label) {
                continue;
            }
            let start = Instant::now();
            let result = build(config.arch, config.variant);
            match &result {
                Ok(_) => println!(
                    "[qemu] built the {label} kernel ({:.1} s)",
                    start.elapsed().as_secs_f64()
                ),
                Err(e) => println!("[qemu] {e}"),
            }
            map.insert(label, result);
        }
        Self(map)
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
