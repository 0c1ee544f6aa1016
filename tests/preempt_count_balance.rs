//! The debug preemption count that `might_sleep` reads
//! (`PREEMPT_OFF`, counted on the id `preempt_disable_cpu_id` returns,
//! uncounted on the owner record's CPU since 37db448) is balanced through
//! every way a spinlock guard ends: plain and nested locks released out of
//! order, `try_lock` (taken, and failed against a holder on another CPU),
//! `lock_preemptible`, the IRQ-saving policy and adapter (`KernelIrq` and
//! `ArchIrq`), `lock_api`'s `unlocked`, `bump`, `unlock_fair`, `map`,
//! `forget` + `force_unlock`, and interrupt handlers that take locks
//! (hostile kernel: between any two atomic ops, the count's own load and
//! store included). Checked while a guard is live (the count is seen) and
//! at the end on every CPU id (no count left behind).
//!
//! `cargo test --test preempt_count_balance`, and under the hostile kernel:
//! `KSYNC_HOSTILE_SEED=N KSYNC_HOSTILE_STRICT=1 cargo test --features hostile --test preempt_count_balance`.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use ksync::kernel::{self, irq::ArchIrq};
use ksync::lock_api::{self, MutexGuard, RawMutexFair};
use ksync::spinlock::{
    ArchIrqTicketMutex, IrqDisabled, IrqQueuedMutex, NoGuard, QueuedMutex, RawIrqSave,
    RawTicketLock, RawTtasLock, Spin, SpinLock, TicketMutex, TtasMutex,
};
use ksync::{host, wait};

static A: TicketMutex<u64> = TicketMutex::new(0);
static B: QueuedMutex<u64> = QueuedMutex::new(0);
static C: TtasMutex<u64> = TtasMutex::new(0);
static IRQ: SpinLock<u64, IrqDisabled> = SpinLock::new(0);
static IRQ_Q: IrqQueuedMutex<u64> = IrqQueuedMutex::new(0);
static ARCH: ArchIrqTicketMutex<u64> = ArchIrqTicketMutex::new(0);
static ADAPTER: lock_api::Mutex<RawIrqSave<RawTtasLock>, u64> =
    lock_api::Mutex::const_new(RawIrqSave::new(RawTtasLock::new()), 0);
static ARCH_ADAPTER: lock_api::Mutex<RawIrqSave<RawTicketLock<Spin, NoGuard>, ArchIrq>, u64> =
    lock_api::Mutex::const_new(
        RawIrqSave::with_irq(RawTicketLock::<Spin, NoGuard>::with_relax()),
        0,
    );
static RAW: RawTicketLock = RawTicketLock::new();
/// Taken by the interrupt handler only (a task holding it would deadlock
/// with its own handler).
#[cfg(feature = "hostile")]
static HANDLER_ONLY: SpinLock<u64, ksync::spinlock::PreemptDisabled> = SpinLock::new(0);

/// Whether `might_sleep` reports here (it must while a guard is live).
fn reports() -> bool {
    std::panic::catch_unwind(wait::might_sleep).is_err()
}

/// The `ArchIrq` forms: off here (their masking count leaks under the
/// hostile kernel, see tests/archirq_masking_count.rs, and the
/// final check would report that instead).
const ARCH_IRQ: bool = false;

static QUIET: AtomicBool = AtomicBool::new(false);

#[cfg(feature = "hostile")]
fn handler() {
    *IRQ.lock() += 1;
    *IRQ_Q.lock() += 1;
    *HANDLER_ONLY.lock() += 1;
    drop(HANDLER_ONLY.try_lock());
}

