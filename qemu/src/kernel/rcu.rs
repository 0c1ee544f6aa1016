//! This kernel's RCU policy: where its CPUs report quiescent states, and
//! where it runs RCU's periodic work (callbacks and stall detection). What
//! ksync is told about the kernel itself (CPU id, CPU count, where stall
//! reports go) is `kernel::hooks`.
//!
//! This file and `kernel::hooks` are the worked example of embedding
//! ksync's per-CPU data and RCU in a kernel; README.md ("Embedding ksync in
//! your kernel") walks through them.
//!
//! # RCU quiescent states
//!
//! ksync's RCU is quiescent-state based: a grace period ends when every
//! CPU RCU watches has passed a point where it holds no RCU reference. A
//! kernel reports those points where it has them anyway:
//!
//! | kernel event | here | ksync call |
//! |---|---|---|
//! | a CPU comes up | [`cpu_up`], on that CPU | [`ksync::rcu::cpu_online`] |
//! | a "context switch": between two operations of a thread | every `Ctx::should_stop` (`harness::runner`), the runner's `cond_resched()` | [`ksync::rcu::quiescent_state`] |
//! | a task sleeps in a ksync wait (a real context switch, outside read sections: ksync's `might_sleep` checks) | every `Kernel::block` (`kernel::hooks`) | [`ksync::rcu::quiescent_state`] |
//! | waiting with nothing to do: barriers, waiting for the next suite or for the start | [`idle_wait`] | [`ksync::rcu::idle_enter`] / [`ksync::rcu::idle_exit`] |
//! | an interrupt arrives in an idle wait | [`interrupt`] | `idle_exit` before the handler, `idle_enter` after (Linux's `rcu_irq_enter`/`rcu_irq_exit`) |
//! | a CPU stops for good | [`halt`] | [`ksync::rcu::cpu_offline`] |
//! | a CPU goes offline for a while (`kernel::hotplug`), interrupts off | [`cpu_down`] | [`ksync::rcu::cpu_offline`]: its queued callbacks stay queued and the CPUs that stay run them |
//! | it comes back, interrupts still off, before its first reader | [`cpu_back`] | [`ksync::rcu::cpu_online`] |
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
//! | every timer interrupt, every CPU ([`tick`], from the timer interrupt `main.rs` puts together) | [`ksync::rcu::process_callbacks`] | Linux runs callbacks from the tick's softirq (`RCU_SOFTIRQ`): a bounded batch (16) per tick, so a backlog never makes one interrupt long; a lock-free check when none is ready. After a full batch, up to 1/128 of the backlog more (Linux's `rcu_divisor`), so that a `call_rcu` flood cannot outrun the invocations |
//! | the same | [`ksync::rcu::check_stall`] with the counter in milliseconds ([`time::ticks_to_ms`]) | Linux checks for stalls from the tick (`rcu_sched_clock_irq`); two loads when nothing is due |
//! | entering an idle wait ([`idle_wait`]) and stopping ([`halt`]) | [`ksync::rcu::has_callbacks`], then every ready callback | a CPU with nothing to do runs its ready callbacks without a batch limit, as Linux's idle task does |
//! | boot ([`init`]) and before every suite (the runner) | [`ksync::rcu::set_stall_timeout`]`(`[`STALL_TIMEOUT_MS`]`)`, through [`set_stall_timeout`] | see the constant; the `rcu-stall` suite sets a shorter one for itself |
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

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ksync::spinlock::IrqState;

use super::cpu::{self, MAX_CPUS};
use super::time;
use crate::arch;

/// Per CPU: inside [`idle_wait`] (RCU not watching). Only the CPU itself
/// touches its flag, with interrupts off.
static IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// This CPU comes up: from now on grace periods wait for it. Then it counts
/// as online ([`cpu::mark_online`]).
pub fn cpu_up() {
    ksync::rcu::cpu_online();
    cpu::mark_online();
}

