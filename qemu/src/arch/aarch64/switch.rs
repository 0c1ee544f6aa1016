//! The context switch of `crate::sched` (`switch_context`) and the first
//! frame of a new thread (`init_context`).
//!
//! A switch is a function call: the compiler has saved the caller-saved
//! registers already, so only what AAPCS64 makes callee-saved goes on the
//! outgoing thread's stack: x19-x28, the frame pointer x29, the link
//! register x30 (where the thread continues) and the low halves d8-d15 of
//! v8-v15 (the target uses NEON). Then its stack pointer goes into the
//! word the scheduler gives, the incoming thread's is loaded and its
//! registers restored, and `ret` continues it. DAIF is not switched: the
//! scheduler calls this with IRQs masked and each thread sets its own
//! state after the switch. `TPIDR_EL1` (the CPU index) belongs to the CPU
//! and is not touched. The kernel runs on SP_EL1 in thread context and
//! takes its exceptions on the same stack, so an interrupt's frame is on
//! the interrupted thread's stack and a thread may be switched out from
//! inside its timer interrupt.

core::arch::global_asm!(
    r#"
    .section .text.switch, "ax"
    /* switch_context(save: x0, next: x1) */
    .global ksync_switch_context
ksync_switch_context:
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret

    /* A new thread's first `ret` lands here with its entry in x19 and sp
       at its 16-aligned top. It never returns. */
    .global ksync_thread_start
ksync_thread_start:
    mov x29, #0
    blr x19
    brk #0
"#
);

unsafe extern "C" {
    fn ksync_switch_context(save: *mut usize, next: usize);
    fn ksync_thread_start();
}

/// Bytes of a switch frame (see the asm).
const FRAME_BYTES: usize = 160;

/// Saves this thread's callee-saved registers on its stack, stores its
/// stack pointer at `save`, and continues the thread whose stack pointer
/// is `next`. Returns when some CPU switches back to this thread.
///
/// # Safety
/// IRQs are masked; `save` is valid for a write; `next` was stored by a
/// `switch_context` of a thread that is not running, or returned by
/// [`init_context`] for a stack nobody else uses, and is used only once.
pub unsafe fn switch_context(save: *mut usize, next: usize) {
    // SAFETY: forwarded contract; the asm follows the C ABI.
    unsafe { ksync_switch_context(save, next) }
}

/// Builds a new thread's first switch frame at the top of `stack` and
/// returns the stack pointer for [`switch_context`]: the first switch to it
/// calls `entry` on that stack, IRQs still masked.
///
/// # Safety
/// `stack..stack + len` is memory nobody else uses until the thread ends;
/// `len` is at least a few KiB.
pub unsafe fn init_context(stack: *mut u8, len: usize, entry: extern "C" fn() -> !) -> usize {
    let top = (stack as usize + len) & !15;
    let sp = top - FRAME_BYTES;
    let frame = sp as *mut u64;
    for i in 0..FRAME_BYTES / 8 {
        // SAFETY: `sp + 8 * i` lies below `top`, inside the caller's
        // stack, 8-aligned.
        unsafe { frame.add(i).write(0) };
    }
    // SAFETY: as above: word 0 is x19, word 11 is x30.
    unsafe {
        frame.write(entry as *const () as usize as u64);
        frame
            .add(11)
            .write(ksync_thread_start as *const () as usize as u64);
    }
    sp
}
