//! RCU: read-copy-update with quiescent-state-based grace periods (QSBR).
//!
//! Readers of RCU-protected data take no lock, write nothing shared and
//! issue no fence: [`read_lock`] disables preemption (the kernel's hook)
//! and, as the outermost section, sets a flag in this CPU's own cache line
//! (one plain store when it begins, another when it ends; no
//! read-modify-write, no fence; nobody else writes the line), which the
//! quiescent-state side checks. Writers publish a new version with a
//! single pointer store and wait for a **grace period** — until every CPU
//! has passed a *quiescent state*, a point where it is not inside a
//! read-side critical section — before they free the old version. Any
//! reader that could still see the old version started before the grace
//! period, so it has finished by then.
//!
//! # What the kernel must do
//!
//! This is the QSBR flavour for non-preemptible read sections: read
//! sections never block or sleep, and they run with preemption disabled
//! (the guard holds a [`PreemptGuard`](crate::kernel::PreemptGuard), so a
//! kernel that preempts and migrates tasks while their preemption count is
//! zero, as the [`Kernel`](crate::kernel::Kernel) contract allows, never
//! switches a reader out). The kernel tells RCU about quiescent states at
//! its natural points:
//!
//! | kernel event | call |
//! |---|---|
//! | CPU comes up (on that CPU) | [`cpu_online`] |
//! | context switch, return to user mode, a long loop's iteration | [`quiescent_state`] |
//! | idle loop entry / exit | [`idle_enter`] / [`idle_exit`] |
//! | CPU goes down (on that CPU, after its last reader) | [`cpu_offline`] |
//! | the tick, on every CPU | [`process_callbacks`] (runs ready [`call_rcu`] callbacks in a bounded batch), [`check_stall`] |
//!
//! CPUs start offline: a CPU that never called [`cpu_online`], an offline
//! one and an idle one are in an *extended quiescent state* and hold up a
//! grace period only while a read section runs on them: a read section on
//! such a CPU (an interrupt handler in the idle loop, a CPU still booting)
//! makes it watched until it ends, as Linux's `rcu_irq_enter` does, so an
//! interrupt handler needs neither [`idle_exit`] nor [`idle_enter`].
//!
//! Each call that reads the CPU id and then acts for that CPU
//! ([`quiescent_state`], [`cpu_online`], [`idle_enter`], [`idle_exit`],
//! [`cpu_offline`], the waits' own quiescent states) keeps preemption
//! disabled from the one to the other: a task preempted in between could
//! report for a CPU it has left.
//!
//! # Misuse that panics
//!
//! In every build, naming the CPU (the check is on the rare side, the
//! quiescent state, which reads this CPU's reading flag):
//!
//! * a quiescent state reported inside a read section ([`quiescent_state`],
//!   [`idle_enter`], [`cpu_offline`]): the grace period would end under
//!   the reader;
//! * a wait for a grace period or for callbacks ([`synchronize`],
//!   [`cond_synchronize`], [`barrier`], [`RcuSync::enter`], the
//!   [`GatedPerCpuRwLock`](crate::percpu_rwlock::GatedPerCpuRwLock)'s
//!   `write`) inside a read section: it reports this CPU's quiescent states
//!   while it waits.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::rcu;
//!
//! rcu::cpu_online();
//! let guard = rcu::read_lock();
//! let caught = std::panic::catch_unwind(|| rcu::quiescent_state());
//! assert!(caught.is_err(), "a quiescent state inside a read section panics");
//! drop(guard);
//! rcu::quiescent_state(); // fine outside
//! # rcu::cpu_offline();
//! ```
//!
//! Builds with debug assertions also panic on a wait from a [`call_rcu`]
//! callback (it would wait for itself). With [`lockdep`](crate::lockdep),
//! a read section is a lock to lockdep and waits report held locks.
//!
//! Writers wait with [`synchronize`], poll with cookies ([`get_state`],
//! [`start_poll`], [`poll`], [`cond_synchronize`]), or hand the freeing to
//! a callback with [`call_rcu`] (an intrusive [`RcuHead`], no allocation;
//! [`barrier`] waits for all of them). A grace period that runs longer than
//! [`set_stall_timeout`] is reported by [`check_stall`] through the
//! kernel's [`rcu_stall`](crate::kernel::Kernel::rcu_stall) hook.
//!
//! For read sections that may sleep or migrate, [`srcu`] provides SRCU
//! domains on per-CPU counters, independent of this engine.
//!
//! # The grace-period sequence
//!
//! `gp_seq` is a word-sized counter (wrap-safe comparisons) whose low two bits are the state (0: idle,
//! 1: a grace period in progress); starting a grace period adds one,
//! ending it rounds up to the next multiple of four. A cookie from
//! [`get_state`] is the first `gp_seq` value that proves a full grace
//! period has elapsed since the call: `(gp_seq + 7) & !3`.
//!
//! # Barriers
//!
//! * A grace period starts by setting every CPU's bit in the pending mask,
//!   publishing `gp_seq` (Release) and issuing a full fence (**G1**); then,
//!   still under the engine's lock (so that no later grace period can
//!   start in between), it clears the bits of CPUs in an extended
//!   quiescent state, read after G1. A CPU leaving that state increments
//!   its `watching` counter and issues a full fence (**E1**) before its
//!   first reader. G1 pairs with E1:
//!   either the grace period sees the CPU watching and waits for it, or the
//!   CPU's readers see everything the updater did before the grace period
//!   started.
//! * A read section sets the CPU's reading flag before it reads
//!   `watched` (so an interrupt handler cannot un-watch the CPU between
//!   the two: after the flag, `idle_enter` panics). A read section on a
//!   CPU in an extended quiescent state then issues a full fence (**E2**)
//!   before it reads;
//!   it pairs with G1 as E1 does (the scan reads the flag: set means
//!   wait). The outermost section's end issues Q1, clears the flag, and
//!   after another full fence reports the CPU's quiescent state, for a
//!   grace period that saw it. On a watched CPU the flag is not read by
//!   anyone but the CPU itself (its quiescent states check it), so the
//!   read side has no fence.
//! * A CPU reporting a quiescent state issues a full fence (**Q1**) before
//!   clearing its bit: its earlier read sections happen-before the end of
//!   the grace period. Entering an extended quiescent state does the same,
//!   then reports, so the fence orders the CPU's last readers first.
//! * The grace period ends (Release store of the new `gp_seq`) only after
//!   the last bit was cleared (AcqRel counter); waiters read `gp_seq` with
//!   Acquire and issue a full fence (**W1**) before they free anything.

