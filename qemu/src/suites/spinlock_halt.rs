//! Lost wake-ups with a lock wait that really halts: every CPU takes
//! ksync's queued, ticket and TTAS locks and `LockRef`'s lock over and over
//! in thread context (interrupts on), with the kernel's spin-wait policy
//! set to [`spin::HALTING`]: a waiter that has spun for a bounded time
//! halts (x86_64 `hlt`, riscv64 `wfi`, aarch64 `wfe`) until a kick (an IPI,
//! `sev`) wakes it, and returns only when kicked. A store that ends some
//! waiter's wait without a kick leaves that waiter halted; after
//! [`spin::LOST_KICK_MS`] it gives up and the suite fails with "a halted
//! waiter was never kicked".
//!
//! CPU 0 switches ksync's mode between FIFO hand-off and test-and-set
//! (preemptible) every [`MODE_PERIOD_MS`] while the others contend, so both
//! modes and the switch between them (a waiter that halted in one mode,
//! woken by an unlocker in the other) are exercised. In FIFO mode the
//! queued lock's waiters halt (the pending CPU, the queue head waiting for
//! the owner or for its successor's link, queued CPUs waiting for the
//! hand-off); in preemptible mode every lock's test-and-set waiters do.
//!
//! The last [`FINAL_MS`] of the run every CPU takes one lock (the ticket
//! lock, TTAS or `LockRef`'s, by the seed) with long critical sections, so
//! that its test-and-set waiters halt, and two thirds of the way through
//! CPU 0 switches to FIFO: from then on the lock's unlocks are FIFO-mode
//! unlocks, the only ones left to wake those waiters. (Before the fix
//! they did not kick, and every waiter halted at the switch stayed halted
//! past the end of the run.) Kicks are process-wide, so a lost wake-up
//! earlier in the run is often hidden by a later kick; this phase leaves
//! no later kick.
//!
//! The checks of the other lock suites hold inside each lock (one holder,
//! no torn update, exact counts), and the suite fails if no waiter ever
//! halted (it would test nothing).
//!
//! # The control
//!
//! `spinlock-halt-nokick`: the same run with the kick dropped
//! ([`spin::DROPPED_KICK`]): waiters halt and nobody wakes them, which the
//! suite must report as lost wake-ups.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::LockRef;
use ksync::kernel::{self as ksync_kernel, SpinWait};
use ksync::spinlock::{QueuedMutex, TicketMutex, TtasMutex};

