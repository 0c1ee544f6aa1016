//! riscv64 on QEMU `-M virt -bios default`: S-mode entry from OpenSBI,
//! other harts by SBI HSM, the supervisor timer, NS16550, fw_cfg over MMIO,
//! `sifive_test` exit.
//!
//! | what | how | where |
//! |---|---|---|
//! | entry | `_start` in S-mode (a0 = hart id, a1 = device tree); stack, FPU, `stvec` | `boot.s` |
//! | other CPUs | SBI HSM `hart_start` (`sbi-rt`) per hart id until SBI refuses | `boot.rs` |
//! | CPU index | `tp` (see below) | here |
//! | traps | `stvec` direct mode, full save incl. F/D, one Rust handler | `boot.s`, `boot.rs` |
//! | timer | supervisor timer interrupt, `stimecmp` (Sstc) or SBI `set_timer` | `timer.rs` |
//! | hotplug | SBI HSM `hart_stop`, `hart_start` to a resume entry | `hotplug.rs` |
//! | console | NS16550 at 0x1000_0000 (`uart_16550`, MMIO) | here |
//! | exit | `sifive_test` at 0x10_0000 (`qemu-exit`): 0x5555 pass, `(1 << 16) \| 0x3333` fail | here |
//!
//! **The CPU index lives in `tp`**, set by the boot code before the first
//! Rust instruction. The compiler never allocates `tp` (the psABI's thread
//! pointer; this kernel has no thread-local storage), a trap leaves it as
//! it is, and reading it is a register move, where `sscratch` would be a
//! CSR read (a helper call under TCG, a serialising access on some cores).
//! `sscratch` stays free for what Linux uses it for: finding the kernel
//! stack on a trap from U-mode, which this S-mode-only kernel never takes.
//!
//! Interrupt masking for ksync's IRQ-saving locks needs nothing from here:
//! ksync clears and sets `sstatus.SIE` itself on bare-metal riscv64 (one
//! `csrrci`/`csrsi` on this hart's own CSR, no lock shared between harts).

mod boot;
mod hotplug;
mod switch;
mod timer;

use core::fmt;
use core::num::NonZeroUsize;

use qemu_exit::QEMUExit;
use riscv::register::sstatus;
use uart_16550::backend::MmioBackend;
use uart_16550::{Config, Uart16550, Uart16550Tty};

pub use boot::start_secondaries;
pub use hotplug::{HOTPLUG, cpu_off, cpu_restart};
pub use switch::{init_context, switch_context};
pub use timer::timer_start;

/// Architecture name on `KSYNC-` lines.
pub const NAME: &str = "riscv64";
/// Timer interrupts per second on each CPU.
pub const TIMER_HZ: u64 = 1000;

const UART_BASE: usize = 0x1000_0000;
const FW_CFG_BASE: usize = 0x1010_0000;
const SIFIVE_TEST_BASE: u64 = 0x10_0000;

/// Every CPU, first thing. The boot code has set the stack, the FPU, the
/// trap vector and `tp` (the CPU index) already.
pub fn init_cpu(cpu: usize) {
    debug_assert_eq!(cpu_index(), cpu, "boot.s sets tp to the CPU index");
    boot::note_misrouted(cpu);
}

/// Boot CPU: the console UART, for the console to own.
pub fn init_console() -> Uart {
    // SAFETY: the virt board's NS16550 (one byte per register); the console
    // is its only owner.
    let uart = unsafe { Uart16550Tty::new_mmio_from_address(uart_base(), 1, Config::default()) };
    Uart(uart.expect("NS16550 present (QEMU -serial)"))
}

fn uart_base() -> NonZeroUsize {
    NonZeroUsize::new(UART_BASE).expect("non-zero")
}

/// Boot CPU, after [`init_console`]: the counter frequency and the timer
/// compare mechanism, from the device tree. Nothing tells ksync that the
/// harts are vCPUs (riscv64 has no hypervisor bit to read): its FIFO
/// waiters detect a descheduled hart themselves (`kernel::spin`).
pub fn init_platform() {
    timer::init_platform(boot::dtb());
}

/// Every CPU, after [`init_platform`]: the timer interrupt enabled, the
/// timer off.
pub fn init_local_interrupts() {
    timer::init_local();
}

/// This CPU's index, kept in `tp` since the boot code.
#[inline]
pub fn cpu_index() -> usize {
    let cpu: usize;
    // SAFETY: reads `tp`, which the boot code set to this CPU's index and
    // nothing else writes (the compiler never allocates it).
    unsafe {
        core::arch::asm!("mv {}, tp", out(reg) cpu, options(nomem, nostack, preserves_flags))
    };
    cpu
}

/// The `time` CSR (the board's ACLINT timer, the same on every hart).
#[inline]
pub fn counter() -> u64 {
    riscv::register::time::read64()
}

