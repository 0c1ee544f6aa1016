//! RCU benchmark: the reader's cost (`rcu::read_lock` + `RcuPtr::read` +
//! drop) against a plain `AtomicPtr` Acquire load of the same pointer (the
//! raw limit), `std::sync::RwLock` and `crossbeam_epoch::pin` + load;
//! `synchronize` latency while a reader reports quiescent states every 1,
//! 64 or 4096 reads; `call_rcu` enqueue and end-to-end cost; and a seqlock
//! read against a `spin::RwLock` read, with no writer and a writer every
//! 1 ms.
//!
//! Threads are pinned (thread `i` on core `i`), each measurement runs for a
//! fixed time (`KSYNC_BENCH_MS`, default 200), implementations are
//! interleaved within each of `KSYNC_BENCH_REPS` (default 7) repetitions,
//! and the tables show medians with min-max; ratios compare measurements of
//! the same run. `--quick` (or `KSYNC_BENCH_QUICK=1`): 50 ms, 3 reps.
//!
//! RCU readers report a quiescent state every 64 reads, as a kernel's
//! context switches would; that cost is included. The seqlock writer role
//! is taken by thread 0 when its clock says so (checked every 64 reads), so
//! a run never has more threads than cores.
//!
//! Host caveats: the CPU id (used by `quiescent_state`, `call_rcu`,
//! `process_callbacks`) comes from the `test-hooks` kernel hooks (a
//! thread-local), which costs more than a kernel's per-CPU register load;
//! and saving the interrupt state (`IrqState`, taken by the callback lists'
//! locks and by the grace-period engine's lock) sets a per-thread flag,
//! where a kernel would mask interrupts on its own CPU.
//!
//! An RCU read section holds preemption off (the kernel's hooks): the row
//! `preempt_disable+load+enable` is that floor, and the goal compares the
//! read section (with its quiescent states) with it. Two more rows split
//! the difference: the read section without quiescent states (`rcu, no
//! QS`) and the floor with the same quiescent state every 64 reads
//! (`preempt+load, QS`). The host hooks count preemption per thread (a
//! thread-local add and subtract per section); built with
//! `KSYNC_HOST_NOOP_PREEMPT=1` they are empty, as in a kernel that never
//! preempts kernel code, and the floor is the plain load.
//!
//! Run: `cargo bench --bench rcu [-- --quick]`; for the no-op hooks,
//! `KSYNC_HOST_NOOP_PREEMPT=1 CARGO_TARGET_DIR=target/noop cargo bench
//! --bench rcu` (its own target directory keeps both builds).

mod common;

use common::{CachePadded, median};
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use ksync::rcu::{self, RcuHead, RcuPtr};
use ksync::seqlock::SeqLock;

/// RCU readers report a quiescent state every this many reads.
const QS_EVERY: u64 = 64;

fn pin(cores: &[CoreId], t: usize) {
    if let Some(core) = cores.get(t) {
        core_affinity::set_for_current(*core);
    }
}

/// `q`-quantile (0..=1) of a sorted slice.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// Prints ` median (min-max) |` of `s` (sorted by `median`) and returns the
/// median.
fn cell(s: &mut [f64]) -> f64 {
    let m = median(s);
    print!(" {m:.2} ({:.2}-{:.2}) |", s[0], s[s.len() - 1]);
    m
}

