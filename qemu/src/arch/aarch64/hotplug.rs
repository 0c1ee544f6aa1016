//! CPU hotplug: a CPU powers itself down with PSCI `CPU_OFF` and another
//! brings it back with PSCI `CPU_ON` (both through `hvc`, `smccc`).
//!
//! A powered-down core loses its registers; memory, and so its stack, stays.
//! Before `CPU_OFF` the CPU saves what the AAPCS64 makes a callee keep
//! (x19-x30, sp, d8-d15, FPCR) in its [`Context`]; `CPU_ON` starts it at
//! `hotplug_resume` (below) with its index as the context ID, MMU off,
//! caches off. That code takes the saved stack pointer, sets up FP/SIMD and
//! the vectors as `boot.s` does, calls [`resume_cpu`] (MMU, `TPIDR_EL1`,
//! GIC, timer) and then restores the registers and returns from
//! `hotplug_suspend` as if from an ordinary call: Linux's `cpu_suspend`
//! with a power-down state, used for hotplug.
//!
//! The context is read back with the MMU and caches off, so it must be in
//! memory, not only in this core's cache: PSCI `CPU_OFF` cleans the caches
//! of the core it powers down (PSCI 1.1, 5.5.2), and `hotplug_suspend`
//! cleans the context's lines to the point of coherency itself as well.

use aarch64_cpu::registers::{CNTV_CTL_EL0, Writeable};
use smccc::Hvc;
use smccc::psci::{self, error::Error as PsciError};

use super::boot;
use crate::arch::MAX_CPUS;
use crate::arch::hotplug::{Contexts, OnSaved, PowerDown};

/// Whether this architecture can take CPUs offline and back.
pub const HOTPLUG: bool = true;

/// What a CPU keeps across its power-down: x19-x30, sp, d8-d15, FPCR.
#[repr(C, align(64))]
struct Context([u64; CONTEXT_WORDS]);

const CONTEXT_WORDS: usize = 24;
const CONTEXT_SIZE: usize = CONTEXT_WORDS * 8;
// The resume entry finds its slot by index with this stride: no padding.
const _: () = assert!(CONTEXT_SIZE == core::mem::size_of::<Context>());

static CONTEXTS: Contexts<Context> =
    Contexts::new([const { Context([0; CONTEXT_WORDS]) }; MAX_CPUS]);

core::arch::global_asm!(
    r#"
    .section .text.hotplug, "ax"
    /* hotplug_suspend(context: x0, cpu: x1, down: x2, on_saved: x3):
       saves the callee-saved state in the context, cleans it to memory,
       then tail-calls down(cpu, on_saved), which never returns. The CPU
       comes back through hotplug_resume, which returns from here. */
    .global hotplug_suspend
hotplug_suspend:
    stp x19, x20, [x0, #0]
    stp x21, x22, [x0, #16]
    stp x23, x24, [x0, #32]
    stp x25, x26, [x0, #48]
    stp x27, x28, [x0, #64]
    stp x29, x30, [x0, #80]
    mov x9, sp
    str x9, [x0, #96]
    stp d8, d9, [x0, #104]
    stp d10, d11, [x0, #120]
    stp d12, d13, [x0, #136]
    stp d14, d15, [x0, #152]
    mrs x9, fpcr
    str x9, [x0, #168]
    /* Clean the context (three 64-byte lines) to the point of coherency:
       it is read back with the caches off. */
    dc cvac, x0
    add x9, x0, #64
    dc cvac, x9
    add x9, x0, #128
    dc cvac, x9
    dsb sy
    mov x0, x1
    mov x1, x3
    br x2

    /* PSCI CPU_ON entry of a CPU coming back: x0 = its index, MMU off. */
    .global hotplug_resume
hotplug_resume:
    adrp x1, {contexts}
    add x1, x1, :lo12:{contexts}
    mov x2, #{context_size}
    madd x19, x0, x2, x1
    ldr x9, [x19, #96]
    mov sp, x9
    mov x1, #(3 << 20)
    msr cpacr_el1, x1
    adrp x1, exception_vectors
    add x1, x1, :lo12:exception_vectors
    msr vbar_el1, x1
    isb
    bl {resume_cpu}
    mov x0, x19
    ldr x9, [x0, #168]
    msr fpcr, x9
    ldp d8, d9, [x0, #104]
    ldp d10, d11, [x0, #120]
    ldp d12, d13, [x0, #136]
    ldp d14, d15, [x0, #152]
    ldp x19, x20, [x0, #0]
    ldp x21, x22, [x0, #16]
    ldp x23, x24, [x0, #32]
    ldp x25, x26, [x0, #48]
    ldp x27, x28, [x0, #64]
    ldp x29, x30, [x0, #80]
    ret
"#,
    contexts = sym CONTEXTS,
    context_size = const CONTEXT_SIZE,
    resume_cpu = sym resume_cpu,
);

unsafe extern "C" {
    fn hotplug_suspend(context: *mut Context, cpu: usize, down: PowerDown, on_saved: OnSaved);
    fn hotplug_resume();
}

/// Takes this CPU (`cpu`, not the boot CPU) offline, interrupts off: stops
/// its timer, saves its context, calls `on_saved(cpu)` (from then on
/// [`cpu_restart`] may bring it back) and powers it down with PSCI
/// `CPU_OFF`. Returns once another CPU restarted it and it has been set up
/// again (MMU, per-CPU register, GIC, timer running), interrupts still off.
pub fn cpu_off(cpu: usize, on_saved: OnSaved) {
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR);
    let context = CONTEXTS.slot(cpu);
    // SAFETY: `context` is this CPU's own slot; `hotplug_suspend` saves the
    // callee-saved state there and calls `power_down`, which never returns;
    // the CPU comes back through `hotplug_resume`, which restores that
    // state and returns here, on the same stack, as from a plain call.
    unsafe { hotplug_suspend(context, cpu, power_down, on_saved) };
}

extern "C" fn power_down(cpu: usize, on_saved: OnSaved) -> ! {
    on_saved(cpu);
    let error = psci::cpu_off::<Hvc>();
    crate::arch::upcalls::fatal(format_args!(
        "KSYNC-FAULT PSCI CPU_OFF on CPU {cpu} returned: {error:?}"
    ))
}

/// From the CPU PSCI restarted, on its saved stack, MMU off: sets it up
/// again as `kernel_entry` does at boot (the MMU first: no atomics before).
extern "C" fn resume_cpu(cpu: usize) {
    super::init_cpu(cpu);
    super::init_local_interrupts();
    super::timer_start();
}

/// Another CPU: starts `cpu` again after its [`cpu_off`] called
/// `on_saved`. Returns `false` if PSCI says it is still on (it has not
/// reached `CPU_OFF` yet): try again later.
pub fn cpu_restart(cpu: usize) -> bool {
    let entry = hotplug_resume as *const () as u64;
    match psci::cpu_on::<Hvc>(boot::mpidr(cpu), entry, cpu as u64) {
        Ok(()) => true,
        Err(PsciError::AlreadyOn | PsciError::OnPending) => false,
        Err(error) => crate::arch::upcalls::fatal(format_args!(
            "KSYNC-FAULT PSCI CPU_ON of CPU {cpu} failed: {error}"
        )),
    }
}
