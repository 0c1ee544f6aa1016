//! ksync's replacements for `spin`'s types, beside `spin` in the same run:
//!
//! (a) one thread, ns per operation: `RwSpinLock` read and write
//!     (lock + unlock, one access inside; with preemption off, the default,
//!     and with `NoGuard`, which disables nothing as `spin::RwLock` does)
//!     vs `spin::RwLock`; `Once::get` on an initialised `Once` vs
//!     `spin::Once::get`; `RefCount::inc` + `dec_and_test` vs a raw
//!     `fetch_add` + `fetch_sub`.
//! (b) threads: two readers on two CPUs (read lock/unlock throughput),
//!     and a 90/10 read/write mix at 2 and 4 threads with the longest
//!     time a writer waited, for `RwSpinLock<NoGuard>` and `spin::RwLock`
//!     (a reader-preferring lock: its writers starve while readers
//!     overlap).
//!
//! Implementations are interleaved within each repetition (order rotated
//! per rep); the tables show medians. Run:
//! `cargo bench --bench spin [-- --quick]`.

mod common;

use std::hint::black_box;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::time::{Duration, Instant};

use common::{CachePadded, median, per_call, timed_threads};
use core_affinity::CoreId;
use ksync::spinlock::NoGuard;
use ksync::{Once, RefCount, RwSpinLock};

/// (a): name, and the row it is compared with (its index), if any.
const SINGLE: [(&str, Option<usize>); 12] = [
    ("spin::RwLock read", None),
    ("RwSpinLock<NoGuard> read", Some(0)),
    ("RwSpinLock read (preemption off)", Some(0)),
    ("spin::RwLock write", None),
    ("RwSpinLock<NoGuard> write", Some(3)),
    ("RwSpinLock write (preemption off)", Some(3)),
    ("spin::Once::get", None),
    ("Once::get", Some(6)),
    ("raw fetch_add + fetch_sub", None),
    ("RefCount inc + dec_and_test", Some(8)),
    ("raw fetch_add (Relaxed)", None),
    ("RefCount inc", Some(10)),
];

fn single(imp: usize, dur: Duration) -> f64 {
    match imp {
        0 => {
            let l = CachePadded::new(spin::RwLock::new(1u64));
            per_call(dur, || {
                black_box(*black_box(&*l).read());
            })
        }
        1 => {
            let l = CachePadded::new(RwSpinLock::<u64, NoGuard>::new(1));
            per_call(dur, || {
                black_box(*black_box(&*l).read());
            })
        }
        2 => {
            let l = CachePadded::new(RwSpinLock::<u64>::new(1));
            per_call(dur, || {
                black_box(*black_box(&*l).read());
            })
        }
        3 => {
            let l = CachePadded::new(spin::RwLock::new(1u64));
            per_call(dur, || *black_box(&*l).write() += 1)
        }
        4 => {
            let l = CachePadded::new(RwSpinLock::<u64, NoGuard>::new(1));
            per_call(dur, || *black_box(&*l).write() += 1)
        }
        5 => {
            let l = CachePadded::new(RwSpinLock::<u64>::new(1));
            per_call(dur, || *black_box(&*l).write() += 1)
        }
        6 => {
            let o = CachePadded::new(spin::Once::<u64>::new());
            o.call_once(|| 5);
            per_call(dur, || {
                black_box(black_box(&*o).get());
            })
        }
        7 => {
            let o = CachePadded::new(Once::<u64>::new());
            o.call_once(|| 5);
            per_call(dur, || {
                black_box(black_box(&*o).get());
            })
        }
        8 => {
            let c = CachePadded::new(AtomicI32::new(1));
            per_call(dur, || {
                let c = black_box(&*c);
                c.fetch_add(1, Relaxed);
                black_box(c.fetch_sub(1, Release) == 1);
            })
        }
        9 => {
            let c = CachePadded::new(RefCount::new(1));
            per_call(dur, || {
                let c = black_box(&*c);
                c.inc();
                black_box(c.dec_and_test());
            })
        }
        10 => {
            let c = CachePadded::new(AtomicI32::new(1));
            let ns = per_call(dur, || {
                black_box(&*c).fetch_add(1, Relaxed);
            });
            c.store(1, Relaxed);
            ns
        }
        11 => {
            let c = CachePadded::new(RefCount::new(1));
            let ns = per_call(dur, || black_box(&*c).inc());
            c.set(1);
            ns
        }
        _ => unreachable!(),
    }
}

/// (b): the two locks.
const RW: [&str; 2] = ["spin::RwLock", "RwSpinLock<NoGuard>"];

/// One (b) result: operations per microsecond (all threads), and the
/// longest a single write waited for the lock, in microseconds.
struct Mixed {
    per_us: f64,
    worst_write_us: f64,
}

