//! `sleep-mutex`: ksync's sleeping [`Mutex`](ksync::mutex::Mutex) on the
//! scheduler: mutual exclusion with holders that sleep, yield and migrate
//! while they hold, and no waiter starved by a task that re-locks in a
//! loop.
//!
//! Two mutexes, two parts at once:
//!
//! * **Exclusion** (`data`): most members (the *lockers*) lock it again
//!   and again (`lock`, sometimes `try_lock`) and do a non-atomic
//!   read-modify-write of a pair of plain counters inside, with a yield, a
//!   200 µs sleep or a move to another CPU (workers) in the middle of it
//!   now and then: the second counter must always equal what the first
//!   held (a torn pair: two holders at once), a holder word swapped in and
//!   out must find nobody else inside, and at the end both counters must
//!   equal the sections counted. CPU 0's timer interrupt fails the suite if
//!   a `lock` waits over [`WAIT_BOUND_MS`] (a lost wake-up).
//! * **Starvation** (`starve`): two *hogs* re-lock it in a loop
//!   (`try_lock`, [`HOG_HOLD_US`] held, unlock, at once again; preemptible
//!   all along): CPU `s`'s boot thread and CPU `o`'s (`s` = 1, `o` = 2
//!   modulo the CPU count; with one CPU, thread 2 of it). The *victim*,
//!   thread 1 of CPU `s` (the same CPU as one hog, another CPU than the
//!   other), sleeps 1 ms, then locks it, again and again; CPU 0's timer
//!   interrupt fails the suite if one `lock` waits over
//!   [`STARVE_BOUND_MS`]. ksync's mutex hands the lock to a waiter that was
//!   woken and lost it once (`HANDOFF`; `try_lock` refuses meanwhile), so
//!   the victim waits a few hold times; the victim's longest wait is
//!   reported.
//!
//! # The control: `sleep-mutex-nohandoff`
//!
//! The same suite on [`NoHandoff`], a sleeping mutex written here of the
//! same shape (optimistic spinning while the owner runs, then sleeping on
//! a ksync wait queue as an exclusive waiter) without the hand-off:
//! `unlock` frees the lock and wakes the first waiter, which retries and,
//! having lost to a hog, queues again at the back. The hogs re-take the
//! lock before the woken victim runs, and the victim must be caught
//! starving past the bound. (Exclusion still holds for it.)

// Orderings: the holder word and the counter pair are Relaxed or plain on
// purpose (the lock under test orders them; a broken lock shows in them);
// the roles (`victim`) and statistics are Relaxed, written during the run
// and read by the monitor (a hint) or after the harness's barriers, and
// `setup`'s resets are ordered by them too. `NoHandoff` says its own.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ksync::kernel::{Kernel, SPIN_LIMIT};
use ksync::lock_api::{self, GuardSend, RawMutex};
use ksync::wait::WaitQueue;

use super::{Member, NONE, Role, Team, Waits, maybe_migrate, snooze, start, watch};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::hooks::QemuKernel;
use crate::kernel::time;
use crate::sched;
use crate::suites::{Rng, busy_work};

/// How long a hog holds the lock each time (guest time, preemptible).
pub const HOG_HOLD_US: u64 = 2_000;
/// The longest the victim may wait for the hogs' lock.
pub const STARVE_BOUND_MS: u64 = 1_000;
/// The longest a locker may wait for the exclusion part's lock.
pub const WAIT_BOUND_MS: u64 = 5_000;
/// The victim's sleep between two locks.
const VICTIM_PAUSE_US: u64 = 1_000;
/// A locker moves to a random CPU once per this many sections, on
/// average (and once in 8 sections while it holds).
const MIGRATE_ONE_IN: u64 = 16;

/// The exclusion part's data: plain counters, changed non-atomically.
pub struct Pair {
    first: u64,
    second: u64,
}

/// See the module docs; `R` is ksync's mutex or the control's.
pub struct MutexSuite<R> {
    info: Info,
    team: Team,
    data: lock_api::Mutex<R, Pair>,
    starve: lock_api::Mutex<R, u64>,
    /// The holder of `data` (thread id + 1), or 0.
    holder: AtomicUsize,
    /// The victim's thread id, or [`NONE`].
    victim: AtomicUsize,
    waits: Waits,
    victim_waits: Waits,
    /// Per CPU: `data` sections, `try_lock`s refused, lockers' `lock`s
    /// that slept; hog sections; the victim's locks.
    sections: Counters,
    refused: Counters,
    slept: Counters,
    hog_sections: Counters,
    victim_locks: Counters,
}

