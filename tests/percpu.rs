//! Host tests of per-CPU data and per-CPU counters (threads play CPUs,
//! through the `test-hooks` kernel hooks).

use std::cmp::Ordering as Cmp;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::thread;

use ksync::kernel::{self, MAX_CPUS};
use ksync::percpu::PerCpu;
use ksync::percpu_counter::{self, PerCpuCounter};

const THREADS: usize = 4;

#[test]
fn each_thread_gets_its_own_slot() {
    static HITS: PerCpu<AtomicU64> = PerCpu::new();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..1000 {
                    let slot = HITS.get();
                    // Only this thread writes its slot: load + store is exact.
                    slot.store(slot.load(Relaxed) + 1, Relaxed);
                }
            });
        }
    });
    assert_eq!(HITS.iter().map(|h| h.load(Relaxed)).sum::<u64>(), 4000);
    assert_eq!(HITS.iter().len(), kernel::nr_cpus());
}

#[test]
fn remote_access_checks_the_id() {
    let p: PerCpu<u32> = PerCpu::from_fn(|i| i as u32 * 2);
    assert_eq!(*p.cpu(3), 6);
    let err = std::panic::catch_unwind(|| *p.cpu(MAX_CPUS)).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains(&MAX_CPUS.to_string()), "{msg}");
    assert!(msg.contains("CPU id"), "{msg}");
}

#[test]
fn counter_exact_sum_across_batches() {
    for batch in [1, 2, 7, 32, 0] {
        let c = PerCpuCounter::with_batch(batch);
        let per_thread = 20_000i64;
        thread::scope(|s| {
            for t in 0..THREADS {
                let c = &c;
                s.spawn(move || {
                    for i in 0..per_thread {
                        // A mix of signs and sizes, some above the batch.
                        let amount = match i % 5 {
                            0 => 3,
                            1 => -1,
                            2 => 1,
                            3 => (t as i64 + 1) * 40,
                            _ => -((t as i64 + 1) * 40),
                        };
                        c.add(amount);
                    }
                });
            }
        });
        let expected = THREADS as i64 * (per_thread / 5) * 3;
        assert_eq!(c.sum(), expected, "batch {batch}");
        assert!(
            (c.read() - expected).abs() < c.error_bound().max(1),
            "batch {batch}"
        );
        assert_eq!(c.compare(expected), Cmp::Equal);
        assert_eq!(c.compare(expected - 1), Cmp::Greater);
        assert_eq!(c.compare(expected + 1), Cmp::Less);
    }
}

#[test]
fn counter_set_inc_dec_positive() {
    let c = PerCpuCounter::new();
    assert_eq!(c.batch(), percpu_counter::default_batch());
    assert_eq!(c.batch(), (2 * kernel::nr_cpus() as i32).max(32));
    c.inc();
    c.inc();
    c.dec();
    assert_eq!(c.sum(), 1);
    c.set(-5);
    assert_eq!(c.read(), -5);
    assert_eq!(c.read_positive(), 0);
    assert_eq!(c.sum_positive(), 0);
    c.add(10);
    assert_eq!(c.sum(), 5);
}

#[test]
fn counter_total_saturates() {
    let c = PerCpuCounter::with_batch(1);
    c.set(i64::MAX - 1);
    let before = percpu_counter::overflows();
    let r = std::panic::catch_unwind(|| c.add(5));
    assert_eq!(r.is_err(), cfg!(debug_assertions));
    assert_eq!(c.sum(), i64::MAX);
    assert!(percpu_counter::overflows() > before);
}

/// Regression: adding near the `i64` edges overflowed the slot arithmetic
/// (`slot + amount`) before the batch check: `inc(); add(i64::MAX)` wrapped
/// to a fast-path add of `-1` (sum 0, no overflow counted) in release
/// builds and panicked with a bare "attempt to add with overflow" in debug
/// builds.
#[test]
fn counter_add_near_i64_edges_saturates_or_is_exact() {
    let c = PerCpuCounter::new();
    c.inc();
    let before = percpu_counter::overflows();
    let r = std::panic::catch_unwind(|| c.add(i64::MAX));
    assert_eq!(
        r.is_err(),
        cfg!(debug_assertions),
        "panics only in debug builds"
    );
    if let Err(e) = r {
        let msg = e.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(
            msg.contains("saturated"),
            "unexpected panic message: {msg:?}"
        );
    }
    assert_eq!(c.sum(), i64::MAX);
    assert!(percpu_counter::overflows() > before);

    // In range: exact, no report.
    let c = PerCpuCounter::new();
    c.add(i64::MIN);
    assert_eq!(c.sum(), i64::MIN);
    assert_eq!(c.read(), i64::MIN);
    c.add(i64::MAX);
    assert_eq!(c.sum(), -1);
    let c = PerCpuCounter::new();
    c.dec();
    c.add(i64::MIN + 1);
    assert_eq!(c.sum(), i64::MIN);
    let c = PerCpuCounter::with_batch(percpu_counter::MAX_BATCH);
    c.add(i64::from(i32::MAX));
    c.add(i64::from(i32::MIN));
    assert_eq!(c.sum(), -1);
    c.add(-(1 << 30));
    c.add(1 << 30);
    assert_eq!(c.sum(), -1);

    // Below the range: saturates at i64::MIN.
    let c = PerCpuCounter::new();
    c.dec();
    let before = percpu_counter::overflows();
    let r = std::panic::catch_unwind(|| c.add(i64::MIN));
    assert_eq!(r.is_err(), cfg!(debug_assertions));
    assert_eq!(c.sum(), i64::MIN);
    assert!(percpu_counter::overflows() > before);
}

/// `sum` and `compare` with slots that push the exact value past the `i64`
/// range without any fold saturating: `sum` saturates, `compare` stays
/// exact.
#[test]
fn counter_sum_and_compare_past_the_edges() {
    let c = PerCpuCounter::with_batch(100);
    c.set(i64::MAX - 1);
    c.add(5); // stays in this CPU's slot: the exact value is i64::MAX + 4
    assert_eq!(c.read(), i64::MAX - 1);
    assert_eq!(c.sum(), i64::MAX);
    assert_eq!(c.compare(i64::MAX), Cmp::Greater);
    c.add(-5);
    assert_eq!(c.sum(), i64::MAX - 1);
    assert_eq!(c.compare(i64::MAX - 1), Cmp::Equal);

    c.set(i64::MIN + 1);
    c.add(-5);
    assert_eq!(c.sum(), i64::MIN);
    assert_eq!(c.compare(i64::MIN), Cmp::Less);
    assert_eq!(c.compare(i64::MAX), Cmp::Less);
}
