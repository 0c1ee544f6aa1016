//! The hostile host kernel (feature `hostile`): every atomic operation and
//! fence of the library is a point where the kernel may preempt the task,
//! migrate it or interrupt it, as the [`Kernel`](crate::kernel::Kernel)
//! contract allows between any two instructions.
//!
//! Built with the feature, the atomics shim (`src/sync.rs`) wraps each
//! atomic type so that every operation first calls this module's point.
//! At a point the kernel draws from a seeded random schedule and, on a
//! thread that plays a CPU (it has read its CPU id):
//!
//! * **interrupts** it when its interrupts are enabled: the handlers a test
//!   registered with [`register_interrupt`] run between
//!   [`enter_interrupt`](super::enter_interrupt) and
//!   [`exit_interrupt`](super::exit_interrupt);
//! * **preempts** it when its preemption count is zero and interrupts are
//!   enabled: the context switch is a quiescent state for RCU, and the
//!   task gives its host core away (a yield, a short sleep, or now and
//!   then a sleep of milliseconds, long enough for other CPUs to run
//!   whole grace periods and lock hand-offs meanwhile: the few deep
//!   priority changes of PCT, Burckhardt et al., ASPLOS 2010);
//! * **migrates** it to a free CPU id under the same conditions: the CPU
//!   left goes offline to RCU (as when a host thread exits) and, if RCU
//!   watched the task's CPU, the new one comes online;
//! * runs an **idle CPU's** quiescent state (a CPU that runs no task goes
//!   round its idle loop), under the same conditions (the work runs on
//!   the running task's stack). Without it a grace period could end only
//!   through the scan that cleared the idle CPUs' bits, and every race
//!   against that scan would be hidden.
//!
//! The kernel checks its own contract at every point and panics on a
//! breach, naming the seed: never preempt with a preemption count above
//! zero or interrupts masked, never interrupt with interrupts masked, and
//! at every voluntary context switch
//! ([`Kernel::block`](crate::kernel::Kernel::block),
//! [`Kernel::yield_now`](crate::kernel::Kernel::yield_now)) a count of
//! zero with interrupts enabled (Linux's "scheduling while atomic"). In strict mode ([`set_strict`], `KSYNC_HOSTILE_STRICT=1`;
//! ksync's own suites) a preemption count that returns to zero with
//! interrupts masked is reported too: that preemption point is lost
//! (Linux's `spin_unlock_irqrestore` restores interrupts first for this
//! reason), though Linux allows it in general.
//!
//! # The seed
//!
//! `KSYNC_HOSTILE_SEED=N` in the environment fixes the seed; without it
//! the kernel takes one from the clock. It is printed once per process
//! (`ksync hostile: seed N`) and again with every panic. A thread's
//! decisions depend on the seed and on the order in which threads reached
//! their first point, so a run replays from its seed as far as the host
//! schedules the threads alike: run a failing seed a few times.
//! `KSYNC_HOSTILE=0` turns the mode off for a run; [`set_enabled`] does
//! the same for a stretch of a test.
//!
//! # Rates
//!
//! [`Rates`] gives each event's chance per point, in units of 1/65 536.
//! The defaults keep a suite's run time within a few times its normal
//! one; `KSYNC_HOSTILE_RATES=interrupt,preempt,migrate,deep,idle,boost` overrides
//! them at start, [`set_rates`] at any time.

use std::boxed::Box;
use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::backend;
use super::interrupts;

/// Each event's chance per point, in units of 1/65 536.
///
/// ```
/// use ksync::host::hostile::{self, Rates};
///
/// // A test of interrupt handlers: interrupts ten times as often, no
/// // migrations (the test pins work to CPUs).
/// hostile::set_rates(Rates { interrupt: 1280, migrate: 0, ..Rates::DEFAULT });
/// assert_eq!(hostile::rates().migrate, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    /// An interrupt (the registered handlers run), when interrupts are on.
    pub interrupt: u32,
    /// A preemption (a quiescent state, then a yield or a short sleep),
    /// when the task is preemptible.
    pub preempt: u32,
    /// A migration to another free CPU id, when the task is preemptible.
    pub migrate: u32,
    /// Of the preemptions, the share (also per 65 536) that sleep for
    /// milliseconds instead of microseconds.
    pub deep: u32,
    /// A CPU that runs no task (its idle loop) passes a quiescent state:
    /// an interrupt there, or its idle loop going round. Drawn when the
    /// running task is preemptible (the kernel's work runs on its stack).
    pub idle: u32,
    /// The chance of a deep preemption at a site never hit before; it
    /// falls as the site is hit (see the module docs).
    pub boost: u32,
}