mod callback;
mod debug;
pub mod list;
mod ptr;
mod rcu_sync;
mod read;
pub mod srcu;
mod stall;

#[cfg(feature = "alloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub use self::callback::defer_free;
pub use self::callback::{
    CALLBACK_BATCH, Callback, RcuHead, barrier, call_rcu, has_callbacks, pending_callbacks,
    process_callbacks, process_callbacks_max,
};
pub use self::list::{HeldLock, Hlist, Link, Linked, RcuHashTable, RcuList};
pub use self::ptr::RcuPtr;
pub use self::rcu_sync::RcuSync;
pub(crate) use self::read::ReadSection;
pub use self::read::{ReadGuard, read_lock, read_lock_held};
pub use self::srcu::{Srcu, SrcuGuard};
pub use self::stall::{check_stall, set_stall_timeout, stall_count};
pub use crate::kernel::{STALL_REPORT_CPUS, StallReport};

use self::debug::{InCallback, check_may_wait, check_not_reading};

use core::fmt;

use crate::kernel::{self, MAX_CPUS};
use crate::percpu::{CachePadded, PerCpu, PerCpuRef};
use crate::spinlock::{RawTicketLock, lock_irqsave};
use crate::sync::{AtomicBool, AtomicUsize, Ordering, array, fence, model_static, spin_loop};

/// Bits per word of the pending-CPU mask.
const BITS: usize = usize::BITS as usize;

/// A grace-period cookie from [`get_state`] or [`start_poll`]: pass it to
/// [`poll`] or [`cond_synchronize`].
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, Cookie};
///
/// // A retired buffer remembers when it was unpublished...
/// struct Retired {
///     cookie: Cookie,
///     buf: Box<[u8]>,
/// }
/// let retired = Retired { cookie: rcu::start_poll(), buf: vec![0; 64].into() };
/// rcu::synchronize(); // (time passes; other grace periods complete)
/// // ...and the tick frees it once a grace period has passed, without waiting.
/// if rcu::poll(retired.cookie) {
///     drop(retired.buf);
/// }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Cookie(usize);

