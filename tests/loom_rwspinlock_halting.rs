//! Loom models of `RwSpinLock`'s bounded writer retries and the reader
//! that keeps its bias behind a holding writer: the
//! reader that kept its bias against the next writer (the fast path, the
//! retries and the queue), an upgrader against a retrying writer, and
//! the same roles with every waiter halting until kicked (a lost wake-up
//! is a loom deadlock).
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 KSYNC_MAX_CPUS=4 CARGO_TARGET_DIR=target/loom cargo test --release --test loom_rwspinlock_halting`.

#![cfg(ksync_loom)]

use std::sync::Mutex;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use ksync::kernel::{self, SpinWait, set_vcpu_preemptible};
use ksync::spinlock::{NoGuard, RawRwSpinLock};

#[path = "common/loom_halting.rs"]
mod halting;
use halting::{HALTING, YIELD, halt, haltable, kick_all, unhaltable};

/// One model at a time: they set process-wide settings.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lock and the data it protects.
struct Locked {
    lock: RawRwSpinLock<NoGuard>,
    data: UnsafeCell<usize>,
}

// SAFETY: `data` is only accessed under `lock` (loom checks it).
unsafe impl Sync for Locked {}

impl Locked {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            lock: RawRwSpinLock::new(),
            data: UnsafeCell::new(0),
        })
    }

    /// A write critical section: adds one.
    fn write(&self) {
        self.lock.write_lock();
        // SAFETY: held exclusive (what the model checks).
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.write_unlock(()) };
    }

    /// A read critical section: the value.
    fn read(&self) -> usize {
        self.lock.read_lock();
        // SAFETY: held shared (what the model checks).
        let v = self.data.with(|d| unsafe { *d });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.read_unlock(()) };
        v
    }

    /// An upgradeable read, upgraded, adding one.
    fn upgrade_write(&self) {
        self.lock.upgradeable_lock();
        // SAFETY: held upgradeable (shared).
        let _ = self.data.with(|d| unsafe { *d });
        // SAFETY: held upgradeable.
        unsafe { self.lock.upgrade(()) };
        // SAFETY: held exclusive.
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: held exclusive since the upgrade.
        unsafe { self.lock.write_unlock(()) };
    }

    fn value(&self) -> usize {
        // SAFETY: every thread has been joined.
        self.data.with(|d| unsafe { *d })
    }
}

/// The main thread reads while an upgrader upgrades and a writer retries
/// (neither can take the lock until the main thread's read goes): two
/// writes, never overlapping.
#[test]
fn upgrader_against_a_retrying_writer() {
    let _serial = serial();
    loom::model(|| {
        set_vcpu_preemptible(false);
        let l = Locked::new();
        l.lock.read_lock();
        let up = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.upgrade_write())
        };
        let writer = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.write())
        };
        // SAFETY: held shared.
        unsafe { l.lock.read_unlock(()) };
        up.join().unwrap();
        writer.join().unwrap();
        assert_eq!(l.value(), 2);
        assert!(!l.lock.is_locked());
    });
}

// ---- halting waiters (as tests/loom_queued.rs) ----------------------------

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn halting_model(f: impl Fn() + Sync + Send + 'static) {
    let _serial = serial();
    RUNS.store(0, std::sync::atomic::Ordering::SeqCst);
    loom::model::Builder::new().check(move || {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // The rwlock's waits give the CPU away only when CPUs may be
        // descheduled.
        set_vcpu_preemptible(true);
        kernel::set_spin_wait(&HALTING);
        halting::reset();
        f();
        kernel::set_spin_wait(&YIELD);
        set_vcpu_preemptible(false);
    });
    eprintln!(
        "executions: {}",
        RUNS.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// [`kept_bias_reader_against_the_next_writer`] with halting waiters:
/// the reader that kept its bias halts until the holder's unlock kicks
/// it; the second writer halts in the queue or waiting for the reader.
#[test]
fn halting_kept_bias_reader_and_next_writer() {
    halting_model(|| {
        let l = Locked::new();
        l.lock.write_lock();
        let cpus: Vec<_> = [true, false]
            .into_iter()
            .map(|read| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    if read {
                        let seen = l.read();
                        assert!(seen >= 1, "a reader got in before the holder left");
                    } else {
                        l.write();
                    }
                })
            })
            .collect();
        // SAFETY: held exclusive.
        l.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { l.lock.write_unlock(()) };
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 2);
        assert!(!l.lock.is_locked());
    });
}

/// A reader holds; a writer (retries, then `QW_WAITING`) and a second
/// reader (which then queues behind the waiting writer) halt; the main
/// thread's read unlock must wake the writer, the writer's the reader.
#[test]
fn halting_writer_behind_a_reader_and_a_queued_reader() {
    halting_model(|| {
        let l = Locked::new();
        l.lock.read_lock();
        let cpus: Vec<_> = [false, true]
            .into_iter()
            .map(|read| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    if read {
                        l.read();
                    } else {
                        l.write();
                    }
                })
            })
            .collect();
        // SAFETY: held shared above.
        unsafe { l.lock.read_unlock(()) };
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 1);
        assert!(!l.lock.is_locked());
    });
}

/// An upgrader upgrades behind the main thread's read while a writer
/// retries and queues, every waiter halting.
#[test]
fn halting_upgrader_and_writer() {
    halting_model(|| {
        let l = Locked::new();
        l.lock.read_lock();
        let cpus: Vec<_> = [true, false]
            .into_iter()
            .map(|up| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    if up {
                        l.upgrade_write();
                    } else {
                        l.write();
                    }
                })
            })
            .collect();
        // SAFETY: held shared above.
        unsafe { l.lock.read_unlock(()) };
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 2);
        assert!(!l.lock.is_locked());
    });
}

// ---- an interrupt on a waiting CPU ------------------------------------------

loom::thread_local! {
    /// This thread's "interrupt handler", run once from the spin-wait
    /// hook while the thread waits (an interrupt arriving mid-wait).
    static IRQ: std::cell::RefCell<Option<(Arc<Locked>, Arc<loom::sync::atomic::AtomicBool>)>> = std::cell::RefCell::new(None);
}

/// The spin-wait hook: on a thread with an `IRQ`, run it once: a
/// handler that read-locks the lock in interrupt context; otherwise
/// yield to the model.
fn irq_hook() {
    match IRQ.with(|i| i.borrow_mut().take()) {
        Some((l, entered)) => {
            IRQ_RAN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            entered.store(true, loom::sync::atomic::Ordering::Release);
            ksync::host::enter_interrupt();
            l.read();
            ksync::host::exit_interrupt();
        }
        None => thread::yield_now(),
    }
}

/// How many executions ran the handler (the model's reach).
static IRQ_RAN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

static IRQ_HOOK: SpinWait = SpinWait {
    wait: irq_hook,
    kick: None,
};

/// The main thread holds the lock for writing; a reader arrives (keeps
/// its bias: no writer waits) and, while it waits, an interrupt on its
/// CPU read-locks the lock; the main thread unlocks once the handler has
/// started. The handler must get in (the task under it cannot move until
/// it returns). Spinning waiters: two threads only (a second writer makes
/// the model unbounded for loom, before the change as after; see the
/// halting model below for that role).
#[test]
fn interrupt_reader_on_a_cpu_whose_task_kept_its_bias() {
    let _serial = serial();
    IRQ_RAN.store(0, std::sync::atomic::Ordering::SeqCst);
    loom::model(|| {
        // The rwlock's waits call the hook only when CPUs may be
        // descheduled.
        set_vcpu_preemptible(true);
        kernel::set_spin_wait(&IRQ_HOOK);
        let l = Locked::new();
        let entered = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        l.lock.write_lock();
        let task = {
            let (l, entered) = (Arc::clone(&l), Arc::clone(&entered));
            thread::spawn(move || {
                IRQ.with(|i| *i.borrow_mut() = Some((Arc::clone(&l), entered)));
                assert_eq!(l.read(), 1);
            })
        };
        // Hold until the handler runs (its task waiting for us).
        while !entered.load(loom::sync::atomic::Ordering::Acquire) {
            thread::yield_now();
        }
        // SAFETY: held exclusive.
        l.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { l.lock.write_unlock(()) };
        task.join().unwrap();
        kernel::set_spin_wait(&YIELD);
        set_vcpu_preemptible(false);
    });
    assert!(
        IRQ_RAN.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the handler never ran"
    );
}

/// The halting hook with an interrupt: on a thread with an `IRQ`, run it
/// once; otherwise halt until kicked.
fn irq_halt_hook() {
    match IRQ.with(|i| i.borrow_mut().take()) {
        Some((l, entered)) => {
            IRQ_RAN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Its task kept its bias: one reader counted, not queued.
            if format!("{:?}", l.lock).contains("readers: 1,") {
                IRQ_OVER_KEPT_BIAS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            entered.store(true, loom::sync::atomic::Ordering::Release);
            // The main thread halts until the handler has started.
            kick_all();
            ksync::host::enter_interrupt();
            l.read();
            ksync::host::exit_interrupt();
        }
        None => halt(),
    }
}

/// How many executions ran the handler over a task that kept its bias.
static IRQ_OVER_KEPT_BIAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

static IRQ_HALT_HOOK: SpinWait = SpinWait {
    wait: irq_halt_hook,
    kick: Some(kick_all),
};

/// [`interrupt_reader_on_a_cpu_whose_task_kept_its_bias`] with a second
/// writer, every waiter halting until kicked (spinning waiters make the
/// three-thread model unbounded for loom, before and after the change).
/// The task keeps its bias (or, if the second writer announced itself
/// first, queues); an interrupt on its CPU read-locks; the main thread
/// unlocks only once the handler has started. The handler must get in,
/// nobody may overlap a writer, nobody may halt for ever.
#[test]
fn halting_interrupt_reader_on_a_waiting_task_with_a_second_writer() {
    let _serial = serial();
    RUNS.store(0, std::sync::atomic::Ordering::SeqCst);
    IRQ_RAN.store(0, std::sync::atomic::Ordering::SeqCst);
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(std::env::var("PB").map_or(2, |v| v.parse().unwrap()));
    b.check(|| {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        set_vcpu_preemptible(true);
        kernel::set_spin_wait(&IRQ_HALT_HOOK);
        halting::reset();
        haltable();
        let l = Locked::new();
        let entered = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        l.lock.write_lock();
        let task = {
            let (l, entered) = (Arc::clone(&l), Arc::clone(&entered));
            thread::spawn(move || {
                haltable();
                IRQ.with(|i| *i.borrow_mut() = Some((Arc::clone(&l), entered)));
                l.read();
            })
        };
        let writer = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                haltable();
                l.write();
            })
        };
        while !entered.load(loom::sync::atomic::Ordering::Acquire) {
            halt();
        }
        // SAFETY: held exclusive.
        l.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { l.lock.write_unlock(()) };
        unhaltable();
        task.join().unwrap();
        writer.join().unwrap();
        assert_eq!(l.value(), 2);
        kernel::set_spin_wait(&YIELD);
        set_vcpu_preemptible(false);
    });
    eprintln!(
        "executions: {}, handler ran in {}, over a kept bias in {}",
        RUNS.load(std::sync::atomic::Ordering::SeqCst),
        IRQ_RAN.load(std::sync::atomic::Ordering::SeqCst),
        IRQ_OVER_KEPT_BIAS.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert!(IRQ_OVER_KEPT_BIAS.load(std::sync::atomic::Ordering::SeqCst) > 0);
}
