//! lockref benchmark: a get+put pair on one shared object, lockless lockref
//! against the same word locked every time, three spinlocks guarding an
//! `i32`, and a raw `fetch_add`/`fetch_sub` pair (the one-cache-line limit).
//!
//! Every measurement runs for a fixed time (`KSYNC_BENCH_MS`, default 200)
//! with thread `i` pinned to core `i`; implementations are interleaved
//! within each of `KSYNC_BENCH_REPS` (default 7) repetitions, and all ratios
//! compare measurements of the same run. `--quick` (or `KSYNC_BENCH_QUICK=1`)
//! means 50 ms and 3 reps, for CI smoke runs. Other arguments (cargo passes
//! `--bench`) are ignored.
//!
//! The locks run in their strict FIFO mode (`set_vcpu_preemptible(false)`),
//! as a kernel with one CPU per core runs them: there are never more
//! threads than cores here.
//!
//! Run: `cargo bench --bench lockref [-- --quick]`.

use std::hint::black_box;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{Duration, Instant};

mod common;

use common::{median_of as median, on_core, per_call, summary, timed_threads};
use core_affinity::CoreId;
// Keeps each shared object (and each control flag) on its own cache lines.
use crossbeam_utils::CachePadded;
use ksync::LockRef;
use ksync::spinlock::{TicketMutex, TtasMutex};
use spin::mutex::SpinMutex;

/// The implementations, in table order (`as usize` indexes the results).
#[derive(Clone, Copy)]
enum Impl {
    Lockless,
    Locked,
    Spin,
    Ticket,
    Ttas,
    Raw,
}

/// Every implementation with its column name.
const IMPLS: [(Impl, &str); 6] = [
    (Impl::Lockless, "lockref lockless"),
    (Impl::Locked, "lockref locked"),
    (Impl::Spin, "spin::Mutex"),
    (Impl::Ticket, "TicketMutex"),
    (Impl::Ttas, "TtasMutex"),
    (Impl::Raw, "raw fetch_add/sub"),
];

/// Think times between pairs, in cycles (0 means no think call at all).
const THINK_CYCLES: [u64; 3] = [0, 50, 200];
const THREADS: [usize; 2] = [1, 2];
/// A measurement where a worker was on its CPU for less than this share
/// of the elapsed time was disturbed by other load.
const MIN_CPU_SHARE: f64 = 0.9;

/// One measurement of one implementation.
struct Sample {
    /// elapsed × threads / total pairs: the time one thread spends per pair.
    ns_per_pair: f64,
    /// min / max of the per-thread pair counts.
    fairness: f64,
    pairs: u64,
    /// lockless `put_return` that gave up and fell back to `put_or_lock`.
    fallbacks: u64,
    /// min over threads of (time on a CPU / elapsed), where Linux reports
    /// it: well below 1 means other load on the machine took our cores.
    cpu_share: Option<f64>,
}

/// Nanoseconds the calling thread has spent on a CPU (Linux schedstat).
fn cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

// ---- think time -------------------------------------------------------------

/// Busy work without `spin_loop` hints: a dependent shift-xor-multiply
/// chain (about 5 cycles per iteration) that the optimiser cannot fold (a
/// plain multiply-add chain it can: unrolled, `(x*a+1)*a+1` becomes one
/// multiply-add by constants).
#[inline(never)]
fn think(iters: u64) {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    for _ in 0..black_box(iters) {
        x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
    black_box(x);
}

/// A cycle-ish clock: the TSC on x86_64 (constant-rate reference cycles),
/// nanoseconds × 3 (a nominal 3 GHz) elsewhere.
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86_64 CPU, has no preconditions
        // and only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 * 3
    }
}

/// What [`ticks`] reads.
const CLOCK: &str = if cfg!(target_arch = "x86_64") {
    "TSC (rdtsc)"
} else {
    "Instant × 3 GHz"
};

