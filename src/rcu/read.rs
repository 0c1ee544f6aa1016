//! Read-side critical sections: [`read_lock`] and its guard, and the
//! untracked [`ReadSection`] under them (see the [module docs](super)).

use core::fmt;

use super::debug::lockdep_read;
use super::{CpuState, engine, this_cpu};
use crate::kernel;
use crate::sync::{Ordering, compiler_fence, fence};

/// A read section without lockdep's tracking: preemption disabled and this
/// CPU's "reading" flag set until it drops (the gated rw lock's readers
/// use it inside their own lockdep tracking).
pub(crate) struct ReadSection {
    /// This CPU's state (the CPU cannot change: preemption is off).
    cpu: &'static CpuState,
    /// The outermost section on this CPU: it set the flag and clears it.
    /// Nested ones (in the same task or an interrupt handler) leave it.
    outer: bool,
    /// RCU watched the CPU when the section began (the common case: the
    /// end is one store).
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
        // Relaxed, all three: on a watched CPU no other CPU reads the flag
        // (grace periods wait for the CPU's quiescent state, which is
        // refused while it is set); the unwatched path's fence E2 orders
        // the store. The flag, not a count: the store's value is a
        // constant and the load only decides a branch, so back-to-back
        // sections form no chain of read-modify-writes through memory. An
        // interrupt handler whose whole section runs between the load and
        // the store finds the flag clear, sets and clears it, and this
        // store sets it again: each section clears only what it set.
        let outer = !cpu.reading.load(Ordering::Relaxed);
        cpu.reading.store(true, Ordering::Relaxed);
        // The flag first, then `watched` (issue 37, defect 2). `watched`
        // changes only in this CPU's online, offline and idle transitions,
        // which an interrupt handler may run; the ones that un-watch the
        // CPU refuse to run inside a section (they panic on the flag). So
        // a handler after the store above cannot un-watch the CPU, and one
        // before it has un-watched it before the load below, which then
        // takes the unwatched path (E2, and a report at the end). In the
        // other order, a handler between the load and the store passed the
        // check and un-watched the CPU, and the section ran as watched on
        // an unwatched CPU: no E2, so a grace period's scan could miss the
        // flag (store buffering) and end under the section (early end);
        // and a grace period whose scan saw the flag waited for a report
        // that the watched exit never makes (a hang while the CPU idles).
        // A handler that watches the CPU in between is harmless either way
        // (E1 in it pairs with G1 as for any section).
        //
        // A compiler fence, no instruction: only this CPU's own interrupt
        // handlers must see the store before the load and before the
        // section's accesses, and a CPU sees its own accesses in program
        // order; the compiler must keep them in it (the kernel's
        // `preempt_disable` before may be inlined and need not be a
        // compiler barrier).
        compiler_fence(Ordering::SeqCst);
        let watched = cpu.watched.load(Ordering::Relaxed);
        if !watched {
            unwatched_enter(cpu, outer);
        }
        let section = ReadSection {
            cpu,
            outer,
            watched,
            _preempt: preempt,
        };
        (section, id)
    }
}

impl Drop for ReadSection {
    #[inline]
    fn drop(&mut self) {
        if self.outer {
            // The section chose its exit when it began: a CPU watched then
            // must still be watched (idle transitions never happen inside
            // a section; `idle_enter` and `cpu_offline` panic there). One
            // un-watched meanwhile would skip the report its grace period
            // waits for (issue 37 defect 2: an interrupt that idled the
            // CPU between the section's two accesses). Relaxed: this
            // CPU's own state.
            debug_assert!(
                !self.watched || self.cpu.watched.load(Ordering::Relaxed),
                "rcu: the CPU stopped being watched inside a read section that began watched"
            );
            if self.watched {
                // Why a Relaxed store is enough, and why it needs a
                // compiler fence before it (issue 37):
                //
                // * Other CPUs: no grace period ends on this CPU's account
                //   because of this store. A scan reads the flag only of
                //   an unwatched CPU, and this one stays watched until a
                //   later `idle_enter`/`cpu_offline`, whose fence Q1 runs
                //   before it un-watches; a report (`quiescent_state`, the
                //   waits') issues Q1 before it clears the pending bit.
                //   Q1 is a full fence in this CPU's program order after
                //   the section, so it orders the section's accesses
                //   before the end of the grace period, in hardware too.
                // * This CPU: what keeps the section's accesses before
                //   those fences is program order, which the compiler may
                //   break for Relaxed and plain accesses around this
                //   store. The next quiescent state is not always behind
                //   `preempt_enable`: an interrupt handler landing right
                //   after the store finds the flag clear and may call
                //   `idle_enter`, which reports (and a grace period may
                //   end) before the interrupted code resumes; and
                //   `preempt_enable` is the kernel's link-time hook, which
                //   cross-crate LTO may inline into a plain decrement
                //   that is no compiler barrier (the `Kernel` contract
                //   does not ask for one). A load the compiler sank below
                //   the store would then read after the grace period
                //   ended. The compiler fence forbids that and costs no
                //   instruction (`Release`: earlier accesses stay before
                //   the later store; a CPU sees its own accesses in
                //   program order, so no hardware fence is needed).
                compiler_fence(Ordering::Release);
                // Relaxed, one store: as in `enter`.
                self.cpu.reading.store(false, Ordering::Relaxed);
            } else {
                unwatched_exit(self.cpu);
            }
        }
        // `_preempt` drops next: preemption enabled again.
    }
}

