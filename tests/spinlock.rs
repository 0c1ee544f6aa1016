//! Host tests of the spinlocks: the raw inherent API, `lock_api` use,
//! mutual exclusion with threads playing CPUs, the ticket lock's FIFO
//! hand-off (`unlock_fair`, `bump`, bounded bypass), the ticket wrap,
//! and the IRQ-saving adapters, whose "interrupts off" is, on this host,
//! the `critical-section` std implementation's global lock.

// Under loom the crate is built for the models in `tests/loom.rs` only.
#![cfg(not(ksync_loom))]

mod common;
use common::{Budget, PATIENCE, tickets};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ksync::host::irqs_disabled;
use ksync::lock_api::{self, MutexGuard, RawMutex};
use ksync::spinlock::{
    ArchIrq, ArchIrqTicketMutex, IrqState, IrqTicketMutex, IrqTtasMutex, Loop, RawIrqSave,
    RawTicketLock, RawTtasLock, Spin, TicketMutex, TtasMutex,
};

/// Threads playing CPUs.
const THREADS: usize = 4;

/// Lock acquisitions per threaded test, within [`TIME_BUDGET`].
const TOTAL_OPS: usize = if cfg!(debug_assertions) {
    400_000
} else {
    1_000_000
};

// ---- the raw inherent API ------------------------------------------------------

#[test]
fn raw_ticket_lock_inherent_api() {
    let lock: RawTicketLock = RawTicketLock::new();
    assert!(!lock.is_locked());
    assert!(!lock.is_contended());
    assert_eq!(format!("{lock:?}"), "TicketLock { owner: 0, next: 0 }");

    lock.lock();
    assert!(lock.is_locked());
    assert!(!lock.is_contended(), "a holder alone is not contention");
    assert!(!lock.try_lock());
    assert_eq!(tickets(&lock), (0, 1));
    // SAFETY: locked above by this thread.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked());
    assert_eq!(tickets(&lock), (1, 1));

    assert!(lock.try_lock());
    assert!(lock.is_locked());
    assert!(!lock.try_lock());
    // SAFETY: taken by the successful try_lock above.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked());

    let default: RawTicketLock<Loop> = RawTicketLock::default();
    assert!(!default.is_locked());
    default.lock();
    assert!(default.is_locked());
    // SAFETY: locked above by this thread.
    unsafe { default.unlock() };
    assert!(!default.is_locked());
}

#[test]
fn raw_ttas_lock_inherent_api() {
    let lock: RawTtasLock = RawTtasLock::new();
    assert!(!lock.is_locked());
    assert_eq!(format!("{lock:?}"), "TtasLock { locked: false }");
    lock.lock();
    assert!(lock.is_locked());
    assert_eq!(format!("{lock:?}"), "TtasLock { locked: true }");
    assert!(!lock.try_lock());
    // SAFETY: locked above by this thread.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked());
    assert!(lock.try_lock());
    assert!(!lock.try_lock());
    assert!(lock.is_locked());
    // SAFETY: taken by the successful try_lock above.
    unsafe { lock.unlock() };
    assert!(!lock.is_locked());

    let default: RawTtasLock<Loop> = RawTtasLock::default();
    default.lock();
    assert!(default.is_locked());
    // SAFETY: locked above by this thread.
    unsafe { default.unlock() };
    assert!(!default.is_locked());
}

#[test]
fn raw_locks_in_statics() {
    static TICKET: RawTicketLock = RawTicketLock::new();
    static TTAS: RawTtasLock = RawTtasLock::new();
    static IRQ: RawIrqSave<RawTicketLock> = RawIrqSave::new(RawTicketLock::new());
    TICKET.lock();
    TTAS.lock();
    assert!(TICKET.is_locked() && TTAS.is_locked());
    // SAFETY: both locked above by this thread.
    unsafe {
        TICKET.unlock();
        TTAS.unlock();
    }
    assert!(!TICKET.is_locked() && !TTAS.is_locked());
    RawMutex::lock(&IRQ);
    assert!(RawMutex::is_locked(&IRQ));
    // SAFETY: locked just above by this thread.
    unsafe { RawMutex::unlock(&IRQ) };
    assert!(!RawMutex::is_locked(&IRQ));
}

// ---- lock_api: try_lock, statics ----------------------------------------------