/// Ticks per `think(iters)` call: the best of several batches.
fn think_ticks(iters: u64) -> f64 {
    const CALLS: u64 = 20_000;
    (0..7)
        .map(|_| {
            let t0 = ticks();
            for _ in 0..CALLS {
                think(iters);
            }
            (ticks() - t0) as f64 / CALLS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Ticks per nanosecond, measured against `Instant` over 50 ms.
fn ticks_per_ns() -> f64 {
    let (i0, t0) = (Instant::now(), ticks());
    while i0.elapsed() < Duration::from_millis(50) {}
    (ticks() - t0) as f64 / i0.elapsed().as_nanos() as f64
}

/// The smallest iteration count whose call costs at least `cycles`
/// ticks (binary search on measured costs), and its measured cost.
fn calibrate(cycles: u64) -> (u64, f64) {
    let target = cycles as f64;
    let mut hi = 1;
    while think_ticks(hi) < target {
        hi *= 2;
    }
    let mut lo = 0;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if think_ticks(mid) < target {
            lo = mid
        } else {
            hi = mid
        }
    }
    (hi, think_ticks(hi))
}

// ---- measurement ------------------------------------------------------------

/// Runs `pair` on `threads` pinned threads for `dur`, `think_iters` of
/// think time after each pair.
fn measure<F: Fn() + Sync>(
    threads: usize,
    think_iters: u64,
    dur: Duration,
    cores: &[CoreId],
    pair: F,
) -> (f64, Vec<(u64, Option<u64>)>) {
    timed_threads(threads, dur, cores, |stop| {
        let (mut n, cpu0) = (0u64, cpu_ns());
        while !stop.load(Relaxed) {
            pair();
            if think_iters != 0 {
                think(think_iters);
            }
            n += 1;
        }
        (n, cpu_ns().zip(cpu0).map(|(c1, c0)| c1 - c0))
    })
}

/// One measurement of `imp`, on a fresh object.
fn run(imp: Impl, threads: usize, think_iters: u64, dur: Duration, cores: &[CoreId]) -> Sample {
    let fallbacks = CachePadded::new(AtomicU64::new(0));
    // A macro rather than a closure taking `&dyn Fn`: the pair must be
    // inlined into the measuring loop, not called indirectly.
    macro_rules! pairs {
        ($pair:expr) => {
            measure(threads, think_iters, dur, cores, $pair)
        };
    }
    macro_rules! mutex_pairs {
        ($mutex:expr) => {{
            let m = CachePadded::new($mutex);
            pairs!(|| {
                let m = black_box(&*m);
                *m.lock() += 1;
                *m.lock() -= 1;
            })
        }};
    }
    let (elapsed, counts) = match imp {
        Impl::Lockless => {
            let lr = CachePadded::new(LockRef::new(1));
            pairs!(|| {
                let lr = black_box(&*lr);
                lr.get();
                if lr.put_return().is_none() {
                    fallbacks.fetch_add(1, Relaxed);
                    if let Some(mut g) = lr.put_or_lock() {
                        let c = g.count();
                        g.set_count(c - 1);
                    }
                }
            })
        }
        Impl::Locked => {
            let lr = CachePadded::new(LockRef::new(1));
            pairs!(|| {
                let lr = black_box(&*lr);
                for delta in [1, -1] {
                    let mut g = lr.lock();
                    let c = g.count();
                    g.set_count(c + delta);
                }
            })
        }
        Impl::Spin => mutex_pairs!(SpinMutex::<i32>::new(1)),
        Impl::Ticket => mutex_pairs!(TicketMutex::<i32>::new(1)),
        Impl::Ttas => mutex_pairs!(TtasMutex::<i32>::new(1)),
        Impl::Raw => {
            let a = CachePadded::new(AtomicI64::new(1));
            pairs!(|| {
                let a = black_box(&*a);
                a.fetch_add(1, Relaxed);
                a.fetch_sub(1, Release);
            })
        }
    };
    let cpu: Option<Vec<u64>> = counts.iter().map(|c| c.1).collect();
    let counts: Vec<u64> = counts.iter().map(|c| c.0).collect();
    let pairs: u64 = counts.iter().sum();
    let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    Sample {
        ns_per_pair: elapsed * threads as f64 / pairs.max(1) as f64,
        fairness: *lo as f64 / (*hi).max(1) as f64,
        pairs,
        fallbacks: fallbacks.load(Relaxed),
        cpu_share: cpu.map(|c| *c.iter().min().unwrap() as f64 / elapsed),
    }
}

/// Uncontended `get` vs one successful load + `compare_exchange` of the
/// same shape (count half + 1): `(get ns, cas ns)`, order alternating by rep.
fn uncontended(rep: usize, dur: Duration) -> (f64, f64) {
    let get = || {
        let lr = CachePadded::new(LockRef::new(1));
        per_call(dur, || black_box(&*lr).get())
    };
    let cas = || {
        let w = CachePadded::new(AtomicU64::new(1 << 32));
        per_call(dur, || {
            let w = black_box(&*w);
            let v = w.load(Relaxed);
            let _ = black_box(w.compare_exchange(v, v + (1 << 32), Relaxed, Relaxed));
        })
    };
    if rep % 2 == 0 {
        let g = get();
        (g, cas())
    } else {
        let c = cas();
        (get(), c)
    }
}

// ---- statistics and output --------------------------------------------------

/// Per-rep time ratios ns/pair(a) / ns/pair(b), from the same rep.
fn time_ratios(a: &[Sample], b: &[Sample]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.ns_per_pair / y.ns_per_pair)
        .collect()
}

/// Per-rep throughput ratios of `a` vs `b`: ns/pair(b) / ns/pair(a).
fn speedups(a: &[Sample], b: &[Sample]) -> Vec<f64> {
    time_ratios(b, a)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the goals compare, in the order `main` computes them.
const GOALS: [&str; 4] = [
    "lockless vs locked every time, throughput",
    "lockless vs spin::Mutex, throughput",
    "lockless time / raw fetch_add pair time",
    "uncontended get time / compare_exchange time",
];

/// (threads, think index) of each configuration, in table order.
type Config = (usize, usize);

/// A table with a row per configuration (with at least `min_threads`)
/// and a column per implementation, `cell` summarising its samples.
fn impl_table(
    configs: &[Config],
    results: &[Vec<Vec<Sample>>],
    min_threads: usize,
    cell: impl Fn(&[Sample]) -> String,
) {
    let names: String = IMPLS.iter().map(|(_, n)| format!(" | {n}")).collect();
    println!(
        "| threads | think{names} |\n|---|---{}|",
        "|---".repeat(IMPLS.len())
    );
    for (&(threads, k), samples) in configs.iter().zip(results) {
        if threads >= min_threads {
            let cells: String = samples.iter().map(|s| format!(" | {}", cell(s))).collect();
            println!("| {threads} | {}{cells} |", THINK_CYCLES[k]);
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("KSYNC_BENCH_QUICK").is_ok_and(|v| v == "1");
    let dur = Duration::from_millis(env_or("KSYNC_BENCH_MS", if quick { 50 } else { 200 }));
    let reps: usize = env_or("KSYNC_BENCH_REPS", if quick { 3 } else { 7 }).max(1);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    assert!(!cores.is_empty(), "core_affinity found no cores");
    // At most one thread per core: the dedicated configuration of a bare
    // metal kernel, so the locks are strict FIFO (the host's default is the
    // oversubscribed hand-off; `--bench locks` compares the two modes).
    ksync::kernel::set_vcpu_preemptible(false);
    let start = Instant::now();

    // Think time, calibrated once on core 0.
    let (tpn, think) = on_core(cores[0], || {
        let think: Vec<(u64, f64)> = THINK_CYCLES
            .iter()
            .map(|&c| if c == 0 { (0, 0.0) } else { calibrate(c) })
            .collect();
        (ticks_per_ns(), think)
    });

    // results[config][impl][rep].
    let configs: Vec<Config> = THREADS
        .iter()
        .flat_map(|&t| (0..THINK_CYCLES.len()).map(move |k| (t, k)))
        .collect();
    let mut results: Vec<Vec<Vec<Sample>>> = configs
        .iter()
        .map(|_| IMPLS.iter().map(|_| Vec::new()).collect())
        .collect();
    let (mut unc_get, mut unc_cas) = (Vec::new(), Vec::new());

    // Warm-up, not recorded: each implementation briefly on 2 threads.
    for (imp, _) in IMPLS {
        run(imp, 2, 0, dur / 5, &cores);
    }
    for rep in 0..reps {
        for (c, &(threads, k)) in configs.iter().enumerate() {
            // Rotate the order so that no implementation always runs first.
            for j in 0..IMPLS.len() {
                let i = (j + rep) % IMPLS.len();
                results[c][i].push(run(IMPLS[i].0, threads, think[k].0, dur, &cores));
            }
        }
        let (g, x) = on_core(cores[0], || uncontended(rep, dur));
        unc_get.push(g);
        unc_cas.push(x);
        let secs = start.elapsed().as_secs_f64();
        eprintln!("rep {} of {reps}: {secs:.1} s", rep + 1);
    }

    println!("# ksync lockref benchmark\n");
    println!(
        "{} ms per measurement, {reps} reps, implementations interleaved (order rotated per rep); \
         cores {:?}, thread i pinned to core i.",
        dur.as_millis(),
        cores.iter().map(|c| c.id).collect::<Vec<_>>()
    );
    println!("Clock: {CLOCK}, {tpn:.3} ticks/ns.");
    for (&c, &(n, t)) in THINK_CYCLES.iter().zip(&think).skip(1) {
        println!(
            "Think ~{c} cycles (clock ticks): {n} iterations of a dependent shift-xor-multiply chain (no \
             spin_loop), calibrated once on core 0 with {CLOCK}: {t:.0} ticks = {:.1} ns per call.",
            t / tpn
        );
    }
    println!(
        "ns/pair = elapsed × threads / total pairs (one thread's time per get+put pair, think \
         included), median (min–max) over reps.\n\n## ns per get+put pair\n"
    );
    impl_table(&configs, &results, 1, |s| {
        summary(&s.iter().map(|x| x.ns_per_pair).collect::<Vec<_>>(), 1, "")
    });
    println!("\n## Fairness, 2 threads: min/max per-thread pairs, median over reps\n");
    impl_table(&configs, &results, 2, |s| {
        format!("{:.2}", median(s.iter().map(|x| x.fairness).collect()))
    });

    println!(
        "\n## Load check: worker time on CPU / elapsed (Linux schedstat), min over threads\n\n\
         Cell: lowest over reps (number of reps below {MIN_CPU_SHARE}, i.e. disturbed by \
         other load on the machine).\n"
    );
    impl_table(&configs, &results, 1, |s| {
        let shares: Vec<f64> = s.iter().filter_map(|x| x.cpu_share).collect();
        let low = shares.iter().filter(|&&c| c < MIN_CPU_SHARE).count();
        let min = shares.into_iter().reduce(f64::min);
        min.map_or("n/a".into(), |m| format!("{m:.2} ({low})"))
    });
    let disturbed = results
        .iter()
        .flatten()
        .flatten()
        .filter(|x| x.cpu_share.is_some_and(|c| c < MIN_CPU_SHARE))
        .count();

    println!(
        "\n## Ratios, per rep within the run: median (min–max)\n\n\
         Throughput X vs Y = ns/pair(Y) / ns/pair(X); \"time vs raw\" = ns/pair(lockless) / \
         ns/pair(raw).\n\n\
         | threads | think | lockless vs locked | lockless vs spin::Mutex | lockless vs \
         TicketMutex | lockless time vs raw | put_return fallbacks / pairs |\n\
         |---|---|---|---|---|---|---|"
    );
    for (c, &(threads, k)) in configs.iter().enumerate() {
        let r = &results[c];
        let l = &r[Impl::Lockless as usize];
        let (fb, pairs) = l
            .iter()
            .fold((0, 0), |(f, p), s| (f + s.fallbacks, p + s.pairs));
        println!(
            "| {threads} | {} | {} | {} | {} | {} | {fb} / {pairs} |",
            THINK_CYCLES[k],
            summary(&speedups(l, &r[Impl::Locked as usize]), 2, "x"),
            summary(&speedups(l, &r[Impl::Spin as usize]), 2, "x"),
            summary(&speedups(l, &r[Impl::Ticket as usize]), 2, "x"),
            summary(&time_ratios(l, &r[Impl::Raw as usize]), 2, "x"),
        );
    }

    let unc_ratio: Vec<f64> = unc_get.iter().zip(&unc_cas).map(|(g, x)| g / x).collect();
    println!(
        "\n## Uncontended, 1 thread on core 0: ns per call, median (min–max)\n\n\
         | `lr.get()` | load + successful `compare_exchange` | get / compare_exchange |\n\
         |---|---|---|\n| {} | {} | {} |",
        summary(&unc_get, 2, ""),
        summary(&unc_cas, 2, ""),
        summary(&unc_ratio, 2, "x")
    );

    let c0 = configs.iter().position(|&(t, k)| t == 2 && k == 0).unwrap();
    let (r, l) = (&results[c0], &results[c0][Impl::Lockless as usize]);
    let vs = |i: Impl| speedups(l, &r[i as usize]);
    let goals = [
        (vs(Impl::Locked), ">=", 2.0),
        (vs(Impl::Spin), ">=", 1.0),
        (time_ratios(l, &r[Impl::Raw as usize]), "<=", 1.5),
        (unc_ratio, "<=", 1.15),
    ];
    println!("\n## Goals (median of the per-rep ratios; contended ones at 2 threads, think 0)\n");
    for ((ratios, op, target), what) in goals.into_iter().zip(GOALS) {
        let v = median(ratios);
        let met = if op == ">=" { v >= target } else { v <= target };
        let verdict = if met { "MET" } else { "NOT MET" };
        println!("- {what}: {v:.2}x (goal {op} {target:.2}x): {verdict}");
    }
    if disturbed > 0 {
        println!(
            "- WARNING: in {disturbed} measurements a worker was off its core (see the load \
             check): rerun on a quiet machine before trusting these numbers."
        );
    }
    eprintln!("total {:.1} s", start.elapsed().as_secs_f64());
}