/// A read section begins on a CPU that RCU is not watching: the flag makes
/// it watched for the section.
#[cold]
#[inline(never)]
fn unwatched_enter(cpu: &'static CpuState, outer: bool) {
    // E2 pairs with G1 (store buffering, as E1): either the grace period's
    // scan sees the flag and waits for this section's end, or this section
    // sees everything the updater did before the grace period.
    fence(Ordering::SeqCst);
    // Debug builds: the grace periods the outermost section holds up are
    // those whose start began after the one read here (after E2, against
    // the start's store before G1: store buffering again); the end of
    // each checks it (`Engine::check_no_reader_before`). Relaxed: E2 orders it.
    #[cfg(debug_assertions)]
    if outer {
        cpu.unwatched_since
            .store(engine().starting.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    #[cfg(not(debug_assertions))]
    let _ = (cpu, outer);
}

/// The outermost read section that began on an unwatched CPU ends (`cpu`
/// is this CPU's state; preemption is still disabled).
#[cold]
#[inline(never)]
fn unwatched_exit(cpu: &'static CpuState) {
    // Debug builds: the section no longer holds grace periods up (cleared
    // before the report below, which the end of a grace period follows).
    #[cfg(debug_assertions)]
    cpu.unwatched_since.store(usize::MAX, Ordering::Relaxed);
    // Q1: the section's accesses happen-before a grace period whose scan
    // reads the cleared flag (Acquire in `quiescent`).
    fence(Ordering::SeqCst);
    cpu.reading.store(false, Ordering::Relaxed);
    // Pairs with G1: a grace period whose scan saw the flag (and left the
    // CPU pending) gets this report.
    fence(Ordering::SeqCst);
    engine().report(kernel::cpu_id());
}

/// A read-side critical section: RCU-protected data read under it stays
/// valid until it drops. `!Send`. It keeps preemption disabled (the
/// kernel's [`preempt_disable`](crate::kernel::Kernel::preempt_disable))
/// and sets a flag in this CPU's slot while it is the outermost section
/// (one plain store on entry and one on exit), which the quiescent-state
/// side checks.
///
/// A leaked guard (`mem::forget`) leaves its CPU inside a read section for
/// ever: preemption stays disabled, the CPU's quiescent states panic and
/// grace periods that need it never end (a stall, which
/// [`check_stall`](super::check_stall) reports). Nothing is freed under it.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuPtr, ReadGuard};
///
/// static HOSTNAME: RcuPtr<&str> = RcuPtr::null();
/// # // SAFETY: leaked, never freed.
/// # unsafe { HOSTNAME.publish(Box::leak(Box::new("localhost"))) };
///
/// // What the guard borrows cannot outlive the read section.
/// fn hostname<'g>(guard: &'g ReadGuard) -> &'g str {
///     HOSTNAME.read(guard).copied().unwrap_or("(none)")
/// }
/// let guard = rcu::read_lock();
/// assert_eq!(hostname(&guard), "localhost");
/// drop(guard); // rcu_read_unlock
/// ```
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
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// fn lookup_route() {
///     debug_assert!(rcu::read_lock_held(), "call under rcu::read_lock()");
///     // ... walk an RCU list ...
/// }
/// let guard = rcu::read_lock();
/// lookup_route();
/// drop(guard);
/// assert!(!rcu::read_lock_held());
/// ```
#[doc(alias = "rcu_read_lock_held")]
#[must_use]
pub fn read_lock_held() -> bool {
    this_cpu().reading()
}
