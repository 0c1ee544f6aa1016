//! x86_64 on QEMU `-M q35`: PVH boot, APs by INIT-SIPI-SIPI, the local APIC
//! timer, COM1, fw_cfg on I/O ports, `isa-debug-exit`.
//!
//! | what | how | where |
//! |---|---|---|
//! | entry | PVH ELF note -> 32-bit -> long mode, 4 GiB identity map | `boot.s` |
//! | other CPUs | real-mode trampoline at 0x8000, broadcast INIT/SIPI | `boot.rs` |
//! | hotplug | park with interrupts off, restart by INIT/SIPI/SIPI to one APIC | `hotplug.rs` |
//! | CPU index | GS base -> this CPU's [`CpuBase`], read with `mov %gs:0` | here |
//! | traps | one IDT, 256 stubs, one Rust handler | `trap.rs` |
//! | timer | local APIC periodic timer, calibrated on the PIT | `apic.rs` |
//! | console | 16550 UART at 0x3F8 (`uart_16550`) | here |
//! | exit | `isa-debug-exit` at 0xF4 (`qemu-exit`): status `(v << 1) \| 1` | here |
//!
//! Interrupt masking for ksync's IRQ-saving locks needs nothing from here:
//! ksync uses `pushfq`/`cli`/`sti` itself on bare-metal x86_64.

mod apic;
mod boot;
mod hotplug;
mod switch;
mod trap;

use core::fmt;

use ::x86_64::VirtAddr;
use ::x86_64::instructions::{hlt, interrupts, port::Port};
use ::x86_64::registers::model_specific::GsBase;
use qemu_exit::QEMUExit;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550, Uart16550Tty};

use super::MAX_CPUS;

pub use boot::start_secondaries;
pub use hotplug::{HOTPLUG, cpu_off, cpu_restart};
pub use switch::{init_context, switch_context};

/// Architecture name on `KSYNC-` lines.
pub const NAME: &str = "x86_64";
/// Timer interrupts per second on each CPU.
pub const TIMER_HZ: u64 = 1000;

const COM1: u16 = 0x3F8;
const FW_CFG_SELECTOR: u16 = 0x510;
const FW_CFG_DATA: u16 = 0x511;
const DEBUG_EXIT_PORT: u16 = 0xF4;
/// What `isa-debug-exit` turns a successful exit into: QEMU exits with
/// `(value << 1) | 1`, so 33 for success and 1 for failure (qemu-exit writes
/// 0). A plain shutdown or triple fault exits 0: the runner treats 0 as
/// failure.
pub const EXIT_SUCCESS: u32 = 33;

/// This CPU's index, where its GS base points (Linux keeps its per-CPU
/// offset behind GS the same way).
#[repr(C)]
struct CpuBase {
    index: usize,
}

static CPU_BASES: [CpuBase; MAX_CPUS] = {
    let mut bases = [const { CpuBase { index: 0 } }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        bases[i].index = i;
        i += 1;
    }
    bases
};

/// Every CPU, first thing: points GS at its [`CpuBase`] and loads the IDT.
pub fn init_cpu(cpu: usize) {
    GsBase::write(VirtAddr::from_ptr(&CPU_BASES[cpu]));
    trap::init_cpu();
}

/// Boot CPU: the console UART (COM1), set up for the console to own.
pub fn init_console() -> Uart {
    // SAFETY: COM1 is at its standard ports on q35 and this is its only
    // owner (the console).
    let uart = unsafe { Uart16550Tty::new_port(COM1, Config::default()) };
    Uart(uart.expect("COM1 present (QEMU -serial)"))
}

/// Boot CPU, after [`init_console`]: legacy PICs, clock calibration.
pub fn init_platform() {
    apic::init_platform();
}

/// Every CPU, after [`init_platform`]: local APIC with its timer masked.
pub fn init_local_interrupts() {
    apic::init_local();
}

/// Starts this CPU's timer interrupts (they arrive once interrupts are on).
pub fn timer_start() {
    apic::timer_start();
}