impl Cookie {
    /// A cookie that is always complete ([`poll`] returns `true` at once).
    #[doc(alias = "get_completed_synchronize_rcu")]
    pub const COMPLETED: Cookie = Cookie(1);
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cookie({:#x})", self.0)
    }
}

const STATE_MASK: usize = 3;
const WORDS: usize = MAX_CPUS.div_ceil(BITS);

/// Per-CPU RCU state. Written only by this CPU (its tasks and interrupt
/// handlers), read by grace-period starts on any CPU.
struct CpuState {
    /// The CPU is online and not idle (RCU watches it).
    watched: AtomicBool,
    /// A read section is open on this CPU (set by the outermost one,
    /// cleared when it ends).
    reading: AtomicBool,
    /// `call_rcu` callbacks running on this CPU (debug builds only).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    in_callback: AtomicUsize,
    /// Debug builds: the `gp_seq` an open read section on this unwatched
    /// CPU read after its fence E2 (`usize::MAX`: none open), so that the
    /// end of a grace period can check it did not end under a reader that
    /// began before it.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    unwatched_since: AtomicUsize,
}

crate::sync::const_init! {
    impl for CpuState = CpuState {
        watched: AtomicBool::new(false),
        reading: AtomicBool::new(false),
        in_callback: AtomicUsize::new(0),
        unwatched_since: AtomicUsize::new(usize::MAX),
    };
}

impl CpuState {
    /// Whether a read section is open on this CPU, for the CPU itself
    /// (Relaxed: its own flag; an interrupt handler's section that runs in
    /// between leaves it as it found it).
    #[inline]
    fn reading(&self) -> bool {
        self.reading.load(Ordering::Relaxed)
    }

    /// Whether the CPU is in an extended quiescent state with no reader,
    /// for a grace period's scan on any CPU (after G1).
    #[inline]
    fn quiescent(&self) -> bool {
        // Acquire: a cleared flag read here was stored after the full
        // fence Q1 at the end of an unwatched CPU's section, whose accesses
        // then happen-before the end of the grace period; a set flag this
        // scan does not see is ordered by E2/G1 (store buffering) after the
        // grace period's start; one it sees reports when the section ends
        // (that report and this scan are store buffering too). `watched`
        // first: a CPU that leaves the extended quiescent state after it
        // is read is E1/G1's case.
        !self.watched.load(Ordering::Acquire) && !self.reading.load(Ordering::Acquire)
    }
}

/// The grace-period engine (one per kernel, like Linux's `rcu_state`).
struct Engine {
    /// On a line of its own: every quiescent-state check reads it, and the
    /// reports' updates to `pending` must not invalidate it.
    gp_seq: CachePadded<AtomicUsize>,
    /// The highest cookie someone waits for: a grace period must run until
    /// `gp_seq` reaches it.
    requested: AtomicUsize,
    /// CPUs that still owe the current grace period a quiescent state.
    pending: [AtomicUsize; WORDS],
    /// Number of bits set in `pending`.
    pending_count: AtomicUsize,
    /// Serialises starting and ending grace periods and the idle scans
    /// (a scan clears bits only in the grace period whose start ran it).
    lock: RawTicketLock,
    cpus: PerCpu<CpuState>,
    /// Debug builds: the `gp_seq` of the last grace period whose start
    /// began (stored before its mask is published), for the unwatched
    /// read sections' marks (`CpuState::unwatched_since`).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    starting: AtomicUsize,
}

model_static! {
    static ENGINE: Engine = Engine {
        gp_seq: CachePadded::new(AtomicUsize::new(0)),
        requested: AtomicUsize::new(0),
        pending: array![AtomicUsize::new(0); WORDS],
        pending_count: AtomicUsize::new(0),
        starting: AtomicUsize::new(0),
        lock: RawTicketLock::new(),
        cpus: PerCpu::new(),
    };
}

#[inline]
fn engine() -> &'static Engine {
    &ENGINE
}

/// `a >= b` on a wrapping sequence (the engine's `gp_seq`, SRCU's and the
/// callback lists' cookies).
#[inline]
fn seq_ge(a: usize, b: usize) -> bool {
    a.wrapping_sub(b) as isize >= 0
}

