//! What this kernel tells ksync about itself: the [`ksync::kernel::Kernel`]
//! hooks (CPU id, CPU count, preemption) and where RCU stall reports go.
//! When RCU runs its work and where the CPUs report quiescent states is the
//! RCU policy, in `kernel::rcu`.
//!
//! [`QemuKernel`] implements the trait and [`ksync::set_kernel!`] registers
//! it, once, for the whole image:
//!
//! * `cpu_id`: the index each CPU keeps in its per-CPU register (GS base on
//!   x86_64, `TPIDR_EL1` on aarch64): [`cpu::current`];
//! * `nr_cpus`: the *possible* CPUs, fixed by the boot CPU from the
//!   firmware (QEMU's `-smp`, through fw_cfg) before any other CPU starts:
//!   [`cpu::possible`];
//! * `preempt_disable`/`preempt_enable`: the scheduler's preempt count
//!   (`crate::sched`): per CPU, saved and restored per thread at every
//!   switch; the timer preempts a thread only at count 0, and the
//!   `preempt_enable` that brings it to 0 switches if a switch is pending.
//!   A thread moves to another CPU only by its own `sched::migrate_to`,
//!   never between a `preempt_disable` and its `preempt_enable`;
//! * `rcu_stall`: prints the report as a `KSYNC-RCU-STALL` line, then for
//!   each stalled CPU where its latest timer interrupt found it (this
//!   kernel's stand-in for Linux's stack dumps), and keeps a copy
//!   ([`stall_log`]) for the runner and the `rcu-stall` suite;
//! * `in_interrupt`: whether this CPU runs its timer interrupt handler (the
//!   only interrupt the kernel takes), counted by [`irq::timer_tick`];
//! * `lockdep_report` (images built with the `lockdep` feature): prints the
//!   report after a `KSYNC-LOCKDEP` line, counts it ([`lockdep_log`]) and
//!   carries on, so that the runner, not a panic, judges it;
//! * `irqs_disabled`: the CPU's own interrupt flag (`arch::irq_enabled`).
//!   The kernel masks interrupts by itself, not only through ksync: the
//!   scheduler around its run-queue lock, which `wake` takes from thread
//!   context and from the timer handler (timed blocks end there, and
//!   ksync's wake-ups may come from handlers); with the default (`false`)
//!   lockdep took that lock for one taken with interrupts enabled and
//!   reported an interrupt inversion.
//!
//! The scheduler hooks of ksync's sleeping primitives (wait queues,
//! completions, semaphores, the sleeping mutex) are the scheduler's
//! threads (`crate::sched`):
//!
//! * `current_task`: the running thread's slot + 1 (`sched::current`),
//!   the same wherever it migrates; a CPU's boot thread is slot `cpu`, so
//!   outside scheduler mode (one flow per CPU) the token is `cpu + 1`, as
//!   it is before the CPU's `sched::init_cpu`;
//! * `block(deadline)`: a worker thread blocks (`sched::block_until`, the
//!   deadline turned into a counter value that the timer tick watches);
//!   its "wake pending" flag is the scheduler's wake-up count, so a `wake`
//!   since its last block makes it return at once. A boot thread never
//!   blocks (it keeps its CPU's run queue non-empty): it yields, or idles
//!   until the next interrupt when nothing else is runnable
//!   (`sched::relax`), and returns; the caller re-checks. Where sleeping is not allowed
//!   (see `may_sleep`) it only spins once. Either way the switch is an RCU
//!   quiescent state, as Linux's `schedule()` is;
//! * `wake(token)`: `sched::wake` onto the CPU the thread last ran on: from
//!   any CPU, interrupts on or off, in the timer handler; it takes that
//!   CPU's run-queue lock (interrupts off) and never sleeps;
//! * `may_sleep`: a scheduler thread with preemption enabled, interrupts
//!   on, outside the timer handler;
//! * `clock_ns`: the counter ([`time::now`]: TSC, `CNTVCT_EL0`, `time`) in
//!   nanoseconds;
//! * `task_running(token)`: the thread is some CPU's current thread
//!   (`sched::is_running`), for the mutex's optimistic spinners;
//! * `yield_now`: `sched::yield_now` (a quiescent state, as in `block`)
//!   where `may_sleep` holds, for the same spinners.
//!
//! This file and `kernel::rcu` are the worked example of embedding ksync's
//! per-CPU data and RCU in a kernel; README.md ("Embedding ksync in your
//! kernel") walks through them.

