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
//!   feature, yes (threads are preemptible); otherwise FIFO *watching*:
//!   the locks' own waiters find out (below). Either explicit answer is
//!   final; [`set_vcpu_mode`] can also re-arm the watch.
//! * [`set_spin_wait`]: what a waiter does after it has spun for a bounded
//!   time without getting the lock (in every mode: FIFO waiters give the
//!   CPU away too, so that a queue stays live behind a descheduled CPU): give the CPU away (yield the
//!   thread, or halt until a kick, latched like `WFE`/`SEV`: see
//!   [`SpinWait`]'s contract). Unset, the host test hooks yield the thread
//!   and everything else keeps spinning, which is right on bare metal.
//!
//! These are settings rather than [`Kernel`](super::Kernel) hooks on
//! purpose: plain spinlocks must work in a binary that never calls
//! [`set_kernel!`](crate::set_kernel), and the lock fast paths should test
//! one cached, predictable flag (Linux's static key) rather than call out.
//! For the same reason the report of a detected stall is a setting too
//! ([`set_vcpu_stall_hook`], and [`vcpu_stall`] to ask afterwards).
//!
//! How the locks find out by themselves, and why their bound never trips
//! on real hardware, is documented on [`set_vcpu_preemptible`] (sections
//! "Watching for descheduled CPUs" and "The bound").
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

// The mode's states, ordered so that the FIFO fast paths decide with one
// compare (`mode < PREEMPTIBLE`: strict FIFO, watched or not).

/// Strict FIFO, as the kernel said (`set_vcpu_preemptible(false)`): never
/// switched by a stall.
const FIFO_FORCED: u8 = 0;
/// FIFO, watching: the default where nothing says the CPUs are vCPUs. A
/// FIFO waiter that sees no hand-off for [`STALL_BOUND_MS`] switches the
/// mode to [`PREEMPTIBLE`], once.
const FIFO_WATCHING: u8 = 1;
/// CPUs may be descheduled while spinning: said, detected at first use, or
/// switched to by a stall.
const PREEMPTIBLE: u8 = 2;
/// Unknown yet: detect on first use.
const UNKNOWN: u8 = 3;

