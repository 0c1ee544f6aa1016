//! Spinlock torture, after Linux's locktorture: every CPU takes one lock over
//! and over, in thread context and from its timer interrupt, and checks that
//! it is alone inside.
//!
//! The locks are ksync's [`IrqTicketMutex`], [`IrqTtasMutex`] and
//! [`IrqQueuedMutex`]: interrupt handlers take them too, so thread context
//! must hold them with interrupts off, which is what the `Irq` variants do
//! (`RawIrqSave`).
//!
//! The queued lock's suites also take a second, thread-only [`QueuedMutex`]
//! with interrupts *on* (the *side* lock, its own holder word and counters),
//! so a timer interrupt can arrive while the thread is queued on it and
//! queue on the main lock from the same CPU: the per-CPU node of the next
//! nesting level. This kernel runs in ksync's oversubscribed mode (test-and-
//! set hand-off, `kernel::spin`), where nobody queues; `spinlock-queued-fifo`
//! switches to strict FIFO for its run, so the pending bit, the MCS queue
//! and the nested nodes are exercised too.
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
//! `RawIrqSave` adapter: the checks must catch it. `spinlock-queued-split`
//! is a real `IrqQueuedMutex`, but the timer interrupt takes a second
//! instance of it (two locks guarding one datum): interrupt holders
//! overlap thread holders on other CPUs, and the checks must catch that.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::lock_api::{self, GuardSend, RawMutex};
use ksync::spinlock::{IrqQueuedMutex, IrqTicketMutex, IrqTtasMutex, QueuedMutex, RawIrqSave};

use super::{Rng, bump_pair, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::spin;

/// Critical section length, in `busy_work` iterations.
const CS_WORK: u32 = 16;
/// Acquisitions per timer interrupt.
const IRQ_ACQUISITIONS: u32 = 1;
/// Thread-context iterations per side-lock acquisition.
const SIDE_EVERY: u64 = 4;

/// The raw lock of the `Irq*Mutex` aliases over algorithm `A` (the
/// `IrqDisabled` policy: `IrqTicketMutex<T>` is `SpinLock<T, IrqDisabled>`).
type IrqRaw<A> = ksync::spinlock::RawSpinlock<A, ksync::spinlock::IrqDisabled>;

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
    type GuardMarker = GuardSend;

    fn lock(&self) {}

    fn try_lock(&self) -> bool {
        true
    }

    unsafe fn unlock(&self) {}

    fn is_locked(&self) -> bool {
        false
    }
}

/// The thread-only lock of the queued suites, taken with interrupts on,
/// and what it guards.
pub struct Side {
    lock: QueuedMutex<()>,
    holder: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    acquisitions: Counters,
}

impl Side {
    const fn new() -> Self {
        Self {
            lock: QueuedMutex::new(()),
            holder: AtomicUsize::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            acquisitions: Counters::new(),
        }
    }
}

/// The suite, over any raw lock.
pub struct SpinTorture<R: RawMutex + 'static> {
    info: Info,
    lock: lock_api::Mutex<R, ()>,
    /// The lock the timer interrupt takes when it is not `lock`: the
    /// split-lock control.
    irq_lock: Option<lock_api::Mutex<R, ()>>,
    /// Strict FIFO hand-off during the run (`kernel::spin`).
    fifo: bool,
    /// The thread-only side lock, if the suite has one.
    side: Option<Side>,
    /// 0, or the id of the context inside (see `who`).
    holder: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    acquisitions: Counters,
    irq_acquisitions: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TICKET, &TTAS, &QUEUED, &QUEUED_FIFO, &CONTROL, &SPLIT];