/// Runs `threads` pinned threads, each calling `body(thread)` once between
/// `cpu_online` and `cpu_offline`, stops them after `dur` and returns their
/// results.
fn run_threads<R: Send>(
    threads: usize,
    dur: Duration,
    body: impl Fn(usize, &AtomicBool) -> R + Sync,
) -> Vec<R> {
    let stop = CachePadded::new(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier, cores, body) = (&stop, &barrier, &cores, &body);
                s.spawn(move || {
                    pin(cores, t);
                    rcu::cpu_online();
                    barrier.wait();
                    let r = body(t, stop);
                    rcu::cpu_offline();
                    r
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

// ---- 1. reader cost ----------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Reader {
    Rcu,
    Plain,
    PreemptPlain,
    RcuNoQs,
    PreemptPlainQs,
    Std,
    Epoch,
}

const READERS: [(Reader, &str); 7] = [
    (Reader::Rcu, "rcu read_lock+read"),
    (Reader::Plain, "AtomicPtr Acquire load"),
    (Reader::PreemptPlain, "preempt_disable+load+enable"),
    (Reader::RcuNoQs, "rcu, no QS"),
    (Reader::PreemptPlainQs, "preempt+load, QS"),
    (Reader::Std, "std::sync::RwLock read"),
    (Reader::Epoch, "crossbeam_epoch pin+load"),
];

struct Readers {
    rcu: CachePadded<RcuPtr<u64>>,
    /// The same pointer as `rcu`.
    plain: CachePadded<AtomicPtr<u64>>,
    std: CachePadded<std::sync::RwLock<u64>>,
    epoch: CachePadded<crossbeam_epoch::Atomic<u64>>,
}

/// Runs `read` in batches of 64 until `stop`; returns the number of reads.
/// `qs`: report a quiescent state after each batch.
#[inline(always)]
fn read_loop(stop: &AtomicBool, qs: bool, mut read: impl FnMut() -> u64) -> u64 {
    let mut n = 0;
    while !stop.load(Relaxed) {
        for _ in 0..QS_EVERY {
            black_box(read());
        }
        n += QS_EVERY;
        if qs {
            rcu::quiescent_state();
        }
    }
    n
}

/// ns per read per thread.
fn run_reader(r: &Readers, which: Reader, threads: usize, dur: Duration) -> f64 {
    let reads: u64 = run_threads(threads, dur, |_, stop| match which {
        Reader::Rcu => read_loop(stop, true, || {
            let guard = rcu::read_lock();
            r.rcu.read(&guard).map_or(0, |v| *v)
        }),
        Reader::Plain => read_loop(stop, false, || {
            let p = r.plain.load(Acquire);
            // SAFETY: `p` points to the value published in `main`, freed
            // only after every reader thread has been joined.
            unsafe { *p }
        }),
        // What a read section must cost at least: the kernel's own
        // preemption hooks around the load (RCU readers hold preemption
        // off). With no-op hooks it is the plain load.
        Reader::PreemptPlain => read_loop(stop, false, || {
            let _preempt = ksync::kernel::preempt_disable();
            let p = r.plain.load(Acquire);
            // SAFETY: as for `Plain`.
            unsafe { *p }
        }),
        // The two rows that split the cost: the read section without the
        // quiescent states, and the floor with them (the same call every
        // 64 reads as the RCU row).
        Reader::RcuNoQs => read_loop(stop, false, || {
            let guard = rcu::read_lock();
            r.rcu.read(&guard).map_or(0, |v| *v)
        }),
        Reader::PreemptPlainQs => read_loop(stop, true, || {
            let _preempt = ksync::kernel::preempt_disable();
            let p = r.plain.load(Acquire);
            // SAFETY: as for `Plain`.
            unsafe { *p }
        }),
        Reader::Std => read_loop(stop, false, || *r.std.read().unwrap()),
        Reader::Epoch => read_loop(stop, false, || {
            let guard = crossbeam_epoch::pin();
            let shared = r.epoch.load(Acquire, &guard);
            // SAFETY: non-null (set in `main`), never replaced while readers
            // run, and freed only after they have been joined.
            unsafe { *shared.deref() }
        }),
    })
    .into_iter()
    .sum();
    dur.as_nanos() as f64 * threads as f64 / reads as f64
}

// ---- 2. synchronize latency --------------------------------------------------

/// The reader's quiescent-state interval; `None`: no reader thread.
const SYNC_QS: [Option<u64>; 4] = [None, Some(1), Some(64), Some(4096)];

/// Thread 0 calls `synchronize` back to back while thread 1 (if `qs_every`)
/// runs read sections and reports a quiescent state every `qs_every` reads.
/// Returns the latencies in ns.
fn run_sync(ptr: &RcuPtr<u64>, qs_every: Option<u64>, dur: Duration) -> Vec<u64> {
    let threads = if qs_every.is_some() { 2 } else { 1 };
    run_threads(threads, dur, |t, stop| {
        let mut lat = Vec::new();
        if t == 0 {
            while !stop.load(Relaxed) {
                let start = Instant::now();
                rcu::synchronize();
                lat.push(start.elapsed().as_nanos() as u64);
            }
        } else {
            let every = qs_every.unwrap_or(1);
            while !stop.load(Relaxed) {
                for _ in 0..every {
                    let guard = rcu::read_lock();
                    black_box(ptr.read(&guard).map_or(0, |v| *v));
                }
                rcu::quiescent_state();
            }
        }
        lat
    })
    .into_iter()
    .flatten()
    .collect()
}

// ---- 3. call_rcu -------------------------------------------------------------

const BATCHES: [usize; 2] = [64, 4096];

/// Callbacks run (all on the one benchmark thread).
static RAN: AtomicUsize = AtomicUsize::new(0);

unsafe fn count_callback(_head: *mut RcuHead) {
    RAN.fetch_add(1, Relaxed);
}

/// ns per callback: `call_rcu` on `batch` preallocated heads, timed; then,
/// when `end_to_end`, quiescent states and `process_callbacks` until all of
/// them ran, also timed; else `barrier`, untimed.
fn run_call_rcu(batch: usize, end_to_end: bool, dur: Duration) -> f64 {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(&cores, 0);
            rcu::cpu_online();
            let mut heads: Vec<RcuHead> = (0..batch).map(|_| RcuHead::new()).collect();
            let base = heads.as_mut_ptr();
            let (mut timed, mut calls) = (Duration::ZERO, 0u64);
            let wall = Instant::now();
            while wall.elapsed() < dur {
                let target = RAN.load(Relaxed) + batch;
                let start = Instant::now();
                for i in 0..batch {
                    // SAFETY: `base.add(i)` is a head of `heads`, which is
                    // not resized and outlives its callbacks (every batch is
                    // drained below); it is not queued (the previous batch
                    // was drained), and `count_callback` is safe anywhere.
                    unsafe { rcu::call_rcu(base.add(i), count_callback) };
                }
                if end_to_end {
                    while RAN.load(Relaxed) < target {
                        rcu::quiescent_state();
                        rcu::process_callbacks();
                    }
                    timed += start.elapsed();
                } else {
                    timed += start.elapsed();
                    rcu::barrier();
                }
                assert_eq!(RAN.load(Relaxed), target, "callbacks lost or repeated");
                calls += batch as u64;
            }
            rcu::cpu_offline();
            drop(heads);
            timed.as_nanos() as f64 / calls as f64
        })
        .join()
        .unwrap()
    })
}

