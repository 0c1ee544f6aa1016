//! Lock benchmark with oversubscription: a counter behind each lock,
//! threads incrementing it for a fixed time, at 1, 2, 4 and 8 threads (on
//! a 2-core machine 4 and 8 are 2x and 4x oversubscribed, as a guest with
//! more vCPUs than host cores is).
//!
//! Locks: the lock inside `LockRef` (lock + `set_count`) and lockref's
//! lockless get+put, `TicketMutex` and `QueuedMutex` each in both modes
//! (strict FIFO, `set_vcpu_preemptible(false)`; and the preemptible
//! test-and-set hand-off, `true`), `TtasMutex`, `spin::Mutex`, and
//! `parking_lot::Mutex` (which parks: the reference for a hosted OS).
//! Throughput counts increments by time, never a fixed number per thread
//! (a thread could finish inside one time slice and the run would measure
//! nothing); fairness is the min/max of the per-thread counts.
//!
//! Implementations are interleaved within each repetition (order rotated
//! per rep) and the table shows medians; the ratio columns compare each
//! lock with itself at one thread per core, in the same run. Thread `i` is
//! pinned to core `i % cores`. `--quick` (or `KSYNC_BENCH_QUICK`) runs
//! 50 ms x 3 reps and is for checking results only: every counter must
//! equal the increments its threads counted.
//!
//! Run: `cargo bench --bench locks [-- --quick]`.
//!
//! `-- --per-op [N]` instead runs N (default 1,000,000) uncontended
//! lock+unlock pairs of each documented lock type, one thread, each type
//! in a loop function of its own (`per_op_*`), and prints ns per pair;
//! under `valgrind --tool=callgrind --toggle-collect='*per_op_*'` the
//! instructions of each function divided by N are the instructions per
//! uncontended lock+unlock (see `per_op` below for the command).

mod common;

use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::{CachePadded, median, timed_threads};
use core_affinity::CoreId;
use ksync::LockRef;
use ksync::kernel::set_vcpu_preemptible;
use ksync::spinlock::{
    ArchIrqTicketMutex, IrqQueuedMutex, IrqTicketMutex, IrqTtasMutex, NoGuard, QueuedMutex,
    RawIrqSave, RawTicketLock, SpinLock, TicketMutex, TtasMutex,
};

const THREADS: [usize; 4] = [1, 2, 4, 8];

/// The locks, in table order: name, and the mode it runs in (`None`: the
/// lock has no mode, the host default is left as it is).
const IMPLS: [(&str, Option<bool>); 11] = [
    ("LockRef lock+count FIFO", Some(false)),
    ("LockRef lock+count preemptible", Some(true)),
    ("LockRef lockless get+put", None),
    ("TicketMutex FIFO", Some(false)),
    ("TicketMutex preemptible", Some(true)),
    ("QueuedMutex FIFO", Some(false)),
    ("QueuedMutex preemptible", Some(true)),
    ("TtasMutex", Some(true)),
    ("spin::Mutex", None),
    ("parking_lot::Mutex", None),
    ("IrqQueuedMutex preemptible", Some(true)),
];

/// One measurement.
struct Sample {
    /// Increments per microsecond, all threads together.
    per_us: f64,
    /// min / max of the per-thread counts.
    fairness: f64,
}

/// Runs `op` on `threads` pinned threads for `dur`; returns the elapsed
/// nanoseconds and each thread's count.
fn measure<F: Fn() + Sync>(
    threads: usize,
    dur: Duration,
    cores: &[CoreId],
    op: F,
) -> (f64, Vec<u64>) {
    timed_threads(threads, dur, cores, |stop| {
        let mut n = 0u64;
        while !stop.load(Relaxed) {
            op();
            n += 1;
        }
        n
    })
}