impl Engine {
    /// Starts a grace period if none is running and one is requested.
    /// Called with `lock` held; returns whether it started one.
    fn start_locked(&self) -> bool {
        let seq = self.gp_seq.load(Ordering::Relaxed);
        if seq & STATE_MASK != 0 || seq_ge(seq, self.requested.load(Ordering::Relaxed)) {
            return false;
        }
        let nr = kernel::nr_cpus();
        // Debug builds: the start, before the mask that a report may read
        // (the swaps below are Release): a read section that begins after
        // such a report is not one this grace period waits for, and its
        // mark must say so (`check_no_reader_before`).
        #[cfg(debug_assertions)]
        self.starting.store(seq + 1, Ordering::Relaxed);
        // The count first, then the mask with a Release read-modify-write:
        // a late report that clears its bit in the new mask (its view of
        // the previous grace period was stale) synchronises with this
        // start, so its decrement lands on the new count, not before it.
        self.pending_count.store(nr, Ordering::Relaxed);
        for (w, word) in self.pending.iter().enumerate() {
            let bits = nr.saturating_sub(w * BITS).min(BITS);
            let mask = if bits == BITS {
                usize::MAX
            } else {
                (1 << bits) - 1
            };
            word.swap(mask, Ordering::Release);
        }
        // Release: the mask is visible to whoever sees the new state.
        self.gp_seq.store(seq + 1, Ordering::Release);
        true
    }

    /// After a start, with `lock` held: clears the bits of CPUs in an
    /// extended quiescent state, and returns whether it cleared the last
    /// one (the caller then ends the grace period, still under `lock`).
    ///
    /// Under `lock`, as Linux scans a node's idle CPUs under its lock
    /// (`rcu_report_qs_rnp` drops a report whose `gp_seq` is stale): what
    /// the scan read and the bits it clears belong to one grace period,
    /// because only a holder of `lock` ends a grace period or starts the
    /// next. Without the lock, a task preempted between its reads and its
    /// `fetch_and` would clear, in a later grace period's mask, the bit of
    /// a CPU that was idle when it looked and is reading now: that grace
    /// period would end under the reader.
    fn scan_idle_locked(&self) -> bool {
        // G1 pairs with E1 (module docs).
        fence(Ordering::SeqCst);
        // One atomic update per mask word and one of the count, however
        // many CPUs are idle or offline.
        let nr = kernel::nr_cpus();
        let mut cleared = 0;
        let mut mask = 0;
        for (cpu, state) in self.cpus.iter().enumerate() {
            // Acquire (in `quiescent`) pairs with the full fence (Q1)
            // before the CPU's entry into the extended quiescent state, or
            // before the end of a reader's section on an unwatched CPU:
            // its read sections before it happen-before the end of this
            // grace period. Not quiescent: watched, or a reader inside
            // (E2), which reports when it leaves.
            if state.quiescent() {
                mask |= 1 << (cpu % BITS);
            }
            if cpu % BITS == BITS - 1 || cpu + 1 == nr {
                if mask != 0 {
                    let old = self.pending[cpu / BITS].fetch_and(!mask, Ordering::AcqRel);
                    cleared += (old & mask).count_ones() as usize;
                }
                mask = 0;
            }
        }
        cleared != 0 && self.pending_count.fetch_sub(cleared, Ordering::AcqRel) == cleared
    }

    /// With `lock` held: starts the requested grace periods and scans
    /// each, ending those whose scan cleared the last bit (every CPU
    /// idle), until one is left running or none is requested.
    fn advance_locked(&self) {
        while self.start_locked() && self.scan_idle_locked() {
            self.end_locked();
        }
    }

