//! The single-CPU build: `cargo xtask check single-cpu` runs this file
//! with `KSYNC_MAX_CPUS=1`, where the ticket, TTAS and queued locks take
//! and release themselves with a load and a store (`spinlock`'s "One
//! CPU"). The host suite runs it in the default build too, where all of
//! it but the recursion report holds as well.
//!
//! One test function: with one CPU id, only one thread may use ksync's
//! per-CPU data at a time (the host hooks give every thread that asks an
//! id of its own, and panic when none is left), and a second thread
//! taking the locks at the same time would be a second CPU, which the
//! build has promised away. Interrupts are played by a POSIX signal sent
//! to this very thread (Linux only): its handler runs between any two
//! instructions of the test, as an interrupt handler does on one CPU.

// Under loom the crate is built for the models only.
#![cfg(not(ksync_loom))]

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use ksync::LockRef;
use ksync::brlock::BrLock;
use ksync::kernel::MAX_CPUS;
use ksync::lock_api::RawMutex;
use ksync::percpu_counter::PerCpuCounter;
use ksync::percpu_rwlock::PerCpuRwLock;
use ksync::rcu::{self, RcuHead, srcu::Srcu};
use ksync::seqlock::SeqLock;
use ksync::spinlock::{
    ArchIrqTtasMutex, IrqQueuedMutex, IrqTicketMutex, QueuedLock, QueuedMutex, RawQueuedLock,
    RawTicketLock, RawTtasLock, TicketLock, TicketMutex, TtasLock, TtasMutex,
};

#[test]
fn one_cpu() {
    // The driver's build must really be the single-CPU one.
    if std::env::var("KSYNC_MAX_CPUS").as_deref() == Ok("1") {
        assert_eq!(MAX_CPUS, 1, "KSYNC_MAX_CPUS=1 did not reach the build");
    }
    println!("MAX_CPUS = {MAX_CPUS}");
    every_lock_locks_and_refuses_try_lock_while_held();
    ticket_lock_wraps();
    the_crate_runs_on_its_locks();
    #[cfg(target_os = "linux")]
    signal::handlers_interleave_with_lock_operations();
    recursion_is_reported();
}

/// Lock, `try_lock` refused while held, unlock, `try_lock` taken.
fn check<L: RawMutex>(what: &str, lock: &L) {
    for _ in 0..3 {
        assert!(!lock.is_locked(), "{what}");
        lock.lock();
        assert!(lock.is_locked(), "{what}");
        assert!(!lock.try_lock(), "{what}: try_lock took a held lock");
        // SAFETY: held since `lock`.
        unsafe { lock.unlock() };
        assert!(lock.try_lock(), "{what}: try_lock refused a free lock");
        assert!(!lock.try_lock(), "{what}: try_lock took a held lock");
        // SAFETY: held since the successful `try_lock`.
        unsafe { lock.unlock() };
    }
}

fn every_lock_locks_and_refuses_try_lock_while_held() {
    check("RawTicketLock", &RawTicketLock::new());
    check("RawTtasLock", &RawTtasLock::new());
    check("RawQueuedLock", &RawQueuedLock::new());
    let irq_lock = <ksync::spinlock::RawIrqSave<RawTicketLock> as RawMutex>::INIT;
    check("RawIrqSave<RawTicketLock>", &irq_lock);
    // The algorithms' inherent API.
    let (t, s, q) = (TicketLock::new(), TtasLock::new(), QueuedLock::new());
    t.lock();
    s.lock();
    q.lock();
    assert!(!t.try_lock() && !s.try_lock() && !q.try_lock());
    assert!(t.is_locked() && s.is_locked() && q.is_locked());
    assert!(!t.is_contended() && !q.is_contended());
    // SAFETY: all three held since the lines above.
    unsafe {
        q.unlock();
        s.unlock();
        t.unlock();
    }
    assert!(!t.is_locked() && !s.is_locked() && !q.is_locked());
    // The mutexes, nested (distinct locks).
    let a = TicketMutex::new(1u32);
    let b = TtasMutex::new(2u32);
    let c = QueuedMutex::new(3u32);
    let d = IrqTicketMutex::new(4u32);
    let e = IrqQueuedMutex::new(5u32);
    let f = ArchIrqTtasMutex::new(6u32);
    {
        let (mut a, mut b, mut c) = (a.lock(), b.lock(), c.lock());
        let (mut d, mut e, mut f) = (d.lock(), e.lock(), f.lock());
        *a += *b + *c + *d + *e + *f;
        *b = 0;
        *c = 0;
        *d = 0;
        *e = 0;
        *f = 0;
    }
    assert_eq!(*a.lock(), 21);
    assert!(a.try_lock().is_some() && b.try_lock().is_some() && c.try_lock().is_some());
}

