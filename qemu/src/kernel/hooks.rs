//! What this kernel tells ksync: the kernel hooks (CPU id, CPU count,
//! preemption, RCU stall reports), the points where it reports RCU
//! quiescent states, and where it runs RCU's periodic work (callbacks and
//! stall detection).
//!
//! This file is the worked example of embedding ksync's per-CPU data and
//! RCU in a kernel; README.md ("Embedding ksync in your kernel") walks
//! through it.
//!
//! # The hooks
//!
//! [`QemuKernel`] implements [`ksync::kernel::Kernel`] and
//! [`ksync::set_kernel!`] registers it, once, for the whole image:
//!
//! * `cpu_id`: the index each CPU keeps in its per-CPU register (GS base on
//!   x86_64, `TPIDR_EL1` on aarch64): [`cpu::current`];
//! * `nr_cpus`: the *possible* CPUs, fixed by the boot CPU from the
//!   firmware (QEMU's `-smp`, through fw_cfg) before any other CPU starts:
//!   [`cpu::possible`];
//! * `preempt_disable`/`preempt_enable`: the defaults, which do nothing.
//!   This kernel never preempts: each CPU runs one thread of control from
//!   boot to halt, and an interrupt handler runs to completion on the CPU
//!   it interrupted and returns to the code it interrupted. Nothing can
//!   move a context to another CPU, so there is nothing to disable;
//! * `rcu_stall`: prints the report as a `KSYNC-RCU-STALL` line, then for
//!   each stalled CPU where its latest timer interrupt found it (this
//!   kernel's stand-in for Linux's stack dumps), and keeps a copy
//!   ([`stall_log`]) for the runner and the `rcu-stall` suite.
//!
//! # RCU quiescent states
//!
//! ksync's RCU is quiescent-state based: a grace period ends when every
//! CPU RCU watches has passed a point where it holds no RCU reference. A
//! kernel reports those points where it has them anyway:
//!
//! | kernel event | here | ksync call |
//! |---|---|---|
//! | a CPU comes up | [`cpu::mark_online`], on that CPU | [`ksync::rcu::cpu_online`] |
//! | a "context switch": between two operations of a thread | every [`Ctx::should_stop`](crate::kernel::runner::Ctx::should_stop), the runner's `cond_resched()` | [`ksync::rcu::quiescent_state`] |
//! | waiting with nothing to do: barriers, waiting for the next suite or for the start | [`idle_wait`] | [`ksync::rcu::idle_enter`] / [`ksync::rcu::idle_exit`] |
//! | an interrupt arrives in an idle wait | [`interrupt`] | `idle_exit` before the handler, `idle_enter` after (Linux's `rcu_irq_enter`/`rcu_irq_exit`) |
//! | a CPU stops for good | [`halt`] | [`ksync::rcu::cpu_offline`] |
//!
//! Why these, and why they are enough:
//!
//! * Suites read RCU-protected data only inside an operation, never
//!   across a `should_stop`, so each call is a point with no reference
//!   held, and every running CPU makes one every few microseconds.
//! * A CPU waiting at a barrier makes no such calls; unless it says it is
//!   idle, a writer on another CPU waiting for a grace period would wait
//!   for it while it waits for the writer to reach the barrier: a deadlock.
//!   Idle (an *extended* quiescent state) takes it out of grace periods
//!   altogether, for as long as it waits.
//! * Interrupt handlers report nothing. A handler runs inside whatever it
//!   interrupted, which was not at a quiescent state (the thread reports
//!   only between operations, after the handler returned), so RCU readers
//!   in handlers are covered, with one exception: a handler that
//!   interrupts an idle wait runs on a CPU RCU is not watching.
//!   [`interrupt`] makes RCU watch it for the handler's duration.
//! * The idle transitions run with interrupts off, so a handler sees
//!   either "not idle, watched" or "idle, not watched", never half of one.
//!
//! # RCU's periodic work: callbacks and stall detection
//!
//! `call_rcu` only queues a callback on the calling CPU's list; the kernel
//! runs the ones whose grace period has ended, and watches for grace
//! periods that take too long:
//!
//! | where in this kernel | ksync call | why |
//! |---|---|---|
//! | every timer interrupt, every CPU ([`rcu_tick`], from `irq::timer_tick`) | [`ksync::rcu::process_callbacks`] | Linux runs callbacks from the tick's softirq (`RCU_SOFTIRQ`): a bounded batch (16) per tick, so a backlog never makes one interrupt long; a lock-free check when none is ready |
//! | the same | [`ksync::rcu::check_stall`] with the counter in milliseconds ([`time::ticks_to_ms`]) | Linux checks for stalls from the tick (`rcu_sched_clock_irq`); two loads when nothing is due |
//! | entering an idle wait ([`idle_wait`]) and stopping ([`halt`]) | [`ksync::rcu::has_callbacks`], then every ready callback | a CPU with nothing to do runs its ready callbacks without a batch limit, as Linux's idle task does |
//! | boot ([`rcu_init`]) and before every suite (the runner) | [`ksync::rcu::set_stall_timeout`]`(`[`RCU_STALL_TIMEOUT_MS`]`)`, through [`set_rcu_stall_timeout`] | see the constant; the `rcu-stall` suite sets a shorter one for itself |
//!
//! Running callbacks from an interrupt that arrived inside a read section
//! of the interrupted thread is safe: a callback whose grace period has
//! ended was queued before a quiescent state this CPU reported *before*
//! that read section began, so it cannot free anything the section holds.
//! Callbacks run with interrupts off in the tick, and `rcu::barrier()`
//! runs other CPUs' callbacks on the calling CPU, so they must only take
//! interrupt-safe locks (the `rcu` suite's touch atomics only).
//!
//! The tick runs even while a CPU idles (this kernel has no tickless
//! idle), so callbacks queued on a CPU that then idles still run, with RCU
//! watching ([`interrupt`]). [`ksync::rcu::barrier`] runs every CPU's
//! callbacks itself; a kernel calls it before it reuses what callbacks
//! touch (the `rcu` suite does at its end).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ksync::rcu::StallReport;
use ksync::spinlock::{IrqState, IrqTicketMutex};

