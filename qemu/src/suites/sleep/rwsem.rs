//! `sleep-rwsem`: ksync's sleeping [`RwSemaphore`](ksync::rwsem::RwSemaphore)
//! on the scheduler: exclusion with readers and writers that sleep, yield
//! and migrate while they hold it, and no writer starved by a stream of
//! readers that never leaves the lock free. [`RwSuite`] is generic over
//! the raw lock: `percpu_rwsem.rs` runs it on ksync's per-CPU rw
//! semaphore.
//!
//! Two locks, two parts at once:
//!
//! * **Exclusion** (`data`): most members (the *lockers*) take it again
//!   and again, a write one time in four (`write`, sometimes `try_write`),
//!   else a read (`read`, sometimes `try_read`). A writer does a
//!   non-atomic read-modify-write of a pair of counters (`first`, then
//!   `second`) with a yield, a 200 µs sleep or a move to another CPU in
//!   the middle of it now and then; a reader reads the pair, now and then
//!   sleeps a tick (1 ms), yields or moves to another CPU, and reads it
//!   again. A reader must always see the two equal (else it saw a
//!   half-done write) and unchanged over its section; a writer must find
//!   no other writer (a holder word) and no reader (a count of readers
//!   inside) in with it; at the end both counters must equal the writes
//!   counted. CPU 0's timer interrupt fails the suite if one `read` or
//!   `write` waits over [`WAIT_BOUND_MS`] (a lost wake-up).
//! * **Writer starvation** (`starve`): two *hogs*, the boot threads of
//!   CPUs `s` and `o` (`s` = 1, `o` = 2 modulo the CPU count; with one
//!   CPU, threads 0 and 2 of it), keep it read-held in a relay: a hog
//!   takes the read side (`read`) and holds it, sleeping (a 500 µs timed
//!   wait: a yield for a boot thread) between looks, until the other hog
//!   has come in after it, then leaves and at once comes again, so the
//!   lock is never free. A hog whose partner has called `read` but not
//!   got in for [`PASS_ON_MS`] (it waits behind a writer) leaves anyway.
//!   The *victim*, thread 1 of CPU `s`, sleeps 1 ms, then takes the write
//!   side, again and again; CPU 0's timer interrupt fails the suite if one
//!   `write` waits over [`STARVE_BOUND_MS`]. A lock that queues new
//!   readers behind a waiting writer breaks the relay: the victim waits
//!   about [`PASS_ON_MS`]; its longest wait is reported.
//!
//! # The control: `sleep-rwsem-readerpref`
//!
//! The same suite on [`ReaderPreferring`], a sleeping rw lock written
//! here that lets a reader in whenever no writer is *inside*, waiting
//! writers notwithstanding (as the host test's control in
//! `tests/rwsem.rs`; its waiters sleep on a ksync wait queue). The hogs'
//! relay never leaves it free, and the victim must be caught starving
//! past the bound. (Exclusion still holds for it.)

// Orderings: the holder word, the readers count and the counter pair are
// Relaxed on purpose (the lock under test orders them; a broken lock
// shows in them); the relay's `calls` and `entries` are SeqCst (a hog
// compares one with the other, both written by the other hog); roles and
// statistics are Relaxed, written during the run and read by the monitor
// (a hint) or after the harness's barriers, which order `setup`'s resets
// too. `ReaderPreferring` says its own.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::lock_api::{self, GuardSend, RawRwLock};
use ksync::wait::WaitQueue;

use super::{Member, NONE, Role, Team, Waits, maybe_migrate, snooze, start, watch};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::time;
use crate::sched;
use crate::suites::{Rng, busy_work};

/// The longest the victim may wait for the hogs' lock.
pub const STARVE_BOUND_MS: u64 = 1_000;
/// The longest a locker may wait for the exclusion part's lock.
pub const WAIT_BOUND_MS: u64 = 5_000;
/// How long a hog holds on for a partner that called `read` and is not
/// in yet.
pub const PASS_ON_MS: u64 = 3;
/// A hog's sleep between two looks at its partner.
const HOG_STEP_US: u64 = 500;
/// A reader's sleep while it holds the read side (about a tick).
const READER_SLEEP_US: u64 = 1_000;
/// A writer's sleep in the middle of its write.
const WRITER_SLEEP_US: u64 = 200;
/// The victim's sleep between two writes.
const VICTIM_PAUSE_US: u64 = 1_000;
/// A locker moves to a random CPU once per this many sections, on
/// average (and once in 8 sections while it holds).
const MIGRATE_ONE_IN: u64 = 16;