/// The tickets wrap at 2^32 in the single-CPU build's load-and-store
/// paths too.
fn ticket_lock_wraps() {
    // Just below the 2^32 wrap, so that the tickets cross it.
    let lock: TicketLock = TicketLock::at_ticket(u32::MAX - 4);
    for i in 0..10u32 {
        if i % 2 == 0 {
            lock.lock();
        } else {
            assert!(lock.try_lock());
        }
        assert!(lock.is_locked() && !lock.try_lock());
        // SAFETY: held since the lines above.
        unsafe { lock.unlock() };
        assert!(!lock.is_locked());
    }
}

/// The crate's own users of the locks: lockref, seqlock, brlock, per-CPU
/// counter and rw lock, RCU and SRCU.
fn the_crate_runs_on_its_locks() {
    let r = LockRef::new(1);
    r.get();
    assert!(r.get_not_dead());
    assert_eq!(r.put_return(), Some(2));
    {
        let mut guard = r.lock();
        assert_eq!(guard.count(), 2);
        guard.set_count(3);
    }
    assert_eq!(r.count(), 3);

    let seq = SeqLock::new([0u64; 2]);
    {
        let mut w = seq.write();
        w[0] = 1;
        w[1] = 2;
    }
    assert_eq!(seq.read(), [1, 2]);
    seq.write_irqsave()[0] = 5;
    assert_eq!(seq.read(), [5, 2]);

    let br: BrLock<u32> = BrLock::new();
    *br.local_lock() += 1;
    *br.local_lock_irqsave() += 1;
    assert_eq!(br.global_lock().iter_mut().map(|v| *v).sum::<u32>(), 2);

    let counter = PerCpuCounter::with_batch(4);
    for _ in 0..100 {
        counter.inc();
    }
    assert_eq!(counter.sum(), 100);

    let rw = PerCpuRwLock::new(0u32);
    *rw.write() += 1;
    assert_eq!(*rw.read(), 1);

    rcu::cpu_online();
    static RAN: AtomicUsize = AtomicUsize::new(0);
    unsafe fn ran(_: *mut RcuHead) {
        RAN.fetch_add(1, Relaxed);
    }
    let head: &'static mut RcuHead = Box::leak(Box::new(RcuHead::new()));
    // SAFETY: the head is leaked (outlives the callback) and not queued.
    unsafe { rcu::call_rcu(head, ran) };
    rcu::synchronize();
    rcu::barrier();
    assert_eq!(RAN.load(Relaxed), 1);
    rcu::cpu_offline();

    let srcu = Srcu::new();
    let guard = srcu.read_lock();
    drop(guard);
    srcu.synchronize();
}

/// Taking a lock that this (only) CPU holds: in the single-CPU build's
/// debug profile, a clear panic instead of a silent hang.
fn recursion_is_reported() {
    if MAX_CPUS != 1 || !cfg!(debug_assertions) || cfg!(feature = "lockdep") {
        // SMP builds spin (another CPU may release it); release builds
        // spin as SMP would; lockdep reports the recursion itself first.
        return;
    }
    fn expect_recursion(what: &str, lock: impl Fn()) {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(lock)).expect_err(what);
        let text = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| err.downcast_ref::<&str>().copied())
            .unwrap_or("");
        assert!(text.contains("spinlock recursion"), "{what}: {text}");
    }
    let (t, s, q) = (
        RawTicketLock::new(),
        RawTtasLock::new(),
        RawQueuedLock::new(),
    );
    t.lock();
    s.lock();
    q.lock();
    // The three expected panics print nothing.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    expect_recursion("ticket", || t.lock());
    expect_recursion("ttas", || s.lock());
    expect_recursion("queued", || q.lock());
    std::panic::set_hook(hook);
    // The failed attempts left the locks held, by us, and nothing else.
    assert!(!t.is_contended());
    // SAFETY: all three held since the lines above.
    unsafe {
        q.unlock();
        s.unlock();
        t.unlock();
    }
    assert!(t.try_lock() && s.try_lock() && q.try_lock());
}

#[cfg(target_os = "linux")]
#[path = "common/signal.rs"]
mod posix_signal;

/// Interrupts on the one CPU, played by signals to this thread.
#[cfg(target_os = "linux")]
mod signal {
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
    use std::thread;
    use std::time::Duration;

    use ksync::spinlock::{QueuedLock, TicketLock, TtasLock};

    // The algorithms, not the tracked locks: with `lockdep` the tracked
    // ones record in tables that a signal handler must not touch.
    static TICKET: TicketLock = TicketLock::new();
    static TTAS: TtasLock = TtasLock::new();
    static QUEUED: QueuedLock = QueuedLock::new();
    /// Which lock the handler and the loop use (0, 1, 2).
    static WHICH: AtomicUsize = AtomicUsize::new(0);
    /// The protected data: updated by a load and a store, so that a
    /// handler inside the loop's critical section would lose an update.
    static DATA: AtomicU32 = AtomicU32::new(0);
    /// Handler runs that took the lock and added one.
    static IRQ_OPS: AtomicU32 = AtomicU32::new(0);
    /// Handler runs that found the lock held (and gave up).
    static IRQ_BUSY: AtomicU32 = AtomicU32::new(0);