use super::cpu::{self, MAX_CPUS};
use super::{irq, time};
use crate::arch;
use crate::println;

/// This kernel, as ksync sees it.
pub struct QemuKernel;

// SAFETY: `cpu_id` is the index the boot code gave this CPU and stored in
// its own per-CPU register; indices are distinct, below `MAX_CPUS`, and
// CPUs at or past the possible count are parked before they run any ksync
// code, so every id is below `nr_cpus`. `nr_cpus` is fixed once, before the
// other CPUs start and before any ksync call that reads it, and never
// changes. Preemption: this kernel never moves a context to another CPU and
// never runs another thread on one (see the module docs), so the no-op
// defaults keep every caller on its CPU. `rcu_stall` only prints and
// records.
unsafe impl ksync::kernel::Kernel for QemuKernel {
    #[inline]
    fn cpu_id() -> usize {
        cpu::current()
    }

    #[inline]
    fn nr_cpus() -> usize {
        cpu::possible()
    }

    // `preempt_disable` / `preempt_enable`: the defaults (no-ops), see the
    // module docs.

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
}

ksync::set_kernel!(QemuKernel);

// ksync sizes its per-CPU data at build time (`KSYNC_MAX_CPUS`, set in
// `qemu/.cargo/config.toml`): every CPU this kernel can run needs a slot.
const _: () = assert!(MAX_CPUS <= ksync::kernel::MAX_CPUS);

/// Per CPU: inside [`idle_wait`] (RCU not watching). Only the CPU itself
/// touches its flag, with interrupts off.
static IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// This CPU comes up: from now on grace periods wait for it.
pub fn cpu_up() {
    ksync::rcu::cpu_online();
}

/// Spins until `done()` with this CPU idle as far as RCU is concerned
/// (`done` must not read RCU-protected data). Interrupts keep whatever
/// state they had. First runs this CPU's ready RCU callbacks: it has
/// nothing else to do.
pub fn idle_wait(mut done: impl FnMut() -> bool) {
    let cpu = cpu::current();
    run_ready_callbacks();
    {
        let _irq = IrqState::save();
        // Relaxed: only this CPU reads its flag, with interrupts off or
        // from its own interrupt handlers.
        IDLE[cpu].store(true, Ordering::Relaxed);
        ksync::rcu::idle_enter();
    }
    while !done() {
        core::hint::spin_loop();
    }
    {
        let _irq = IrqState::save();
        ksync::rcu::idle_exit();
        IDLE[cpu].store(false, Ordering::Relaxed);
    }
}

