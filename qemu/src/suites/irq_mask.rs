//! Interrupt masking is per CPU: two CPUs are inside
//! [`IrqState::save()`] at the same time, and both make progress there.
//!
//! ksync masks local interrupts with each architecture's own instructions
//! (`cli`, `DAIF`, `sstatus.SIE`; the kernel's `Kernel::irq_save` hook by
//! default). A `critical-section` implementation on a multi-core target
//! would instead take one lock shared by all CPUs, so that a CPU with
//! interrupts off holds every other CPU out of its own masked sections:
//! correct, but it serialises the machine. This suite shows the real masking
//! takes no such lock, with a handshake that needs no lucky timing:
//!
//! 1. a *host* masks its interrupts (`IrqState::save`), then announces it
//!    is inside;
//! 2. a *guest* on another CPU that sees the announcement masks its own
//!    interrupts and claims the host (a compare-exchange);
//! 3. both, still masked, play a ping-pong of [`RALLIES`] strokes on one
//!    word (each waits for the other's stroke, so both must run);
//! 4. both restore their interrupts.
//!
//! A host nobody claims within [`WAIT_US`] withdraws. With a shared lock a
//! guest cannot get past its `save()` while the host is masked, so no host
//! is ever claimed: the test needs every CPU to have met another inside
//! masked sections.
//!
//! # The control
//!
//! [`GlobalLockIrq`] masks like ksync and then takes one global spinlock,
//! what a multi-core `critical-section` implementation does: no two CPUs
//! ever meet, and the suite must fail.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ksync::spinlock::{ArchIrq, IrqControl, IrqState, KernelIrq};

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// How long a host waits for a guest, in microseconds of guest time.
pub const WAIT_US: u64 = 2_000;
/// Strokes of the ping-pong inside the masked sections (half by each).
pub const RALLIES: u64 = 16;

/// The handshake word: 0 when idle, else a CPU index + 1 in the low bits
/// and the state above.
const READY: usize = 1 << 16;
const CLAIMED: usize = 2 << 16;
const STATE: usize = 3 << 16;
const CPU: usize = 0xffff;

/// Interrupt masking through one lock shared by every CPU (the control):
/// the architecture's masking, then a global test-and-set lock.
pub struct GlobalLockIrq;

static GLOBAL: AtomicBool = AtomicBool::new(false);

// SAFETY: interrupts are masked on this CPU (ArchIrq) from `save` to
// `restore`, which is all the trait asks; the extra global lock only adds
// exclusion between CPUs. Used without nesting, by this suite only.
unsafe impl IrqControl for GlobalLockIrq {
    type Flags = <ArchIrq as IrqControl>::Flags;

    fn save() -> Self::Flags {
        let flags = ArchIrq::save();
        // Acquire pairs with the Release in `restore`: a plain spinlock.
        while GLOBAL.swap(true, Ordering::Acquire) {
            core::hint::spin_loop();
        }
        flags
    }

    unsafe fn restore(flags: Self::Flags) {
        GLOBAL.store(false, Ordering::Release);
        // SAFETY: forwarded caller contract.
        unsafe { ArchIrq::restore(flags) }
    }
}

/// The suite, over a way to mask interrupts.
pub struct IrqMask<I: IrqControl + 'static> {
    info: Info,
    word: AtomicUsize,
    /// The ping-pong: odd strokes are the guest's, even ones the host's.
    ball: AtomicU64,
    /// Per CPU: meetings as the host and as the guest.
    hosted: Counters,
    visited: Counters,
    /// Per CPU: hosts nobody claimed.
    withdrawn: Counters,
    /// Per CPU: timer interrupts during the suite.
    ticks: Counters,
    irq: PhantomData<fn() -> I>,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// ksync's masking, through the kernel's hook (the default `IrqState`).
pub static TEST: IrqMask<KernelIrq> = IrqMask::new(Info::new("irq-mask", Kind::Test, 750));
/// The control: masking behind one global lock.
pub static CONTROL: IrqMask<GlobalLockIrq> =
    IrqMask::new(Info::new("irq-mask-global", Kind::Control, 750));

impl<I: IrqControl> IrqMask<I> {
    const fn new(info: Info) -> Self {
        Self {
            info,
            word: AtomicUsize::new(0),
            ball: AtomicU64::new(0),
            hosted: Counters::new(),
            visited: Counters::new(),
            withdrawn: Counters::new(),
            ticks: Counters::new(),
            irq: PhantomData,
        }
    }