/// See the module docs; `R` is a ksync rw semaphore or a control's lock.
pub struct RwSuite<R> {
    info: Info,
    team: Team,
    data: lock_api::RwLock<R, ()>,
    /// The pair the writers of `data` change and its readers check.
    first: AtomicU64,
    second: AtomicU64,
    /// The writer inside `data` (thread id + 1), or 0.
    writer_in: AtomicUsize,
    /// Readers inside `data`.
    readers_in: AtomicUsize,
    starve: lock_api::RwLock<R, ()>,
    /// The hogs' relay: `read` calls begun, and entries made.
    calls: AtomicU64,
    entries: AtomicU64,
    /// The victim's thread id, or [`NONE`].
    victim: AtomicUsize,
    waits: Waits,
    victim_waits: Waits,
    /// Per CPU: `data` writes and reads, `try_` refused, lockers' takes
    /// that slept; hog entries, hogs that passed on; the victim's writes.
    writes: Counters,
    reads: Counters,
    refused: Counters,
    slept: Counters,
    hog_reads: Counters,
    passed_on: Counters,
    victim_writes: Counters,
}

impl<R: RawRwLock> RwSuite<R> {
    pub const fn new(name: &'static str, kind: Kind, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            team: Team::new(),
            data: lock_api::RwLock::new(()),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            writer_in: AtomicUsize::new(0),
            readers_in: AtomicUsize::new(0),
            starve: lock_api::RwLock::new(()),
            calls: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            victim: AtomicUsize::new(NONE),
            waits: Waits::new(),
            victim_waits: Waits::new(),
            writes: Counters::new(),
            reads: Counters::new(),
            refused: Counters::new(),
            slept: Counters::new(),
            hog_reads: Counters::new(),
            passed_on: Counters::new(),
            victim_writes: Counters::new(),
        }
    }

    /// One write section of the exclusion part (the write side held).
    fn write_inside(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        if self.writer_in.swap(me + 1, Ordering::Relaxed) != 0 {
            ctx.fail("two rwsem writers at once");
        }
        if self.readers_in.load(Ordering::Relaxed) != 0 {
            ctx.fail("an rwsem writer got in with readers inside");
        }
        let seen = self.first.load(Ordering::Relaxed);
        busy_work(rng.below(1_000) as u32);
        self.first.store(seen + 1, Ordering::Relaxed);
        match rng.below(8) {
            0 => sched::yield_now(),
            1 => snooze(ctx, WRITER_SLEEP_US),
            2 => maybe_migrate(ctx, rng, 1),
            _ => busy_work(rng.below(1_000) as u32),
        }
        if self.second.load(Ordering::Relaxed) != seen {
            ctx.fail("torn update inside the rwsem's write side");
        }
        self.second.store(seen + 1, Ordering::Relaxed);
        if self.readers_in.load(Ordering::Relaxed) != 0 {
            ctx.fail("a reader came in while an rwsem writer was inside");
        }
        self.writer_in.store(0, Ordering::Relaxed);
    }

    /// One read section of the exclusion part (the read side held).
    fn read_inside(&self, ctx: &Ctx, rng: &mut Rng) {
        self.readers_in.fetch_add(1, Ordering::Relaxed);
        if self.writer_in.load(Ordering::Relaxed) != 0 {
            ctx.fail("an rwsem reader got in with a writer inside");
        }
        let first = self.first.load(Ordering::Relaxed);
        let second = self.second.load(Ordering::Relaxed);
        if first != second {
            ctx.fail("an rwsem reader saw a half-done write");
        }
        match rng.below(8) {
            0 => snooze(ctx, READER_SLEEP_US),
            1 => sched::yield_now(),
            2 => maybe_migrate(ctx, rng, 1),
            _ => busy_work(rng.below(1_000) as u32),
        }
        if self.first.load(Ordering::Relaxed) != first
            || self.second.load(Ordering::Relaxed) != second
        {
            ctx.fail("the data changed under an rwsem reader");
        }
        self.readers_in.fetch_sub(1, Ordering::Relaxed);
    }

    /// A locker's take of `data`: `try_take` if `try_only`, else `take`
    /// timed in `waits`; counts a refusal, or a take that slept (since
    /// `blocks`, the thread's block count before).
    fn take<G>(
        &self,
        me: usize,
        blocks: u64,
        try_only: bool,
        try_take: impl FnOnce() -> Option<G>,
        take: impl FnOnce() -> G,
    ) -> Option<G> {
        let guard = if try_only {
            try_take()
        } else {
            self.waits.begin(me);
            let guard = take();
            self.waits.end(me);
            Some(guard)
        };
        if guard.is_none() {
            self.refused.add(cpu::current(), 1);
        } else if sched::blocks_of(me) != blocks {
            self.slept.add(cpu::current(), 1);
        }
        guard
    }

    fn locker(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        while !self.team.should_stop(ctx) {
            let blocks = sched::blocks_of(me);
            let try_only = rng.below(8) == 0;
            if rng.below(4) == 0 {
                let take = || self.data.write();
                let Some(guard) = self.take(me, blocks, try_only, || self.data.try_write(), take)
                else {
                    continue;
                };
                self.write_inside(ctx, me, rng);
                drop(guard);
                self.writes.add(cpu::current(), 1);
            } else {
                let take = || self.data.read();
                let Some(guard) = self.take(me, blocks, try_only, || self.data.try_read(), take)
                else {
                    continue;
                };
                self.read_inside(ctx, rng);
                drop(guard);
                self.reads.add(cpu::current(), 1);
            }
            busy_work(rng.below(512) as u32);
            maybe_migrate(ctx, rng, MIGRATE_ONE_IN);
        }
    }

    /// A hog of the relay (module docs).
    fn hog(&self, ctx: &Ctx) {
        let pass_on = time::ms_to_ticks(PASS_ON_MS);
        while !self.team.should_stop(ctx) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let guard = self.starve.read();
            let mine = self.entries.fetch_add(1, Ordering::SeqCst) + 1;
            self.hog_reads.add(cpu::current(), 1);
            let mut blocked_since = None;
            while self.entries.load(Ordering::SeqCst) == mine && !self.team.should_stop(ctx) {
                if self.calls.load(Ordering::SeqCst) > mine {
                    // The partner called `read` and is not in yet.
                    let now = time::now();
                    let since = *blocked_since.get_or_insert(now);
                    if now.saturating_sub(since) >= pass_on {
                        self.passed_on.add(cpu::current(), 1);
                        break;
                    }
                }
                snooze(ctx, HOG_STEP_US);
            }
            drop(guard);
        }
    }

    fn victim(&self, ctx: &Ctx, me: usize) {
        self.victim.store(me, Ordering::Relaxed);
        while !self.team.should_stop(ctx) {
            snooze(ctx, VICTIM_PAUSE_US);
            self.victim_waits.begin(me);
            let guard = self.starve.write();
            self.victim_waits.end(me);
            drop(guard);
            self.victim_writes.add(cpu::current(), 1);
        }
    }
}