impl<R: RawMutex> MutexSuite<R> {
    const fn new(name: &'static str, kind: Kind, budget_ms: u64) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            team: Team::new(),
            data: lock_api::Mutex::new(Pair {
                first: 0,
                second: 0,
            }),
            starve: lock_api::Mutex::new(0),
            holder: AtomicUsize::new(0),
            victim: AtomicUsize::new(NONE),
            waits: Waits::new(),
            victim_waits: Waits::new(),
            sections: Counters::new(),
            refused: Counters::new(),
            slept: Counters::new(),
            hog_sections: Counters::new(),
            victim_locks: Counters::new(),
        }
    }

    /// One section of the exclusion part (the lock held).
    fn inside(&self, ctx: &Ctx, me: usize, rng: &mut Rng, pair: &mut Pair) {
        if self.holder.swap(me + 1, Ordering::Relaxed) != 0 {
            ctx.fail("two mutex holders at once");
        }
        let seen = pair.first;
        busy_work(rng.below(1_000) as u32);
        pair.first = seen + 1;
        match rng.below(8) {
            0 => sched::yield_now(),
            1 => snooze(ctx, 200),
            2 => maybe_migrate(ctx, rng, 1),
            _ => busy_work(rng.below(1_000) as u32),
        }
        if pair.second != seen {
            ctx.fail("torn update inside the mutex");
        }
        pair.second = seen + 1;
        self.holder.store(0, Ordering::Relaxed);
    }

    fn locker(&self, ctx: &Ctx, me: usize, rng: &mut Rng) {
        while !self.team.should_stop(ctx) {
            let blocks = sched::blocks_of(me);
            let mut guard = if rng.below(8) == 0 {
                let Some(guard) = self.data.try_lock() else {
                    self.refused.add(cpu::current(), 1);
                    continue;
                };
                guard
            } else {
                self.waits.begin(me);
                let guard = self.data.lock();
                self.waits.end(me);
                guard
            };
            if sched::blocks_of(me) != blocks {
                self.slept.add(cpu::current(), 1);
            }
            self.inside(ctx, me, rng, &mut guard);
            drop(guard);
            self.sections.add(cpu::current(), 1);
            busy_work(rng.below(512) as u32);
            maybe_migrate(ctx, rng, MIGRATE_ONE_IN);
        }
    }

    fn hog(&self, ctx: &Ctx) {
        let hold = time::hz() * HOG_HOLD_US / 1_000_000;
        while !self.team.should_stop(ctx) {
            if let Some(mut guard) = self.starve.try_lock() {
                let end = time::now() + hold;
                while time::now() < end {
                    busy_work(2_000);
                }
                *guard += 1;
                drop(guard);
                self.hog_sections.add(cpu::current(), 1);
            }
        }
    }

    fn victim(&self, ctx: &Ctx, me: usize) {
        self.victim.store(me, Ordering::Relaxed);
        while !self.team.should_stop(ctx) {
            snooze(ctx, VICTIM_PAUSE_US);
            self.victim_waits.begin(me);
            let mut guard = self.starve.lock();
            self.victim_waits.end(me);
            *guard += 1;
            drop(guard);
            self.victim_locks.add(cpu::current(), 1);
        }
    }
}

impl<R: RawMutex + Sync + 'static> Member for MutexSuite<R> {
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

