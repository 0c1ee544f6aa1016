//! Host tests of the queued spinlock (`RawQueuedLock`, `QueuedMutex`) in
//! its FIFO mode: the pending bit, the MCS queue, FIFO order, nesting on
//! four per-CPU nodes and the fifth level's fallback to the word.
//!
//! The host hooks say CPUs are preemptible, so a contended queued lock
//! would take its test-and-set path (covered by `tests/oversubscribed.rs`);
//! every test here switches the process to FIFO first. A binary of its own,
//! because the mode and the spin-wait hook are process-wide.
//!
//! An interrupt arriving while a CPU is queued is played by the spin-wait
//! hook ([`ksync::kernel::set_spin_wait`]): a queued waiter calls it after
//! a bounded spin, so a hook that takes another lock is exactly a handler
//! that interrupts the wait and takes a lock of its own.

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

mod common;
use common::wait_until;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ksync::kernel::{self, SpinWait};
use ksync::lock_api::{MutexGuard, RawMutex, RawMutexFair};
use ksync::spinlock::{IrqQueuedMutex, QueuedMutex, RawQueuedLock};

/// Strict FIFO for this process, with the test hook as the spin-wait
/// policy (every test here wants both).
fn fifo_mode() {
    kernel::set_vcpu_preemptible(false);
    kernel::set_spin_wait(&HOOK);
    assert!(!kernel::vcpu_preemptible());
}

static HOOK: SpinWait = SpinWait {
    wait: hook,
    kick: None,
};

thread_local! {
    /// The locks this thread takes from the hook, one per nesting level.
    static PLAN: RefCell<Vec<&'static Level>> = const { RefCell::new(Vec::new()) };
    /// How deep this thread is in nested hook calls.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// One nesting level of the plan: the lock it takes and whether it did.
struct Level {
    lock: &'static Counted,
    done: AtomicBool,
}

/// Set when a thread waits in the hook one level below its whole plan:
/// the level past the nodes, spinning on the word.
static DEEPEST_WAITING: AtomicBool = AtomicBool::new(false);

/// A waiter's bounded spin ran out: for a thread with a plan, "an
/// interrupt" takes the next level's lock (once); otherwise yield, as the
/// default host policy does.
fn hook() {
    let depth = DEPTH.get();
    let level = PLAN.with(|p| p.borrow().get(depth).copied());
    match level {
        Some(level) if !level.done.swap(true, SeqCst) => {
            DEPTH.set(depth + 1);
            level.lock.take();
            DEPTH.set(depth);
        }
        Some(_) => thread::yield_now(),
        None => {
            if PLAN.with(|p| !p.borrow().is_empty()) {
                DEEPEST_WAITING.store(true, SeqCst);
            }
            thread::yield_now();
        }
    }
}

/// A lock with a count of its critical sections.
struct Counted {
    lock: RawQueuedLock,
    entries: AtomicUsize,
}

impl Counted {
    fn leak() -> &'static Self {
        Box::leak(Box::new(Self {
            // `INIT`: with lockdep, each lock is a class of its own (the
            // tests nest several of them on one thread, which locks built
            // by one `new` line would share a class for).
            lock: <RawQueuedLock as RawMutex>::INIT,
            entries: AtomicUsize::new(0),
        }))
    }

    /// Lock, count, unlock.
    fn take(&self) {
        self.lock.lock();
        self.entries.fetch_add(1, SeqCst);
        // SAFETY: locked just above on this thread.
        unsafe { self.lock.unlock() };
    }
}

/// The lock's word as its `Debug` shows it: (locked, pending, tail).
fn word(lock: &RawQueuedLock) -> (bool, bool, Option<(usize, usize)>) {
    let text = format!("{lock:?}");
    let flag = |name: &str| text.contains(&format!("{name}: true"));
    let tail = text.find("tail: Some((").map(|at| {
        let rest = &text[at + "tail: Some((".len()..];
        let end = rest.find("))").expect("tail tuple");
        let (cpu, idx) = rest[..end].split_once(", ").expect("tail pair");
        (cpu.parse().unwrap(), idx.parse().unwrap())
    });
    (flag("locked"), flag("pending"), tail)
}

