//! Per-CPU counter torture: every CPU adds to one [`PerCpuCounter`] with a
//! small batch, so that its slot folds into the shared total all the time,
//! in thread context and from its timer interrupt.
//!
//! # Checks
//!
//! * Every context keeps its own exact tally of what it added (per CPU,
//!   thread and interrupt context apart). At the end, `sum()` must equal
//!   the sum of the tallies exactly: an update lost in a fold, a fold that
//!   dropped or double-counted a slot, or two CPUs sharing a slot shows up
//!   here.
//! * `read()` (the total without the slots) must be within
//!   `error_bound()` of `sum()`. The counter's docs note that an interrupt
//!   handler adding between the thread's check and its add can push a slot
//!   past the batch; here handlers add ±1 and threads less than the batch,
//!   so a slot stays at most `batch` and the bound holds.
//! * Now and then a CPU calls `sum()` and `compare()` while the others keep
//!   adding, to run them (and their lock) against concurrent folds.
//!
//! # The control
//!
//! [`SharedSlotCounter`] folds the same way but keeps one slot for all CPUs
//! and updates it with a plain load and store (a per-CPU counter whose
//! `cpu_id` always says 0, or a slot written without the per-CPU
//! guarantee). Concurrent updates overwrite each other and the exact sum
//! comes out wrong.

use core::cmp::Ordering as Cmp;
use core::fmt;
use core::sync::atomic::{AtomicI32, AtomicI64, Ordering};

use crossbeam_utils::CachePadded;
use ksync::percpu_counter::PerCpuCounter;
use ksync::spinlock::IrqTtasMutex;

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, PerCpuStat, Suite, Summary};
use crate::kernel::cpu::{Counters, MAX_CPUS};

/// The batch: small, so that folds are frequent.
const BATCH: i32 = 32;
/// Updates per timer interrupt.
const IRQ_UPDATES: u32 = 8;

/// The counter operations the suite drives: ksync's [`PerCpuCounter`], and
/// the control's [`SharedSlotCounter`].
pub trait Counter: Sync {
    /// `add(amount)`.
    fn add(&self, amount: i64);
    /// The exact value.
    fn sum(&self) -> i64;
    /// The approximate value.
    fn read(&self) -> i64;
    /// How far `read` may be from the exact value.
    fn error_bound(&self) -> i64;
    /// `compare(rhs)`.
    fn compare(&self, rhs: i64) -> Cmp;
    /// Sets the value (no concurrent updates).
    fn set(&self, value: i64);
}

impl Counter for PerCpuCounter {
    fn add(&self, amount: i64) {
        match amount {
            1 => self.inc(),
            -1 => self.dec(),
            _ => PerCpuCounter::add(self, amount),
        }
    }
    fn sum(&self) -> i64 {
        PerCpuCounter::sum(self)
    }
    fn read(&self) -> i64 {
        PerCpuCounter::read(self)
    }
    fn error_bound(&self) -> i64 {
        PerCpuCounter::error_bound(self)
    }
    fn compare(&self, rhs: i64) -> Cmp {
        PerCpuCounter::compare(self, rhs)
    }
    fn set(&self, value: i64) {
        PerCpuCounter::set(self, value)
    }
}

/// The control: one slot shared by every CPU, updated with a load and a
/// store; folds under a lock like the real one, but a TTAS lock: with one
/// slot for all CPUs it folds four times as often, and a ticket lock would
/// convoy under TCG (a waiting vCPU descheduled by the host holds up every
/// CPU), leaving too few updates running side by side to lose one.
pub struct SharedSlotCounter {
    slot: AtomicI32,
    total: IrqTtasMutex<i64>,
    /// A copy of the total for `read` (written under the lock).
    total_copy: AtomicI64,
}

impl SharedSlotCounter {
    const fn new() -> Self {
        Self {
            slot: AtomicI32::new(0),
            total: IrqTtasMutex::new(0),
            total_copy: AtomicI64::new(0),
        }
    }
}

impl Counter for SharedSlotCounter {
    fn add(&self, amount: i64) {
        // The bug: a read-modify-write of a slot other CPUs write too.
        let local = i64::from(self.slot.load(Ordering::Relaxed)) + amount;
        if local.abs() < i64::from(BATCH) {
            self.slot.store(local as i32, Ordering::Relaxed);
        } else {
            let mut total = self.total.lock();
            *total += i64::from(self.slot.load(Ordering::Relaxed)) + amount;
            self.slot.store(0, Ordering::Relaxed);
            self.total_copy.store(*total, Ordering::Relaxed);
        }
    }
    fn sum(&self) -> i64 {
        let total = self.total.lock();
        *total + i64::from(self.slot.load(Ordering::Relaxed))
    }
    fn read(&self) -> i64 {
        self.total_copy.load(Ordering::Relaxed)
    }
    fn error_bound(&self) -> i64 {
        i64::from(BATCH) * ksync::kernel::nr_cpus() as i64
    }
    fn compare(&self, rhs: i64) -> Cmp {
        self.sum().cmp(&rhs)
    }
    fn set(&self, value: i64) {
        let mut total = self.total.lock();
        *total = value;
        self.slot.store(0, Ordering::Relaxed);
        self.total_copy.store(value, Ordering::Relaxed);
    }
}

/// One signed tally per CPU, each on its own cache line.
struct Tallies([CachePadded<AtomicI64>; MAX_CPUS]);

