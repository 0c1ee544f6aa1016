//! Writer flood on the per-CPU rw lock: CPU 0 (its boot thread) takes the write lock again
//! and again, as fast as it can, while every other CPU takes the read lock
//! again and again. Neither side may starve the other: every wait for the
//! lock, read or write, must end within [`WAIT_BOUND_MS`] of guest time,
//! and both sides must keep getting in.
//!
//! Readers and the writer also check exclusion (a writer-inside flag and a
//! reader count, as the `rwlock` suites do), and the writer's updates are
//! counted (lost updates fail).
//!
//! The bound is generous on purpose: under TCG on a loaded two-core host a
//! vCPU can wait for the host scheduler for tens of milliseconds, and the
//! gated lock's first writer waits for a grace period to close the gate.
//! Starvation means waiting for as long as the other side keeps going,
//! which in a 2 s run is far past it.
//!
//! # The control
//!
//! `rwlock-flood-readpref` is a reader-preference lock whose readers hand
//! the lock from one read section to the next (each takes its next read
//! reference before dropping the last, as readers on many CPUs of a busy
//! machine do between them): the reader count never drops to zero, so the
//! writer starves. To keep the run finite its writer breaks in after
//! [`BREAK_IN_MS`]; the wait check must report the starvation.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ksync::lock_api::{GuardNoSend, RawRwLock};
use ksync::percpu_rwlock::{Gated, RawPerCpuRwLock};
use ksync::spinlock::IrqState;

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// The longest wait for the lock that passes, in milliseconds.
/// 1 s was not enough: in scheduler mode at -smp 8 (24 threads on a
/// two-core host at a load of 24) a reader waited past it under the
/// correct lock.
pub const WAIT_BOUND_MS: u64 = 2_500;
/// When the control's starved writer breaks in.
pub const BREAK_IN_MS: u64 = 3_000;
/// The suite's budget.
const BUDGET_MS: u64 = 3_500;

/// The control: reader preference, readers never wait for a waiting writer.
pub struct ReadPrefLock {
    readers: AtomicUsize,
    writer: AtomicBool,
}

// SAFETY: deliberately NOT upheld after `BREAK_IN_MS`: the writer then
// enters with readers inside. It only guards the suite's atomics in the
// control, whose checks report the starvation first; no undefined
// behaviour, every shared word is an atomic.
unsafe impl RawRwLock for ReadPrefLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        readers: AtomicUsize::new(0),
        writer: AtomicBool::new(false),
    };
    type GuardMarker = GuardNoSend;

    fn lock_shared(&self) {
        loop {
            // Acquire pairs with the writer's Release unlock.
            while self.writer.load(Ordering::Acquire) {
                core::hint::spin_loop();
            }
            self.readers.fetch_add(1, Ordering::SeqCst);
            if !self.writer.load(Ordering::SeqCst) {
                return;
            }
            self.readers.fetch_sub(1, Ordering::Release);
        }
    }

    fn try_lock_shared(&self) -> bool {
        self.lock_shared();
        true
    }

    unsafe fn unlock_shared(&self) {
        self.readers.fetch_sub(1, Ordering::Release);
    }

    fn lock_exclusive(&self) {
        let give_up = time::now() + time::ms_to_ticks(BREAK_IN_MS);
        self.writer.store(true, Ordering::SeqCst);
        // Reader preference: readers already counted keep coming back, and
        // the writer waits until there are none, or breaks in (see the
        // module docs).
        while self.readers.load(Ordering::SeqCst) != 0 && time::now() < give_up {
            core::hint::spin_loop();
        }
    }

    fn try_lock_exclusive(&self) -> bool {
        self.lock_exclusive();
        true
    }

    unsafe fn unlock_exclusive(&self) {
        self.writer.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.writer.load(Ordering::Relaxed) || self.readers.load(Ordering::Relaxed) != 0
    }

    fn is_locked_exclusive(&self) -> bool {
        self.writer.load(Ordering::Relaxed)
    }
}

/// The suite, over a raw rw lock.
pub struct WriterFlood<R: RawRwLock + 'static> {
    info: Info,
    lock: R,
    /// Readers hand the read lock from one section to the next (the
    /// control's workload; ksync's lock forbids nested readers).
    overlap: bool,
    writer_inside: AtomicBool,
    readers_inside: AtomicUsize,
    /// Bumped non-atomically by the writer.
    version: AtomicU64,
    writes: AtomicU64,
    /// Longest waits, in counter ticks.
    write_wait_max: AtomicU64,
    read_wait_max: AtomicU64,
    reads: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// The test: ksync's gated per-CPU rw lock.
pub static TEST: WriterFlood<RawPerCpuRwLock<Gated>> =
    WriterFlood::new(Info::new("rwlock-flood", Kind::Test, BUDGET_MS), false);
/// The control: a reader-preference lock that starves its writer.
pub static CONTROL: WriterFlood<ReadPrefLock> = WriterFlood::new(
    Info::new("rwlock-flood-readpref", Kind::Control, BUDGET_MS),
    true,
);