/// Threads looping over read (and, every `write_every`th operation, write)
/// on lock `imp` for `dur`.
fn mixed(imp: usize, threads: usize, write_every: u64, dur: Duration, cores: &[CoreId]) -> Mixed {
    macro_rules! run {
        ($lock:expr) => {{
            let lock = CachePadded::new($lock);
            let (ns, per) = timed_threads(threads, dur, cores, |stop| {
                let (mut n, mut worst) = (0u64, Duration::ZERO);
                while !stop.load(Relaxed) {
                    n += 1;
                    if write_every != 0 && n % write_every == 0 {
                        let t0 = Instant::now();
                        let mut g = lock.write();
                        worst = worst.max(t0.elapsed());
                        *g += 1;
                    } else {
                        black_box(*lock.read());
                    }
                }
                let writes = if write_every == 0 { 0 } else { n / write_every };
                (n, worst, writes)
            });
            let writes: u64 = per.iter().map(|p| p.2).sum();
            assert_eq!(*lock.read(), writes, "{}: lost writes", RW[imp]);
            let ops: u64 = per.iter().map(|p| p.0).sum();
            let worst = per.iter().map(|p| p.1).max().unwrap_or_default();
            Mixed {
                per_us: ops as f64 / (ns / 1000.0),
                worst_write_us: worst.as_secs_f64() * 1e6,
            }
        }};
    }
    match imp {
        0 => run!(spin::RwLock::new(0u64)),
        1 => run!(RwSpinLock::<u64, NoGuard>::new(0)),
        _ => unreachable!(),
    }
}

/// (b)'s cases: threads, write every nth op (0: reads only), label.
const CASES: [(usize, u64, &str); 3] = [
    (2, 0, "2 readers"),
    (2, 10, "90/10 mix, 2 threads"),
    (4, 10, "90/10 mix, 4 threads"),
];

fn main() {
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    assert!(!cores.is_empty(), "core_affinity found no cores");
    core_affinity::set_for_current(cores[0]);
    let start = Instant::now();

    let mut single_ns: Vec<Vec<f64>> = SINGLE.iter().map(|_| Vec::new()).collect();
    let mut mixed_res: Vec<Vec<Vec<Mixed>>> = CASES
        .iter()
        .map(|_| RW.iter().map(|_| Vec::new()).collect())
        .collect();
    for imp in 0..SINGLE.len() {
        single(imp, dur / 5); // warm-up
    }
    for rep in 0..reps {
        for j in 0..SINGLE.len() {
            let i = (j + rep) % SINGLE.len();
            single_ns[i].push(single(i, dur));
        }
        for (c, &(threads, every, _)) in CASES.iter().enumerate() {
            for j in 0..RW.len() {
                let i = (j + rep) % RW.len();
                mixed_res[c][i].push(mixed(i, threads, every, dur, &cores));
            }
        }
        eprintln!(
            "rep {} of {reps}: {:.1} s",
            rep + 1,
            start.elapsed().as_secs_f64()
        );
    }

    println!("# ksync vs spin\n");
    println!(
        "{ms} ms per measurement, {reps} reps, implementations interleaved (order rotated per rep), medians; {} cores.\n",
        cores.len()
    );
    println!("## (a) one thread\n");
    println!("| operation | ns/op | vs |");
    println!("|---|---|---|");
    let med: Vec<f64> = single_ns.iter_mut().map(|v| median(v)).collect();
    for (i, &(name, base)) in SINGLE.iter().enumerate() {
        let vs = base.map_or(String::new(), |b| {
            format!("{:.2}x {}", med[i] / med[b], SINGLE[b].0)
        });
        println!("| {name} | {:.2} | {vs} |", med[i]);
    }
    println!("\n## (b) threads\n");
    println!(
        "| case | lock | Mops/s | vs spin | longest write wait (us, median of each rep's longest) |"
    );
    println!("|---|---|---|---|---|");
    for (c, &(_, every, label)) in CASES.iter().enumerate() {
        let mut per: Vec<f64> = Vec::new();
        let mut worst: Vec<f64> = Vec::new();
        for r in mixed_res[c].iter() {
            per.push(median(&mut r.iter().map(|m| m.per_us).collect::<Vec<_>>()));
            worst.push(median(
                &mut r.iter().map(|m| m.worst_write_us).collect::<Vec<_>>(),
            ));
        }
        for (i, name) in RW.iter().enumerate() {
            let w = if every == 0 {
                "-".to_string()
            } else {
                format!("{:.0}", worst[i])
            };
            println!(
                "| {label} | {name} | {:.1} | {:.2}x | {w} |",
                per[i],
                per[i] / per[0]
            );
        }
    }
}