/// Spawns a thread that takes `lock` (held by the caller) and waits until
/// it is the pending CPU.
fn pending_waiter<'s>(
    s: &'s thread::Scope<'s, '_>,
    lock: &'static Counted,
) -> thread::ScopedJoinHandle<'s, ()> {
    let handle = s.spawn(move || lock.take());
    wait_until("a pending waiter", || word(&lock.lock).1);
    handle
}

#[test]
fn api_uncontended() {
    fifo_mode();
    let lock = RawQueuedLock::new();
    assert!(!lock.is_locked() && !lock.is_contended());
    assert_eq!(word(&lock), (false, false, None));
    assert!(lock.try_lock());
    assert!(lock.is_locked() && !lock.is_contended());
    assert!(!lock.try_lock(), "try_lock of a held lock");
    assert_eq!(word(&lock), (true, false, None));
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    lock.lock();
    assert!(lock.is_locked());
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked());
    let _ = RawQueuedLock::<ksync::spinlock::Loop>::default();
    // (With lockdep the lock carries its class, in debug builds its owner
    // record: tests/lockdep_size.rs.)
    if !cfg!(feature = "lockdep") && !cfg!(debug_assertions) {
        // Two 16-bit halves, or two 32-bit ones past 8191 CPUs.
        let word = if ksync::kernel::MAX_CPUS < 8192 { 4 } else { 8 };
        assert_eq!(size_of::<RawQueuedLock>(), word);
    }
}

#[test]
fn mutex_aliases() {
    fifo_mode();
    static M: QueuedMutex<u32> = QueuedMutex::new(0);
    static I: IrqQueuedMutex<u32> = IrqQueuedMutex::new(0);
    *M.lock() += 1;
    {
        let mut guard = M.try_lock().expect("free");
        *guard += 1;
        assert!(M.try_lock().is_none());
        MutexGuard::bump(&mut guard);
        MutexGuard::unlock_fair(guard);
    }
    assert_eq!(*M.lock(), 2);
    {
        let mut guard = I.lock();
        assert!(ksync::host::irqs_disabled());
        *guard += 3;
    }
    assert!(!ksync::host::irqs_disabled());
    assert_eq!(*I.lock(), 3);
    // The raw trait, as lock_api users see it.
    let raw = <RawQueuedLock as RawMutex>::INIT;
    RawMutex::lock(&raw);
    assert!(RawMutex::is_locked(&raw));
    // SAFETY: locked just above by this thread.
    unsafe { RawMutexFair::unlock_fair(&raw) };
    assert!(!RawMutex::is_locked(&raw));
}

/// The first waiter sets pending; the second and third queue, the tail
/// naming each in turn; the lock then goes to them in arrival order.
#[test]
fn fifo_order_through_pending_and_queue() {
    fifo_mode();
    let lock = Counted::leak();
    let order = Mutex::new(Vec::new());
    lock.lock.lock();
    thread::scope(|s| {
        let mut cpus = Vec::new();
        for i in 0..3 {
            let (tx, rx) = mpsc::channel();
            let order = &order;
            s.spawn(move || {
                tx.send(kernel::cpu_id()).unwrap();
                lock.lock.lock();
                order.lock().unwrap().push(i);
                // SAFETY: locked just above.
                unsafe { lock.lock.unlock() };
            });
            let cpu = rx.recv().unwrap();
            cpus.push(cpu);
            if i == 0 {
                wait_until("the pending bit", || word(&lock.lock).1);
                assert_eq!(word(&lock.lock), (true, true, None));
            } else {
                wait_until("the tail to name the new waiter", || {
                    word(&lock.lock).2 == Some((cpu, 0))
                });
            }
            assert!(lock.lock.is_contended());
        }
        // SAFETY: locked above on this thread.
        unsafe { lock.lock.unlock() };
    });
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    assert_eq!(word(&lock.lock), (false, false, None));
}

