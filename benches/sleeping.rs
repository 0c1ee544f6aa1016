//! Sleeping primitives benchmark: the sleeping mutex uncontended and
//! contended with more threads than cores, and the wake-up latency of a
//! completion and a wait queue, against `parking_lot`, `std` and ksync's
//! own spinlock.
//!
//! * (a) Uncontended lock+unlock on one thread (pinned to core 0), ns per
//!   pair: `ksync::mutex::Mutex` against `ksync::spinlock::TicketMutex`
//!   (goal: at most 1.2x its time), `parking_lot::Mutex` and
//!   `std::sync::Mutex`.
//! * (b) Contended throughput: 1, 2, 4 and 8 threads on the machine's cores
//!   (thread `i` pinned to core `i % cores`: on 2 cores, 4 and 8 threads
//!   are 2x and 4x oversubscribed), each incrementing one counter under the
//!   lock, for a fixed time: `ksync::mutex::Mutex` against
//!   `parking_lot::Mutex` (goal: at least 1x its throughput at 4 and 8
//!   threads) and `std::sync::Mutex`. Every counter must equal the
//!   increments its threads counted. The 1-thread row is the lock's
//!   uncontended throughput through the same loop, for scale.
//! * (c) Wake-up latency: a ping-pong between two threads (cores 0 and 1
//!   when there are two). The pinger waits [`PAUSE`] so that the ponger is
//!   surely asleep, stamps the time and signals; the ponger, once its wait
//!   returns, takes the difference and answers. Median and p99 per rep of
//!   ksync's `Completion` (`complete` / `wait_for_completion`), ksync's
//!   `WaitQueue` (flag, `wake_one` / `wait_event`), a `std::sync::Condvar`
//!   pair and a `parking_lot::Condvar` pair. No goal: the figures are the
//!   host scheduler's (a futex wake) as much as the primitives'.
//! * (d) Uncontended reader on one thread (pinned to core 0), ns per
//!   `read()` + drop: `ksync::percpu_rwsem::PerCpuRwSemaphore` against
//!   `ksync::percpu_rwlock::GatedPerCpuRwLock` (goal: at most 1.2x its
//!   time), interleaved with (a) in the same reps. No writer: both take
//!   the gated fast path. Readers with a writer around, and one reader
//!   per core, are not measured here (`benches/percpu.rs` has the gated
//!   lock's). The times on a loaded 2-core host swing by 2x between reps;
//!   instruction counts do not: under `valgrind --tool=callgrind`, a loop
//!   of `read()` + drop costs 207 instructions per pair for the semaphore
//!   and 205 for the gated lock (1.01x; the host test kernel's hooks are
//!   most of both; the 2 are the semaphore's test of the release step's
//!   "slow path" result, which is the gated lock's own branch as well).
//!
//! Each measurement runs for `KSYNC_BENCH_MS` (200); implementations are
//! interleaved within each of `KSYNC_BENCH_REPS` (7) repetitions, order
//! rotated per rep; tables show medians (min–max) over reps, and every
//! ratio is taken within a rep, then its median over reps. `--quick` (or
//! `KSYNC_BENCH_QUICK`): 50 ms x 3 reps, for checking results only.
//!
//! Host caveats: the sleeping mutex records its owner's task token on
//! every lock (`Kernel::current_task`, a thread-local read through the
//! `test-hooks` kernel), and `TicketMutex` disables preemption through the
//! host hooks (a thread-local count; empty with `KSYNC_HOST_NOOP_PREEMPT=1`,
//! see `benches/rcu.rs`). A waiter spins while the holder's task "runs",
//! which on the host means "has not parked": a holder descheduled by the
//! OS still counts as running.
//!
//! Run: `cargo bench --bench sleeping [-- --quick] [-- --contended]`
//! (`--contended`, or `KSYNC_BENCH_CONTENDED`: section (b) only, for A/B
//! runs of the mutex's contended path).

mod common;