use core::fmt;

use core::sync::atomic::{AtomicUsize, Ordering};

use ksync::kernel::LockdepReport;
use ksync::lockdep::ReportKind;
use ksync::rcu::StallReport;
use ksync::spinlock::IrqTicketMutex;

use super::cpu::{self, MAX_CPUS};
use super::{irq, time};
use crate::println;
use crate::{arch, sched};

/// This kernel, as ksync sees it.
pub struct QemuKernel;

// SAFETY: `cpu_id` is the index the boot code gave this CPU and stored in
// its own per-CPU register; indices are distinct, below `MAX_CPUS`, and
// CPUs at or past the possible count are parked before they run any ksync
// code, so every id is below `nr_cpus`. `nr_cpus` is fixed once, before the
// other CPUs start and before any ksync call that reads it, and never
// changes. Preemption: while a thread's preempt count is above 0 the
// scheduler (`crate::sched`) never switches it out (the timer checks the
// count, voluntary switches panic on it) and a thread moves only by its
// own `migrate_to`, so between `preempt_disable` and `preempt_enable` it
// stays on its CPU and no other thread runs there. `cpu_id` reads the
// CPU's own register, which the context switch leaves alone, so it is the
// CPU the caller runs on even after a migration. `rcu_stall` only prints
// and records. The scheduler hooks (`current_task` .. `task_running`) are
// not part of the trait's safety contract.
unsafe impl ksync::kernel::Kernel for QemuKernel {
    #[inline]
    fn cpu_id() -> usize {
        cpu::current()
    }

    #[inline]
    fn nr_cpus() -> usize {
        cpu::possible()
    }

    #[inline]
    fn preempt_disable() {
        sched::preempt_disable();
    }

    #[inline]
    fn preempt_enable() {
        sched::preempt_enable();
    }

    #[inline]
    fn preempt_disable_cpu_id() -> usize {
        sched::preempt_disable_cpu_id()
    }

    /// Called from [`ksync::rcu::check_stall`], here from a timer
    /// interrupt (interrupts off): one `KSYNC-RCU-STALL` line, and a copy
    /// for [`stall_log`].
    fn rcu_stall(report: &StallReport) {
        {
            let mut log = STALL_LOG.lock();
            log.count += 1;
            log.last = Some(*report);
        }
        println!(
            "KSYNC-RCU-STALL cpu={} gp_seq={:#x} age_ms={} stalled={} cpus={} report=\"{report}\"",
            cpu::current(),
            report.gp_seq(),
            report.age(),
            report.nr_stalled(),
            CpuList(report),
        );
        // Linux dumps the stalled CPUs' stacks; this kernel has where
        // their latest timer interrupts found them.
        for stalled in report.cpus() {
            let (pc, ticks) = irq::last_interrupted(stalled);
            println!("KSYNC-RCU-STALL-CPU cpu={stalled} pc={pc:#x} ticks={ticks}");
        }
    }

    #[inline]
    fn in_interrupt() -> bool {
        irq::in_handler()
    }

    #[inline]
    fn irqs_disabled() -> bool {
        !arch::irq_enabled()
    }

    /// The running thread's slot + 1: nonzero, kept across migrations,
    /// unique among live threads (a slot is reused only after its thread
    /// ended). Before `sched::init_cpu` the CPU's own flow, which then
    /// becomes its boot thread, slot `cpu`: the same token.
    #[inline]
    fn current_task() -> usize {
        match sched::current() {
            id if id < sched::NR_THREADS => id + 1,
            _ => cpu::current() + 1,
        }
    }

