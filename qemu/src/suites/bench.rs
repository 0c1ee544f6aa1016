//! In-guest benchmark: one reference taken and dropped, three ways, by one
//! CPU and by all CPUs at once on the same cache line:
//!
//! * `lockref`: [`LockRef::get`] + [`LockRef::put_return`];
//! * `spinlock`: a [`TicketMutex`]-protected count, `+= 1` then `-= 1`;
//! * `atomic`: `fetch_add(1)` + `fetch_sub(1)`, the one-line ceiling.
//!
//! Each phase runs for [`PHASE_MS`]; every CPU reports its operations and the
//! counter ticks it spent (TSC on x86_64, `CNTVCT_EL0` on aarch64), as
//! `KSYNC-BENCH` lines. Under TCG these figures are emulation costs, not
//! hardware performance: the host runner labels them so.

use core::sync::atomic::{AtomicU64, Ordering};

use ksync::LockRef;
use ksync::spinlock::TicketMutex;

use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::Counters;
use crate::kernel::time;
use crate::println;

/// Guest time per phase.
pub const PHASE_MS: u64 = 100;
/// Operations between two reads of the counter.
const BATCH: u64 = 64;

#[derive(Clone, Copy)]
enum Op {
    Lockref,
    Spinlock,
    Atomic,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Lockref => "lockref-get-put",
            Op::Spinlock => "spinlock-inc-dec",
            Op::Atomic => "atomic-add-sub",
        }
    }
}

const OPS: [Op; 3] = [Op::Lockref, Op::Spinlock, Op::Atomic];

/// The benchmark's state.
pub struct Bench {
    info: Info,
    lockref: LockRef,
    spinlock: TicketMutex<u64>,
    atomic: AtomicU64,
    barrier: Barrier,
    phase_end: AtomicU64,
    ops: Counters,
    ticks: Counters,
    total_ops: AtomicU64,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&BENCH];

/// The benchmark.
pub static BENCH: Bench = Bench {
    // Every phase, plus slack for the barriers.
    info: Info::new("bench", Kind::Bench, PHASE_MS * 2 * OPS.len() as u64 + 500),
    lockref: LockRef::new(1),
    spinlock: TicketMutex::new(0),
    atomic: AtomicU64::new(0),
    barrier: Barrier::new(),
    phase_end: AtomicU64::new(0),
    ops: Counters::new(),
    ticks: Counters::new(),
    total_ops: AtomicU64::new(0),
};

impl Bench {
    #[inline(always)]
    fn once(&self, op: Op) {
        match op {
            Op::Lockref => {
                self.lockref.get();
                // Never the last reference (the count starts at 1): always
                // `Some` unless the word stayed contended for 100 tries.
                if self.lockref.put_return().is_none() {
                    // Same effect under the lock (nothing else takes it here,
                    // so no interrupt masking is needed).
                    let mut guard = self.lockref.lock();
                    let count = guard.count();
                    guard.set_count(count - 1);
                }
            }
            Op::Spinlock => {
                *self.spinlock.lock() += 1;
                *self.spinlock.lock() -= 1;
            }
            Op::Atomic => {
                // The orderings of lockref's get (Relaxed) and put (Release).
                self.atomic.fetch_add(1, Ordering::Relaxed);
                self.atomic.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// One phase: `cpus` CPUs hammer `op` until the phase ends.
    fn phase(&self, ctx: &Ctx, op: Op, cpus: usize) {
        if ctx.cpu == 0 {
            self.ops.reset();
            self.ticks.reset();
            self.phase_end
                .store(time::now() + time::ms_to_ticks(PHASE_MS), Ordering::Relaxed);
        }
        self.barrier.wait(ctx.cpus);
        if ctx.cpu < cpus {
            let end = self.phase_end.load(Ordering::Relaxed);
            let start = time::now();
            let mut ops = 0;
            let mut now = start;
            while now < end {
                for _ in 0..BATCH {
                    self.once(op);
                }
                ops += BATCH;
                now = time::now();
            }
            self.ops.add(ctx.cpu, ops);
            self.ticks.add(ctx.cpu, now - start);
        }
        self.barrier.wait(ctx.cpus);
        if ctx.cpu == 0 {
            self.report(op, cpus);
        }
    }

    fn report(&self, op: Op, cpus: usize) {
        // Mean over CPUs of each CPU's ticks per operation, in tenths.
        let mut tenths = 0;
        for cpu in 0..cpus {
            tenths += self.ticks.get(cpu) * 10 / self.ops.get(cpu).max(1);
        }
        let tenths = tenths / cpus as u64;
        let ns_tenths = time::ticks_to_ns(tenths);
        let ops = self.ops.sum(cpus);
        self.total_ops.fetch_add(ops, Ordering::Relaxed);
        println!(
            "KSYNC-BENCH op={} cpus={cpus} ops={ops} ticks_per_op={}.{} ns_per_op={}.{} counter_hz={}",
            op.name(),
            tenths / 10,
            tenths % 10,
            ns_tenths / 10,
            ns_tenths % 10,
            time::hz()
        );
    }
}

impl Suite for Bench {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        Err("a benchmark measures a fixed set of CPUs")
    }

    fn setup(&self, _cpus: usize) {
        self.total_ops.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        for op in OPS {
            self.phase(ctx, op, 1);
            self.phase(ctx, op, ctx.cpus);
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, _cpus: usize) -> Summary {
        let intact = self.lockref.count() == 1
            && *self.spinlock.lock() == 0
            && self.atomic.load(Ordering::Relaxed) == 0;
        Summary::new(
            self.total_ops.load(Ordering::Relaxed),
            (0, 0),
            (!intact).then_some("a count did not return to its start value"),
        )
    }
}