/// One measurement of lock `imp` at `threads` threads, on a fresh lock;
/// checks that the counter equals the increments counted.
fn run(imp: usize, threads: usize, dur: Duration, cores: &[CoreId]) -> Sample {
    if let Some(preemptible) = IMPLS[imp].1 {
        set_vcpu_preemptible(preemptible);
    }
    macro_rules! mutex {
        ($mutex:expr) => {{
            let m = CachePadded::new($mutex);
            let (ns, counts) = measure(threads, dur, cores, || *black_box(&*m).lock() += 1);
            (ns, counts, *m.lock())
        }};
    }
    let (ns, counts, total) = match imp {
        0 | 1 => {
            let lr = CachePadded::new(LockRef::new(0));
            let (ns, counts) = measure(threads, dur, cores, || {
                let mut g = black_box(&*lr).lock();
                let c = g.count();
                g.set_count(c + 1);
            });
            (ns, counts, lr.count() as u64)
        }
        2 => {
            // get + put on a base reference: the count returns to 1; the
            // total is the number of pairs.
            let lr = CachePadded::new(LockRef::new(1));
            let (ns, counts) = measure(threads, dur, cores, || {
                let lr = black_box(&*lr);
                lr.get();
                if lr.put_return().is_none() {
                    let mut g = lr.lock();
                    let c = g.count();
                    g.set_count(c - 1);
                }
            });
            assert_eq!(lr.count(), 1, "lockref get+put lost an update");
            let total = counts.iter().sum();
            (ns, counts, total)
        }
        3 | 4 => mutex!(TicketMutex::new(0u64)),
        5 | 6 => mutex!(QueuedMutex::new(0u64)),
        7 => mutex!(TtasMutex::new(0u64)),
        8 => mutex!(spin::Mutex::<u64>::new(0)),
        9 => mutex!(parking_lot::Mutex::new(0u64)),
        10 => mutex!(IrqQueuedMutex::new(0u64)),
        _ => unreachable!(),
    };
    let sum: u64 = counts.iter().sum();
    assert_eq!(
        total, sum,
        "{}, {threads} threads: lost updates",
        IMPLS[imp].0
    );
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    Sample {
        per_us: sum as f64 / (ns / 1000.0),
        fairness: *min as f64 / (*max).max(1) as f64,
    }
}

/// The lock types of the README's "which lock" table, each measured by a
/// loop function of its own: `(name, fn(iterations))`.
macro_rules! per_op_types {
    ($($fn:ident: $name:literal => $mutex:expr;)*) => {
        $(
            #[inline(never)]
            fn $fn(n: u64) {
                let m = CachePadded::new($mutex);
                for _ in 0..n {
                    *black_box(&*m).lock() += 1;
                }
                assert_eq!(*m.lock(), n);
            }
        )*
        const PER_OP: &[(&str, fn(u64))] = &[$(($name, $fn)),*];
    };
}

// One row per distinct type: two rows of one type would be one function
// (the linker folds identical code), and callgrind would count both runs
// under one name.
per_op_types! {
    per_op_ticket: "TicketMutex = SpinLock<T>" => TicketMutex::new(0u64);
    per_op_queued: "QueuedMutex" => QueuedMutex::new(0u64);
    per_op_ttas: "TtasMutex" => TtasMutex::new(0u64);
    per_op_noguard: "SpinLock<T, NoGuard>" => SpinLock::<u64, NoGuard>::new(0);
    per_op_irq_ticket: "IrqTicketMutex = SpinLock<T, IrqDisabled>" => IrqTicketMutex::new(0u64);
    per_op_irq_queued: "IrqQueuedMutex = SpinLock<T, IrqDisabled, QueuedLock>" =>
        IrqQueuedMutex::new(0u64);
    per_op_irq_ttas: "IrqTtasMutex = SpinLock<T, IrqDisabled, TtasLock>" => IrqTtasMutex::new(0u64);
    per_op_irq_save_ticket: "Mutex<RawIrqSave<RawTicketLock>>" =>
        ksync::lock_api::Mutex::<RawIrqSave<RawTicketLock>, u64>::new(0);
    per_op_arch_irq_ticket: "ArchIrqTicketMutex = SpinLock<T, IrqDisabled<ArchIrq>>" =>
        ArchIrqTicketMutex::new(0u64);
}

/// This thread's CPU time in ns (Linux), else the wall clock: on a shared
/// machine the wall clock also counts the time other processes ran.
fn cpu_ns() -> u128 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a
        // constant the kernel knows.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
        ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos()
    }
}

