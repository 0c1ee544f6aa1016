/*
 * aarch64 boot code, included by boot.rs with global_asm!.
 *
 *   1. The entry points: `_start` (the boot CPU, from QEMU's -kernel loader,
 *      at EL1) and `secondary_entry` (every other CPU, from PSCI CPU_ON with
 *      its index as the context ID in x0). Both set up the CPU's stack,
 *      enable FP/SIMD (the target uses NEON registers) and the exception
 *      vectors, and call the Rust entry with the index. The MMU is still
 *      off; the Rust side turns it on before touching any atomic.
 *   2. The exception vector table: every entry saves the full register
 *      state (general, FP/SIMD, ELR/SPSR) and calls the Rust handler with
 *      the entry's number (0..16) and the frame; IRQs return through `eret`.
 */

/* ---- 1. Entry points ------------------------------------------------------ */

    .section .text.boot, "ax"
    .global _start
_start:
    /* Only the boot CPU arrives here: QEMU's virt board keeps the others
       powered off until PSCI CPU_ON. Zero .bss (QEMU's loader does too,
       but a kernel should not depend on it). */
    adrp x1, __bss_start
    add x1, x1, :lo12:__bss_start
    adrp x2, __bss_end
    add x2, x2, :lo12:__bss_end
1:  cmp x1, x2
    b.hs 2f
    str xzr, [x1], #8
    b 1b
2:  mov x0, #0                      /* CPU index 0 */

    .global secondary_entry
secondary_entry:                    /* x0 = CPU index */
    /* sp = stacks + (index + 1) * stack_size */
    adrp x1, {stacks}
    add x1, x1, :lo12:{stacks}
    ldr x2, ={stack_size}
    madd x1, x0, x2, x1
    add sp, x1, x2
    /* CPACR_EL1.FPEN = 0b11: no trapping of FP/SIMD at EL1. */
    mov x1, #(3 << 20)
    msr cpacr_el1, x1
    adrp x1, exception_vectors
    add x1, x1, :lo12:exception_vectors
    msr vbar_el1, x1
    isb
    bl {kernel_entry}
3:  wfe
    b 3b
    .ltorg

/* ---- 2. Exception vectors ------------------------------------------------- */

/* Frame layout (matches `Frame` in boot.rs), 800 bytes:
     0..248  x0..x30      248 elr    256 spsr    264 fpsr    272 fpcr
     280     padding      288..800   q0..q31 */
.macro VECTOR kind
    .balign 0x80
    sub sp, sp, #800
    stp x0, x1, [sp, #0]
    mov x0, #\kind
    b exception_common
.endm

    .section .text.vectors, "ax"
    .balign 0x800
    .global exception_vectors
exception_vectors:
    VECTOR 0                        /* current EL, SP_EL0: sync */
    VECTOR 1                        /*                     IRQ */
    VECTOR 2                        /*                     FIQ */
    VECTOR 3                        /*                     SError */
    VECTOR 4                        /* current EL, SP_ELx: sync */
    VECTOR 5                        /*                     IRQ */
    VECTOR 6                        /*                     FIQ */
    VECTOR 7                        /*                     SError */
    VECTOR 8                        /* lower EL, AArch64 */
    VECTOR 9
    VECTOR 10
    VECTOR 11
    VECTOR 12                       /* lower EL, AArch32 */
    VECTOR 13
    VECTOR 14
    VECTOR 15

exception_common:                   /* x0 = kind, x0/x1 saved */
    stp x2, x3, [sp, #16]
    stp x4, x5, [sp, #32]
    stp x6, x7, [sp, #48]
    stp x8, x9, [sp, #64]
    stp x10, x11, [sp, #80]
    stp x12, x13, [sp, #96]
    stp x14, x15, [sp, #112]
    stp x16, x17, [sp, #128]
    stp x18, x19, [sp, #144]
    stp x20, x21, [sp, #160]
    stp x22, x23, [sp, #176]
    stp x24, x25, [sp, #192]
    stp x26, x27, [sp, #208]
    stp x28, x29, [sp, #224]
    mrs x1, elr_el1
    stp x30, x1, [sp, #240]
    mrs x1, spsr_el1
    mrs x2, fpsr
    stp x1, x2, [sp, #256]
    mrs x1, fpcr
    str x1, [sp, #272]
    stp q0, q1, [sp, #288]
    stp q2, q3, [sp, #320]
    stp q4, q5, [sp, #352]
    stp q6, q7, [sp, #384]
    stp q8, q9, [sp, #416]
    stp q10, q11, [sp, #448]
    stp q12, q13, [sp, #480]
    stp q14, q15, [sp, #512]
    stp q16, q17, [sp, #544]
    stp q18, q19, [sp, #576]
    stp q20, q21, [sp, #608]
    stp q22, q23, [sp, #640]
    stp q24, q25, [sp, #672]
    stp q26, q27, [sp, #704]
    stp q28, q29, [sp, #736]
    stp q30, q31, [sp, #768]
    mov x1, sp                      /* &mut Frame */
    bl {exception_handler}
    ldp q0, q1, [sp, #288]
    ldp q2, q3, [sp, #320]
    ldp q4, q5, [sp, #352]
    ldp q6, q7, [sp, #384]
    ldp q8, q9, [sp, #416]
    ldp q10, q11, [sp, #448]
    ldp q12, q13, [sp, #480]
    ldp q14, q15, [sp, #512]
    ldp q16, q17, [sp, #544]
    ldp q18, q19, [sp, #576]
    ldp q20, q21, [sp, #608]
    ldp q22, q23, [sp, #640]
    ldp q24, q25, [sp, #672]
    ldp q26, q27, [sp, #704]
    ldp q28, q29, [sp, #736]
    ldp q30, q31, [sp, #768]
    ldr x1, [sp, #272]
    msr fpcr, x1
    ldp x1, x2, [sp, #256]
    msr spsr_el1, x1
    msr fpsr, x2
    ldp x30, x1, [sp, #240]
    msr elr_el1, x1
    ldp x28, x29, [sp, #224]
    ldp x26, x27, [sp, #208]
    ldp x24, x25, [sp, #192]
    ldp x22, x23, [sp, #176]
    ldp x20, x21, [sp, #160]
    ldp x18, x19, [sp, #144]
    ldp x16, x17, [sp, #128]
    ldp x14, x15, [sp, #112]
    ldp x12, x13, [sp, #96]
    ldp x10, x11, [sp, #80]
    ldp x8, x9, [sp, #64]
    ldp x6, x7, [sp, #48]
    ldp x4, x5, [sp, #32]
    ldp x2, x3, [sp, #16]
    ldp x0, x1, [sp, #0]
    add sp, sp, #800
    eret
