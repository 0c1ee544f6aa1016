//! aarch64 on QEMU `-M virt`: EL1 entry, MMU on, secondaries by PSCI,
//! the generic timer through the GICv2, PL011, fw_cfg over MMIO, semihosting
//! exit.
//!
//! | what | how | where |
//! |---|---|---|
//! | entry | `_start` at EL1; stack, FP/SIMD, vectors; MMU in Rust | `boot.s`, `mmu.rs` |
//! | other CPUs | PSCI `CPU_ON` via `hvc` (`smccc`) until it refuses | `boot.rs` |
//! | hotplug | PSCI `CPU_OFF` (real power-down), `CPU_ON` to a resume entry | `hotplug.rs` |
//! | CPU index | `TPIDR_EL1` | here |
//! | traps | `VBAR_EL1` table, full save incl. FP/SIMD, one Rust handler | `boot.s`, `boot.rs` |
//! | timer | virtual timer (PPI 27) via GICv2 (`arm-gic`) | `gic.rs` |
//! | console | PL011 at 0x0900_0000 (`arm-pl011-uart`) | here |
//! | exit | semihosting `SYS_EXIT` (`qemu-exit`); needs `-semihosting-config enable=on,target=native` | here |
//!
//! Interrupt masking for ksync's IRQ-saving locks needs nothing from here:
//! ksync saves and restores `DAIF` itself on bare-metal aarch64.

mod boot;
mod gic;
mod hotplug;
mod mmu;
mod switch;

use core::fmt;
use core::ptr::NonNull;

use aarch64_cpu::registers::{CNTFRQ_EL0, CNTVCT_EL0, Readable, TPIDR_EL1, Writeable};
use arm_pl011_uart::{PL011Registers, Uart as Pl011};
use qemu_exit::QEMUExit;
use safe_mmio::UniqueMmioPointer;

pub use boot::start_secondaries;
pub use hotplug::{HOTPLUG, cpu_off, cpu_restart};
pub use switch::{init_context, switch_context};

/// Architecture name on `KSYNC-` lines.
pub const NAME: &str = "aarch64";
/// Timer interrupts per second on each CPU.
pub const TIMER_HZ: u64 = 1000;

const PL011_BASE: usize = 0x0900_0000;
const FW_CFG_BASE: usize = 0x0902_0000;

/// Every CPU, first thing: MMU and caches on, CPU index into `TPIDR_EL1`.
/// (Vectors, stack and FP/SIMD were set up by `boot.s`.)
pub fn init_cpu(cpu: usize) {
    mmu::enable();
    TPIDR_EL1.set(cpu as u64);
}

/// Boot CPU: the console UART, for the console to own.
pub fn init_console() -> Uart {
    // SAFETY: the virt board's PL011 (already set up by QEMU, so no
    // `enable`), mapped as device memory; the console is its only owner.
    unsafe { Uart::steal() }
}

/// Boot CPU, after [`init_console`]: timer period.
pub fn init_platform() {
    gic::init_platform();
}

/// Every CPU, after [`init_platform`]: GIC and timer interrupt, timer off.
pub fn init_local_interrupts() {
    gic::init_local();
}

/// Starts this CPU's timer interrupts (they arrive once interrupts are on).
pub fn timer_start() {
    gic::timer_start();
}

/// This CPU's index, kept in `TPIDR_EL1` since `init_cpu`.
#[inline]
pub fn cpu_index() -> usize {
    TPIDR_EL1.get() as usize
}

/// The virtual counter.
#[inline]
pub fn counter() -> u64 {
    CNTVCT_EL0.get()
}

/// Counter ticks per second.
pub fn counter_hz() -> u64 {
    CNTFRQ_EL0.get()
}

/// Unmasks IRQs (`DAIF.I`).
pub fn irq_enable() {
    // SAFETY: changes only this CPU's IRQ mask. Not `nomem`: a compiler
    // barrier, like the `DAIF` accesses in ksync.
    unsafe { core::arch::asm!("msr daifclr, #2", options(nostack, preserves_flags)) };
}