use std::hint::black_box;
use std::sync::atomic::Ordering::{AcqRel, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use common::{
    CachePadded, median_of as median, on_core, per_call, percentile, ratios, summary, timed_threads,
};
use core_affinity::CoreId;
use ksync::completion::Completion;
use ksync::percpu_rwlock::GatedPerCpuRwLock;
use ksync::percpu_rwsem::PerCpuRwSemaphore;
use ksync::spinlock::TicketMutex;
use ksync::wait::WaitQueue;

// ---- statistics ----------------------------------------------------------------

// ---- (a) uncontended ----------------------------------------------------------------

/// The mutexes of (a), in table order.
const UNCONTENDED: [&str; 4] = [
    "ksync::mutex::Mutex",
    "ksync TicketMutex",
    "parking_lot::Mutex",
    "std::sync::Mutex",
];

/// ns per uncontended lock+unlock (with one increment inside) of mutex
/// `imp`, on a fresh lock; checks the count.
fn uncontended(imp: usize, dur: Duration) -> f64 {
    macro_rules! pair {
        ($mutex:expr, $lock:ident $(. $unwrap:ident ())?) => {{
            let m = CachePadded::new($mutex);
            let mut n = 0u64;
            let ns = per_call(dur, || {
                *black_box(&*m).$lock()$(.$unwrap())? += 1;
                n += 1;
            });
            assert_eq!(*m.$lock()$(.$unwrap())?, n, "{}: lost updates", UNCONTENDED[imp]);
            ns
        }};
    }
    match imp {
        0 => pair!(ksync::mutex::Mutex::new(0u64), lock),
        1 => pair!(TicketMutex::new(0u64), lock),
        2 => pair!(parking_lot::Mutex::new(0u64), lock),
        3 => pair!(std::sync::Mutex::new(0u64), lock.unwrap()),
        _ => unreachable!(),
    }
}

// ---- (b) contended --------------------------------------------------------------------

/// The mutexes of (b), in table order.
const CONTENDED: [&str; 3] = [
    "ksync::mutex::Mutex",
    "parking_lot::Mutex",
    "std::sync::Mutex",
];

/// Thread counts of (b).
const THREADS: [usize; 4] = [1, 2, 4, 8];

/// Nanoseconds the calling thread has spent on a CPU (Linux schedstat;
/// 0 where there is none).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Increments per microsecond, all threads together, of mutex `imp` at
/// `threads` threads; checks that the counter equals the increments
/// counted. Also the fairness (min / max of the per-thread counts) and
/// the workers' share of the cores: their time on a CPU over the run's
/// elapsed time times the cores (Linux schedstat; 0 elsewhere). On a
/// loaded host a lock whose waiters sleep gets less of the machine than
/// one whose waiters are runnable: this tells the two effects apart.
fn contended(imp: usize, threads: usize, dur: Duration, cores: &[CoreId]) -> (f64, f64, f64) {
    macro_rules! run {
        ($mutex:expr, $lock:ident $(. $unwrap:ident ())?) => {{
            let m = CachePadded::new($mutex);
            let (ns, counts) = timed_threads(threads, dur, cores, |stop| {
                let (mut n, t0) = (0u64, cpu_ns());
                while !stop.load(Relaxed) {
                    *black_box(&*m).$lock()$(.$unwrap())? += 1;
                    n += 1;
                }
                (n, cpu_ns() - t0)
            });
            let total = *m.$lock()$(.$unwrap())?;
            (ns, counts, total)
        }};
    }
    let (ns, counts, total) = match imp {
        0 => run!(ksync::mutex::Mutex::new(0u64), lock),
        1 => run!(parking_lot::Mutex::new(0u64), lock),
        2 => run!(std::sync::Mutex::new(0u64), lock.unwrap()),
        _ => unreachable!(),
    };
    let cpu: u64 = counts.iter().map(|c| c.1).sum();
    let counts: Vec<u64> = counts.iter().map(|c| c.0).collect();
    let sum: u64 = counts.iter().sum();
    assert_eq!(
        total, sum,
        "{}, {threads} threads: lost updates",
        CONTENDED[imp]
    );
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    (
        sum as f64 / (ns / 1000.0),
        *min as f64 / (*max).max(1) as f64,
        cpu as f64 / (ns * threads.min(cores.len()) as f64),
    )
}

// ---- (c) wake-up latency ------------------------------------------------------------

/// The signals of (c), in table order.
const SIGNALS: [&str; 4] = [
    "ksync Completion",
    "ksync WaitQueue (wake_one)",
    "std::sync::Condvar",
    "parking_lot::Condvar",
];

/// How long the pinger waits before each signal: long enough for the
/// ponger to have gone to sleep (its wait parks at once: none of these
/// spin first).
const PAUSE: Duration = Duration::from_micros(30);

/// A one-way signal between two threads: set, then wait for it and
/// clear it.
trait Signal: Sync {
    fn new() -> Self;
    fn signal(&self);
    fn wait(&self);
}

impl Signal for Completion {
    fn new() -> Self {
        Completion::new()
    }
    fn signal(&self) {
        self.complete();
    }
    fn wait(&self) {
        self.wait_for_completion();
    }
}

/// A flag and a ksync wait queue.
struct QueueSignal(AtomicBool, WaitQueue);

impl Signal for QueueSignal {
    fn new() -> Self {
        QueueSignal(AtomicBool::new(false), WaitQueue::new())
    }
    fn signal(&self) {
        self.0.store(true, Release);
        self.1.wake_one();
    }
    fn wait(&self) {
        self.1.wait_event(|| self.0.swap(false, AcqRel));
    }
}

/// A flag under a `std` mutex and a condition variable.
struct StdSignal(std::sync::Mutex<bool>, std::sync::Condvar);

impl Signal for StdSignal {
    fn new() -> Self {
        StdSignal(std::sync::Mutex::new(false), std::sync::Condvar::new())
    }
    fn signal(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_one();
    }
    fn wait(&self) {
        let mut set = self.0.lock().unwrap();
        while !*set {
            set = self.1.wait(set).unwrap();
        }
        *set = false;
    }
}

/// The same with `parking_lot`.
struct PlSignal(parking_lot::Mutex<bool>, parking_lot::Condvar);

impl Signal for PlSignal {
    fn new() -> Self {
        PlSignal(parking_lot::Mutex::new(false), parking_lot::Condvar::new())
    }
    fn signal(&self) {
        *self.0.lock() = true;
        self.1.notify_one();
    }
    fn wait(&self) {
        let mut set = self.0.lock();
        while !*set {
            self.1.wait(&mut set);
        }
        *set = false;
    }
}

/// Ping-pong for `dur` through a fresh pair of `S`: the wake-up latency of
/// each round (stamp before the signal to the return of the wait), ns.
fn ping_pong<S: Signal>(dur: Duration, cores: &[CoreId]) -> Vec<f64> {
    let (ping, pong) = (CachePadded::new(S::new()), CachePadded::new(S::new()));
    let epoch = Instant::now();
    let stamp = CachePadded::new(AtomicU64::new(0));
    let done = CachePadded::new(AtomicBool::new(false));
    let now = || epoch.elapsed().as_nanos() as u64;
    std::thread::scope(|s| {
        let ponger = s.spawn(|| {
            core_affinity::set_for_current(cores[1 % cores.len()]);
            let mut latencies = Vec::new();
            loop {
                ping.wait();
                // Relaxed: the signal orders the pinger's stamp and flag
                // before this.
                let end = now();
                if done.load(Relaxed) {
                    return latencies;
                }
                latencies.push((end - stamp.load(Relaxed)) as f64);
                pong.signal();
            }
        });
        core_affinity::set_for_current(cores[0]);
        let start = Instant::now();
        while start.elapsed() < dur {
            let pause = Instant::now();
            while pause.elapsed() < PAUSE {
                std::hint::spin_loop();
            }
            stamp.store(now(), Relaxed);
            ping.signal();
            pong.wait();
        }
        done.store(true, Relaxed);
        ping.signal();
        ponger.join().expect("ponger panicked")
    })
}

/// (median, p99) of one ping-pong run of signal `imp`.
fn latency(imp: usize, dur: Duration, cores: &[CoreId]) -> (f64, f64) {
    let mut v = match imp {
        0 => ping_pong::<Completion>(dur, cores),
        1 => ping_pong::<QueueSignal>(dur, cores),
        2 => ping_pong::<StdSignal>(dur, cores),
        3 => ping_pong::<PlSignal>(dur, cores),
        _ => unreachable!(),
    };
    assert!(!v.is_empty(), "{}: no round", SIGNALS[imp]);
    (percentile(&mut v, 50.0), percentile(&mut v, 99.0))
}

// ---- (d) per-CPU rw semaphore readers ------------------------------------------------

/// The readers of (d), in table order.
const READERS: [&str; 2] = ["ksync PerCpuRwSemaphore", "ksync GatedPerCpuRwLock"];

/// ns per uncontended `read()` + drop (one load of the value inside) of
/// reader `imp`, on a fresh lock, on this thread, no writer: both take
/// the gated fast path (the gate idle: no writer ever closed it).
fn reader(imp: usize, dur: Duration) -> f64 {
    macro_rules! pair {
        ($lock:expr) => {{
            let l = CachePadded::new($lock);
            let mut sum = 0u64;
            let ns = per_call(dur, || sum = sum.wrapping_add(*black_box(&*l).read()));
            black_box(sum);
            ns
        }};
    }
    match imp {
        0 => pair!(PerCpuRwSemaphore::new(1u64)),
        1 => pair!(GatedPerCpuRwLock::new(1u64)),
        _ => unreachable!(),
    }
}

/// Prints one goal line: `v` against `target` (`op`: "<=" or ">=").
fn goal(what: String, v: f64, op: &str, target: f64) {
    let met = if op == "<=" { v <= target } else { v >= target };
    println!(
        "- {what}: {v:.2}x (goal {op} {target:.2}x): {}",
        if met { "MET" } else { "NOT MET" }
    );
}

/// The goal lines of (b): at least `parking_lot::Mutex`'s throughput where
/// threads outnumber the `cores`; `tput_ratio(t, 1)` is the per-rep ratio
/// at `THREADS[t]`.
fn contended_goals(tput_ratio: &dyn Fn(usize, usize) -> Vec<f64>, cores: usize) {
    for (t, &threads) in THREADS.iter().enumerate() {
        if threads > cores {
            goal(
                format!(
                    "contended ksync::mutex::Mutex throughput vs parking_lot::Mutex, {threads} threads"
                ),
                median(tput_ratio(t, 1)),
                ">=",
                1.0,
            );
        }
    }
}

// ---- main ------------------------------------------------------------------------------

fn main() {
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    assert!(!cores.is_empty(), "core_affinity found no cores");
    let start = Instant::now();
    // Section (b) only.
    let contended_only = std::env::args().any(|a| a == "--contended")
        || std::env::var_os("KSYNC_BENCH_CONTENDED").is_some();

    // results[impl][rep] (a), [threads][impl][rep] (b), [impl][rep] (c).
    let mut unc: Vec<Vec<f64>> = vec![Vec::new(); UNCONTENDED.len()];
    let mut tput: Vec<Vec<Vec<(f64, f64, f64)>>> =
        vec![vec![Vec::new(); CONTENDED.len()]; THREADS.len()];
    let mut lat: Vec<Vec<(f64, f64)>> = vec![Vec::new(); SIGNALS.len()];
    let mut rd: Vec<Vec<f64>> = vec![Vec::new(); READERS.len()];

    // Warm-up, not recorded.
    on_core(cores[0], || {
        if contended_only {
            return;
        }
        for imp in 0..UNCONTENDED.len() {
            uncontended(imp, dur / 5);
        }
        for imp in 0..READERS.len() {
            reader(imp, dur / 5);
        }
    });
    for imp in 0..CONTENDED.len() {
        contended(imp, 4, dur / 5, &cores);
    }
    for imp in 0..SIGNALS.len() {
        if !contended_only {
            latency(imp, dur / 5, &cores);
        }
    }

    for rep in 0..reps {
        on_core(cores[0], || {
            if contended_only {
                return;
            }
            for j in 0..UNCONTENDED.len() {
                let i = (j + rep) % UNCONTENDED.len();
                unc[i].push(uncontended(i, dur));
            }
            for j in 0..READERS.len() {
                let i = (j + rep) % READERS.len();
                rd[i].push(reader(i, dur));
            }
        });
        for (t, &threads) in THREADS.iter().enumerate() {
            for j in 0..CONTENDED.len() {
                let i = (j + rep) % CONTENDED.len();
                tput[t][i].push(contended(i, threads, dur, &cores));
            }
        }
        for j in 0..SIGNALS.len() {
            if contended_only {
                break;
            }
            let i = (j + rep) % SIGNALS.len();
            lat[i].push(latency(i, dur, &cores));
        }
        eprintln!(
            "rep {} of {reps}: {:.1} s",
            rep + 1,
            start.elapsed().as_secs_f64()
        );
    }

    println!("# ksync sleeping primitives\n");
    println!(
        "{ms} ms per measurement, {reps} reps, implementations interleaved (order rotated per \
         rep); {} cores; cells are median (min–max) over reps; ratios are taken within each rep, \
         then their median.\n",
        cores.len()
    );

    if !contended_only {
        println!("## (a) Uncontended lock + increment + unlock, 1 thread on core 0: ns per pair\n");
        println!("| mutex | ns | time vs TicketMutex |\n|---|---:|---:|");
        for (i, name) in UNCONTENDED.iter().enumerate() {
            println!(
                "| {name} | {} | {} |",
                summary(&unc[i], 2, ""),
                summary(&ratios(&unc[i], &unc[1]), 2, "x")
            );
        }
    }

    println!(
        "\n## (b) Contended: increments per µs, all threads (thread i on core i % {})\n",
        cores.len()
    );
    print!("| mutex |");
    for t in THREADS {
        print!(" {t} thr Mops/s | fair |");
    }
    println!("\n|---|{}", "---:|---:|".repeat(THREADS.len()));
    for (i, name) in CONTENDED.iter().enumerate() {
        print!("| {name} |");
        for samples in &tput {
            let ops: Vec<f64> = samples[i].iter().map(|s| s.0).collect();
            let fair: Vec<f64> = samples[i].iter().map(|s| s.1).collect();
            print!(" {} | {:.2} |", summary(&ops, 2, ""), median(fair));
        }
        println!();
    }
    println!("\nksync::mutex::Mutex throughput vs the others, same rep:\n");
    println!("| threads | vs parking_lot::Mutex | vs std::sync::Mutex |\n|---|---:|---:|");
    let tput_ratio = |t: usize, other: usize| -> Vec<f64> {
        let k: Vec<f64> = tput[t][0].iter().map(|s| s.0).collect();
        let o: Vec<f64> = tput[t][other].iter().map(|s| s.0).collect();
        ratios(&k, &o)
    };
    for (t, threads) in THREADS.iter().enumerate() {
        println!(
            "| {threads} | {} | {} |",
            summary(&tput_ratio(t, 1), 2, "x"),
            summary(&tput_ratio(t, 2), 2, "x")
        );
    }
    println!(
        "\nThe workers' share of the cores they run on (time on a CPU / (elapsed x \
         min(threads, cores)), Linux schedstat; below 1 where they sleep or other load runs):\n"
    );
    print!("| mutex |");
    for t in THREADS {
        print!(" {t} thr |");
    }
    println!("\n|---|{}", "---:|".repeat(THREADS.len()));
    for (i, name) in CONTENDED.iter().enumerate() {
        print!("| {name} |");
        for samples in &tput {
            let share: Vec<f64> = samples[i].iter().map(|s| s.2).collect();
            print!(" {:.2} |", median(share));
        }
        println!();
    }

    if contended_only {
        println!("\n## Goals (median of the per-rep ratios)\n");
        contended_goals(&tput_ratio, cores.len());
        eprintln!("total {:.1} s", start.elapsed().as_secs_f64());
        return;
    }
    println!(
        "\n## (c) Wake-up latency: signal to the woken thread running, ns (ping-pong between \
         cores {} and {}, the pinger pausing {} µs before each signal)\n",
        cores[0].id,
        cores[1 % cores.len()].id,
        PAUSE.as_micros()
    );
    println!("| signal | median | p99 | median vs std Condvar |\n|---|---:|---:|---:|");
    let med = |i: usize| -> Vec<f64> { lat[i].iter().map(|s| s.0).collect() };
    for (i, name) in SIGNALS.iter().enumerate() {
        let p99: Vec<f64> = lat[i].iter().map(|s| s.1).collect();
        println!(
            "| {name} | {} | {} | {} |",
            summary(&med(i), 0, ""),
            summary(&p99, 0, ""),
            summary(&ratios(&med(i), &med(2)), 2, "x")
        );
    }

    println!(
        "\n## (d) Uncontended reader: read() + load + drop, 1 thread on core 0, no writer: ns \
         per pair\n"
    );
    println!("| reader | ns | time vs GatedPerCpuRwLock |\n|---|---:|---:|");
    for (i, name) in READERS.iter().enumerate() {
        println!(
            "| {name} | {} | {} |",
            summary(&rd[i], 2, ""),
            summary(&ratios(&rd[i], &rd[1]), 2, "x")
        );
    }

    println!("\n## Goals (median of the per-rep ratios)\n");
    goal(
        "uncontended ksync::mutex::Mutex time vs TicketMutex".into(),
        median(ratios(&unc[0], &unc[1])),
        "<=",
        1.2,
    );
    goal(
        "uncontended PerCpuRwSemaphore reader time vs GatedPerCpuRwLock reader".into(),
        median(ratios(&rd[0], &rd[1])),
        "<=",
        1.2,
    );
    contended_goals(&tput_ratio, cores.len());
    eprintln!("total {:.1} s", start.elapsed().as_secs_f64());
}
