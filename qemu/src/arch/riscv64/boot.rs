//! Boot: the assembly in `boot.s` (entry points, trap entry), the per-CPU
//! stacks, the trap handler, and starting the other harts with the SBI HSM
//! extension's `hart_start` (`sbi-rt`), one hart id after the other.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use riscv::register::{scause, stval};
use sbi_rt::SbiRet;

use super::{cpu_index, timer};
use crate::arch::{MAX_CPUS, upcalls};

/// Stack bytes per CPU.
pub const STACK_SIZE: usize = 64 * 1024;

/// One stack per CPU; CPU `i` starts with its stack pointer at the end of
/// `STACKS[i]`.
#[repr(C, align(16))]
struct Stacks(UnsafeCell<[[u8; STACK_SIZE]; MAX_CPUS]>);

// SAFETY: the Rust code never touches the stacks as data; each CPU uses its
// own one through its stack pointer only.
unsafe impl Sync for Stacks {}

static STACKS: Stacks = Stacks(UnsafeCell::new([[0; STACK_SIZE]; MAX_CPUS]));

/// The boot hart's id and the device tree's address, as OpenSBI handed
/// them over in a0 and a1. Written by `_start` before any Rust code runs
/// (plain stores, one hart), read-only afterwards.
static BOOT_HART: AtomicUsize = AtomicUsize::new(0);
static DTB: AtomicUsize = AtomicUsize::new(0);

core::arch::global_asm!(
    include_str!("boot.s"),
    boot_hart = sym BOOT_HART,
    dtb = sym DTB,
    stacks = sym STACKS,
    boot_once = sym BOOT_ONCE,
    misrouted_hart = sym MISROUTED_HART,
    hart_ids = sym HART_IDS,
    max_cpus = const MAX_CPUS,
    stack_size = const STACK_SIZE,
    kernel_entry = sym crate::kernel_entry,
    trap_handler = sym trap_handler,
);

unsafe extern "C" {
    /// Where the other harts start, with their hart id in a0 and CPU index
    /// in a1.
    fn secondary_entry();
}

/// 1 until the first hart enters `_start`, which swaps in 0; a later entry
/// (a started hart that OpenSBI sent to the boot entry, see `boot.s`) is
/// routed to `secondary_entry`. Not zero at first, so in `.data`: `_start`
/// zeroes `.bss`.
static BOOT_ONCE: AtomicUsize = AtomicUsize::new(1);

/// The hart id of the last hart routed so, `usize::MAX` if none (in
/// `.data`, as [`BOOT_ONCE`]).
static MISROUTED_HART: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Called by each CPU as it starts: says so if this CPU's hart arrived at
/// the boot entry instead of `secondary_entry`.
pub fn note_misrouted(cpu: usize) {
    // Relaxed: written by this hart itself, in `boot.s`, before it got
    // here; cleared once, so a CPU brought up again later says nothing.
    let Some(hart) = hart_id(cpu) else { return };
    if MISROUTED_HART
        .compare_exchange(hart, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        crate::println!(
            "KSYNC-NOTE cpu={cpu} hart={hart} entered at the boot entry after hart_start (firmware); routed to secondary_entry"
        );
    }
}

/// The device tree OpenSBI passed to the boot hart.
pub fn dtb() -> *const u8 {
    // Relaxed: written by `_start` before the first Rust instruction.
    DTB.load(Ordering::Relaxed) as *const u8
}

/// The hart ids QEMU's `virt` board may use (`-smp` up to 512); harts are
/// numbered 0, 1, 2, ... and `hart_start` refuses the first id past them.
const MAX_HART_ID: usize = 512;

/// SBI's "invalid parameter": no such hart.
const SBI_ERR_INVALID_PARAM: usize = -3isize as usize;

/// Starts the harts other than the boot hart with SBI `hart_start`, in
/// hart-id order, until `possible` CPUs run or SBI says there is no such
/// hart; each gets the next CPU index. Returns how many CPUs the kernel
/// should see in all: the `possible` ones (QEMU's `-smp`, from fw_cfg, at
/// most [`MAX_CPUS`]), so that a hart SBI refused to start counts as
/// missing.
pub fn start_secondaries(possible: usize) -> usize {
    // Relaxed: written by `_start` before the first Rust instruction.
    let me = BOOT_HART.load(Ordering::Relaxed);
    set_hart_id(0, me);
    let mut cpus = 1;
    for hart in 0..MAX_HART_ID {
        if cpus >= possible {
            break;
        }
        if hart == me {
            continue;
        }
        let entry = secondary_entry as *const () as usize;
        // Before it runs: nothing can take it offline earlier.
        set_hart_id(cpus, hart);
        let ret: SbiRet = sbi_rt::hart_start(hart, entry, cpus);
        match ret.error {
            0 => cpus += 1,
            SBI_ERR_INVALID_PARAM => break,
            error => upcalls::fatal(format_args!(
                "KSYNC-FAULT SBI hart_start({hart}) failed: error {}",
                error as isize
            )),
        }
    }
    possible
}

