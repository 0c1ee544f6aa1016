//! Stall detection: a grace period that runs longer than a bound is
//! reported with the CPUs that hold it up.
//!
//! ksync has no clock: the kernel passes its own time to [`check_stall`]
//! from a periodic context (every CPU's tick is fine; the check is two
//! loads when nothing is due) and sets the bound in the same unit with
//! [`set_stall_timeout`]. The age of a grace period counts from the first
//! check that saw it running, so it is accurate to one check interval.
//!
//! A stalled grace period is reported once after the timeout, then every
//! three timeouts while it lasts (as Linux does), through the kernel's
//! [`Kernel::rcu_stall`](crate::kernel::Kernel::rcu_stall) hook (whose
//! default logs with `defmt` when that feature is on) and as
//! [`check_stall`]'s return value. [`stall_count`] counts reports.

use super::{BITS, STATE_MASK, engine};
use crate::kernel::{self, STALL_REPORT_CPUS, StallReport};
use crate::spinlock::{RawTicketLock, try_lock};
use crate::sync::{AtomicUsize, Ordering, StatCounter, model_static};

/// The detector's state (separate from the engine's hot fields).
struct Detector {
    /// Bound in the kernel's clock unit; 0: off.
    timeout: AtomicUsize,
    /// The running grace period the detector has seen (`gp_seq`).
    seen: AtomicUsize,
    /// When it was first seen running.
    start: AtomicUsize,
    /// When to report next.
    due: AtomicUsize,
    /// Serialises the slow path (`try_lock`: checks never wait).
    lock: RawTicketLock,
}

// Statistics, outside the modelled algorithm.
static STALLS: StatCounter = StatCounter::new(0);

model_static! {
    static DETECTOR: Detector = Detector {
        timeout: AtomicUsize::new(0),
        seen: AtomicUsize::new(0),
        start: AtomicUsize::new(0),
        due: AtomicUsize::new(0),
        lock: RawTicketLock::new(),
    };
}

#[inline]
fn detector() -> &'static Detector {
    &DETECTOR
}

/// Sets the stall bound, in the unit of the clock passed to
/// [`check_stall`] (0, the default, turns detection off).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// rcu::set_stall_timeout(21_000); // Linux's default: 21 s, with a clock in ms
/// rcu::cpu_online();
/// rcu::start_poll(); // a grace period that waits for this CPU
/// assert!(rcu::check_stall(1_000).is_none()); // first sight: its clock starts
/// assert!(rcu::check_stall(21_999).is_none());
/// assert!(rcu::check_stall(22_000).is_some()); // 21 s later: a stall
/// # rcu::quiescent_state();
/// # rcu::set_stall_timeout(0);
/// # rcu::cpu_offline();
/// ```
#[doc(alias("rcu_cpu_stall_timeout", "rcupdate.rcu_cpu_stall_timeout"))]
pub fn set_stall_timeout(timeout: u64) {
    // Truncation: only differences of clock values are used, wrapping.
    detector()
        .timeout
        .store(timeout as usize, Ordering::Relaxed);
}

/// Stall reports issued since boot.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu;
///
/// # rcu::set_stall_timeout(100);
/// # rcu::cpu_online();
/// # rcu::start_poll();
/// # let _ = rcu::check_stall(0);
/// let before = rcu::stall_count();
/// let _ = rcu::check_stall(100); // (a stalled grace period)
/// assert_eq!(rcu::stall_count(), before + 1); // for a statistics file
/// # rcu::quiescent_state();
/// # rcu::set_stall_timeout(0);
/// # rcu::cpu_offline();
/// ```
pub fn stall_count() -> usize {
    STALLS.load(Ordering::Relaxed)
}

