//! Torture under the hostile host kernel (`--features hostile`): every
//! atomic operation and fence of the library is a point where the kernel
//! may preempt, migrate or interrupt the task (see `ksync::host::hostile`).
//! Nothing here places a point by hand: the schedule comes from the seed
//! (`KSYNC_HOSTILE_SEED`), which every failure prints.
//!
//! Run: `KSYNC_HOSTILE_SEED=7 cargo test --release --features hostile --test hostile`.
#![cfg(feature = "hostile")]

use std::cell::Cell;
use std::mem::offset_of;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ksync::host::{self, hostile};
use ksync::rcu::{self, RcuHead, RcuPtr, Srcu};
use ksync::spinlock::{
    IrqDisabled, IrqQueuedMutex, IrqTicketMutex, NoGuard, QueuedMutex, SpinLock, TtasMutex,
};

/// How long each torture runs (its writers stop starting rounds then).
const RUN: Duration = Duration::from_millis(if cfg!(debug_assertions) { 1500 } else { 2500 });
/// A run that has not finished by then is a hang (a grace period that
/// never ends, a lost hand-off): generous, for a loaded 2-core host.
const HANG: Duration = Duration::from_secs(120);

std::thread_local! {
    /// Whether the idle handler left this CPU idle to RCU.
    static IDLED: Cell<bool> = const { Cell::new(false) };
}

/// An interrupt that idles the CPU it lands on, or brings it back, when it
/// did not interrupt a read section (`idle_enter`'s docs call that sound).
fn idle_toggle() {
    if rcu::read_lock_held() {
        return;
    }
    IDLED.with(|idled| {
        if idled.get() {
            rcu::idle_exit();
        } else {
            rcu::idle_enter();
        }
        idled.set(!idled.get());
    });
}

/// The tick: a quiescent state when the interrupted context was
/// preemptible, then a batch of ready callbacks (Linux's softirq).
fn tick() {
    hostile::tick();
    rcu::process_callbacks();
}

/// Sets its flag when dropped: a torture's writer that panics still stops
/// its readers, so the test fails instead of waiting for them.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// Runs `body` on a thread of its own and fails if it has not returned
/// within [`HANG`], naming the seed (the stuck threads are left behind).
fn bounded(what: &'static str, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(HANG) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: its message (and the seed) are printed.
            handle.join().unwrap();
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "{what}: no end after {HANG:?} under the hostile kernel (seed {}): a hang",
            hostile::seed()
        ),
    }
}

/// One element of the RCU torture: `freed` is set when an updater has
/// reclaimed it, `generation` changes each time it is reused.
struct Elem {
    head: RcuHead,
    generation: AtomicU64,
    freed: AtomicBool,
    index: usize,
}

const ELEMS: usize = 24;

struct Shared {
    elems: Vec<Elem>,
    free: Mutex<Vec<usize>>,
    current: RcuPtr<Elem>,
    stop: AtomicBool,
    errors: AtomicU64,
    reads: AtomicU64,
    retired: [AtomicUsize; 4],
}

fn shared() -> &'static Shared {
    Box::leak(Box::new(Shared {
        elems: (0..ELEMS)
            .map(|index| Elem {
                head: RcuHead::new(),
                generation: AtomicU64::new(0),
                freed: AtomicBool::new(true),
                index,
            })
            .collect(),
        free: Mutex::new((0..ELEMS).collect()),
        current: RcuPtr::null(),
        stop: AtomicBool::new(false),
        errors: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        retired: Default::default(),
    }))
}

fn reclaim(s: &Shared, e: &Elem) {
    e.freed.store(true, SeqCst);
    s.free.lock().unwrap().push(e.index);
}

static SHARED: std::sync::OnceLock<&'static Shared> = std::sync::OnceLock::new();

unsafe fn reclaim_cb(head: *mut RcuHead) {
    // SAFETY: queued by `updater` as the head of a leaked `Elem`.
    let e = unsafe { &*head.byte_sub(offset_of!(Elem, head)).cast::<Elem>() };
    reclaim(SHARED.get().unwrap(), e);
}

