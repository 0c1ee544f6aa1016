/*
 * riscv64 boot code, included by boot.rs with global_asm!.
 *
 *   1. The entry points: `_start` (the boot hart, entered by OpenSBI in
 *      S-mode with a0 = hart id, a1 = the device tree) and `secondary_entry`
 *      (every other hart, from SBI HSM hart_start with a0 = hart id and
 *      a1 = its CPU index, the call's `opaque`). Both put the CPU index in
 *      `tp` (where `cpu_index` reads it), set up the CPU's stack, turn the
 *      FPU on (the target's ABI is lp64d: Rust code uses the F/D
 *      registers), point `stvec` at the trap entry and call the Rust entry
 *      with the index.
 *   2. The trap entry (stvec direct mode): saves every register (general,
 *      F/D, fcsr, sepc, sstatus) on the current stack, calls the Rust
 *      handler with the frame, restores (all but `tp`, the hart's CPU
 *      index) and returns with `sret`. This
 *      kernel runs only in S-mode, so the interrupted stack is the kernel
 *      stack and `sscratch` is not needed to find one.
 */

/* Module-level asm does not see the target's features (rustc hands LLVM
   only the base ISA for it): name the ones used here, M for `mul`, F and D
   for the F/D register save. */
    .option arch, +m, +a, +f, +d

/* ---- 1. Entry points ------------------------------------------------------ */

    .section .text.boot, "ax"
    .global _start
_start:
    /* Only the boot hart should arrive here (OpenSBI's lottery picks it;
       it is not always hart 0): the others wait in OpenSBI until
       hart_start sends them to secondary_entry. But QEMU 7.2's OpenSBI
       has been seen sending a hart that hart_start had just started here
       instead (about one boot in 100 at -smp 4 under TCG): its zeroing of
       .bss below wiped the running boot hart's stack (the stacks are in
       .bss), and it booted the kernel a second time. So the first entry
       takes BOOT_ONCE (in .data: never zeroed) and a later one is routed
       to the CPU index the boot hart gave that hart. */
    la t0, {boot_once}
    amoswap.d t1, zero, (t0)
    beqz t1, misrouted
    /* Zero .bss first (QEMU's loader does too, but a kernel should not
       depend on it), then keep the hart id and the device tree. */
    la t0, __bss_start
    la t1, __bss_end
1:  bgeu t0, t1, 2f
    sd zero, 0(t0)
    addi t0, t0, 8
    j 1b
2:  la t0, {boot_hart}
    sd a0, 0(t0)
    la t0, {dtb}
    sd a1, 0(t0)
    li a1, 0                        /* CPU index 0 */

    .global secondary_entry
secondary_entry:                    /* a0 = hart id, a1 = CPU index */
    mv tp, a1
    /* sp = stacks + (index + 1) * stack_size */
    la t0, {stacks}
    li t1, {stack_size}
    addi t2, a1, 1
    mul t2, t2, t1
    add sp, t0, t2
    /* sstatus.FS = Initial: F/D instructions no longer trap. */
    li t0, (1 << 13)
    csrs sstatus, t0
    la t0, trap_entry
    csrw stvec, t0
    mv a0, a1
    call {kernel_entry}
3:  wfi
    j 3b

misrouted:                          /* a0 = hart id: a started hart */
    la t0, {misrouted_hart}
    sd a0, 0(t0)
    /* Its CPU index: the slot of HART_IDS that holds its id (written by
       the boot hart before its hart_start call). Scanned until found: an
       id that never appears leaves the hart here, and the boot CPU then
       reports the CPU missing. */
    la t0, {hart_ids}
4:  li t1, 0
5:  li t2, {max_cpus}
    bgeu t1, t2, 4b
    slli t3, t1, 3
    add t3, t0, t3
    ld t4, 0(t3)
    beq t4, a0, 6f
    addi t1, t1, 1
    j 5b
6:  mv a1, t1
    j secondary_entry

/* ---- 2. Trap entry -------------------------------------------------------- */

/* Frame layout (matches `Frame` in boot.rs), 528 bytes:
     0..248  x1..x31 (x2 = sp before the trap)   248 sepc   256 sstatus
     264..520 f0..f31                            520 fcsr */
    .section .text, "ax"
    .balign 4
    .global trap_entry
