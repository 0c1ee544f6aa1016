//! Interrupts and exceptions: one IDT for all CPUs, every vector pointing at
//! its stub in `boot.s`, and the Rust handler those stubs call.
//!
//! The stubs save all general-purpose registers; the target has no SSE
//! (`x86_64-unknown-none` is soft-float), so there is no vector state to
//! save. Every gate is an interrupt gate: `IF` is clear inside handlers.

use ::x86_64::VirtAddr;
use ::x86_64::registers::control::Cr2;
use ::x86_64::structures::idt::InterruptDescriptorTable;
use spin::Once;

use super::apic::{self, ERROR_VECTOR, KICK_VECTOR, PIC_VECTORS, SPURIOUS_VECTOR, TIMER_VECTOR};
use super::cpu_index;
use crate::arch::upcalls;

static IDT: Once<InterruptDescriptorTable> = Once::new();

unsafe extern "C" {
    /// 256 stubs, 16 bytes apart (`boot.s` section 4).
    static trap_stubs: u8;
}

fn stub(vector: usize) -> VirtAddr {
    VirtAddr::new((&raw const trap_stubs) as u64 + 16 * vector as u64)
}

fn build() -> InterruptDescriptorTable {
    let mut idt = InterruptDescriptorTable::new();
    macro_rules! exceptions {
        ($($field:ident = $vector:literal),* $(,)?) => {
            // SAFETY: each stub is an interrupt entry point that ends in
            // `iretq` (or never returns) and matches the vector's error-code
            // convention, which `boot.s` encodes per vector.
            unsafe { $( idt.$field.set_handler_addr(stub($vector)); )* }
        };
    }
    exceptions!(
        divide_error = 0,
        debug = 1,
        non_maskable_interrupt = 2,
        breakpoint = 3,
        overflow = 4,
        bound_range_exceeded = 5,
        invalid_opcode = 6,
        device_not_available = 7,
        double_fault = 8,
        invalid_tss = 10,
        segment_not_present = 11,
        stack_segment_fault = 12,
        general_protection_fault = 13,
        page_fault = 14,
        x87_floating_point = 16,
        alignment_check = 17,
        machine_check = 18,
        simd_floating_point = 19,
        virtualization = 20,
        cp_protection_exception = 21,
        hv_injection_exception = 28,
        vmm_communication_exception = 29,
        security_exception = 30,
    );
    // SAFETY: as above (vector 9 has no public field, only an index).
    unsafe { idt[9].set_handler_addr(stub(9)) };
    for (i, entry) in idt.slice_mut(32..=255).iter_mut().enumerate() {
        // SAFETY: as above, for the external interrupt vectors (no error
        // code).
        unsafe { entry.set_handler_addr(stub(32 + i)) };
    }
    idt
}

/// Loads the IDT on this CPU (building it the first time).
pub fn init_cpu() {
    IDT.call_once(build).load();
}

/// The stack frame the stubs build: saved registers, then the vector and
/// error code, then what the CPU pushed.
#[repr(C)]
pub struct TrapFrame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rbp: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rbx: u64,
    rax: u64,
    vector: u64,
    error: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

/// RFLAGS.IF: interrupts were enabled where the trap came.
const RFLAGS_IF: u64 = 1 << 9;

/// Called by every stub, interrupts off.
pub extern "C" fn trap_handler(frame: &mut TrapFrame) {
    match frame.vector as u8 {
        TIMER_VECTOR => {
            upcalls::timer_tick(frame.rip);
            apic::eoi();
            // Last, after the EOI: the scheduler may switch to another
            // thread from here (this frame stays on this thread's stack).
            upcalls::irq_exit(frame.rflags & RFLAGS_IF != 0);
        }
        // A halting lock wait's kick: waking the CPU was the point.
        KICK_VECTOR => apic::eoi(),
        // Spurious interrupts need no EOI; the PICs are masked, but their
        // spurious IRQ 7 and 15 can still arrive.
        SPURIOUS_VECTOR => {}
        v if v == PIC_VECTORS + 7 || v == PIC_VECTORS + 15 => {}
        ERROR_VECTOR => fault("local APIC error", frame),
        0..32 => fault(EXCEPTIONS[frame.vector as usize], frame),
        _ => fault("unexpected interrupt", frame),
    }
}

fn fault(what: &str, frame: &TrapFrame) -> ! {
    upcalls::fatal(format_args!(
        "KSYNC-FAULT cpu={} vector={} ({what}) error={:#x} rip={:#x} rsp={:#x} rflags={:#x} cr2={:#x}\n  rax={:#x} rbx={:#x} rcx={:#x} rdx={:#x} rsi={:#x} rdi={:#x} rbp={:#x}\n  r8={:#x} r9={:#x} r10={:#x} r11={:#x} r12={:#x} r13={:#x} r14={:#x} r15={:#x} cs={:#x} ss={:#x}",
        cpu_index(),
        frame.vector,
        frame.error,
        frame.rip,
        frame.rsp,
        frame.rflags,
        Cr2::read_raw(),
        frame.rax,
        frame.rbx,
        frame.rcx,
        frame.rdx,
        frame.rsi,
        frame.rdi,
        frame.rbp,
        frame.r8,
        frame.r9,
        frame.r10,
        frame.r11,
        frame.r12,
        frame.r13,
        frame.r14,
        frame.r15,
        frame.cs,
        frame.ss,
    ))
}

const EXCEPTIONS: [&str; 32] = [
    "#DE divide error",
    "#DB debug",
    "NMI",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor segment overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack fault",
    "#GP general protection",
    "#PF page fault",
    "reserved",
    "#MF x87 floating point",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD floating point",
    "#VE virtualization",
    "#CP control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security",
    "reserved",
];
