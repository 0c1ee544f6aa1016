//! What a spinlock disables while held (its guard policy), handing a held
//! lock to another function, and the holder checks.
//!
//! The host test hooks keep a per-thread preemption count
//! (`ksync::host::preempt_count`) and can arm a preemption that happens at
//! the next point where the count is zero (`preempt_at_next_point`), so a
//! lock holder that could be preempted is seen.

// Under loom the crate is built for the loom models only.
#![cfg(not(ksync_loom))]

use std::cell::Cell;
use std::rc::Rc;
use std::thread;

use ksync::host;
use ksync::lock_api::RawMutex;
use ksync::percpu_rwlock::{GatedPerCpuRwLock, PerCpuRwLock};
use ksync::spinlock::{
    HolderCheck, IrqDisabled, IrqTicketMutex, NoGuard, QueuedLock, QueuedMutex, RawSpinlock,
    RawTicketLock, SpinLock, SpinLockGuard, TicketMutex, TtasLock, TtasMutex,
};

/// Checks that holding `lock` (through `take`) keeps preemption disabled,
/// and that an armed preemption happens only once it is released.
fn holder_is_not_preempted<M>(what: &str, lock: &M, take: impl Fn(&M) -> Box<dyn FnOnce() + '_>) {
    assert_eq!(host::preempt_count(), 0, "{what}: count before");
    let release = take(lock);
    assert!(
        host::preempt_count() >= 1,
        "{what}: preemption is enabled while the lock is held"
    );
    let preempted = Rc::new(Cell::new(false));
    let seen = preempted.clone();
    host::preempt_at_next_point(move || seen.set(true));
    host::preemption_point();
    assert!(!preempted.get(), "{what}: the holder was preempted");
    release();
    assert!(
        preempted.get(),
        "{what}: the unlock was no preemption point"
    );
    assert_eq!(host::preempt_count(), 0, "{what}: count after");
}

#[test]
fn spinlocks_disable_preemption_while_held() {
    let ticket = TicketMutex::new(0);
    holder_is_not_preempted("ticket", &ticket, |m| {
        let g = m.lock();
        Box::new(move || drop(g))
    });
    let ttas = TtasMutex::new(0);
    holder_is_not_preempted("TTAS", &ttas, |m| {
        let g = m.lock();
        Box::new(move || drop(g))
    });
    let queued = QueuedMutex::new(0);
    holder_is_not_preempted("queued", &queued, |m| {
        let g = m.lock();
        Box::new(move || drop(g))
    });
    let irq = IrqTicketMutex::new(0);
    holder_is_not_preempted("IRQ-saving ticket", &irq, |m| {
        let g = m.lock();
        Box::new(move || drop(g))
    });
    let irq_policy: SpinLock<u32, IrqDisabled, QueuedLock> = SpinLock::new(0);
    holder_is_not_preempted("IrqDisabled queued", &irq_policy, |m| {
        let g = m.lock();
        Box::new(move || drop(g))
    });
    let raw = RawTicketLock::new();
    holder_is_not_preempted("raw ticket", &raw, |l| {
        l.lock();
        // SAFETY: locked just above on this thread.
        Box::new(move || unsafe { l.unlock() })
    });
    holder_is_not_preempted("try_lock", &ticket, |m| {
        let g = m.try_lock().unwrap();
        Box::new(move || drop(g))
    });
}

