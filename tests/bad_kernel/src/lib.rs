//! A host "kernel" whose `cpu_id` a test sets: one thread plays every
//! context in turn.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The id `cpu_id` returns.
pub static CPU: AtomicUsize = AtomicUsize::new(0);

pub struct BogusKernel;

// SAFETY: not sound for real use: the test sets the id by hand, and sets
// it out of range on purpose (the breach ksync must report).
unsafe impl ksync::kernel::Kernel for BogusKernel {
    fn cpu_id() -> usize {
        CPU.load(Relaxed)
    }
    fn nr_cpus() -> usize {
        4
    }
    fn preempt_disable_cpu_id() -> usize {
        Self::preempt_disable();
        CPU.load(Relaxed)
    }
    fn irq_save() -> usize {
        0
    }
    unsafe fn irq_restore(_flags: usize) {}
}

ksync::set_kernel!(BogusKernel);