/// A reader: read sections that check the element they see is neither
/// reclaimed nor reused before the section ends. `online`: the CPU comes
/// online and reports quiescent states; otherwise RCU never watches it
/// but while its sections run. `long`: sections of hundreds of
/// microseconds.
fn reader(s: &'static Shared, online: bool, long: bool) {
    if online {
        rcu::cpu_online();
    }
    let mut n = 0u64;
    while !s.stop.load(SeqCst) {
        {
            let guard = rcu::read_lock();
            if let Some(e) = s.current.read(&guard) {
                let generation = e.generation.load(SeqCst);
                let mut bad = e.freed.load(SeqCst);
                // Library calls inside the section: points where the
                // kernel may interrupt it.
                for _ in 0..8 {
                    let inner = rcu::read_lock();
                    assert!(rcu::read_lock_held());
                    drop(inner);
                }
                // A long section (rcutorture's reader delays: a reader
                // whose host thread is preempted, or a long walk), as wide
                // as a deep preemption elsewhere.
                if long {
                    n += 1;
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_micros(200 + (n % 8) * 200) {
                        assert!(rcu::read_lock_held());
                    }
                }
                bad |= e.freed.load(SeqCst) || e.generation.load(SeqCst) != generation;
                if bad {
                    s.errors.fetch_add(1, SeqCst);
                }
                s.reads.fetch_add(1, SeqCst);
            }
        }
        if long {
            // A gap as long as a section: the CPU is quiescent for a
            // while (to a grace period's scan, an unwatched CPU then looks
            // idle), then reads again for long.
            let start = Instant::now();
            while start.elapsed() < Duration::from_micros(100 + (n % 4) * 200) {
                std::hint::spin_loop();
            }
        }
        if online {
            rcu::quiescent_state();
        }
    }
    if online {
        rcu::cpu_offline();
    }
}

/// An updater: publishes elements and reclaims the old one after a grace
/// period, waited for each of the four ways in turn (or by `call_rcu`).
fn updater(s: &'static Shared, id: usize) {
    rcu::cpu_online();
    let start = Instant::now();
    let mut round = id;
    // For the run's time, and on until every way of waiting was used (a
    // loaded host may give the run only a few rounds).
    while start.elapsed() < RUN || round < 10 {
        let index = loop {
            if let Some(i) = s.free.lock().unwrap().pop() {
                break i;
            }
            rcu::barrier();
        };
        let e = &s.elems[index];
        e.generation.fetch_add(1, SeqCst);
        e.freed.store(false, SeqCst);
        // SAFETY: the elements live for ever (leaked).
        let old = unsafe { s.current.publish(std::ptr::from_ref(e).cast_mut()) };
        // SAFETY: as above: valid or null.
        if let Some(old) = unsafe { old.as_ref() } {
            let way = round % 5;
            s.retired[way.min(3)].fetch_add(1, SeqCst);
            match way {
                0 => {
                    rcu::synchronize();
                    reclaim(s, old);
                }
                1 => {
                    let cookie = rcu::start_poll();
                    while !rcu::poll(cookie) {
                        rcu::quiescent_state();
                        std::hint::spin_loop();
                    }
                    reclaim(s, old);
                }
                2 => {
                    rcu::cond_synchronize(rcu::get_state());
                    reclaim(s, old);
                }
                _ => {
                    // SAFETY: the head is idle: the element was free, and
                    // its last callback (if any) ran before that.
                    unsafe { rcu::call_rcu(std::ptr::from_ref(&old.head).cast_mut(), reclaim_cb) };
                }
            }
        }
        rcu::quiescent_state();
        round += 1;
    }
    rcu::cpu_offline();
}

/// RCU's grace periods (synchronize, polled cookies, cond_synchronize,
/// call_rcu and barrier) against readers on watched and unwatched CPUs,
/// with the tick and an idling interrupt landing anywhere.
#[test]
fn rcu_torture() {
    let _tick = hostile::register_interrupt(tick);
    let _idle = hostile::register_interrupt(idle_toggle);
    bounded("rcu torture", || {
        let s = *SHARED.get_or_init(shared);
        let before = hostile::stats();
        thread::scope(|sc| {
            let readers: Vec<_> = (0..4)
                .map(|i| sc.spawn(move || reader(s, i % 2 == 0, i >= 2)))
                .collect();
            let updaters: Vec<_> = (0..2)
                .map(|i| {
                    sc.spawn(move || {
                        let _stop = StopOnDrop(&s.stop);
                        updater(s, i)
                    })
                })
                .collect();
            for u in updaters {
                u.join().unwrap();
            }
            s.stop.store(true, SeqCst);
            for r in readers {
                r.join().unwrap();
            }
        });
        rcu::barrier();
        let after = hostile::stats();
        let errors = s.errors.load(SeqCst);
        eprintln!(
            "rcu torture: {} reads, {} grace periods, retired {:?}, kernel events {:?}",
            s.reads.load(SeqCst),
            rcu::gp_seq() / 4,
            s.retired.each_ref().map(|r| r.load(SeqCst)),
            (after.0 - before.0, after.1 - before.1, after.2 - before.2)
        );
        assert_eq!(
            errors,
            0,
            "{errors} reads saw an element reclaimed under them (seed {})",
            hostile::seed()
        );
        assert!(
            s.reads.load(SeqCst) > 0,
            "no reads: the torture proved nothing"
        );
        assert!(
            s.retired.iter().all(|r| r.load(SeqCst) > 0),
            "every grace-period path used"
        );
        assert!(
            after.0 > before.0 && after.1 > before.1 && after.2 > before.2,
            "the kernel interrupted, preempted and migrated: {before:?} -> {after:?}"
        );
    });
}

