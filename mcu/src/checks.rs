//! The checks: thread mode and the SysTick handler on the same object,
//! counting their operations; a check passes when the object's final state
//! is exactly what both sides' counts say, and the handler really ran.
//!
//! Each prints one line, `KSYNC-MCU check=NAME result=PASS|FAIL ...`.
//!
//! The rule every check follows is Linux's: a lock (or lockref, or
//! seqlock writer) that an interrupt handler also takes is taken with local
//! interrupts disabled in thread mode (an IRQ-saving lock, `IrqState`, or
//! `SeqLock::write_irqsave`); the handler itself uses `try_lock` or forms
//! that cannot find the object held by the code it interrupted.

use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering::Relaxed};

use ksync::lock_api::{Mutex, RawMutex};
use ksync::percpu::{ConstInit, PerCpu};
use ksync::percpu_counter::PerCpuCounter;
use ksync::seqlock::SeqLock;
use ksync::spinlock::{ArchIrqTtasMutex, IrqState, IrqTicketMutex, TicketMutex};
use ksync::{LockRef, lockref};

use crate::tick::{self, IRQ, bump};

/// The target, for the boot line.
pub const TARGET: &str = if cfg!(target_has_atomic = "32") {
    "thumbv7em-none-eabihf (Cortex-M4, mps2-an386)"
} else {
    "thumbv6m-none-eabi (Cortex-M0, microbit)"
};

/// SysTick interrupts per check (10 kHz: 50 ms of emulated time).
const TICKS: u32 = 500;

/// Iterations of the pause inside a read-modify-write: long enough (and
/// with branches, so TCG ends translation blocks inside it) that a tick
/// lands between the load and the store when nothing stops it.
const WINDOW: u32 = 16;

/// A pause the compiler cannot remove.
#[inline(never)]
fn window() {
    for _ in 0..WINDOW {
        cortex_m::asm::nop();
    }
}

/// One check's outcome, printed as the `KSYNC-MCU check=` line.
struct Report {
    name: &'static str,
    thread: u32,
    /// The object's final state (a count or a sum).
    total: i64,
    why: Option<&'static str>,
}

impl Report {
    fn print(&self) -> bool {
        let (ops, busy, bad) = (
            IRQ.ops.load(Relaxed),
            IRQ.busy.load(Relaxed),
            IRQ.bad.load(Relaxed),
        );
        let result = if self.why.is_none() { "PASS" } else { "FAIL" };
        defmt::info!(
            "KSYNC-MCU check={=str} result={=str} thread={=u32} irq={=u32} busy={=u32} bad={=u32} total={=i64} why={=str}",
            self.name,
            result,
            self.thread,
            ops,
            busy,
            bad,
            self.total,
            self.why.unwrap_or("-")
        );
        self.why.is_none()
    }
}

