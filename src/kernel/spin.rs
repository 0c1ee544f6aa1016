//! How lock waiters behave when a CPU can be descheduled while it spins.
//!
//! On bare metal with one CPU per core a spinning CPU is always running, so
//! FIFO hand-off (the ticket lock, the queued lock) is fair and fast. In a
//! guest with more vCPUs than host cores, or in host tests where threads
//! play CPUs, the CPU a FIFO lock hands itself to may not be running: every
//! other waiter then spins until the host schedules it again (lock-waiter
//! preemption), and throughput collapses by orders of magnitude. Linux
//! meets this with `virt_spin_lock()` (a test-and-set lock in guests) and
//! paravirt spinlocks (spin a bounded time, then halt until kicked).
//!
//! ksync does the same, driven by two settings:
//!
//! * [`set_vcpu_preemptible`]: whether CPUs may be descheduled while they
//!   spin. When it is on, the FIFO locks (the ticket lock, the lock inside
//!   [`LockRef`](crate::LockRef), the queued lock) hand off by test-and-set
//!   with a bounded backoff instead of strict FIFO: fairness is traded for
//!   progress. Unset, the answer is detected once: on x86_64 the CPUID
//!   "hypervisor present" bit (leaf 1, ECX bit 31); with the `test-hooks`
//!   feature, yes (threads are preemptible); otherwise no. Kernels on other
//!   architectures that know they are guests say so at boot.
//! * [`set_spin_wait`]: what a waiter does after it has spun for a bounded
//!   time without getting the lock (in either mode: FIFO waiters of the
//!   queued lock give the CPU away too): give the CPU away (yield the
//!   thread, or halt until a kick, latched like `WFE`/`SEV`: see
//!   [`SpinWait`]'s contract). Unset, the host test hooks yield the thread
//!   and everything else keeps spinning, which is right on bare metal.
//!
//! These are settings rather than [`Kernel`](super::Kernel) hooks on
//! purpose: plain spinlocks must work in a binary that never calls
//! [`set_kernel!`](crate::set_kernel), and the lock fast paths should test
//! one cached, predictable flag (Linux's static key) rather than call out.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::kernel::{self, SpinWait};
//!
//! // A guest kernel that halts a waiting vCPU until kicked (`wfe`, with
//! // `dsb; sev` as the latched kick; see `SpinWait`'s contract):
//! fn halt_until_kicked() { /* `wfe` */ }
//! fn kick_all() { /* `dsb ish; sev` */ }
//! static WAIT: SpinWait = SpinWait { wait: halt_until_kicked, kick: Some(kick_all) };
//!
//! kernel::set_vcpu_preemptible(true);
//! kernel::set_spin_wait(&WAIT);
//! assert!(kernel::vcpu_preemptible());
//! ```

use crate::sync::config::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use crate::sync::{StatCounter, fence};
use Ordering::{Relaxed, SeqCst};

/// Unknown yet: detect on first use.
const UNKNOWN: u8 = 0;
/// One CPU per core: strict FIFO.
const DEDICATED: u8 = 1;
/// CPUs may be descheduled while spinning.
const PREEMPTIBLE: u8 = 2;

