//! The sleeping primitives' suites (`sleep-*`): ksync's wait queue,
//! completion, semaphore, sleeping mutex and the two rw semaphores (the
//! plain and the per-CPU one) on this kernel's scheduler,
//! through its scheduler hooks (`kernel::hooks`: `current_task`, `block`,
//! `wake`, `may_sleep`, `clock_ns`, `task_running`).
//!
//! Every suite runs as a *team* of threads: 3 per CPU (the CPU's boot
//! thread and 2 workers), preempted by the timer, workers migrating now
//! and then. In scheduler mode (`sched`, `sched=N`) the team is the
//! runner's threads (N per CPU); otherwise each boot thread starts 2
//! workers itself ([`start`]), so the suites sleep in every
//! configuration. Each member has a [`Ctx`] whose `thread` says which of
//! its CPU's threads it is (0: the boot thread), which is how the suites
//! give out roles. Boot threads never really block (`hooks::block` yields
//! for them): they exercise the primitives' re-checks, the workers the
//! sleeps.
//!
//! What the suites share, here:
//!
//! * [`Team`]: who is in it, arrival (a leader waits, bounded, until every
//!   member has started before its first round), departure, and when to
//!   stop ([`Team::should_stop`]: the budget, but at least [`MIN_RUN_MS`]);
//! * [`wait_for`]: a leader's bounded wait (yielding), which is how a lost
//!   wake-up becomes a reported failure instead of a hang;
//! * [`Waits`]: per-thread "waiting since" stamps that the timer interrupt
//!   checks against a bound (starvation, a lost hand-off);
//! * [`snooze`]: a timed sleep on a queue nobody wakes (the deadline path
//!   of `Kernel::block`, checked never to end early), for holders that
//!   sleep while they hold;
//! * [`maybe_migrate`];
//! * for a suite with a starvation part (`mutex.rs`, `rwsem.rs`): the
//!   members' [`Role`]s (lockers, two hogs, a victim) and its monitor
//!   ([`watch`]).
//!
//! # Adding a suite
//!
//! One file here with the suite type (implementing [`Member`] and
//! `harness::Suite`, whose `run` is [`start`]) and its `static`s (the
//! test and its control), added to [`SUITES`] below; the names go into
//! `SCHED_SUITES` (`xtask/src/qemu/arch.rs`). A suite generic over the
//! lock serves another lock from a file of `static`s alone (as
//! `percpu_rwsem.rs` runs `rwsem.rs`'s).

pub mod completion;
pub mod mmap;
pub mod mutex;
pub mod percpu_rwsem;
pub mod rwsem;
pub mod semaphore;
pub mod waitqueue;

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;

use ksync::kernel::Kernel;
use ksync::wait::WaitQueue;

use super::Rng;
use crate::harness::{Ctx, Suite, runner};
use crate::kernel::cpu::MAX_CPUS;
use crate::kernel::hooks::QemuKernel;
use crate::kernel::time;
use crate::sched::{self, NR_THREADS};

/// Threads per CPU outside scheduler mode: the boot thread and the
/// workers [`start`] gives it.
pub const TEAM_PER_CPU: usize = 3;
/// How long a leader waits for every member to start.
pub const ARRIVE_TIMEOUT_MS: u64 = 2_000;
/// How long a leader waits, after the close, for every member to leave.
pub const CLOSE_TIMEOUT_MS: u64 = 2_000;
/// The least a team runs, from its first arrival ([`Team::should_stop`]).
pub const MIN_RUN_MS: u64 = 300;