/// The cached answer. This module's atomics are `core`'s even under loom:
/// they hold configuration, not part of any modelled algorithm, and must
/// be buildable in `static`s.
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Says whether CPUs may be descheduled while they spin (a guest with
/// more vCPUs than host cores, threads playing CPUs). Set it once at boot,
/// before other CPUs take locks; changing it while locks are contended is
/// safe (every mode excludes), only fairness changes.
///
/// Either answer is final: `false` is strict FIFO that no stall switches
/// (see [below](#watching-for-descheduled-cpus) for what the FIFO
/// waiters then do about a long stall), `true` is test-and-set
/// hand-off. A kernel that never calls this gets the detected default,
/// which on architectures without a hypervisor bit is FIFO *watching* for
/// stalls.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
/// # fn booted_with_dedicated_vcpus() -> bool { true }
///
/// // At boot, before the other CPUs start: a guest whose vCPUs are pinned
/// // to host cores of their own keeps the fair FIFO hand-off for good.
/// if booted_with_dedicated_vcpus() {
///     kernel::set_vcpu_preemptible(false);
/// }
/// assert!(!kernel::vcpu_preemptible());
/// ```
///
/// # Watching for descheduled CPUs
///
/// Only x86_64 has an architectural "you are a guest" bit, and it says
/// nothing about oversubscription (a guest with pinned, dedicated vCPUs
/// sets it too). What every architecture can see is the symptom: a FIFO
/// waiter whose lock does not move. So where nothing was said, the FIFO
/// locks start in strict FIFO and each FIFO waiter watches the value it
/// waits on (the ticket lock's and lockref's `owner`; the queued lock's
/// word, seen from the pending CPU, the queue head and every queued CPU,
/// and the head's wait for its successor's link) with the architecture's
/// counter (x86_64 `rdtsc`, aarch64 `CNTVCT_EL0`, riscv64 `rdtime`) at
/// its real rate ([`set_stall_clock_rate`]; where no rate is known, spin
/// rounds, [`STALL_BOUND_ROUNDS`]), looking every 128 rounds. The first waiter that sees no change for [`STALL_BOUND_MS`]
/// switches the process to test-and-set hand-off, once and for good, and
/// reports it ([`vcpu_stall`], [`set_vcpu_stall_hook`]). Waiters already
/// queued keep their places and drain; new acquisitions take the
/// test-and-set path. A kernel that said `set_vcpu_preemptible(false)`
/// ("FIFO forced") is never switched.
///
/// In every mode, every FIFO waiter (the ticket lock's, lockref's and the
/// queued lock's) gives the CPU away through [`SpinWait::wait`] every
/// [`SPIN_LIMIT`] rounds. With FIFO forced on an oversubscribed host that
/// is the only bound there can be on a wait behind a descheduled CPU (a
/// FIFO waiter cannot overtake it: its ticket must be served, its queue
/// place handed on), and it is as good as the kernel's policy: one that
/// halts (`wfi`, `hlt` with a kick) or yields frees the host CPU for the
/// CPU everyone waits for; the bare-metal default keeps spinning, and then
/// only the host's scheduler ends the wait. (Measured with host threads,
/// 8 on 2 cores, strict FIFO ticket lock, 20,000 acquisitions each: with
/// the ticket waiters spinning only, 11,518 to 91,695 of the 160,000
/// done after 60 s in four runs, the longest single wait 96-307 ms;
/// yielding every `SPIN_LIMIT` rounds, all of them in 3.2-12.7 s, the
/// longest wait 15 ms.)
///
/// # The bound
///
/// A FIFO waiter's clock restarts at every hand-off it sees, so what it
/// measures is the time in which *no* hand-off happened ahead of it: for
/// the ticket lock and lockref one critical section (the holder's) plus
/// one hand-off, as `owner` moves on at each; for the queued lock's
/// pending CPU and queue head likewise (the lock word they wait on
/// changes at each hand-off); for a CPU further back in the queue, the
/// hand-offs its predecessor saw, passed down the queue one node at a
/// time (each queued CPU advances a counter in its node when it sees its
/// predecessor's advance, becomes the head, or sees the word change as
/// head), so not the length of the queue either. On real hardware that is
/// a spinlock critical section, microseconds (Linux's lock-holding code
/// is written to keep it so; a section that disables interrupts for a
/// millisecond is a latency bug there), and a hand-off, tens of
/// nanoseconds per cache-line transfer. 4 ms is three orders of magnitude
/// above both. A descheduled vCPU, on the other hand, stalls for a host
/// scheduling slice: 3 ms and more on Linux's CFS/EEVDF with more
/// runnable threads than cores, tens of ms under load, so a guest whose
/// vCPUs are descheduled under contention trips the bound within its
/// first few contended hand-offs (measured in QEMU at `-smp 8` on 2 host
/// cores: see the README).
///
/// The counter rate behind "4 ms" is the counter's real one, never
/// assumed: the kernel's word if it gave one ([`set_stall_clock_rate`]:
/// riscv64's `timebase-frequency` from the device tree, a calibrated TSC),
/// else the architecture's (aarch64 `CNTFRQ_EL0`; x86_64 CPUID leaf 0x15
/// or 0x16, or the hypervisor's leaf 0x40000010), else, with the host test
/// hooks, the counter calibrated against the host's clock; where none is
/// known the watch counts [`STALL_BOUND_ROUNDS`] spin rounds instead (4
/// ms at the very least).
///
/// What can trip it on real hardware, and what it costs: a lock held for
/// milliseconds (printing to a slow serial console under a spinlock, a
/// kernel that preempts lock holders), or a waiter's CPU stopped by a
/// debugger or by firmware (SMIs) for that long. The switch then costs
/// fairness only (test-and-set hand-off with backoff, what every x86_64
/// guest gets anyway), never exclusion; a kernel for which that is wrong
/// says `set_vcpu_preemptible(false)` at boot.
///
#[doc(alias = "virt_spin_lock")]
pub fn set_vcpu_preemptible(preemptible: bool) {
    // Relaxed: the mode chooses a waiting strategy; exclusion never depends
    // on which one a CPU uses.
    MODE.store(
        if preemptible {
            PREEMPTIBLE
        } else {
            FIFO_FORCED
        },
        Relaxed,
    );
}

/// Whether CPUs may be descheduled while they spin (see
/// [`set_vcpu_preemptible`]); detected on first use when never set, and
/// `true` from the moment a FIFO waiter detected a stall
/// ([`vcpu_stall`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// // The host test hooks: threads play CPUs and may be descheduled.
/// assert!(kernel::vcpu_preemptible());
/// kernel::set_vcpu_preemptible(false); // as a bare-metal kernel would say
/// assert!(!kernel::vcpu_preemptible());
/// ```
#[inline]
pub fn vcpu_preemptible() -> bool {
    let mode = MODE.load(Relaxed);
    // The FIFO fast paths test one compare (a `match` put two in front of
    // them); the other modes call out of line anyway.
    if mode < PREEMPTIBLE {
        return false;
    }
    mode == PREEMPTIBLE || detect()
}

/// The three ways the FIFO locks can hand off ([`vcpu_mode`],
/// [`set_vcpu_mode`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, VcpuMode};
///
/// match kernel::vcpu_mode() {
///     VcpuMode::Fifo | VcpuMode::FifoWatching => { /* fair FIFO hand-off */ }
///     VcpuMode::Preemptible => { /* test-and-set with backoff */ }
///     _ => {}
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VcpuMode {
    /// Strict FIFO, never switched: `set_vcpu_preemptible(false)`.
    Fifo,
    /// Strict FIFO, watching for a stall that switches to
    /// [`Preemptible`](Self::Preemptible) once: the default where nothing
    /// says the CPUs are vCPUs.
    FifoWatching,
    /// Test-and-set hand-off with backoff: `set_vcpu_preemptible(true)`,
    /// a hypervisor bit, the host test hooks, or a detected stall.
    Preemptible,
}

/// The mode the locks are in now (detected on first use when never set).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, VcpuMode};
///
/// kernel::set_vcpu_mode(VcpuMode::FifoWatching);
/// assert!(!kernel::vcpu_preemptible());
/// kernel::set_vcpu_preemptible(true);
/// assert_eq!(kernel::vcpu_mode(), VcpuMode::Preemptible);
/// ```
pub fn vcpu_mode() -> VcpuMode {
    if vcpu_preemptible() {
        return VcpuMode::Preemptible;
    }
    match MODE.load(Relaxed) {
        FIFO_FORCED => VcpuMode::Fifo,
        FIFO_WATCHING => VcpuMode::FifoWatching,
        // A switch between the two loads.
        _ => VcpuMode::Preemptible,
    }
}

/// Sets the mode ([`set_vcpu_preemptible`] sets the two final ones);
/// [`FifoWatching`](VcpuMode::FifoWatching) re-arms the stall watch, for
/// example on an x86_64 guest that wants FIFO until a stall says
/// otherwise, or after a test forced a mode. The same rules as
/// [`set_vcpu_preemptible`]: at boot, or at any time at the price of
/// fairness only.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, VcpuMode};
///
/// // An x86_64 guest with dedicated vCPUs: the hypervisor bit says
/// // "preemptible", but FIFO is wanted until a real stall says otherwise.
/// kernel::set_vcpu_mode(VcpuMode::FifoWatching);
/// assert_eq!(kernel::vcpu_mode(), VcpuMode::FifoWatching);
/// ```
pub fn set_vcpu_mode(mode: VcpuMode) {
    let mode = match mode {
        VcpuMode::Fifo => FIFO_FORCED,
        VcpuMode::FifoWatching => FIFO_WATCHING,
        VcpuMode::Preemptible => PREEMPTIBLE,
    };
    // Relaxed: as in `set_vcpu_preemptible`.
    MODE.store(mode, Relaxed);
}

#[cold]
fn detect() -> bool {
    // loom models choose the mode themselves (FIFO unless a model sets it;
    // the stall watch is inert under loom, see `StallWatch`).
    let preemptible =
        !cfg!(ksync_loom) && (cfg!(feature = "test-hooks") || crate::arch::hypervisor_present());
    let mode = if preemptible {
        PREEMPTIBLE
    } else {
        FIFO_WATCHING
    };
    // Only from UNKNOWN: a detection racing with `set_vcpu_preemptible`
    // or with a stall's switch must not undo them. Targets without CAS
    // (thumbv6m) are single-core: nothing races there, a store will do.
    #[cfg(target_has_atomic = "8")]
    let _ = MODE.compare_exchange(UNKNOWN, mode, Relaxed, Relaxed);
    #[cfg(not(target_has_atomic = "8"))]
    MODE.store(mode, Relaxed);
    preemptible
}

// ---- watching FIFO waiters for descheduled CPUs ----------------------------------

/// How long a FIFO waiter may see no hand-off before it concludes that a
/// CPU ahead of it (the holder, or the waiter the lock was handed to) is
/// not running: 4 ms of the architecture's counter. See [`set_vcpu_preemptible`'s
/// docs](set_vcpu_preemptible#the-bound) for why real hardware does not
/// reach it.
pub const STALL_BOUND_MS: u64 = 4;

/// Where the architecture has no counter ([`VcpuStall::ticks`] false): the
/// bound in spin rounds. One round is a `spin_loop` hint, from about a
/// nanosecond to 150 ns on current CPUs, so this is 4 ms at the very
/// least.
pub const STALL_BOUND_ROUNDS: u64 = 1 << 22;

/// Rounds between two looks at the clock: a look costs a counter read
/// (tens of cycles; more under emulation), a round a `spin_loop`.
const STALL_CHECK_ROUNDS: u32 = 1 << 7;

/// The stall clock's rate in ticks per ms: 0 until resolved, [`NO_RATE`]
/// when none is known (the watch counts rounds). Configuration, `core`'s
/// atomic even under loom.
static CLOCK_RATE: StatCounter = StatCounter::new(0);
const NO_RATE: usize = usize::MAX;

/// States the rate of the architecture's counter that the FIFO locks'
/// stall watch reads (x86_64 TSC, aarch64 `CNTVCT_EL0`, riscv64 `time`),
/// in ticks per millisecond: riscv64's `timebase-frequency` / 1000 from
/// the device tree, a TSC rate the kernel calibrated. Overrides what the
/// architecture states. Without it the rate is the architecture's
/// (aarch64 `CNTFRQ_EL0`, x86_64 CPUID), with the host test hooks one
/// calibrated against the host's clock, and otherwise unknown: the watch
/// then counts spin rounds ([`STALL_BOUND_ROUNDS`]). Set it at boot; a
/// change later only moves the bound of checks that follow.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// // riscv64: the device tree's `timebase-frequency` is 10 MHz.
/// let timebase_hz: u64 = 10_000_000;
/// kernel::set_stall_clock_rate(timebase_hz / 1000);
/// assert_eq!(kernel::stall_clock_rate(), Some(10_000));
/// ```
///
/// # Panics
/// If `ticks_per_ms` is 0, or does not fit a `usize` below `usize::MAX`.
pub fn set_stall_clock_rate(ticks_per_ms: u64) {
    let rate = usize::try_from(ticks_per_ms)
        .ok()
        .filter(|&r| r != 0 && r != NO_RATE)
        .unwrap_or_else(|| {
            panic!("ksync: stall clock rate {ticks_per_ms} ticks/ms: must be 1..{NO_RATE}")
        });
    // Relaxed: configuration read by a heuristic (see `MODE`).
    CLOCK_RATE.store(rate, Relaxed);
}

/// The rate, in ticks per millisecond, at which the stall watch reads the
/// architecture's counter ([`set_stall_clock_rate`] says where it comes
/// from); `None` where no counter or no rate is known (the watch counts
/// spin rounds).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// // Where the stall watch gets its time from, e.g. for a boot message:
/// match kernel::stall_clock_rate() {
///     Some(rate) => println!("lock stall watch: {rate} ticks/ms"),
///     None => println!("lock stall watch: counting spin rounds"),
/// }
/// ```
pub fn stall_clock_rate() -> Option<u64> {
    // Relaxed: see `set_stall_clock_rate`.
    let rate = match CLOCK_RATE.load(Relaxed) {
        0 => resolve_rate(),
        rate => rate,
    };
    (rate != NO_RATE).then_some(rate as u64)
}

#[cold]
fn resolve_rate() -> usize {
    let rate = if crate::arch::stall_clock().is_none() {
        None
    } else {
        crate::arch::stall_clock_rate().or_else(calibrate)
    };
    let rate = rate
        .and_then(|r| usize::try_from(r).ok())
        .filter(|&r| r != 0 && r != NO_RATE)
        .unwrap_or(NO_RATE);
    // Only over "unresolved": a rate the kernel stated meanwhile stays.
    // Targets without CAS are single-core: a store will do.
    #[cfg(target_has_atomic = "ptr")]
    return match CLOCK_RATE.compare_exchange(0, rate, Relaxed, Relaxed) {
        Ok(_) => rate,
        Err(stated) => stated,
    };
    #[cfg(not(target_has_atomic = "ptr"))]
    {
        CLOCK_RATE.store(rate, Relaxed);
        rate
    }
}

/// With the host test hooks: the counter's rate measured against the
/// host's monotonic clock over a millisecond (both run at constant rates,
/// so a preemption during the measurement costs no accuracy).
#[cfg(all(feature = "test-hooks", not(ksync_loom), not(miri)))]
fn calibrate() -> Option<u64> {
    let start = std::time::Instant::now();
    let ticks = crate::arch::stall_clock()?;
    let (ns, now) = loop {
        let ns = start.elapsed().as_nanos();
        let now = crate::arch::stall_clock()?;
        if ns >= 1_000_000 {
            break (ns, now);
        }
        core::hint::spin_loop();
    };
    let per_ms = u128::from(now.checked_sub(ticks)?) * 1_000_000 / ns;
    u64::try_from(per_ms).ok().filter(|&r| r != 0)
}

#[cfg(not(all(feature = "test-hooks", not(ksync_loom), not(miri))))]
fn calibrate() -> Option<u64> {
    None
}

/// The report of the stall that switched the locks to test-and-set
/// hand-off ([`vcpu_stall`], [`set_vcpu_stall_hook`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::VcpuStall;
///
/// // What a kernel logs once it polls `vcpu_stall()` after boot:
/// fn log_stall(stall: &VcpuStall) {
///     let unit = if stall.ticks { "ticks" } else { "spin rounds" };
///     println!(
///         "{}: no hand-off for {} {unit} (bound {}): vCPUs look oversubscribed",
///         stall.lock, stall.waited, stall.bound,
///     );
/// }
/// if let Some(stall) = ksync::kernel::vcpu_stall() {
///     log_stall(&stall);
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VcpuStall {
    /// Which waiter saw it: `"ticket lock"`, `"lockref"`, `"queued lock"`.
    pub lock: &'static str,
    /// How long it saw no hand-off: counter ticks, or spin rounds where
    /// the architecture has no counter (see [`ticks`](Self::ticks)).
    pub waited: u64,
    /// The bound it passed, in the same unit.
    pub bound: u64,
    /// Whether [`waited`](Self::waited) and [`bound`](Self::bound) are
    /// ticks of the architecture's counter (x86_64 TSC, aarch64
    /// `CNTVCT_EL0`, riscv64 `time`) rather than spin rounds.
    pub ticks: bool,
}

/// The sites a [`VcpuStall`] names, indexed by [`StallWatch::site`].
const SITES: [&str; 3] = ["ticket lock", "lockref", "queued lock"];

/// A FIFO waiter's site (an index into [`SITES`]).
#[derive(Clone, Copy, Debug)]
// lockref takes its lock every time where 64-bit atomics are missing,
// through the ticket lock.
#[cfg_attr(not(target_has_atomic = "64"), allow(dead_code))]
pub(crate) enum StallSite {
    Ticket = 0,
    LockRef = 1,
    Queued = 2,
}

/// The stall that switched the mode: site + 1 (0: none yet), waited and
/// bound (saturated to `usize`), whether in ticks. Written once, by the
/// waiter that won the switch, before it publishes `STALL_SITE` (Release).
static STALL_SITE: StatCounter = StatCounter::new(0);
static STALL_WAITED: StatCounter = StatCounter::new(0);
static STALL_BOUND: StatCounter = StatCounter::new(0);
static STALL_TICKS: AtomicBool = AtomicBool::new(false);

/// The registered stall hook, a `fn(&VcpuStall)` (null: none).
static STALL_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// The stall that switched the locks from watched FIFO to test-and-set
/// hand-off, if one did (see
/// [`set_vcpu_preemptible`](set_vcpu_preemptible#watching-for-descheduled-cpus)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// // The host test hooks say CPUs are preemptible from the start: no
/// // stall ever had to tell.
/// assert!(ksync::kernel::vcpu_preemptible());
/// assert_eq!(ksync::kernel::vcpu_stall(), None);
/// ```
pub fn vcpu_stall() -> Option<VcpuStall> {
    // Acquire pairs with the Release store in `StallWatch::switch`: the
    // figures are written before the site.
    let site = STALL_SITE.load(Ordering::Acquire);
    let lock = SITES.get(site.checked_sub(1)?)?;
    Some(VcpuStall {
        lock,
        waited: STALL_WAITED.load(Relaxed) as u64,
        bound: STALL_BOUND.load(Relaxed) as u64,
        ticks: STALL_TICKS.load(Relaxed),
    })
}

/// Registers a function called once, by the waiter whose stall switched
/// the locks to test-and-set hand-off, with its report. It runs inside
/// that waiter's lock wait, possibly with interrupts masked and while the
/// waiter holds a place in the lock's queue: it must not take a lock, nor
/// print through a console behind one (record, and report later; or poll
/// [`vcpu_stall`]). Set it at boot, before locks are contended.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
/// use ksync::kernel::{self, VcpuStall};
///
/// // The hook runs inside a lock wait: record only, print later.
/// static SWITCHED: AtomicBool = AtomicBool::new(false);
/// fn on_stall(_stall: &VcpuStall) {
///     SWITCHED.store(true, Relaxed);
/// }
/// kernel::set_vcpu_stall_hook(on_stall);
/// # assert!(!SWITCHED.load(Relaxed));
/// ```
pub fn set_vcpu_stall_hook(hook: fn(&VcpuStall)) {
    // Release pairs with the Acquire load in `report_stall`; a function
    // pointer carries no data, so Relaxed would do too.
    STALL_HOOK.store(hook as *mut (), Ordering::Release);
}

/// A FIFO waiter's watch on the value it waits to see change (the ticket
/// being served, a queue node's flag, the lock word): with it, a waiter
/// that has seen no change for [`STALL_BOUND_MS`] of the architecture's
/// counter (or [`STALL_BOUND_ROUNDS`] rounds where there is none), in
/// watched FIFO mode, switches the process to test-and-set hand-off, once
/// ([`vcpu_stall`] says so afterwards).
///
/// It wraps the waiter's [`Waiter`], so the advertise-then-re-check
/// contract is the same. Inert under loom: the mode lives outside the
/// model, and a switch in one execution would change the next ones.
#[derive(Debug)]
pub(crate) struct StallWatch {
    waiter: Waiter,
    site: StallSite,
    /// The value last seen, and the clock (ticks, or checks where there is
    /// no counter) when it was first seen; `since` is `None` until the
    /// first look.
    seen: u32,
    since: Option<u64>,
    rounds: u32,
    /// Looks at the clock so far: the clock where there is no counter.
    checks: u32,
}

impl StallWatch {
    pub(crate) const fn new(site: StallSite) -> Self {
        Self {
            waiter: Waiter::new(),
            site,
            seen: 0,
            since: None,
            rounds: 0,
            checks: 0,
        }
    }

    /// One round of waiting; `value` reads the watched value (called only
    /// when the watch looks at the clock, every few rounds, so that a
    /// waiter spinning on its own line reads another one rarely). Gives
    /// the CPU away every [`SPIN_LIMIT`] rounds if `give_away` (as
    /// [`Waiter::wait`]; every FIFO waiter asks for it). Returns
    /// whether it advertised or gave the CPU away: the caller must re-check
    /// its condition before waiting again.
    ///
    /// The look comes before the round's wait: the caller's value was read
    /// just before this call, and the clock is read with it, not after a
    /// `SpinWait::wait` that may have given the CPU away for a while
    /// (during which the value may have moved on and come back).
    #[inline]
    pub(crate) fn wait<R: spin::relax::RelaxStrategy>(
        &mut self,
        value: impl FnOnce() -> u32,
        give_away: bool,
    ) -> bool {
        if !cfg!(ksync_loom) {
            self.rounds = self.rounds.wrapping_add(1);
            if self.rounds % STALL_CHECK_ROUNDS == 0 {
                self.check(value());
            }
        }
        self.waiter.wait::<R>(give_away)
    }

    /// A hand-off the caller saw by other means (a queued CPU that became
    /// the queue head, a head that took the lock): the clock starts again
    /// at the next look.
    #[inline]
    pub(crate) fn restart(&mut self) {
        self.since = None;
    }

    #[cold]
    #[inline(never)]
    fn check(&mut self, value: u32) {
        self.checks = self.checks.wrapping_add(1);
        let clock = crate::arch::stall_clock().zip(stall_clock_rate());
        let (now, bound, ticks) = match clock {
            Some((now, per_ms)) => (now, per_ms.saturating_mul(STALL_BOUND_MS), true),
            None => (
                u64::from(self.checks),
                STALL_BOUND_ROUNDS / u64::from(STALL_CHECK_ROUNDS),
                false,
            ),
        };
        let since = match self.since {
            // (A clock that went back, from a wrapped check count or a
            // waiter moved to a CPU whose counter lags, starts again too.)
            Some(since) if value == self.seen && now >= since => since,
            _ => {
                // A hand-off (or the first look): the clock starts again.
                self.seen = value;
                self.since = Some(now);
                return;
            }
        };
        let waited = now - since;
        if waited < bound {
            return;
        }
        if MODE.load(Relaxed) == FIFO_WATCHING {
            let (waited, bound) = if ticks {
                (waited, bound)
            } else {
                let rounds = u64::from(STALL_CHECK_ROUNDS);
                (waited * rounds, bound * rounds)
            };
            self.switch(VcpuStall {
                lock: SITES[self.site as usize],
                waited,
                bound,
                ticks,
            });
        }
    }

    /// Switches watched FIFO to test-and-set hand-off, once; the CPU that
    /// wins records and reports the stall. FIFO waiters already queued
    /// keep their places (a ticket must be served; a queue drains); new
    /// arrivals take the lock by test-and-set.
    #[cold]
    fn switch(&self, stall: VcpuStall) {
        // Only from watched FIFO: an explicit `set_vcpu_preemptible`
        // (FIFO forced, or preemptible already) is never overridden.
        // Relaxed: a waiting strategy, never exclusion. Targets without
        // CAS are single-core and never stall on another CPU.
        #[cfg(target_has_atomic = "8")]
        let won = MODE
            .compare_exchange(FIFO_WATCHING, PREEMPTIBLE, Relaxed, Relaxed)
            .is_ok();
        #[cfg(not(target_has_atomic = "8"))]
        let won = {
            MODE.store(PREEMPTIBLE, Relaxed);
            true
        };
        if won {
            report_stall(self.site, &stall);
        }
    }
}

fn report_stall(site: StallSite, stall: &VcpuStall) {
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    STALL_WAITED.store(clamp(stall.waited), Relaxed);
    STALL_BOUND.store(clamp(stall.bound), Relaxed);
    STALL_TICKS.store(stall.ticks, Relaxed);
    // Release pairs with the Acquire load in `vcpu_stall`.
    STALL_SITE.store(site as usize + 1, Ordering::Release);
    // Acquire pairs with the Release store in `set_vcpu_stall_hook`.
    let hook = STALL_HOOK.load(Ordering::Acquire);
    if !hook.is_null() {
        // SAFETY: only `set_vcpu_stall_hook` stores a non-null pointer,
        // cast from a `fn(&VcpuStall)`; casting it back gives that
        // function (function and data pointers have one size on every
        // target this crate supports, checked by the transmute).
        let hook = unsafe { core::mem::transmute::<*mut (), fn(&VcpuStall)>(hook) };
        hook(stall);
    }
}

/// What a lock waiter does when it has spun for a bounded time without
/// progress ([`set_spin_wait`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, SpinWait};
/// # mod sched { pub fn yield_current() {} }
///
/// // A guest kernel that gives the vCPU away rather than spin behind a
/// // descheduled holder; no halt, so no kick is needed.
/// static YIELD: SpinWait = SpinWait { wait: sched::yield_current, kick: None };
/// kernel::set_spin_wait(&YIELD);
/// ```
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
    /// halts must be woken by `kick` whatever the interrupt mask is.
    ///
    /// It must never unmask interrupts the waiter masked, not even around
    /// a halt (`sti; hlt`): the waiter holds its ticket or queue place
    /// while it waits, and a lock taken with interrupts masked is one that
    /// handlers take. A handler that lands in the wait and takes that lock
    /// queues behind its own CPU's place, which is never served while the
    /// handler spins: a deadlock with the FIFO hand-off (a test-and-set
    /// waiter holds no place, so the handler only waits for the holder).
    ///
    /// On x86_64 this rules out `hlt` with an IPI as the kick while
    /// interrupts are masked: `hlt` then wakes only on NMI, SMI or INIT,
    /// and the waiter never returns. Such a `wait` returns at once when
    /// interrupts are masked (a spurious return: the waiter keeps
    /// spinning), or waits with `monitor`/`mwait` on a line the kick
    /// writes (see `docs/fifo-hang.md`).
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
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, SpinWait};
/// # mod arch { pub fn wfe() {} pub fn dsb_sev() {} }
///
/// // aarch64 at boot: waiters halt in `wfe` and every unlock that may free
/// // one sends `dsb ish; sev` (latched: a `sev` before the `wfe` is not lost).
/// static WFE: SpinWait = SpinWait { wait: arch::wfe, kick: Some(arch::dsb_sev) };
/// kernel::set_spin_wait(&WFE);
///
/// let lock = ksync::spinlock::TicketMutex::new(0);
/// *lock.lock() += 1; // uncontended: never waits, never kicks
/// ```
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