/// Spins until `done()` with this CPU idle as far as RCU is concerned
/// (`done` must not read RCU-protected data). Interrupts keep whatever
/// state they had. First runs this CPU's ready RCU callbacks: it has
/// nothing else to do.
pub fn idle_wait(mut done: impl FnMut() -> bool) {
    // Idle is a CPU's state, not a thread's: no other thread may run on
    // this CPU (unwatched by RCU) while this one waits (`crate::sched`).
    let _preempt = ksync::kernel::preempt_disable();
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

/// This CPU goes offline for a while (`kernel::hotplug`), interrupts off,
/// at a quiescent point: grace periods stop waiting for it. Its callbacks
/// are left queued on purpose: the CPUs that stay run them (ksync's
/// adoption of an offline CPU's callbacks), which the churn checks.
pub fn cpu_down() {
    ksync::rcu::cpu_offline();
}

/// This CPU is back from [`cpu_down`], interrupts still off: RCU watches it
/// before its first reader (thread or interrupt).
pub fn cpu_back() {
    ksync::rcu::cpu_online();
}

// ---- RCU's periodic work ------------------------------------------------------

/// The RCU stall timeout of this kernel, in milliseconds (the unit of
/// [`time::ticks_to_ms`] of the counter, the clock [`tick`] passes to
/// [`ksync::rcu::check_stall`]).
///
/// A grace period needs every running CPU to pass a `should_stop`, which
/// they do every few microseconds, but under TCG on a loaded host a vCPU
/// thread can wait for the host scheduler for tens of milliseconds (the
/// figures are in qemu/README.md, "Measurements and history"). Five
/// seconds is well over an order of magnitude above the oldest grace
/// period seen there, so a report means a real problem (the runner fails
/// any suite that does not expect one), and shorter than the runner's
/// watchdog (10 s past a suite's budget), so a CPU stuck in a read section
/// is named before the watchdog ends the run. Linux's default is 21 s, for
/// grace periods that also wait for sleeping tasks.
pub const STALL_TIMEOUT_MS: u64 = 5_000;

/// The stall timeout in force (ksync takes it but does not say it back).
static STALL_TIMEOUT: AtomicU64 = AtomicU64::new(0);

/// Boot CPU, before the others start: RCU set-up (the stall timeout).
pub fn init() {
    reset_stall_timeout();
}

/// Sets RCU's stall timeout to `ms` milliseconds (0: no stall detection).
pub fn set_stall_timeout(ms: u64) {
    // Relaxed: a setting; ksync's own store is what the checks read.
    STALL_TIMEOUT.store(ms, Ordering::Relaxed);
    ksync::rcu::set_stall_timeout(ms);
}

/// The stall timeout in force, in milliseconds.
pub fn stall_timeout() -> u64 {
    STALL_TIMEOUT.load(Ordering::Relaxed)
}

/// Sets the stall timeout back to [`STALL_TIMEOUT_MS`]. A suite that sets
/// its own does at its end; the runner checks that it did, and sets it back
/// before every suite anyway.
pub fn reset_stall_timeout() {
    set_stall_timeout(STALL_TIMEOUT_MS);
}

/// The RCU part of every timer interrupt (Linux's `rcu_sched_clock_irq`
/// and then its `RCU_SOFTIRQ`): checks for a stalled grace period (a
/// report goes to the `rcu_stall` hook, `kernel::hooks`) and runs up to a
/// batch of this CPU's callbacks whose grace period has ended (a lock-free
/// check when none is). `now` is [`time::now`] at the interrupt.
/// Interrupts off, RCU watching ([`interrupt`]).
pub fn tick(now: u64) {
    // A report is also handed to `rcu_stall`, which prints and keeps it.
    let _report = ksync::rcu::check_stall(time::ticks_to_ms(now));
    if ksync::rcu::process_callbacks() >= ksync::rcu::CALLBACK_BATCH {
        // A full batch: a backlog. Run more, in proportion to it (Linux's
        // `rcu_divisor`: a batch of at least `pending >> 7`), so that a
        // `call_rcu` flood cannot outrun the invocations (the `rcu-flood`
        // suite checks it).
        let more = ksync::rcu::pending_callbacks() >> BACKLOG_DIVISOR_SHIFT;
        if more > 0 {
            ksync::rcu::process_callbacks_max(more);
        }
    }
}

/// A tick that ran a full batch of callbacks runs up to the backlog
/// divided by `1 << BACKLOG_DIVISOR_SHIFT` more (Linux's `rcu_divisor`, 7).
const BACKLOG_DIVISOR_SHIFT: u32 = 7;

/// Runs every callback of this CPU whose grace period has ended (no batch
/// limit: the CPU has nothing else to do). Thread context, outside read
/// sections.
fn run_ready_callbacks() {
    if ksync::rcu::has_callbacks() {
        ksync::rcu::process_callbacks_max(usize::MAX);
    }
}