    /// See the module docs. ksync calls it with preemption and interrupts
    /// on and outside read sections; anything else (`may_sleep` false)
    /// only spins once, which the contract allows (an early return).
    fn block(deadline_ns: Option<u64>) {
        if !Self::may_sleep() {
            core::hint::spin_loop();
            return;
        }
        // A switch away is a quiescent state (Linux's
        // `rcu_note_context_switch`): the caller holds no RCU reference
        // (ksync's `might_sleep` checked), and a CPU whose threads all
        // wait still lets grace periods end.
        ksync::rcu::quiescent_state();
        if sched::current() < MAX_CPUS {
            // A boot thread never blocks (its CPU always has it to run): it
            // gives the CPU away, or idles until the next interrupt.
            sched::relax();
            return;
        }
        sched::block_until(deadline_ns.map(time::ns_to_ticks_ceil));
    }

    /// See the module docs. A token that names no thread, or a boot
    /// thread (which never blocks), is ignored.
    fn wake(task: usize) {
        let Some(id) = task.checked_sub(1) else {
            return;
        };
        if (MAX_CPUS..sched::NR_THREADS).contains(&id) {
            sched::wake(id, sched::last_cpu(id));
        }
    }

    /// A scheduler thread (after `sched::init_cpu`), preemption enabled,
    /// interrupts on, outside the timer handler.
    fn may_sleep() -> bool {
        !irq::in_handler()
            && sched::preempt_count() == 0
            && arch::irq_enabled()
            && sched::current() < sched::NR_THREADS
    }

    #[inline]
    fn clock_ns() -> u64 {
        time::ticks_to_ns(time::now())
    }

    #[inline]
    fn task_running(task: usize) -> bool {
        task.checked_sub(1).is_some_and(sched::is_running)
    }

    /// `sched::yield_now` where this context may switch (`may_sleep`),
    /// reporting the quiescent state as `block` does; one spin otherwise.
    fn yield_now() {
        if !Self::may_sleep() {
            core::hint::spin_loop();
            return;
        }
        ksync::rcu::quiescent_state();
        sched::yield_now();
    }

    /// One `KSYNC-LOCKDEP` line, then the report as lockdep wrote it (one
    /// `println!`, so the lines stay together), counted for
    /// [`lockdep_log`]. Returns: lockdep's tables stay consistent.
    fn lockdep_report(report: &LockdepReport) {
        // Relaxed: statistics, read after the runner's barriers.
        LOCKDEP_REPORTS.fetch_add(1, Ordering::Relaxed);
        if report.kind() == ReportKind::Cycle {
            LOCKDEP_CYCLES.fetch_add(1, Ordering::Relaxed);
        }
        println!(
            "KSYNC-LOCKDEP kind={:?} cpu={}\n{report}",
            report.kind(),
            report.cpu()
        );
    }
}

static LOCKDEP_REPORTS: AtomicUsize = AtomicUsize::new(0);
static LOCKDEP_CYCLES: AtomicUsize = AtomicUsize::new(0);

/// The lockdep reports received since boot: `(all, cycles)`.
pub fn lockdep_log() -> (usize, usize) {
    // Relaxed: see `lockdep_report`.
    (
        LOCKDEP_REPORTS.load(Ordering::Relaxed),
        LOCKDEP_CYCLES.load(Ordering::Relaxed),
    )
}

ksync::set_kernel!(QemuKernel);

// ksync sizes its per-CPU data at build time (`KSYNC_MAX_CPUS`, set in
// `qemu/.cargo/config.toml`): every CPU this kernel can run needs a slot.
const _: () = assert!(MAX_CPUS <= ksync::kernel::MAX_CPUS);

/// What [`QemuKernel`]'s `rcu_stall` received.
#[derive(Clone, Copy)]
pub struct StallLog {
    /// Reports since boot.
    pub count: usize,
    /// The latest one.
    pub last: Option<StallReport>,
}

static STALL_LOG: IrqTicketMutex<StallLog> = IrqTicketMutex::new(StallLog {
    count: 0,
    last: None,
});

/// The stall reports received so far. Callable from any context.
pub fn stall_log() -> StallLog {
    *STALL_LOG.lock()
}

/// A report's CPUs as `1,3` (and `,+N` for those it does not list).
struct CpuList<'a>(&'a StallReport);

impl fmt::Display for CpuList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut listed = 0;
        for (i, cpu) in self.0.cpus().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{cpu}")?;
            listed += 1;
        }
        if self.0.nr_stalled() > listed {
            write!(f, ",+{}", self.0.nr_stalled() - listed)?;
        }
        Ok(())
    }
}
