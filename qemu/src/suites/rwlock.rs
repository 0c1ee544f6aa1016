//! Scalable reader-writer lock torture: readers on every CPU, in thread
//! context and from the timer interrupt, and a writer now and then, on
//! ksync's [`PerCpuRwLock`] (fenced readers) and [`GatedPerCpuRwLock`]
//! (readers skip the fence while an RCU gate is open). Every CPU writes now
//! and then.
//!
//! # Checks
//!
//! * A writer swaps its id into `writer` on entry (expects 0) and back out
//!   on exit (expects its own): two writers inside show up.
//! * Readers count themselves in `readers` while inside; a writer must find
//!   0 on entry and all along while it holds on after its update, and a
//!   reader must find no writer inside, on entry and on exit.
//! * Now and then two CPUs meet for a *probe* ([`super::probe`], as in the
//!   lockref suite): one announces it is ready, another takes the write
//!   lock and tells it so, and the first calls `try_read()`, which must be
//!   refused. This check needs no lucky timing: the others need a reader
//!   and a writer running at the same instant, which four vCPUs on a loaded
//!   two-core host rarely provide (and a writer of the broken lock only
//!   gets in when no reader runs).
//! * The protected data is three words with an invariant (`b == !a`,
//!   `c == a * K`) that a writer breaks for a while (it writes them one by
//!   one with work in between): a reader must always see it hold. The
//!   writers also bump a version non-atomically, so at the end it must
//!   equal the number of writes and the words must hold the last version.
//!
//! # Interrupt context
//!
//! The timer handler reads too, so writers hold the write lock with local
//! interrupts disabled (`IrqState::save()` before `write()`): a handler
//! reading on the writer's CPU would otherwise spin on the writer it
//! interrupted. Handlers use `try_read()` and skip when a writer is around:
//! a handler that interrupted a thread-context reader on its CPU must not
//! wait for a writer that waits for that reader (the lock's "no recursive
//! readers" rule).
//!
//! The gated flavour needs CPUs that report RCU quiescent states: a writer
//! closing the gate waits for a grace period, which every other CPU ends at
//! its next `should_stop` (or by being idle at a barrier), see
//! `kernel::rcu`.
//!
//! # The control
//!
//! [`NoBlockRwLock`] is a per-CPU-count rw lock whose writer is the real
//! algorithm but whose reader path is the gated fast path used always: it
//! increments its CPU's count and enters, never issuing the fence or
//! checking `block`. Readers walk in on writers.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering, fence};

use ksync::lock_api::{self, GuardNoSend, RawRwLock};
use ksync::percpu::PerCpu;
use ksync::percpu_rwlock::{GatedPerCpuRwLock, PerCpuRwLock, RawPerCpuRwLock};
use ksync::spinlock::IrqState;

use super::probe::Probe;
use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// Work between the writes of the three words, and inside a read section.
const CS_WORK: u32 = 16;
/// How often a writer re-checks for readers after its update, before it
/// lets go (with a little work between checks).
const WRITE_HOLD_CHECKS: u32 = 16;
/// One write per this many thread-context operations, on average.
const WRITE_ONE_IN: u64 = 64;
/// One probe per this many thread-context operations (when none runs).
const PROBE_ONE_IN: u64 = 256;
/// Read attempts per timer interrupt.
const IRQ_READS: u32 = 2;
/// With [`IrqRead::Wait`], how long (polls of the writer-inside flag) a
/// timer interrupt looks for a writer inside before one more read: a
/// read that arrives while a writer holds the lock, each tick it can.
const IRQ_WRITER_POLLS: u32 = 1024;
/// With [`IrqRead::Wait`], one write in this many of CPU 0's holds the
/// lock for [`LONG_HOLD_US`]: every other CPU's timer interrupt in that
/// window reads, and must wait for the writer (a broken rule lets it in,
/// which the writer sees as a reader inside).
const LONG_HOLD_ONE_IN: u64 = 32;
/// See [`LONG_HOLD_ONE_IN`]: a tick and a half.
const LONG_HOLD_US: u64 = 1500;
/// The invariant's multiplier.
const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The protected data: three words that must agree.
pub struct Data {
    a: AtomicU64,
    b: AtomicU64,
    c: AtomicU64,
}

impl Data {
    pub const fn new() -> Self {
        Self {
            a: AtomicU64::new(0),
            b: AtomicU64::new(!0),
            c: AtomicU64::new(0),
        }
    }

    // Relaxed throughout: the lock orders a working reader and writer; a
    // broken lock shows in the values, with no undefined behaviour since
    // every word is an atomic.