/// Checks whether the running grace period is older than the stall
/// timeout; if so, reports it (through the kernel's
/// [`rcu_stall`](crate::kernel::Kernel::rcu_stall) hook) and returns the
/// report. `now` is the kernel's monotonic clock, in the unit of
/// [`set_stall_timeout`]. Call it from a periodic context, on any CPU.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use std::sync::mpsc::channel;
/// use ksync::{kernel, rcu};
///
/// rcu::set_stall_timeout(100); // say, milliseconds
/// let (tx, rx) = channel();
/// let (go_tx, go_rx) = channel::<()>();
/// let reader = std::thread::spawn(move || {
///     rcu::cpu_online();
///     let reading = rcu::read_lock(); // and never a quiescent state
///     tx.send(kernel::cpu_id()).unwrap();
///     go_rx.recv().unwrap();
///     drop(reading);
///     rcu::cpu_offline();
/// });
/// let stuck_cpu = rx.recv().unwrap();
/// rcu::start_poll(); // a grace period that needs `stuck_cpu`
/// assert!(rcu::check_stall(0).is_none()); // first sight: its clock starts
/// assert!(rcu::check_stall(99).is_none());
/// let report = rcu::check_stall(150).expect("older than 100: a stall");
/// assert!(report.names(stuck_cpu));
/// println!("{report}"); // rcu: grace period 0x1 stalled for 150, waiting for CPU 1
/// go_tx.send(()).unwrap();
/// reader.join().unwrap();
/// # rcu::set_stall_timeout(0);
/// ```
#[doc(alias("check_cpu_stall", "rcu_check_gp_start_stall"))]
pub fn check_stall(now: u64) -> Option<StallReport> {
    let d = detector();
    let now = now as usize;
    // Relaxed throughout: the detector only reports, it orders nothing;
    // its own fields change under `d.lock`, and a stale `gp_seq` or mask
    // word only makes a report a check late (or drops it, see `snapshot`).
    let timeout = d.timeout.load(Ordering::Relaxed);
    let seq = engine().gp_seq.load(Ordering::Relaxed);
    if timeout == 0 || seq & STATE_MASK == 0 {
        return None;
    }
    // Fast path: this grace period is known and not due (relaxed: a stale
    // value only delays the check to the next call).
    if d.seen.load(Ordering::Relaxed) == seq
        && (now.wrapping_sub(d.due.load(Ordering::Relaxed)) as isize) < 0
    {
        return None;
    }
    let locked = try_lock(&d.lock)?;
    let report = if d.seen.load(Ordering::Relaxed) != seq {
        // First sight of this grace period: start its clock.
        d.seen.store(seq, Ordering::Relaxed);
        d.start.store(now, Ordering::Relaxed);
        d.due.store(now.wrapping_add(timeout), Ordering::Relaxed);
        None
    } else if (now.wrapping_sub(d.due.load(Ordering::Relaxed)) as isize) < 0 {
        None
    } else {
        d.due.store(
            now.wrapping_add(timeout.saturating_mul(3)),
            Ordering::Relaxed,
        );
        Some(snapshot(
            seq,
            now.wrapping_sub(d.start.load(Ordering::Relaxed)) as u64,
        ))
    };
    drop(locked);
    let report = report?;
    if report.stalled == 0 {
        // The grace period ended while we looked.
        return None;
    }
    STALLS.fetch_add(1, Ordering::Relaxed);
    kernel::rcu_stall(&report);
    Some(report)
}

/// The CPUs whose pending bits are set now, for grace period `seq`.
fn snapshot(seq: usize, age: u64) -> StallReport {
    let e = engine();
    let mut report = StallReport {
        gp_seq: seq,
        age,
        stalled: 0,
        listed: 0,
        cpus: [0; STALL_REPORT_CPUS],
    };
    for (w, word) in e.pending.iter().enumerate() {
        let mut bits = word.load(Ordering::Relaxed);
        while bits != 0 {
            let cpu = w * BITS + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if report.listed < STALL_REPORT_CPUS {
                report.cpus[report.listed] = cpu as u32;
                report.listed += 1;
            }
            report.stalled += 1;
        }
    }
    if e.gp_seq.load(Ordering::Relaxed) != seq {
        report.stalled = 0;
        report.listed = 0;
    }
    report
}