/// The spinning per-CPU rw locks hold preemption off while held, as
/// Linux's `read_lock`/`write_lock` do: a reader preempted on the CPU of a
/// writer that spins with interrupts off would never run again (seen as a
/// hang in the QEMU scheduler kernel's `rwlock` suite).
#[test]
fn percpu_rwlocks_disable_preemption_while_held() {
    let fenced = PerCpuRwLock::new(0);
    holder_is_not_preempted("PerCpuRwLock read", &fenced, |l| {
        let g = l.read();
        Box::new(move || drop(g))
    });
    holder_is_not_preempted("PerCpuRwLock try_read", &fenced, |l| {
        let g = l.try_read().unwrap();
        Box::new(move || drop(g))
    });
    holder_is_not_preempted("PerCpuRwLock write", &fenced, |l| {
        let g = l.write();
        Box::new(move || drop(g))
    });
    holder_is_not_preempted("PerCpuRwLock try_write", &fenced, |l| {
        let g = l.try_write().unwrap();
        Box::new(move || drop(g))
    });
    let gated = GatedPerCpuRwLock::new(0);
    holder_is_not_preempted("GatedPerCpuRwLock read", &gated, |l| {
        let g = l.read();
        Box::new(move || drop(g))
    });
    holder_is_not_preempted("GatedPerCpuRwLock write", &gated, |l| {
        let g = l.write();
        Box::new(move || drop(g))
    });
    // A failed attempt gives preemption back.
    let writer = fenced.write();
    assert!(fenced.try_read().is_none());
    assert!(fenced.try_write().is_none());
    drop(writer);
    assert_eq!(
        host::preempt_count(),
        0,
        "a failed try_ left preemption off"
    );
}

/// A `LockRef`'s embedded lock holds preemption off while held, as
/// Linux's lockref `spinlock_t` does, whether taken by `lock` or by a
/// lockless operation's fallback: a holder preempted on the CPU of a
/// thread that then spins on it with preemption off would never run again
/// (seen as a hang in the QEMU scheduler kernel's `seed-walk` suite).
#[test]
fn lockref_lock_disables_preemption_while_held() {
    let lockref = ksync::LockRef::new(1);
    holder_is_not_preempted("LockRef lock", &lockref, |l| {
        let g = l.lock();
        Box::new(move || drop(g))
    });
    holder_is_not_preempted("LockRef lock_nested", &lockref, |l| {
        let g = l.lock_nested(1);
        Box::new(move || drop(g))
    });
    // The last put's fallback returns the guard holding the lock.
    holder_is_not_preempted("LockRef put_or_lock", &lockref, |l| {
        let g = l.put_or_lock().expect("the count is 1: the lock is taken");
        Box::new(move || drop(g))
    });
    // The fallbacks that take and drop the lock inside give it back.
    // `get` meets the lock held and takes the locked path (it waits for
    // the lock, released after a while).
    let held = lockref.lock();
    let t = thread::scope(|s| {
        let getter = s.spawn(|| {
            lockref.get();
            host::preempt_count()
        });
        thread::sleep(std::time::Duration::from_millis(20));
        drop(held);
        getter.join().unwrap()
    });
    assert_eq!(t, 0, "get's locked fallback left preemption off");
    assert_eq!(lockref.count(), 2);

    // The `NoGuard` policy leaves preemption alone (no hook at all).
    let raw = ksync::LockRef::<ksync::spinlock::NoGuard>::with_policy(1);
    let g = raw.lock();
    assert_eq!(
        host::preempt_count(),
        0,
        "a NoGuard LockRef disabled preemption"
    );
    drop(g);
}

#[test]
fn a_failed_try_lock_gives_preemption_back() {
    let lock = TicketMutex::new(0);
    let held = lock.lock();
    thread::scope(|s| {
        s.spawn(|| {
            assert!(lock.try_lock().is_none());
            assert_eq!(host::preempt_count(), 0);
        });
    });
    drop(held);
}

#[test]
fn no_guard_disables_nothing() {
    let lock: SpinLock<u32, NoGuard> = SpinLock::new(0);
    let mut g = lock.lock();
    *g += 1;
    assert_eq!(host::preempt_count(), 0);
    assert!(!host::irqs_disabled());
    // A `NoGuard` guard is `Send`: nothing it holds belongs to this CPU
    // (lockdep, which records holders per CPU, is told of the move).
    // SAFETY: only told, not locked or unlocked.
    unsafe { lock.raw() }.lockdep_release();
    let lock = &lock;
    thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: as above.
            unsafe { lock.raw() }.lockdep_acquire();
            drop(g)
        });
    });
    assert!(!lock.is_locked());
}