fn round(i: u64, check: bool) {
    {
        let mut a = A.lock();
        let mut b = B.lock();
        *a += 1;
        drop(a); // out of order: the outer first
        if check {
            assert!(
                reports(),
                "the inner guard is live but might_sleep was silent"
            );
        }
        *b += 1;
    }
    if let Some(mut c) = C.try_lock() {
        *c += 1;
    }
    {
        let mut g = A.lock();
        *g += 1;
        MutexGuard::unlocked(&mut g, || {
            let _ = kernel::cpu_id();
        });
        MutexGuard::bump(&mut g);
        if check {
            assert!(
                reports(),
                "a guard after unlocked/bump is live but might_sleep was silent"
            );
        }
        MutexGuard::unlock_fair(g);
    }
    {
        let mut m = MutexGuard::map(B.lock(), |v| v);
        *m += 1;
    }
    {
        let g = C.lock();
        core::mem::forget(g);
        // SAFETY: forgotten just above by this context, on this CPU
        // (preemption is off while it is held).
        unsafe { C.force_unlock() };
    }
    {
        let mut g = IRQ.lock();
        *g += 1;
        let mut q = IRQ_Q.lock();
        *q += 1;
        if check {
            assert!(
                reports(),
                "IrqDisabled guards are live but might_sleep was silent"
            );
        }
    }
    if ARCH_IRQ {
        *ARCH.lock() += 1;
        *ARCH_ADAPTER.lock() += 1;
    }
    *ADAPTER.lock() += 1;
    if let Some(mut g) = ADAPTER.try_lock() {
        *g += 1;
    }
    {
        RAW.lock_preemptible();
        // SAFETY: taken just above by this context.
        unsafe { RAW.unlock() };
        if RAW.try_lock() {
            // SAFETY: taken just above by this context.
            unsafe { RAW.unlock() };
        }
    }
    {
        // SAFETY: the raw lock is locked and unlocked as a pair below.
        let raw = unsafe { A.raw() };
        raw.lock();
        // SAFETY: taken just above, on this CPU.
        unsafe { raw.unlock_fair() };
    }
    let _ = i;
}

#[test]
fn the_debug_preemption_count_is_balanced_through_every_guard_path() {
    #[cfg(feature = "hostile")]
    let _irq = host::hostile::register_interrupt(handler);
    #[cfg(feature = "hostile")]
    host::hostile::set_rates(host::hostile::Rates {
        interrupt: 4096,
        preempt: 1024,
        migrate: 1024,
        ..host::hostile::rates()
    });
    // One at a time in the single-CPU build (KSYNC_MAX_CPUS=1).
    let threads = if kernel::MAX_CPUS == 1 { 1 } else { 4 };
    let rounds: u64 = if cfg!(debug_assertions) {
        2_000
    } else {
        10_000
    };
    // The live-guard checks panic inside might_sleep on purpose.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !QUIET.load(Relaxed) {
            default_hook(info);
        }
    }));
    QUIET.store(true, Relaxed);
    let r = std::panic::catch_unwind(|| {
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for i in 0..rounds {
                        // Contention for the try_lock failures.
                        round(i, cfg!(debug_assertions) && (i + t as u64) % 16 == 0);
                    }
                });
            }
        });
    });
    QUIET.store(false, Relaxed);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
    #[cfg(feature = "hostile")]
    {
        let (interrupts, preemptions, migrations) = host::hostile::stats();
        println!("{interrupts} interrupts, {preemptions} preemptions, {migrations} migrations");
        assert!(interrupts > 0 && migrations > 0, "the run was not hostile");
    }
    if !cfg!(debug_assertions) {
        return;
    }
    // Every guard has dropped: no CPU id may still count a disable.
    std::thread::spawn(|| {
        #[cfg(feature = "hostile")]
        host::hostile::set_enabled(false);
        // The workers' ids are freed by their thread-local destructors,
        // which may still run after the scope ended (the single-CPU build
        // has only that one id): wait for one, within a bound.
        let start = std::time::Instant::now();
        QUIET.store(true, Relaxed);
        while std::panic::catch_unwind(kernel::cpu_id).is_err() {
            assert!(start.elapsed().as_secs() < 30, "no CPU id came free");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        QUIET.store(false, Relaxed);
        let mut checked = 0;
        for cpu in 0..kernel::nr_cpus() {
            if std::panic::catch_unwind(|| host::migrate_to(cpu)).is_err() {
                continue; // in use by another thread (the hostile idle thread)
            }
            checked += 1;
            assert!(
                std::panic::catch_unwind(wait::might_sleep).is_ok(),
                "CPU {cpu}: might_sleep reports preemption disabled after every guard dropped"
            );
        }
        assert!(checked > 0);
    })
    .join()
    .unwrap();
}
