//! Boot: the assembly in `boot.s` (entry points, exception vectors), the
//! per-CPU stacks, the exception handler, and starting the secondary CPUs
//! with PSCI `CPU_ON` (through `hvc`, the conduit of QEMU's `virt` board
//! without EL2/EL3 firmware), one MPIDR after the other until PSCI refuses.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

use aarch64_cpu::registers::{ESR_EL1, FAR_EL1, MPIDR_EL1, Readable};
use smccc::Hvc;
use smccc::psci::{self, error::Error as PsciError};

use super::{cpu_index, gic};
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

core::arch::global_asm!(
    include_str!("boot.s"),
    stacks = sym STACKS,
    stack_size = const STACK_SIZE,
    kernel_entry = sym crate::kernel_entry,
    exception_handler = sym exception_handler,
);

/// Each CPU index's MPIDR affinity (Aff3..Aff0), for PSCI `CPU_ON`.
static MPIDRS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// The MPIDR affinity of CPU `cpu` (as [`start_secondaries`] found it).
pub fn mpidr(cpu: usize) -> u64 {
    // Relaxed: written before the CPU started, which orders it.
    MPIDRS[cpu].load(Ordering::Relaxed)
}

unsafe extern "C" {
    /// Where secondary CPUs start, with their index in x0.
    fn secondary_entry();
}

/// Starts CPUs 1, 2, ... with PSCI `CPU_ON` until PSCI says there is no
/// such CPU; returns how many CPUs the kernel should see in all: the
/// `possible` ones, the number QEMU was started with (`-smp`, from fw_cfg,
/// at most [`MAX_CPUS`]), so that a CPU PSCI refused to start counts as
/// missing.
pub fn start_secondaries(possible: usize) -> usize {
    let expected = possible;
    let me = MPIDR_EL1.get() & 0xff_00ff_ffff; // Aff3..Aff0
    MPIDRS[0].store(me, Ordering::Relaxed);
    let mut cpus = 1;
    // QEMU's virt numbers CPUs 0, 1, 2, ... in Aff0 (up to 8 with GICv2).
    for mpidr in 0..64u64 {
        if mpidr == me {
            continue;
        }
        if cpus == MAX_CPUS {
            break;
        }
        let entry = secondary_entry as *const () as u64;
        MPIDRS[cpus].store(mpidr, Ordering::Relaxed);
        match psci::cpu_on::<Hvc>(mpidr, entry, cpus as u64) {
            Ok(()) => cpus += 1,
            Err(PsciError::InvalidParameters) => break,
            Err(error) => upcalls::fatal(format_args!(
                "KSYNC-FAULT PSCI CPU_ON({mpidr:#x}) failed: {error}"
            )),
        }
    }
    if cpus != expected {
        upcalls::print_line(format_args!(
            "KSYNC-NOTE PSCI started {cpus} CPUs, fw_cfg says {expected}"
        ));
    }
    expected
}

/// The register state `boot.s` saves on every exception.
#[repr(C)]
pub struct Frame {
    x: [u64; 31],
    elr: u64,
    spsr: u64,
    fpsr: u64,
    fpcr: u64,
    _pad: u64,
    q: [u128; 32],
}

const KINDS: [&str; 16] = [
    "sync, current EL, SP0",
    "IRQ, current EL, SP0",
    "FIQ, current EL, SP0",
    "SError, current EL, SP0",
    "sync, current EL",
    "IRQ, current EL",
    "FIQ, current EL",
    "SError, current EL",
    "sync, lower EL (AArch64)",
    "IRQ, lower EL (AArch64)",
    "FIQ, lower EL (AArch64)",
    "SError, lower EL (AArch64)",
    "sync, lower EL (AArch32)",
    "IRQ, lower EL (AArch32)",
    "FIQ, lower EL (AArch32)",
    "SError, lower EL (AArch32)",
];

/// SPSR_EL1.I: IRQs were masked where the exception came.
const SPSR_I: u64 = 1 << 7;

/// Called by every vector with the vector's number (see `KINDS`).
extern "C" fn exception_handler(kind: u64, frame: &mut Frame) {
    if kind == 5 {
        gic::handle_irq(frame.elr);
        // Last, after the GIC's end of interrupt: the scheduler may switch
        // to another thread from here (this frame stays on this thread's
        // stack, ELR and SPSR in it).
        upcalls::irq_exit(frame.spsr & SPSR_I == 0);
        return;
    }
    let esr = ESR_EL1.get();
    upcalls::fatal(format_args!(
        "KSYNC-FAULT cpu={} exception={kind} ({}) esr={esr:#x} (EC {:#x}) far={:#x} elr={:#x} spsr={:#x}\n  x0={:#x} x1={:#x} x2={:#x} x3={:#x} x29={:#x} x30={:#x}",
        cpu_index(),
        KINDS[kind as usize & 15],
        esr >> 26,
        FAR_EL1.get(),
        frame.elr,
        frame.spsr,
        frame.x[0],
        frame.x[1],
        frame.x[2],
        frame.x[3],
        frame.x[29],
        frame.x[30],
    ))
}
