//! Helpers shared by the per-CPU and RCU benches.

#![allow(dead_code)]

/// A value on a cache line (pair) of its own (128 bytes on x86_64 and
/// aarch64, whose prefetchers pair lines).
pub(crate) use crossbeam_utils::CachePadded;

/// Sorts `v` and returns its median.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
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
