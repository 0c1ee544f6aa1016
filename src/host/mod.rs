//! "Threads are CPUs": the kernel hooks for host tests (feature
//! `test-hooks`, which pulls in `std`; never enable it in a kernel).
//!
//! Each thread that asks for its CPU id gets the lowest free id and keeps it
//! until it exits, when the id is freed for the next thread. Threads never
//! share an id, so per-CPU data is as exclusive as on real CPUs with
//! preemption off; preemption hooks do nothing (a thread cannot "migrate").
//! More live threads than [`MAX_CPUS`] is a panic naming both numbers.
//!
//! [`nr_cpus`](crate::kernel::nr_cpus) is [`MAX_CPUS`] (set `KSYNC_MAX_CPUS` for
//! small models).

use crate::kernel::{Kernel, MAX_CPUS, StallReport};

// The one loom switch of the host kernel.
#[cfg(not(loom))]
#[path = "threads.rs"]
mod backend; // OS threads: a process-wide id table
#[cfg(loom)]
#[path = "model.rs"]
mod backend; // loom model threads: coroutines on one OS thread

pub use backend::irqs_disabled;

/// The host implementation of [`Kernel`]; `ksync` registers it itself when
/// the `test-hooks` feature is on.
#[derive(Debug)]
pub struct HostKernel;

// SAFETY: every live thread has its own id below MAX_CPUS (== nr_cpus) and
// keeps it until it exits; a thread is its own CPU, so it never migrates.
unsafe impl Kernel for HostKernel {
    #[inline]
    fn cpu_id() -> usize {
        backend::cpu_id()
    }

    fn nr_cpus() -> usize {
        MAX_CPUS
    }

    #[inline]
    fn irq_save() -> usize {
        backend::irq_save()
    }

    #[inline]
    unsafe fn irq_restore(flags: usize) {
        backend::irq_restore(flags)
    }

    fn rcu_stall(report: &StallReport) {
        std::eprintln!("{report}");
    }
}

crate::set_kernel!(HostKernel);