/// The cached answer. This module's atomics are `core`'s even under loom:
/// they hold configuration, not part of any modelled algorithm, and must
/// be buildable in `static`s.
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Says whether CPUs may be descheduled while they spin (a guest with
/// more vCPUs than host cores, threads playing CPUs). Set it once at boot,
/// before other CPUs take locks; changing it while locks are contended is
/// safe (every mode excludes), only fairness changes.
#[doc(alias = "virt_spin_lock")]
pub fn set_vcpu_preemptible(preemptible: bool) {
    // Relaxed: the mode chooses a waiting strategy; exclusion never depends
    // on which one a CPU uses.
    MODE.store(if preemptible { PREEMPTIBLE } else { DEDICATED }, Relaxed);
}

/// Whether CPUs may be descheduled while they spin (see
/// [`set_vcpu_preemptible`]); detected on first use when never set.
#[inline]
pub fn vcpu_preemptible() -> bool {
    let mode = MODE.load(Relaxed);
    // The FIFO fast paths test one compare (a `match` put two in front of
    // them); the other modes call out of line anyway.
    if mode == DEDICATED {
        return false;
    }
    mode == PREEMPTIBLE || detect()
}

#[cold]
fn detect() -> bool {
    // loom models choose the mode themselves (FIFO unless a model sets it).
    let preemptible =
        !cfg!(ksync_loom) && (cfg!(feature = "test-hooks") || crate::arch::hypervisor_present());
    // Racing detections store the same answer. A store, not a
    // compare-exchange: targets without CAS (thumbv6m) have atomic stores.
    MODE.store(if preemptible { PREEMPTIBLE } else { DEDICATED }, Relaxed);
    preemptible
}

/// What a lock waiter does when it has spun for a bounded time without
/// progress ([`set_spin_wait`]).
///
/// # The contract
///
/// A waiter checks its condition (the lock looks free, its queue node was
/// handed the lock, its successor linked itself, ...), and when the check
/// fails calls [`wait`](SpinWait::wait), then checks again. `wait` may
/// return at once, yield the thread, or halt the CPU; a spurious return is
/// always fine. If `wait` can sleep for longer than some bounded time (until
/// an interrupt that may never come, or until a kick), the policy must
/// have a [`kick`](SpinWait::kick), and the pair must behave like the
/// event register of Arm's `WFE`/`SEV`:
///
/// * **Latched.** A kick that lands after a waiter's last check of its
///   condition, even before it has called `wait`, makes that `wait` return
///   (at most one stale return later, as `WFE` after an old `SEV`). A kick
///   wakes every CPU that may be waiting, not just one.
/// * **Ordered.** Whatever the kicking CPU wrote before it called `kick` is
///   visible to a waiter whose `wait` returned because of that kick (a
///   `dsb` before `sev`; an IPI is sent after the stores it announces).
///
/// The locks keep one rule: every store that can make some waiter's
/// condition true is followed by `kick_waiters` (the unlocks, the queued
/// lock's link, hand-off and pending-bit undo). That holds in both modes
/// of [`set_vcpu_preemptible`] and across a switch between them: a waiter
/// that started waiting in one mode is kicked by an unlocker in the other.
///
/// So that an unlock does not pay for a kick nobody needs, a waiter
/// advertises that it may halt before it first calls a `wait` that has a
/// kick, and re-checks its condition after advertising; an unlocker kicks
/// only when some CPU has advertised (Linux's paravirt qspinlock has the
/// waiter mark the lock "slow" and the unlocker's fast path test it). The
/// two sides are a Dekker pair, each a write, a `SeqCst` fence and a read:
/// the waiter increments the count of halting CPUs, fences, re-checks its
/// condition; the waker stores the condition, fences, reads the count. The
/// fences' total order lets at most one of the two reads miss the other
/// side's write: either the waiter sees its condition true and does not
/// halt, or the waker sees the waiter and kicks it (and the kick, latched,
/// is not lost if it lands before the halt). The count is process-wide,
/// not per lock: a kick may wake CPUs waiting on other locks, which then
/// re-check and wait again.
#[derive(Debug)]
pub struct SpinWait {
    /// Called by a waiter after [`SPIN_LIMIT`] unsuccessful rounds. It may
    /// return at once, yield the thread, or halt the CPU until `kick`; the
    /// waiter re-checks its condition when it returns, so a spurious return
    /// is always fine. The locks call it in both modes (FIFO waiters give
    /// the CPU away too, so that a queue stays live behind a descheduled
    /// CPU); a waiter may call it with interrupts masked (an
    /// [`IrqSave`](crate::spinlock::RawIrqSave) lock), so a `wait` that
    /// halts must be woken by `kick` whatever the interrupt mask is (or
    /// unmask around the halt, if the kernel allows handlers there).
    pub wait: fn(),
    /// Wakes every CPU that may be in [`wait`](SpinWait::wait), latched and
    /// ordered as the [contract](SpinWait#the-contract) says (e.g. `dsb;
    /// sev`, or an IPI to the other CPUs). Required when `wait` can sleep
    /// past a bounded time; `None` when it never does (it yields or
    /// spins). Called only while some waiter has advertised that it may
    /// halt, from unlock paths and the queued lock's hand-offs, possibly
    /// with interrupts masked: it must not take a lock that a waiter can
    /// hold.
    pub kick: Option<fn()>,
}

/// Rounds a waiter spins before it calls [`SpinWait::wait`] (2 under
/// loom, so that small models reach the give-away path).
pub const SPIN_LIMIT: u32 = if cfg!(ksync_loom) { 2 } else { 1 << 10 };

/// The registered policy; null means the default.
static WAIT: AtomicPtr<SpinWait> = AtomicPtr::new(core::ptr::null_mut());

/// Whether the registered policy has a kick: the one flag an unlock tests
/// when no policy can halt (the common case: the default, or a `wait`
/// that yields or spins).
static HAS_KICK: AtomicBool = AtomicBool::new(false);

/// How many waiters may be halted in a `wait` that needs a kick (the
/// waiters' half of the Dekker pair; see [`SpinWait`]). A `core` atomic
/// even under loom (it lives in a `static`); loom runs one thread at a
/// time, so the models see it sequentially consistent.
static HALTING: StatCounter = StatCounter::new(0);

/// The default: with `test-hooks` a thread yields (a host thread that
/// waits for a descheduled holder should let it run); elsewhere keep
/// spinning, which is right on bare metal.
static DEFAULT_WAIT: SpinWait = SpinWait {
    wait: default_wait,
    kick: None,
};

fn default_wait() {
    #[cfg(all(feature = "test-hooks", not(ksync_loom)))]
    std::thread::yield_now();
    // Under loom the waiter's relax has just yielded to the model.
    #[cfg(not(any(feature = "test-hooks", ksync_loom)))]
    crate::sync::spin_loop();
}

/// Registers what waiters do after a bounded spin (see the module docs and
/// [`SpinWait`]'s contract). Set it at boot, before other CPUs contend for
/// locks (then every CPU's first wait and first unlock are ordered after
/// it). Installed later, while locks are contended, a halting policy can
/// miss a kick for a waiter that halts before the unlocking CPU sees the
/// new policy (the waiter then sleeps until the next kick); and a halting
/// policy must never be replaced while a CPU may be waiting in it (its
/// kick would no longer be sent).
pub fn set_spin_wait(wait: &'static SpinWait) {
    // The flag first, then the pointer: a CPU that sees the new policy
    // (Acquire in `policy`) sees the flag too. Relaxed: ordered by the
    // Release store below.
    HAS_KICK.store(wait.kick.is_some(), Relaxed);
    // Release pairs with the Acquire load in `policy`: a waiter that sees
    // the pointer sees the struct it points to, and the flag.
    WAIT.store(core::ptr::from_ref(wait).cast_mut(), Ordering::Release);
}

#[inline]
fn policy() -> &'static SpinWait {
    // Acquire pairs with the Release store in `set_spin_wait`.
    let ptr = WAIT.load(Ordering::Acquire);
    if ptr.is_null() {
        &DEFAULT_WAIT
    } else {
        // SAFETY: only `set_spin_wait` stores a non-null pointer, taken
        // from a `&'static SpinWait`.
        unsafe { &*ptr }
    }
}