impl Rates {
    /// The defaults: an interrupt every ~500 points, a preemption every
    /// ~1000, a migration every ~4000, one preemption in 64 deep.
    pub const DEFAULT: Rates = Rates {
        interrupt: 128,
        preempt: 64,
        migrate: 16,
        deep: 1024,
        idle: 64,
        boost: 4096,
    };
}

/// 0: not yet read from the environment; 1: off; 2: on.
static MODE: AtomicU32 = AtomicU32::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static RATE_INTERRUPT: AtomicU32 = AtomicU32::new(Rates::DEFAULT.interrupt);
static RATE_PREEMPT: AtomicU32 = AtomicU32::new(Rates::DEFAULT.preempt);
static RATE_MIGRATE: AtomicU32 = AtomicU32::new(Rates::DEFAULT.migrate);
static RATE_DEEP: AtomicU32 = AtomicU32::new(Rates::DEFAULT.deep);
static RATE_IDLE: AtomicU32 = AtomicU32::new(Rates::DEFAULT.idle);
static RATE_BOOST: AtomicU32 = AtomicU32::new(Rates::DEFAULT.boost);
/// Threads that reached their first point (each one's stream of draws).
static THREADS: AtomicU64 = AtomicU64::new(0);
/// Events delivered, for [`stats`].
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
static PREEMPTIONS: AtomicU64 = AtomicU64::new(0);
static MIGRATIONS: AtomicU64 = AtomicU64::new(0);
static INIT: Once = Once::new();

/// Interrupt handlers: `fn()` pointers as addresses, 0 for a free slot.
const HANDLERS: usize = 16;
static HANDLER: [AtomicUsize; HANDLERS] = [const { AtomicUsize::new(0) }; HANDLERS];

const MODE_OFF: u32 = 1;
const MODE_ON: u32 = 2;

std::thread_local! {
    /// This thread's random state (0: not drawn yet).
    static RNG: Cell<u64> = const { Cell::new(0) };
    /// Inside the kernel's own action at a point (a handler, a migration):
    /// the library's atomics there are not points.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// [`set_enabled`]`(false)` on this thread.
    static PAUSED: Cell<bool> = const { Cell::new(false) };
}

/// Reads the environment once: whether the mode is on, the seed, rates.
#[cold]
fn init() {
    INIT.call_once(|| {
        let on = std::env::var("KSYNC_HOSTILE").map_or(true, |v| v != "0");
        let seed = std::env::var("KSYNC_HOSTILE_SEED")
            .ok()
            .map(|s| {
                s.trim().parse::<u64>().unwrap_or_else(|_| {
                    panic!("ksync hostile: KSYNC_HOSTILE_SEED={s} is not a number")
                })
            })
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64);
                splitmix(t ^ u64::from(std::process::id()))
            });
        SEED.store(seed, Ordering::Relaxed);
        if std::env::var("KSYNC_HOSTILE_STRICT").is_ok_and(|v| v != "0") {
            set_strict(true);
        }
        if let Ok(rates) = std::env::var("KSYNC_HOSTILE_RATES") {
            let v: std::vec::Vec<u32> = rates
                .split(',')
                .map(|x| {
                    x.trim().parse().unwrap_or_else(|_| {
                        panic!("ksync hostile: KSYNC_HOSTILE_RATES={rates}: want four numbers")
                    })
                })
                .collect();
            assert!(
                v.len() == 6,
                "ksync hostile: KSYNC_HOSTILE_RATES={rates}: want interrupt,preempt,migrate,deep,idle,boost"
            );
            set_rates(Rates {
                interrupt: v[0],
                preempt: v[1],
                migrate: v[2],
                deep: v[3],
                idle: v[4],
                boost: v[5],
            });
        }
        if on {
            std::eprintln!(
                "ksync hostile: seed {seed} (replay with KSYNC_HOSTILE_SEED={seed})"
            );
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                previous(info);
                std::eprintln!(
                    "ksync hostile: the panic above ran with seed {seed} \
                     (replay with KSYNC_HOSTILE_SEED={seed})"
                );
            }));
        }
        MODE.store(if on { MODE_ON } else { MODE_OFF }, Ordering::Relaxed);
        if on {
            std::thread::Builder::new()
                .name("ksync-hostile-idle".into())
                .spawn(idle_loops)
                .expect("ksync hostile: cannot start the idle loops' thread");
        }
    });
}