// ---- spinlocks: every guard policy ------------------------------------------

static PREEMPT_LOCK: SpinLock<u64> = SpinLock::new(0);
static IRQ_LOCK: SpinLock<u64, IrqDisabled> = SpinLock::new(0);
static NOGUARD_LOCK: SpinLock<u64, NoGuard> = SpinLock::new(0);
static IRQ_TICKET: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
static IRQ_QUEUED: IrqQueuedMutex<u64> = IrqQueuedMutex::new(0);
static QUEUED: QueuedMutex<u64> = QueuedMutex::new(0);
static TTAS: TtasMutex<u64> = TtasMutex::new(0);
/// A raw lock taken by test-and-set (`lock_preemptible`) inside another
/// lock's section: its release must leave the outer section's count.
static RAW_INNER: ksync::spinlock::RawTicketLock = ksync::spinlock::RawTicketLock::new();
/// Increments made by the interrupt handler (on the IRQ-safe locks).
static IRQ_ADDS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// An interrupt handler that takes the locks that are taken with
/// interrupts masked (Linux's rule for a lock also taken in handlers).
fn irq_lock_handler() {
    // Each count is bumped inside the section it counts, so that a
    // snapshot taken under the lock sees both or neither.
    let mut v = IRQ_LOCK.lock();
    *v += 1;
    IRQ_ADDS[0].fetch_add(1, SeqCst);
    drop(v);
    let mut v = IRQ_TICKET.lock();
    *v += 1;
    IRQ_ADDS[1].fetch_add(1, SeqCst);
    drop(v);
    let mut v = IRQ_QUEUED.lock();
    *v += 1;
    IRQ_ADDS[2].fetch_add(1, SeqCst);
}

/// Each lock's value minus the handler's increments in it, read under the
/// lock (both move together there).
fn own_counts() -> [u64; 7] {
    let irq = |v: u64, i: usize| v - IRQ_ADDS[i].load(SeqCst);
    [
        *PREEMPT_LOCK.lock(),
        {
            let v = IRQ_LOCK.lock();
            irq(*v, 0)
        },
        *NOGUARD_LOCK.lock(),
        {
            let v = IRQ_TICKET.lock();
            irq(*v, 1)
        },
        {
            let v = IRQ_QUEUED.lock();
            irq(*v, 2)
        },
        *QUEUED.lock(),
        *TTAS.lock(),
    ]
}

/// One increment under `guard`, with library calls between the read and
/// the write (points where a second holder would slip in), and the
/// preemption count checked for policies that keep preemption off.
fn bump(value: &mut u64, preempt_off: bool, name: &str) {
    let v = *value;
    for _ in 0..4 {
        let _ = rcu::read_lock_held();
    }
    if preempt_off {
        assert!(
            host::preempt_count() > 0,
            "{name}: preemption enabled inside the section"
        );
    }
    *value = v + 1;
}

