//! ksync's single-core Cortex-M test firmware (see README.md).
//!
//! One image per target: `thumbv7em-none-eabihf` for QEMU `-M mps2-an386`
//! (Cortex-M4: 32-bit LDREX/STREX, no 64-bit compare-and-swap) and
//! `thumbv6m-none-eabi` for `-M microbit` (Cortex-M0: no compare-and-swap
//! at all). Thread mode runs each check while SysTick fires about every
//! 100 µs and its handler works on the same object; both sides count what
//! they did and the totals must match exactly. Output is `defmt` over
//! semihosting, decoded and judged by the runner (`cargo xtask`, module
//! `cortex_m`); the exit status is semihosting's (0 pass, 1 fail).
//!
//! The semihosting command line picks the run: no word (or `all`) runs the
//! checks and prints the `defmt::Format` of ksync's public types;
//! `control-spinlock-noexcl` and `control-percpu-unmasked` run a
//! deliberately broken twin of a check, which must fail.

#![no_std]
#![no_main]

mod checks;
mod formats;
mod tick;

use cortex_m_rt::{ExceptionFrame, entry, exception};
use defmt_semihosting as _;

/// ksync's kernel hooks for this firmware: one CPU, no threads.
struct Mcu;

// SAFETY: there is one CPU, so id 0 is the caller's and below `nr_cpus`
// (1, also `KSYNC_MAX_CPUS`, see .cargo/config.toml); there is one thread
// context and nothing to migrate it to, so preemption control has nothing
// to do. Interrupt masking keeps the default: the `critical-section`
// implementation (PRIMASK, cortex-m's `critical-section-single-core`).
unsafe impl ksync::kernel::Kernel for Mcu {
    fn cpu_id() -> usize {
        0
    }

    fn nr_cpus() -> usize {
        1
    }
}

ksync::set_kernel!(Mcu);

/// What the command line asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    All,
    Control(checks::Control),
}

/// The first word after the program name on the semihosting command line
/// (QEMU: `-semihosting-config ...,arg=ksync-mcu,arg=WORD`).
fn requested() -> Result<Run, &'static str> {
    let Ok(args) = semihosting::experimental::env::args::<128>() else {
        return Ok(Run::All);
    };
    let mut words = (&args).filter_map(Result::ok).skip(1);
    match words.next() {
        None | Some("all") => Ok(Run::All),
        Some(word) => checks::Control::from_name(word).map(Run::Control).ok_or(
            "unknown run (expected all, control-spinlock-noexcl or control-percpu-unmasked)",
        ),
    }
}

#[entry]
fn main() -> ! {
    defmt::info!("KSYNC-MCU boot target={=str}", checks::TARGET);
    let run = match requested() {
        Ok(run) => run,
        Err(why) => {
            defmt::error!("KSYNC-MCU error {=str}", why);
            exit(false)
        }
    };
    tick::start();
    let ok = match run {
        Run::All => {
            let formats = formats::print_all();
            let (passed, failed) = checks::run_all();
            defmt::info!("KSYNC-MCU done passed={=u32} failed={=u32}", passed, failed);
            formats && failed == 0
        }
        Run::Control(control) => checks::run_control(control),
    };
    exit(ok)
}

/// Ends the QEMU run through semihosting `SYS_EXIT` (status 0 or 1).
fn exit(ok: bool) -> ! {
    semihosting::process::exit(if ok { 0 } else { 1 })
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    defmt::error!("KSYNC-MCU panic {}", defmt::Display2Format(info));
    exit(false)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!("KSYNC-MCU hardfault pc={=u32:#x}", frame.pc());
    exit(false)
}
