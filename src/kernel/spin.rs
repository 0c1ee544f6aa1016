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
//!   time without getting the lock, when CPUs are preemptible: give the CPU
//!   away (yield the thread, halt until an interrupt or a kick). Unset, the
//!   host test hooks yield the thread and everything else keeps spinning,
//!   which is right on bare metal.
//!
//! These are settings rather than [`Kernel`](super::Kernel) hooks on
//! purpose: plain spinlocks must work in a binary that never calls
//! [`set_kernel!`](crate::set_kernel), and the lock fast paths should test
//! one cached, predictable flag (Linux's static key) rather than call out.
//!
//! ```
//! use ksync::kernel::{self, SpinWait};
//!
//! // A guest kernel that halts a waiting vCPU until the next interrupt:
//! fn halt_until_interrupt() { /* e.g. `sti; hlt` with interrupts enabled */ }
//! static WAIT: SpinWait = SpinWait { wait: halt_until_interrupt, kick: None };
//!
//! kernel::set_vcpu_preemptible(true);
//! kernel::set_spin_wait(&WAIT);
//! assert!(kernel::vcpu_preemptible());
//! ```

use crate::sync::config::{AtomicPtr, AtomicU8, Ordering};
use Ordering::Relaxed;

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
        !cfg!(loom) && (cfg!(feature = "test-hooks") || crate::arch::hypervisor_present());
    // Racing detections store the same answer. A store, not a
    // compare-exchange: targets without CAS (thumbv6m) have atomic stores.
    MODE.store(if preemptible { PREEMPTIBLE } else { DEDICATED }, Relaxed);
    preemptible
}

/// What a lock waiter does when it has spun for a bounded time without
/// progress and CPUs are preemptible ([`set_spin_wait`]).
#[derive(Debug)]
pub struct SpinWait {
    /// Called by a waiter after [`SPIN_LIMIT`] unsuccessful rounds. It may
    /// return at once, yield the thread, or halt the CPU until the next
    /// interrupt or [`kick`](SpinWait::kick); the waiter re-checks the
    /// lock when it returns, so a spurious return is always fine.
    pub wait: fn(),
    /// Called by an unlocker (only when CPUs are preemptible) to wake CPUs
    /// halted in [`wait`](SpinWait::wait) (e.g. `sev`, or an IPI). `None`
    /// when `wait` never sleeps past the next interrupt.
    pub kick: Option<fn()>,
}

/// Rounds a waiter spins before it calls [`SpinWait::wait`] (2 under
/// loom, so that small models reach the give-away path).
pub const SPIN_LIMIT: u32 = if cfg!(loom) { 2 } else { 1 << 10 };

/// The registered policy; null means the default.
static WAIT: AtomicPtr<SpinWait> = AtomicPtr::new(core::ptr::null_mut());

/// The default: with `test-hooks` a thread yields (a host thread that
/// waits for a descheduled holder should let it run); elsewhere keep
/// spinning, which is right on bare metal.
static DEFAULT_WAIT: SpinWait = SpinWait {
    wait: default_wait,
    kick: None,
};

fn default_wait() {
    #[cfg(all(feature = "test-hooks", not(loom)))]
    std::thread::yield_now();
    // Under loom the waiter's relax has just yielded to the model.
    #[cfg(not(any(feature = "test-hooks", loom)))]
    crate::sync::spin_loop();
}

/// Registers what waiters do after a bounded spin when CPUs are
/// preemptible (see the module docs).
pub fn set_spin_wait(wait: &'static SpinWait) {
    // Release pairs with the Acquire load in `policy`: a waiter that sees
    // the pointer sees the struct it points to.
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

/// Wakes CPUs that may be halted in [`SpinWait::wait`]. Lock releases call
/// it only when [`vcpu_preemptible`] is set.
#[inline]
pub(crate) fn kick_waiters() {
    if let Some(kick) = policy().kick {
        kick();
    }
}

/// One waiter's state: spins with the caller's relax strategy and, when
/// asked to (`give_away`: CPUs are preemptible, or the lock's queue must
/// stay live behind a descheduled waiter), gives the CPU away every
/// [`SPIN_LIMIT`] rounds.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    rounds: u32,
}

impl Waiter {
    pub(crate) const fn new() -> Self {
        Self { rounds: 0 }
    }

    /// One round of waiting.
    #[inline]
    pub(crate) fn wait<R: spin::relax::RelaxStrategy>(&mut self, give_away: bool) {
        crate::sync::relax::<R>();
        if give_away {
            self.rounds += 1;
            if self.rounds >= SPIN_LIMIT {
                self.rounds = 0;
                (policy().wait)();
            }
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
pub(crate) const BACKOFF_MAX: u32 = if cfg!(loom) { 1 } else { 64 };

impl Backoff {
    pub(crate) const fn new() -> Self {
        Self {
            waiter: Waiter::new(),
            step: 1,
        }
    }

    /// Waits after a failed attempt.
    #[inline]
    pub(crate) fn backoff<R: spin::relax::RelaxStrategy>(&mut self) {
        for _ in 0..self.step {
            self.waiter.wait::<R>(true);
        }
        self.step = (self.step * 2).min(BACKOFF_MAX);
    }
}
