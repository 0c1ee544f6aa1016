//! CPU hotplug: a hart stops itself with SBI HSM `hart_stop` and another
//! brings it back with `hart_start` (the `sbi-rt` calls), as Linux's
//! `sbi_cpu_stop`/`sbi_cpu_start` do.
//!
//! A stopped hart loses its registers; memory, and so its stack, stays.
//! Before `hart_stop` the hart saves what the lp64d ABI makes a callee keep
//! (ra, sp, s0-s11, fs0-fs11, fcsr) in its [`Context`]; `hart_start`
//! starts it at `hotplug_resume` (below) in S-mode with a0 = its hart id,
//! a1 = its CPU index (the call's `opaque`), `satp` = 0 and `sstatus.SIE`
//! clear (SBI 2.0, 9.1). That code puts the index back in `tp`, turns the
//! FPU on and points `stvec` at the trap entry as `boot.s` does, takes the
//! saved stack pointer, calls [`resume_cpu`] (the timer interrupt and the
//! timer) and then restores the registers and returns from
//! `hotplug_suspend` as if from an ordinary call. This kernel runs with the
//! MMU off, so there is no page table to restore.

use super::{boot, timer};
use crate::arch::MAX_CPUS;
use crate::arch::hotplug::{Contexts, OnSaved, PowerDown};

/// Whether this architecture can take CPUs offline and back.
pub const HOTPLUG: bool = true;

/// What a hart keeps across `hart_stop`: ra, sp, s0-s11, fs0-fs11, fcsr.
#[repr(C, align(64))]
struct Context([u64; CONTEXT_WORDS]);

const CONTEXT_WORDS: usize = 27;
/// The stride of [`CONTEXTS`]: the words rounded up to the alignment (the
/// resume entry finds its slot by index).
const CONTEXT_SIZE: usize = core::mem::size_of::<Context>();

static CONTEXTS: Contexts<Context> =
    Contexts::new([const { Context([0; CONTEXT_WORDS]) }; MAX_CPUS]);