impl<R: RawRwLock> WriterFlood<R> {
    const fn new(info: Info, overlap: bool) -> Self {
        Self {
            info,
            lock: R::INIT,
            overlap,
            writer_inside: AtomicBool::new(false),
            readers_inside: AtomicUsize::new(0),
            version: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_wait_max: AtomicU64::new(0),
            read_wait_max: AtomicU64::new(0),
            reads: Counters::new(),
        }
    }

    fn over_bound(ticks: u64) -> bool {
        ticks > time::ms_to_ticks(WAIT_BOUND_MS)
    }

    /// CPU 0: write, write, write.
    fn flood(&self, ctx: &Ctx) {
        let mut writes = 0;
        while !ctx.should_stop() {
            let _irq = IrqState::save();
            let start = time::now();
            self.lock.lock_exclusive();
            let waited = time::now() - start;
            self.write_wait_max.fetch_max(waited, Ordering::Relaxed);
            if Self::over_bound(waited) {
                ctx.fail("readers starved the writer past the bound");
            }
            // Relaxed: the lock orders these; a broken one shows here.
            if self.readers_inside.load(Ordering::Relaxed) != 0 {
                ctx.fail("the writer found readers inside");
            }
            self.writer_inside.store(true, Ordering::Relaxed);
            let v = self.version.load(Ordering::Relaxed);
            busy_work(8);
            self.version.store(v + 1, Ordering::Relaxed);
            self.writer_inside.store(false, Ordering::Relaxed);
            // SAFETY: taken above by this context.
            unsafe { self.lock.unlock_exclusive() };
            writes += 1;
        }
        self.writes.store(writes, Ordering::Relaxed);
    }

    /// One read section, after taking the lock (timed).
    fn read_section(&self, ctx: &Ctx, work: u32) {
        let start = time::now();
        self.lock.lock_shared();
        let waited = time::now() - start;
        self.read_wait_max.fetch_max(waited, Ordering::Relaxed);
        if Self::over_bound(waited) {
            ctx.fail("the writer flood starved a reader past the bound");
        }
        self.readers_inside.fetch_add(1, Ordering::Relaxed);
        if self.writer_inside.load(Ordering::Relaxed) {
            ctx.fail("a reader found the writer inside");
        }
        busy_work(work);
        self.readers_inside.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<R: RawRwLock + Sync> Suite for WriterFlood<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        // The writer is CPU 0; readers go offline between two sections
        // (with `overlap`, holding a read reference: the control's writer
        // starves either way).
        Ok(())
    }

    fn setup(&self, _cpus: usize) {
        for word in [
            &self.version,
            &self.writes,
            &self.write_wait_max,
            &self.read_wait_max,
        ] {
            word.store(0, Ordering::Relaxed);
        }
        self.writer_inside.store(false, Ordering::Relaxed);
        self.readers_inside.store(0, Ordering::Relaxed);
        self.reads.reset();
    }

    fn run(&self, ctx: &Ctx) {
        // One writer: CPU 0's boot thread (in scheduler mode its other
        // threads read, as every other CPU's do).
        if ctx.cpu == 0 && ctx.thread == 0 {
            self.flood(ctx);
            return;
        }
        let mut rng = Rng::for_ctx(ctx, 61);
        let mut reads = 0;
        // Whether a read lock from the previous round is still held.
        let mut held = false;
        while !ctx.should_stop() {
            self.read_section(ctx, rng.below(64) as u32);
            if self.overlap {
                if core::mem::replace(&mut held, true) {
                    // SAFETY: taken by this context in the previous round.
                    unsafe { self.lock.unlock_shared() };
                }
            } else {
                // SAFETY: taken just above by this context.
                unsafe { self.lock.unlock_shared() };
            }
            reads += 1;
            busy_work(rng.below(16) as u32);
        }
        if held {
            // SAFETY: taken by this context.
            unsafe { self.lock.unlock_shared() };
        }
        self.reads.add(ctx.cpu, reads);
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, cpus: usize) -> Summary {
        let writes = self.writes.load(Ordering::Relaxed);
        let version = self.version.load(Ordering::Relaxed);
        let (read_min, read_max) = if cpus > 1 {
            (1..cpus)
                .map(|cpu| self.reads.get(cpu))
                .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
        } else {
            (0, 0)
        };
        let failure = if version != writes {
            Some("lost updates: the version does not match the writes")
        } else if writes == 0 {
            Some("the writer never got in")
        } else if cpus > 1 && read_min == 0 {
            Some("a reader CPU never got in")
        } else {
            None
        };
        let ms = |ticks: u64| time::ticks_to_ns(ticks) / 1_000_000;
        self.info.report(format_args!(
            "{writes} writes, {} reads; longest wait for the write lock {} ms, for a read lock {} ms (bound {WAIT_BOUND_MS} ms)",
            self.reads.sum(cpus),
            ms(self.write_wait_max.load(Ordering::Relaxed)),
            ms(self.read_wait_max.load(Ordering::Relaxed)),
        ));
        self.info.report_per_cpu(cpus, &[("reads", &self.reads)]);
        Summary::new(writes + self.reads.sum(cpus), (read_min, read_max), failure)
    }
}
