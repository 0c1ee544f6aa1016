//! The host driver shared by the tests and the bench: threads are CPUs
//! (ksync's `test-hooks` kernel), each comes online for RCU, runs steps
//! until told to stop, and goes offline; then the workload's check runs.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ksync::rcu;
use seeds::{Config, Counts, Rng, Violation, Workload};

/// Operations per step between stop checks.
pub(crate) const STEP: u64 = 256;

/// One thread at a time runs a workload in this process: the tests share
/// the machine's 2 cores and the one RCU engine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests of a binary.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one run did.
#[derive(Debug)]
pub(crate) struct Run {
    /// Per-thread counts.
    pub(crate) counts: Vec<Counts>,
    /// Wall-clock time from the start signal until the last thread
    /// stopped (after the step it was in at the stop signal), seconds.
    pub(crate) secs: f64,
    /// The workload's final check.
    pub(crate) check: Result<(), Violation>,
    /// Lowest share of the run a worker spent on a CPU (Linux schedstat;
    /// `None` elsewhere): well below 1, other load took our cores.
    pub(crate) cpu_share: Option<f64>,
}

/// Nanoseconds the calling thread has spent on a CPU (Linux schedstat).
fn cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

impl Run {
    /// All threads' counts together.
    pub(crate) fn total(&self) -> Counts {
        let mut t = Counts::default();
        for c in &self.counts {
            t += *c;
        }
        t
    }

    /// Operations per second, all threads together.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.total().ops as f64 / self.secs
    }
}

/// Runs `variant` of `w` on `threads` threads for `dur` (thread `i`
/// pinned to core `i % cores` when `pin`), then checks it.
pub(crate) fn run<W: Workload>(
    w: &'static W,
    variant: W::Variant,
    config: Config,
    threads: usize,
    dur: Duration,
    pin: bool,
) -> Run {
    // The driver's thread is a CPU for setup and the check (both may read
    // under RCU or wait for grace periods), and offline while it sleeps
    // through the run, so that it holds up no grace period.
    rcu::cpu_online();
    w.setup(variant, config);
    rcu::cpu_offline();
    let cores = if pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let (counts, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start, cores) = (&stop, &start, &cores);
                s.spawn(move || {
                    if !cores.is_empty() {
                        core_affinity::set_for_current(cores[t % cores.len()]);
                    }
                    rcu::cpu_online();
                    let mut rng = Rng::new(t as u64 + 1);
                    let mut c = Counts::default();
                    start.wait();
                    let (t0, cpu0) = (Instant::now(), cpu_ns());
                    while !stop.load(Relaxed) {
                        c += w.step(t, STEP, &mut rng);
                    }
                    let on_cpu = cpu_ns().zip(cpu0).map(|(c1, c0)| c1 - c0);
                    let secs = t0.elapsed().as_secs_f64();
                    rcu::cpu_offline();
                    (c, on_cpu, secs)
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        let done: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // A thread stops after its current step: the run lasted until the
        // last one did.
        let secs = done.iter().map(|d| d.2).fold(0.0, f64::max);
        (done, secs)
    });
    rcu::cpu_online();
    let check = w.check();
    rcu::cpu_offline();
    // With more threads than cores a thread can only have its share.
    let fair = (cores_or(threads) as f64 / threads as f64).min(1.0);
    let cpu_share = counts
        .iter()
        .map(|&(_, ns, secs)| ns.map(|ns| ns as f64 / (secs * 1e9 * fair)))
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(f64::INFINITY, f64::min));
    Run {
        counts: counts.into_iter().map(|(c, _, _)| c).collect(),
        secs,
        check,
        cpu_share,
    }
}

/// The machine's core count (`threads` if unknown).
fn cores_or(threads: usize) -> usize {
    std::thread::available_parallelism().map_or(threads, |n| n.get())
}

/// Runs the control under torture until its check fails (or `budget`
/// passes): returns the violation, if any was caught.
pub(crate) fn run_control<W: Workload>(
    w: &'static W,
    threads: usize,
    budget: Duration,
) -> Option<Violation> {
    let t0 = Instant::now();
    while t0.elapsed() < budget {
        let r = run(
            w,
            W::CONTROL,
            Config::TORTURE,
            threads,
            Duration::from_millis(100),
            false,
        );
        if let Err(v) = r.check {
            return Some(v);
        }
    }
    None
}