/// Counter ticks per second.
pub fn counter_hz() -> u64 {
    timer::hz()
}

/// Enables supervisor interrupts on this hart (`sstatus.SIE`).
pub fn irq_enable() {
    // SAFETY: changes only this hart's interrupt enable; the trap handler
    // is installed. A compiler barrier like ksync's own accesses.
    unsafe { sstatus::set_sie() };
}

/// Disables supervisor interrupts on this hart (`sstatus.SIE`).
pub fn irq_disable() {
    // SAFETY: as for `irq_enable`.
    unsafe { sstatus::clear_sie() };
}

/// Whether supervisor interrupts are enabled on this hart (`sstatus.SIE`).
pub fn irq_enabled() -> bool {
    sstatus::read().sie()
}

/// Halts this hart (`wfi`) until an interrupt it has enabled in `sie` is
/// pending: a timer tick, or a kick's supervisor software interrupt. Called
/// with `sstatus.SIE` clear and returns with it clear; `wfi` wakes on a
/// pending enabled interrupt whatever `SIE` says, so a kick sent after the
/// caller's last check (it sets `sip.SSIP`) makes it return at once. Then
/// `SIE` is opened for an instant to take the interrupt (the handler
/// clears `SSIP`, or re-arms the timer).
pub fn halt_until_event() {
    riscv::asm::wfi();
    irq_enable();
    irq_disable();
}

/// Sleeps until an interrupt arrives, which is taken before it returns
/// (an idle thread's wait: `sched::relax`): [`halt_until_event`], whose
/// `wfi` wakes on any pending enabled interrupt. Called with `SIE` clear
/// and returns with it clear.
pub fn wait_for_interrupt() {
    halt_until_event();
}

/// The kick of a halting wait: a supervisor software interrupt (SBI IPI
/// extension, `send_ipi`) to every other running hart, after a `fence rw,
/// rw` so that they see this hart's earlier stores.
pub fn kick_others() {
    boot::kick_others();
}

/// Selects fw_cfg item `key` (the selector register is big-endian).
pub fn fw_cfg_select(key: u16) {
    // SAFETY: the virt board's fw_cfg selector register.
    unsafe { core::ptr::write_volatile((FW_CFG_BASE + 8) as *mut u16, key.to_be()) };
}

/// Reads the next byte of the selected fw_cfg item.
pub fn fw_cfg_read_u8() -> u8 {
    // SAFETY: the virt board's fw_cfg data register; a byte read advances
    // within the item.
    unsafe { core::ptr::read_volatile(FW_CFG_BASE as *const u8) }
}

/// The kernel command line (the device tree's `/chosen/bootargs`, QEMU's
/// `-append`) copied into `buf`: its length, or `None` without one.
///
/// The runner's plan travels this way on riscv64: QEMU 7.2 creates the
/// `virt` board's fw_cfg device only after it has processed the command
/// line, so `-fw_cfg name=opt/ksync/run,...` fails there ("fw_cfg device not
/// available"); the device itself works (the CPU count comes from it).
pub fn boot_args(buf: &mut [u8]) -> Option<usize> {
    // SAFETY: as in `timer::init_platform`: OpenSBI's device tree, intact.
    let fdt = unsafe { fdt::Fdt::from_ptr(boot::dtb()) }.ok()?;
    let args = fdt.chosen().bootargs()?.as_bytes();
    let n = args.len().min(buf.len());
    buf[..n].copy_from_slice(&args[..n]);
    Some(n)
}

/// Leaves QEMU with a success or failure status.
pub fn exit(success: bool) -> ! {
    // SAFETY: the virt board's `sifive_test` device.
    let exit = unsafe { qemu_exit::RISCV64::new(SIFIVE_TEST_BASE) };
    if success {
        exit.exit_success()
    } else {
        exit.exit_failure()
    }
}

/// Stops this CPU for good: timer off, then SBI `hart_stop` (the hart goes
/// back to OpenSBI, and QEMU stops running it), a `wfi` loop if that fails.
pub fn park() -> ! {
    irq_disable();
    timer::stop();
    let _ = sbi_rt::hart_stop();
    loop {
        riscv::asm::wfi();
    }
}

/// The console UART.
pub struct Uart(Uart16550Tty<MmioBackend>);

impl Uart {
    /// A second handle on the UART, for the panic path only.
    ///
    /// # Safety
    /// Output through it may interleave with the console's.
    pub unsafe fn steal() -> Self {
        // SAFETY: the virt board's NS16550; the caller accepts the
        // aliasing. Already initialised by `init_console` (or by OpenSBI,
        // which prints its banner on it).
        let inner = unsafe { Uart16550::new_mmio_from_address(uart_base(), 1) };
        Self(Uart16550Tty::from_inner(
            inner.expect("a valid MMIO address"),
        ))
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_str(s)
    }
}
