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
//!   carries on, so that the runner, not a panic, judges it. `irqs_disabled`
//!   keeps its default: outside its handler the kernel masks interrupts only
//!   around the runner's barriers, where it takes no ksync lock.
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
use super::irq;
use crate::println;
use crate::sched;

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
// and records.
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