impl Tallies {
    const fn new() -> Self {
        Self([const { CachePadded::new(AtomicI64::new(0)) }; MAX_CPUS])
    }
    fn add(&self, cpu: usize, n: i64) {
        self.0[cpu].fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self, cpu: usize) -> i64 {
        self.0[cpu].load(Ordering::Relaxed)
    }
    fn reset(&self) {
        for slot in &self.0 {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

impl PerCpuStat for Tallies {
    fn fmt_cpu(&self, cpu: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get(cpu))
    }
}

/// The suite, over any [`Counter`].
pub struct CounterTorture<C: 'static> {
    info: Info,
    counter: C,
    /// Per CPU: what thread context added, exactly.
    thread_tally: Tallies,
    /// Per CPU: what the timer interrupt added, exactly.
    irq_tally: Tallies,
    ops: Counters,
    irq_ops: Counters,
    sums: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// The test: ksync's `PerCpuCounter` with a batch of 32.
pub static TEST: CounterTorture<PerCpuCounter> = CounterTorture::new(
    Info::new("percpu-counter", Kind::Test, 1000),
    PerCpuCounter::with_batch(BATCH),
);
/// The control: one slot for all CPUs, updated without atomicity.
pub static CONTROL: CounterTorture<SharedSlotCounter> = CounterTorture::new(
    Info::new("percpu-counter-shared", Kind::Control, 1000),
    SharedSlotCounter::new(),
);

impl<C: Counter> CounterTorture<C> {
    const fn new(info: Info, counter: C) -> Self {
        Self {
            info,
            counter,
            thread_tally: Tallies::new(),
            irq_tally: Tallies::new(),
            ops: Counters::new(),
            irq_ops: Counters::new(),
            sums: Counters::new(),
        }
    }

    /// The expected value: every context's tally.
    fn expected(&self, cpus: usize) -> i64 {
        (0..cpus)
            .map(|cpu| self.thread_tally.get(cpu) + self.irq_tally.get(cpu))
            .sum()
    }
}

impl<C: Counter> Suite for CounterTorture<C> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        // An offline CPU's slot keeps its delta; `sum()` adds every
        // possible CPU's slot, so the exact check covers it.
        Ok(())
    }

    fn setup(&self, _cpus: usize) {
        self.counter.set(0);
        self.thread_tally.reset();
        self.irq_tally.reset();
        self.ops.reset();
        self.irq_ops.reset();
        self.sums.reset();
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 11);
        let (mut tally, mut ops) = (0i64, 0u64);
        while !ctx.should_stop() {
            // Mostly ±1, drifting upwards (the total grows), now and then
            // a bigger step either way; all below the batch in absolute
            // value (see the module docs). A slot folds every hundred or so
            // updates: often enough to race folds against updates, rarely
            // enough that the fold lock (a ticket lock, which under TCG
            // convoys whenever a waiting vCPU is descheduled) is no
            // bottleneck.
            let amount = match rng.below(64) {
                0..=27 => 1,
                28..=51 => -1,
                52..=62 => rng.below(9) as i64 - 4,
                _ => rng.below(2 * BATCH as u64 - 1) as i64 - i64::from(BATCH - 1),
            };
            self.counter.add(amount);
            tally += amount;
            ops += 1;
            if ops.is_multiple_of(4096) {
                // Exact reads and comparisons while the others fold: they
                // take the fold lock (and must not deadlock with folds in
                // interrupt handlers); the value moves meanwhile, so only
                // the final check judges.
                let sum = self.counter.sum();
                core::hint::black_box(self.counter.compare(sum));
                self.sums.add(ctx.cpu, 1);
            }
            busy_work(rng.below(8) as u32);
        }
        self.thread_tally.add(ctx.cpu, tally);
        self.ops.add(ctx.cpu, ops);
    }

    fn irq(&self, ctx: &Ctx) {
        let mut tally = 0;
        for i in 0..IRQ_UPDATES {
            // Mostly up, some down: ±1 only (see the module docs).
            let amount = if i % 4 == 3 { -1 } else { 1 };
            self.counter.add(amount);
            tally += amount;
        }
        self.irq_tally.add(ctx.cpu, tally);
        self.irq_ops.add(ctx.cpu, u64::from(IRQ_UPDATES));
    }

    fn finish(&self, cpus: usize) -> Summary {
        let expected = self.expected(cpus);
        let sum = self.counter.sum();
        let read = self.counter.read();
        let bound = self.counter.error_bound();
        let failure = if sum != expected {
            Some("sum() is not the exact total of every CPU's updates: updates were lost")
        } else if (read - sum).abs() > bound {
            Some("read() is further from sum() than error_bound()")
        } else {
            None
        };
        self.info.report_per_cpu(
            cpus,
            &[
                ("ops", &self.ops),
                ("added", &self.thread_tally),
                ("irq_ops", &self.irq_ops),
                ("irq_added", &self.irq_tally),
                ("sums", &self.sums),
            ],
        );
        self.info.report(format_args!(
            "sum {sum} (expected {expected}), read {read} (off by {}, bound {bound})",
            (read - sum).abs()
        ));
        Summary::new(
            self.ops.sum(cpus) + self.irq_ops.sum(cpus),
            self.ops.min_max(cpus),
            failure,
        )
    }
}
