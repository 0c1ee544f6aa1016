//! The queued lock: loom models of
//! roles the models in `tests/loom_queued.rs` leave out, all with waiters
//! that really halt until kicked (a lost wake-up is a deadlock loom
//! reports), at the driver's preemption bound.
//!
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 KSYNC_MAX_CPUS=4
//! CARGO_TARGET_DIR=target/loom cargo test --release --test loom_queued_nesting`

#![cfg(ksync_loom)]

use std::sync::Mutex;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use ksync::kernel::{self, SpinWait, set_vcpu_preemptible};
use ksync::spinlock::RawQueuedLock;

#[path = "common/loom_halting.rs"]
mod halting;
use halting::{YIELD, haltable, unhaltable};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Locked {
    lock: RawQueuedLock,
    data: UnsafeCell<usize>,
}

// SAFETY: `data` is only accessed with `lock` held (loom checks it).
unsafe impl Sync for Locked {}

impl Locked {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            lock: RawQueuedLock::new(),
            data: UnsafeCell::new(0),
        })
    }

    fn bump(&self) {
        self.lock.lock();
        // SAFETY: the lock is held (that is what the model checks).
        self.data.with_mut(|d| unsafe { *d += 1 });
        // SAFETY: locked above on this thread.
        unsafe { self.lock.unlock() };
    }

    fn value(&self) -> usize {
        // SAFETY: all users are joined.
        self.data.with(|d| unsafe { *d })
    }
}

// ---- the halting CPU (as `tests/loom_queued.rs`'s, plus an "interrupt") ----

loom::thread_local! {
    /// This CPU's pending "interrupt": run once, from its first wait.
    static IRQ: std::cell::RefCell<Option<Box<dyn FnOnce()>>> = std::cell::RefCell::new(None);
}

/// `WFE`: one event register per CPU, shared by every context nested on
/// it (an interrupt handler's `WFE` consumes the same register). An
/// "interrupt" pending on this CPU runs instead, once.
fn halt() {
    if let Some(irq) = IRQ.with(|i| i.borrow_mut().take()) {
        irq();
        // The handler returned: as `eret` on Arm, which sets the event
        // register, the interrupted context re-checks its condition.
        if ERET_SETS_EVENT.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
    }
    halting::halt();
}

/// Whether the return from an "interrupt" sets the CPU's event register
/// (Arm's `eret` does; a `SpinWait` built on a per-CPU flag need not).
static ERET_SETS_EVENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Executions in which the "interrupt" ran (the model must reach it).
static IRQ_RAN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

static HALTING: SpinWait = SpinWait {
    wait: halt,
    kick: Some(halting::kick_all),
};

fn halting_execution() {
    set_vcpu_preemptible(false);
    kernel::set_spin_wait(&HALTING);
    halting::reset();
}

/// Node reuse under halting: two CPUs take the lock twice each while the
/// main thread holds it first, so each CPU's node 0 is queued, handed
/// over, and queued again (its `locked`/`next` re-initialised while its
/// old successor may still be finishing with it).
#[test]
fn halting_node_reuse() {
    let _serial = serial();
    loom::model::Builder::new().check(|| {
        halting_execution();
        haltable();
        let l = Locked::new();
        l.lock.lock();
        let cpus: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    haltable();
                    l.bump();
                    l.bump();
                })
            })
            .collect();
        // SAFETY: locked above on this thread.
        unsafe { l.lock.unlock() };
        unhaltable();
        for t in cpus {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 4);
        assert!(!l.lock.is_locked());
        kernel::set_spin_wait(&YIELD);
    });
}

/// Both modes on one lock at once, halting: a FIFO waiter (pending or
/// queued) and a test-and-set waiter (the mode switched between their
/// arrivals), the main thread holding the lock first. Every store that
/// frees the lock for either must kick.
#[test]
fn halting_mixed_modes() {
    let _serial = serial();
    loom::model::Builder::new().check(|| {
        halting_execution();
        haltable();
        let l = Locked::new();
        l.lock.lock();
        let fifo = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                haltable();
                l.bump();
            })
        };
        let tas = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                haltable();
                // Process-wide, read by every later `lock_slow`.
                set_vcpu_preemptible(true);
                l.bump();
            })
        };
        // SAFETY: locked above on this thread.
        unsafe { l.lock.unlock() };
        l.bump();
        unhaltable();
        for t in [fifo, tas] {
            t.join().unwrap();
        }
        assert_eq!(l.value(), 3);
        assert!(!l.lock.is_locked());
        set_vcpu_preemptible(false);
        kernel::set_spin_wait(&YIELD);
    });
}