    /// Clears `cpu`'s pending bit; the CPU that clears the last one ends the
    /// grace period.
    fn clear(&self, cpu: usize) {
        let bit = 1 << (cpu % BITS);
        let old = self.pending[cpu / BITS].fetch_and(!bit, Ordering::AcqRel);
        if old & bit != 0 && self.pending_count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end();
        }
    }

    /// Ends the current grace period and starts the next if requested.
    fn end(&self) {
        let _locked = lock_irqsave(&self.lock);
        self.end_locked();
        self.advance_locked();
    }

    /// Ends the current grace period; `lock` is held.
    fn end_locked(&self) {
        let seq = self.gp_seq.load(Ordering::Relaxed);
        debug_assert_eq!(
            seq & STATE_MASK,
            1,
            "rcu: ending a grace period that is not running"
        );
        // Release: the quiescent states (Q1, AcqRel on the counter)
        // happen-before a waiter that sees the new value.
        self.gp_seq.store((seq | STATE_MASK) + 1, Ordering::Release);
        #[cfg(debug_assertions)]
        self.check_no_reader_before(seq);
    }

    /// Debug builds, at the end of the grace period that started at
    /// `start`: no read section that began on an unwatched CPU before that
    /// start is still open (it reports when it ends, and the grace period
    /// waits for that report: the scan saw its flag, E2 against G1). A
    /// grace period that ends under such a reader ended early: the
    /// engine's own invariant, checked where a schedule (the hostile host
    /// kernel's) could break it. Relaxed: a section that ended before
    /// this point cleared its mark before the report that this end
    /// happens after (the reports' AcqRel chain on `pending_count`).
    #[cfg(debug_assertions)]
    fn check_no_reader_before(&self, start: usize) {
        for (cpu, state) in self.cpus.iter().enumerate() {
            let since = state.unwatched_since.load(Ordering::Relaxed);
            if since != usize::MAX && !seq_ge(since, start) {
                panic!(
                    "rcu: the grace period that started at {start} ended while CPU {cpu} is \
                     inside a read section that began before it (at {since})"
                );
            }
        }
    }

    /// Asks for a grace period that completes `cookie`, starting one now if
    /// none runs.
    fn request(&self, cookie: usize) {
        if seq_ge(self.requested.load(Ordering::Relaxed), cookie)
            && self.gp_seq.load(Ordering::Relaxed) & STATE_MASK != 0
        {
            return;
        }
        let _locked = lock_irqsave(&self.lock);
        // Relaxed: `requested` and the state of `gp_seq` only change
        // under `lock` (the fast path above only skips work that is
        // already due).
        if !seq_ge(self.requested.load(Ordering::Relaxed), cookie) {
            self.requested.store(cookie, Ordering::Relaxed);
        }
        self.advance_locked();
    }

    /// This CPU passed a quiescent state.
    fn report(&self, cpu: usize) {
        // Acquire pairs with the Release publishing a new grace period (its
        // mask is then visible). A stale value only delays the report, and
        // the clear below is an AcqRel read-modify-write on the mask that
        // the start published with a Release swap.
        let seq = self.gp_seq.load(Ordering::Acquire);
        if seq & STATE_MASK == 0 {
            return;
        }
        let bit = 1 << (cpu % BITS);
        // Relaxed: a filter; the clear decides.
        if self.pending[cpu / BITS].load(Ordering::Relaxed) & bit == 0 {
            return;
        }
        // Q1: this CPU's read sections before this point happen-before the
        // end of the grace period.
        fence(Ordering::SeqCst);
        self.clear(cpu);
    }
}

// ---- kernel-facing calls ----------------------------------------------------

/// This CPU's RCU state, with preemption disabled until it drops: the id
/// and what is done with it belong to one CPU (a task preempted between
/// reading its id and reporting for it could report for a CPU it has left,
/// where another task is reading by then).
#[inline]
fn this_cpu() -> PerCpuRef<'static, CpuState> {
    engine().cpus.get()
}

/// Reports a quiescent state for this CPU: it is not inside a read-side
/// critical section. Call it at context switches, returns to user mode and
/// in long-running kernel loops. Cheap when no grace period waits for this
/// CPU (three loads). Preemption is disabled from reading the CPU id to
/// the report.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::cpu_online();
/// let cookie = rcu::start_poll(); // a writer waits for this CPU now
/// assert!(!rcu::poll(cookie));
/// // The scheduler, at a context switch (no reader can be running):
/// rcu::quiescent_state();
/// assert!(rcu::poll(cookie)); // this was the last CPU it waited for
/// # rcu::cpu_offline();
/// ```
///
/// # Panics
/// Inside a read-side critical section on this CPU, in every build (the
/// grace period would end under the reader). With `lockdep`, a CPU
/// holding a lock is reported.
#[doc(alias("rcu_qs", "rcu_note_context_switch", "cond_resched_rcu_qs"))]
#[inline]
#[track_caller]
pub fn quiescent_state() {
    let cpu = this_cpu();
    check_not_reading(&cpu, "rcu::quiescent_state()");
    crate::lockdep::assert_no_locks_held("rcu::quiescent_state");
    engine().report(cpu.cpu());
}

/// Panics if this CPU is inside a read section (a sleeping wait,
/// [`wait::might_sleep`](crate::wait::might_sleep), would switch tasks
/// there, a quiescent state under the reader) or, in debug builds, a
/// `call_rcu` callback; with lockdep, reports the locks held.
#[track_caller]
pub(crate) fn check_may_sleep() {
    // The read section (every build), a `call_rcu` callback (debug
    // builds), and with lockdep the locks held.
    check_may_wait("a sleeping wait (might_sleep)");
}

