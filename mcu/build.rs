//! Picks the memory map for the board the target runs on and puts it where
//! `cortex-m-rt`'s `link.x` looks for `memory.x` (the link search path).
//!
//! * `thumbv7em-none-eabihf` -> QEMU `-M mps2-an386` (AN386 FPGA image,
//!   Cortex-M4): ZBT SSRAM1 (4 MiB at 0x0) holds the image and the vector
//!   table, SSRAM2/3 (4 MiB at 0x2000_0000) is the RAM (QEMU's
//!   `hw/arm/mps2.c`, the AN385/AN386 map).
//! * `thumbv6m-none-eabi` -> QEMU `-M microbit` (nRF51822, Cortex-M0):
//!   256 KiB of flash at 0x0, 16 KiB of RAM at 0x2000_0000.

use std::env;
use std::fs;
use std::path::PathBuf;

const MPS2_AN386: &str = "\
MEMORY
{
  FLASH : ORIGIN = 0x00000000, LENGTH = 4M
  RAM : ORIGIN = 0x20000000, LENGTH = 4M
}
";

const MICROBIT: &str = "\
MEMORY
{
  FLASH : ORIGIN = 0x00000000, LENGTH = 256K
  RAM : ORIGIN = 0x20000000, LENGTH = 16K
}
";

fn main() {
    let target = env::var("TARGET").unwrap_or_default();
    let memory = match target.as_str() {
        "thumbv7em-none-eabihf" => MPS2_AN386,
        "thumbv6m-none-eabi" => MICROBIT,
        other => panic!(
            "ksync-mcu builds for thumbv7em-none-eabihf (mps2-an386) or \
             thumbv6m-none-eabi (microbit), not {other:?}"
        ),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("memory.x"), memory).expect("write memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=build.rs");
}
