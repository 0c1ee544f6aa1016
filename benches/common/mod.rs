//! Helpers shared by the benches.

#![allow(dead_code)]

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant};

use core_affinity::CoreId;

/// A value on a cache line (pair) of its own (128 bytes on x86_64 and
/// aarch64, whose prefetchers pair lines).
pub(crate) use crossbeam_utils::CachePadded;

/// Sorts `v` and returns its median: the middle value, or the mean of the
/// two middle ones.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// [`median`] of an owned vector.
pub(crate) fn median_of(mut v: Vec<f64>) -> f64 {
    median(&mut v)
}

/// The `p`-th percentile (nearest rank) of `v`.
pub(crate) fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// "median`unit` (min–max)" of `v`, with `prec` decimals.
pub(crate) fn summary(v: &[f64], prec: usize, unit: &str) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{:.prec$}{unit} ({lo:.prec$}–{hi:.prec$})",
        median_of(v.to_vec())
    )
}

/// Per-rep ratios `a[i] / b[i]`.
pub(crate) fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// Runs `f` on a thread pinned to `core`.
pub(crate) fn on_core<T: Send>(core: CoreId, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            core_affinity::set_for_current(core);
            f()
        })
        .join()
        .expect("pinned thread panicked")
    })
}

/// Nanoseconds per `op` call, on this thread for `dur`.
pub(crate) fn per_call(dur: Duration, mut op: impl FnMut()) -> f64 {
    const BATCH: u64 = 10_000;
    let (t0, mut calls) = (Instant::now(), 0u64);
    while t0.elapsed() < dur {
        for _ in 0..BATCH {
            op();
        }
        calls += BATCH;
    }
    t0.elapsed().as_nanos() as f64 / calls as f64
}

/// Milliseconds per measurement and interleaved repetitions:
/// `KSYNC_BENCH_MS` (200) and `KSYNC_BENCH_REPS` (7), or 50 ms x 3 with
/// `--quick` / `KSYNC_BENCH_QUICK`.
pub(crate) fn settings() -> (u64, usize) {
    let quick =
        std::env::args().any(|a| a == "--quick") || std::env::var("KSYNC_BENCH_QUICK").is_ok();
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    if quick {
        (50, 3)
    } else {
        (
            env("KSYNC_BENCH_MS", 200),
            env("KSYNC_BENCH_REPS", 7) as usize,
        )
    }
}

/// Runs `worker` on `threads` threads pinned round-robin to `cores` for
/// `dur`. A start gate releases them together once every thread is ready
/// (so no thread runs alone while the others start); `worker` loops until
/// the flag it is given is set and returns what it counted. Returns the
/// elapsed nanoseconds from the gate's opening and each thread's result.
pub(crate) fn timed_threads<T: Send, F: Fn(&AtomicBool) -> T + Sync>(
    threads: usize,
    dur: Duration,
    cores: &[CoreId],
    worker: F,
) -> (f64, Vec<T>) {
    let ready = CachePadded::new(AtomicUsize::new(0));
    let go = CachePadded::new(AtomicBool::new(false));
    let stop = CachePadded::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (core, worker, ready, go, stop) =
                    (cores[i % cores.len()], &worker, &ready, &go, &stop);
                s.spawn(move || {
                    core_affinity::set_for_current(core);
                    // Release/Acquire: the gate's opening is seen after
                    // every thread counted itself ready.
                    ready.fetch_add(1, Release);
                    while !go.load(Acquire) {
                        std::thread::yield_now();
                    }
                    worker(stop)
                })
            })
            .collect();
        while ready.load(Acquire) < threads {
            std::thread::yield_now();
        }
        let t0 = Instant::now();
        go.store(true, Release);
        std::thread::sleep(dur);
        // Relaxed: the joins below order the workers' results.
        stop.store(true, Relaxed);
        let elapsed = t0.elapsed().as_nanos() as f64;
        let results = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect();
        (elapsed, results)
    })
}
