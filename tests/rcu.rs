//! Host tests of the RCU grace-period engine and the gated rw lock (threads
//! play CPUs; each thread comes online, reports quiescent states between
//! read sections and goes offline).

use std::mem::offset_of;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::thread;

mod common;

use ksync::percpu_rwlock::GatedPerCpuRwLock;
use ksync::rcu::{self, RcuHead, RcuPtr};

const READERS: usize = 2;

/// Grace periods an element ages after removal before it is freed.
const PIPE_LEN: usize = 10;
const ELEMS: usize = 32;
/// Writer rounds of the correct runs: each waits for readers that share
/// two cores with the writer, so a round costs about a scheduler slice.
const ROUNDS: u64 = 120;

/// An rcutorture-style element: `pipe` counts the grace periods that have
/// completed since it was unpublished.
struct Elem {
    head: RcuHead,
    pipe: AtomicUsize,
    freed: AtomicBool,
    index: usize,
    pool: &'static Pool,
}

struct Pool {
    free: Mutex<Vec<usize>>,
    /// Elements retired through the rounds' waits, polled waits, elements
    /// retired through `call_rcu`.
    retired: [AtomicUsize; 3],
}

/// The `call_rcu` path: each callback is one more grace period; the element
/// re-queues itself until it is `PIPE_LEN` old.
unsafe fn age_cb(head: *mut RcuHead) {
    // SAFETY: queued by `pipeline` as the head of a leaked `Elem`.
    let e = unsafe { &*head.byte_sub(offset_of!(Elem, head)).cast::<Elem>() };
    if e.pipe.fetch_add(1, SeqCst) + 1 >= PIPE_LEN {
        e.freed.store(true, SeqCst);
        e.pool.free.lock().unwrap().push(e.index);
    } else {
        // SAFETY: its callback is running, so the head is not queued.
        unsafe { rcu::call_rcu(head, age_cb) };
    }
}

/// What the pipeline saw.
struct Pipe {
    /// Reads by the age (in grace periods) of the element read, capped at
    /// `PIPE_LEN`: anything past 1 is a failure.
    histogram: [u64; PIPE_LEN + 1],
    /// Reads that found a freed element.
    freed_reads: u64,
    /// Elements retired through the rounds' waits, polled waits, elements
    /// retired through `call_rcu`.
    retired: [usize; 3],
}

impl Pipe {
    fn errors(&self) -> u64 {
        self.histogram[2..].iter().sum::<u64>() + self.freed_reads
    }
}