// ---- 4. seqlock --------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Seq {
    SeqLock,
    Spin,
}

const SEQS: [(Seq, &str); 2] = [
    (Seq::SeqLock, "SeqLock read_with"),
    (Seq::Spin, "spin::RwLock read"),
];

/// Writer period: none, 1 ms.
const WRITERS: [(Option<Duration>, &str); 2] = [
    (None, "no writer"),
    (Some(Duration::from_millis(1)), "writer/1ms"),
];

struct Pairs {
    seq: CachePadded<SeqLock<[u64; 2]>>,
    spin: CachePadded<spin::RwLock<[u64; 2]>>,
}

/// ns per read per thread. Writes add one to both words; readers check
/// that they always see them equal.
fn run_seq(p: &Pairs, which: Seq, threads: usize, writer: Option<Duration>, dur: Duration) -> f64 {
    let reads: u64 = run_threads(threads, dur, |t, stop| {
        let (mut reads, mut torn) = (0u64, 0u64);
        let mut next_write = Instant::now() + writer.unwrap_or(Duration::MAX / 4);
        while !stop.load(Relaxed) {
            for _ in 0..64 {
                let d = match which {
                    Seq::SeqLock => p.seq.read_with(|v| v[0] ^ v[1]),
                    Seq::Spin => {
                        let v = p.spin.read();
                        v[0] ^ v[1]
                    }
                };
                torn |= black_box(d);
            }
            reads += 64;
            if t == 0
                && let Some(period) = writer
            {
                let now = Instant::now();
                if now >= next_write {
                    match which {
                        Seq::SeqLock => {
                            let mut w = p.seq.write();
                            w[0] += 1;
                            w[1] += 1;
                        }
                        Seq::Spin => {
                            let mut w = p.spin.write();
                            w[0] += 1;
                            w[1] += 1;
                        }
                    }
                    next_write = now + period;
                }
            }
        }
        assert_eq!(torn, 0, "a reader saw a torn pair");
        reads
    })
    .into_iter()
    .sum();
    dur.as_nanos() as f64 * threads as f64 / reads as f64
}