/// Every `sleep-*` suite, for the registry.
pub static SUITES: &[&dyn Suite] = &[
    &waitqueue::SLEEP_WAITQUEUE,
    &waitqueue::SLEEP_WAITQUEUE_CHECKFIRST,
    &completion::SLEEP_COMPLETION,
    &completion::SLEEP_COMPLETION_CHECKFIRST,
    &semaphore::SLEEP_SEMAPHORE,
    &semaphore::SLEEP_SEMAPHORE_RACYDOWN,
    &mutex::SLEEP_MUTEX,
    &mutex::SLEEP_MUTEX_NOHANDOFF,
    &rwsem::SLEEP_RWSEM,
    &rwsem::SLEEP_RWSEM_READERPREF,
    &percpu_rwsem::SLEEP_PERCPU_RWSEM,
    &percpu_rwsem::SLEEP_PERCPU_RWSEM_NODRAIN,
    &mmap::SEED_MMAP_SLEEP,
    &mmap::SEED_MMAP_SLEEP_RWSEM,
    &mmap::SEED_MMAP_SLEEP_CONTROL,
];

/// A team suite: what each member runs.
pub trait Member: Sync + 'static {
    /// The suite's team.
    fn team(&self) -> &Team;
    /// One member's part (every thread of the team, each with its own
    /// context).
    fn body(&self, ctx: &Ctx);
}

/// Who is in a suite's team, and who has arrived and left.
pub struct Team {
    cpus: AtomicUsize,
    arrived: AtomicUsize,
    left: AtomicUsize,
    /// The counter when the first member arrived (0: nobody yet).
    started: AtomicU64,
}

impl Team {
    pub const fn new() -> Self {
        Self {
            cpus: AtomicUsize::new(1),
            arrived: AtomicUsize::new(0),
            left: AtomicUsize::new(0),
            started: AtomicU64::new(0),
        }
    }

    /// Before the run (`Suite::setup`).
    pub fn reset(&self, cpus: usize) {
        // Relaxed: before the run; the harness's barrier orders it.
        self.cpus.store(cpus, Ordering::Relaxed);
        self.arrived.store(0, Ordering::Relaxed);
        self.left.store(0, Ordering::Relaxed);
        self.started.store(0, Ordering::Relaxed);
    }

    /// [`Ctx::should_stop`], but not before [`MIN_RUN_MS`] since the
    /// first member arrived, unless a failure was flagged. The runner's
    /// deadline counts from before its opening barrier: a host that stops
    /// the guest's vCPUs for a second there (a loaded machine; seen once
    /// at `-smp 8`) would otherwise leave a team no time at all, and its
    /// "did anything happen" checks would fail for no fault of the
    /// primitive.
    pub fn should_stop(&self, ctx: &Ctx) -> bool {
        if !ctx.should_stop() {
            return false;
        }
        // Relaxed: a time stamp, nothing hangs on it.
        let started = self.started.load(Ordering::Relaxed);
        ctx.failed() || (started != 0 && time::now() >= started + time::ms_to_ticks(MIN_RUN_MS))
    }

    /// Members in all.
    pub fn size(&self) -> usize {
        // Relaxed: set before the run.
        self.cpus.load(Ordering::Relaxed) * per_cpu()
    }

    /// This member has started (and set up what the others look at).
    pub fn arrive(&self) {
        // Relaxed: a time stamp (the first arrival's).
        let _ = self.started.compare_exchange(
            0,
            time::now().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        // SeqCst (as `left`): a leader that counts it sees what the member
        // set up before (its registration).
        self.arrived.fetch_add(1, Ordering::SeqCst);
    }

    /// This member's body has ended.
    pub fn leave(&self) {
        self.left.fetch_add(1, Ordering::SeqCst);
    }

    /// Members that arrived.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::SeqCst)
    }

    /// Members that left.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::SeqCst)
    }

    /// A leader (after its own `arrive`): waits until every member has
    /// arrived; fails the suite if they do not within
    /// [`ARRIVE_TIMEOUT_MS`].
    pub fn await_all(&self, ctx: &Ctx) -> bool {
        let size = self.size();
        let ok = wait_for(ARRIVE_TIMEOUT_MS, || self.arrived() >= size);
        if !ok {
            ctx.fail("the team did not start: a member never arrived");
        }
        ok
    }
}

/// Threads per CPU in the team: the runner's in scheduler mode, else
/// [`TEAM_PER_CPU`].
pub fn per_cpu() -> usize {
    match runner::threads() {
        1 => TEAM_PER_CPU,
        n => n,
    }
}