/// rcutorture's pipeline in miniature. The writer publishes elements and
/// retires the old one through `wait` (its synchronize), a polled cookie or
/// `call_rcu`; retired elements age one step per grace period and are
/// freed (reused) at `PIPE_LEN`. Readers record the age of what they see
/// inside their read sections: with a correct RCU it is never past 1.
///
/// With `until_error`, the writer keeps going until a reader sees an error,
/// or until the readers have made `CONTROL_READS` reads without one: that
/// is how the broken control is run. The bound is the readers' work, not
/// time, so that a loaded machine that schedules the readers late takes
/// longer but can neither hide the error nor fail for being slow.
fn pipeline(wait: fn(), rounds: u64, until_error: bool) -> Pipe {
    let pool: &'static Pool = Box::leak(Box::new(Pool {
        free: Mutex::new((0..ELEMS).collect()),
        retired: Default::default(),
    }));
    let elems: &'static [Elem] = Box::leak(
        (0..ELEMS)
            .map(|index| Elem {
                head: RcuHead::new(),
                pipe: AtomicUsize::new(0),
                freed: AtomicBool::new(true),
                index,
                pool,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let current: RcuPtr<Elem> = RcuPtr::null();
    let stop = AtomicBool::new(false);
    let errors = AtomicU64::new(0);
    let started = AtomicUsize::new(0);
    let histogram: [AtomicU64; PIPE_LEN + 1] = Default::default();
    let freed_reads = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..READERS {
            s.spawn(|| {
                rcu::cpu_online();
                started.fetch_add(1, SeqCst);
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    {
                        let guard = rcu::read_lock();
                        if let Some(e) = current.read(&guard) {
                            // Long enough for a writer with a no-op wait to
                            // get two rounds in.
                            for _ in 0..500 {
                                std::hint::spin_loop();
                            }
                            let age = e.pipe.load(SeqCst).min(PIPE_LEN);
                            histogram[age].fetch_add(1, SeqCst);
                            if age > 1 {
                                errors.fetch_add(1, SeqCst);
                            }
                            if e.freed.load(SeqCst) {
                                freed_reads.fetch_add(1, SeqCst);
                                errors.fetch_add(1, SeqCst);
                            }
                        }
                    }
                    rcu::quiescent_state();
                    n += 1;
                    if n % 256 == 0 {
                        rcu::process_callbacks();
                    }
                }
                rcu::cpu_offline();
            });
        }
        s.spawn(|| {
            rcu::cpu_online();
            while started.load(SeqCst) < READERS {
                std::hint::spin_loop();
            }
            // Elements retired through a wait, aging one step per wait.
            let mut aging: Vec<&Elem> = Vec::new();
            let age_all = |aging: &mut Vec<&Elem>| {
                aging.retain(|e| {
                    if e.pipe.fetch_add(1, SeqCst) + 1 >= PIPE_LEN {
                        e.freed.store(true, SeqCst);
                        pool.free.lock().unwrap().push(e.index);
                        false
                    } else {
                        true
                    }
                });
            };
            let polled = || {
                let cookie = rcu::start_poll();
                while !rcu::poll(cookie) {
                    rcu::quiescent_state();
                    std::hint::spin_loop();
                }
            };
            for round in 0..rounds {
                if until_error
                    && (errors.load(SeqCst) > 0
                        || histogram.iter().map(|h| h.load(SeqCst)).sum::<u64>() >= CONTROL_READS)
                {
                    break;
                }
                let index = loop {
                    if let Some(i) = pool.free.lock().unwrap().pop() {
                        break i;
                    }
                    rcu::process_callbacks();
                    wait();
                    age_all(&mut aging);
                };
                let e = &elems[index];
                e.pipe.store(0, SeqCst);
                e.freed.store(false, SeqCst);
                // Let readers pick up the current element.
                for _ in 0..20 {
                    std::hint::spin_loop();
                }
                // SAFETY: elements are leaked: valid forever.
                let old = unsafe { current.publish(e as *const Elem as *mut Elem) };
                // SAFETY: elements are leaked, so `old` is valid or null.
                if let Some(old) = unsafe { old.as_ref() } {
                    // Runs of four rounds retire through `call_rcu` (one in
                    // three runs) or through the rounds' waits.
                    let by_callback = (round / 4) % 3 == 2;
                    pool.retired[if by_callback { 2 } else { 0 }].fetch_add(1, SeqCst);
                    if by_callback {
                        // SAFETY: leaked element; its head is idle (it was
                        // free, and freeing happens after its last callback).
                        unsafe { rcu::call_rcu(&old.head as *const _ as *mut _, age_cb) };
                    } else {
                        aging.push(old);
                    }
                }
                // One grace period per round: three by `wait`, then one by
                // a polled cookie (so a no-op `wait` ages elements three
                // times in a row, while a reader may still hold them).
                if round % 4 == 3 {
                    pool.retired[1].fetch_add(1, SeqCst);
                    polled();
                } else {
                    wait();
                }
                age_all(&mut aging);
                rcu::process_callbacks();
            }
            stop.store(true, SeqCst);
            rcu::cpu_offline();
        });
    });
    rcu::barrier();
    Pipe {
        histogram: histogram.each_ref().map(|h| h.load(SeqCst)),
        freed_reads: freed_reads.load(SeqCst),
        retired: pool.retired.each_ref().map(|r| r.load(SeqCst)),
    }
}

fn check_pipe(pipe: &Pipe) {
    assert_eq!(
        pipe.errors(),
        0,
        "reader pipe {:?}, {} reads of freed elements",
        pipe.histogram,
        pipe.freed_reads
    );
    assert!(pipe.histogram[0] > 0, "no reads: the test proved nothing");
    assert!(
        pipe.retired.iter().all(|&r| r > 0),
        "every retirement path used: {:?}",
        pipe.retired
    );
}

#[test]
fn synchronize_waits_for_readers() {
    check_pipe(&pipeline(rcu::synchronize, ROUNDS, false));
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
    check_pipe(&pipeline(wait, ROUNDS, false));
}

#[test]
fn cond_synchronize_waits_for_readers() {
    fn wait() {
        rcu::cond_synchronize(rcu::get_state());
    }
    check_pipe(&pipeline(wait, ROUNDS, false));
}

/// Reads after which the broken control gives up (its first error came
/// within 1,200-1,400 reads here at host load 17).
const CONTROL_READS: u64 = 1_000_000;

/// The control: a `synchronize` that does not wait must be caught.
#[test]
fn broken_synchronize_is_caught() {
    fn no_wait() {}
    let pipe = pipeline(no_wait, u64::MAX, true);
    eprintln!(
        "control: {} errors after {} reads",
        pipe.errors(),
        pipe.histogram.iter().sum::<u64>()
    );
    assert!(
        pipe.errors() > 0,
        "the pipeline test cannot tell a no-op synchronize: reader pipe {:?}",
        pipe.histogram
    );
}