#[test]
fn irq_disabled_masks_then_restores_before_preempting() {
    let lock: SpinLock<u32, IrqDisabled> = SpinLock::new(0);
    assert!(!host::irqs_disabled());
    let g = lock.lock();
    assert!(host::irqs_disabled());
    assert_eq!(host::preempt_count(), 1);
    // Linux's `spin_unlock_irqrestore`: interrupts back on before the
    // preemption point that `preempt_enable` is.
    let irqs_off_at_preemption = Rc::new(Cell::new(None));
    let seen = irqs_off_at_preemption.clone();
    host::preempt_at_next_point(move || seen.set(Some(host::irqs_disabled())));
    drop(g);
    assert_eq!(irqs_off_at_preemption.get(), Some(false));
    assert!(!host::irqs_disabled());
}

/// The scheduler's hand-over: one function takes the run-queue lock, the
/// "next task" (another function, another stack) releases it.
#[test]
fn a_held_lock_is_released_from_another_function() {
    static RUNQUEUE: SpinLock<u32, IrqDisabled> = SpinLock::new(0);

    fn schedule_out() {
        let mut rq = RUNQUEUE.lock();
        *rq += 1;
        // The guard is given up: the next task releases the lock.
        std::mem::forget(rq);
        // SAFETY: held by this CPU, given up above.
        unsafe { RUNQUEUE.raw() }.lockdep_release();
    }

    fn finish_switch() {
        // SAFETY: the raw lock is only asked and told.
        let raw = unsafe { RUNQUEUE.raw() };
        raw.lockdep_acquire();
        raw.assert_held();
        // SAFETY: handed over by `schedule_out` on this CPU.
        unsafe { RUNQUEUE.force_unlock() };
    }

    schedule_out();
    assert!(RUNQUEUE.is_locked());
    assert!(host::irqs_disabled(), "the saved state is kept in the lock");
    finish_switch();
    assert!(!RUNQUEUE.is_locked());
    assert!(!host::irqs_disabled());
    assert_eq!(host::preempt_count(), 0);
    assert_eq!(*RUNQUEUE.lock(), 1);
}

/// The saved interrupt state can be taken out of a held lock and another
/// put back (`into_flags`/`from_flags` on the caller's side).
#[test]
fn the_saved_state_is_replaced() {
    let lock = RawTicketLock::<ksync::spinlock::Spin, IrqDisabled>::with_relax();
    // Interrupts already off when the lock is taken: it saves "off".
    let outer = ksync::kernel::irq::IrqState::save();
    lock.lock();
    // The next task's own state goes in: it was saved with interrupts on
    // (`outer` is its save), so the unlock turns them on.
    // SAFETY: held by this thread; `outer`'s flags are restored by the
    // unlock instead of by `outer`, and the old state (interrupts off)
    // owes nothing.
    let old = unsafe { lock.replace_saved(outer.into_flags()) };
    let _ = old;
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    assert!(!host::irqs_disabled());
    assert_eq!(host::preempt_count(), 0);
}

#[test]
fn guards_are_named_and_passed() {
    fn push(mut queue: SpinLockGuard<'_, Vec<u32>, NoGuard, TtasLock>, v: u32) -> usize {
        queue.push(v);
        queue.len()
    }
    let queue: SpinLock<Vec<u32>, NoGuard, TtasLock> = SpinLock::new(Vec::new());
    assert_eq!(push(queue.lock(), 1), 1);
    assert_eq!(push(queue.lock(), 2), 2);
}