    fn try_lock(which: usize) -> bool {
        match which {
            0 => TICKET.try_lock(),
            1 => TTAS.try_lock(),
            _ => QUEUED.try_lock(),
        }
    }

    /// # Safety
    /// Held by the caller.
    unsafe fn unlock(which: usize) {
        // SAFETY: forwarded caller contract.
        unsafe {
            match which {
                0 => TICKET.unlock(),
                1 => TTAS.unlock(),
                _ => QUEUED.unlock(),
            }
        }
    }

    fn lock(which: usize) {
        match which {
            0 => TICKET.lock(),
            1 => TTAS.lock(),
            _ => QUEUED.lock(),
        }
    }

    /// The "interrupt handler": adds one under the lock if it is free,
    /// gives up otherwise (waiting would deadlock: the holder is the code
    /// this handler interrupted). Only atomics and the locks' lock-free
    /// fast paths: async-signal-safe.
    extern "C" fn on_signal(_: libc::c_int) {
        let which = WHICH.load(Relaxed);
        if try_lock(which) {
            DATA.store(DATA.load(Relaxed) + 1, Relaxed);
            // SAFETY: taken just above.
            unsafe { unlock(which) };
            IRQ_OPS.fetch_add(1, Relaxed);
        } else {
            IRQ_BUSY.fetch_add(1, Relaxed);
        }
    }

    /// The loop takes each lock (with `lock` and `try_lock`) and adds one
    /// by a load and a store, while another thread keeps signalling this
    /// one: no update is lost, the handler finds the lock held sometimes
    /// and takes it other times (including between the load and the store
    /// of the loop's own lock operations, the case the single-CPU build's
    /// argument is about).
    pub(super) fn handlers_interleave_with_lock_operations() {
        let old = super::posix_signal::install(libc::SIGUSR1, on_signal);
        // SAFETY: `pthread_self` has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let done = AtomicBool::new(false);
        let sent = AtomicUsize::new(0);
        let total = AtomicU32::new(0);
        thread::scope(|s| {
            // The "interrupt controller": uses no ksync, only signals us.
            s.spawn(|| {
                while !done.load(Relaxed) {
                    // SAFETY: `me` runs until `done` (it joins this scope
                    // first), and SIGUSR1 has our handler.
                    unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
                    sent.fetch_add(1, Relaxed);
                    thread::sleep(Duration::from_micros(20));
                }
            });
            for which in 0..3 {
                WHICH.store(which, Relaxed);
                let (before_ops, before_busy) = (IRQ_OPS.load(Relaxed), IRQ_BUSY.load(Relaxed));
                let start_sent = sent.load(Relaxed);
                let mut ours = 0u32;
                let mut rounds = 0u32;
                // Enough rounds, and enough signals, that both outcomes
                // of the handler happen (bounded: ~100 s).
                while rounds < 200_000
                    || (sent.load(Relaxed) - start_sent < 2_000 && rounds < 400_000_000)
                {
                    if rounds % 2 == 0 {
                        lock(which);
                    } else {
                        while !try_lock(which) {}
                    }
                    let seen = DATA.load(Relaxed);
                    for _ in 0..8 {
                        core::hint::spin_loop();
                    }
                    DATA.store(seen + 1, Relaxed);
                    // SAFETY: taken above.
                    unsafe { unlock(which) };
                    ours += 1;
                    rounds += 1;
                }
                let ops = IRQ_OPS.load(Relaxed) - before_ops;
                let busy = IRQ_BUSY.load(Relaxed) - before_busy;
                println!(
                    "lock {which}: {ours} ops, handler {ops} ops and {busy} busy, {} signals",
                    sent.load(Relaxed) - start_sent
                );
                assert!(
                    ops > 0 && busy > 0,
                    "lock {which}: the handler never ran both ways (ops {ops}, busy {busy})"
                );
                total.fetch_add(ours, Relaxed);
            }
            done.store(true, Relaxed);
        });
        // The sender has stopped, and a signal it sent was delivered when
        // this thread returned from the kernel (joining it, at the
        // latest): none is pending.
        super::posix_signal::restore(libc::SIGUSR1, &old);
        // Every update arrived: the loop's and the handler's.
        assert_eq!(
            DATA.load(Relaxed),
            total.load(Relaxed) + IRQ_OPS.load(Relaxed),
            "lost updates: the handler got in while the lock was held"
        );
    }
}