/// Wakes CPUs that may be halted in [`SpinWait::wait`]. Called after every
/// store that can make a waiter's condition true, in every mode; kicks
/// only when some waiter has advertised that it may halt.
#[inline]
pub(crate) fn kick_waiters() {
    // Relaxed: see `set_spin_wait`. Without a kick nobody can be halted
    // past a bounded time: nothing to do (the common case, one load).
    if HAS_KICK.load(Relaxed) {
        kick_if_halting();
    }
}

#[cold]
#[inline(never)]
fn kick_if_halting() {
    // The waker's half of the Dekker pair: the caller's store of the
    // condition, this fence, the read of `HALTING`. Pairs with the fence in
    // `Waiter::advertise`: if this read misses the waiter's increment, the
    // waiter's re-check after its fence sees our store.
    fence(SeqCst);
    if HALTING.load(Relaxed) != 0 {
        if let Some(kick) = policy().kick {
            kick();
        }
    }
}

/// One waiter's state: spins with the caller's relax strategy and, when
/// asked to (`give_away`: CPUs are preemptible, or the lock's queue must
/// stay live behind a descheduled waiter), gives the CPU away every
/// [`SPIN_LIMIT`] rounds. Before its first call of a `wait` that needs a
/// kick it advertises itself (and returns once, so that the caller
/// re-checks its condition after advertising); dropping it withdraws the
/// advertisement. The caller must re-check its condition after every
/// [`wait`](Self::wait) (every loop here does: check, wait, check).
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    rounds: u32,
    /// Whether this waiter is counted in `HALTING`.
    advertised: bool,
}