core::arch::global_asm!(
    r#"
    .option push
    .option arch, +m, +f, +d
    .section .text.hotplug, "ax"
    .balign 4
    /* hotplug_suspend(context: a0, cpu: a1, down: a2, on_saved: a3):
       saves the callee-saved state in the context, then tail-calls
       down(cpu, on_saved), which never returns. The hart comes back
       through hotplug_resume, which returns from here. */
    .global hotplug_suspend
hotplug_suspend:
    sd ra, 0(a0)
    sd sp, 8(a0)
    sd s0, 16(a0)
    sd s1, 24(a0)
    sd s2, 32(a0)
    sd s3, 40(a0)
    sd s4, 48(a0)
    sd s5, 56(a0)
    sd s6, 64(a0)
    sd s7, 72(a0)
    sd s8, 80(a0)
    sd s9, 88(a0)
    sd s10, 96(a0)
    sd s11, 104(a0)
    fsd fs0, 112(a0)
    fsd fs1, 120(a0)
    fsd fs2, 128(a0)
    fsd fs3, 136(a0)
    fsd fs4, 144(a0)
    fsd fs5, 152(a0)
    fsd fs6, 160(a0)
    fsd fs7, 168(a0)
    fsd fs8, 176(a0)
    fsd fs9, 184(a0)
    fsd fs10, 192(a0)
    fsd fs11, 200(a0)
    frcsr t0
    sd t0, 208(a0)
    mv a0, a1
    mv a1, a3
    jr a2

    /* hotplug_resume: from SBI hart_start, a0 = hart id, a1 = CPU index,
       S-mode, interrupts off, MMU off. */
    .global hotplug_resume
hotplug_resume:
    mv tp, a1
    /* sstatus.FS = Initial, stvec = the trap entry (as boot.s). */
    li t0, (1 << 13)
    csrs sstatus, t0
    la t0, trap_entry
    csrw stvec, t0
    /* s0 = contexts + index * size; the saved sp is still this CPU's stack. */
    la t0, {contexts}
    li t1, {context_size}
    mul t1, t1, a1
    add s0, t0, t1
    ld sp, 8(s0)
    mv a0, a1
    call {resume_cpu}
    mv a0, s0
    ld t0, 208(a0)
    fscsr t0
    fld fs0, 112(a0)
    fld fs1, 120(a0)
    fld fs2, 128(a0)
    fld fs3, 136(a0)
    fld fs4, 144(a0)
    fld fs5, 152(a0)
    fld fs6, 160(a0)
    fld fs7, 168(a0)
    fld fs8, 176(a0)
    fld fs9, 184(a0)
    fld fs10, 192(a0)
    fld fs11, 200(a0)
    ld ra, 0(a0)
    ld sp, 8(a0)
    ld s0, 16(a0)
    ld s1, 24(a0)
    ld s2, 32(a0)
    ld s3, 40(a0)
    ld s4, 48(a0)
    ld s5, 56(a0)
    ld s6, 64(a0)
    ld s7, 72(a0)
    ld s8, 80(a0)
    ld s9, 88(a0)
    ld s10, 96(a0)
    ld s11, 104(a0)
    ret
    .option pop
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
/// [`cpu_restart`] may bring it back) and stops the hart with SBI
/// `hart_stop`. Returns once another CPU restarted it and it has been set
/// up again (`tp`, FPU, trap vector, timer running), interrupts still off.
pub fn cpu_off(cpu: usize, on_saved: OnSaved) {
    timer::stop();
    let context = CONTEXTS.slot(cpu);
    // SAFETY: `context` is this CPU's own slot; `hotplug_suspend` saves the
    // callee-saved state there and calls `power_down`, which never returns;
    // the hart comes back through `hotplug_resume`, which restores that
    // state and returns here, on the same stack, as from a plain call.
    unsafe { hotplug_suspend(context, cpu, power_down, on_saved) };
}

extern "C" fn power_down(cpu: usize, on_saved: OnSaved) -> ! {
    on_saved(cpu);
    let ret = sbi_rt::hart_stop();
    crate::arch::upcalls::fatal(format_args!(
        "KSYNC-FAULT SBI hart_stop on CPU {cpu} returned: error {}",
        ret.error as isize
    ))
}

/// From the hart SBI restarted, on its saved stack: sets it up again as
/// `kernel_entry` does at boot (`tp`, the FPU and `stvec` are done).
extern "C" fn resume_cpu(cpu: usize) {
    super::init_cpu(cpu);
    super::init_local_interrupts();
    super::timer_start();
}

/// SBI errors that mean "this hart has not stopped yet": it is started
/// (`ALREADY_AVAILABLE`; `ALREADY_STARTED` in some versions) or on its way
/// down (OpenSBI's `INVALID_PARAM` for a stop still pending).
const NOT_STOPPED_YET: [isize; 3] = [-6, -7, -3];

/// Another CPU: starts `cpu` again after its [`cpu_off`] called
/// `on_saved`. Returns `false` if SBI says the hart has not stopped yet (it
/// has not reached `hart_stop`): try again later.
pub fn cpu_restart(cpu: usize) -> bool {
    // Recorded before this CPU was first started.
    let Some(hart) = boot::hart_id(cpu) else {
        crate::arch::upcalls::fatal(format_args!(
            "KSYNC-FAULT restart of CPU {cpu}, which was never started"
        ))
    };
    let entry = hotplug_resume as *const () as usize;
    let ret = sbi_rt::hart_start(hart, entry, cpu);
    match ret.error as isize {
        0 => true,
        error if NOT_STOPPED_YET.contains(&error) => false,
        error => crate::arch::upcalls::fatal(format_args!(
            "KSYNC-FAULT SBI hart_start of CPU {cpu} (hart {hart}) failed: error {error}"
        )),
    }
}