/// `Suite::run` of a team suite: outside scheduler mode a boot thread
/// first starts its CPU's other members; then this thread's part. (The
/// runner waits for every worker of the machine before its closing
/// barrier.)
pub fn start<S: Member>(suite: &S, ctx: &Ctx) {
    if runner::threads() == 1 && sched::current() < MAX_CPUS {
        const { assert!(align_of::<S>() > TEAM_PER_CPU) };
        for thread in 1..TEAM_PER_CPU {
            // The suite's address with the thread number in its low bits
            // (free: the assertion above).
            let arg = core::ptr::from_ref(suite) as usize | thread;
            if sched::spawn_on(ctx.cpu, worker::<S>, arg).is_none() {
                ctx.fail("no free thread slot for the team");
            }
        }
    }
    suite.body(ctx);
}

/// A member [`start`] started: `arg` is its suite's address and thread.
fn worker<S: Member>(arg: usize) {
    let mask = align_of::<S>() - 1;
    // SAFETY: `arg` is the address of a `static` suite of type `S` (every
    // team suite is one) with the thread number in its alignment bits,
    // made by `start`.
    let suite = unsafe { &*((arg & !mask) as *const S) };
    // Relaxed: set in `setup`, before the run that started this thread.
    let mut ctx = Ctx::for_thread(suite.team().cpus.load(Ordering::Relaxed));
    ctx.thread = arg & mask;
    suite.body(&ctx);
}

/// Waits until `done()` or `ms` milliseconds have passed; whether it was
/// done. For a leader (a boot thread: it never blocks, so it gives the
/// CPU away or idles, `sched::relax`, between looks, with RCU quiescent
/// states).
pub fn wait_for(ms: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = time::now() + time::ms_to_ticks(ms);
    loop {
        if done() {
            return true;
        }
        if time::now() > deadline {
            return done();
        }
        ksync::rcu::quiescent_state();
        sched::relax();
    }
}

/// Moves a worker (never a boot thread) to a random CPU once in `one_in`
/// calls on average.
pub fn maybe_migrate(ctx: &Ctx, rng: &mut Rng, one_in: u64) {
    if sched::current() >= MAX_CPUS && ctx.cpus > 1 && rng.below(one_in) == 0 {
        sched::migrate_to(rng.below(ctx.cpus as u64) as usize);
    }
}

/// Nobody ever wakes it: [`snooze`]'s waits end by their deadlines.
static SNOOZE: WaitQueue = WaitQueue::new();

/// Sleeps about `us` microseconds (a timed wait that nobody ends: the
/// deadline path of the `block` hook, one timer tick of granularity).
/// Fails the suite if the wait ends before its timeout or says its
/// condition held, or takes more than five seconds past its timeout.
pub fn snooze(ctx: &Ctx, us: u64) {
    let timeout = Duration::from_micros(us);
    let start = QemuKernel::clock_ns();
    if SNOOZE.wait_event_timeout(|| false, timeout) {
        ctx.fail("wait_event_timeout on a false condition returned true");
    }
    check_timed_out(ctx, start, timeout);
}

/// After a timed wait that started at `start` (`clock_ns`) and timed out:
/// fails the suite if it did not last its `timeout`, or lasted over five
/// seconds more (a deadline the tick never saw; a woken thread may wait
/// its turn behind two others on a vCPU the loaded host runs seldom, so
/// the bound is loose: one second was exceeded at -smp 8 under load 8).
pub fn check_timed_out(ctx: &Ctx, start: u64, timeout: Duration) {
    let took = QemuKernel::clock_ns().saturating_sub(start);
    let timeout = timeout.as_nanos() as u64;
    if took < timeout {
        ctx.fail("a timed wait timed out before its timeout");
    } else if took > timeout + 5_000_000_000 {
        ctx.fail("a timed wait lasted over five seconds past its timeout");
    }
}

