//! "Threads are CPUs": the kernel hooks for host tests (feature
//! `test-hooks`, which pulls in `std`; never enable it in a kernel).
//!
//! Each thread that asks for its CPU id gets the lowest free id and keeps it
//! until it exits, when the id is freed for the next thread. Threads never
//! share an id, so per-CPU data is as exclusive as on real CPUs with
//! preemption off. More live threads than [`MAX_CPUS`] is a panic naming
//! both numbers.
//!
//! # Preemption and migration
//!
//! Each thread is a task with a preemption count
//! ([`preempt_count`]; the hooks count, as a kernel's do). A test can play
//! the scheduler of a preemptible kernel: [`preempt_at_next_point`] arms a
//! preemption that runs at the task's next preemption point while its count
//! is zero (never while it is not: the `Kernel` contract), and
//! [`migrate_to`] moves the task to another CPU id. Tests of RCU use it to
//! show that nothing holds on to a CPU id across a point where the task
//! may have moved. Under loom the preemption hooks do nothing and threads
//! never move.
//!
//! Built with the environment variable `KSYNC_HOST_NOOP_PREEMPT` set, the
//! host kernel keeps the default (empty) preemption hooks instead, as a
//! kernel that never preempts kernel code: the benchmarks' figure for such
//! a kernel. The preemption model above then panics.
//!
//! [`nr_cpus`](crate::kernel::nr_cpus) is [`MAX_CPUS`] (set `KSYNC_MAX_CPUS` for
//! small models).
//!
//! # Tasks
//!
//! Every thread is also a task for the sleeping primitives
//! ([`wait`](crate::wait) and the locks on it): `block` parks the thread
//! (`std::thread::park`, with a timeout for a deadline), `wake` unparks
//! it, the clock is `Instant`'s, and `task_running` is "not parked".
//! Under loom, model threads park and unpark through loom, and the clock
//! is a counter that each reading advances.
//!
//! # Interrupts and lockdep
//!
//! A thread plays an interrupt handler between [`enter_interrupt`] and
//! [`exit_interrupt`]: [`Kernel::in_interrupt`] is true and its
//! "interrupts" are off, as on a CPU taking an interrupt. Reports of
//! [`lockdep`](crate::lockdep) (feature `lockdep`) panic, unless a test
//! asked for them to be recorded ([`record_lockdep_reports`]), so it can
//! read them ([`take_lockdep_reports`]) and go on.

use std::string::{String, ToString};
use std::sync::Mutex;
use std::vec::Vec;

use crate::kernel::{Kernel, LockdepReport, MAX_CPUS, StallReport};

// The one loom switch of the host kernel.
#[cfg(not(ksync_loom))]
#[path = "threads.rs"]
mod backend; // OS threads: a process-wide id table
#[cfg(ksync_loom)]
#[path = "model.rs"]
mod backend; // loom model threads: coroutines on one OS thread

#[cfg(all(feature = "hostile", not(ksync_loom)))]
pub mod hostile;
mod interrupts;
#[cfg(not(ksync_loom))]
#[path = "tasks.rs"]
mod tasks;
#[cfg(ksync_loom)]
use backend as tasks;
#[cfg(not(ksync_loom))]
pub use backend::{migrate_to, preempt_at_next_point, preempt_count, preemption_point};
pub use interrupts::{enter_interrupt, exit_interrupt, irqs_disabled};
#[cfg(not(ksync_loom))]
pub use tasks::{blocks, set_wake_latency};

/// Whether the host kernel's preemption hooks are the empty defaults
/// (built with `KSYNC_HOST_NOOP_PREEMPT`).
const NOOP_PREEMPT: bool = option_env!("KSYNC_HOST_NOOP_PREEMPT").is_some();

/// Whether lockdep reports are recorded (`Some`) or panic (`None`).
static LOCKDEP_REPORTS: Mutex<Option<Vec<String>>> = Mutex::new(None);

fn lockdep_reports() -> std::sync::MutexGuard<'static, Option<Vec<String>>> {
    LOCKDEP_REPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with no point of the host's schedule acting in it (neither an
/// armed preemption nor, with `hostile`, the hostile schedule): for ksync's own debug counts that a real CPU
/// keeps with interrupts masked, where no task can move (the host's
/// `ArchIrq` masking is a global lock the schedule does not see).
#[allow(dead_code)]
pub(crate) fn without_points<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(all(feature = "hostile", not(ksync_loom)))]
    return backend::quietly(|| hostile::paused(f));
    #[cfg(all(not(feature = "hostile"), not(ksync_loom)))]
    return backend::quietly(f);
    #[cfg(ksync_loom)]
    f()
}