/// [`quiescent_state`] for RCU's own waits, named `what`, which checked for
/// held locks on entry and hold none while they wait (preemption enabled
/// between these calls).
#[track_caller]
pub(super) fn waiting_quiescent_state(what: &'static str) {
    let cpu = this_cpu();
    check_not_reading(&cpu, what);
    engine().report(cpu.cpu());
}

/// This CPU comes online: from now on grace periods wait for it. Call it on
/// the CPU, before its first read section.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// // A secondary CPU's entry (on the host, each thread is a CPU):
/// let cpu1 = std::thread::spawn(|| {
///     rcu::cpu_online(); // before its first read section
///     let guard = rcu::read_lock();
///     // ... read RCU-protected data ...
///     drop(guard);
///     rcu::cpu_offline();
/// });
/// cpu1.join().unwrap();
/// ```
#[doc(alias = "rcutree_online_cpu")]
pub fn cpu_online() {
    let cpu = this_cpu();
    callback::set_offline(cpu.cpu(), false);
    watch(&cpu);
}

/// RCU watches the calling CPU (`state` is its own) from now on.
fn watch(state: &CpuState) {
    // Relaxed: only this CPU writes its state.
    if !state.watched.load(Ordering::Relaxed) {
        state.watched.store(true, Ordering::Relaxed);
        // E1 pairs with G1.
        fence(Ordering::SeqCst);
    }
}

/// This CPU goes offline: grace periods stop waiting for it. Call it on the
/// CPU, after its last read section. Its queued callbacks stay queued and
/// are run by whichever CPU calls [`process_callbacks`].
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::cpu_online();
/// let cookie = rcu::start_poll(); // waits for this CPU
/// rcu::cpu_offline(); // the hot-unplug path, after its last reader
/// assert!(rcu::poll(cookie)); // no longer
/// ```
///
/// # Panics
/// Inside a read-side critical section, in every build.
#[doc(alias = "rcutree_report_cpu_dead")]
#[track_caller]
pub fn cpu_offline() {
    let cpu = this_cpu();
    check_not_reading(&cpu, "rcu::cpu_offline()");
    offline_cpu(cpu.cpu());
}

/// `cpu` goes offline; it is the calling CPU, or one that runs nothing any
/// more (a host test thread that exited).
///
/// # Panics
/// If a read section is still open on `cpu` (a leaked guard).
pub(crate) fn offline_cpu(cpu: usize) {
    let state = engine().cpus.cpu(cpu);
    if state.reading() {
        debug::in_read_section(cpu, "a CPU going offline");
    }
    eqs_enter_cpu(cpu);
    callback::set_offline(cpu, true);
}

/// The host kernel's context switch (a preemption at one of its points):
/// a quiescent state for this CPU, without lockdep's held-lock check (a
/// task holding a sleeping lock may be switched out).
#[cfg(all(feature = "hostile", not(ksync_loom)))]
#[track_caller]
pub(crate) fn kernel_quiescent_state() {
    let cpu = this_cpu();
    check_not_reading(&cpu, "a context switch (the host kernel's preemption)");
    engine().report(cpu.cpu());
}

/// The host kernel switches the calling task out for a while (it blocks
/// in `Kernel::block`, or a deep preemption of the hostile kernel): a
/// context switch, and its CPU runs nothing meanwhile, so it goes idle
/// to RCU (an extended quiescent state, as the idle task's CPU is).
/// Returns whether RCU watched it, for [`kernel_switch_in`].
#[cfg(all(feature = "test-hooks", not(ksync_loom)))]
#[track_caller]
pub(crate) fn kernel_switch_out() -> bool {
    let cpu = this_cpu();
    check_not_reading(&cpu, "a context switch (the host kernel's)");
    // Relaxed: only this CPU writes its state.
    let watched = cpu.watched.load(Ordering::Relaxed);
    eqs_enter_cpu(cpu.cpu());
    watched
}

/// The task switched out by [`kernel_switch_out`] runs again: its CPU
/// is watched again if it was.
#[cfg(all(feature = "test-hooks", not(ksync_loom)))]
pub(crate) fn kernel_switch_in(watched: bool) {
    if watched {
        watch(&this_cpu());
    }
}