/// Four locks taken nested while queued (thread level, then "softirq",
/// "hardirq" and "NMI" from the spin-wait hook) use nodes 0-3; the fifth
/// level has no node and spins on the word. Afterwards the CPU's nesting
/// count is back to zero (its next queueing uses node 0), and every lock
/// counted exactly its two critical sections.
#[test]
fn four_nesting_levels_then_the_word() {
    fifo_mode();
    let locks: Vec<&'static Counted> = (0..6).map(|_| Counted::leak()).collect();
    let (a, nested, e, x) = (locks[0], &locks[1..5], locks[4], locks[5]);
    for l in &locks {
        l.lock.lock();
    }
    thread::scope(|s| {
        let helpers: Vec<_> = locks.iter().map(|&l| pending_waiter(s, l)).collect();
        let (tx, rx) = mpsc::channel();
        let (go_x, wait_x) = mpsc::channel::<()>();
        let plan: Vec<&'static Level> = nested
            .iter()
            .map(|&lock| {
                &*Box::leak(Box::new(Level {
                    lock,
                    done: AtomicBool::new(false),
                }))
            })
            .collect();
        let nester = s.spawn(move || {
            tx.send(kernel::cpu_id()).unwrap();
            PLAN.with(|p| *p.borrow_mut() = plan);
            a.take();
            PLAN.with(|p| p.borrow_mut().clear());
            wait_x.recv().unwrap();
            x.take();
        });
        let cpu = rx.recv().unwrap();
        wait_until("the fifth level to spin on the word", || {
            DEEPEST_WAITING.load(SeqCst)
        });
        assert_eq!(word(&a.lock), (true, true, Some((cpu, 0))));
        for (idx, l) in nested[..3].iter().enumerate() {
            assert_eq!(word(&l.lock), (true, true, Some((cpu, idx + 1))));
        }
        // The fifth level left no tail: it waits on the word.
        assert_eq!(word(&e.lock), (true, true, None));
        // Unwind from the innermost level out, as the interrupts return.
        for l in locks[..5].iter().rev() {
            // SAFETY: locked above on this thread.
            unsafe { l.lock.unlock() };
            wait_until("both critical sections", || l.entries.load(SeqCst) == 2);
        }
        // The same CPU queues at level 0 again.
        go_x.send(()).unwrap();
        wait_until("the nester to queue on x", || word(&x.lock).2.is_some());
        assert_eq!(word(&x.lock), (true, true, Some((cpu, 0))));
        // SAFETY: locked above on this thread.
        unsafe { x.lock.unlock() };
        nester.join().unwrap();
        for h in helpers {
            h.join().unwrap();
        }
    });
    for l in &locks {
        assert_eq!(l.entries.load(SeqCst), 2);
        assert_eq!(word(&l.lock), (false, false, None));
    }
}

/// Threads increment a counter behind one lock for a fixed time; the
/// count is exact. Also with more threads than cores: queued waiters give
/// the CPU away after a bounded spin, so a hand-off to a descheduled
/// waiter stalls the queue only until the host runs it.
#[test]
fn exclusion_fifo_mode() {
    fifo_mode();
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    for threads in [2, 2 * cores, 4 * cores] {
        let lock = QueuedMutex::new(0u64);
        let stop = AtomicBool::new(false);
        let start = Instant::now();
        let done: u64 = thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0u64;
                        while !stop.load(SeqCst) {
                            let mut guard = lock.lock();
                            let seen = *guard;
                            *guard = seen + 1;
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            thread::sleep(Duration::from_millis(300));
            stop.store(true, SeqCst);
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{threads} threads: FIFO queue took {:?} to drain",
            start.elapsed()
        );
        assert!(done > threads as u64, "{threads} threads made no progress");
        assert_eq!(*lock.lock(), done);
    }
}