/// The idle loops of the CPUs that run no task, on a thread of their own
/// (which holds a CPU id, its own idle CPU): every few microseconds each
/// free CPU passes a quiescent state, as an idle CPU's loop goes round,
/// whatever the tasks' schedule does meanwhile.
fn idle_loops() {
    set_enabled(false);
    let mut r = SEED.load(Ordering::Relaxed) | 1;
    loop {
        let own = crate::kernel::cpu_id();
        crate::rcu::kernel_idle_cpu_report(own);
        backend::for_free_cpus(crate::rcu::kernel_idle_cpu_report);
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        std::thread::sleep(Duration::from_micros(5 + r % 50));
    }
}

/// This run's seed.
///
/// ```
/// use ksync::host::hostile;
///
/// // Name the seed in a test's own failure message, for a replay with
/// // `KSYNC_HOSTILE_SEED=N`.
/// let seed = hostile::seed();
/// assert_eq!(seed, hostile::seed(), "one seed per process");
/// ```
pub fn seed() -> u64 {
    init();
    SEED.load(Ordering::Relaxed)
}

/// Whether the hostile mode is on for this process (not `KSYNC_HOSTILE=0`).
///
/// ```
/// use ksync::host::hostile;
///
/// // A test that checks the schedule was hostile only when it could be
/// // (`KSYNC_HOSTILE=0` turns the mode off for a run).
/// if hostile::is_on() {
///     println!("hostile run, seed {}", hostile::seed());
/// }
/// ```
pub fn is_on() -> bool {
    init();
    MODE.load(Ordering::Relaxed) == MODE_ON
}

/// Turns the points off (`false`) or on again for the calling thread: for a
/// test's set-up, or a stretch that measures something.
///
/// ```
/// use ksync::host::hostile;
/// use ksync::spinlock::TicketMutex;
///
/// // Set-up that the test does not mean to stress: no points on this thread.
/// hostile::set_enabled(false);
/// let table = TicketMutex::new(vec![0u32; 16]);
/// table.lock().fill(7);
/// hostile::set_enabled(true); // the test proper
/// assert_eq!(table.lock()[3], 7);
/// ```
pub fn set_enabled(on: bool) {
    PAUSED.with(|p| p.set(!on));
}

/// Sets each event's chance per point, process-wide.
///
/// ```
/// use ksync::host::hostile::{self, Rates};
///
/// // Preempt at one point in 64: a short run still sees many switches.
/// hostile::set_rates(Rates { preempt: 1024, ..hostile::rates() });
/// assert_eq!(hostile::rates().preempt, 1024);
/// ```
pub fn set_rates(rates: Rates) {
    RATE_INTERRUPT.store(rates.interrupt, Ordering::Relaxed);
    RATE_PREEMPT.store(rates.preempt, Ordering::Relaxed);
    RATE_MIGRATE.store(rates.migrate, Ordering::Relaxed);
    RATE_DEEP.store(rates.deep, Ordering::Relaxed);
    RATE_IDLE.store(rates.idle, Ordering::Relaxed);
    RATE_BOOST.store(rates.boost, Ordering::Relaxed);
}

/// The rates in force.
///
/// ```
/// use ksync::host::hostile::{self, Rates};
///
/// let saved = hostile::rates();
/// hostile::set_rates(Rates { interrupt: 0, ..saved }); // a stretch without interrupts
/// // ...
/// hostile::set_rates(saved);
/// # assert_eq!(hostile::rates(), saved);
/// ```
pub fn rates() -> Rates {
    Rates {
        interrupt: RATE_INTERRUPT.load(Ordering::Relaxed),
        preempt: RATE_PREEMPT.load(Ordering::Relaxed),
        migrate: RATE_MIGRATE.load(Ordering::Relaxed),
        deep: RATE_DEEP.load(Ordering::Relaxed),
        idle: RATE_IDLE.load(Ordering::Relaxed),
        boost: RATE_BOOST.load(Ordering::Relaxed),
    }
}

