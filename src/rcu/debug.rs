//! The misuse checks (Linux's `RCU_LOCKDEP_WARN`): a quiescent state or a
//! wait for a grace period inside a read section (every build: the check
//! reads this CPU's reading flag on the rare side), and a wait from a
//! `call_rcu` callback (debug builds; see the [module
//! docs](super#misuse-that-panics)).
//!
//! With [`lockdep`](crate::lockdep), the waits also report held locks, and
//! a read section is a lock to lockdep (the class `"rcu_read_lock"`, taken
//! as a try-lock: read sections nest, and never wait). A wait inside a read
//! section is caught by RCU's own check first, which panics before lockdep
//! would report it: a kernel sees one report for one bug.

use crate::lockdep::Map;

/// The read sections' lockdep pseudo-lock.
static RCU_READ: Map = Map::with_key(crate::lock_class!("rcu_read_lock"));

/// The read sections' lockdep pseudo-lock (zero-sized, with empty methods,
/// without `lockdep`).
#[inline(always)]
pub(super) fn lockdep_read() -> &'static Map {
    &RCU_READ
}

use super::CpuState;
use crate::percpu::PerCpuRef;
#[cfg(debug_assertions)]
use crate::sync::Ordering;

/// Panics if `cpu` (this CPU, preemption disabled) is inside a read
/// section: `what` reports a quiescent state. Every build: it is the rare
/// side's check (the read side only sets a flag).
#[inline]
#[track_caller]
pub(super) fn check_not_reading(cpu: &PerCpuRef<'static, CpuState>, what: &str) {
    if cpu.reading() {
        in_read_section(cpu.cpu(), what);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
pub(super) fn in_read_section(cpu: usize, what: &str) -> ! {
    panic!(
        "rcu: {what} inside a read-side critical section (CPU {cpu}): it reports a \
         quiescent state (or waits for a grace period, which the read section holds \
         up), so the grace period would end under the reader; drop the guard first, \
         or use rcu::call_rcu"
    )
}

/// Panics if the calling CPU is inside a read section (every build) or a
/// `call_rcu` callback (debug builds), where `what` (a wait for a grace
/// period or for callbacks) would wait for itself or end the grace period
/// under the reader.
#[inline]
#[track_caller]
pub(crate) fn check_may_wait(what: &'static str) {
    {
        let cpu = super::this_cpu();
        check_not_reading(&cpu, what);
        #[cfg(debug_assertions)]
        if cpu.in_callback.load(Ordering::Relaxed) != 0 {
            let cpu = cpu.cpu();
            panic!(
                "rcu: {what} from a call_rcu callback (CPU {cpu}): callbacks must not \
                 block or wait for grace periods; queue another callback instead"
            );
        }
    }
    // A CPU waiting with a spinlock held can wait forever.
    crate::lockdep::assert_no_locks_held(what);
}

/// Callbacks run on this CPU until it drops: preemption disabled (every
/// build), and this CPU marked as running `call_rcu` callbacks (debug
/// builds).
///
/// Callbacks run with preemption disabled, as Linux runs them in softirq
/// context: they must not sleep or block, and the mark, which belongs to
/// the CPU, then belongs to the task too. Were callbacks preemptible, a
/// task switched out inside one would leave its CPU marked (the next task
/// there that waits outside any callback would be taken for a callback),
/// and a callback that migrated would escape the check.
pub(crate) struct InCallback {
    /// This CPU's slot: preemption disabled until it drops (release builds
    /// hold it only for that).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    cpu: PerCpuRef<'static, CpuState>,
}

impl InCallback {
    #[inline]
    pub(crate) fn enter() -> Self {
        let cpu = super::this_cpu();
        // Relaxed (here and in `drop`): only this CPU touches it, with
        // preemption disabled.
        #[cfg(debug_assertions)]
        cpu.in_callback.fetch_add(1, Ordering::Relaxed);
        InCallback { cpu }
    }
}

impl Drop for InCallback {
    #[inline]
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        self.cpu.in_callback.fetch_sub(1, Ordering::Relaxed);
        // `cpu` drops next: preemption enabled again.
    }
}