/// Masks IRQs (`DAIF.I`).
pub fn irq_disable() {
    // SAFETY: as for `irq_enable`.
    unsafe { core::arch::asm!("msr daifset, #2", options(nostack, preserves_flags)) };
}

/// Whether IRQs are unmasked on this CPU (`DAIF.I` clear).
pub fn irq_enabled() -> bool {
    use aarch64_cpu::registers::DAIF;
    !DAIF.is_set(DAIF::I)
}

/// Waits for an event (`wfe`) with IRQs unmasked around it, so a timer
/// tick wakes it too. Called with IRQs masked and returns with them
/// masked. A kick ([`kick_others`], `sev`) sent after the caller's last
/// check sets this CPU's event register, latched: `wfe` then returns at
/// once. (Under TCG `wfe` does not sleep; the caller's loop still returns
/// only when kicked.)
pub fn halt_until_event() {
    // SAFETY: only this CPU's IRQ mask and event register change; the mask
    // is put back as the caller had it. Not `nomem`: handlers change
    // memory while we wait.
    unsafe {
        core::arch::asm!(
            "msr daifclr, #2",
            "wfe",
            "msr daifset, #2",
            options(nostack)
        )
    };
}

/// Sleeps until an interrupt arrives, which is taken before it returns
/// (an idle thread's wait: `sched::relax`). Called with IRQs masked and
/// returns with them masked: `wfi` wakes on a pending interrupt whatever
/// the mask says, so one that came after the caller's last check ends it
/// at once; then the mask opens for an instant to take it. (Unlike `wfe`,
/// TCG gives the vCPU's host thread away on `wfi`.)
pub fn wait_for_interrupt() {
    // SAFETY: only this CPU's IRQ mask changes, and it is put back as the
    // caller had it (masked). Not `nomem`: the handler changes memory.
    unsafe {
        core::arch::asm!(
            "wfi",
            "msr daifclr, #2",
            "isb",
            "msr daifset, #2",
            options(nostack)
        )
    };
}

/// The kick of a halting wait: `dsb ish` (this CPU's earlier stores are
/// visible to the other CPUs first), then `sev` (every CPU's event
/// register).
pub fn kick_others() {
    // SAFETY: a barrier and an event: no memory or register changes.
    unsafe { core::arch::asm!("dsb ish", "sev", options(nostack, preserves_flags)) };
}

/// Selects fw_cfg item `key` (the selector register is big-endian).
pub fn fw_cfg_select(key: u16) {
    // SAFETY: the virt board's fw_cfg selector register, device memory.
    unsafe { core::ptr::write_volatile((FW_CFG_BASE + 8) as *mut u16, key.to_be()) };
}

/// Reads the next byte of the selected fw_cfg item.
pub fn fw_cfg_read_u8() -> u8 {
    // SAFETY: the virt board's fw_cfg data register, device memory; a byte
    // read advances within the item.
    unsafe { core::ptr::read_volatile(FW_CFG_BASE as *const u8) }
}

/// Leaves QEMU with a success or failure status.
pub fn exit(success: bool) -> ! {
    let exit = qemu_exit::AArch64::new();
    if success {
        exit.exit_success()
    } else {
        exit.exit_failure()
    }
}

/// Stops this CPU for good.
pub fn park() -> ! {
    irq_disable();
    loop {
        aarch64_cpu::asm::wfe();
    }
}

/// The console UART.
pub struct Uart(Pl011<'static>);

impl Uart {
    /// A handle on the PL011.
    ///
    /// # Safety
    /// Output through a second handle may interleave with the first's.
    pub unsafe fn steal() -> Self {
        let regs = NonNull::new(PL011_BASE as *mut PL011Registers).expect("non-null");
        // SAFETY: the virt board's PL011, mapped as device memory; the caller
        // accepts the aliasing.
        Self(Pl011::new(unsafe { UniqueMmioPointer::new(regs) }))
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for chunk in s.split_inclusive('\n') {
            self.0.write_str(chunk)?;
        }
        Ok(())
    }
}
