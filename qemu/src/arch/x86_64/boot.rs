//! Boot: the assembly in `boot.s` (PVH entry, long mode, AP trampoline, trap
//! stubs), the per-CPU stacks it switches to, and starting the application
//! processors (APs).
//!
//! # Starting the APs
//!
//! Every AP waits for an INIT then a STARTUP IPI, and starts in real mode at
//! `vector << 12`. The boot CPU copies the trampoline (`boot.s` section 3) to
//! [`AP_TRAMPOLINE_ADDR`], then broadcasts INIT, waits 10 ms, and broadcasts
//! STARTUP twice, 200 µs apart (Intel SDM vol. 3, 9.4.4 "MP Initialization
//! Example"; a second STARTUP to a CPU that already started is ignored).
//! Each AP takes the next CPU index with a `lock xadd` on [`NEXT_CPU`], picks
//! its stack by index, and calls the Rust entry; APs beyond
//! [`MAX_CPUS`] park with interrupts off.
//! How many CPUs there are comes from fw_cfg (`FW_CFG_NB_CPUS`), read by
//! the boot CPU and given to [`start_secondaries`].

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicUsize};

use super::{apic, counter, counter_hz};
use crate::arch::MAX_CPUS;

/// Stack bytes per CPU.
pub const STACK_SIZE: usize = 64 * 1024;

/// Where the AP trampoline runs: below 1 MiB and page aligned, as the
/// STARTUP IPI's vector gives the page number.
const AP_TRAMPOLINE_ADDR: usize = 0x8000;

/// One stack per CPU; CPU `i` starts with its stack pointer at the end of
/// `STACKS[i]`.
#[repr(C, align(16))]
struct Stacks(UnsafeCell<[[u8; STACK_SIZE]; MAX_CPUS]>);

// SAFETY: the Rust code never touches the stacks as data; each CPU uses its
// own one through its stack pointer only.
unsafe impl Sync for Stacks {}

static STACKS: Stacks = Stacks(UnsafeCell::new([[0; STACK_SIZE]; MAX_CPUS]));

/// Nobody is being restarted (see [`RESTARTING`]).
pub const NOBODY: u32 = u32::MAX;

/// The CPU index an INIT-SIPI-SIPI in flight restarts, or [`NOBODY`]:
/// `ap_start64` in `boot.s` takes it (swapping in `NOBODY`) to tell a
/// restart from a first boot. Set by whoever restarts a CPU (hotplug), one
/// restart at a time.
pub static RESTARTING: AtomicU32 = AtomicU32::new(NOBODY);

/// Where a restarted CPU goes instead of `kernel_entry`, with its index in
/// `%eax`: registered by the code that restarts CPUs (hotplug.rs), so that
/// the boot path names nothing above it. Set before [`RESTARTING`].
pub static RESTART_ENTRY: AtomicUsize = AtomicUsize::new(0);

/// The next CPU index for an arriving AP (the boot CPU is 0).
static NEXT_CPU: AtomicU32 = AtomicU32::new(1);

core::arch::global_asm!(
    include_str!("boot.s"),
    stacks = sym STACKS,
    stack_size = const STACK_SIZE,
    max_cpus = const MAX_CPUS,
    next_cpu = sym NEXT_CPU,
    kernel_entry = sym crate::kernel_entry,
    trap_handler = sym super::trap::trap_handler,
    restarting = sym RESTARTING,
    restart_entry = sym RESTART_ENTRY,
    options(att_syntax)
);

unsafe extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
}

/// Starts every other CPU of the `possible` ones (the CPU count from
/// fw_cfg, at most [`MAX_CPUS`]); returns how many CPUs the kernel should
/// see in all (the boot CPU included).
pub fn start_secondaries(possible: usize) -> usize {
    let cpus = possible;
    if cpus == 1 {
        return 1;
    }
    let start = &raw const ap_trampoline_start;
    let end = &raw const ap_trampoline_end;
    let len = end as usize - start as usize;
    assert!(len <= 4096, "the AP trampoline must fit in its page");
    // SAFETY: the trampoline bytes are in the kernel image; the destination
    // page is identity-mapped low memory that nothing else uses (the kernel
    // is linked at 1 MiB and QEMU's boot data lives elsewhere), and no AP
    // runs from it yet.
    unsafe {
        core::ptr::copy_nonoverlapping(start, AP_TRAMPOLINE_ADDR as *mut u8, len);
    }
    let vector = trampoline_vector();
    apic::send_init_all_others();
    delay_us(10_000);
    apic::send_startup_all_others(vector);
    delay_us(200);
    apic::send_startup_all_others(vector);
    cpus
}

/// The STARTUP IPI vector that starts a CPU at the trampoline (its page
/// number); the trampoline stays in place for CPUs restarted after hotplug.
pub fn trampoline_vector() -> u8 {
    (AP_TRAMPOLINE_ADDR >> 12) as u8
}

fn delay_us(us: u64) {
    let end = counter() + counter_hz() / 1_000_000 * us;
    while counter() < end {
        core::hint::spin_loop();
    }
}