/// `try_lock` fails while the lock is held (here and in another thread) and
/// succeeds once it is released.
fn try_lock_semantics<R: RawMutex + Sync>() {
    let m = lock_api::Mutex::<R, u32>::new(0);
    let mut guard = m.try_lock().expect("free lock");
    *guard += 1;
    assert!(m.is_locked());
    assert!(m.try_lock().is_none());
    thread::scope(|s| {
        s.spawn(|| assert!(m.try_lock().is_none())).join().unwrap();
    });
    drop(guard);
    assert!(!m.is_locked());
    thread::scope(|s| {
        s.spawn(|| {
            let mut guard = m.try_lock().expect("released lock");
            *guard += 1;
        })
        .join()
        .unwrap();
    });
    assert_eq!(*m.try_lock().unwrap(), 2);
    assert_eq!(m.into_inner(), 2);
}

#[test]
fn try_lock_ticket() {
    try_lock_semantics::<RawTicketLock>();
    try_lock_semantics::<RawTicketLock<Loop>>();
}

#[test]
fn try_lock_ttas() {
    try_lock_semantics::<RawTtasLock>();
    try_lock_semantics::<RawTtasLock<Loop>>();
}

#[test]
fn irq_try_lock_fails_while_held_and_keeps_interrupts_off() {
    fn check<L: RawMutex>() {
        let m = lock_api::Mutex::<RawIrqSave<L>, u32>::new(0);
        let guard = m.lock();
        // From another thread this would wait for the (global) critical
        // section instead; from the holder it is a nested save.
        assert!(m.try_lock().is_none());
        // The failed try_lock restored only its own (nested) state:
        // interrupts are still off.
        let probe = IrqProbe::start();
        probe.assert_blocked();
        drop(guard);
        probe.assert_gets_through();
        let mut guard = m.try_lock().expect("released lock");
        *guard += 1;
        drop(guard);
        assert!(!m.is_locked());
        IrqProbe::start().assert_gets_through();
    }
    check::<RawTicketLock>();
    check::<RawTtasLock>();
}

/// A failed `try_lock` from outside any critical section restores the
/// interrupt state it saved. (The inner lock is held without masking, as
/// by a holder that has restored its own interrupts, which the raw API
/// allows.)
#[test]
fn irq_try_lock_failure_restores_interrupts() {
    fn check<L: RawMutex + Sync>() {
        let m = lock_api::Mutex::<RawIrqSave<L>, u32>::new(0);
        // SAFETY: the inner lock is locked and unlocked only below; no
        // `MutexGuard` exists meanwhile.
        let inner = unsafe { m.raw() }.inner();
        inner.lock();
        IrqProbe::start().assert_gets_through();
        thread::scope(|s| {
            s.spawn(|| assert!(m.try_lock().is_none())).join().unwrap();
        });
        IrqProbe::start().assert_gets_through();
        // SAFETY: locked above by this thread.
        unsafe { inner.unlock() };
        assert!(!m.is_locked());
        IrqProbe::start().assert_gets_through();
        assert!(m.try_lock().is_some());
    }
    check::<RawTicketLock>();
    check::<RawTtasLock>();
}

#[test]
fn mutexes_in_statics() {
    static TICKET: TicketMutex<u64> = TicketMutex::new(0);
    static TTAS: TtasMutex<[u8; 3]> = TtasMutex::new([0; 3]);
    static IRQ_TICKET: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
    static IRQ_TTAS: IrqTtasMutex<u64> = IrqTtasMutex::new(0);
    *TICKET.lock() += 1;
    TTAS.lock()[1] = 7;
    *IRQ_TICKET.lock() += 2;
    *IRQ_TTAS.lock() += 3;
    assert_eq!(*TICKET.lock(), 1);
    assert_eq!(*TTAS.lock(), [0, 7, 0]);
    assert_eq!(*IRQ_TICKET.lock(), 2);
    assert_eq!(*IRQ_TTAS.lock(), 3);
    assert!(!TICKET.is_locked() && !TTAS.is_locked());
    assert!(!IRQ_TICKET.is_locked() && !IRQ_TTAS.is_locked());
}

// ---- mutual exclusion ------------------------------------------------------------