    fn write(&self, v: u64) {
        self.a.store(v, Ordering::Relaxed);
        busy_work(CS_WORK);
        self.b.store(!v, Ordering::Relaxed);
        busy_work(CS_WORK);
        self.c.store(v.wrapping_mul(K), Ordering::Relaxed);
    }

    /// The value if the three words agree.
    fn read(&self) -> Option<u64> {
        let a = self.a.load(Ordering::Relaxed);
        busy_work(CS_WORK / 2);
        let b = self.b.load(Ordering::Relaxed);
        busy_work(CS_WORK / 2);
        let c = self.c.load(Ordering::Relaxed);
        (b == !a && c == a.wrapping_mul(K)).then_some(a)
    }
}

/// The control: readers that never look for a writer.
pub struct NoBlockRwLock {
    readers: PerCpu<AtomicI32>,
    block: AtomicBool,
}

impl NoBlockRwLock {
    fn readers_active(&self) -> bool {
        self.readers
            .iter()
            .fold(0i32, |sum, n| sum.wrapping_add(n.load(Ordering::Relaxed)))
            != 0
    }
}

// SAFETY: deliberately NOT upheld: readers enter while a writer holds the
// lock. It only guards `Data`, whose words are atomics, in the control
// suite: the missing exclusion shows up in the checks, not as undefined
// behaviour. Writers are the real algorithm (they exclude each other).
unsafe impl RawRwLock for NoBlockRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        readers: PerCpu::new(),
        block: AtomicBool::new(false),
    };
    type GuardMarker = GuardNoSend;

    fn lock_shared(&self) {
        // Preemption off while held, as the real lock's readers (else, in
        // scheduler mode, a reader preempted on a waiting writer's CPU
        // would hang the control instead of failing it).
        crate::sched::preempt_disable();
        // The bug: the gated fast path, gate or no gate. No fence, no look
        // at `block`.
        self.readers.get().fetch_add(1, Ordering::Relaxed);
    }

    fn try_lock_shared(&self) -> bool {
        self.lock_shared();
        true
    }

    unsafe fn unlock_shared(&self) {
        self.readers.get().fetch_sub(1, Ordering::Release);
        crate::sched::preempt_enable();
    }

    fn lock_exclusive(&self) {
        // The real writer: exclude writers, fence, wait for the readers.
        while self
            .block
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        fence(Ordering::SeqCst);
        while self.readers_active() {
            core::hint::spin_loop();
        }
        fence(Ordering::Acquire);
    }

    fn try_lock_exclusive(&self) -> bool {
        if self
            .block
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        fence(Ordering::SeqCst);
        if self.readers_active() {
            self.block.store(false, Ordering::Release);
            return false;
        }
        fence(Ordering::Acquire);
        true
    }

    unsafe fn unlock_exclusive(&self) {
        self.block.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.block.load(Ordering::Relaxed) || self.readers_active()
    }

    fn is_locked_exclusive(&self) -> bool {
        self.block.load(Ordering::Relaxed)
    }
}

/// How the timer interrupt's readers take the lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum IrqRead {
    /// `try_read()`, skipping when refused: for locks without an
    /// interrupt-reader rule (the per-CPU ones).
    Try,
    /// `read()`, waiting: for locks whose interrupt readers wait only
    /// while a writer holds the lock, never behind a waiting one (ksync's
    /// `RwSpinLock`, Linux's qrwlock). A handler that interrupted a
    /// thread-context reader on its CPU then gets in past a writer waiting
    /// for that reader; without the rule it would wait for itself (a hang,
    /// reported by the host's timeout). Each tick also looks for a writer
    /// inside for a while ([`IRQ_WRITER_POLLS`]) and, if it finds one,
    /// reads at once: that read must wait for the writer to leave; and now
    /// and then CPU 0's writer holds the lock across a tick or two
    /// ([`LONG_HOLD_ONE_IN`]), so that every other CPU's handler reads
    /// while it holds. The probe's two sides hold interrupts off, as the
    /// writers do.
    Wait,
}

/// The suite, over any raw rw lock.
pub struct RwTorture<R: RawRwLock + 'static> {
    info: Info,
    irq_read: IrqRead,
    lock: lock_api::RwLock<R, Data>,
    /// 0, or the id of the writer inside.
    writer: AtomicUsize,
    /// Readers inside.
    readers: AtomicUsize,
    /// Bumped non-atomically by every writer.
    version: AtomicU64,
    /// `ksync::rcu::gp_seq()` at the start (statistics).
    gp_start: AtomicUsize,
    probe: Probe,
    reads: Counters,
    writes: Counters,
    irq_reads: Counters,
    irq_busy: Counters,
    /// [`IrqRead::Wait`]: interrupt reads that arrived with a writer inside.
    irq_behind_writer: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&FENCED, &GATED, &CONTROL];