/// This CPU's index (see [`CpuBase`]).
#[inline]
pub fn cpu_index() -> usize {
    let index: usize;
    // SAFETY: GS points at this CPU's `CpuBase` (set in `init_cpu`, before
    // any caller) and its first word is the index. Not `pure`: the
    // scheduler (`crate::sched`) moves threads between CPUs, so two reads
    // in one function may differ and the compiler must not merge them.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[0]", out(reg) index,
            options(nostack, preserves_flags, readonly));
    }
    index
}

/// The TSC.
#[inline]
pub fn counter() -> u64 {
    apic::rdtsc()
}

/// TSC ticks per second (calibrated at boot).
pub fn counter_hz() -> u64 {
    apic::tsc_hz()
}

/// `sti`.
pub fn irq_enable() {
    interrupts::enable();
}

/// `cli`.
pub fn irq_disable() {
    interrupts::disable();
}

/// Whether interrupts are enabled on this CPU (`RFLAGS.IF`).
pub fn irq_enabled() -> bool {
    interrupts::are_enabled()
}

/// Halts this CPU until an interrupt (a timer tick, or a kick's IPI).
/// Called with interrupts off and returns with them off: `sti; hlt` takes
/// an interrupt that became pending while they were off at the `hlt`
/// (`sti` delays interrupts by one instruction), so a kick sent after the
/// caller's last check wakes it. The handlers run in between.
pub fn halt_until_event() {
    // SAFETY: `sti; hlt; cli` only changes this CPU's interrupt flag, and
    // puts it back as the caller had it (off); the IDT handles every
    // vector that can arrive. Not `nomem`: a compiler barrier, since
    // handlers change memory while we sleep.
    unsafe { core::arch::asm!("sti", "hlt", "cli", options(nostack)) };
}

/// Sleeps until an interrupt arrives, which is taken before it returns
/// (an idle thread's wait: `sched::relax`). Called with interrupts off and
/// returns with them off: `sti; hlt; cli`, as [`halt_until_event`].
pub fn wait_for_interrupt() {
    halt_until_event();
}

/// The kick of a halting wait: an IPI ([`apic::KICK_VECTOR`]) to every
/// other CPU, which wakes one halted in [`halt_until_event`]. The ICR
/// write is a store to uncached MMIO, ordered after this CPU's earlier
/// stores (x86 keeps stores in order), so a woken CPU sees them.
pub fn kick_others() {
    apic::send_kick_all_others();
}

/// Selects fw_cfg item `key`.
pub fn fw_cfg_select(key: u16) {
    // SAFETY: QEMU's fw_cfg selector port; selecting an item has no other
    // effect.
    unsafe { Port::<u16>::new(FW_CFG_SELECTOR).write(key) };
}

/// Reads the next byte of the selected fw_cfg item.
pub fn fw_cfg_read_u8() -> u8 {
    // SAFETY: QEMU's fw_cfg data port; reading advances within the item.
    unsafe { Port::<u8>::new(FW_CFG_DATA).read() }
}

/// Leaves QEMU with a success or failure status.
pub fn exit(success: bool) -> ! {
    // SAFETY: the runner starts QEMU with
    // `-device isa-debug-exit,iobase=0xf4,iosize=0x04`.
    let exit = unsafe { qemu_exit::X86::new(DEBUG_EXIT_PORT, EXIT_SUCCESS) };
    if success {
        exit.exit_success()
    } else {
        exit.exit_failure()
    }
}

/// Stops this CPU for good.
pub fn park() -> ! {
    loop {
        interrupts::disable();
        hlt();
    }
}

/// The console UART.
pub struct Uart(Uart16550Tty<PioBackend>);

impl Uart {
    /// A second handle on COM1, for the panic path only.
    ///
    /// # Safety
    /// Output through it may interleave with the console's.
    pub unsafe fn steal() -> Self {
        // SAFETY: COM1's ports are valid; the caller accepts the aliasing.
        let inner = unsafe { Uart16550::new_port(COM1) };
        Self(Uart16550Tty::from_inner(
            inner.expect("COM1 ports are valid"),
        ))
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_str(s)
    }
}