/// `THREADS` threads update a pair non-atomically under the lock: both
/// fields must always be equal on entry, no two threads may be inside at
/// once, and no update may be lost.
fn exclusion<R: RawMutex + Sync>(name: &str) {
    let m = lock_api::Mutex::<R, (u64, u64)>::new((0, 0));
    let inside = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    let t0 = Instant::now();
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                barrier.wait();
                let mut budget = Budget::new(t0, TOTAL_OPS / THREADS);
                while budget.next() {
                    let mut guard = m.lock();
                    assert!(!inside.swap(true, Ordering::Relaxed), "{name}: two holders");
                    let (a, b) = *guard;
                    assert_eq!(a, b, "{name}: torn update seen");
                    guard.0 = a + 1;
                    // Widen the window between the two writes.
                    for _ in 0..4 {
                        std::hint::spin_loop();
                    }
                    guard.1 = b + 1;
                    inside.store(false, Ordering::Relaxed);
                }
                total.fetch_add(budget.done, Ordering::Relaxed);
            });
        }
    });
    let total = total.load(Ordering::Relaxed) as u64;
    assert_eq!(m.into_inner(), (total, total), "{name}: lost updates");
    println!("{name}: {total} acquisitions in {:?}", t0.elapsed());
}

#[test]
fn ticket_mutual_exclusion() {
    exclusion::<RawTicketLock>("ticket");
}

#[test]
fn ttas_mutual_exclusion() {
    exclusion::<RawTtasLock>("ttas");
}

#[test]
fn loop_relax_mutual_exclusion() {
    exclusion::<RawTicketLock<Loop>>("ticket<Loop>");
    exclusion::<RawTtasLock<Loop>>("ttas<Loop>");
}

#[test]
fn irq_ticket_mutual_exclusion() {
    exclusion::<RawIrqSave<RawTicketLock>>("irq ticket");
}

#[test]
fn irq_ttas_mutual_exclusion() {
    exclusion::<RawIrqSave<RawTtasLock<Spin>>>("irq ttas");
}

// ---- ticket fairness -----------------------------------------------------------

#[test]
fn irq_ticket_unlock_fair_and_bump() {
    let m = IrqTicketMutex::new(0u32);
    let mut guard = m.lock();
    *guard += 1;
    MutexGuard::bump(&mut guard);
    assert_eq!(*guard, 1);
    assert!(m.is_locked());
    // Still "interrupts off" after the bump.
    let probe = IrqProbe::start();
    probe.assert_blocked();
    MutexGuard::unlock_fair(guard);
    probe.assert_gets_through();
    assert!(!m.is_locked());
    assert_eq!(*m.try_lock().expect("released"), 1);
}

// ---- IRQ saving -------------------------------------------------------------------

/// This thread's "interrupts off" flag (the host hooks keep one per
/// thread, as a CPU has), with the old probe's vocabulary.
struct IrqProbe;

impl IrqProbe {
    fn start() -> Self {
        IrqProbe
    }

    /// Interrupts are off on this thread.
    fn assert_blocked(&self) {
        assert!(
            irqs_disabled(),
            "interrupts were on inside an IRQ-saving section"
        );
    }

    /// Interrupts are on again.
    fn assert_gets_through(self) {
        assert!(!irqs_disabled(), "interrupts were not restored");
    }
}

/// Masking interrupts on one "CPU" never excludes another: two threads are
/// inside IRQ-saving sections at the same time (with a machine-wide lock
/// the second would wait for the first, and the rendezvous would time out).
#[test]
fn irq_masking_is_per_cpu_not_a_global_lock() {
    let inside = Barrier::new(2);
    let a = IrqTicketMutex::new(0u32);
    let b = IrqTicketMutex::new(0u32);
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        for lock in [&a, &b] {
            let (inside, tx) = (&inside, tx.clone());
            s.spawn(move || {
                let _irq = IrqState::save();
                let mut guard = lock.lock();
                assert!(irqs_disabled());
                *guard += 1;
                inside.wait();
                tx.send(()).unwrap();
            });
        }
        for _ in 0..2 {
            rx.recv_timeout(PATIENCE)
                .expect("two CPUs could not both have interrupts off");
        }
    });
    assert_eq!((*a.lock(), *b.lock()), (1, 1));
    assert!(!irqs_disabled());
}

/// `ArchIrq` needs no kernel hooks; on this host it is the
/// critical-section implementation (the std one: a global lock).
#[test]
fn arch_irq_locks_use_the_architecture_default() {
    let m = ArchIrqTicketMutex::new(0u32);
    let guard = m.lock();
    assert!(!irqs_disabled(), "ArchIrq went through the kernel hooks");
    let probe = CsProbe::start();
    probe.assert_blocked();
    drop(guard);
    probe.assert_gets_through();
    let state = IrqState::<ArchIrq>::save_with();
    let probe = CsProbe::start();
    probe.assert_blocked();
    drop(state);
    probe.assert_gets_through();
}