/// The fenced flavour.
pub static FENCED: RwTorture<RawPerCpuRwLock> = RwTorture::new(
    Info::new("rwlock", Kind::Test, 1000),
    PerCpuRwLock::new(Data::new()),
);
/// The gated flavour: readers skip the fence while the gate is open.
pub static GATED: RwTorture<RawPerCpuRwLock<ksync::percpu_rwlock::Gated>> = RwTorture::new(
    Info::new("rwlock-gated", Kind::Test, 1000),
    GatedPerCpuRwLock::new(Data::new()),
);
/// The control: readers ignore writers.
pub static CONTROL: RwTorture<NoBlockRwLock> = RwTorture::new(
    Info::new("rwlock-noblock", Kind::Control, 1000),
    lock_api::RwLock::new(Data::new()),
);

/// A context's id in `writer`: never 0.
fn who(cpu: usize) -> usize {
    cpu + 1
}

impl<R: RawRwLock> RwTorture<R> {
    const fn new(info: Info, lock: lock_api::RwLock<R, Data>) -> Self {
        Self::with_irq_read(info, lock, IrqRead::Try)
    }

    /// The suite on `lock`, whose interrupt readers take it as `irq_read`
    /// says.
    pub const fn with_irq_read(
        info: Info,
        lock: lock_api::RwLock<R, Data>,
        irq_read: IrqRead,
    ) -> Self {
        Self {
            info,
            irq_read,
            lock,
            writer: AtomicUsize::new(0),
            readers: AtomicUsize::new(0),
            version: AtomicU64::new(0),
            gp_start: AtomicUsize::new(0),
            probe: Probe::new(),
            reads: Counters::new(),
            writes: Counters::new(),
            irq_reads: Counters::new(),
            irq_busy: Counters::new(),
            irq_behind_writer: Counters::new(),
        }
    }

