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

use std::cell::Cell;

#[cfg(not(loom))]
use std::{sync::Mutex, vec::Vec};

use crate::kernel::{Kernel, MAX_CPUS};

/// The host implementation of [`Kernel`]; `ksync` registers it itself when
/// the `test-hooks` feature is on.
#[derive(Debug)]
pub struct HostKernel;

/// Ids in use (index = id).
#[cfg(not(loom))]
static IN_USE: Mutex<Vec<bool>> = Mutex::new(Vec::new());

// Under loom, ids are never reused within one execution (a model has a
// handful of threads): handing an id from an exiting thread to a new one
// would need a modelled synchronization, or loom lets the new thread read
// the old one's slot stale. The counter is per execution.
#[cfg(loom)]
loom::lazy_static! {
    static ref NEXT_ID: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
}

struct ThreadCpu(Cell<Option<usize>>);

#[cfg(not(loom))]
impl Drop for ThreadCpu {
    fn drop(&mut self) {
        if let Some(id) = self.0.get() {
            // An exiting thread is an offline CPU: it must not hold up
            // grace periods, and the next thread with this id starts
            // offline.
            crate::rcu::offline_cpu(id);
            let _ = CPU_ID.try_with(|c| c.set(usize::MAX));
            let mut used = lock_in_use();
            used[id] = false;
        }
    }
}

// Under loom, model threads are coroutines on one OS thread: use loom's
// thread locals so each model thread is its own CPU.
//
// Outside loom the id sits in a destructor-less thread-local (a plain TLS
// load on the hot path, `usize::MAX` until claimed); the one with the
// destructor that frees the id is touched only when the id is claimed.
#[cfg(not(loom))]
std::thread_local! {
    /// This thread's "interrupts off" flag: what a CPU has. Masking
    /// interrupts on one thread never excludes another.
    static IRQS_OFF: Cell<bool> = const { Cell::new(false) };
    static CPU_ID: Cell<usize> = const { Cell::new(usize::MAX) };
    static THIS_CPU: ThreadCpu = const { ThreadCpu(Cell::new(None)) };
}
#[cfg(loom)]
loom::thread_local! {
    static THIS_CPU: ThreadCpu = ThreadCpu(Cell::new(None));
}

#[cfg(not(loom))]
fn lock_in_use() -> std::sync::MutexGuard<'static, Vec<bool>> {
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(loom)]
fn claim() -> usize {
    let id = NEXT_ID.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
    assert!(
        id < MAX_CPUS,
        "ksync test hooks: more than {MAX_CPUS} loom threads use per-CPU data"
    );
    id
}

#[cfg(not(loom))]
fn claim() -> usize {
    let mut used = lock_in_use();
    if used.is_empty() {
        used.resize(MAX_CPUS, false);
    }
    let Some(id) = used.iter().position(|u| !u) else {
        drop(used);
        panic!(
            "ksync test hooks: more than {MAX_CPUS} threads use per-CPU data at once \
             (MAX_CPUS = {MAX_CPUS}; raise KSYNC_MAX_CPUS)"
        );
    };
    used[id] = true;
    id
}

// SAFETY: every live thread has its own id below MAX_CPUS (== nr_cpus) and
// keeps it until it exits; a thread is its own CPU, so it never migrates.
unsafe impl Kernel for HostKernel {
    #[cfg(not(loom))]
    #[inline]
    fn cpu_id() -> usize {
        let id = CPU_ID.with(Cell::get);
        if id != usize::MAX {
            return id;
        }
        let id = THIS_CPU.with(|cpu| {
            let id = claim();
            cpu.0.set(Some(id));
            id
        });
        CPU_ID.with(|c| c.set(id));
        id
    }

    #[cfg(loom)]
    fn cpu_id() -> usize {
        THIS_CPU.with(|cpu| match cpu.0.get() {
            Some(id) => id,
            None => {
                let id = claim();
                cpu.0.set(Some(id));
                id
            }
        })
    }

    fn nr_cpus() -> usize {
        MAX_CPUS
    }

    #[cfg(not(loom))]
    #[inline]
    fn irq_save() -> usize {
        usize::from(IRQS_OFF.with(|off| off.replace(true)))
    }

    #[cfg(not(loom))]
    #[inline]
    unsafe fn irq_restore(flags: usize) {
        debug_assert!(
            IRQS_OFF.with(Cell::get),
            "ksync test hooks: interrupts restored while not disabled"
        );
        IRQS_OFF.with(|off| off.set(flags != 0));
    }

    fn rcu_stall(report: &crate::rcu::StallReport) {
        std::eprintln!("{report}");
    }
}

/// Whether this thread has "interrupts" disabled (inside an IRQ-saving
/// lock or an [`IrqState`](crate::spinlock::IrqState)): Linux's
/// `irqs_disabled()` for the host hooks.
#[cfg(not(loom))]
pub fn irqs_disabled() -> bool {
    IRQS_OFF.with(Cell::get)
}

crate::set_kernel!(HostKernel);
