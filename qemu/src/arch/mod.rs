//! The architecture layer: everything that differs between x86_64,
//! aarch64 and riscv64. Each module provides the same items (checked by the
//! build of each target):
//!
//! * `NAME`, `TIMER_HZ`; `Uart` (`fmt::Write`, `unsafe fn steal()`);
//! * bring-up: `init_cpu(cpu)` (every CPU, first), `init_console()` and
//!   `init_platform()` (boot CPU), `init_local_interrupts()` (every CPU),
//!   `start_secondaries(possible)`, `timer_start()`;
//! * `cpu_index()`, `counter()`, `counter_hz()`, `irq_enable()`,
//!   `irq_disable()`, `irq_enabled()`;
//! * a halting lock wait (`kernel::spin`): `halt_until_event()` (called
//!   and returning with interrupts off: sleeps until an interrupt or a
//!   kick that came after the caller's last check; x86_64 `sti; hlt`,
//!   aarch64 `wfe` with IRQs open, riscv64 `wfi`) and `kick_others()`
//!   (wakes every other CPU, ordered after this CPU's stores: x86_64 an
//!   IPI, aarch64 `dsb ish; sev`, riscv64 an SBI IPI);
//! * an idle wait (`sched::relax`): `wait_for_interrupt()` (called and
//!   returning with interrupts off: sleeps until an interrupt is pending,
//!   and takes it; x86_64 `sti; hlt`, aarch64 `wfi`, riscv64 `wfi`);
//! * `fw_cfg_select(key)`, `fw_cfg_read_u8()`; `boot_args(buf)`, the
//!   kernel command line where the runner cannot use fw_cfg files
//!   (riscv64; `None` on the others, defined here);
//! * `exit(success)`, `park()`;
//! * CPU hotplug (`kernel::hotplug` drives it): `HOTPLUG` (whether the
//!   architecture has it), `cpu_off(cpu, on_saved: OnSaved)` (on the CPU, interrupts
//!   off: save what it must keep, call `on_saved(cpu)`, power down or park;
//!   returns once restarted and set up again, timer running, interrupts
//!   still off) and `cpu_restart(cpu) -> bool` (another CPU: start it
//!   again once `on_saved` ran; `false`: not yet, retry). x86_64 parks and
//!   restarts with INIT-SIPI-SIPI, aarch64 uses PSCI `CPU_OFF`/`CPU_ON`,
//!   riscv64 SBI HSM `hart_stop`/`hart_start`. A new architecture without
//!   them sets `HOTPLUG = false` (its `cpu_off` is then never called) and
//!   the kernel runs every suite without churn.
//!   Within an architecture, `hotplug.rs` keeps saving and restoring a CPU
//!   together and may use `boot.rs`; `boot.rs` never names `hotplug` (on
//!   x86_64 the trampoline jumps to a restart entry that the hotplug code
//!   registers at run time). `cargo xtask test` checks it.
//!
//! and, common to all: [`MAX_CPUS`], [`CpuLocal`] for per-CPU hardware
//! handles, and the [`Upcalls`] through which the arch code reaches the
//! layers above it (timer tick, console, fatal errors) without importing
//! them. The only name from above the arch code knows is the entry point,
//! `crate::kernel_entry`, which its boot code jumps to.

// riscv64 keeps no per-CPU hardware handles (its timer and interrupt
// enables are per-hart CSRs): `CpuLocal` goes unused there.
#[cfg_attr(target_arch = "riscv64", allow(dead_code))]
mod cpu_local;
// Shared by the three architectures' hotplug code.
mod hotplug;
pub mod upcalls;

#[cfg_attr(target_arch = "riscv64", allow(unused_imports))]
pub use self::cpu_local::CpuLocal;
pub use self::upcalls::Upcalls;

/// The most CPUs this kernel brings up; any further ones are left parked.
/// (QEMU's aarch64 `virt` board with its default GICv2 stops at 8.)
pub const MAX_CPUS: usize = 8;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64::*;

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64::*;

#[cfg(target_arch = "riscv64")]
mod riscv64;
#[cfg(target_arch = "riscv64")]
pub use self::riscv64::*;

/// The kernel command line, for architectures whose runner passes the plan
/// that way instead of as a fw_cfg file: none on x86_64 and aarch64.
#[cfg(not(target_arch = "riscv64"))]
pub fn boot_args(_buf: &mut [u8]) -> Option<usize> {
    None
}

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
compile_error!("ksync-qemu runs on x86_64, aarch64 and riscv64 only");
