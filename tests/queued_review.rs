//! Review (branch `reviewq`) of the two-halves queued lock: its FIFO paths
//! (pending bit, MCS queue, interrupt nesting on the per-CPU nodes) under
//! real concurrency with waiters that halt until kicked
//! (`tests/common/halting.rs`: a wait that sleeps 10 s is a lost wake-up)
//! and, with `--features hostile`, interrupts landing at every atomic
//! operation that take a second queued lock while the interrupted CPU is
//! pending or queued on the first (the hostile suites run the queued lock
//! in the host's default test-and-set mode only: its FIFO paths never
//! meet an interrupt there).
//!
//! `cargo test --release --test queued_review`;
//! `KSYNC_HOSTILE_STRICT=1 cargo test --release --features hostile --test queued_review`;
//! `KSYNC_MAX_CPUS=9000 cargo test --release --test queued_review` (32-bit halves).

#![cfg(not(ksync_loom))]

#[path = "common/halting.rs"]
mod halting;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use ksync::kernel;
use ksync::spinlock::{IrqQueuedMutex, QueuedMutex};

const RUN: Duration = Duration::from_millis(if cfg!(debug_assertions) { 200 } else { 600 });

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Exclusion only keeps this exact: a load and a store.
struct Racy(AtomicU64);

impl Racy {
    fn bump(&self) {
        self.0.store(self.0.load(Relaxed) + 1, Relaxed);
    }
}

static A: QueuedMutex<()> = QueuedMutex::new(());
static A_COUNT: Racy = Racy(AtomicU64::new(0));
/// Taken by the "interrupt handler" and, with interrupts masked, by the
/// threads: an IRQ-safe lock.
static B: IrqQueuedMutex<()> = IrqQueuedMutex::new(());
static B_COUNT: Racy = Racy(AtomicU64::new(0));
static B_IN_IRQ: AtomicU64 = AtomicU64::new(0);
static IRQ_ON: AtomicBool = AtomicBool::new(false);

#[cfg_attr(not(feature = "hostile"), allow(dead_code))]
fn irq_handler() {
    if !IRQ_ON.load(SeqCst) {
        return;
    }
    // SAFETY: only the raw lock's `Debug` is read.
    let a = format!("{:?}", unsafe { A.raw() });
    if a.contains(&format!("tail: Some(({}, ", kernel::cpu_id())) {
        IRQ_WHILE_QUEUED.fetch_add(1, SeqCst);
    }
    let _g = B.lock();
    B_COUNT.bump();
    B_IN_IRQ.fetch_add(1, SeqCst);
}

/// Handler runs that found A's tail naming their own CPU (a node of this
/// CPU queued on A, so B's contended path takes the next node).
static IRQ_WHILE_QUEUED: AtomicU64 = AtomicU64::new(0);

/// Threads hammer A (interrupts enabled: the handler lands while they are
/// pending or queued on A and takes B on the next node) and B (masked), in
/// FIFO mode, every waiter halting until kicked.
#[test]
fn fifo_nesting_halting_stress() {
    let _serial = serial();
    kernel::set_vcpu_preemptible(false);
    kernel::set_spin_wait(&halting::HALTING);
    halting::reset();
    #[cfg(feature = "hostile")]
    let _irq = ksync::host::hostile::register_interrupt(irq_handler);
    IRQ_ON.store(true, SeqCst);
    let threads = 6;
    let start = Instant::now();
    let done: Vec<(u64, u64)> = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let (mut a, mut b) = (0u64, 0u64);
                    let mut i = 0u64;
                    while start.elapsed() < RUN {
                        i += 1;
                        {
                            let _g = A.lock();
                            A_COUNT.bump();
                            a += 1;
                        }
                        if (i + t) % 3 == 0 {
                            let _g = B.lock();
                            B_COUNT.bump();
                            b += 1;
                        }
                        if (i + t) % 5 == 0 {
                            if let Some(_g) = A.try_lock() {
                                A_COUNT.bump();
                                a += 1;
                            }
                        }
                    }
                    (a, b)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    IRQ_ON.store(false, SeqCst);
    let a: u64 = done.iter().map(|d| d.0).sum();
    let b: u64 = done.iter().map(|d| d.1).sum();
    let (timeouts, slept, kicks) = halting::counts();
    kernel::set_spin_wait(&NO_HALT);
    eprintln!(
        "a {a}, b {b} (+{} in irq, {} while queued on A), slept {slept}, kicks {kicks}, timeouts {timeouts}",
        B_IN_IRQ.load(SeqCst),
        IRQ_WHILE_QUEUED.load(SeqCst)
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(
        timeouts, 0,
        "lost wake-ups: {timeouts} waits slept 10 s without a kick"
    );
    let _ga = A.lock();
    assert_eq!(A_COUNT.0.load(Relaxed), a, "A: exclusion lost");
    drop(_ga);
    let _gb = B.lock();
    assert_eq!(
        B_COUNT.0.load(Relaxed),
        b + B_IN_IRQ.load(SeqCst),
        "B: exclusion lost"
    );
}

static NO_HALT: kernel::SpinWait = kernel::SpinWait {
    wait: thread::yield_now,
    kick: None,
};
