//! CPU hotplug: a CPU parks itself with interrupts off (`cli; hlt`) and
//! another restarts it with INIT-SIPI-SIPI aimed at its local APIC.
//!
//! Why a restart and not just leaving the park: a parked CPU with
//! interrupts off can only be woken by INIT, NMI or SMI, so "leaving the
//! park" would mean spinning on a flag instead of halting, and under TCG
//! every `pause` of a spinning vCPU takes QEMU's global lock (README, "What
//! TCG does to the numbers"): three spinning offline CPUs would slow the
//! online ones. A halted vCPU costs the host nothing, and INIT-SIPI-SIPI
//! is how x86 kernels bring a CPU back (Linux's `wakeup_secondary_cpu_via_init`):
//! INIT resets the CPU (registers, local APIC) and the STARTUP IPI starts it
//! in real mode at the trampoline, which also runs the first boot of every
//! AP. So the CPU comes back the way it first came up, with nothing of its
//! old register state.
//!
//! What it must keep (the System V callee-saved registers rbx, rbp,
//! r12-r15 and rsp; the kernel is soft-float, so no vector state) it saves
//! in its [`Context`] before it parks. The trampoline's 64-bit code
//! (`boot.s`, `ap_start64`) tells a restart from a first boot by
//! `boot::RESTARTING`, the index of the CPU being restarted, which the
//! restarter sets before its IPIs (one restart at a time), and jumps to the
//! entry the restarter registered (`boot::RESTART_ENTRY`: `hotplug_resumed`
//! here, so the boot code names nothing of hotplug's); a restarted CPU
//! takes its saved stack pointer, calls [`resume_cpu`] (GS base, IDT,
//! local APIC, timer) and returns from `hotplug_suspend` as from a plain
//! call.

use core::sync::atomic::Ordering;

use ::x86_64::instructions::{hlt, interrupts};

use super::{apic, boot};
use crate::arch::MAX_CPUS;
use crate::arch::hotplug::{Contexts, OnSaved, PowerDown};

/// Whether this architecture can take CPUs offline and back.
pub const HOTPLUG: bool = true;

/// What a CPU keeps across its restart: rbx, rbp, r12-r15, rsp.
#[repr(C)]
pub struct Context([u64; CONTEXT_WORDS]);

const CONTEXT_WORDS: usize = 8;
/// Bytes per [`Context`] (`hotplug_resumed` indexes the array with it).
const CONTEXT_SIZE: usize = CONTEXT_WORDS * 8;

/// The contexts (`hotplug_resumed` reads a restarted CPU's).
static CONTEXTS: Contexts<Context> =
    Contexts::new([const { Context([0; CONTEXT_WORDS]) }; MAX_CPUS]);

core::arch::global_asm!(
    r#"
    .section .text.hotplug, "ax"
    .code64
    /* hotplug_suspend(context: rdi, cpu: rsi, down: rdx, on_saved: rcx):
       saves the callee-saved registers and rsp (pointing at our return
       address) in the context, then tail-calls down(cpu, on_saved), which
       never returns (rsp is as at our entry: the SysV alignment holds).
       A restarted CPU comes back through hotplug_resumed (below), which
       restores them and returns from here. */
    .global hotplug_suspend
hotplug_suspend:
    mov %rbx, 0(%rdi)
    mov %rbp, 8(%rdi)
    mov %r12, 16(%rdi)
    mov %r13, 24(%rdi)
    mov %r14, 32(%rdi)
    mov %r15, 40(%rdi)
    mov %rsp, 48(%rdi)
    mov %rsi, %rdi
    mov %rcx, %rsi
    jmp *%rdx

    /* hotplug_resumed: where the trampoline's ap_start64 (boot.s) sends a
       restarted CPU (registered in boot::RESTART_ENTRY), index in %eax:
       back onto the stack it parked on (its context's rsp points at
       hotplug_suspend's return address), set the CPU up again
       (resume_cpu, with the SysV alignment), then restore the
       callee-saved registers and return from hotplug_suspend. */
    .global hotplug_resumed
hotplug_resumed:
    mov %eax, %edi
    imul ${context_size}, %rdi, %rbx
    lea {contexts}(%rip), %rax
    add %rax, %rbx
    mov 48(%rbx), %rsp
    sub $8, %rsp
    call {resume_cpu}
    mov 8(%rbx), %rbp
    mov 16(%rbx), %r12
    mov 24(%rbx), %r13
    mov 32(%rbx), %r14
    mov 40(%rbx), %r15
    mov 48(%rbx), %rsp
    mov 0(%rbx), %rbx
    ret
"#,
    contexts = sym CONTEXTS,
    context_size = const CONTEXT_SIZE,
    resume_cpu = sym resume_cpu,
    options(att_syntax)
);

unsafe extern "C" {
    fn hotplug_suspend(context: *mut Context, cpu: usize, down: PowerDown, on_saved: OnSaved);
    fn hotplug_resumed();
}

/// Takes this CPU (`cpu`, not the boot CPU) offline, interrupts off: masks
/// its timer, saves its context, calls `on_saved(cpu)` (from then on
/// [`cpu_restart`] may bring it back) and halts with interrupts off.
/// Returns once another CPU restarted it and it has been set up again
/// (GS base, IDT, local APIC, timer running), interrupts still off.
pub fn cpu_off(cpu: usize, on_saved: OnSaved) {
    apic::timer_stop();
    let context = CONTEXTS.slot(cpu);
    // SAFETY: `context` is this CPU's own slot; `hotplug_suspend` saves the
    // callee-saved state there and calls `park`, which never returns; the
    // CPU comes back through `ap_start64` and `hotplug_resumed`
    // (`boot.s`), which restore that state and return here, on the same
    // stack, as from a plain call.
    unsafe { hotplug_suspend(context, cpu, park, on_saved) };
}

extern "C" fn park(cpu: usize, on_saved: OnSaved) -> ! {
    on_saved(cpu);
    loop {
        interrupts::disable();
        hlt();
    }
}

/// From a restarted CPU, on its saved stack (`hotplug_resumed`): sets it
/// up again as `kernel_entry` does at boot.
extern "C" fn resume_cpu(cpu: usize) {
    super::init_cpu(cpu);
    super::init_local_interrupts();
    super::timer_start();
}

/// Another CPU: restarts `cpu` after its [`cpu_off`] called `on_saved`,
/// with INIT, STARTUP, STARTUP to its local APIC. Returns `false` if
/// another restart is still in flight (try again later).
pub fn cpu_restart(cpu: usize) -> bool {
    // The entry before the index: a CPU that finds the index finds the
    // entry (Relaxed: the Release exchange below publishes it).
    boot::RESTART_ENTRY.store(hotplug_resumed as *const () as usize, Ordering::Relaxed);
    // Release pairs with the `xchg` in `ap_start64`: the restarted CPU sees
    // what was written before it was asked back (its context included,
    // which it wrote itself before `on_saved`).
    if boot::RESTARTING
        .compare_exchange(
            boot::NOBODY,
            cpu as u32,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return false;
    }
    apic::restart(cpu, boot::trampoline_vector());
    true
}