impl<R: RawMutex + Sync + 'static> Suite for MutexSuite<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        // Free between runs (`finish` checks); `try_lock` never sleeps.
        if let Some(mut pair) = self.data.try_lock() {
            pair.first = 0;
            pair.second = 0;
        }
        if let Some(mut count) = self.starve.try_lock() {
            *count = 0;
        }
        self.holder.store(0, Ordering::Relaxed);
        self.victim.store(NONE, Ordering::Relaxed);
        self.waits.reset();
        self.victim_waits.reset();
        self.sections.reset();
        self.refused.reset();
        self.slept.reset();
        self.hog_sections.reset();
        self.victim_locks.reset();
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
                "starvation: a relocking hog kept a mutex waiter out past the bound",
            ),
            (
                &self.waits,
                WAIT_BOUND_MS,
                "a mutex lock() waited over 5 s: a lost wake-up?",
            ),
        );
    }

    fn finish(&self, cpus: usize) -> Summary {
        let sections = self.sections.sum(cpus);
        // `try_lock`: interrupts are off here, where `lock` may not sleep.
        let free = self.data.try_lock().map(|pair| (pair.first, pair.second));
        let (first, second) = free.unwrap_or((u64::MAX, u64::MAX));
        let hogged = self.hog_sections.sum(cpus);
        let victim_locks = self.victim_locks.sum(cpus);
        let has_victim = self.victim.load(Ordering::Relaxed) != NONE;
        let slept = self.slept.sum(cpus);
        self.info.report(format_args!(
            "{sections} sections (counters {first}/{second}), {} try_lock refused, {slept} locks slept, longest lock {} ms; hogs {hogged} sections, victim {victim_locks} locks, its longest wait {} ms (bound {STARVE_BOUND_MS}); {} migrations",
            self.refused.sum(cpus),
            self.waits.longest_ms(),
            self.victim_waits.longest_ms(),
            sched::MIGRATIONS.sum(cpus)
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("sections", &self.sections),
                ("slept", &self.slept),
                ("hog", &self.hog_sections),
                ("victim", &self.victim_locks),
            ],
        );
        let failure = free
            .is_none()
            .then_some("the mutex is still held after the run")
            .or((first != sections || second != sections)
                .then_some("lost updates: the counters are not the sections counted"))
            .or((slept == 0).then_some("no lock() ever slept"))
            .or((hogged == 0).then_some("the hogs never held their lock"))
            .or((has_victim && victim_locks == 0).then_some("the victim never got the lock"));
        Summary::new(sections, self.sections.min_max(cpus), failure)
    }
}

/// ksync's sleeping mutex.
pub static SLEEP_MUTEX: MutexSuite<ksync::mutex::RawMutex> =
    MutexSuite::new("sleep-mutex", Kind::Test, 1_000);
/// The control: no hand-off. A longer budget: it ends once the victim is
/// caught, a bound after it started to wait.
pub static SLEEP_MUTEX_NOHANDOFF: MutexSuite<NoHandoff> =
    MutexSuite::new("sleep-mutex-nohandoff", Kind::Control, 3_000);

/// The control's sleeping mutex: ksync's shape without the hand-off.
/// `unlock` frees the lock and wakes the first waiter; a woken waiter
/// tries again and, if the lock is taken, queues again at the back (what
/// `wait_event_exclusive` does with a false condition).
pub struct NoHandoff {
    locked: AtomicBool,
    /// The holder's task token, or 0: a hint for the spinners.
    owner: AtomicUsize,
    queue: WaitQueue,
}

impl NoHandoff {
    /// Spins while the owner runs (as ksync's mutex does), then sleeps
    /// until a wake finds the lock free and this waiter takes it.
    #[cold]
    fn lock_slow(&self) {
        ksync::wait::might_sleep();
        for _ in 0..SPIN_LIMIT {
            // Relaxed: a look before the compare-exchange that decides.
            if !self.locked.load(Ordering::Relaxed) && self.try_lock() {
                return;
            }
            // Relaxed: a hint.
            let owner = self.owner.load(Ordering::Relaxed);
            if owner != 0 && !QemuKernel::task_running(owner) {
                break;
            }
            core::hint::spin_loop();
        }
        // The queue's protocol: an unlock after this waiter queued finds
        // it; one before, its re-check after queueing sees the lock free.
        self.queue.wait_event_exclusive(|| self.try_lock());
    }
}

// SAFETY: `try_lock` and `lock` take the flag with an Acquire
// compare-exchange from false, so one holder at a time, and `unlock`
// releases it with a Release store; nothing in the lock belongs to the
// task that took it (the owner word is a hint), so the guard may move.
unsafe impl RawMutex for NoHandoff {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
        owner: AtomicUsize::new(0),
        queue: WaitQueue::new(),
    };
    type GuardMarker = GuardSend;

    fn lock(&self) {
        if !self.try_lock() {
            self.lock_slow();
        }
    }

    fn try_lock(&self) -> bool {
        // Acquire: pairs with the Release in `unlock`.
        let taken = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if taken {
            // Relaxed: a hint.
            self.owner
                .store(QemuKernel::current_task(), Ordering::Relaxed);
        }
        taken
    }

    unsafe fn unlock(&self) {
        // Relaxed: a hint.
        self.owner.store(0, Ordering::Relaxed);
        // Release: pairs with the next taker's Acquire.
        self.locked.store(false, Ordering::Release);
        // No hand-off: freed, then the first waiter woken to try again.
        self.queue.wake_one();
    }
}
