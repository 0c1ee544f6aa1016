//! `seed-mmap-sleep`, `seed-mmap-sleep-rwsem`, `seed-mmap-sleep-control`:
//! the `mmap_sem` seed as it was (`seeds::mmap::MmapSleep`) on the
//! scheduler: page faults under ksync's [`PerCpuRwSemaphore`] (or
//! [`RwSemaphore`]) for read, one fault in 64 sleeping inside its read
//! section for a simulated I/O (a 50 µs timed wait, so one tick), and
//! mmap/munmap under the write side, which sleeps for the readers.
//!
//! Every member of the team (3 threads per CPU, see [`super`]) runs the
//! workload's steps under torture (`Config::TORTURE`: the writer, thread 0
//! of CPU 0, maps or unmaps before every fault; race windows widened).
//! No fault may see a VMA in the middle of a write, and after the run no
//! VMA may be half-changed and no lock held (the workload's own check);
//! some faults must have slept. The control's faults take no lock (its
//! writer still takes the write side): the same check must catch it.
//!
//! [`PerCpuRwSemaphore`]: ksync::percpu_rwsem::PerCpuRwSemaphore
//! [`RwSemaphore`]: ksync::rwsem::RwSemaphore

use core::sync::atomic::{AtomicU64, Ordering};

use seeds::mmap::{IO_EVERY, IO_US, MmapSleep, MmapVariant};
use seeds::{Config, Counts, Rng, Workload};

use super::{Member, Team, start};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::time;
use crate::sched;

/// Faults per step between two looks at the stop flag.
const STEP: u64 = 16;

/// See the module docs.
pub struct MmapSleepSuite {
    info: Info,
    team: Team,
    workload: &'static MmapSleep,
    variant: MmapVariant,
    /// Per CPU: faults, maps/unmaps, faults that found nothing, steps
    /// whose thread blocked.
    ops: Counters,
    writes: Counters,
    misses: Counters,
    slept: Counters,
    /// The counter at the first and the last member's end of steps.
    started: AtomicU64,
    ended: AtomicU64,
}

impl MmapSleepSuite {
    const fn new(
        name: &'static str,
        kind: Kind,
        budget_ms: u64,
        workload: &'static MmapSleep,
        variant: MmapVariant,
    ) -> Self {
        Self {
            info: Info::new(name, kind, budget_ms),
            team: Team::new(),
            workload,
            variant,
            ops: Counters::new(),
            writes: Counters::new(),
            misses: Counters::new(),
            slept: Counters::new(),
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }
    }

    fn is_control(&self) -> bool {
        self.variant == MmapSleep::CONTROL
    }
}

impl Member for MmapSleepSuite {
    fn team(&self) -> &Team {
        &self.team
    }

    fn body(&self, ctx: &Ctx) {
        // The thread's id is the workload's CPU: thread 0 (CPU 0's boot
        // thread) is the writer.
        let me = sched::current();
        let mut rng = Rng::new(ctx.seed() ^ (me as u64).wrapping_mul(0x9E37_79B9));
        self.team.arrive();
        // Relaxed: time stamps for the rate.
        let _ = self.started.compare_exchange(
            0,
            time::now().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        while !self.team.should_stop(ctx) {
            let blocks = sched::blocks_of(me);
            let c: Counts = self.workload.step(me, STEP, &mut rng);
            let here = cpu::current();
            self.ops.add(here, c.ops);
            self.writes.add(here, c.writes);
            self.misses.add(here, c.misses);
            if sched::blocks_of(me) != blocks {
                self.slept.add(here, 1);
            }
            if self.is_control() && self.workload.violations() > 0 {
                ctx.fail("a fault saw a VMA in the middle of a write (mmap/munmap)");
            }
        }
        self.ended.fetch_max(time::now(), Ordering::Relaxed);
        self.team.leave();
    }
}

impl Suite for MmapSleepSuite {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, cpus: usize) {
        self.team.reset(cpus);
        // The faults' timed waits go through this kernel's `block`, which
        // reports the context switch to RCU: the CPU need not idle.
        self.workload.inner().set_io(IO_EVERY, IO_US, false);
        self.workload.setup(self.variant, Config::TORTURE);
        for c in [&self.ops, &self.writes, &self.misses, &self.slept] {
            c.reset();
        }
        // Relaxed: before the run (the harness's barrier).
        self.started.store(0, Ordering::Relaxed);
        self.ended.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        start(self, ctx);
    }

    /// The timer interrupt does not touch the address space (its locks
    /// sleep; no fault runs in interrupt context).
    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        let ops = self.ops.sum(cpus);
        let slept = self.slept.sum(cpus);
        // Relaxed: after the run (the harness's barrier).
        let ms = time::ticks_to_ms(
            self.ended
                .load(Ordering::Relaxed)
                .saturating_sub(self.started.load(Ordering::Relaxed)),
        )
        .max(1);
        self.info.report(format_args!(
            "{ops} faults ({} per s, torture), {} maps/unmaps, {} misses, {slept} steps slept",
            ops * 1000 / ms,
            self.writes.sum(cpus),
            self.misses.sum(cpus),
        ));
        self.info.report_per_cpu(
            cpus,
            &[
                ("faults", &self.ops),
                ("writes", &self.writes),
                ("slept", &self.slept),
            ],
        );
        let failure = match self.workload.check() {
            Err(v) => {
                self.info.report(format_args!("{v}"));
                Some(v.what)
            }
            Ok(()) if slept == 0 => Some("no fault ever slept"),
            Ok(()) => None,
        };
        Summary::new(ops, self.ops.min_max(cpus), failure)
    }
}

static PERCPU: MmapSleep = MmapSleep::new();
static RWSEM: MmapSleep = MmapSleep::new();
static CONTROL: MmapSleep = MmapSleep::new();

/// Faults under the [`PerCpuRwSemaphore`](ksync::percpu_rwsem::PerCpuRwSemaphore).
pub static SEED_MMAP_SLEEP: MmapSleepSuite = MmapSleepSuite::new(
    "seed-mmap-sleep",
    Kind::Test,
    600,
    &PERCPU,
    MmapVariant::PercpuRwsem,
);
/// Faults under the [`RwSemaphore`](ksync::rwsem::RwSemaphore).
pub static SEED_MMAP_SLEEP_RWSEM: MmapSleepSuite = MmapSleepSuite::new(
    "seed-mmap-sleep-rwsem",
    Kind::Test,
    600,
    &RWSEM,
    MmapVariant::RwSemaphore,
);
/// Faults without the lock: must be caught.
pub static SEED_MMAP_SLEEP_CONTROL: MmapSleepSuite = MmapSleepSuite::new(
    "seed-mmap-sleep-control",
    Kind::Control,
    1_000,
    &CONTROL,
    MmapVariant::ControlSleepNoLock,
);