/// The host kernel moves the calling task off `cpu` (its CPU): the CPU
/// runs nothing from now on, so it goes offline to RCU, as when a host
/// thread exits. Returns whether RCU watched it (the task's next CPU then
/// comes online).
#[cfg(all(feature = "hostile", not(ksync_loom)))]
pub(crate) fn kernel_cpu_leave(cpu: usize) -> bool {
    // Relaxed: only this CPU writes its state, and the task runs on it.
    let watched = engine().cpus.cpu(cpu).watched.load(Ordering::Relaxed);
    offline_cpu(cpu);
    watched
}

/// The host kernel: `cpu` runs no task (its idle loop) and passes a
/// quiescent state. The caller keeps any task from moving onto it
/// meanwhile.
#[cfg(all(feature = "hostile", not(ksync_loom)))]
pub(crate) fn kernel_idle_cpu_report(cpu: usize) {
    let state = engine().cpus.cpu(cpu);
    if state.reading() {
        debug::in_read_section(cpu, "an idle CPU's quiescent state");
    }
    eqs_enter_cpu(cpu);
}

/// This CPU enters its idle loop: an extended quiescent state, so an idle
/// CPU never holds up a grace period.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::cpu_online();
/// let cookie = rcu::start_poll();
/// // The idle loop:
/// rcu::idle_enter();
/// assert!(rcu::poll(cookie)); // an idle CPU holds up no grace period
/// // ... halt until an interrupt; its handler may read under RCU ...
/// rcu::idle_exit();
/// # rcu::cpu_offline();
/// ```
///
/// Readers need not leave it first: a read section on a CPU that RCU is
/// not watching (idle, offline, never online) makes the CPU watched until
/// it ends, as Linux's `rcu_irq_enter` does for interrupt handlers in
/// idle. An interrupt handler therefore needs neither `idle_exit` nor
/// `idle_enter`; one that calls them on a CPU that was not idle panics if
/// it interrupted a read section, or a [`read_lock`] that has already set
/// its flag (the check below; a `read_lock` interrupted before that reads
/// `watched` afterwards and watches the CPU itself), and otherwise leaves
/// the CPU idle to RCU until its next [`idle_exit`] or [`cpu_online`],
/// which is sound (its readers watch themselves) but lets grace periods
/// skip it.
///
/// # Panics
/// Inside a read-side critical section, in every build.
#[doc(alias = "rcu_idle_enter")]
#[track_caller]
pub fn idle_enter() {
    let cpu = this_cpu();
    check_not_reading(&cpu, "rcu::idle_enter()");
    eqs_enter_cpu(cpu.cpu());
}

/// This CPU leaves its idle loop: grace periods wait for it again.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::cpu_online();
/// rcu::idle_enter();
/// // ... `hlt`/`wfi` returns: a task became runnable ...
/// rcu::idle_exit();
/// let cookie = rcu::start_poll();
/// assert!(!rcu::poll(cookie)); // waits for this CPU again
/// rcu::quiescent_state();
/// # rcu::cpu_offline();
/// ```
#[doc(alias = "rcu_idle_exit")]
pub fn idle_exit() {
    watch(&this_cpu());
}

/// `cpu` enters an extended quiescent state; it is the calling CPU, or one
/// that runs nothing any more. No read section is open on it (checked by
/// the callers).
fn eqs_enter_cpu(cpu: usize) {
    let e = engine();
    let watched = &e.cpus.cpu(cpu).watched;
    // Relaxed: only this CPU writes its state.
    if watched.load(Ordering::Relaxed) {
        // Q1 (orders this CPU's read sections first), then leave.
        fence(Ordering::SeqCst);
        watched.store(false, Ordering::Relaxed);
        // Pairs with G1: a grace period that started before this point
        // and saw us watching gets our report below.
        fence(Ordering::SeqCst);
    }
    e.report(cpu);
}

// ---- writers ----------------------------------------------------------------

/// A cookie for the state now: [`poll`] on it returns `true` once a full
/// grace period has elapsed since this call. Starts nothing.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// let cookie = rcu::get_state(); // after unpublishing an object; starts nothing
/// // ... someone else's grace period runs ...
/// rcu::synchronize();
/// assert!(rcu::poll(cookie)); // the object may be freed
/// ```
#[doc(alias = "get_state_synchronize_rcu")]
#[inline]
#[must_use = "a cookie is only useful passed to `poll` or `cond_synchronize`"]
pub fn get_state() -> Cookie {
    // Orders the caller's earlier updates before the snapshot (Linux's
    // smp_mb() in get_state_synchronize_rcu).
    fence(Ordering::SeqCst);
    let seq = engine().gp_seq.load(Ordering::Acquire);
    Cookie((seq + 7) & !STATE_MASK)
}