use super::{Rng, bump_pair, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::{spin, time};

/// Critical section length, in `busy_work` iterations: long enough that
/// waiters exhaust their bounded spin and halt.
const CS_WORK: u32 = 64;
/// How often CPU 0 switches the mode.
const MODE_PERIOD_MS: u64 = 100;
/// The final phase: one lock, preemptible, then FIFO (see the module docs).
const FINAL_MS: u64 = 300;
/// Its critical sections, in `busy_work` iterations: waiters outlast their
/// bounded spin and halt.
const FINAL_CS_WORK: u32 = 4000;

/// One lock's checks: the holder word and the counter pair.
struct Checked {
    holder: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    acquisitions: Counters,
}

impl Checked {
    const fn new() -> Self {
        Self {
            holder: AtomicUsize::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            acquisitions: Counters::new(),
        }
    }

    fn reset(&self) {
        self.holder.store(0, Ordering::Relaxed);
        self.first.store(0, Ordering::Relaxed);
        self.second.store(0, Ordering::Relaxed);
        self.acquisitions.reset();
    }

    /// The critical section (the lock is held by the caller).
    fn inside(&self, ctx: &Ctx, work: u32) {
        let me = ctx.cpu + 1;
        // Relaxed, as in the other lock suites: the lock orders these.
        if self.holder.swap(me, Ordering::Relaxed) != 0 {
            ctx.fail("two holders inside the critical section (found another on entry)");
        }
        bump_pair(
            ctx,
            &self.first,
            &self.second,
            work,
            "torn update inside the critical section",
        );
        if self.holder.swap(0, Ordering::Relaxed) != me {
            ctx.fail("two holders inside the critical section (found another on exit)");
        }
        self.acquisitions.add(ctx.cpu, 1);
    }

    /// Whether the counters match the acquisitions.
    fn exact(&self, cpus: usize) -> bool {
        let total = self.acquisitions.sum(cpus);
        self.first.load(Ordering::Relaxed) == total && self.second.load(Ordering::Relaxed) == total
    }
}

/// The suite: four locks, one policy.
pub struct HaltTorture {
    info: Info,
    policy: &'static SpinWait,
    queued: QueuedMutex<()>,
    ticket: TicketMutex<()>,
    ttas: TtasMutex<()>,
    lockref: LockRef,
    checks: [Checked; 4],
    /// CPU 0's next mode switch (counter ticks).
    next_switch: AtomicU64,
    switches: AtomicU64,
    /// When the run's final phase starts (ticks).
    final_phase: AtomicU64,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&HALT, &NO_KICK];

/// Every waiter halts until kicked.
pub static HALT: HaltTorture =
    HaltTorture::new(Info::new("spinlock-halt", Kind::Test, 1500), &spin::HALTING);
/// The control: the kick is dropped.
pub static NO_KICK: HaltTorture = HaltTorture::new(
    Info::new("spinlock-halt-nokick", Kind::Control, 1000),
    &spin::DROPPED_KICK,
);

const NAMES: [&str; 4] = ["queued", "ticket", "TTAS", "lockref"];

impl HaltTorture {
    const fn new(info: Info, policy: &'static SpinWait) -> Self {
        Self {
            info,
            policy,
            queued: QueuedMutex::new(()),
            ticket: TicketMutex::new(()),
            ttas: TtasMutex::new(()),
            lockref: LockRef::new(0),
            checks: [const { Checked::new() }; 4],
            next_switch: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            final_phase: AtomicU64::new(0),
        }
    }

    fn section(&self, ctx: &Ctx, which: usize, work: u32) {
        let checks = &self.checks[which];
        match which {
            0 => {
                let _guard = self.queued.lock();
                checks.inside(ctx, work);
            }
            1 => {
                let _guard = self.ticket.lock();
                checks.inside(ctx, work);
            }
            2 => {
                let _guard = self.ttas.lock();
                checks.inside(ctx, work);
            }
            _ => {
                let _guard = self.lockref.lock();
                checks.inside(ctx, work);
            }
        }
    }

    /// CPU 0: flips the mode when its period is up; in the final phase,
    /// preemptible for its first two thirds, then FIFO for good.
    fn maybe_switch(&self, now: u64) {
        // Relaxed: CPU 0 only, and set in `setup`.
        let final_phase = self.final_phase.load(Ordering::Relaxed);
        if now >= final_phase {
            let preemptible = now < final_phase + time::ms_to_ticks(FINAL_MS * 2 / 3);
            if ksync_kernel::vcpu_preemptible() != preemptible {
                ksync_kernel::set_vcpu_preemptible(preemptible);
                self.switches.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        // Relaxed: CPU 0 only.
        if now < self.next_switch.load(Ordering::Relaxed) {
            return;
        }
        self.next_switch
            .store(now + time::ms_to_ticks(MODE_PERIOD_MS), Ordering::Relaxed);
        let n = self.switches.fetch_add(1, Ordering::Relaxed);
        ksync_kernel::set_vcpu_preemptible(n % 2 == 1);
    }
}

impl Suite for HaltTorture {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        for c in &self.checks {
            c.reset();
        }
        self.next_switch.store(0, Ordering::Relaxed);
        self.switches.store(0, Ordering::Relaxed);
        // The runner sets the deadline `budget` after `setup`.
        let now = time::now();
        self.final_phase.store(
            now + time::ms_to_ticks(self.budget_ms().saturating_sub(FINAL_MS)),
            Ordering::Relaxed,
        );
        spin::reset_halting();
        // The run flips the mode: `finish` puts this one back.
        spin::save();
        // Before the other CPUs start (the runner's barrier orders it).
        ksync_kernel::set_spin_wait(self.policy);
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 23);
        // Mostly one lock at a time, so that waiters pile up on it.
        let mut which = ctx.cpu % 4;
        // The final phase's lock: ticket, TTAS or lockref.
        let last = 1 + (ctx.seed() % 3) as usize;
        // Relaxed: written in `setup`, before the runner's barrier.
        let final_phase = self.final_phase.load(Ordering::Relaxed);
        while !ctx.should_stop() {
            if spin::halting_counts().2 != 0 {
                ctx.fail("a halted waiter was never kicked (lost wake-up)");
            }
            let now = time::now();
            if ctx.cpu == 0 {
                self.maybe_switch(now);
            }
            if now >= final_phase {
                self.section(ctx, last, FINAL_CS_WORK);
                continue;
            }
            if rng.below(32) == 0 {
                which = (which + 1) % 4;
            }
            self.section(ctx, which, CS_WORK);
            busy_work(rng.below(16) as u32);
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        // Every CPU is back from `run`: nobody waits in the halting policy.
        ksync_kernel::set_spin_wait(&spin::SPINNING);
        spin::restore();
        let (halts, kicks, lost) = spin::halting_counts();
        let mut total = 0;
        let mut exact = true;
        for (name, c) in NAMES.iter().zip(&self.checks) {
            let n = c.acquisitions.sum(cpus);
            total += n;
            exact &= c.exact(cpus);
            self.info.report(format_args!(
                "{name}: {n} acquisitions, counters {}/{}",
                c.first.load(Ordering::Relaxed),
                c.second.load(Ordering::Relaxed)
            ));
        }
        self.info.report(format_args!(
            "{halts} halts, {kicks} kicks, {lost} lost wake-ups (waiters that gave up after {} ms), {} mode switches",
            spin::LOST_KICK_MS,
            self.switches.load(Ordering::Relaxed)
        ));
        let per_cpu = Counters::new();
        for cpu in 0..cpus {
            per_cpu.add(
                cpu,
                self.checks.iter().map(|c| c.acquisitions.get(cpu)).sum(),
            );
        }
        let failure = if lost != 0 {
            Some("a halted waiter was never kicked (lost wake-up)")
        } else if !exact {
            Some("lost updates: the counters do not match the acquisitions")
        } else if halts == 0 {
            Some("no waiter ever halted: the suite tested nothing")
        } else {
            None
        };
        Summary::new(total, per_cpu.min_max(cpus), failure)
    }
}