    /// Inside a read lock: count in, check, count out.
    fn read_section(&self, ctx: &Ctx, data: &Data) {
        // Relaxed: a working lock orders these (a writer acquires what a
        // reader released); with a broken one, the RMWs on `readers` and the
        // data words still show overlaps.
        self.readers.fetch_add(1, Ordering::Relaxed);
        if self.writer.load(Ordering::Relaxed) != 0 {
            ctx.fail("a reader found a writer inside (on entry)");
        }
        if data.read().is_none() {
            ctx.fail("a reader saw the protected words disagree (a writer was inside)");
        }
        if self.writer.load(Ordering::Relaxed) != 0 {
            ctx.fail("a reader found a writer inside (on exit)");
        }
        self.readers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Takes the write lock with interrupts off and updates the data.
    fn write(&self, ctx: &Ctx, long: bool) {
        let me = who(ctx.cpu);
        let _irq = IrqState::save();
        let data = self.lock.write();
        if self.writer.swap(me, Ordering::Relaxed) != 0 {
            ctx.fail("two writers inside (found another on entry)");
        }
        if self.readers.load(Ordering::Relaxed) != 0 {
            ctx.fail("a writer found readers inside (on entry)");
        }
        let version = self.version.load(Ordering::Relaxed) + 1;
        data.write(version);
        self.version.store(version, Ordering::Relaxed);
        // Hold on for a while: a reader that walks in (a broken lock) shows
        // in `readers` meanwhile, and sees `writer` set.
        for _ in 0..WRITE_HOLD_CHECKS {
            if self.readers.load(Ordering::Relaxed) != 0 {
                ctx.fail("a writer found readers inside (before unlocking)");
                break;
            }
            busy_work(CS_WORK / 2);
        }
        if long {
            let end = time::now() + time::hz() / 1_000_000 * LONG_HOLD_US;
            while time::now() < end {
                if self.readers.load(Ordering::Relaxed) != 0 {
                    ctx.fail("a writer found readers inside (holding across ticks)");
                    break;
                }
                busy_work(CS_WORK);
            }
        }
        if self.writer.swap(0, Ordering::Relaxed) != me {
            ctx.fail("two writers inside (found another on exit)");
        }
    }

    /// The prober (thread context, no read lock held): a probe
    /// ([`super::probe`]) whose attempt is a read lock, which must be
    /// refused.
    fn probe(&self, ctx: &Ctx) {
        // With waiting interrupt readers, one on this CPU would wait for
        // the server's write lock while the server waits for our answer.
        let _irq = (self.irq_read == IrqRead::Wait).then(IrqState::save);
        self.probe.probe(ctx.cpu, || {
            if let Some(data) = self.lock.try_read() {
                ctx.fail("try_read() got in while another CPU held the write lock");
                drop(data);
            }
        });
    }

    /// Every CPU, every iteration: serves a probe another CPU is ready for
    /// ([`super::probe`]) by holding the write lock for it.
    fn serve_probe(&self, ctx: &Ctx) {
        self.probe.serve(ctx.cpu, |hand_over| {
            let _irq = (self.irq_read == IrqRead::Wait).then(IrqState::save);
            let _data = self.lock.write();
            hand_over();
        });
    }
}

impl<R: RawRwLock + Sync> Suite for RwTorture<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        // A CPU goes offline between two operations (no read or write lock
        // held); a probe waits for a server only for a bounded time, and a
        // server only for the prober that committed. The gated flavour's
        // gate waits for grace periods, which offline CPUs do not hold up.
        Ok(())
    }

    fn setup(&self, _cpus: usize) {
        let _irq = IrqState::save();
        self.lock.write().write(0);
        self.writer.store(0, Ordering::Relaxed);
        self.readers.store(0, Ordering::Relaxed);
        self.probe.reset();
        self.version.store(0, Ordering::Relaxed);
        self.gp_start.store(ksync::rcu::gp_seq(), Ordering::Relaxed);
        for counters in [
            &self.reads,
            &self.writes,
            &self.irq_reads,
            &self.irq_busy,
            &self.irq_behind_writer,
        ] {
            counters.reset();
        }
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 23);
        let (mut reads, mut writes) = (0, 0);
        while !ctx.should_stop() {
            self.serve_probe(ctx);
            if rng.below(PROBE_ONE_IN) == 0 {
                self.probe(ctx);
            } else if rng.below(WRITE_ONE_IN) == 0 {
                let long = self.irq_read == IrqRead::Wait
                    && ctx.cpu == 0
                    && ctx.thread == 0
                    && writes % LONG_HOLD_ONE_IN == 0;
                self.write(ctx, long);
                writes += 1;
            } else {
                let data = self.lock.read();
                self.read_section(ctx, &data);
                drop(data);
                reads += 1;
            }
            busy_work(rng.below(16) as u32);
        }
        self.reads.add(ctx.cpu, reads);
        self.writes.add(ctx.cpu, writes);
    }

    fn irq(&self, ctx: &Ctx) {
        for _ in 0..IRQ_READS {
            let data = match self.irq_read {
                IrqRead::Try => self.lock.try_read(),
                IrqRead::Wait => Some(self.lock.read()),
            };
            match data {
                Some(data) => {
                    self.read_section(ctx, &data);
                    self.irq_reads.add(ctx.cpu, 1);
                }
                None => self.irq_busy.add(ctx.cpu, 1),
            }
        }
        if self.irq_read == IrqRead::Wait {
            for _ in 0..IRQ_WRITER_POLLS {
                // Relaxed: a hint; the lock orders the read below.
                if self.writer.load(Ordering::Relaxed) != 0 {
                    let data = self.lock.read();
                    self.read_section(ctx, &data);
                    self.irq_reads.add(ctx.cpu, 1);
                    self.irq_behind_writer.add(ctx.cpu, 1);
                    break;
                }
                core::hint::black_box(());
            }
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        let writes = self.writes.sum(cpus);
        let version = self.version.load(Ordering::Relaxed);
        let value = {
            let _irq = IrqState::save();
            self.lock.read().read()
        };
        let failure = if version != writes {
            Some("lost updates: the version does not match the writes")
        } else if value != Some(version) {
            Some("the protected words do not hold the last version")
        } else {
            None
        };
        self.info.report_per_cpu(
            cpus,
            &[
                ("reads", &self.reads),
                ("writes", &self.writes),
                ("probes", self.probe.done()),
                ("irq_reads", &self.irq_reads),
                ("irq_busy", &self.irq_busy),
                ("irq_behind_writer", &self.irq_behind_writer),
            ],
        );
        let gps = (ksync::rcu::gp_seq() >> 2) - (self.gp_start.load(Ordering::Relaxed) >> 2);
        self.info.report(format_args!(
            "{} reads ({} in interrupts, {} refused there), {writes} writes, version {version}, {} probes, {gps} RCU grace periods",
            self.reads.sum(cpus) + self.irq_reads.sum(cpus),
            self.irq_reads.sum(cpus),
            self.irq_busy.sum(cpus),
            self.probe.done().sum(cpus)
        ));
        Summary::new(
            self.reads.sum(cpus) + self.irq_reads.sum(cpus) + writes,
            self.reads.min_max(cpus),
            failure,
        )
    }
}
