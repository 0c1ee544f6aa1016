//! Per-CPU benchmark: reader lock+unlock of the scalable rw lock (fenced and
//! gated) against `spin`, `parking_lot` and `std` rw locks, with no writer,
//! a writer every 1 ms and a writer every 10 us; writer latency; and a
//! per-CPU counter `add` against a shared `fetch_add`.
//!
//! The baseline column is the limit for any per-CPU reader: a plain
//! increment of this CPU's slot, the read, and a plain decrement, each
//! through the same CPU-id hook as the locks, with no exclusion at all (it
//! ignores the writer role).
//!
//! Threads are pinned (thread `i` on core `i`), each measurement runs for a
//! fixed time (`KSYNC_BENCH_MS`, default 200), implementations are
//! interleaved within each of `KSYNC_BENCH_REPS` (default 7) repetitions,
//! and the table shows medians with min-max; ratios compare measurements of
//! the same run. `--quick` (or `KSYNC_BENCH_QUICK=1`): 50 ms, 3 reps.
//!
//! The writer role is taken by thread 0 when its clock says so (checked
//! every 64 reads), so a run never has more threads than cores. Gated
//! readers report an RCU quiescent state every 64 reads, as a kernel's
//! context switches would; that cost is included.
//!
//! Host caveat: the CPU id comes from the `test-hooks` kernel hooks (a
//! thread-local), which costs more than a kernel's per-CPU register load.
//!
//! Run: `cargo bench --bench percpu [-- --quick]`.

mod common;

use common::{CachePadded, median};
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64};
use std::time::{Duration, Instant};

use ksync::percpu::PerCpu;
use ksync::percpu_counter::PerCpuCounter;
use ksync::percpu_rwlock::{GatedPerCpuRwLock, PerCpuRwLock};
use ksync::rcu;

#[derive(Clone, Copy, PartialEq)]
enum Lock {
    Fenced,
    Gated,
    Spin,
    ParkingLot,
    Std,
    Baseline,
}

const LOCKS: [(Lock, &str); 6] = [
    (Lock::Fenced, "PerCpuRwLock (fenced)"),
    (Lock::Gated, "GatedPerCpuRwLock"),
    (Lock::Spin, "spin::RwLock"),
    (Lock::ParkingLot, "parking_lot::RwLock"),
    (Lock::Std, "std::sync::RwLock"),
    (Lock::Baseline, "per-CPU inc/dec (baseline)"),
];

/// Writer period: none, 1 ms, 10 us.
const WRITERS: [(Option<Duration>, &str); 3] = [
    (None, "no writer"),
    (Some(Duration::from_millis(1)), "writer/1ms"),
    (Some(Duration::from_micros(10)), "writer/10us"),
];

struct Locks {
    fenced: PerCpuRwLock<u64>,
    gated: GatedPerCpuRwLock<u64>,
    spin: spin::RwLock<u64>,
    parking_lot: parking_lot::RwLock<u64>,
    std: std::sync::RwLock<u64>,
    /// The baseline's per-CPU slots and the value it reads.
    slots: PerCpu<AtomicI32>,
    data: u64,
}

/// The baseline reader: this CPU's slot + 1, the read, this CPU's slot - 1.
#[inline(always)]
fn baseline_read(locks: &Locks) -> u64 {
    // Relaxed, and a load and a store rather than an RMW: only this CPU
    // writes its slot and nothing reads it; it orders nothing (the limit
    // being measured, not a lock).
    let slot = locks.slots.get();
    slot.store(slot.load(Relaxed) + 1, Relaxed);
    drop(slot);
    // Opaque, so the compiler cannot merge the two slot updates (nor the
    // two CPU-id reads) across the read.
    let v = *black_box(&locks.data);
    let slot = locks.slots.get();
    slot.store(slot.load(Relaxed) - 1, Relaxed);
    v
}

/// 64 reads: one loop of its own for each lock (no dispatch per read).
#[inline(never)]
fn reads64(read: impl Fn() -> u64) {
    for _ in 0..64 {
        black_box(read());
    }
}

