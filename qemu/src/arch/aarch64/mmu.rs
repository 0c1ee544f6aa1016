//! The MMU: an identity map in 1 GiB blocks, device memory for the low
//! gigabyte (GIC, UART, fw_cfg, ...) and normal write-back memory for the
//! RAM gigabyte, turned on by every CPU before it touches an atomic.
//!
//! TCG would run the kernel with the MMU off, but then every data access
//! is Device-nGnRnE: exclusive loads/stores (ksync's LL/SC path) are not
//! guaranteed to work on device memory, and nothing is cached. Real
//! hardware needs this.

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{MAIR_EL1, ReadWriteable, SCTLR_EL1, TCR_EL1, TTBR0_EL1, Writeable};

/// A level-1 translation table (4 KiB granule: one entry per GiB).
#[repr(C, align(4096))]
struct Table([u64; 512]);

// Level-1 block descriptor bits (Arm ARM D8.3).
const BLOCK: u64 = 0b01;
const ATTR_DEVICE: u64 = 0 << 2; // MAIR_EL1 attribute 0
const ATTR_NORMAL: u64 = 1 << 2; // MAIR_EL1 attribute 1
const INNER_SHAREABLE: u64 = 0b11 << 8;
const ACCESSED: u64 = 1 << 10;
const NO_EXECUTE: u64 = (1 << 53) | (1 << 54); // PXN | UXN

/// VA bits covered by TTBR0 (T0SZ = 64 - 32): 4 GiB, a walk that starts at
/// level 1.
const VA_BITS: u64 = 32;

static LEVEL1: Table = {
    let mut table = [0; 512];
    // 0..1 GiB: the virt board's devices.
    table[0] = BLOCK | ATTR_DEVICE | ACCESSED | NO_EXECUTE;
    // 1..2 GiB: RAM (the kernel, its stacks and data).
    table[1] = 0x4000_0000 | BLOCK | ATTR_NORMAL | INNER_SHAREABLE | ACCESSED;
    Table(table)
};

/// Turns the MMU and the caches on for this CPU.
pub fn enable() {
    MAIR_EL1.write(
        MAIR_EL1::Attr0_Device::nonGathering_nonReordering_noEarlyWriteAck
            + MAIR_EL1::Attr1_Normal_Outer::WriteBack_NonTransient_ReadWriteAlloc
            + MAIR_EL1::Attr1_Normal_Inner::WriteBack_NonTransient_ReadWriteAlloc,
    );
    TTBR0_EL1.set_baddr(LEVEL1.0.as_ptr() as u64);
    TCR_EL1.write(
        TCR_EL1::T0SZ.val(64 - VA_BITS)
            + TCR_EL1::TG0::KiB_4
            + TCR_EL1::SH0::Inner
            + TCR_EL1::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
            + TCR_EL1::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
            + TCR_EL1::EPD0::EnableTTBR0Walks
            + TCR_EL1::EPD1::DisableTTBR1Walks
            + TCR_EL1::IPS::Bits_40,
    );
    barrier::isb(barrier::SY);
    // SAFETY: invalidates this CPU's stale EL1 TLB entries before the first
    // walk; no memory is touched.
    unsafe { core::arch::asm!("tlbi vmalle1", "dsb nsh", options(nostack, preserves_flags)) };
    barrier::isb(barrier::SY);
    SCTLR_EL1.modify(SCTLR_EL1::M::Enable + SCTLR_EL1::C::Cacheable + SCTLR_EL1::I::Cacheable);
    barrier::isb(barrier::SY);
}
