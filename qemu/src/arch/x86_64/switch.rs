//! The context switch of `crate::sched` (`switch_context`) and the first
//! frame of a new thread (`init_context`).
//!
//! A switch is a function call: the caller-saved registers are already
//! saved by the compiler around the call, so only the SysV callee-saved
//! ones (rbx, rbp, r12-r15) and the return address go on the outgoing
//! thread's stack; its stack pointer goes into the word the scheduler
//! gives. The incoming thread's stack pointer is loaded, its registers
//! popped, and `ret` continues it where it called `switch_context` (or, for
//! a new thread, at `thread_start`). The target is soft-float: there is no
//! vector state to keep. RFLAGS is not switched: the scheduler calls this
//! with interrupts off and each thread sets its own state after the
//! switch. GS (the CPU index) is the CPU's, not the thread's, and is not
//! touched: a thread that moved to another CPU reads the new CPU's index.

core::arch::global_asm!(
    r#"
    .section .text.switch, "ax"
    .code64
    /* switch_context(save: rdi, next: rsi) */
    .global ksync_switch_context
ksync_switch_context:
    push %rbp
    push %rbx
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, (%rdi)
    mov %rsi, %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbx
    pop %rbp
    ret

    /* A new thread's first `ret` lands here, with its entry in r12 and
       rsp 8 below its 16-aligned top: call the entry with the SysV
       alignment (rsp 16-aligned at the call). It never returns. */
    .global ksync_thread_start
ksync_thread_start:
    and $-16, %rsp
    call *%r12
    ud2
"#,
    options(att_syntax)
);

unsafe extern "C" {
    fn ksync_switch_context(save: *mut usize, next: usize);
    fn ksync_thread_start();
}

/// Words of a switch frame: r15, r14, r13, r12, rbx, rbp, return address.
const FRAME_WORDS: usize = 7;

/// Saves this thread's callee-saved registers on its stack, stores its
/// stack pointer at `save`, and continues the thread whose stack pointer
/// is `next`. Returns when some CPU switches back to this thread.
///
/// # Safety
/// Interrupts are off; `save` is valid for a write; `next` was stored by a
/// `switch_context` of a thread that is not running, or returned by
/// [`init_context`] for a stack nobody else uses, and is used only once.
pub unsafe fn switch_context(save: *mut usize, next: usize) {
    // SAFETY: forwarded contract; the asm follows the C ABI.
    unsafe { ksync_switch_context(save, next) }
}

/// Builds a new thread's first switch frame at the top of `stack` and
/// returns the stack pointer for [`switch_context`]: the first switch to it
/// calls `entry` on that stack, interrupts still off.
///
/// # Safety
/// `stack..stack + len` is memory nobody else uses until the thread ends;
/// `len` is at least a few KiB.
pub unsafe fn init_context(stack: *mut u8, len: usize, entry: extern "C" fn() -> !) -> usize {
    let top = (stack as usize + len) & !15;
    let sp = top - 8 * (FRAME_WORDS + 1);
    let frame = sp as *mut u64;
    let words = [
        0,                                               // r15
        0,                                               // r14
        0,                                               // r13
        entry as *const () as usize as u64,              // r12: what thread_start calls
        0,                                               // rbx
        0,                                               // rbp
        ksync_thread_start as *const () as usize as u64, // the first `ret`
        0,                                               // padding to the top
    ];
    for (i, word) in words.into_iter().enumerate() {
        // SAFETY: `sp + 8 * i` for i < 8 lies below `top`, inside the
        // caller's stack, 8-aligned.
        unsafe { frame.add(i).write(word) };
    }
    sp
}