/// `--per-op [N] [REPS]`: one thread, no contention, FIFO mode (the ticket
/// and queued locks' plain paths); each type's N pairs REPS times (types
/// interleaved within each rep), printing the median and the minimum of
/// the reps' thread CPU ns per pair. For instruction counts:
/// `valgrind --tool=callgrind --toggle-collect='locks::per_op_ticket'
/// target/release/deps/locks-* --per-op 100000 1`, then divide the
/// collected total by N (one run per type).
fn per_op(n: u64, reps: usize) {
    set_vcpu_preemptible(false);
    let mut ns: Vec<Vec<f64>> = PER_OP.iter().map(|_| Vec::new()).collect();
    for _ in 0..reps {
        for (i, (_, f)) in PER_OP.iter().enumerate() {
            let start = cpu_ns();
            f(n);
            ns[i].push((cpu_ns() - start) as f64 / n as f64);
        }
    }
    println!("| lock | ns per lock+unlock, median | min |\n|---|---:|---:|");
    for ((name, _), v) in PER_OP.iter().zip(&mut ns) {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        println!("| {name} | {:.2} | {min:.2} |", median(v));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--per-op") {
        let arg = |k: usize, d: u64| args.get(i + k).and_then(|a| a.parse().ok()).unwrap_or(d);
        return per_op(arg(1, 1_000_000), arg(2, 15) as usize);
    }
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    assert!(!cores.is_empty(), "core_affinity found no cores");
    let host_default = ksync::kernel::vcpu_preemptible();
    let start = Instant::now();

    // results[threads][impl][rep]
    let mut results: Vec<Vec<Vec<Sample>>> = THREADS
        .iter()
        .map(|_| IMPLS.iter().map(|_| Vec::new()).collect())
        .collect();
    for imp in 0..IMPLS.len() {
        run(imp, 2, dur / 5, &cores); // warm-up, not recorded
    }
    for rep in 0..reps {
        for (t, &threads) in THREADS.iter().enumerate() {
            for j in 0..IMPLS.len() {
                let i = (j + rep) % IMPLS.len();
                results[t][i].push(run(i, threads, dur, &cores));
            }
        }
        eprintln!(
            "rep {} of {reps}: {:.1} s",
            rep + 1,
            start.elapsed().as_secs_f64()
        );
    }
    set_vcpu_preemptible(host_default);

    println!("# ksync locks under oversubscription\n");
    println!(
        "{ms} ms per measurement, {reps} reps, locks interleaved (order rotated per rep), medians; \
         {} cores, thread i pinned to core i % {}. Mops/s = increments per microsecond, all \
         threads; fair = min/max of per-thread counts; \"vs 1/core\" = throughput relative to \
         the same lock at {} threads in this run.\n",
        cores.len(),
        cores.len(),
        cores.len()
    );
    let per_core = THREADS.iter().position(|&t| t == cores.len());
    print!("| lock |");
    for t in THREADS {
        print!(" {t} thr Mops/s | fair |");
        if per_core.is_some_and(|p| THREADS[p] < t) {
            print!(" vs 1/core |");
        }
    }
    println!();
    print!("|---|");
    for t in THREADS {
        print!("---:|---:|");
        if per_core.is_some_and(|p| THREADS[p] < t) {
            print!("---:|");
        }
    }
    println!();
    for (i, (name, _)) in IMPLS.iter().enumerate() {
        let med = |t: usize, f: fn(&Sample) -> f64| {
            let mut v: Vec<f64> = results[t][i].iter().map(f).collect();
            median(&mut v)
        };
        let base = per_core.map(|p| med(p, |s| s.per_us));
        print!("| {name} |");
        for (t, &threads) in THREADS.iter().enumerate() {
            let (tput, fair) = (med(t, |s| s.per_us), med(t, |s| s.fairness));
            print!(" {tput:.2} | {fair:.2} |");
            if let (Some(p), Some(base)) = (per_core, base)
                && THREADS[p] < threads
            {
                print!(" {:.2}x |", tput / base);
            }
        }
        println!();
    }
    println!(
        "\nFIFO rows: set_vcpu_preemptible(false); preemptible rows: true (LockRef's embedded \
         lock follows the same setting). Host default: preemptible = {host_default}."
    );
}