#[test]
fn holder_checks() {
    let lock = TicketMutex::new(0);
    assert!(!lock.is_held());
    let g = lock.lock();
    assert!(lock.is_held());
    lock.assert_held();
    thread::scope(|s| {
        s.spawn(|| {
            // Another CPU: exact with an owner record (debug) or lockdep;
            // release builds without lockdep can only say "held".
            if cfg!(any(debug_assertions, feature = "lockdep")) {
                assert!(!lock.is_held(), "another CPU's hold counted as ours");
            } else {
                assert!(lock.is_held());
            }
        });
    });
    drop(g);
    assert!(!lock.is_held());
    let raw = <RawSpinlock<QueuedLock> as RawMutex>::INIT;
    assert!(!raw.is_held());
    raw.lock();
    assert!(raw.is_held());
    // SAFETY: locked just above on this thread.
    unsafe { raw.unlock() };
}

/// Debug builds (without lockdep, which reports these itself): the owner
/// record reports each misuse clearly instead of hanging.
#[cfg(all(debug_assertions, not(feature = "lockdep")))]
mod owner_record {
    use super::*;
    use ksync::lock_api::Mutex;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    fn panic_message(f: impl FnOnce()) -> String {
        let err = catch_unwind(AssertUnwindSafe(f)).expect_err("no panic");
        err.downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn assert_held_names_the_holder() {
        let lock = TicketMutex::new(0);
        let msg = panic_message(|| lock.assert_held());
        assert!(msg.contains("not held") && msg.contains("free"), "{msg}");
        let g = lock.lock();
        thread::scope(|s| {
            s.spawn(|| {
                let msg = panic_message(|| lock.assert_held());
                assert!(msg.contains("holds it"), "{msg}");
            });
        });
        drop(g);
    }

    #[test]
    fn recursion_is_reported_not_spun_on() {
        let lock = Mutex::<RawTicketLock, u32>::new(0);
        let g = lock.lock();
        let msg = panic_message(|| drop(lock.lock()));
        assert!(msg.contains("spinlock recursion"), "{msg}");
        drop(g);
    }

    #[test]
    fn unlock_on_another_cpu_is_reported() {
        let lock = TicketMutex::new(0);
        std::mem::forget(lock.lock());
        thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: deliberately wrong (the test): the lock is held
                // by the other thread; the debug check panics first.
                let msg = panic_message(|| unsafe { lock.force_unlock() });
                assert!(msg.contains("held by CPU"), "{msg}");
            });
        });
        // SAFETY: held by this thread (forgotten guard above).
        unsafe { lock.force_unlock() };
    }
}

/// With lockdep, `assert_held` is lockdep's: a `NotHeld` report naming the
/// lock and what this CPU holds.
#[cfg(feature = "lockdep")]
#[test]
fn lockdep_reports_a_lock_not_held() {
    let lock = TicketMutex::new(0);
    let other = TtasMutex::new(0);
    host::record_lockdep_reports(true);
    let g = other.lock();
    lock.assert_held();
    drop(g);
    let reports = host::take_lockdep_reports();
    host::record_lockdep_reports(false);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].contains("lock not held by this CPU"),
        "{}",
        reports[0]
    );
    let held = lock.lock();
    lock.assert_held();
    drop(held);
    assert!(host::take_lockdep_reports().is_empty());
}

/// `is_locked` on every lock, not only the spinlocks.
#[test]
fn every_lock_says_whether_it_is_locked() {
    use ksync::LockRef;
    use ksync::brlock::BrLock;
    use ksync::seqlock::SeqLock;

    let lockref = LockRef::new(1);
    assert!(!lockref.is_locked());
    let g = lockref.lock();
    assert!(lockref.is_locked());
    drop(g);
    assert!(!lockref.is_locked());

    let seq = SeqLock::new(0u64);
    assert!(!seq.is_locked());
    let w = seq.write();
    assert!(seq.is_locked());
    drop(w);
    assert!(!seq.is_locked());

    let br: BrLock<u32> = BrLock::new();
    assert!(!br.is_locked());
    let local = br.local_lock();
    let cpu = ksync::kernel::cpu_id();
    assert!(br.is_locked() && br.is_cpu_locked(cpu));
    drop(local);
    let global = br.global_lock();
    assert!(br.is_cpu_locked(0) && br.is_cpu_locked(ksync::kernel::MAX_CPUS - 1));
    drop(global);
    assert!(!br.is_locked());
}

