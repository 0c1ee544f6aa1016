//! `cost`: what single instructions cost this emulator, measured on CPU 0
//! while the other CPUs sleep (`hlt`/`wfi` until their timer tick), so
//! that the per-architecture figures of the other suites can be read: an
//! x86_64 guest did 30-100x fewer seed-suite operations than an aarch64
//! guest in the same run, and the cause was one instruction.
//!
//! Each row is one operation in a loop of [`BATCH`] per clock read, for
//! [`ROW_MS`] of guest time, as `KSYNC-COST op= ns_per_op=` (tenths of a
//! nanosecond of guest counter time; under TCG the guest counter follows
//! the host's clock, so these are host nanoseconds per emulated
//! operation):
//!
//! * `loop`: an empty counted loop (`black_box` on the index), the floor;
//! * `spin-loop-hint`: `core::hint::spin_loop()`, what every spin-wait and
//!   the seed workloads' torture windows execute (x86_64 `pause`, aarch64
//!   `isb`, riscv64 `pause` or nothing);
//! * `counter-read`: the clock (`rdtsc`, `CNTVCT_EL0`, `rdtime`);
//! * `atomic-add`: an uncontended `fetch_add` (`lock xadd`, `ldadd` or an
//!   LL/SC loop, `amoadd`);
//! * `cas`: an uncontended `compare_exchange`;
//! * `irq-save-restore`: ksync's `ArchIrq::save` + `restore` (`pushf; cli`
//!   + `popf`, `DAIF`, `sstatus`).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ksync::spinlock::{ArchIrq, IrqControl};

use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::time;
use crate::println;

/// Guest time per row.
const ROW_MS: u64 = 40;
/// Operations between two clock reads.
const BATCH: u64 = 256;

/// The suite.
pub struct Cost {
    info: Info,
    done: AtomicBool,
    word: AtomicU64,
    total: AtomicU64,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&COST];

/// The measurement.
pub static COST: Cost = Cost {
    // The rows, plus slack for a loaded host (the suite ends when they
    // do).
    info: Info::new("cost", Kind::Bench, ROW_MS * 6 + 10_000),
    done: AtomicBool::new(false),
    word: AtomicU64::new(0),
    total: AtomicU64::new(0),
};

impl Cost {
    /// Runs `op` in batches until [`ROW_MS`] pass; prints its row.
    fn row(&self, name: &str, mut op: impl FnMut(u64)) {
        let start = time::now();
        let end = start + time::ms_to_ticks(ROW_MS);
        let (mut ops, mut now) = (0u64, start);
        while now < end {
            for i in 0..BATCH {
                op(i);
            }
            ops += BATCH;
            now = time::now();
        }
        let tenths = time::ticks_to_ns(now - start) * 10 / ops.max(1);
        self.total.fetch_add(ops, Ordering::Relaxed);
        println!(
            "KSYNC-COST op={name} ops={ops} ns_per_op={}.{}",
            tenths / 10,
            tenths % 10
        );
    }

    fn measure(&self) {
        self.row("loop", |i| {
            core::hint::black_box(i);
        });
        self.row("spin-loop-hint", |_| core::hint::spin_loop());
        self.row("counter-read", |_| {
            core::hint::black_box(time::now());
        });
        self.row("atomic-add", |i| {
            // Relaxed: a count nobody else reads while this runs.
            self.word.fetch_add(i, Ordering::Relaxed);
        });
        self.row("cas", |i| {
            // Relaxed: as above; uncontended, so it always succeeds.
            let old = self.word.load(Ordering::Relaxed);
            let _ = self
                .word
                .compare_exchange(old, old ^ i, Ordering::Relaxed, Ordering::Relaxed);
        });
        self.row("irq-save-restore", |_| {
            let flags = ArchIrq::save();
            // SAFETY: the save just above on this CPU, restored once.
            unsafe { ArchIrq::restore(flags) };
        });
    }
}

impl Suite for Cost {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // Relaxed: the harness's start orders the setup before the run.
        self.done.store(false, Ordering::Relaxed);
        self.total.store(0, Ordering::Relaxed);
    }

    fn run(&self, ctx: &Ctx) {
        if ctx.cpu == 0 && ctx.thread == 0 {
            self.measure();
            // Release pairs with the Acquire loads below (nothing to
            // publish but the end; kept simple).
            self.done.store(true, Ordering::Release);
            return;
        }
        // Acquire pairs with the Release store above.
        while !self.done.load(Ordering::Acquire) && !ctx.should_stop() {
            crate::arch::irq_disable();
            crate::arch::wait_for_interrupt();
            crate::arch::irq_enable();
        }
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn hotplug(&self) -> Result<(), &'static str> {
        Err("a benchmark measures a fixed set of CPUs")
    }

    fn finish(&self, _cpus: usize) -> Summary {
        Summary::new(self.total.load(Ordering::Relaxed), (0, 0), None)
    }
}