/// How many interrupts, preemptions and migrations the kernel has made so
/// far in this process (a test can check its run was hostile at all).
///
/// ```
/// use ksync::host::hostile;
/// use ksync::spinlock::TicketMutex;
///
/// let lock = TicketMutex::new(0u64);
/// for _ in 0..100 {
///     *lock.lock() += 1; // every atomic of the lock is a point
/// }
/// let (interrupts, preemptions, migrations) = hostile::stats();
/// println!("{interrupts} interrupts, {preemptions} preemptions, {migrations} migrations");
/// ```
pub fn stats() -> (u64, u64, u64) {
    (
        INTERRUPTS.load(Ordering::Relaxed),
        PREEMPTIONS.load(Ordering::Relaxed),
        MIGRATIONS.load(Ordering::Relaxed),
    )
}

/// A registered interrupt handler; unregisters it when dropped.
///
/// ```
/// use ksync::host::hostile;
///
/// fn timer() { /* an interrupt handler's work */ }
/// {
///     let _handler = hostile::register_interrupt(timer);
///     // ... the test: `timer` may run at any of its atomics ...
/// } // unregistered here
/// ```
#[derive(Debug)]
#[must_use = "the handler is unregistered when this drops"]
pub struct InterruptHandler(usize);

impl Drop for InterruptHandler {
    fn drop(&mut self) {
        HANDLER[self.0].store(0, Ordering::Release);
    }
}

/// Registers `handler` as an interrupt handler: the kernel runs it (with
/// the other registered ones) on whichever CPU it interrupts, inside
/// [`enter_interrupt`](super::enter_interrupt) and
/// [`exit_interrupt`](super::exit_interrupt). A handler does what an
/// interrupt handler may: report a quiescent state if
/// [`interrupted_preemptible`] says so, enter or leave idle when no read
/// section is open, `call_rcu`, take an IRQ-safe lock, wake a waiter.
/// Handlers are process-wide (tests of one binary share them).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::host::hostile;
/// use ksync::spinlock::IrqTicketMutex;
///
/// static JIFFIES: IrqTicketMutex<u64> = IrqTicketMutex::new(0);
/// static TICKS: AtomicU64 = AtomicU64::new(0);
///
/// // The handler takes the IRQ-safe lock: never while this CPU holds it.
/// fn timer() {
///     *JIFFIES.lock() += 1;
///     TICKS.fetch_add(1, Relaxed);
/// }
/// let _timer = hostile::register_interrupt(timer);
/// for _ in 0..100 {
///     *JIFFIES.lock() += 1;
/// }
/// assert_eq!(*JIFFIES.lock(), 100 + TICKS.load(Relaxed));
/// ```
///
/// # Panics
/// When 16 handlers are registered already.
pub fn register_interrupt(handler: fn()) -> InterruptHandler {
    for (i, slot) in HANDLER.iter().enumerate() {
        if slot
            .compare_exchange(0, handler as usize, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return InterruptHandler(i);
        }
    }
    panic!("ksync hostile: more than {HANDLERS} interrupt handlers registered");
}

