//! One-time initialisation torture: every CPU races `call_once` on fresh
//! [`Once`] values (and forces fresh [`Lazy`] values), and every
//! initialiser counts its runs.
//!
//! # The race
//!
//! A pool of [`SLOTS`] fresh `Once<u64>` and as many `Lazy<u64>` is used
//! slot by slot: a shared cursor names the slot of the moment; every CPU
//! reads it, counts itself in at that slot and waits (briefly:
//! [`MEET_POLLS`]) for the other CPUs to be there too, then calls
//! `call_once` on the slot's `Once` and forces its `Lazy`, then moves the
//! cursor on (a compare-exchange: whoever comes first). So the CPUs arrive
//! at each fresh `Once` together and most slots are a race between
//! several initialisers, the losers waiting for the winner; each
//! initialiser stretches its run with busy work, widening the race. When the pool is used up the CPUs meet at a barrier, CPU 0
//! checks the round and makes the pool fresh again (nobody touches it
//! meanwhile), and the next round starts, until the budget ends.
//!
//! # Checks
//!
//! * A `Once` initialiser counts its runs in `runs[slot]`: a second run
//!   fails at once ("an initialiser ran twice").
//! * Every initialiser returns a fresh ticket, and every caller records
//!   the value it got in `seen[slot]` (the first caller) or compares it
//!   with the recorded one: two callers given different values fail.
//! * A caller that got a value finds `runs[slot]` already at 1 (the
//!   initialiser's work happens-before every `call_once` return).
//! * `Lazy`: the same value check; at the end of a round the `Lazy`
//!   initialisers must have run exactly once per slot used.
//!
//! The timer interrupt does not touch the pool (CPU 0 rebuilds it between
//! rounds, and a handler calling `call_once` on a `Once` its own CPU is
//! initialising panics by design, `ksync::once`'s docs); it counts itself.
//!
//! # The control
//!
//! [`CheckFirstOnce`]: a "once" that checks a done flag, runs the
//! initialiser if it was not set, then stores the value and sets it: two
//! CPUs that both find it unset both initialise.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use ksync::{Lazy, Once};

use super::busy_work;
use crate::harness::{Ctx, Info, Kind, Suite, Summary, runner};
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// `Once` values (and `Lazy` values) per round.
pub const SLOTS: usize = 512;
/// Busy work inside an initialiser: the window in which others arrive.
const INIT_WORK: u32 = 1024;
/// How long (polls) a CPU that reached a slot waits for the others to
/// reach it too before it calls `call_once` (a CPU the host does not run
/// is not waited for).
const MEET_POLLS: u32 = 4096;

/// A one-time cell of `u64` under test.
pub trait OnceCell: Sync {
    /// A fresh cell.
    const FRESH: Self;
    /// Whether the suite also forces the pool's `Lazy` values (the real
    /// suite: the control's bug is in its own cell).
    const LAZY: bool;
    /// The value, made by `f` if nobody has made it.
    fn call_once(&self, f: impl FnOnce() -> u64) -> u64;
}

impl OnceCell for Once<u64> {
    #[allow(clippy::declare_interior_mutable_const)]
    const FRESH: Self = Once::new();
    const LAZY: bool = true;
    fn call_once(&self, f: impl FnOnce() -> u64) -> u64 {
        *Once::call_once(self, f)
    }
}

/// The control: check, then initialise, then set.
pub struct CheckFirstOnce {
    done: AtomicBool,
    value: AtomicU64,
}

impl OnceCell for CheckFirstOnce {
    #[allow(clippy::declare_interior_mutable_const)]
    const FRESH: Self = Self {
        done: AtomicBool::new(false),
        value: AtomicU64::new(0),
    };
    const LAZY: bool = false;
    fn call_once(&self, f: impl FnOnce() -> u64) -> u64 {
        // Acquire pairs with the Release below: a caller that sees `done`
        // sees the value.
        if self.done.load(Ordering::Acquire) {
            return self.value.load(Ordering::Relaxed);
        }
        // The bug: nothing claims the cell between the check and the set.
        let v = f();
        self.value.store(v, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
        v
    }
}

/// The `Lazy` values' initialiser: a fresh ticket, counted.
fn lazy_init() -> u64 {
    // Relaxed: a count and a ticket source; `Lazy` orders the value.
    LAZY_RUNS.fetch_add(1, Ordering::Relaxed);
    busy_work(INIT_WORK);
    TICKETS.fetch_add(1, Ordering::Relaxed) + 1
}

/// `Lazy` initialiser runs (the real suite's; only one suite runs at a
/// time).
static LAZY_RUNS: AtomicU64 = AtomicU64::new(0);
/// The source of the values initialisers return (never 0).
static TICKETS: AtomicU64 = AtomicU64::new(0);

/// The pool: rebuilt by CPU 0 between rounds, shared by all during one.
struct Pool<O> {
    once: UnsafeCell<[O; SLOTS]>,
    lazy: UnsafeCell<[Lazy<u64>; SLOTS]>,
}

// SAFETY: during a round every CPU only takes `&` of the cells (which are
// `Sync`); `rebuild` writes them only between two barriers at which every
// other CPU waits (see `OnceTorture::run`).
unsafe impl<O: Sync> Sync for Pool<O> {}

impl<O: OnceCell> Pool<O> {
    const fn new() -> Self {
        Self {
            once: UnsafeCell::new([const { O::FRESH }; SLOTS]),
            lazy: UnsafeCell::new([const { Lazy::new(lazy_init as fn() -> u64) }; SLOTS]),
        }
    }