/// The fair ticket lock, IRQ-saving.
pub static TICKET: SpinTorture<IrqRaw<ksync::spinlock::TicketLock>> = SpinTorture::new(
    Info::new("spinlock-ticket", Kind::Test, 750),
    IrqTicketMutex::new(()),
);
/// The TTAS lock, IRQ-saving.
pub static TTAS: SpinTorture<IrqRaw<ksync::spinlock::TtasLock>> = SpinTorture::new(
    Info::new("spinlock-ttas", Kind::Test, 750),
    IrqTtasMutex::new(()),
);
/// The queued lock, IRQ-saving, with the side lock, in the boot's mode
/// (oversubscribed: test-and-set hand-off).
pub static QUEUED: SpinTorture<IrqRaw<ksync::spinlock::QueuedLock>> = SpinTorture::new(
    Info::new("spinlock-queued", Kind::Test, 750),
    IrqQueuedMutex::new(()),
)
.with_side();
/// The same in strict FIFO mode: pending bit, MCS queue, nested nodes.
pub static QUEUED_FIFO: SpinTorture<IrqRaw<ksync::spinlock::QueuedLock>> = SpinTorture::new(
    Info::new("spinlock-queued-fifo", Kind::Test, 750),
    IrqQueuedMutex::new(()),
)
.with_side()
.fifo();
/// The control of the queued lock: the interrupt takes another instance.
pub static SPLIT: SpinTorture<IrqRaw<ksync::spinlock::QueuedLock>> = SpinTorture::new(
    Info::new("spinlock-queued-split", Kind::Control, 750),
    IrqQueuedMutex::new(()),
)
.with_side()
.split_irq_lock(IrqQueuedMutex::new(()));
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
            irq_lock: None,
            fifo: false,
            side: None,
            holder: AtomicUsize::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            acquisitions: Counters::new(),
            irq_acquisitions: Counters::new(),
        }
    }

    const fn with_side(mut self) -> Self {
        // The old value is `None`; forgetting it keeps the drop out of the
        // const evaluation (with lockdep, the locks have a destructor;
        // without it they have none, hence the allow).
        #[allow(clippy::forget_non_drop)]
        core::mem::forget(self.side.replace(Side::new()));
        self
    }

    const fn fifo(mut self) -> Self {
        self.fifo = true;
        self
    }

    const fn split_irq_lock(mut self, lock: lock_api::Mutex<R, ()>) -> Self {
        // The old value is `None`; forgetting it keeps the drop out of the
        // const evaluation.
        core::mem::forget(self.irq_lock.replace(lock));
        self
    }

    fn critical_section(&self, ctx: &Ctx, me: usize, lock: &lock_api::Mutex<R, ()>) {
        let _guard = lock.lock();
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
        if let Some(side) = &self.side {
            side.holder.store(0, Ordering::Relaxed);
            side.first.store(0, Ordering::Relaxed);
            side.second.store(0, Ordering::Relaxed);
            side.acquisitions.reset();
        }
        if self.fifo {
            spin::set_fifo_for_suite();
        }
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 7);
        let me = who(ctx.cpu, false);
        let mut round = 0u64;
        while !ctx.should_stop() {
            round += 1;
            if let Some(side) = &self.side
                && round.is_multiple_of(SIDE_EVERY)
            {
                side_section(ctx, side, me);
                continue;
            }
            self.critical_section(ctx, me, &self.lock);
            self.acquisitions.add(ctx.cpu, 1);
            // Some work outside, of varying length, so CPUs do not stay in
            // lock step.
            busy_work(rng.below(64) as u32);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        let me = who(ctx.cpu, true);
        let lock = self.irq_lock.as_ref().unwrap_or(&self.lock);
        for _ in 0..IRQ_ACQUISITIONS {
            self.critical_section(ctx, me, lock);
        }
        self.irq_acquisitions
            .add(ctx.cpu, u64::from(IRQ_ACQUISITIONS));
    }

    fn finish(&self, cpus: usize) -> Summary {
        if self.fifo {
            spin::restore();
        }
        let total = self.acquisitions.sum(cpus) + self.irq_acquisitions.sum(cpus);
        let first = self.first.load(Ordering::Relaxed);
        let second = self.second.load(Ordering::Relaxed);
        let mut failure = (first != total || second != total)
            .then_some("lost updates: the counters do not match the acquisitions");
        if let Some(side) = &self.side {
            let side_total = side.acquisitions.sum(cpus);
            let (a, b) = (
                side.first.load(Ordering::Relaxed),
                side.second.load(Ordering::Relaxed),
            );
            self.info.report(format_args!(
                "side lock (interrupts on): {side_total} acquisitions, counters {a}/{b}"
            ));
            if failure.is_none() && (a != side_total || b != side_total) {
                failure = Some("lost updates under the side lock");
            }
        }
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

/// One acquisition of the side lock, with interrupts on: a timer interrupt
/// may arrive while this CPU waits or holds it, and take the main lock.
fn side_section(ctx: &Ctx, side: &Side, me: usize) {
    let _guard = side.lock.lock();
    // Relaxed, as in `SpinTorture::critical_section`.
    if side.holder.swap(me, Ordering::Relaxed) != 0 {
        ctx.fail("two holders inside the side lock (found another on entry)");
    }
    bump_pair(
        ctx,
        &side.first,
        &side.second,
        CS_WORK,
        "torn update inside the side lock",
    );
    if side.holder.swap(0, Ordering::Relaxed) != me {
        ctx.fail("two holders inside the side lock (found another on exit)");
    }
    side.acquisitions.add(ctx.cpu, 1);
}