trap_entry:
    addi sp, sp, -528
    sd x1, 0(sp)
    sd x3, 16(sp)
    sd x4, 24(sp)
    sd x5, 32(sp)
    sd x6, 40(sp)
    sd x7, 48(sp)
    sd x8, 56(sp)
    sd x9, 64(sp)
    sd x10, 72(sp)
    sd x11, 80(sp)
    sd x12, 88(sp)
    sd x13, 96(sp)
    sd x14, 104(sp)
    sd x15, 112(sp)
    sd x16, 120(sp)
    sd x17, 128(sp)
    sd x18, 136(sp)
    sd x19, 144(sp)
    sd x20, 152(sp)
    sd x21, 160(sp)
    sd x22, 168(sp)
    sd x23, 176(sp)
    sd x24, 184(sp)
    sd x25, 192(sp)
    sd x26, 200(sp)
    sd x27, 208(sp)
    sd x28, 216(sp)
    sd x29, 224(sp)
    sd x30, 232(sp)
    sd x31, 240(sp)
    addi t0, sp, 528
    sd t0, 8(sp)                    /* the interrupted sp */
    csrr t0, sepc
    sd t0, 248(sp)
    csrr t0, sstatus
    sd t0, 256(sp)
    fsd f0, 264(sp)
    fsd f1, 272(sp)
    fsd f2, 280(sp)
    fsd f3, 288(sp)
    fsd f4, 296(sp)
    fsd f5, 304(sp)
    fsd f6, 312(sp)
    fsd f7, 320(sp)
    fsd f8, 328(sp)
    fsd f9, 336(sp)
    fsd f10, 344(sp)
    fsd f11, 352(sp)
    fsd f12, 360(sp)
    fsd f13, 368(sp)
    fsd f14, 376(sp)
    fsd f15, 384(sp)
    fsd f16, 392(sp)
    fsd f17, 400(sp)
    fsd f18, 408(sp)
    fsd f19, 416(sp)
    fsd f20, 424(sp)
    fsd f21, 432(sp)
    fsd f22, 440(sp)
    fsd f23, 448(sp)
    fsd f24, 456(sp)
    fsd f25, 464(sp)
    fsd f26, 472(sp)
    fsd f27, 480(sp)
    fsd f28, 488(sp)
    fsd f29, 496(sp)
    fsd f30, 504(sp)
    fsd f31, 512(sp)
    frcsr t0
    sd t0, 520(sp)
    /* a0 = &mut Frame */
    mv a0, sp
    call {trap_handler}
    ld t0, 520(sp)
    fscsr t0
    fld f0, 264(sp)
    fld f1, 272(sp)
    fld f2, 280(sp)
    fld f3, 288(sp)
    fld f4, 296(sp)
    fld f5, 304(sp)
    fld f6, 312(sp)
    fld f7, 320(sp)
    fld f8, 328(sp)
    fld f9, 336(sp)
    fld f10, 344(sp)
    fld f11, 352(sp)
    fld f12, 360(sp)
    fld f13, 368(sp)
    fld f14, 376(sp)
    fld f15, 384(sp)
    fld f16, 392(sp)
    fld f17, 400(sp)
    fld f18, 408(sp)
    fld f19, 416(sp)
    fld f20, 424(sp)
    fld f21, 432(sp)
    fld f22, 440(sp)
    fld f23, 448(sp)
    fld f24, 456(sp)
    fld f25, 464(sp)
    fld f26, 472(sp)
    fld f27, 480(sp)
    fld f28, 488(sp)
    fld f29, 496(sp)
    fld f30, 504(sp)
    fld f31, 512(sp)
    ld t0, 256(sp)
    csrw sstatus, t0
    ld t0, 248(sp)
    csrw sepc, t0
    ld x1, 0(sp)
    ld x3, 16(sp)
    /* x4 (tp) is not restored: it holds this hart's CPU index, which
       belongs to the hart, not to the interrupted thread; a thread
       switched out inside this trap (crate::sched) may return from it on
       another hart, and must read that hart's index. */
    ld x5, 32(sp)
    ld x6, 40(sp)
    ld x7, 48(sp)
    ld x8, 56(sp)
    ld x9, 64(sp)
    ld x10, 72(sp)
    ld x11, 80(sp)
    ld x12, 88(sp)
    ld x13, 96(sp)
    ld x14, 104(sp)
    ld x15, 112(sp)
    ld x16, 120(sp)
    ld x17, 128(sp)
    ld x18, 136(sp)
    ld x19, 144(sp)
    ld x20, 152(sp)
    ld x21, 160(sp)
    ld x22, 168(sp)
    ld x23, 176(sp)
    ld x24, 184(sp)
    ld x25, 192(sp)
    ld x26, 200(sp)
    ld x27, 208(sp)
    ld x28, 216(sp)
    ld x29, 224(sp)
    ld x30, 232(sp)
    ld x31, 240(sp)
    addi sp, sp, 528
    sret