    fn once(&self, slot: usize) -> &O {
        // SAFETY: shared access during a round (see the `Sync` impl).
        unsafe { &(*self.once.get())[slot] }
    }

    fn lazy(&self, slot: usize) -> &Lazy<u64> {
        // SAFETY: as in `once`.
        unsafe { &(*self.lazy.get())[slot] }
    }

    /// Makes every cell fresh.
    ///
    /// # Safety
    /// Nobody else uses the pool meanwhile, and no reference from
    /// [`once`](Self::once) or [`lazy`](Self::lazy) is alive.
    unsafe fn rebuild(&self) {
        for slot in 0..SLOTS {
            // SAFETY: exclusive access (the caller's contract); the old
            // values hold only `u64`s, so overwriting without dropping
            // leaks nothing.
            unsafe {
                self.once.get().cast::<O>().add(slot).write(O::FRESH);
                self.lazy
                    .get()
                    .cast::<Lazy<u64>>()
                    .add(slot)
                    .write(Lazy::new(lazy_init as fn() -> u64));
            }
        }
    }
}

/// The suite over a one-time cell `O`.
pub struct OnceTorture<O: 'static> {
    info: Info,
    pool: Pool<O>,
    /// The slot of the moment.
    cursor: AtomicUsize,
    /// Per slot: runs of its `Once` initialiser.
    runs: [AtomicU32; SLOTS],
    /// Per slot: CPUs that reached it.
    arrived: [AtomicU32; SLOTS],
    /// Per slot: the value the first caller of its `Once` got (0: none).
    seen: [AtomicU64; SLOTS],
    /// Per slot: the same for its `Lazy`.
    lazy_seen: [AtomicU64; SLOTS],
    barrier: Barrier,
    go_on: AtomicBool,
    /// When the last round may start (CPU 0's clock).
    end: AtomicU64,
    rounds: AtomicU64,
    inits: Counters,
    calls: Counters,
    irqs: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TORTURE, &CONTROL];

/// ksync's `Once` and `Lazy`.
pub static TORTURE: OnceTorture<Once<u64>> = OnceTorture::new(Info::new("once", Kind::Test, 1000));
/// The control: a check-first once.
pub static CONTROL: OnceTorture<CheckFirstOnce> =
    OnceTorture::new(Info::new("once-checkfirst", Kind::Control, 1000));

impl<O: OnceCell> OnceTorture<O> {
    const fn new(info: Info) -> Self {
        Self {
            info,
            pool: Pool::new(),
            cursor: AtomicUsize::new(0),
            runs: [const { AtomicU32::new(0) }; SLOTS],
            arrived: [const { AtomicU32::new(0) }; SLOTS],
            seen: [const { AtomicU64::new(0) }; SLOTS],
            lazy_seen: [const { AtomicU64::new(0) }; SLOTS],
            barrier: Barrier::new(),
            go_on: AtomicBool::new(false),
            end: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            inits: Counters::new(),
            calls: Counters::new(),
            irqs: Counters::new(),
        }
    }

    fn meet(&self, ctx: &Ctx) {
        match runner::threads() {
            1 => self.barrier.wait(ctx.cpus),
            n => self.barrier.wait_threads(ctx.cpus * n),
        }
    }

    /// Records `value` as what a caller of `seen[slot]`'s cell got, or
    /// fails if another caller got something else.
    fn agree(ctx: &Ctx, seen: &AtomicU64, value: u64, what: &'static str) {
        // Relaxed: the cell under test orders the values; this only
        // compares them.
        if let Err(first) = seen.compare_exchange(0, value, Ordering::Relaxed, Ordering::Relaxed)
            && first != value
        {
            ctx.fail(what);
        }
    }

    /// Resets the per-slot records and rebuilds the pool (CPU 0, while
    /// the others wait at the barrier).
    fn fresh_round(&self) {
        // SAFETY: called between two barriers at which every other CPU
        // waits, and by `setup` before the run: nobody uses the pool.
        unsafe { self.pool.rebuild() };
        for slot in 0..SLOTS {
            // Relaxed: published by the barrier.
            self.runs[slot].store(0, Ordering::Relaxed);
            self.arrived[slot].store(0, Ordering::Relaxed);
            self.seen[slot].store(0, Ordering::Relaxed);
            self.lazy_seen[slot].store(0, Ordering::Relaxed);
        }
        LAZY_RUNS.store(0, Ordering::Relaxed);
        self.cursor.store(0, Ordering::Relaxed);
    }