/// From now on (`true`), lockdep reports are recorded, process-wide, for
/// [`take_lockdep_reports`]; `false` goes back to panicking (the default)
/// and drops what was recorded.
///
/// ```
/// use ksync::host;
/// use ksync::spinlock::TicketMutex;
///
/// host::record_lockdep_reports(true); // report, don't panic
/// let inode = TicketMutex::new(0);
/// let dentry = TicketMutex::new(0);
/// drop((inode.lock(), dentry.lock())); // inode -> dentry
/// drop((dentry.lock(), inode.lock())); // dentry -> inode: AB-BA
/// let reports = host::take_lockdep_reports();
/// assert_eq!(reports.len(), usize::from(cfg!(feature = "lockdep")));
/// host::record_lockdep_reports(false);
/// ```
pub fn record_lockdep_reports(on: bool) {
    *lockdep_reports() = on.then(Vec::new);
}

/// The lockdep reports recorded since the last call (each as printed),
/// oldest first.
///
/// ```
/// use ksync::{host, lockdep};
///
/// host::record_lockdep_reports(true);
/// let map = lockdep::Map::new();
/// map.release(); // never acquired: a bad unlock
/// for report in host::take_lockdep_reports() {
///     assert!(report.contains("does not hold"), "{report}");
/// }
/// assert!(host::take_lockdep_reports().is_empty()); // taken
/// ```
pub fn take_lockdep_reports() -> Vec<String> {
    lockdep_reports()
        .as_mut()
        .map(core::mem::take)
        .unwrap_or_default()
}

/// The host implementation of [`Kernel`]; `ksync` registers it itself when
/// the `test-hooks` feature is on.
///
/// ```
/// use ksync::host::HostKernel;
/// use ksync::kernel::Kernel;
///
/// // ksync registers it itself; code generic over a kernel can name it.
/// fn this_cpu<K: Kernel>() -> usize { K::cpu_id() }
/// let cpu = std::thread::spawn(this_cpu::<HostKernel>).join().unwrap();
/// assert!(cpu < HostKernel::nr_cpus()); // every thread is a CPU
/// ```
#[derive(Debug)]
pub struct HostKernel;

// SAFETY: every live thread has its own id below MAX_CPUS (== nr_cpus);
// it changes only through `migrate_to` (which refuses ids in use and a
// thread with preemption disabled) and is freed when the thread exits. A
// thread is its own CPU, so no other thread context runs on its CPU.
unsafe impl Kernel for HostKernel {
    #[inline]
    fn cpu_id() -> usize {
        let id = backend::cpu_id();
        // The id was read and the task may move before it uses it.
        #[cfg(all(feature = "hostile", not(ksync_loom)))]
        hostile::point();
        id
    }

    fn nr_cpus() -> usize {
        MAX_CPUS
    }

    #[inline]
    fn preempt_disable() {
        if !NOOP_PREEMPT {
            backend::preempt_disable()
        }
    }

    #[inline]
    fn preempt_enable() {
        if !NOOP_PREEMPT {
            backend::preempt_enable()
        }
    }

    #[inline]
    fn preempt_disable_cpu_id() -> usize {
        // One hook call for both (the two thread-locals are read in this
        // one function), as a kernel with one per-CPU block would.
        if !NOOP_PREEMPT {
            backend::preempt_disable()
        }
        backend::cpu_id()
    }

    #[inline]
    fn irq_save() -> usize {
        interrupts::irq_save()
    }

    #[inline]
    unsafe fn irq_restore(flags: usize) {
        interrupts::irq_restore(flags)
    }

    fn rcu_stall(report: &StallReport) {
        std::eprintln!("{report}");
    }

    #[inline]
    fn in_interrupt() -> bool {
        interrupts::in_interrupt()
    }

    #[inline]
    fn irqs_disabled() -> bool {
        interrupts::irqs_disabled()
    }

    #[inline]
    fn current_task() -> usize {
        tasks::current_task()
    }

    fn block(deadline_ns: Option<u64>) {
        #[cfg(all(feature = "hostile", not(ksync_loom)))]
        hostile::check_switch("Kernel::block");
        // A blocked task's CPU switches to another task or idles: a
        // quiescent state, and idle to RCU until the task runs again
        // (else a grace period would wait for a task that sleeps).
        #[cfg(not(ksync_loom))]
        let switched = (backend::is_cpu() && backend::preempt_count() == 0)
            .then(crate::rcu::kernel_switch_out);
        tasks::block(deadline_ns);
        #[cfg(not(ksync_loom))]
        if let Some(watched) = switched {
            crate::rcu::kernel_switch_in(watched);
        }
    }

    fn wake(task: usize) {
        tasks::wake(task)
    }

    fn clock_ns() -> u64 {
        tasks::clock_ns()
    }

    fn task_running(task: usize) -> bool {
        tasks::task_running(task)
    }

    fn yield_now() {
        #[cfg(all(feature = "hostile", not(ksync_loom)))]
        hostile::check_switch("Kernel::yield_now");
        tasks::yield_now()
    }

    fn lockdep_report(report: &LockdepReport) {
        let text = report.to_string();
        let mut reports = lockdep_reports();
        match reports.as_mut() {
            Some(list) => list.push(text),
            None => {
                drop(reports);
                panic!("{text}");
            }
        }
    }
}

crate::__set_kernel_hooks!(HostKernel);
