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
//! [`RESUMING`], the index of the CPU being restarted, which the restarter
//! sets before its IPIs (one restart at a time); a restarted CPU takes its
//! saved stack pointer, calls [`resume_cpu`] (GS base, IDT, local APIC,
//! timer) and returns from `hotplug_suspend` as from a plain call.

use core::sync::atomic::{AtomicU32, Ordering};

use ::x86_64::instructions::{hlt, interrupts};

use super::apic;
use crate::arch::MAX_CPUS;
use crate::arch::hotplug::{Contexts, OnSaved, PowerDown};

/// Whether this architecture can take CPUs offline and back.
pub const HOTPLUG: bool = true;

/// Nobody is being restarted (see [`RESUMING`]).
const NOBODY: u32 = u32::MAX;

/// The CPU index an INIT-SIPI-SIPI in flight restarts, or [`NOBODY`]:
/// `ap_start64` in `boot.s` takes it (swapping in `NOBODY`) to tell a
/// restart from a first boot.
pub static RESUMING: AtomicU32 = AtomicU32::new(NOBODY);

/// What a CPU keeps across its restart: rbx, rbp, r12-r15, rsp.
#[repr(C)]
pub struct Context([u64; CONTEXT_WORDS]);

const CONTEXT_WORDS: usize = 8;
/// Bytes per [`Context`] (`boot.s` indexes the array with it).
pub const CONTEXT_SIZE: usize = CONTEXT_WORDS * 8;

/// The contexts (`boot.s` reads a restarted CPU's).
pub static CONTEXTS: Contexts<Context> =
    Contexts::new([const { Context([0; CONTEXT_WORDS]) }; MAX_CPUS]);

core::arch::global_asm!(
    r#"
    .section .text.hotplug, "ax"
    .code64
    /* hotplug_suspend(context: rdi, cpu: rsi, down: rdx, on_saved: rcx):
       saves the callee-saved registers and rsp (pointing at our return
       address) in the context, then tail-calls down(cpu, on_saved), which
       never returns (rsp is as at our entry: the SysV alignment holds).
       A restarted CPU comes back through hotplug_resumed in boot.s, which
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
"#,
    options(att_syntax)
);

unsafe extern "C" {
    fn hotplug_suspend(context: *mut Context, cpu: usize, down: PowerDown, on_saved: OnSaved);
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

/// From a restarted CPU, on its saved stack (`boot.s`): sets it up again
/// as `kernel_entry` does at boot.
pub extern "C" fn resume_cpu(cpu: usize) {
    super::init_cpu(cpu);
    super::init_local_interrupts();
    super::timer_start();
}

/// Another CPU: restarts `cpu` after its [`cpu_off`] called `on_saved`,
/// with INIT, STARTUP, STARTUP to its local APIC. Returns `false` if
/// another restart is still in flight (try again later).
pub fn cpu_restart(cpu: usize) -> bool {
    // Release pairs with the `xchg` in `ap_start64`: the restarted CPU sees
    // what was written before it was asked back (its context included,
    // which it wrote itself before `on_saved`).
    if RESUMING
        .compare_exchange(NOBODY, cpu as u32, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    apic::restart(cpu, super::boot::trampoline_vector());
    true
}