/// The register state `boot.s` saves on every trap.
#[repr(C)]
pub struct Frame {
    /// x1..x31 (`x[i - 1]` is `xi`).
    x: [u64; 31],
    sepc: u64,
    sstatus: u64,
    /// f0..f31 and fcsr: saved and restored by `boot.s` only.
    f: [u64; 32],
    fcsr: u64,
}

/// `scause` of the supervisor timer interrupt (interrupt bit clear here).
const SUPERVISOR_TIMER: usize = 5;
/// `scause` of the supervisor software interrupt: a kick (`kick_others`).
const SUPERVISOR_SOFT: usize = 1;

/// Sends a supervisor software interrupt to every other running hart.
pub fn kick_others() {
    let me = cpu_index();
    let mut mask = 0usize;
    for cpu in 0..MAX_CPUS {
        if let Some(hart) = hart_id(cpu)
            && cpu != me
            && hart < usize::BITS as usize
        {
            mask |= 1 << hart;
        }
    }
    // The hart's earlier stores before the IPI that announces them.
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    // A hart that is stopped (hotplug) or not started refuses nothing
    // that matters here: the kick is only a wake-up.
    let _ = sbi_rt::send_ipi(sbi_rt::HartMask::from_mask_base(mask, 0));
}

/// sstatus.SPIE: interrupts were enabled where the trap came.
const SSTATUS_SPIE: u64 = 1 << 5;

/// Called by `trap_entry` for every trap, interrupts off.
extern "C" fn trap_handler(frame: &mut Frame) {
    let cause = scause::read();
    if cause.is_interrupt() && cause.code() == SUPERVISOR_TIMER {
        timer::handle_irq(frame.sepc);
        // Last: the scheduler may switch to another thread from here
        // (this frame stays on this thread's stack, sepc and sstatus in
        // it).
        upcalls::irq_exit(frame.sstatus & SSTATUS_SPIE != 0);
        return;
    }
    if cause.is_interrupt() && cause.code() == SUPERVISOR_SOFT {
        // A kick: waking the hart was the point.
        // SAFETY: clears this hart's own pending software interrupt.
        unsafe { riscv::register::sip::clear_ssoft() };
        return;
    }
    upcalls::fatal(format_args!(
        "KSYNC-FAULT cpu={} {} {} scause={:#x} stval={:#x} sepc={:#x} sstatus={:#x}\n  ra={:#x} sp={:#x} a0={:#x} a1={:#x} s0={:#x}",
        cpu_index(),
        if cause.is_interrupt() {
            "interrupt"
        } else {
            "exception"
        },
        cause.code(),
        cause.bits(),
        stval::read(),
        frame.sepc,
        frame.sstatus,
        frame.x[0],
        frame.x[1],
        frame.x[9],
        frame.x[10],
        frame.x[7],
    ))
}

/// The hart id of each CPU index, recorded by [`start_secondaries`]
/// (and for the boot CPU by [`set_hart_id`] before it).
static HART_IDS: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(usize::MAX) }; MAX_CPUS];

/// Records that CPU `cpu` is hart `hart` (boot code, before the CPU can be
/// taken offline).
pub fn set_hart_id(cpu: usize, hart: usize) {
    // Relaxed: read by the boot CPU's churn controller, which started the
    // other CPUs (and so wrote these) itself.
    HART_IDS[cpu].store(hart, Ordering::Relaxed);
}

/// The hart id of CPU `cpu`, if it was started.
pub fn hart_id(cpu: usize) -> Option<usize> {
    // Relaxed: see `set_hart_id`; a kick that misses a hart that is just
    // starting wakes nobody who waits.
    let hart = HART_IDS[cpu].load(Ordering::Relaxed);
    (hart != usize::MAX).then_some(hart)
}