/// One run: (ns per read pair per thread, writer latencies in ns).
fn run_rw(
    locks: &Locks,
    which: Lock,
    threads: usize,
    writer: Option<Duration>,
    dur: Duration,
) -> (f64, Vec<u64>) {
    let stop = CachePadded::new(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let results: Vec<(u64, Vec<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier, cores) = (&stop, &barrier, &cores);
                s.spawn(move || {
                    if let Some(core) = cores.get(t) {
                        core_affinity::set_for_current(*core);
                    }
                    rcu::cpu_online();
                    barrier.wait();
                    let mut reads = 0u64;
                    let mut lat = Vec::new();
                    let mut next_write = Instant::now() + writer.unwrap_or(Duration::MAX / 4);
                    while !stop.load(Relaxed) {
                        match which {
                            Lock::Fenced => reads64(|| *locks.fenced.read()),
                            Lock::Gated => reads64(|| *locks.gated.read()),
                            Lock::Spin => reads64(|| *locks.spin.read()),
                            Lock::ParkingLot => reads64(|| *locks.parking_lot.read()),
                            Lock::Std => reads64(|| *locks.std.read().unwrap()),
                            Lock::Baseline => reads64(|| baseline_read(locks)),
                        }
                        reads += 64;
                        if which == Lock::Gated {
                            rcu::quiescent_state();
                        }
                        if t == 0
                            && let Some(period) = writer
                        {
                            let now = Instant::now();
                            if now >= next_write {
                                let start = Instant::now();
                                match which {
                                    // No exclusion to take (no latency
                                    // recorded either).
                                    Lock::Baseline => {}
                                    Lock::Fenced => *locks.fenced.write() += 1,
                                    Lock::Gated => *locks.gated.write() += 1,
                                    Lock::Spin => *locks.spin.write() += 1,
                                    Lock::ParkingLot => *locks.parking_lot.write() += 1,
                                    Lock::Std => *locks.std.write().unwrap() += 1,
                                }
                                if which != Lock::Baseline {
                                    lat.push(start.elapsed().as_nanos() as u64);
                                }
                                next_write = now + period;
                            }
                        }
                    }
                    rcu::cpu_offline();
                    (reads, lat)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let reads: u64 = results.iter().map(|r| r.0).sum();
    let lat = results.into_iter().flat_map(|r| r.1).collect();
    (dur.as_nanos() as f64 * threads as f64 / reads as f64, lat)
}

/// ns per add per thread: per-CPU counter or a shared `fetch_add`.
fn run_counter(percpu: bool, threads: usize, dur: Duration) -> f64 {
    let counter = PerCpuCounter::new();
    let shared = CachePadded::new(AtomicI64::new(0));
    let stop = CachePadded::new(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (counter, shared, stop, barrier, cores) =
                    (&counter, &shared, &stop, &barrier, &cores);
                s.spawn(move || {
                    if let Some(core) = cores.get(t) {
                        core_affinity::set_for_current(*core);
                    }
                    barrier.wait();
                    let mut n = 0u64;
                    while !stop.load(Relaxed) {
                        for _ in 0..64 {
                            if percpu {
                                counter.add(black_box(1));
                            } else {
                                shared.fetch_add(black_box(1), Relaxed);
                            }
                        }
                        n += 64;
                    }
                    n
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    if percpu {
        assert_eq!(counter.sum(), total as i64, "per-CPU counter lost adds");
    }
    dur.as_nanos() as f64 * threads as f64 / total as f64
}

fn main() {
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    let locks = Locks {
        fenced: PerCpuRwLock::new(0),
        gated: GatedPerCpuRwLock::new(0),
        spin: spin::RwLock::new(0),
        parking_lot: parking_lot::RwLock::new(0),
        std: std::sync::RwLock::new(0),
        slots: PerCpu::new(),
        data: 0,
    };
    println!(
        "# per-CPU benchmark: {ms} ms per measurement, {reps} interleaved reps, medians (min-max)\n"
    );

    // Reader lock+unlock.
    let configs: Vec<(usize, usize)> = [1, 2]
        .iter()
        .flat_map(|&t| (0..WRITERS.len()).map(move |w| (t, w)))
        .collect();
    let mut samples = vec![vec![Vec::new(); LOCKS.len()]; configs.len()];
    let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); LOCKS.len()];
    for _ in 0..reps {
        for (c, &(threads, w)) in configs.iter().enumerate() {
            for (l, &(lock, _)) in LOCKS.iter().enumerate() {
                let (ns, lat) = run_rw(&locks, lock, threads, WRITERS[w].0, dur);
                samples[c][l].push(ns);
                if threads == 2 && w == 1 {
                    latencies[l].extend(lat);
                }
            }
        }
    }
    println!("## reader lock+unlock, ns per pair per thread\n");
    print!("| threads | writer |");
    for (_, name) in LOCKS {
        print!(" {name} |");
    }
    println!(" gated vs spin | gated / fenced time | gated / baseline time |");
    println!("|---|---|{}---|---|---|", "---|".repeat(LOCKS.len()));
    let mut gated_vs_spin_2 = 0.0;
    let mut gated_2 = 0.0;
    let (mut vs_fenced_1, mut vs_baseline_1) = (0.0, 0.0);
    let index = |which: Lock| LOCKS.iter().position(|&(l, _)| l == which).unwrap();
    let (fenced, gated, spin, baseline) = (
        index(Lock::Fenced),
        index(Lock::Gated),
        index(Lock::Spin),
        index(Lock::Baseline),
    );
    for (c, &(threads, w)) in configs.iter().enumerate() {
        print!("| {threads} | {} |", WRITERS[w].1);
        // Per-rep ratios first (`median` sorts the samples in place).
        let per_rep = |num: usize, den: usize| {
            let s = &samples[c];
            let mut r: Vec<f64> = s[num].iter().zip(&s[den]).map(|(n, d)| n / d).collect();
            median(&mut r)
        };
        let (vs_fenced, vs_baseline) = (per_rep(gated, fenced), per_rep(gated, baseline));
        let mut med = [0.0; LOCKS.len()];
        for l in 0..LOCKS.len() {
            let s = &mut samples[c][l];
            med[l] = median(s);
            print!(" {:.2} ({:.2}-{:.2}) |", med[l], s[0], s[s.len() - 1]);
        }
        let ratio = med[spin] / med[gated];
        println!(" {ratio:.1}x | {vs_fenced:.2}x | {vs_baseline:.2}x |");
        if threads == 2 && w == 0 {
            gated_vs_spin_2 = ratio;
            gated_2 = med[gated];
        }
        if threads == 1 && w == 0 {
            (vs_fenced_1, vs_baseline_1) = (vs_fenced, vs_baseline);
        }
    }

    println!("\n## writer latency (2 threads, a writer every 1 ms), ns\n");
    println!("| lock | writes | median | p99 |");
    println!("|---|---|---|---|");
    for (l, (_, name)) in LOCKS.iter().enumerate() {
        let lat = &mut latencies[l];
        lat.sort_unstable();
        if lat.is_empty() {
            continue;
        }
        println!(
            "| {name} | {} | {} | {} |",
            lat.len(),
            lat[lat.len() / 2],
            lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
        );
    }

    // Counter add.
    let mut percpu = Vec::new();
    let mut shared = Vec::new();
    for _ in 0..reps {
        percpu.push(run_counter(true, 2, dur));
        shared.push(run_counter(false, 2, dur));
    }
    let (p, s) = (median(&mut percpu), median(&mut shared));
    println!("\n## counter add, 2 threads, ns per add per thread\n");
    println!("| PerCpuCounter::add | shared fetch_add | ratio |");
    println!("|---|---|---|");
    println!("| {p:.2} | {s:.2} | {:.1}x |", s / p);

    println!("\n## goals\n");
    let goal = |name: &str, ok: bool, what: String| {
        println!("- {name}: {what} -> {}", if ok { "MET" } else { "NOT MET" })
    };
    goal(
        "gated reader >= 6x spin::RwLock read, 2 threads",
        gated_vs_spin_2 >= 6.0,
        format!("{gated_vs_spin_2:.1}x"),
    );
    goal(
        "gated reader <= 1 ns per pair, 2 threads",
        gated_2 <= 1.0,
        format!("{gated_2:.2} ns"),
    );
    goal(
        "gated reader time <= fenced reader time, 1 thread, no writer",
        vs_fenced_1 <= 1.0,
        format!("{vs_fenced_1:.2}x"),
    );
    goal(
        "gated reader time <= 1.5x per-CPU inc/dec baseline, 1 thread, no writer",
        vs_baseline_1 <= 1.5,
        format!("{vs_baseline_1:.2}x"),
    );
    goal(
        "per-CPU add >= 4x shared fetch_add, 2 threads",
        s / p >= 4.0,
        format!("{:.1}x", s / p),
    );
}
