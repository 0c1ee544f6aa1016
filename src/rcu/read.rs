//! Read-side critical sections: [`read_lock`] and its guard, and the
//! untracked [`ReadSection`] under them (see the [module docs](super)).

use core::fmt;

use super::debug::lockdep_read;
use super::{CpuState, READER, WATCHED, engine, this_cpu};
use crate::kernel;
use crate::sync::{Ordering, fence};

/// A read section without lockdep's tracking: preemption disabled and this
/// CPU's section count raised until it drops (the gated rw lock's readers
/// use it inside their own lockdep tracking).
pub(crate) struct ReadSection {
    /// This CPU's state (the CPU cannot change: preemption is off).
    cpu: &'static CpuState,
    /// RCU watched the CPU when the section began (the common case: the
    /// end is one add).
    watched: bool,
    _preempt: crate::kernel::PreemptGuard,
}

impl ReadSection {
    #[inline]
    pub(crate) fn enter() -> Self {
        Self::enter_cpu().0
    }

    /// [`enter`](Self::enter), also returning this CPU's id (stable for the
    /// section: preemption is off), read by the same hook call.
    #[inline]
    pub(crate) fn enter_cpu() -> (Self, usize) {
        // Preemption off first: the section stays on this CPU (Linux's
        // non-preemptible `rcu_read_lock` is exactly `preempt_disable`).
        let this = this_cpu();
        let id = this.cpu();
        let (cpu, preempt) = this.into_parts();
        // Relaxed: on a watched CPU no other CPU reads the counts (grace
        // periods wait for the CPU's quiescent state, which is refused
        // inside a section); the unwatched path's fence E2 orders it.
        let old = cpu.state.load(Ordering::Relaxed);
        // One add that an interrupt cannot split (`arch::local_add_usize`:
        // a plain `add` to memory on x86_64, `stadd` or LL/SC on aarch64,
        // `amoadd` on riscv64), not a load and a store: a handler's whole
        // read section between those two would have its begin overwritten
        // while its end stays counted, leaving the CPU one section short for
        // good. The load above only reads WATCHED, which only this CPU's
        // online, offline and idle transitions change, never inside a
        // section (they panic there); a handler's read section leaves it as
        // it was.
        crate::arch::local_add_usize(&cpu.state, READER);
        let watched = old & WATCHED != 0;
        if !watched {
            unwatched_enter();
        }
        let section = ReadSection {
            cpu,
            watched,
            _preempt: preempt,
        };
        (section, id)
    }
}

impl Drop for ReadSection {
    #[inline]
    fn drop(&mut self) {
        if self.watched {
            // Relaxed, one interrupt-atomic add: as in `enter`.
            crate::arch::local_add_usize(&self.cpu.unlocks, READER);
        } else {
            unwatched_exit(self.cpu);
        }
        // `_preempt` drops next: preemption enabled again.
    }
}

/// A read section begins on a CPU that RCU is not watching: the raised
/// count makes it watched for the section.
#[cold]
#[inline(never)]
fn unwatched_enter() {
    // E2 pairs with G1 (store buffering, as E1): either the grace period's
    // scan sees the raised count and waits for this section's end, or this
    // section sees everything the updater did before the grace period.
    fence(Ordering::SeqCst);
}

/// A read section that began on an unwatched CPU ends (`cpu` is this
/// CPU's state; preemption is still disabled).
#[cold]
#[inline(never)]
fn unwatched_exit(cpu: &'static CpuState) {
    // Q1: the section's accesses happen-before a grace period whose scan
    // reads the raised end count (Acquire in `quiescent`).
    fence(Ordering::SeqCst);
    // Interrupt-atomic, as in `ReadSection::enter`.
    crate::arch::local_add_usize(&cpu.unlocks, READER);
    if cpu.nesting() == 0 {
        // Pairs with G1: a grace period whose scan saw this section (and
        // left the CPU pending) gets this report.
        fence(Ordering::SeqCst);
        engine().report(kernel::cpu_id());
    }
}

/// A read-side critical section: RCU-protected data read under it stays
/// valid until it drops. `!Send`. It keeps preemption disabled (the
/// kernel's [`preempt_disable`](crate::kernel::Kernel::preempt_disable))
/// and is counted in this CPU's slot (one interrupt-atomic add on entry
/// and one on exit), which the quiescent-state side checks.
///
/// A leaked guard (`mem::forget`) leaves its CPU inside a read section for
/// ever: preemption stays disabled, the CPU's quiescent states panic and
/// grace periods that need it never end (a stall, which
/// [`check_stall`](super::check_stall) reports). Nothing is freed under it.
#[must_use = "the read section ends when the guard drops"]
pub struct ReadGuard {
    _section: ReadSection,
}

/// Enters a read-side critical section. Nests. Must not block or report a
/// quiescent state until the guard drops (checked: those calls panic).
///
/// Preemption is disabled until the guard drops, so the section stays on
/// this CPU and no context switch (a quiescent state) can happen inside
/// it. On a CPU that RCU is not watching (never brought online, offline,
/// idle), the section makes the CPU watched until it ends: grace periods
/// wait for it there too.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuPtr};
///
/// static CONFIG: RcuPtr<u32> = RcuPtr::null();
/// // SAFETY: leaked, never freed.
/// unsafe { CONFIG.publish(Box::leak(Box::new(7))) };
/// // Even on a CPU that never called `cpu_online`:
/// let guard = rcu::read_lock();
/// assert_eq!(CONFIG.read(&guard), Some(&7));
/// assert!(rcu::read_lock_held());
/// ```
#[doc(alias = "rcu_read_lock")]
#[inline]
#[track_caller]
pub fn read_lock() -> ReadGuard {
    let section = ReadSection::enter();
    lockdep_read().acquire(0, true, false);
    ReadGuard { _section: section }
}

impl Drop for ReadGuard {
    #[doc(alias = "rcu_read_unlock")]
    #[inline]
    fn drop(&mut self) {
        lockdep_read().release();
        // `_section` drops next.
    }
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReadGuard")
    }
}

/// Whether this CPU is inside a read-side critical section.
#[doc(alias = "rcu_read_lock_held")]
#[must_use]
pub fn read_lock_held() -> bool {
    this_cpu().nesting() != 0
}
