//! Host tests of the RCU grace-period engine and the gated rw lock (threads
//! play CPUs; each thread comes online, reports quiescent states between
//! read sections and goes offline).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::thread;

use ksync::percpu_rwlock::GatedPercpuRwLock;
use ksync::rcu;

const READERS: usize = 2;

/// rcutorture's pipeline in miniature: the writer publishes element
/// generations; after a grace period it marks the old one "freed". A reader
/// that ever sees a freed element inside its read section found a bug.
///
/// With `until_error`, the writer keeps going (up to 10 s) until a reader
/// reports an error: that is how the broken control is run, so that a
/// loaded machine that schedules the readers late cannot hide it.
fn pipeline(wait: fn(), rounds: u64, until_error: bool) -> usize {
    const SLOTS: usize = 4;
    let current = AtomicUsize::new(0);
    let freed: [AtomicBool; SLOTS] = Default::default();
    let stop = AtomicBool::new(false);
    let errors = AtomicUsize::new(0);
    let started = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..READERS {
            s.spawn(|| {
                rcu::cpu_online();
                started.fetch_add(1, SeqCst);
                while !stop.load(SeqCst) {
                    {
                        let _g = rcu::read_lock();
                        let slot = current.load(SeqCst);
                        for _ in 0..50 {
                            if freed[slot].load(SeqCst) {
                                errors.fetch_add(1, SeqCst);
                            }
                            std::hint::spin_loop();
                        }
                    }
                    rcu::quiescent_state();
                }
                rcu::cpu_offline();
            });
        }
        s.spawn(|| {
            rcu::cpu_online();
            while started.load(SeqCst) < READERS {
                std::hint::spin_loop();
            }
            let start = std::time::Instant::now();
            for round in 0..rounds {
                if until_error
                    && (errors.load(SeqCst) > 0
                        || start.elapsed() > std::time::Duration::from_secs(10))
                {
                    break;
                }
                // Let readers pick up the current element.
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
                let old = current.load(SeqCst);
                let new = (round as usize + 1) % SLOTS;
                freed[new].store(false, SeqCst);
                current.store(new, SeqCst);
                wait();
                freed[old].store(true, SeqCst);
            }
            stop.store(true, SeqCst);
            rcu::cpu_offline();
        });
    });
    errors.load(SeqCst)
}

#[test]
fn synchronize_waits_for_readers() {
    assert_eq!(pipeline(rcu::synchronize, 60, false), 0);
}

#[test]
fn polled_cookies_wait_for_readers() {
    fn wait() {
        let cookie = rcu::start_poll();
        while !rcu::poll(cookie) {
            rcu::quiescent_state();
            std::hint::spin_loop();
        }
    }
    assert_eq!(pipeline(wait, 60, false), 0);
}

/// The control: a `synchronize` that does not wait must be caught.
#[test]
fn broken_synchronize_is_caught() {
    fn no_wait() {}
    let caught = pipeline(no_wait, u64::MAX, true);
    assert!(
        caught > 0,
        "the pipeline test cannot tell a no-op synchronize"
    );
}

#[test]
fn cookies() {
    rcu::cpu_online();
    assert!(rcu::poll(rcu::Cookie::COMPLETED));
    let c = rcu::get_state();
    {
        let _g = rcu::read_lock();
        // A cookie taken before the read section cannot complete inside it
        // (this CPU is watching and holds the grace period up).
        let c2 = rcu::start_poll();
        assert!(!rcu::poll(c2));
    }
    rcu::cond_synchronize(c);
    assert!(rcu::poll(c));
    rcu::synchronize();
    rcu::cpu_offline();
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "inside a read-side critical section")]
fn quiescent_state_in_read_section_panics() {
    let _g = rcu::read_lock();
    rcu::quiescent_state();
}

#[test]
fn gated_rwlock_excludes() {
    let lock = GatedPercpuRwLock::new((0u64, 0u64));
    let writer_in = AtomicBool::new(false);
    let readers_in = AtomicI32::new(0);
    let writes = AtomicU64::new(0);
    let iters = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    thread::scope(|s| {
        for t in 0..4 {
            let (lock, writer_in, readers_in, writes) = (&lock, &writer_in, &readers_in, &writes);
            s.spawn(move || {
                rcu::cpu_online();
                for i in 0..iters {
                    if (i + t * 7) % 200 == 0 {
                        let mut g = lock.write();
                        assert!(!writer_in.swap(true, SeqCst));
                        assert_eq!(readers_in.load(SeqCst), 0, "writer with readers inside");
                        g.0 += 1;
                        g.1 += 1;
                        writes.fetch_add(1, SeqCst);
                        writer_in.store(false, SeqCst);
                    } else {
                        let g = lock.read();
                        readers_in.fetch_add(1, SeqCst);
                        assert!(!writer_in.load(SeqCst), "reader with a writer inside");
                        assert_eq!(g.0, g.1);
                        readers_in.fetch_sub(1, SeqCst);
                    }
                    rcu::quiescent_state();
                }
                rcu::cpu_offline();
            });
        }
    });
    assert_eq!(lock.read().0, writes.load(SeqCst));
}

/// Writers that close an idle `RcuSync` gate at the same time: the ones
/// that find it closing wait for the first one's grace period, which needs
/// their own quiescent states (regression: they used to spin without
/// reporting one, and the first writer's grace period never ended).
#[test]
fn concurrent_gate_entries_do_not_deadlock() {
    let gate = rcu::RcuSync::new();
    let barrier = std::sync::Barrier::new(3);
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                rcu::cpu_online();
                for _ in 0..20 {
                    barrier.wait();
                    gate.enter();
                    assert!(!gate.is_idle());
                    gate.exit();
                    barrier.wait();
                    while !gate.poll_idle() {
                        rcu::quiescent_state();
                    }
                }
                rcu::cpu_offline();
            });
        }
    });
    assert!(gate.is_idle());
}