/// Runs `step` against `hook` for [`TICKS`] ticks; then `judge(thread
/// steps)` returns the object's final state and what went wrong, if
/// anything.
fn run(
    name: &'static str,
    hook: fn(),
    step: impl FnMut(),
    judge: impl FnOnce(u32) -> (i64, Option<&'static str>),
) -> bool {
    tick::install(hook);
    let steps = tick::drive(TICKS, step);
    tick::uninstall();
    let report = match steps {
        None => Report {
            name,
            thread: 0,
            total: 0,
            why: Some("SysTick never fired"),
        },
        Some(thread) => {
            let (total, mut why) = judge(thread);
            if IRQ.ops.load(Relaxed) == 0 {
                why = Some("the handler never completed an operation");
            }
            Report {
                name,
                thread,
                total,
                why,
            }
        }
    };
    report.print()
}

// ---- spinlocks --------------------------------------------------------------

/// A lock that neither masks interrupts nor excludes: the control of the
/// spinlock checks. Its data is only ever read through `&` (atomic loads
/// and stores), so two "holders" at once lose updates but are not UB.
pub struct NoExclusion;

// SAFETY: deliberately broken (it excludes nobody), for a must-fail
// control only; the checks never take `&mut` to the data (no `DerefMut`
// on the guard is used), so what it breaks is the count, not memory
// safety.
unsafe impl RawMutex for NoExclusion {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = NoExclusion;
    type GuardMarker = ksync::lock_api::GuardSend;

    fn lock(&self) {}

    fn try_lock(&self) -> bool {
        true
    }

    unsafe fn unlock(&self) {}

    fn is_locked(&self) -> bool {
        false
    }
}

static TICKET_IRQ: IrqTicketMutex<AtomicU32> = IrqTicketMutex::new(AtomicU32::new(0));
static TTAS_ARCH: ArchIrqTtasMutex<AtomicU32> = ArchIrqTtasMutex::new(AtomicU32::new(0));
static TICKET_PLAIN: TicketMutex<AtomicU32> = TicketMutex::new(AtomicU32::new(0));
static NO_EXCL: Mutex<NoExclusion, AtomicU32> = Mutex::from_raw(NoExclusion, AtomicU32::new(0));

/// The handler's step: add one if the lock is free, else give up.
fn spin_irq<R: RawMutex>(lock: &Mutex<R, AtomicU32>) {
    match lock.try_lock() {
        Some(value) => {
            value.store(value.load(Relaxed) + 1, Relaxed);
            bump(&IRQ.ops);
        }
        None => bump(&IRQ.busy),
    }
}

/// Thread mode adds one under the lock with a pause between load and
/// store; the handler adds one whenever `try_lock` succeeds. `masks`: the
/// lock masks interrupts, so the handler must never find it held.
fn spin_check<R: RawMutex>(
    name: &'static str,
    lock: &'static Mutex<R, AtomicU32>,
    hook: fn(),
    masks: bool,
) -> bool {
    lock.lock().store(0, Relaxed);
    run(
        name,
        hook,
        || {
            let value = lock.lock();
            let seen = value.load(Relaxed);
            window();
            value.store(seen + 1, Relaxed);
        },
        |thread| {
            let total = lock.lock().load(Relaxed);
            let why = if total != thread + IRQ.ops.load(Relaxed) {
                Some("lost updates: total != thread + irq")
            } else if masks && IRQ.busy.load(Relaxed) != 0 {
                Some("the handler found an IRQ-saving lock held")
            } else {
                None
            };
            (total.into(), why)
        },
    )
}

// ---- lockref ------------------------------------------------------------------

static LOCKREF: LockRef = LockRef::new(1);
/// Handler gets and puts (the handler's own tally).
static LR_GETS: AtomicU32 = AtomicU32::new(0);
static LR_PUTS: AtomicU32 = AtomicU32::new(0);

/// The handler takes a reference on even operations and drops one on odd
/// ones, so it never drops more than it took.
fn lockref_irq() {
    if IRQ.ops.load(Relaxed).is_multiple_of(2) {
        if LOCKREF.get_not_dead() {
            bump(&LR_GETS);
        } else {
            bump(&IRQ.bad);
        }
    } else {
        // The count is at least 2 (ours and the initial one): a plain
        // decrement, never the lock handed back.
        match LOCKREF.put_or_lock() {
            None => bump(&LR_PUTS),
            Some(_guard) => bump(&IRQ.bad),
        }
    }
    bump(&IRQ.ops);
}

/// No 64-bit CAS on either target: every operation takes the lockref's
/// ticket lock, so thread mode masks interrupts around each one.
/// `put_return`, lockless only, must refuse every time here.
fn lockref_check() -> bool {
    LR_GETS.store(0, Relaxed);
    LR_PUTS.store(0, Relaxed);
    let wrong = Cell::new(None);
    let mut round = 0u32;
    let ok = run(
        "lockref",
        lockref_irq,
        || {
            {
                let _irq = IrqState::save();
                LOCKREF.get();
            }
            window();
            {
                let _irq = IrqState::save();
                if LOCKREF.put_return().is_some() {
                    wrong.set(Some("put_return succeeded without 64-bit CAS"));
                }
                if LOCKREF.put_or_lock().is_some() {
                    wrong.set(Some("put_or_lock handed back the lock at count >= 2"));
                }
            }
            round += 1;
            if round.is_multiple_of(8) {
                let _irq = IrqState::save();
                let guard = LOCKREF.lock();
                let seen = guard.count();
                window();
                if guard.count() != seen {
                    wrong.set(Some("the count changed under the lock"));
                }
            }
        },
        |_| {
            let expect = 1 + LR_GETS.load(Relaxed) as i32 - LR_PUTS.load(Relaxed) as i32;
            let why = if let Some(why) = wrong.get() {
                Some(why)
            } else if IRQ.bad.load(Relaxed) != 0 {
                Some("the handler saw a dead lockref or got the lock back")
            } else if LOCKREF.count() != expect {
                Some("count != 1 + irq gets - irq puts")
            } else if lockref::stats() != lockref::Stats::default() {
                Some("lockref misuse counted")
            } else {
                None
            };
            (LOCKREF.count().into(), why)
        },
    );
    // Leave the count at 1 for the next run.
    while LOCKREF.count() > 1 {
        let _ = LOCKREF.put_or_lock();
    }
    ok
}

// ---- seqlock -----------------------------------------------------------------

/// Four words that every writer increments together: a torn read shows
/// them unequal.
static SEQ: SeqLock<[u32; 4]> = SeqLock::new([0; 4]);
static SEQ_RETRIES: AtomicU32 = AtomicU32::new(0);

fn whole(words: &[u32; 4]) -> bool {
    words.iter().all(|&w| w == words[0])
}

/// The handler writes with `try_write` (thread mode writes with interrupts
/// masked, so it never finds the lock held) and reads with `try_read`.
fn seqlock_irq() {
    match SEQ.try_write() {
        Some(mut words) => {
            for w in words.iter_mut() {
                *w += 1;
            }
            drop(words);
            bump(&IRQ.ops);
        }
        None => bump(&IRQ.busy),
    }
    match SEQ.try_read() {
        Some(words) if whole(&words) => {}
        Some(_) => bump(&IRQ.bad),
        None => bump(&IRQ.busy),
    }
}

fn seqlock_check() -> bool {
    SEQ.store([0; 4]);
    SEQ_RETRIES.store(0, Relaxed);
    let torn = Cell::new(false);
    let ok = run(
        "seqlock",
        seqlock_irq,
        || {
            {
                let mut words = SEQ.write_irqsave();
                for w in words.iter_mut() {
                    *w += 1;
                    window();
                }
            }
            // A hand-rolled read, to count the retries the handler's
            // writes cause; then the plain one.
            let start = SEQ.read_begin();
            match SEQ.read_at(start) {
                Some(words) => torn.set(torn.get() | !whole(&words)),
                None => SEQ_RETRIES.store(SEQ_RETRIES.load(Relaxed) + 1, Relaxed),
            }
            torn.set(torn.get() | !whole(&SEQ.read()));
        },
        |thread| {
            let words = SEQ.read();
            let why = if torn.get() || IRQ.bad.load(Relaxed) != 0 {
                Some("a torn read")
            } else if IRQ.busy.load(Relaxed) != 0 {
                Some("the handler found a write_irqsave section open")
            } else if words != [thread + IRQ.ops.load(Relaxed); 4] {
                Some("lost writes: words != thread + irq")
            } else {
                None
            };
            (words[0].into(), why)
        },
    );
    defmt::info!(
        "KSYNC-MCU seqlock thread-read-retries={=u32}",
        SEQ_RETRIES.load(Relaxed)
    );
    ok
}

// ---- per-CPU counter ------------------------------------------------------------

/// What the per-CPU counter check needs of a counter.
trait Counter: Sync {
    fn add_one(&self);
    fn total(&self) -> i64;
    fn reset(&self);
}

impl Counter for PerCpuCounter {
    fn add_one(&self) {
        self.inc();
    }

    fn total(&self) -> i64 {
        self.sum()
    }

    fn reset(&self) {
        self.set(0);
    }
}

/// The control of the per-CPU counter check: a per-CPU slot updated by a
/// load and a store with interrupts enabled in between (ksync's local add
/// masks them, or is one instruction).
struct Unmasked(PerCpu<Slot>);

/// A slot of [`Unmasked`]: `core`'s atomic (loads and stores only on the
/// Cortex-M0), which ksync's `ConstInit` does not cover there.
struct Slot(AtomicI32);

impl ConstInit for Slot {
    const INIT: Self = Slot(AtomicI32::new(0));
}

impl Counter for Unmasked {
    fn add_one(&self) {
        let slot = self.0.get();
        let seen = slot.0.load(Relaxed);
        window();
        slot.0.store(seen + 1, Relaxed);
    }

    fn total(&self) -> i64 {
        self.0.iter().map(|s| i64::from(s.0.load(Relaxed))).sum()
    }

    fn reset(&self) {
        for slot in self.0.iter() {
            slot.0.store(0, Relaxed);
        }
    }
}

/// A small batch, so both contexts fold into the shared total often.
static PERCPU: PerCpuCounter = PerCpuCounter::with_batch(8);
static UNMASKED: Unmasked = Unmasked(PerCpu::new());

fn counter_check(name: &'static str, counter: &'static dyn Counter, hook: fn()) -> bool {
    counter.reset();
    run(
        name,
        hook,
        || {
            counter.add_one();
            window();
        },
        |thread| {
            let total = counter.total();
            let why = if total != i64::from(thread) + i64::from(IRQ.ops.load(Relaxed)) {
                Some("lost updates: sum != thread + irq")
            } else {
                None
            };
            (total, why)
        },
    )
}

fn percpu_check() -> bool {
    let ok = counter_check("percpu-counter", &PERCPU, || {
        PERCPU.inc();
        bump(&IRQ.ops);
    });
    // `read` (the folded total alone) is within its documented bound.
    let off = (PERCPU.read() - PERCPU.sum()).abs();
    let bounded = off < PERCPU.error_bound();
    defmt::info!(
        "KSYNC-MCU check=percpu-read-bound result={=str} off={=i64} bound={=i64}",
        if bounded { "PASS" } else { "FAIL" },
        off,
        PERCPU.error_bound()
    );
    ok && bounded
}

// ---- running ---------------------------------------------------------------------

/// Runs every check; returns (passed, failed).
pub fn run_all() -> (u32, u32) {
    let results = [
        spin_check(
            "spinlock-ticket-irqsave",
            &TICKET_IRQ,
            || spin_irq(&TICKET_IRQ),
            true,
        ),
        spin_check(
            "spinlock-ttas-archirq",
            &TTAS_ARCH,
            || spin_irq(&TTAS_ARCH),
            true,
        ),
        spin_check(
            "spinlock-ticket-trylock",
            &TICKET_PLAIN,
            || spin_irq(&TICKET_PLAIN),
            false,
        ),
        lockref_check(),
        seqlock_check(),
        percpu_check(),
        crate::formats::rcu_check(),
    ];
    let passed = results.iter().filter(|&&ok| ok).count() as u32;
    (passed, results.len() as u32 - passed)
}

/// The must-fail controls.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The spinlock check with [`NoExclusion`].
    SpinlockNoExcl,
    /// The per-CPU counter check with [`Unmasked`].
    PercpuUnmasked,
}

impl Control {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "control-spinlock-noexcl" => Some(Self::SpinlockNoExcl),
            "control-percpu-unmasked" => Some(Self::PercpuUnmasked),
            _ => None,
        }
    }
}

/// Runs one control; `true` if it passed (which the runner treats as the
/// control not being caught).
pub fn run_control(control: Control) -> bool {
    match control {
        Control::SpinlockNoExcl => spin_check(
            "control-spinlock-noexcl",
            &NO_EXCL,
            || spin_irq(&NO_EXCL),
            false,
        ),
        Control::PercpuUnmasked => counter_check("control-percpu-unmasked", &UNMASKED, || {
            UNMASKED.add_one();
            bump(&IRQ.ops);
        }),
    }
}
