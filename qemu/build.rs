//! Passes the linker script of the target architecture to the linker
//! (and the directory of the part the scripts share).

use std::env;
use std::path::PathBuf;

fn main() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = dir.join("src/arch").join(&arch).join("link.ld");
    if !script.exists() {
        panic!(
            "ksync-qemu builds for x86_64, aarch64 and riscv64 only (no {})",
            script.display()
        );
    }
    // The scripts' shared part (`INCLUDE bench_loops.ld`), found through
    // the library search path.
    let shared = dir.join("src/arch");
    println!("cargo:rerun-if-changed={}", script.display());
    println!(
        "cargo:rerun-if-changed={}",
        shared.join("bench_loops.ld").display()
    );
    println!("cargo:rustc-link-arg-bins=-L{}", shared.display());
    println!("cargo:rustc-link-arg-bins=-T{}", script.display());
    println!("cargo:rustc-link-arg-bins=--gc-sections");
}