// ---- main --------------------------------------------------------------------

fn main() {
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    println!(
        "# RCU benchmark: {ms} ms per measurement, {reps} interleaved reps, medians (min-max)\n"
    );
    println!(
        "Host: CPU ids from a thread-local hook; IrqState sets a per-thread \
         \"interrupts off\" flag (call_rcu, process_callbacks, grace-period end).\n"
    );

    // 1. Reader cost.
    let value = Box::into_raw(Box::new(42u64));
    let readers = Readers {
        rcu: CachePadded::new(RcuPtr::null()),
        plain: CachePadded::new(AtomicPtr::new(value)),
        std: CachePadded::new(std::sync::RwLock::new(42)),
        epoch: CachePadded::new(crossbeam_epoch::Atomic::new(42)),
    };
    // SAFETY: `value` is freed only at the end, after the readers are gone
    // and it is unpublished.
    unsafe { readers.rcu.publish(value) };
    let threads = [1, 2];
    let mut samples = vec![vec![Vec::new(); READERS.len()]; threads.len()];
    for _ in 0..reps {
        for (c, &n) in threads.iter().enumerate() {
            for (i, &(which, _)) in READERS.iter().enumerate() {
                samples[c][i].push(run_reader(&readers, which, n, dur));
            }
        }
    }
    println!(
        "## reader cost, ns per read per thread (RCU readers report a quiescent state \
         every {QS_EVERY} reads, included)\n"
    );
    print!("| threads |");
    for (_, name) in READERS {
        print!(" {name} |");
    }
    println!(
        " rcu vs plain load | rcu vs preempt+load | without QS: rcu vs preempt+load | \
         both with QS |"
    );
    println!("|---|{}---|---|---|---|", "---|".repeat(READERS.len()));
    let mut rcu_vs_plain = Vec::new();
    for (c, &n) in threads.iter().enumerate() {
        print!("| {n} |");
        let med: Vec<f64> = samples[c].iter_mut().map(|s| cell(s)).collect();
        let (ratio, vs_preempt) = (med[0] / med[1], med[0] / med[2]);
        let (no_qs, both_qs) = (med[3] / med[2], med[0] / med[4]);
        println!(" {ratio:.2}x | {vs_preempt:.2}x | {no_qs:.2}x | {both_qs:.2}x |");
        rcu_vs_plain.push((n, ratio, vs_preempt));
    }

    // 2. synchronize latency, with the same pointer for the reader.
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); SYNC_QS.len()];
    for _ in 0..reps {
        for (i, &qs) in SYNC_QS.iter().enumerate() {
            lat[i].extend(run_sync(&readers.rcu, qs, dur));
        }
    }
    println!("\n## synchronize latency, ns (updater thread + reader thread)\n");
    println!("| reader QS every (reads) | synchronize calls | median | p99 |");
    println!("|---|---|---|---|");
    for (i, &qs) in SYNC_QS.iter().enumerate() {
        let l = &mut lat[i];
        l.sort_unstable();
        let label = qs.map_or("no reader".to_string(), |n| n.to_string());
        if l.is_empty() {
            println!("| {label} | 0 | - | - |");
            continue;
        }
        println!(
            "| {label} | {} | {} | {} |",
            l.len(),
            quantile(l, 0.5),
            quantile(l, 0.99)
        );
    }

    // The readers are gone (joined): unpublish and free.
    // SAFETY: null.
    unsafe { readers.rcu.publish(std::ptr::null_mut()) };
    // SAFETY: from `Box::into_raw` above; unpublished from both pointers'
    // readers, which have all been joined.
    drop(unsafe { Box::from_raw(value) });
    // SAFETY: no thread uses the epoch pointer any more.
    drop(unsafe { CachePadded::into_inner(readers.epoch).into_owned() });

    // 3. call_rcu.
    let mut enqueue = vec![Vec::new(); BATCHES.len()];
    let mut end_to_end = vec![Vec::new(); BATCHES.len()];
    for _ in 0..reps {
        for (i, &batch) in BATCHES.iter().enumerate() {
            enqueue[i].push(run_call_rcu(batch, false, dur));
            end_to_end[i].push(run_call_rcu(batch, true, dur));
        }
    }
    println!("\n## call_rcu, 1 thread, ns per callback\n");
    println!(
        "| batch | enqueue (call_rcu) | end-to-end (call_rcu + grace periods + process_callbacks) |"
    );
    println!("|---|---|---|");
    for (i, batch) in BATCHES.iter().enumerate() {
        print!("| {batch} |");
        cell(&mut enqueue[i]);
        cell(&mut end_to_end[i]);
        println!();
    }

    // 4. seqlock vs spin::RwLock.
    let pairs = Pairs {
        seq: CachePadded::new(SeqLock::new([0; 2])),
        spin: CachePadded::new(spin::RwLock::new([0; 2])),
    };
    let configs: Vec<(usize, usize)> = threads
        .iter()
        .flat_map(|&t| (0..WRITERS.len()).map(move |w| (t, w)))
        .collect();
    let mut samples = vec![vec![Vec::new(); SEQS.len()]; configs.len()];
    for _ in 0..reps {
        for (c, &(n, w)) in configs.iter().enumerate() {
            for (i, &(which, _)) in SEQS.iter().enumerate() {
                samples[c][i].push(run_seq(&pairs, which, n, WRITERS[w].0, dur));
            }
        }
    }
    println!("\n## [u64; 2] read, ns per read per thread\n");
    print!("| threads | writer |");
    for (_, name) in SEQS {
        print!(" {name} |");
    }
    println!(" spin vs seqlock |");
    println!("|---|---|{}---|", "---|".repeat(SEQS.len()));
    let mut seq_vs_spin = Vec::new();
    for (c, &(n, w)) in configs.iter().enumerate() {
        print!("| {n} | {} |", WRITERS[w].1);
        let med: Vec<f64> = samples[c].iter_mut().map(|s| cell(s)).collect();
        let ratio = med[1] / med[0];
        println!(" {ratio:.1}x |");
        seq_vs_spin.push((n, WRITERS[w].1, ratio));
    }

    println!("\n## goals\n");
    let hooks = if option_env!("KSYNC_HOST_NOOP_PREEMPT").is_some() {
        "no-op preemption hooks"
    } else {
        "host preemption hooks (a per-thread count)"
    };
    for (n, ratio, vs_preempt) in rcu_vs_plain {
        println!(
            "- rcu read_lock+read within 1.25x of the kernel's preempt_disable + plain Acquire load + preempt_enable, \
             {n} thread(s), {hooks}: {vs_preempt:.2}x -> {} (vs the plain load alone: {ratio:.2}x)",
            if vs_preempt <= 1.25 { "MET" } else { "NOT MET" }
        );
    }
    for (n, writer, ratio) in seq_vs_spin {
        println!(
            "- seqlock read vs spin::RwLock read, {n} thread(s), {writer}: seqlock {ratio:.1}x as fast"
        );
    }
}