std::thread_local! {
    /// While an interrupt runs: the interrupted context's preemption count.
    static INTERRUPTED_COUNT: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// Inside a handler: whether the interrupted context could have been
/// preempted (its preemption count was zero), so that a tick may report
/// a quiescent state for it, as Linux's scheduler tick does for RCU
/// without preemptible read sections.
///
/// ```
/// use ksync::host::hostile;
///
/// // A handler that, like Linux's scheduler tick, counts a quiescent
/// // state only for a context it could have preempted.
/// fn tick_handler() {
///     if hostile::interrupted_preemptible() {
///         // ... the interrupted task was in no read section ...
///     }
/// }
/// let _tick = hostile::register_interrupt(tick_handler);
/// ```
pub fn interrupted_preemptible() -> bool {
    INTERRUPTED_COUNT.with(Cell::get) == 0
}

/// The kernel's tick as an interrupt handler: a quiescent state when the
/// interrupted context was preemptible (its preemption count zero).
///
/// ```
/// use ksync::host::hostile;
/// use ksync::rcu;
///
/// // The scheduler tick as an interrupt: grace periods end even while the
/// // test's threads never pass a quiescent state of their own.
/// let _tick = hostile::register_interrupt(hostile::tick);
/// let _reader = rcu::read_lock();
/// // ... a long read section: ticks here report nothing (not preemptible) ...
/// ```
pub fn tick() {
    if interrupted_preemptible() {
        crate::rcu::kernel_quiescent_state();
    }
}

/// A voluntary context switch (Linux's `schedule()`), for the waits a
/// test hands to ksync (`Srcu::synchronize_with`, say): the kernel checks
/// that the task may switch (preemption count zero, interrupts enabled:
/// "scheduling while atomic" otherwise), reports the switch to RCU as a
/// quiescent state and gives the host core away.
///
/// ```
/// use ksync::host::hostile;
/// use ksync::rcu::srcu::Srcu;
///
/// static SRCU: Srcu = Srcu::new();
/// // The test's wait for an SRCU grace period: a voluntary switch each round.
/// SRCU.synchronize_with(hostile::schedule);
/// ```
pub fn schedule() {
    check_switch("hostile::schedule");
    if backend::preempt_count() == 0 && !interrupts::irqs_disabled() && !backend::masked_by_ksync()
    {
        crate::rcu::kernel_quiescent_state();
    }
    std::thread::yield_now();
}

/// The splitmix64 step: spreads a seed over 64 bits.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The next draw of this thread's stream (xorshift64*).
fn draw() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            let n = THREADS.fetch_add(1, Ordering::Relaxed);
            x = splitmix(SEED.load(Ordering::Relaxed) ^ splitmix(n)) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A point: called by the atomics shim before every atomic operation and
/// fence of the library.
#[inline]
#[track_caller]
pub(crate) fn point() {
    if MODE.load(Ordering::Relaxed) != MODE_OFF {
        point_slow(core::panic::Location::caller());
    }
}

/// Times each site (a source location of the library) has been a point,
/// by a hash of its address: the chance of a deep preemption at a site
/// falls as it is hit, so that rare sites (a grace period's scan, a
/// lock's hand-off) see as many deep preemptions as the hot paths.
const SITES: usize = 4096;
static SITE_HITS: [AtomicU32; SITES] = [const { AtomicU32::new(0) }; SITES];

/// The extra chance (per 65 536) of a deep preemption at a site hit
/// `hits` times before: 1/16 at first, halved by 16 hits, then falling
/// as 1/hits.
fn site_boost(hits: u32) -> u32 {
    RATE_BOOST.load(Ordering::Relaxed).saturating_mul(16) / (16 + hits)
}

#[cold]
#[inline(never)]
fn point_slow(site: &'static core::panic::Location<'static>) {
    if MODE.load(Ordering::Relaxed) == 0 {
        init();
        if MODE.load(Ordering::Relaxed) != MODE_ON {
            return;
        }
    }
    // Not on a thread that is tearing down, or inside the kernel's own
    // action, or paused, or not (yet) a CPU.
    let Ok(false) = BUSY.try_with(Cell::get) else {
        return;
    };
    if PAUSED.try_with(Cell::get) != Ok(false) || !backend::is_cpu() {
        return;
    }
    let r = draw();
    let roll = (r & 0xFFFF) as u32;
    let irqs_off = interrupts::irqs_disabled() || backend::masked_by_ksync();
    let count = backend::preempt_count();
    let slot = (core::ptr::from_ref(site) as usize >> 3) % SITES;
    let hits = SITE_HITS[slot].fetch_add(1, Ordering::Relaxed);
    if ((r >> 40) & 0xFFFF) < u64::from(site_boost(hits))
        && count == 0
        && !irqs_off
        && !interrupts::in_interrupt()
    {
        // A deep preemption at a rarely hit site.
        if std::env::var_os("KSYNC_HOSTILE_TRACE").is_some() {
            std::eprintln!("deep at {site} (hit {hits})");
        }
        busy(|| preempt_now(true, r >> 16));
        return;
    }
    let interrupt = RATE_INTERRUPT.load(Ordering::Relaxed);
    if roll < interrupt {
        if !irqs_off {
            busy(|| deliver_interrupt(count));
        }
        return;
    }
    if count != 0 || irqs_off || interrupts::in_interrupt() {
        return;
    }
    let roll = roll - interrupt;
    let migrate = RATE_MIGRATE.load(Ordering::Relaxed);
    if roll < migrate {
        busy(migrate_now);
        return;
    }
    let roll = roll - migrate;
    let preempt = RATE_PREEMPT.load(Ordering::Relaxed);
    if roll < preempt {
        let deep = ((r >> 16) & 0xFFFF) < u64::from(RATE_DEEP.load(Ordering::Relaxed));
        busy(|| preempt_now(deep, r >> 32));
    } else if roll - preempt < RATE_IDLE.load(Ordering::Relaxed) {
        busy(|| idle_cpu_event(r >> 16));
    }
}

/// A CPU that runs no task passes a quiescent state (its idle loop): a
/// random free CPU id, reported while the id table is locked, so that no
/// task can move there meanwhile.
fn idle_cpu_event(r: u64) {
    backend::with_free_cpu(r, crate::rcu::kernel_idle_cpu_report);
}

/// Runs the kernel's own action with points off.
/// Runs `f` with the schedule paused on this thread (no point in it acts),
/// for the host's own reads of shim atomics.
pub(super) fn paused<T>(f: impl FnOnce() -> T) -> T {
    let Ok(was) = BUSY.try_with(|b| b.replace(true)) else {
        return f();
    };
    let out = f();
    let _ = BUSY.try_with(|b| b.set(was));
    out
}

fn busy(f: impl FnOnce()) {
    BUSY.with(|b| b.set(true));
    f();
    BUSY.with(|b| b.set(false));
}

fn deliver_interrupt(count: u32) {
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    let outer = INTERRUPTED_COUNT.with(|c| c.replace(count));
    super::enter_interrupt();
    for slot in &HANDLER {
        let h = slot.load(Ordering::Acquire);
        if h != 0 {
            // SAFETY: the slot holds a `fn()` stored by
            // `register_interrupt` (fn pointers and usize have the same
            // size on every host this runs on).
            let handler: fn() = unsafe { core::mem::transmute::<usize, fn()>(h) };
            handler();
        }
    }
    super::exit_interrupt();
    INTERRUPTED_COUNT.with(|c| c.set(outer));
}

/// The context switch: a quiescent state, then the host core is given
/// away for a while: milliseconds if `deep`, else a yield or a few
/// microseconds (`r`: random bits for how long).
fn preempt_now(deep: bool, r: u64) {
    contract_preemptible("a preemption");
    PREEMPTIONS.fetch_add(1, Ordering::Relaxed);
    if deep {
        // Off its CPU for long: the CPU is idle to RCU meanwhile (another
        // task or the idle loop runs there), so grace periods go on.
        let watched = crate::rcu::kernel_switch_out();
        deep_sleep(r);
        crate::rcu::kernel_switch_in(watched);
        return;
    }
    crate::rcu::kernel_quiescent_state();
    if r % 4 == 0 {
        std::thread::sleep(Duration::from_micros(1 + (r >> 2) % 50));
    } else {
        std::thread::yield_now();
    }
}

/// A deep preemption's wait (`r`: random bits).
fn deep_sleep(r: u64) {
    // Until the other CPUs have run two whole grace periods (or a few
    // milliseconds more than that took): PCT's priority change, by the
    // progress the others make rather than by the clock, so that a
    // loaded host cannot shrink it.
    // Half of them resume while a later grace period is running (a
    // task that acts on a stale view of the one it saw), half after
    // two have ended.
    let seq = crate::rcu::gp_seq();
    let start = std::time::Instant::now();
    let bound = Duration::from_micros(2000 + (r >> 1) % 18_000);
    let resume = |now: usize| {
        let passed = now.wrapping_sub(seq);
        if r & 1 == 0 {
            passed >= 4 && now & 3 != 0
        } else {
            passed >= 8
        }
    };
    while !resume(crate::rcu::gp_seq()) && start.elapsed() < bound {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Moves the task to a random free CPU id, if there is one.
fn migrate_now() {
    contract_preemptible("a migration");
    // The new id first, reserved: the old one stays ours until the task
    // has left it (RCU's state for it is the leaving task's to change).
    let Some((old, new)) = backend::reserve_free_cpu(draw()) else {
        return;
    };
    MIGRATIONS.fetch_add(1, Ordering::Relaxed);
    // The CPU left runs nothing: offline to RCU, as a thread's exit makes
    // it (a quiescent state; its callbacks go to whoever runs them).
    let watched = crate::rcu::kernel_cpu_leave(old);
    backend::move_to_reserved(old, new);
    if watched {
        crate::rcu::cpu_online();
    }
}

/// The kernel's own contract at a preemption or migration.
fn contract_preemptible(what: &str) {
    let count = backend::preempt_count();
    if count != 0 || interrupts::irqs_disabled() || interrupts::in_interrupt() {
        breach(&std::format!(
            "{what} with preemption count {count}, interrupts {}, in interrupt: {}",
            if interrupts::irqs_disabled() {
                "masked"
            } else {
                "enabled"
            },
            interrupts::in_interrupt()
        ));
    }
}

/// A voluntary context switch (`what`: `block` or `yield_now`): the task
/// must be preemptible, Linux's "scheduling while atomic" otherwise.
pub(super) fn check_switch(what: &str) {
    if MODE.load(Ordering::Relaxed) != MODE_ON || PAUSED.try_with(Cell::get) != Ok(false) {
        return;
    }
    let count = backend::preempt_count();
    let masked = interrupts::irqs_disabled() || backend::masked_by_ksync();
    if count != 0 || masked || interrupts::in_interrupt() {
        breach(&std::format!(
            "{what} (a context switch) with preemption count {count}, interrupts {}, \
             in interrupt: {} (scheduling while atomic)",
            if masked { "masked" } else { "enabled" },
            interrupts::in_interrupt()
        ));
    }
}

/// Strict mode (`KSYNC_HOSTILE_STRICT=1`, or [`set_strict`]): also a
/// breach when a preemption count returns to zero with interrupts masked.
static STRICT: AtomicU32 = AtomicU32::new(0);

/// Strict mode on or off, process-wide: a preemption count that returns to
/// zero while the masked section that was open when it left zero is still
/// open (outside a handler) is then a breach: a guard that masked
/// interrupts, then disabled preemption, and enables preemption first.
/// Linux allows the pattern in general (the preemption waits for the next
/// point: `local_irq_save` around a per-CPU access is fine), so it is off
/// by default; ksync's own suites run with it on, because ksync's
/// IRQ-saving locks must restore interrupts before they enable preemption
/// (`spin_unlock_irqrestore`'s order) and must not lose that point.
///
/// ```
/// use ksync::host::hostile;
/// use ksync::spinlock::IrqTicketMutex;
///
/// // What ksync's own suites check: an IRQ-saving lock restores interrupts
/// // before it enables preemption (`spin_unlock_irqrestore`'s order).
/// hostile::set_strict(true);
/// let lock = IrqTicketMutex::new(0);
/// *lock.lock() += 1;
/// ```
pub fn set_strict(on: bool) {
    STRICT.store(u32::from(on), Ordering::Relaxed);
}

/// The preemption count returned to zero: with interrupts masked, that
/// preemption point is lost (a breach in strict mode).
#[inline]
pub(super) fn check_enable_point(open_depth: u32) {
    // Lost only if a masked section open when the preemption section
    // opened is still open now: the section nests inside it, and whoever
    // opened both (one lock's guard: mask, then disable preemption) closes
    // preemption first. A preemption section opened inside a deeper
    // masked section that has already closed (an IRQ-saving lock taken
    // inside the caller's own `local_irq_save`) released in the right
    // order; the outer section is the caller's.
    if MODE.load(Ordering::Relaxed) == MODE_ON
        && STRICT.load(Ordering::Relaxed) != 0
        && open_depth > 0
        && interrupts::mask_depth() >= open_depth
        && interrupts::irqs_disabled()
        && !interrupts::in_interrupt()
        && PAUSED.try_with(Cell::get) == Ok(false)
    {
        breach(
            "the preemption count returned to zero with interrupts masked: the preemption \
             point is lost (restore interrupts before enabling preemption)",
        );
    }
}

#[cold]
fn breach(what: &str) -> ! {
    let seed = SEED.load(Ordering::Relaxed);
    panic!("ksync hostile: contract breach: {what} (seed {seed})");
}

/// Marks the calling thread as tearing down: no more points on it.
pub(super) fn thread_exiting() {
    let _ = BUSY.try_with(|b| b.set(true));
    let _ = PAUSED.try_with(|p| p.set(true));
}

// ---- the atomics the shim hands out -----------------------------------------

/// Atomic types whose every operation is first a point.
pub(crate) mod atomics {
    use super::point;
    use core::sync::atomic::{self as a, Ordering};

    macro_rules! common {
        ($name:ident $(<$g:ident>)?, $inner:ty, $value:ty) => {
            /// A point before every operation of the core atomic it wraps.
            #[repr(transparent)]
            #[derive(Debug, Default)]
            pub(crate) struct $name $(<$g>)? ($inner);

            #[allow(dead_code, clippy::missing_const_for_fn)]
            impl $(<$g>)? $name $(<$g>)? {
                #[inline]
                pub(crate) const fn new(v: $value) -> Self {
                    Self(<$inner>::new(v))
                }
                #[inline]
                #[track_caller]
                pub(crate) fn load(&self, o: Ordering) -> $value {
                    point();
                    self.0.load(o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn store(&self, v: $value, o: Ordering) {
                    point();
                    self.0.store(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn swap(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.swap(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn compare_exchange(
                    &self,
                    c: $value,
                    n: $value,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$value, $value> {
                    point();
                    self.0.compare_exchange(c, n, s, f)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn compare_exchange_weak(
                    &self,
                    c: $value,
                    n: $value,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$value, $value> {
                    point();
                    self.0.compare_exchange_weak(c, n, s, f)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_update<F: FnMut($value) -> Option<$value>>(
                    &self,
                    s: Ordering,
                    f: Ordering,
                    mut g: F,
                ) -> Result<$value, $value> {
                    // One point per attempt, as the loop it stands for.
                    self.0.fetch_update(s, f, |v| {
                        point();
                        g(v)
                    })
                }
                #[inline]
                #[track_caller]
                pub(crate) fn get_mut(&mut self) -> &mut $value {
                    self.0.get_mut()
                }
                #[inline]
                #[track_caller]
                pub(crate) fn into_inner(self) -> $value {
                    self.0.into_inner()
                }
                #[inline]
                pub(crate) const fn as_ptr(&self) -> *mut $value {
                    self.0.as_ptr()
                }
                /// The core atomic's `from_ptr`, as this wrapper.
                ///
                /// # Safety
                /// As [`core`]'s `from_ptr`: `p` is aligned for the atomic,
                /// valid for `'a`, and only accessed atomically meanwhile.
                #[inline]
                pub(crate) unsafe fn from_ptr<'a>(p: *mut $value) -> &'a Self {
                    // SAFETY: the caller's contract is `from_ptr`'s; `Self`
                    // is `repr(transparent)` over the core atomic, so a
                    // reference to one is a reference to the other.
                    unsafe { &*core::ptr::from_ref(<$inner>::from_ptr(p)).cast::<Self>() }
                }
            }
        };
    }

    macro_rules! bits {
        ($name:ident, $value:ty) => {
            #[allow(dead_code)]
            impl $name {
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_and(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_and(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_or(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_or(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_xor(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_xor(v, o)
                }
            }
        };
    }

    macro_rules! int {
        ($name:ident, $inner:ty, $value:ty) => {
            common!($name, $inner, $value);
            bits!($name, $value);
            #[allow(dead_code)]
            impl $name {
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_add(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_add(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_sub(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_sub(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_max(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_max(v, o)
                }
                #[inline]
                #[track_caller]
                pub(crate) fn fetch_min(&self, v: $value, o: Ordering) -> $value {
                    point();
                    self.0.fetch_min(v, o)
                }
            }
        };
    }

    common!(AtomicBool, a::AtomicBool, bool);
    bits!(AtomicBool, bool);
    int!(AtomicU16, a::AtomicU16, u16);
    int!(AtomicI32, a::AtomicI32, i32);
    int!(AtomicU32, a::AtomicU32, u32);
    int!(AtomicUsize, a::AtomicUsize, usize);
    int!(AtomicI64, a::AtomicI64, i64);
    int!(AtomicU64, a::AtomicU64, u64);

    common!(AtomicPtr<T>, a::AtomicPtr<T>, *mut T);

    /// A point, then the fence.
    #[inline]
    #[track_caller]
    pub(crate) fn fence(o: Ordering) {
        point();
        a::fence(o)
    }
}