    /// Waits until the ball shows `stroke` (the other side's), then plays
    /// `stroke + 1`.
    fn rally(&self, stroke: u64) {
        // Acquire pairs with the other side's Release stroke: a chain of
        // hand-overs, each CPU waiting for the other to run.
        while self.ball.load(Ordering::Acquire) != stroke {
            core::hint::spin_loop();
        }
        self.ball.store(stroke + 1, Ordering::Release);
    }

    /// Masks, announces, waits for a guest; plays the even strokes.
    fn host(&self, cpu: usize) {
        let me = cpu + 1;
        let _irq = IrqState::<I>::save_with();
        // Acquire pairs with the Release by which the last guest freed the
        // slot (after it reset the ball); Release hands that on to our
        // guest's Acquire claim: the ball is 0 for both of us.
        if self
            .word
            .compare_exchange(0, me | READY, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return; // another host is on
        }
        let deadline = time::now() + time::hz() / 1_000_000 * WAIT_US;
        let mut spins = 0u32;
        // Relaxed: the ball carries the hand-over.
        while self.word.load(Ordering::Relaxed) & STATE != CLAIMED {
            spins = spins.wrapping_add(1);
            // Relaxed: withdrawing publishes nothing.
            if spins.is_multiple_of(64)
                && time::now() > deadline
                && self
                    .word
                    .compare_exchange(me | READY, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                self.withdrawn.add(cpu, 1);
                return; // nobody came
            }
            core::hint::spin_loop();
        }
        // Claimed: both of us are masked now. Play the even strokes.
        for stroke in (1..RALLIES).step_by(2) {
            self.rally(stroke);
        }
        // The guest frees the slot once it has seen our last stroke.
        self.hosted.add(cpu, 1);
    }

    /// If a host on another CPU is announced: masks, claims it, plays the
    /// odd strokes.
    fn guest(&self, cpu: usize) {
        // Relaxed: a hint; the claim decides.
        let ready = self.word.load(Ordering::Relaxed);
        if ready & STATE != READY || ready & CPU == cpu + 1 {
            return;
        }
        let _irq = IrqState::<I>::save_with();
        // Acquire pairs with the host's Release announcement: ball = 0.
        if self
            .word
            .compare_exchange(
                ready,
                (cpu + 1) | CLAIMED,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return; // it withdrew, or another guest came first
        }
        for stroke in (0..RALLIES).step_by(2) {
            self.rally(stroke);
        }
        // The host's last stroke: it was inside until then.
        while self.ball.load(Ordering::Acquire) != RALLIES {
            core::hint::spin_loop();
        }
        // Free the slot for the next host, ball reset first. Relaxed, then
        // Release: pairs with the next host's Acquire claim of the slot.
        self.ball.store(0, Ordering::Relaxed);
        self.word.store(0, Ordering::Release);
        self.visited.add(cpu, 1);
    }
}

impl<I: IrqControl> Suite for IrqMask<I> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // Relaxed: the runner's barriers order setup before every run.
        self.word.store(0, Ordering::Relaxed);
        self.ball.store(0, Ordering::Relaxed);
        GLOBAL.store(false, Ordering::Relaxed);
        self.hosted.reset();
        self.visited.reset();
        self.withdrawn.reset();
        self.ticks.reset();
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::new(ctx.cpu as u64 + 11);
        while !ctx.should_stop() {
            // Mostly guests, now and then a host; unmasked work in between
            // lets the timer interrupts in.
            if rng.below(4) == 0 {
                self.host(ctx.cpu);
            } else {
                self.guest(ctx.cpu);
            }
            busy_work(64 + rng.below(256) as u32);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        self.ticks.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        self.info.report_per_cpu(
            cpus,
            &[
                ("hosted", &self.hosted),
                ("visited", &self.visited),
                ("withdrawn", &self.withdrawn),
                ("ticks", &self.ticks),
            ],
        );
        let met = |cpu| self.hosted.get(cpu) + self.visited.get(cpu);
        let meetings = self.hosted.sum(cpus);
        let (lo, hi) = (0..cpus)
            .map(met)
            .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
        // One meeting proves the point. Not every CPU need meet: on a
        // loaded host two vCPUs may hog the handshake while the others'
        // threads wait for a host core.
        let failure = (meetings == 0).then_some(
            "no two CPUs were ever inside IrqState::save() at once: masking excludes CPUs",
        );
        self.info.report(format_args!(
            "{meetings} meetings of two CPUs with interrupts masked, {RALLIES} strokes each; {} hosts withdrawn",
            self.withdrawn.sum(cpus)
        ));
        Summary::new(meetings, (lo, hi), failure)
    }
}