/// Cookies taken inside a read section never complete while it is open,
/// however many grace periods other CPUs push through.
#[test]
fn cookies_never_complete_inside_a_read_section() {
    let stop = AtomicBool::new(false);
    let polls = AtomicU64::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            rcu::cpu_online();
            while !stop.load(SeqCst) {
                rcu::synchronize();
            }
            rcu::cpu_offline();
        });
        s.spawn(|| {
            rcu::cpu_online();
            for _ in 0..20 {
                let guard = rcu::read_lock();
                let cookies = [rcu::get_state(), rcu::start_poll()];
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_millis(5) {
                    for c in cookies {
                        assert!(!rcu::poll(c), "a cookie completed inside a read section");
                        polls.fetch_add(1, SeqCst);
                    }
                }
                drop(guard);
                rcu::quiescent_state();
            }
            stop.store(true, SeqCst);
            rcu::cpu_offline();
        });
    });
    assert!(polls.load(SeqCst) > 0);
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
#[should_panic(expected = "inside a read-side critical section")]
fn quiescent_state_in_read_section_panics() {
    rcu::cpu_online();
    let _g = rcu::read_lock();
    rcu::quiescent_state();
}

#[test]
fn gated_rwlock_excludes() {
    let lock = GatedPerCpuRwLock::new((0u64, 0u64));
    let iters = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    common::check_rwlock_exclusion(&lock, 4, iters, 200, true);
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
    rcu::cpu_online();
    assert!(gate.is_idle());
    rcu::cpu_offline();
}

// ---- misuse that panics ---------------------------------------------------

/// The message of a panic caught by `catch_unwind`.
fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A reader on a CPU that RCU does not watch (never online, offline,
/// idle) used to get an unprotected section (debug builds panicked,
/// release builds let grace periods skip it); its section now makes the
/// CPU watched until it ends, in every build (the grace-period side of
/// this is `rcu_preempt.rs`'s `readers_on_unwatched_cpus_are_protected`).
#[test]
fn readers_on_unwatched_cpus_watch_themselves() {
    thread::spawn(|| {
        let reads = || {
            let guard = rcu::read_lock();
            assert!(rcu::read_lock_held());
            let inner = rcu::read_lock();
            drop(inner);
            assert!(rcu::read_lock_held());
            drop(guard);
            assert!(!rcu::read_lock_held());
        };
        reads(); // never brought online
        rcu::cpu_online();
        reads();
        rcu::idle_enter();
        reads();
        rcu::idle_exit();
        rcu::cpu_offline();
        reads();
        // The gated rw lock's readers (and `RcuSync::is_idle`) too.
        let lock = GatedPerCpuRwLock::new(0u32);
        assert_eq!(*lock.read(), 0);
        assert_eq!(lock.try_read().map(|r| *r), Some(0));
        assert!(rcu::RcuSync::new().is_idle());
        // An offline CPU's readers do not hold up grace periods once they
        // are done.
        rcu::cpu_online();
        rcu::synchronize();
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

/// The read side keeps a flag, set by the outermost section: a nested
/// section that ends leaves it set, so the outer one is still refused a
/// quiescent state, and a handler-style section that begins and ends
/// inside another leaves it as it was.
#[test]
fn nested_sections_keep_the_outer_one_protected() {
    thread::spawn(|| {
        rcu::cpu_online();
        let outer = rcu::read_lock();
        drop(rcu::read_lock());
        let msg = panic_message(rcu::quiescent_state);
        assert!(msg.contains("inside a read-side critical section"), "{msg}");
        let msg = panic_message(rcu::idle_enter);
        assert!(msg.contains("rcu::idle_enter()"), "{msg}");
        assert!(rcu::read_lock_held());
        drop(outer);
        assert!(!rcu::read_lock_held());
        rcu::quiescent_state();
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

/// Regression: waits for a grace period inside a read section deadlocked
/// (or, on a CPU whose own quiescent state was not needed, returned while
/// the section was still open); they now panic at once, in every build,
/// whatever the state of the grace periods.
#[test]
fn waits_inside_a_read_section_panic() {
    thread::spawn(|| {
        rcu::cpu_online();
        let cookie = rcu::get_state();
        rcu::synchronize(); // completes `cookie`
        let gate = rcu::RcuSync::new();
        let waits: [(&str, &dyn Fn()); 4] = [
            ("rcu::synchronize()", &rcu::synchronize),
            ("rcu::barrier()", &rcu::barrier),
            ("rcu::cond_synchronize()", &|| rcu::cond_synchronize(cookie)),
            ("RcuSync::enter()", &|| gate.enter()),
        ];
        for (name, wait) in waits {
            let msg = panic_message(|| {
                let _guard = rcu::read_lock();
                wait();
            });
            assert!(msg.contains(name), "{name}: {msg}");
            assert!(msg.contains("inside a read-side critical section"), "{msg}");
            assert!(!rcu::read_lock_held());
        }
        // Outside a read section they work.
        rcu::cond_synchronize(cookie);
        gate.enter();
        gate.exit();
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}