impl Waiter {
    pub(crate) const fn new() -> Self {
        Self {
            rounds: 0,
            advertised: false,
        }
    }

    /// One round of waiting. Returns whether it advertised or gave the CPU
    /// away: the caller must re-check its condition before waiting again.
    #[inline]
    pub(crate) fn wait<R: spin::relax::RelaxStrategy>(&mut self, give_away: bool) -> bool {
        crate::sync::relax::<R>();
        if give_away {
            self.rounds += 1;
            if self.rounds >= SPIN_LIMIT {
                self.give_away();
                return true;
            }
        }
        false
    }

    #[cold]
    fn give_away(&mut self) {
        let policy = policy();
        if policy.kick.is_some() && !self.advertised {
            // Advertise first; the caller re-checks before the next round,
            // which then waits (`rounds` stays at the limit).
            self.advertise();
            return;
        }
        self.rounds = 0;
        (policy.wait)();
    }

    /// The waiter's half of the Dekker pair (see [`SpinWait`]): the
    /// increment, this fence, then the caller's re-check of its condition.
    /// Pairs with the fence in `kick_if_halting`.
    fn advertise(&mut self) {
        // Relaxed: the fence orders it.
        HALTING.fetch_add(1, Relaxed);
        fence(SeqCst);
        self.advertised = true;
    }
}

impl Drop for Waiter {
    #[inline]
    fn drop(&mut self) {
        if self.advertised {
            // Relaxed: a waker that still sees the count kicks once more
            // than needed, which is harmless.
            HALTING.fetch_sub(1, Relaxed);
        }
    }
}

/// Bounded exponential backoff for test-and-set hand-off: after a failed
/// attempt, wait 1, 2, 4, ... up to [`BACKOFF_MAX`] relax rounds before the
/// next, and count the rounds toward the [`Waiter`]'s give-away bound.
#[derive(Debug)]
pub(crate) struct Backoff {
    waiter: Waiter,
    step: u32,
}

/// The longest backoff, in relax rounds (1 under loom: each round is a
/// model scheduling point, and longer waits explore nothing new).
pub(crate) const BACKOFF_MAX: u32 = if cfg!(ksync_loom) { 1 } else { 64 };

impl Backoff {
    pub(crate) const fn new() -> Self {
        Self {
            waiter: Waiter::new(),
            step: 1,
        }
    }

    /// Waits after a failed attempt. Stops early when the waiter
    /// advertised or gave the CPU away: the caller re-checks the lock
    /// before any further `wait` (the [`SpinWait`] contract).
    #[inline]
    pub(crate) fn backoff<R: spin::relax::RelaxStrategy>(&mut self) {
        for _ in 0..self.step {
            if self.waiter.wait::<R>(true) {
                break;
            }
        }
        self.step = (self.step * 2).min(BACKOFF_MAX);
    }
}
