//! The context switch of `crate::sched` (`switch_context`) and the first
//! frame of a new thread (`init_context`).
//!
//! A switch is a function call: the compiler has saved the caller-saved
//! registers already, so only what the lp64d ABI makes callee-saved goes
//! on the outgoing thread's stack: `ra` (where the thread continues),
//! `s0`-`s11` and `fs0`-`fs11`. Then its stack pointer goes into the word
//! the scheduler gives, the incoming thread's is loaded and its registers
//! restored, and `ret` continues it. `sstatus` is not switched: the
//! scheduler calls this with `SIE` clear and each thread sets its own
//! state after the switch. `tp` (the CPU index) belongs to the hart: it is
//! not switched here, and the trap entry does not restore it either
//! (`boot.s`), so a thread that moved to another hart reads that hart's
//! index. The kernel takes its traps on the interrupted stack, so a
//! thread may be switched out from inside its timer interrupt.

core::arch::global_asm!(
    r#"
    .option arch, +d
    .section .text.switch, "ax"
    .balign 4
    /* switch_context(save: a0, next: a1) */
    .global ksync_switch_context
ksync_switch_context:
    addi sp, sp, -208
    sd ra, 0(sp)
    sd s0, 8(sp)
    sd s1, 16(sp)
    sd s2, 24(sp)
    sd s3, 32(sp)
    sd s4, 40(sp)
    sd s5, 48(sp)
    sd s6, 56(sp)
    sd s7, 64(sp)
    sd s8, 72(sp)
    sd s9, 80(sp)
    sd s10, 88(sp)
    sd s11, 96(sp)
    fsd fs0, 104(sp)
    fsd fs1, 112(sp)
    fsd fs2, 120(sp)
    fsd fs3, 128(sp)
    fsd fs4, 136(sp)
    fsd fs5, 144(sp)
    fsd fs6, 152(sp)
    fsd fs7, 160(sp)
    fsd fs8, 168(sp)
    fsd fs9, 176(sp)
    fsd fs10, 184(sp)
    fsd fs11, 192(sp)
    sd sp, 0(a0)
    mv sp, a1
    ld ra, 0(sp)
    ld s0, 8(sp)
    ld s1, 16(sp)
    ld s2, 24(sp)
    ld s3, 32(sp)
    ld s4, 40(sp)
    ld s5, 48(sp)
    ld s6, 56(sp)
    ld s7, 64(sp)
    ld s8, 72(sp)
    ld s9, 80(sp)
    ld s10, 88(sp)
    ld s11, 96(sp)
    fld fs0, 104(sp)
    fld fs1, 112(sp)
    fld fs2, 120(sp)
    fld fs3, 128(sp)
    fld fs4, 136(sp)
    fld fs5, 144(sp)
    fld fs6, 152(sp)
    fld fs7, 160(sp)
    fld fs8, 168(sp)
    fld fs9, 176(sp)
    fld fs10, 184(sp)
    fld fs11, 192(sp)
    addi sp, sp, 208
    ret

    /* A new thread's first `ret` lands here with its entry in s1 and sp
       at its 16-aligned top. It never returns. */
    .global ksync_thread_start
ksync_thread_start:
    li s0, 0
    jalr ra, 0(s1)
    unimp
"#
);

unsafe extern "C" {
    fn ksync_switch_context(save: *mut usize, next: usize);
    fn ksync_thread_start();
}

/// Bytes of a switch frame (see the asm).
const FRAME_BYTES: usize = 208;

/// Saves this thread's callee-saved registers on its stack, stores its
/// stack pointer at `save`, and continues the thread whose stack pointer
/// is `next`. Returns when some hart switches back to this thread.
///
/// # Safety
/// `sstatus.SIE` is clear; `save` is valid for a write; `next` was stored
/// by a `switch_context` of a thread that is not running, or returned by
/// [`init_context`] for a stack nobody else uses, and is used only once.
pub unsafe fn switch_context(save: *mut usize, next: usize) {
    // SAFETY: forwarded contract; the asm follows the C ABI.
    unsafe { ksync_switch_context(save, next) }
}

/// Builds a new thread's first switch frame at the top of `stack` and
/// returns the stack pointer for [`switch_context`]: the first switch to it
/// calls `entry` on that stack, `SIE` still clear.
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
    // SAFETY: as above: word 0 is ra, word 2 is s1.
    unsafe {
        frame.write(ksync_thread_start as *const () as usize as u64);
        frame.add(2).write(entry as *const () as usize as u64);
    }
    sp
}