/// Interrupt nesting under halting: CPU X waits for lock A (pending or
/// queued); an "interrupt" on X takes lock B, which the main thread holds,
/// and halts on X's one event register; the main thread hands A on, then
/// frees B. The handler's halts must not swallow the kick meant for X's
/// interrupted wait (if they do, X halts for ever: deadlock).
#[test]
fn halting_nested_interrupt() {
    let _serial = serial();
    IRQ_RAN.store(0, std::sync::atomic::Ordering::Relaxed);
    loom::model::Builder::new().check(|| {
        halting_execution();
        haltable();
        let (a, b) = (Locked::new(), Locked::new());
        a.lock.lock();
        b.lock.lock();
        let in_irq = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let x = {
            let (a, b, in_irq) = (Arc::clone(&a), Arc::clone(&b), Arc::clone(&in_irq));
            thread::spawn(move || {
                haltable();
                IRQ.with(|i| {
                    *i.borrow_mut() = Some(Box::new(move || {
                        in_irq.store(true, loom::sync::atomic::Ordering::Relaxed);
                        b.bump();
                    }))
                });
                a.bump();
                if IRQ.with(|i| i.borrow_mut().take()).is_none() {
                    IRQ_RAN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        // X is waiting for A (it halted: its "interrupt" runs and waits
        // for B).
        while !in_irq.load(loom::sync::atomic::Ordering::Relaxed) {
            thread::yield_now();
        }
        // SAFETY: locked above on this thread.
        unsafe { a.lock.unlock() };
        // SAFETY: locked above on this thread.
        unsafe { b.lock.unlock() };
        unhaltable();
        x.join().unwrap();
        assert_eq!(a.value(), 1);
        assert!(!a.lock.is_locked() && !b.lock.is_locked());
        kernel::set_spin_wait(&YIELD);
    });
    assert!(
        IRQ_RAN.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the interrupt never ran"
    );
}

/// [`halting_nested_interrupt`] with a return from the handler that does
/// not set the event register (a `SpinWait` on a per-CPU flag, which the
/// contract allows): the handler's own halts consume the register, so the
/// kick meant for the interrupted wait must come again after them. It
/// does: the handler's unlock of B kicks while X's outer wait is
/// advertised.
#[test]
fn halting_nested_interrupt_no_eret_event() {
    let _serial = serial();
    ERET_SETS_EVENT.store(false, std::sync::atomic::Ordering::SeqCst);
    loom::model::Builder::new().check(|| {
        halting_execution();
        haltable();
        let (a, b) = (Locked::new(), Locked::new());
        a.lock.lock();
        b.lock.lock();
        let in_irq = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let x = {
            let (a, b, in_irq) = (Arc::clone(&a), Arc::clone(&b), Arc::clone(&in_irq));
            thread::spawn(move || {
                haltable();
                IRQ.with(|i| {
                    *i.borrow_mut() = Some(Box::new(move || {
                        in_irq.store(true, loom::sync::atomic::Ordering::Relaxed);
                        b.bump();
                    }))
                });
                a.bump();
                if IRQ.with(|i| i.borrow_mut().take()).is_none() {
                    IRQ_RAN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        // X is waiting for A (it halted: its "interrupt" runs and waits
        // for B).
        while !in_irq.load(loom::sync::atomic::Ordering::Relaxed) {
            thread::yield_now();
        }
        // SAFETY: locked above on this thread.
        unsafe { a.lock.unlock() };
        // SAFETY: locked above on this thread.
        unsafe { b.lock.unlock() };
        unhaltable();
        x.join().unwrap();
        assert_eq!(a.value(), 1);
        assert!(!a.lock.is_locked() && !b.lock.is_locked());
        kernel::set_spin_wait(&YIELD);
    });
    ERET_SETS_EVENT.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        IRQ_RAN.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the interrupt never ran"
    );
}