/// Every spinlock guard policy, with interrupts that take the IRQ-safe
/// locks landing anywhere: no update lost, preemption off where the
/// policy says, the kernel's contract kept (it panics on a breach: a
/// count returning to zero with interrupts masked, a preemption inside a
/// section).
#[test]
fn spinlock_torture() {
    let _irq = hostile::register_interrupt(irq_lock_handler);
    bounded("spinlock torture", || {
        const THREADS: usize = 4;
        let rounds = if cfg!(debug_assertions) {
            3_000
        } else {
            20_000
        };
        let start = own_counts();
        thread::scope(|sc| {
            for _ in 0..THREADS {
                sc.spawn(move || {
                    for _ in 0..rounds {
                        bump(&mut PREEMPT_LOCK.lock(), true, "SpinLock<PreemptDisabled>");
                        bump(&mut IRQ_LOCK.lock(), true, "SpinLock<IrqDisabled>");
                        bump(&mut NOGUARD_LOCK.lock(), false, "SpinLock<NoGuard>");
                        bump(&mut IRQ_TICKET.lock(), true, "IrqTicketMutex");
                        bump(&mut IRQ_QUEUED.lock(), true, "IrqQueuedMutex");
                        bump(&mut QUEUED.lock(), true, "QueuedMutex");
                        bump(&mut TTAS.lock(), true, "TtasMutex");
                        {
                            let mut outer = PREEMPT_LOCK.lock();
                            RAW_INNER.lock_preemptible();
                            // SAFETY: taken just above on this CPU (the
                            // outer lock keeps the task here).
                            unsafe { lock_api::RawMutex::unlock(&RAW_INNER) };
                            bump(
                                &mut outer,
                                true,
                                "SpinLock<PreemptDisabled> around lock_preemptible",
                            );
                        }
                    }
                });
            }
        });
        let n = (THREADS * rounds) as u64;
        let end = own_counts();
        // PREEMPT_LOCK also took the lock_preemptible round's increments.
        let n_for = |i: usize| if i == 0 { 2 * n } else { n };
        // The handler may also run on other tests' threads: its own
        // increments are taken out (`own_counts`).
        let names = [
            "SpinLock<PreemptDisabled>",
            "SpinLock<IrqDisabled>",
            "SpinLock<NoGuard>",
            "IrqTicketMutex",
            "IrqQueuedMutex",
            "QueuedMutex",
            "TtasMutex",
        ];
        for (i, name) in names.iter().enumerate() {
            let added = end[i] - start[i];
            let n = n_for(i);
            assert_eq!(
                added,
                n,
                "{name}: {added} increments kept of {n} (an update lost: two holders; seed {})",
                hostile::seed()
            );
        }
    });
}

// ---- SRCU: readers that sleep and migrate -----------------------------------

/// SRCU readers may be preempted and migrate inside their sections (the
/// kernel does both at every point there); updaters wait with
/// `synchronize_with(schedule)`, a wait that must run preemptible.
#[test]
fn srcu_torture() {
    static DOMAIN: Srcu = Srcu::new();
    static SLOTS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
    /// Which slot readers use; a slot being reclaimed holds `u64::MAX`.
    static CURRENT: AtomicUsize = AtomicUsize::new(0);
    bounded("srcu torture", || {
        let stop = AtomicBool::new(false);
        let errors = AtomicU64::new(0);
        let reads = AtomicU64::new(0);
        thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    while !stop.load(SeqCst) {
                        let guard = DOMAIN.read_lock();
                        let slot = CURRENT.load(SeqCst);
                        let seen = SLOTS[slot].load(SeqCst);
                        for _ in 0..8 {
                            // Library calls: points where the reader is
                            // preempted or moved.
                            let _ = rcu::read_lock_held();
                        }
                        if seen == u64::MAX || SLOTS[slot].load(SeqCst) != seen {
                            errors.fetch_add(1, SeqCst);
                        }
                        reads.fetch_add(1, SeqCst);
                        drop(guard);
                    }
                });
            }
            sc.spawn(|| {
                let _stop = StopOnDrop(&stop);
                let start = Instant::now();
                let mut round = 0u64;
                while start.elapsed() < RUN || round < 20 {
                    let old = CURRENT.load(SeqCst);
                    let new = (old + 1) % SLOTS.len();
                    SLOTS[new].store(round, SeqCst);
                    CURRENT.store(new, SeqCst);
                    if round % 2 == 0 {
                        DOMAIN.synchronize_with(hostile::schedule);
                    } else {
                        DOMAIN.cond_synchronize_with(DOMAIN.get_state(), hostile::schedule);
                    }
                    // Reclaimed: no reader that saw `old` is left.
                    SLOTS[old].store(u64::MAX, SeqCst);
                    round += 1;
                }
                stop.store(true, SeqCst);
            });
        });
        let errors = errors.load(SeqCst);
        assert_eq!(
            errors,
            0,
            "{errors} SRCU reads saw their slot reclaimed (seed {})",
            hostile::seed()
        );
        assert!(
            reads.load(SeqCst) > 0,
            "no reads: the torture proved nothing"
        );
    });
}