/// A thread that enters a critical section: blocked while another thread
/// holds one, since the std implementation is one global lock.
struct CsProbe {
    entered: mpsc::Receiver<()>,
    thread: Option<thread::JoinHandle<()>>,
}

impl CsProbe {
    fn start() -> Self {
        let (tx, entered) = mpsc::channel();
        let thread = thread::spawn(move || critical_section::with(|_| tx.send(()).unwrap()));
        Self {
            entered,
            thread: Some(thread),
        }
    }

    /// The probe cannot enter (for a while, at least).
    fn assert_blocked(&self) {
        assert_eq!(
            self.entered.recv_timeout(Duration::from_millis(100)),
            Err(mpsc::RecvTimeoutError::Timeout),
            "entered a critical section while interrupts were off"
        );
    }

    /// The probe enters.
    fn assert_gets_through(mut self) {
        assert_eq!(
            self.entered.recv_timeout(PATIENCE),
            Ok(()),
            "interrupts were not restored"
        );
        self.thread.take().unwrap().join().unwrap();
    }
}

#[test]
fn irq_state_save_and_restore() {
    IrqProbe::start().assert_gets_through();
    let outer = IrqState::save();
    let probe = IrqProbe::start();
    probe.assert_blocked();
    let inner = IrqState::save();
    assert_eq!(format!("{inner:?}"), "IrqState");
    drop(inner);
    // Restoring the nested save keeps them off.
    probe.assert_blocked();
    drop(outer);
    probe.assert_gets_through();
}

#[test]
fn irq_mutexes_disable_interrupts_while_held() {
    let a = IrqTicketMutex::new(0u32);
    let b = IrqTtasMutex::new(0u32);
    for which in 0..2 {
        let probe;
        if which == 0 {
            let mut guard = a.lock();
            probe = IrqProbe::start();
            probe.assert_blocked();
            *guard += 1;
        } else {
            let mut guard = b.try_lock().unwrap();
            probe = IrqProbe::start();
            probe.assert_blocked();
            *guard += 1;
        }
        probe.assert_gets_through();
    }
    assert_eq!((*a.lock(), *b.lock()), (1, 1));
}

#[test]
fn irq_mutexes_nest() {
    let a = IrqTicketMutex::new(0u32);
    let b = IrqTtasMutex::new(0u32);
    let mut ga = a.lock();
    let mut gb = b.lock();
    let probe = IrqProbe::start();
    *ga += 1;
    *gb += 1;
    probe.assert_blocked();
    // Inner first, as required: interrupts stay off until the outer drops.
    drop(gb);
    assert!(!b.is_locked());
    probe.assert_blocked();
    drop(ga);
    probe.assert_gets_through();
    assert!(!a.is_locked());
    assert_eq!((*a.lock(), *b.lock()), (1, 1));
}

/// Threads take two IRQ-saving locks nested (always in the same order) and
/// update both protected values; also check exclusion on each.
#[test]
fn irq_mutexes_nest_threaded() {
    let a = IrqTicketMutex::new(0u64);
    let b = IrqTtasMutex::new(0u64);
    let (in_a, in_b) = (AtomicBool::new(false), AtomicBool::new(false));
    let total = AtomicUsize::new(0);
    let t0 = Instant::now();
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut budget = Budget::new(t0, TOTAL_OPS / THREADS / 4);
                while budget.next() {
                    let mut ga = a.lock();
                    assert!(!in_a.swap(true, Ordering::Relaxed));
                    let mut gb = b.lock();
                    assert!(!in_b.swap(true, Ordering::Relaxed));
                    assert_eq!(*ga, *gb);
                    *ga += 1;
                    *gb += 1;
                    in_b.store(false, Ordering::Relaxed);
                    drop(gb);
                    in_a.store(false, Ordering::Relaxed);
                    drop(ga);
                }
                total.fetch_add(budget.done, Ordering::Relaxed);
            });
        }
    });
    let total = total.load(Ordering::Relaxed) as u64;
    assert_eq!((*a.lock(), *b.lock()), (total, total));
    IrqProbe::start().assert_gets_through();
}
