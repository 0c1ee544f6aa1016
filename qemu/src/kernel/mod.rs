//! The test-kernel library: what a small SMP kernel needs around ksync, and
//! no more. Architecture-specific pieces live in `crate::arch`.
//!
//! * [`console`]: the serial console behind an `IrqTicketMutex`, `println!`;
//! * [`cpu`]: CPU indices, the CPU count, per-CPU counters and per-CPU data;
//! * [`hooks`]: ksync's kernel hooks (`set_kernel!`) and where this kernel
//!   reports RCU quiescent states;
//! * [`barrier`]: a spin barrier;
//! * [`time`]: the CPU's free-running counter;
//! * [`irq`]: timer interrupt accounting;
//! * [`fw_cfg`], [`args`]: what QEMU tells the kernel;
//! * [`runner`]: runs the suites on every CPU and reports;
//! * the panic handler, and [`fatal`] for faults.

pub mod args;
pub mod barrier;
pub mod console;
pub mod cpu;
pub mod fw_cfg;
pub mod hooks;
pub mod irq;
pub mod runner;
pub mod time;

use core::fmt;

use crate::arch;

/// Reports an unrecoverable error on the console (whatever holds it) and
/// stops the machine with a failure status.
pub fn fatal(args: fmt::Arguments<'_>) -> ! {
    arch::irq_disable();
    console::emergency_print(format_args!(
        "{args}\nKSYNC-DONE status=FAIL reason=fatal\n"
    ));
    arch::exit(false)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    fatal(format_args!("KSYNC-PANIC cpu={} {info}", cpu::current()))
}