impl<R: RawRwLock + Sync + 'static> Member for RwSuite<R> {
    fn team(&self) -> &Team {
        &self.team
    }

    fn body(&self, ctx: &Ctx) {
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x9E37_79B9));
        self.team.arrive();
        match Role::of(ctx) {
            Role::Locker => self.locker(ctx, me, &mut rng),
            Role::Hog => self.hog(ctx),
            Role::Victim => self.victim(ctx, me),
        }
        self.team.leave();
    }
}

impl<R: RawRwLock + Sync + 'static> Suite for RwSuite<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        self.first.store(0, Ordering::Relaxed);
        self.second.store(0, Ordering::Relaxed);
        self.writer_in.store(0, Ordering::Relaxed);
        self.readers_in.store(0, Ordering::Relaxed);
        self.calls.store(0, Ordering::Relaxed);
        self.entries.store(0, Ordering::Relaxed);
        self.victim.store(NONE, Ordering::Relaxed);
        self.waits.reset();
        self.victim_waits.reset();
        self.writes.reset();
        self.reads.reset();
        self.refused.reset();
        self.slept.reset();
        self.hog_reads.reset();
        self.passed_on.reset();
        self.victim_writes.reset();
    }

    fn run(&self, ctx: &Ctx) {
        start(self, ctx);
    }

    /// CPU 0 watches the waits: the victim's against the starvation
    /// bound, the lockers' against the lost-wake-up bound.
    fn irq(&self, ctx: &Ctx) {
        watch(
            ctx,
            (
                &self.victim,
                &self.victim_waits,
                STARVE_BOUND_MS,
                "writer starvation: a reader stream kept an rwsem writer out past the bound",
            ),
            (
                &self.waits,
                WAIT_BOUND_MS,
                "an rwsem read() or write() waited over 5 s: a lost wake-up?",
            ),
        );
    }

    fn finish(&self, cpus: usize) -> Summary {
        let writes = self.writes.sum(cpus);
        let reads = self.reads.sum(cpus);
        let first = self.first.load(Ordering::Relaxed);
        let second = self.second.load(Ordering::Relaxed);
        // Snapshots: interrupts are off here, where nothing may sleep.
        let held = self.data.is_locked() || self.starve.is_locked();
        let inside = self.writer_in.load(Ordering::Relaxed) != 0
            || self.readers_in.load(Ordering::Relaxed) != 0;
        let hogged = self.hog_reads.sum(cpus);
        let victim_writes = self.victim_writes.sum(cpus);
        let has_victim = self.victim.load(Ordering::Relaxed) != NONE;
        let slept = self.slept.sum(cpus);
        self.info.report(format_args!(
            "{writes} writes, {reads} reads (counters {first}/{second}), {} try refused, {slept} takes slept, longest take {} ms; hogs {hogged} reads, {} passed on, victim {victim_writes} writes, its longest wait {} ms (bound {STARVE_BOUND_MS}); {} migrations",
            self.refused.sum(cpus),
            self.waits.longest_ms(),
            self.passed_on.sum(cpus),
            self.victim_waits.longest_ms(),
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("writes", &self.writes),
                ("reads", &self.reads),
                ("slept", &self.slept),
                ("hog", &self.hog_reads),
                ("victim", &self.victim_writes),
            ],
        );
        let failure = (held || inside)
            .then_some("the rwsem is still held after the run")
            .or((first != writes || second != writes)
                .then_some("lost updates: the counters are not the writes counted"))
            .or((writes == 0 || reads == 0)
                .then_some("no writes or no reads in the exclusion part"))
            .or((slept == 0).then_some("no read() or write() ever slept"))
            .or((hogged == 0).then_some("the hogs never held their lock"))
            .or((has_victim && victim_writes == 0).then_some("the victim never got the lock"));
        Summary::new(writes + reads, self.writes.min_max(cpus), failure)
    }
}