/// Issue 37, defect 6: the IRQ-saving mutexes and the `RawIrqSave`
/// adapter restore interrupts before the preemption point of their
/// `preempt_enable` (`spin_unlock_irqrestore`'s order), as
/// `IrqDisabled` does above.
#[test]
fn irq_saving_mutexes_restore_interrupts_before_preempting() {
    fn check<M: RawMutex>(what: &str, lock: &M) {
        assert!(!host::irqs_disabled(), "{what}: before");
        lock.lock();
        assert!(host::irqs_disabled(), "{what}: held");
        assert_eq!(host::preempt_count(), 1, "{what}: held");
        let irqs_off_at_preemption = Rc::new(Cell::new(None));
        let seen = irqs_off_at_preemption.clone();
        host::preempt_at_next_point(move || seen.set(Some(host::irqs_disabled())));
        // SAFETY: held, just above.
        unsafe { lock.unlock() };
        assert_eq!(
            irqs_off_at_preemption.get(),
            Some(false),
            "{what}: the preemption at unlock ran with interrupts masked (or did not run)"
        );
        assert!(!host::irqs_disabled(), "{what}: after");
        assert_eq!(host::preempt_count(), 0, "{what}: after");
    }
    let (ticket, queued, ttas) = (
        IrqTicketMutex::new(0),
        ksync::spinlock::IrqQueuedMutex::new(0),
        ksync::spinlock::IrqTtasMutex::new(0),
    );
    // SAFETY: (each `raw`) the raw lock is locked and unlocked in pairs by
    // `check`, never while a guard exists.
    check("IrqTicketMutex", unsafe { ticket.raw() });
    // SAFETY: as above.
    check("IrqQueuedMutex", unsafe { queued.raw() });
    // SAFETY: as above.
    check("IrqTtasMutex", unsafe { ttas.raw() });
    let adapter = ksync::spinlock::RawIrqSave::new(RawTicketLock::new());
    check("RawIrqSave<RawTicketLock>", &adapter);
}

/// Issue 37, defect 4: `lock_preemptible` followed by the lock's `unlock`
/// keeps the preemption count balanced, inside an outer lock too (before
/// the fix the count fell to 0 inside the outer lock: the holder could be
/// preempted and moved while holding it).
#[test]
fn lock_preemptible_then_unlock_keeps_the_count() {
    let outer = TicketMutex::new(0);
    let inner = RawTicketLock::new();
    let g = outer.lock();
    assert_eq!(host::preempt_count(), 1);
    inner.lock_preemptible();
    let held_count = host::preempt_count();
    assert!(inner.is_held());
    // SAFETY: held, taken by `lock_preemptible` just above.
    unsafe { inner.unlock() };
    assert_eq!(
        host::preempt_count(),
        1,
        "the count inside the outer lock is unbalanced"
    );
    assert_eq!(
        held_count, 2,
        "lock_preemptible held the lock with preemption enabled"
    );
    drop(g);
    assert_eq!(host::preempt_count(), 0);
}

/// Issue 37, defect 4: a hold taken through `arch()` is released through
/// it; the tracked `unlock` (whose contract forbids it) is caught in debug
/// builds instead of unbalancing the count.
#[cfg(debug_assertions)]
#[test]
#[cfg_attr(
    not(feature = "lockdep"),
    should_panic(expected = "unlock of a spinlock that is not held")
)]
// With lockdep its own check of the release comes first.
#[cfg_attr(
    feature = "lockdep",
    should_panic(expected = "release of a lock this CPU does not hold")
)]
fn arch_hold_released_by_the_tracked_unlock_is_caught() {
    let lock = RawTicketLock::new();
    lock.arch().lock();
    // SAFETY: deliberately outside the contract (taken through `arch`):
    // the debug owner check panics before anything is undone.
    unsafe { lock.unlock() };
}
