//! The kernel services: what a small SMP kernel needs around ksync, and no
//! more. Architecture-specific pieces live in `crate::arch`, below; the
//! harness and the suites build on these, never the other way round.
//!
//! From the bottom up (each module uses only those before it, and `arch`):
//!
//! * [`time`]: the CPU's free-running counter;
//! * [`console`]: the serial console behind an `IrqTicketMutex`, `println!`;
//!   the panic handler, and [`fatal`] for faults;
//! * [`fw_cfg`]: what QEMU tells the kernel;
//! * [`cpu`]: CPU indices, the CPU count, per-CPU counters and per-CPU data;
//! * [`irq`]: timer interrupt accounting, and the tick handler the boot CPU
//!   sets;
//! * [`hooks`]: ksync's kernel hooks (`set_kernel!`): CPU id, CPU count,
//!   preemption, where RCU stall reports go;
//! * [`rcu`]: the RCU policy: where CPUs report quiescent states (idle
//!   waits, interrupts, halting) and what the tick does for RCU;
//! * [`barrier`]: a spin barrier whose waiters are idle for RCU;
//! * [`hotplug`]: CPU hotplug churn (CPUs going offline and coming back
//!   while a suite runs), over the arch code's CPU off/on.
//! * [`spin`]: how lock waiters behave in this guest (ksync's
//!   oversubscribed mode, the `fifo` switch).

pub mod barrier;
pub mod console;
pub mod cpu;
pub mod fw_cfg;
pub mod hooks;
pub mod hotplug;
pub mod irq;
pub mod rcu;
pub mod spin;
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