/// ksync's sleeping rw semaphore.
pub static SLEEP_RWSEM: RwSuite<ksync::rwsem::RawRwSemaphore> =
    RwSuite::new("sleep-rwsem", Kind::Test, 700);
/// The control: readers overtake a waiting writer. A longer budget: it
/// ends once the victim is caught, a bound after it started to wait.
pub static SLEEP_RWSEM_READERPREF: RwSuite<ReaderPreferring> =
    RwSuite::new("sleep-rwsem-readerpref", Kind::Control, 2_000);

/// In [`ReaderPreferring`]'s word: a writer is inside (the rest counts
/// the readers inside).
const RP_WRITER: usize = 1 << (usize::BITS - 1);

/// The control's rw lock: a reader goes in whenever no writer is inside,
/// a writer only when nobody is; whoever cannot sleeps on one ksync wait
/// queue (re-checking after it queued), and every release that may let
/// someone in wakes them all.
pub struct ReaderPreferring {
    state: AtomicUsize,
    queue: WaitQueue,
}

// SAFETY: readers count themselves by compare-exchange only while no
// writer is inside, a writer gets in by compare-exchange from 0 (nobody
// inside), so a writer is alone; Acquire on taking, Release on leaving.
// Nothing belongs to the task that took it, so the guards may move.
unsafe impl RawRwLock for ReaderPreferring {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        state: AtomicUsize::new(0),
        queue: WaitQueue::new(),
    };
    type GuardMarker = GuardSend;

    fn lock_shared(&self) {
        if !self.try_lock_shared() {
            ksync::wait::might_sleep();
            // The queue's protocol: a release after this waiter queued
            // wakes it; one before, its re-check after queueing sees it.
            self.queue.wait_event(|| self.try_lock_shared());
        }
    }

    fn try_lock_shared(&self) -> bool {
        // Relaxed: a first look; the compare-exchange decides.
        let mut state = self.state.load(Ordering::Relaxed);
        while state & RP_WRITER == 0 {
            // Acquire: pairs with the Release of the writer's unlock.
            match self.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
        false
    }

    unsafe fn unlock_shared(&self) {
        // Release: pairs with the next writer's Acquire.
        if self.state.fetch_sub(1, Ordering::Release) == 1 {
            self.queue.wake_all();
        }
    }

    fn lock_exclusive(&self) {
        if !self.try_lock_exclusive() {
            ksync::wait::might_sleep();
            // As in `lock_shared`.
            self.queue.wait_event(|| self.try_lock_exclusive());
        }
    }

    fn try_lock_exclusive(&self) -> bool {
        // Acquire: pairs with the Release of the readers' and the last
        // writer's unlocks.
        self.state
            .compare_exchange(0, RP_WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock_exclusive(&self) {
        // Release: pairs with the next taker's Acquire.
        self.state.store(0, Ordering::Release);
        self.queue.wake_all();
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a snapshot.
        self.state.load(Ordering::Relaxed) != 0
    }
}
