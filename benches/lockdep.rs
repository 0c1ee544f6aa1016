//! What lockdep costs: uncontended lock + unlock on one thread, for the
//! locks wired to lockdep (the raw ticket, TTAS and queued locks, their
//! `lock_api` mutexes, the IRQ-saving form, `LockRef`, `SeqLock` writers,
//! `BrLock`), measured in a build without the `lockdep` feature and in one
//! with it:
//!
//! ```text
//! cargo bench --bench lockdep [-- --quick]
//! cargo bench --bench lockdep --features lockdep [-- --quick]
//! ```
//!
//! Each case runs for a fixed time (`KSYNC_BENCH_MS`, default 200) in
//! each of `KSYNC_BENCH_REPS` (default 7) interleaved repetitions; the
//! table shows the median (min-max) in ns per lock + unlock. "nested"
//! takes a second lock while holding the first: with lockdep, that is a
//! known dependency to look up (the first time, it is a new one to add).
//!
//! Host caveat: the CPU id and the interrupt state come from the
//! `test-hooks` kernel hooks (thread-locals), which cost more than a
//! kernel's per-CPU register; lockdep asks them several times per
//! acquisition.

// Only `median` and `settings` are used here.
#[allow(unused_imports)]
mod common;

use common::median;
use std::hint::black_box;
use std::time::{Duration, Instant};

use ksync::LockRef;
use ksync::brlock::BrLock;
use ksync::seqlock::SeqLock;
use ksync::spinlock::{
    IrqTicketMutex, QueuedMutex, RawQueuedLock, RawTicketLock, RawTtasLock, TicketMutex,
};

static LOCKREF: LockRef = LockRef::new(1);
static INNER: LockRef = LockRef::new(1);
static SEQ: SeqLock<u64> = SeqLock::new(0);
static BR: BrLock<u64> = BrLock::new();
static TICKET: RawTicketLock = RawTicketLock::new();
static TTAS: RawTtasLock = RawTtasLock::new();
static QUEUED: RawQueuedLock = RawQueuedLock::new();
static TICKET_MUTEX: TicketMutex<u64> = TicketMutex::new(0);
static QUEUED_MUTEX: QueuedMutex<u64> = QueuedMutex::new(0);
static IRQ_MUTEX: IrqTicketMutex<u64> = IrqTicketMutex::new(0);

type Case = (&'static str, fn(u64));

const CASES: [Case; 11] = [
    ("RawTicketLock lock+unlock", |n| {
        for _ in 0..n {
            black_box(&TICKET).lock();
            // SAFETY: locked just above, on this thread.
            unsafe { TICKET.unlock() };
        }
    }),
    ("RawTtasLock lock+unlock", |n| {
        for _ in 0..n {
            black_box(&TTAS).lock();
            // SAFETY: locked just above, on this thread.
            unsafe { TTAS.unlock() };
        }
    }),
    ("RawQueuedLock lock+unlock", |n| {
        for _ in 0..n {
            black_box(&QUEUED).lock();
            // SAFETY: locked just above, on this thread.
            unsafe { QUEUED.unlock() };
        }
    }),
    ("TicketMutex::lock", |n| {
        for _ in 0..n {
            *TICKET_MUTEX.lock() += 1;
        }
    }),
    ("QueuedMutex::lock", |n| {
        for _ in 0..n {
            *QUEUED_MUTEX.lock() += 1;
        }
    }),
    ("IrqTicketMutex::lock", |n| {
        for _ in 0..n {
            *IRQ_MUTEX.lock() += 1;
        }
    }),
    ("LockRef::lock", |n| {
        for _ in 0..n {
            drop(black_box(LOCKREF.lock()));
        }
    }),
    ("LockRef::lock, nested", |n| {
        for _ in 0..n {
            let outer = LOCKREF.lock();
            drop(black_box(INNER.lock()));
            drop(outer);
        }
    }),
    ("SeqLock::write (u64)", |n| {
        for _ in 0..n {
            *SEQ.write() += 1;
        }
    }),
    ("SeqLock::write_irqsave (u64)", |n| {
        for _ in 0..n {
            *SEQ.write_irqsave() += 1;
        }
    }),
    ("BrLock::local_lock", |n| {
        for _ in 0..n {
            *BR.local_lock() += 1;
        }
    }),
];

/// ns per iteration of `case`, running it for about `dur`.
fn measure(case: fn(u64), dur: Duration) -> f64 {
    let mut n = 1024;
    loop {
        let start = Instant::now();
        case(n);
        let took = start.elapsed();
        if took >= dur / 4 {
            let rest = (n as f64 * (dur.as_secs_f64() / took.as_secs_f64())) as u64;
            let start = Instant::now();
            case(rest.max(1));
            return start.elapsed().as_nanos() as f64 / rest.max(1) as f64;
        }
        n *= 4;
    }
}

fn main() {
    let (ms, reps) = common::settings();
    let dur = Duration::from_millis(ms);
    let lockdep = cfg!(feature = "lockdep");
    println!(
        "lock + unlock, one thread, lockdep {} ({} ms x {reps} reps)",
        if lockdep { "ON" } else { "off" },
        ms
    );
    // Warm-up (with lockdep: registers the classes and the one edge).
    for (_, case) in CASES {
        case(1000);
    }
    let mut results: Vec<Vec<f64>> = CASES.iter().map(|_| Vec::new()).collect();
    for _ in 0..reps {
        for (i, (_, case)) in CASES.iter().enumerate() {
            results[i].push(measure(*case, dur));
        }
    }
    println!("| case | ns per lock + unlock, median (min-max) |");
    println!("|---|---|");
    for ((name, _), r) in CASES.iter().zip(&mut results) {
        let (lo, hi) = (
            r.iter().copied().fold(f64::INFINITY, f64::min),
            r.iter().copied().fold(0.0, f64::max),
        );
        println!("| {name} | {:.1} ({lo:.1}-{hi:.1}) |", median(r));
    }
}