/// Runs an interrupt handler: if it interrupted an idle wait, RCU watches
/// this CPU while it runs (the handler may read RCU-protected data).
/// Called with interrupts off.
pub fn interrupt<R>(handler: impl FnOnce() -> R) -> R {
    let cpu = cpu::current();
    if !IDLE[cpu].load(Ordering::Relaxed) {
        return handler();
    }
    ksync::rcu::idle_exit();
    let result = handler();
    ksync::rcu::idle_enter();
    result
}

/// Stops this CPU for good: runs its ready callbacks, then tells RCU it is
/// gone (callbacks still waiting for a grace period are adopted by the
/// CPUs that stay).
pub fn halt() -> ! {
    run_ready_callbacks();
    ksync::rcu::cpu_offline();
    arch::park()
}

// ---- RCU's periodic work ------------------------------------------------------

/// The RCU stall timeout of this kernel, in milliseconds (the unit of
/// [`time::ticks_to_ms`] of the counter, the clock [`rcu_tick`] passes to
/// [`ksync::rcu::check_stall`]).
///
/// A grace period needs every running CPU to pass a `should_stop`, which
/// they do every few microseconds; under TCG on a loaded two-core host a
/// vCPU thread waits for the host scheduler for tens of milliseconds at
/// worst: the `rcu` suite's grace-period waits average 5-30 ms there and
/// peak at about 50 ms, and a run of every suite with a 30 ms timeout saw
/// no grace period older than about 120 ms (`rwlock-gated`). Five seconds
/// is well over an order of magnitude above that, so a report means a
/// real problem (the runner fails any suite that does not expect one),
/// and shorter than the runner's watchdog (10 s past a suite's budget), so
/// a CPU stuck in a read section is named before the watchdog ends the
/// run. Linux's default is 21 s, for grace periods that also wait for
/// sleeping tasks.
pub const RCU_STALL_TIMEOUT_MS: u64 = 5_000;

/// The stall timeout in force (ksync takes it but does not say it back).
static STALL_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

/// Boot CPU, before the others start: RCU set-up (the stall timeout).
pub fn rcu_init() {
    reset_rcu_stall_timeout();
}

/// Sets RCU's stall timeout to `ms` milliseconds (0: no stall detection).
pub fn set_rcu_stall_timeout(ms: u64) {
    // Relaxed: a setting; ksync's own store is what the checks read.
    STALL_TIMEOUT_MS.store(ms, Ordering::Relaxed);
    ksync::rcu::set_stall_timeout(ms);
}

/// The stall timeout in force, in milliseconds.
pub fn rcu_stall_timeout() -> u64 {
    STALL_TIMEOUT_MS.load(Ordering::Relaxed)
}

/// Sets the stall timeout back to [`RCU_STALL_TIMEOUT_MS`]. A suite that
/// sets its own does at its end; the runner checks that it did, and sets
/// it back before every suite anyway.
pub fn reset_rcu_stall_timeout() {
    set_rcu_stall_timeout(RCU_STALL_TIMEOUT_MS);
}

/// The RCU part of every timer interrupt (Linux's `rcu_sched_clock_irq`
/// and then its `RCU_SOFTIRQ`): checks for a stalled grace period (a
/// report goes to [`QemuKernel`]'s `rcu_stall`) and runs up to a batch of
/// this CPU's callbacks whose grace period has ended (a lock-free check
/// when none is). `now` is [`time::now`] at the interrupt. Interrupts off,
/// RCU watching ([`interrupt`]).
pub fn rcu_tick(now: u64) {
    // A report is also handed to `rcu_stall`, which prints and keeps it.
    let _report = ksync::rcu::check_stall(time::ticks_to_ms(now));
    ksync::rcu::process_callbacks();
}

/// Runs every callback of this CPU whose grace period has ended (no batch
/// limit: the CPU has nothing else to do). Thread context, outside read
/// sections.
fn run_ready_callbacks() {
    if ksync::rcu::has_callbacks() {
        ksync::rcu::process_callbacks_max(usize::MAX);
    }
}

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
