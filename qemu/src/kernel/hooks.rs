//! What this kernel tells ksync: the kernel hooks (CPU id, CPU count,
//! preemption) and the points where it reports RCU quiescent states.
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
//!   move a context to another CPU, so there is nothing to disable.
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

use core::sync::atomic::{AtomicBool, Ordering};

use ksync::spinlock::IrqState;

use super::cpu::{self, MAX_CPUS};
use crate::arch;

/// This kernel, as ksync sees it.
pub struct QemuKernel;

// SAFETY: `cpu_id` is the index the boot code gave this CPU and stored in
// its own per-CPU register; indices are distinct, below `MAX_CPUS`, and
// CPUs at or past the possible count are parked before they run any ksync
// code, so every id is below `nr_cpus`. `nr_cpus` is fixed once, before the
// other CPUs start and before any ksync call that reads it, and never
// changes. Preemption: this kernel never moves a context to another CPU and
// never runs another thread on one (see the module docs), so the no-op
// defaults keep every caller on its CPU.
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
/// state they had.
pub fn idle_wait(mut done: impl FnMut() -> bool) {
    let cpu = cpu::current();
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

/// Stops this CPU for good: first tells RCU it is gone.
pub fn halt() -> ! {
    ksync::rcu::cpu_offline();
    arch::park()
}