/// No thread (a suite's victim before it is known).
pub const NONE: usize = usize::MAX;

/// A member's part in a suite with a starvation part (`sleep-mutex`,
/// `sleep-rwsem`): with `s` = 1 and `o` = 2 modulo the CPU count, the
/// *hogs* are the boot threads of CPUs `s` and `o` (with one CPU, threads
/// 0 and 2 of it), the *victim* is thread 1 of CPU `s` (beside one hog,
/// on another CPU than the other), every other member a *locker*.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Locker,
    Hog,
    Victim,
}

impl Role {
    /// This member's part.
    pub fn of(ctx: &Ctx) -> Self {
        let s = 1 % ctx.cpus;
        let o = (s + 1) % ctx.cpus;
        match (ctx.cpu, ctx.thread) {
            (cpu, 1) if cpu == s => Role::Victim,
            (cpu, 0) if cpu == s || (cpu == o && o != s) => Role::Hog,
            (cpu, 2) if cpu == s && o == s => Role::Hog,
            _ => Role::Locker,
        }
    }
}

/// A starvation part's monitor, for CPU 0's timer interrupt (`irq`):
/// fails the suite with `starved` if the victim (`victim`: its thread, or
/// [`NONE`]) has waited over `starve_bound_ms` in `victim_waits`, and with
/// `lost` if a thread has waited over `wait_bound_ms` in `waits`.
pub fn watch(
    ctx: &Ctx,
    (victim, victim_waits, starve_bound_ms, starved): (&AtomicUsize, &Waits, u64, &'static str),
    (waits, wait_bound_ms, lost): (&Waits, u64, &'static str),
) {
    if ctx.cpu != 0 {
        return;
    }
    let now = time::now();
    // Relaxed: a role, set once the victim starts; a hint.
    let victim = victim.load(Ordering::Relaxed);
    if victim != NONE && victim_waits.overdue([victim], now, starve_bound_ms) {
        ctx.fail(starved);
    }
    if waits.overdue(0..NR_THREADS, now, wait_bound_ms) {
        ctx.fail(lost);
    }
}

/// Per thread: since when (counter) it waits for something, 0 when it
/// does not; the longest wait that ended.
pub struct Waits {
    since: [AtomicU64; NR_THREADS],
    longest: AtomicU64,
}

impl Waits {
    pub const fn new() -> Self {
        Self {
            since: [const { AtomicU64::new(0) }; NR_THREADS],
            longest: AtomicU64::new(0),
        }
    }

    /// Before the run.
    pub fn reset(&self) {
        // Relaxed: before the run (the harness's barrier).
        for since in &self.since {
            since.store(0, Ordering::Relaxed);
        }
        self.longest.store(0, Ordering::Relaxed);
    }

    /// Thread `id` starts waiting.
    pub fn begin(&self, id: usize) {
        // Relaxed: a time stamp for the monitor, nothing hangs on it.
        self.since[id].store(time::now().max(1), Ordering::Relaxed);
    }

    /// Thread `id` stops waiting: how long it waited (counter ticks).
    pub fn end(&self, id: usize) -> u64 {
        // Relaxed: as in `begin`.
        let since = self.since[id].swap(0, Ordering::Relaxed);
        let waited = time::now().saturating_sub(since);
        self.longest.fetch_max(waited, Ordering::Relaxed);
        waited
    }

    /// Whether some thread (of `ids`) has waited more than `bound_ms` by
    /// `now` (counter).
    pub fn overdue(&self, ids: impl IntoIterator<Item = usize>, now: u64, bound_ms: u64) -> bool {
        let bound = time::ms_to_ticks(bound_ms);
        ids.into_iter().any(|id| {
            // Relaxed: as in `begin`.
            let since = self.since[id].load(Ordering::Relaxed);
            since != 0 && now.saturating_sub(since) > bound
        })
    }

    /// The longest wait that ended, in milliseconds.
    pub fn longest_ms(&self) -> u64 {
        time::ticks_to_ms(self.longest.load(Ordering::Relaxed))
    }
}
