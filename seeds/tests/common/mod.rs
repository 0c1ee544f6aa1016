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
    /// Wall-clock time from the start signal to the stop signal, seconds.
    pub(crate) secs: f64,
    /// The workload's final check.
    pub(crate) check: Result<(), Violation>,
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
    w.setup(variant, config);
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
                    while !stop.load(Relaxed) {
                        c += w.step(t, STEP, &mut rng);
                    }
                    rcu::cpu_offline();
                    c
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        let secs = t0.elapsed().as_secs_f64();
        let counts = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (counts, secs)
    });
    let check = w.check();
    Run {
        counts,
        secs,
        check,
    }
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
