//! Spinlock torture, after Linux's locktorture: every CPU takes one lock over
//! and over, in thread context and from its timer interrupt, and checks that
//! it is alone inside.
//!
//! The locks are ksync's [`IrqTicketMutex`] and [`IrqTtasMutex`]: interrupt
//! handlers take them too, so thread context must hold them with interrupts
//! off, which is what the `Irq` variants do (`RawIrqSave`).
//!
//! # Checks
//!
//! * Whoever enters swaps its id into `holder` and expects 0; on the way
//!   out it swaps 0 back and expects its own id. Any overlap shows in one of
//!   the two.
//! * Inside, two counters are incremented non-atomically (load, work,
//!   store) with work in between; overlapping holders lose updates, so at the
//!   end both must equal the number of acquisitions, and inside, the second
//!   must equal the first.
//!
//! Per CPU, thread-context acquisitions show the lock's fairness: the ticket
//! lock serves in arrival order, the TTAS lock lets whoever wins the race in.
//!
//! # The control
//!
//! [`NoExclusion`] is a "lock" that lets everybody in, wrapped in the same
//! `RawIrqSave` adapter: the checks must catch it.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::lock_api::{self, GuardSend, RawMutex};
use ksync::spinlock::{IrqTicketMutex, IrqTtasMutex, RawIrqSave};

use super::{Rng, bump_pair, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;

/// Critical section length, in `busy_work` iterations.
const CS_WORK: u32 = 16;
/// Acquisitions per timer interrupt.
const IRQ_ACQUISITIONS: u32 = 1;

/// A lock that excludes nobody: the control.
pub struct NoExclusion;

// SAFETY: deliberately NOT upheld: `lock` always succeeds at once, so many
// holders coexist. It only ever guards `()` (a zero-sized value, so the
// aliasing `&mut ()` of coexisting guards touch no memory) in the control
// suite, whose shared data are atomics: the missing exclusion shows up in
// the checks, not as undefined behaviour.
unsafe impl RawMutex for NoExclusion {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = NoExclusion;
    type Guard = GuardSend;

    fn lock(&self) -> GuardSend {
        GuardSend::default()
    }

    fn try_lock(&self) -> Option<GuardSend> {
        Some(GuardSend::default())
    }

    unsafe fn unlock(&self, _guard: GuardSend) {}

    fn is_locked(&self) -> bool {
        false
    }
}

/// The suite, over any raw lock.
pub struct SpinTorture<R: RawMutex + 'static> {
    info: Info,
    lock: lock_api::Mutex<R, ()>,
    /// 0, or the id of the context inside (see `who`).
    holder: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    acquisitions: Counters,
    irq_acquisitions: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TICKET, &TTAS, &CONTROL];

/// The fair ticket lock, IRQ-saving.
pub static TICKET: SpinTorture<RawIrqSave<ksync::spinlock::RawTicketLock>> = SpinTorture::new(
    Info::new("spinlock-ticket", Kind::Test, 750),
    IrqTicketMutex::new(()),
);
/// The TTAS lock, IRQ-saving.
pub static TTAS: SpinTorture<RawIrqSave<ksync::spinlock::RawTtasLock>> = SpinTorture::new(
    Info::new("spinlock-ttas", Kind::Test, 750),
    IrqTtasMutex::new(()),
);
/// The control: no exclusion at all.
pub static CONTROL: SpinTorture<RawIrqSave<NoExclusion>> = SpinTorture::new(
    Info::new("spinlock-noexcl", Kind::Control, 750),
    lock_api::Mutex::new(()),
);

/// A context's id in `holder`: thread and interrupt context of each CPU
/// differ, and none is 0.
fn who(cpu: usize, in_irq: bool) -> usize {
    2 * cpu + 1 + usize::from(in_irq)
}

impl<R: RawMutex> SpinTorture<R> {
    const fn new(info: Info, lock: lock_api::Mutex<R, ()>) -> Self {
        Self {
            info,
            lock,
            holder: AtomicUsize::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            acquisitions: Counters::new(),
            irq_acquisitions: Counters::new(),
        }
    }

    fn critical_section(&self, ctx: &Ctx, me: usize) {
        let _guard = self.lock.lock();
        // Relaxed throughout: with a working lock, the lock's own
        // Acquire/Release orders these; without one, coherence of each
        // location alone makes overlaps visible in the swaps.
        if self.holder.swap(me, Ordering::Relaxed) != 0 {
            ctx.fail("two holders inside the critical section (found another on entry)");
        }
        bump_pair(
            ctx,
            &self.first,
            &self.second,
            CS_WORK,
            "torn update inside the critical section",
        );
        if self.holder.swap(0, Ordering::Relaxed) != me {
            ctx.fail("two holders inside the critical section (found another on exit)");
        }
    }
}

impl<R: RawMutex + Sync> Suite for SpinTorture<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        self.holder.store(0, Ordering::Relaxed);
        self.first.store(0, Ordering::Relaxed);
        self.second.store(0, Ordering::Relaxed);
        self.acquisitions.reset();
        self.irq_acquisitions.reset();
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 7);
        let me = who(ctx.cpu, false);
        while !ctx.should_stop() {
            self.critical_section(ctx, me);
            self.acquisitions.add(ctx.cpu, 1);
            // Some work outside, of varying length, so CPUs do not stay in
            // lock step.
            busy_work(rng.below(64) as u32);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        let me = who(ctx.cpu, true);
        for _ in 0..IRQ_ACQUISITIONS {
            self.critical_section(ctx, me);
        }
        self.irq_acquisitions
            .add(ctx.cpu, u64::from(IRQ_ACQUISITIONS));
    }

    fn finish(&self, cpus: usize) -> Summary {
        let total = self.acquisitions.sum(cpus) + self.irq_acquisitions.sum(cpus);
        let first = self.first.load(Ordering::Relaxed);
        let second = self.second.load(Ordering::Relaxed);
        let failure = (first != total || second != total)
            .then_some("lost updates: the counters do not match the acquisitions");
        self.info.report_per_cpu(
            cpus,
            &[
                ("acquisitions", &self.acquisitions),
                ("irq_acquisitions", &self.irq_acquisitions),
            ],
        );
        let (cpu_min, cpu_max) = self.acquisitions.min_max(cpus);
        self.info.report(format_args!(
            "{total} acquisitions, counters {first}/{second}; fairness (thread context) min {cpu_min} max {cpu_max}"
        ));
        Summary::new(total, (cpu_min, cpu_max), failure)
    }
}