/// [`get_state`], and makes sure a grace period that completes the cookie
/// will run.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::cpu_online();
/// let cookie = rcu::start_poll(); // a grace period is under way now
/// rcu::quiescent_state(); // the CPUs pass through quiescent states...
/// assert!(rcu::poll(cookie)); // ...and nobody had to wait for it
/// # rcu::cpu_offline();
/// ```
#[doc(alias = "start_poll_synchronize_rcu")]
#[must_use = "a cookie is only useful passed to `poll` or `cond_synchronize`"]
pub fn start_poll() -> Cookie {
    let cookie = get_state();
    engine().request(cookie.0);
    cookie
}

/// Whether a full grace period has elapsed since `cookie` was taken. When
/// `true`, the caller may free what it unpublished before taking it, as
/// after [`synchronize`].
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, Cookie};
///
/// rcu::cpu_online();
/// let cookie = rcu::start_poll();
/// assert!(!rcu::poll(cookie)); // this CPU has not passed a quiescent state
/// rcu::quiescent_state();
/// assert!(rcu::poll(cookie));
/// assert!(rcu::poll(Cookie::COMPLETED));
/// # rcu::cpu_offline();
/// ```
#[doc(alias = "poll_state_synchronize_rcu")]
#[inline]
#[must_use = "only `true` means a grace period has passed"]
pub fn poll(cookie: Cookie) -> bool {
    if cookie == Cookie::COMPLETED {
        return true;
    }
    // Acquire pairs with the Release store that ended the grace period.
    let done = seq_ge(engine().gp_seq.load(Ordering::Acquire), cookie.0);
    if done {
        // W1: the readers' accesses happen-before the caller's free.
        fence(Ordering::SeqCst);
    }
    done
}

/// Waits until [`poll`]`(cookie)` holds, starting a grace period if needed.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// let cookie = rcu::get_state(); // when the old table was unpublished
/// // ... rebuild the index, perhaps long enough for a grace period ...
/// rcu::cond_synchronize(cookie); // waits only if none has passed since
/// assert!(rcu::poll(cookie));
/// ```
///
/// # Panics
/// Inside a read-side critical section (every build), or from a
/// [`call_rcu`] callback (debug builds), even when the cookie has
/// completed: it is a bug either way.
#[doc(alias = "cond_synchronize_rcu")]
#[track_caller]
pub fn cond_synchronize(cookie: Cookie) {
    check_may_wait("rcu::cond_synchronize()");
    if !poll(cookie) {
        engine().request(cookie.0);
        wait_for(cookie, "rcu::cond_synchronize()");
    }
}

/// Waits for a full grace period: every read section that started before
/// the call has finished when it returns. The calling CPU reports its own
/// quiescent states while it waits, so it must not be inside a read
/// section.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuPtr};
///
/// static CONFIG: RcuPtr<u32> = RcuPtr::null();
///
/// // SAFETY: fresh boxes, each freed only after it is unpublished and a
/// // grace period has passed.
/// unsafe { CONFIG.publish(Box::into_raw(Box::new(1500))) };
/// let old = unsafe { CONFIG.publish(Box::into_raw(Box::new(9000))) };
/// rcu::synchronize(); // synchronize_rcu: no reader can still see `old`
/// drop(unsafe { Box::from_raw(old) });
/// # rcu::synchronize();
/// # drop(unsafe { Box::from_raw(CONFIG.publish(core::ptr::null_mut())) });
/// ```
///
/// # Panics
/// Inside a read-side critical section (every build), or from a
/// [`call_rcu`] callback (debug builds).
#[doc(alias = "synchronize_rcu")]
#[track_caller]
pub fn synchronize() {
    check_may_wait("rcu::synchronize()");
    let cookie = start_poll();
    wait_for(cookie, "rcu::synchronize()");
}

#[track_caller]
fn wait_for(cookie: Cookie, what: &'static str) {
    while !poll(cookie) {
        waiting_quiescent_state(what);
        spin_loop();
    }
}

/// The current grace-period sequence number (for statistics and tests).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// let before = rcu::gp_seq();
/// rcu::synchronize();
/// assert!(rcu::gp_seq().wrapping_sub(before) >= 4); // one full grace period
/// ```
#[must_use]
pub fn gp_seq() -> usize {
    engine().gp_seq.load(Ordering::Relaxed)
}
