//! The README's embedding checklist as a kernel that builds: the hooks, a
//! preemption count, the locks to pick and the context-switch hand-over.
//! `cargo xtask test` builds it for `x86_64-unknown-none` and checks that
//! docs/embedding.md shows this file unchanged.

#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use ksync::kernel::{self, Kernel};
use ksync::lock_api; // ksync re-exports the `lock_api` it implements
use ksync::spinlock::{
    HolderCheck, IrqDisabled, IrqTicketMutex, NoGuard, QueuedMutex, SpinLock, TicketMutex,
};

/// This example runs one CPU; a real kernel reads its per-CPU register.
const CPUS: usize = 1;

/// The preemption count (per CPU in a real kernel, saved per task).
static PREEMPT_COUNT: AtomicU32 = AtomicU32::new(0);

struct MyKernel;

// SAFETY: one CPU, id 0, below `nr_cpus`; `nr_cpus` is a constant upper
// bound (possible CPUs, not online ones); while the count is non-zero the
// scheduler neither preempts nor migrates the running task.
unsafe impl Kernel for MyKernel {
    fn cpu_id() -> usize {
        0 // e.g. read from the GS base, TPIDR_EL1 or `tp`
    }
    fn nr_cpus() -> usize {
        CPUS
    }
    fn preempt_disable() {
        // Relaxed: this CPU's own count (a compiler barrier would do).
        PREEMPT_COUNT.fetch_add(1, Ordering::Relaxed);
    }
    fn preempt_enable() {
        // Relaxed: as above. At zero a real kernel checks need_resched.
        PREEMPT_COUNT.fetch_sub(1, Ordering::Relaxed);
    }
    // irq_save / irq_restore: the architecture's instructions by default
    // (x86_64, aarch64, riscv64 bare metal).
}

ksync::set_kernel!(MyKernel);

/// A lock taken in thread context only: preemption off while held.
static INODES: TicketMutex<u32> = TicketMutex::new(0);
/// Heavily contended on many CPUs.
static DENTRIES: QueuedMutex<u32> = QueuedMutex::new(0);
/// Also taken by an interrupt handler: interrupts and preemption off.
static TIMERS: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
/// The scheduler's own run-queue lock: it manages preemption itself, and
/// the task switched in releases it.
static RUNQUEUE: SpinLock<u32, NoGuard> = SpinLock::new(0);
/// A guard policy named in the type, for code generic over it.
static STATS: SpinLock<u64, IrqDisabled> = SpinLock::new(0);

fn add_inode(count: &mut lock_api::MutexGuard<'_, ksync::spinlock::RawTicketLock, u32>) {
    INODES.assert_held(); // xv6's `holding()`, Linux's `lockdep_assert_held`
    **count += 1;
}

/// Switches tasks: the outgoing task takes the run-queue lock, the incoming
/// one releases it (Linux's `finish_task_switch`).
fn schedule() {
    let rq = RUNQUEUE.lock();
    core::mem::forget(rq); // the lock stays held across the switch
    // SAFETY: only lockdep is told; the lock is not touched.
    unsafe { RUNQUEUE.raw() }.lockdep_release();
    // ... switch stacks; the next task runs `finish_switch` ...
    finish_switch();
}

fn finish_switch() {
    // SAFETY: as above.
    unsafe { RUNQUEUE.raw() }.lockdep_acquire();
    // SAFETY: handed over by the previous task on this CPU.
    unsafe { RUNQUEUE.force_unlock() };
}

fn kernel_main() {
    // Oversubscription needs nothing: x86_64 reads CPUID's hypervisor bit,
    // and everywhere a FIFO waiter that sees no hand-off for 4 ms switches
    // the locks to test-and-set. A kernel may ask to hear of it.
    kernel::set_vcpu_stall_hook(|_stall| { /* log it */ });
    add_inode(&mut INODES.lock());
    *DENTRIES.lock() += 1;
    *TIMERS.lock() += 1;
    *STATS.lock() += 1;
    schedule();
    assert_eq!(PREEMPT_COUNT.load(Ordering::Relaxed), 0);
}

#[unsafe(no_mangle)]
extern "C" fn _start() -> ! {
    kernel_main();
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