    /// The round's final check (CPU 0, the others waiting): every slot
    /// used had its initialisers run once.
    fn check_round(&self, ctx: &Ctx) {
        let used = self.cursor.load(Ordering::Relaxed).min(SLOTS);
        for slot in 0..used {
            if self.runs[slot].load(Ordering::Relaxed) != 1 {
                ctx.fail("a used Once's initialiser did not run exactly once");
            }
        }
        // Every slot below the cursor was used (its user moved the
        // cursor), none above.
        if O::LAZY && LAZY_RUNS.load(Ordering::Relaxed) != used as u64 {
            ctx.fail("Lazy initialisers did not run exactly once per Lazy used");
        }
    }
}

impl<O: OnceCell> Suite for OnceTorture<O> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        self.fresh_round();
        for c in [&self.inits, &self.calls, &self.irqs] {
            c.reset();
        }
        self.rounds.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        let leader = ctx.cpu == 0 && ctx.thread == 0;
        if leader {
            // Relaxed: published by the barrier below.
            self.end.store(
                time::now() + time::ms_to_ticks(self.info.budget_ms),
                Ordering::Relaxed,
            );
        }
        self.meet(ctx);
        loop {
            let mut calls = 0;
            loop {
                // Acquire pairs with the AcqRel compare-exchange that moved
                // the cursor: the slot's earlier users are done with the
                // records we compare against (not needed for the cells).
                let slot = self.cursor.load(Ordering::Acquire);
                if slot >= SLOTS || ctx.should_stop() {
                    break;
                }
                // Relaxed: a meeting point, no data hangs on it.
                let arrived = self.arrived[slot].fetch_add(1, Ordering::Relaxed) + 1;
                let mut polls = 0;
                while arrived < ctx.cpus as u32
                    && polls < MEET_POLLS
                    && self.arrived[slot].load(Ordering::Relaxed) < ctx.cpus as u32
                    && self.cursor.load(Ordering::Relaxed) == slot
                {
                    polls += 1;
                    // Not `spin_loop`: under TCG x86_64's `pause` leaves the
                    // translated code, which would stretch the wait.
                    core::hint::black_box(polls);
                }
                let runs = &self.runs[slot];
                let v = self.pool.once(slot).call_once(|| {
                    // Relaxed: the count is the check; the cell orders it.
                    if runs.fetch_add(1, Ordering::Relaxed) != 0 {
                        ctx.fail("a Once initialiser ran twice");
                    }
                    self.inits.add(ctx.cpu, 1);
                    busy_work(INIT_WORK);
                    TICKETS.fetch_add(1, Ordering::Relaxed) + 1
                });
                if runs.load(Ordering::Relaxed) == 0 {
                    ctx.fail("call_once returned before its initialiser ran");
                }
                Self::agree(
                    ctx,
                    &self.seen[slot],
                    v,
                    "two callers of one Once got different values",
                );
                if O::LAZY {
                    let v = *Lazy::force(self.pool.lazy(slot));
                    Self::agree(
                        ctx,
                        &self.lazy_seen[slot],
                        v,
                        "two users of one Lazy got different values",
                    );
                }
                calls += 1;
                // AcqRel: see the load above. Whoever comes first moves it.
                let _ = self.cursor.compare_exchange(
                    slot,
                    slot + 1,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
            self.calls.add(ctx.cpu, calls);
            self.meet(ctx);
            if leader {
                self.check_round(ctx);
                self.rounds.fetch_add(1, Ordering::Relaxed);
                let more = !ctx.failed() && time::now() < self.end.load(Ordering::Relaxed);
                if more {
                    self.fresh_round();
                }
                // Relaxed: published by the barrier.
                self.go_on.store(more, Ordering::Relaxed);
            }
            self.meet(ctx);
            if !self.go_on.load(Ordering::Relaxed) {
                break;
            }
        }
    }

    fn irq(&self, ctx: &Ctx) {
        self.irqs.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        let rounds = self.rounds.load(Ordering::Relaxed);
        self.info
            .report_per_cpu(cpus, &[("calls", &self.calls), ("inits", &self.inits)]);
        self.info.report(format_args!(
            "{rounds} rounds of {SLOTS} fresh Once values: {} calls, {} initialiser runs",
            self.calls.sum(cpus),
            self.inits.sum(cpus)
        ));
        let failure = (rounds == 0).then_some("no round completed");
        Summary::new(self.calls.sum(cpus), self.calls.min_max(cpus), failure)
    }
}
