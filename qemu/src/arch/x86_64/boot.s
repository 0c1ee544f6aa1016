/*
 * x86_64 boot code (AT&T syntax), included by boot.rs with global_asm!.
 *
 *   1. The PVH ELF note that makes QEMU's `-kernel` load this ELF and enter
 *      it in 32-bit protected mode with paging off (QEMU's multiboot loader
 *      rejects ELF64).
 *   2. The 32-bit entry: zero .bss, load our GDT, turn on paging with the
 *      prebuilt identity map of the first 4 GiB (2 MiB pages, end of file),
 *      switch to long mode, call the Rust entry.
 *   3. The application-processor (AP) trampoline: 16-bit real-mode code that
 *      boot.rs copies below 1 MiB; the INIT-SIPI-SIPI sequence starts every
 *      AP there. It switches to protected mode and joins step 2.
 *   4. One 16-byte stub per interrupt vector, which pushes the vector number
 *      (and a zero where the CPU pushes no error code) and saves the
 *      registers for the Rust trap handler.
 *
 * Operands from Rust, substituted by global_asm! where their names appear
 * in braces: stacks, stack_size, max_cpus, next_cpu, kernel_entry,
 * trap_handler, and for CPUs restarted after hotplug restarting and
 * restart_entry (see boot.rs; the restart path itself is hotplug.rs's).
 */

/* ---- 1. PVH note: XEN_ELFNOTE_PHYS32_ENTRY ------------------------------- */

    .section .note.Xen, "a"
    .p2align 2
    .long 4                         /* n_namesz: "Xen\0" */
    .long 8                         /* n_descsz: a 64-bit address */
    .long 18                        /* n_type: XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .p2align 2
    .quad pvh_start32

/* ---- 2. 32-bit entry and the switch to long mode ------------------------- */

/* Enables PAE paging with boot_pml4 and long mode, then far-jumps to the
   64-bit code segment at `target`. Expects our GDT loaded. */
.macro ENTER_LONG_MODE target
    mov $0x10, %ax                  /* flat data segment */
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax                  /* CR4.PAE */
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx           /* IA32_EFER */
    rdmsr
    or $0x100, %eax                 /* EFER.LME */
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax            /* CR0.PG | CR0.WP | CR0.PE */
    mov %eax, %cr0
    ljmp $0x08, $\target
.endm

    .section .text.boot, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    /* PVH: 32-bit protected mode, paging off, interrupts off, no stack;
       %ebx points to the start info, which this kernel does not need. */
    cli
    cld
    /* Zero .bss. QEMU's loader zero-fills it too, but a kernel should not
       depend on its loader for that. */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb
    lgdt boot_gdt_ptr
    ENTER_LONG_MODE bsp_start64

    /* APs arrive here from the trampoline, in protected mode with our GDT. */
ap_start32:
    ENTER_LONG_MODE ap_start64

    .code64
bsp_start64:
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs
    lea ({stacks} + {stack_size})(%rip), %rsp
    xor %edi, %edi                  /* CPU index 0 */
    call {kernel_entry}
    ud2

ap_start64:
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs
    /* A restarted CPU finds its index in {restarting}; a first boot
       finds -1 there. */
    mov $-1, %eax
    xchg %eax, {restarting}(%rip)
    cmp $-1, %eax
    jne 3f
    /* Take the next CPU index; APs beyond the kernel's capacity park. */
    mov $1, %eax
    lock xadd %eax, {next_cpu}(%rip)
    cmp ${max_cpus}, %eax
    jae 2f
    /* Stack: stacks + (index + 1) * stack_size. */
    mov %eax, %edi
    lea 1(%rdi), %rax
    imul ${stack_size}, %rax, %rax
    lea {stacks}(%rip), %rsp
    add %rax, %rsp
    call {kernel_entry}
2:  cli
    hlt
    jmp 2b

    /* A restarted CPU, index in %eax: on to the entry its restarter
       registered in {restart_entry} (hotplug.rs), index still in %eax. */
3:  jmp *{restart_entry}(%rip)

/* ---- 3. AP trampoline (copied to AP_TRAMPOLINE_ADDR by boot.rs) ---------- */

    .section .text.ap_trampoline, "ax"
    .code16
    .p2align 4
    .global ap_trampoline_start
    .global ap_trampoline_end
ap_trampoline_start:
    /* Real mode, CS:IP = (SIPI vector << 8):0000. Addresses inside the
       trampoline are relative to its start: make DS = CS. */
    cli
    cld
    mov %cs, %ax
    mov %ax, %ds
    lgdtl (ap_trampoline_gdt_ptr - ap_trampoline_start)
    mov %cr0, %eax
    or $1, %eax                     /* CR0.PE */
    mov %eax, %cr0
    ljmpl $0x18, $ap_start32        /* 32-bit code segment, absolute target */
    .p2align 2
ap_trampoline_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt
ap_trampoline_end:

/* ---- 4. Interrupt and exception stubs ----------------------------------- */

    .section .text.traps, "ax"
    .code64
    .p2align 4
    .global trap_stubs
trap_stubs:
    .set vector, 0
    .rept 256
    .p2align 4
    /* The CPU pushes an error code for these exceptions only. */
    .if vector == 8 || (vector >= 10 && vector <= 14) || vector == 17 || vector == 21 || vector == 29 || vector == 30
    .else
    pushq $0
    .endif
    pushq $vector
    jmp trap_common
    .set vector, vector + 1
    .endr

trap_common:
    /* The frame so far: vector, error code, then the CPU's RIP, CS, RFLAGS,
       RSP, SS. The CPU aligned RSP to 16 before pushing (5 words); with
       2 + 15 more words the call below sees the SysV alignment. */
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi                  /* &mut TrapFrame */
    cld
    call {trap_handler}
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    add $16, %rsp                   /* vector and error code */
    iretq

/* ---- GDT and boot page tables ------------------------------------------- */

    .section .data.boot_gdt, "aw"
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF        /* 0x08: 64-bit code, ring 0 */
    .quad 0x00CF92000000FFFF        /* 0x10: flat data */
    .quad 0x00CF9A000000FFFF        /* 0x18: 32-bit code (AP trampoline) */
boot_gdt_end:
    .p2align 3
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .data.boot_page_tables, "aw"
    .p2align 12
boot_pml4:
    .quad boot_pdpt + 0x3           /* present, writable */
    .fill 511, 8, 0
boot_pdpt:
    .quad boot_pd + 0x0000 + 0x3
    .quad boot_pd + 0x1000 + 0x3
    .quad boot_pd + 0x2000 + 0x3
    .quad boot_pd + 0x3000 + 0x3
    .fill 508, 8, 0
boot_pd:
    /* 2048 2 MiB pages: identity map of 0..4 GiB. RAM below 3 GiB is
       write-back (present | writable | PS = 0x83); the 3..4 GiB hole holds
       the local APIC, the I/O APIC and PCI MMIO and is uncached
       (| PWT | PCD = 0x9B). */
    .set address, 0
    .rept 2048
    .if address < 0xC0000000
    .quad address + 0x83
    .else
    .quad address + 0x9B
    .endif
    .set address, address + 0x200000
    .endr
