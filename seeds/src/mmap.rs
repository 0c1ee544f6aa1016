//! The scalable `mmap_sem` (Peter Zijlstra's `rw_mutex`, 2007: per-CPU
//! reader counts; ebizzy system time 137.7 s -> 124.3 s on a 2-way box;
//! Eric Dumazet's objection: the writer sums NR_CPUS counts).
//!
//! An address space: a few VMAs and a page per CPU. A "page fault" takes
//! the address space's lock for read, finds the VMA that covers its
//! address and touches this CPU's page; CPU 0 now and then maps or unmaps
//! a VMA under the lock for write (the VMA is `CHANGING` inside the write
//! section, which no reader may ever see).
//!
//! * After: [`PerCpuRwLock`] (a fence per read lock) and
//!   [`GatedPerCpuRwLock`] (no fence while no writer is around).
//! * Before: [`spin::RwLock`] (one shared reader count), and [`Rwsem`], a
//!   counter under a ticket lock (Linux's `rwsem-spinlock.c`).
//! * Control: faults that take no lock at all.
//! * Sleeping, the 2007 rw_mutex as it was meant:
//!   [`PerCpuRwSemaphore`] (after) and [`RwSemaphore`] (before): writers
//!   sleep instead of spinning. In [`MmapSem`] their faults never sleep
//!   (the fast paths compared with the spinning locks'); in [`MmapSleep`]
//!   one fault in [`IO_EVERY`] also sleeps inside its read section for a
//!   simulated I/O ([`IO_US`], a timed wait on a queue nobody wakes: the
//!   kernel's `block` hook with a deadline), with a control whose faults
//!   take no lock.
//!
//! The writer's cost grows with the number of possible CPUs
//! ([`MAX_CPUS`](ksync::kernel::MAX_CPUS), `KSYNC_MAX_CPUS` at build time):
//! [`MmapSem::write_cycle`] is one empty write section, for measuring it.

use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicU32, AtomicU64};

use core::sync::atomic::AtomicBool;
use core::time::Duration;
use ksync::percpu::CachePadded;
use ksync::percpu_rwlock::{GatedPerCpuRwLock, PerCpuRwLock};

use ksync::percpu_rwsem::PerCpuRwSemaphore;
use ksync::rcu;
use ksync::rwsem::RwSemaphore;
use ksync::spinlock::TicketMutex;
use ksync::wait::WaitQueue;

use crate::{Config, Counts, Faults, Rng, Settings, Violation, Workload};

/// VMAs: the first `FIXED` always mapped, the others toggled by the writer.
pub const VMAS: usize = 8;
const FIXED: usize = 4;
/// Pages (one per CPU, by CPU index modulo).
pub const PAGES: usize = 64;
const VMA_SHIFT: u32 = 20;
const PAGE_SHIFT: u32 = 12;

const UNMAPPED: u32 = 0;
const MAPPED: u32 = 1;
const CHANGING: u32 = 2;

const MESSAGES: [&str; 1] = ["a fault saw a VMA in the middle of a write (mmap/munmap)"];

/// A VMA.
#[derive(Debug)]
struct Vma {
    state: AtomicU32,
}

/// The state of [`Rwsem`].
#[derive(Debug)]
struct RwsemState {
    /// Readers inside (> 0), a writer (-1) or nobody (0).
    active: i32,
    /// Writers waiting: new readers wait behind them (FIFO-ish, as the
    /// spinlock rwsem's wait queue).
    writers_waiting: u32,
}

/// A reader-writer semaphore whose state sits under one ticket lock
/// (Linux's `lib/rwsem-spinlock.c`; spinning instead of sleeping).
#[derive(Debug)]
pub struct Rwsem {
    state: TicketMutex<RwsemState>,
}

impl Default for Rwsem {
    fn default() -> Self {
        Self::new()
    }
}

impl Rwsem {
    /// An unlocked semaphore.
    pub const fn new() -> Self {
        Rwsem {
            state: TicketMutex::new(RwsemState {
                active: 0,
                writers_waiting: 0,
            }),
        }
    }

    /// `down_read`.
    #[inline]
    pub fn down_read(&self) {
        loop {
            {
                let mut s = self.state.lock();
                if s.active >= 0 && s.writers_waiting == 0 {
                    s.active += 1;
                    return;
                }
            }
            core::hint::spin_loop();
        }
    }

    /// `up_read`.
    #[inline]
    pub fn up_read(&self) {
        self.state.lock().active -= 1;
    }

    /// `down_write`.
    pub fn down_write(&self) {
        self.state.lock().writers_waiting += 1;
        loop {
            {
                let mut s = self.state.lock();
                if s.active == 0 {
                    s.active = -1;
                    s.writers_waiting -= 1;
                    return;
                }
            }
            core::hint::spin_loop();
        }
    }

    /// `up_write`.
    pub fn up_write(&self) {
        self.state.lock().active = 0;
    }

    fn is_idle(&self) -> bool {
        let s = self.state.lock();
        s.active == 0 && s.writers_waiting == 0
    }
}

/// Which lock guards the address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapVariant {
    /// [`PerCpuRwLock`] (after).
    Percpu,
    /// [`GatedPerCpuRwLock`] (after).
    Gated,
    /// [`spin::RwLock`] (before).
    SpinRwLock,
    /// [`Rwsem`] (before).
    Rwsem,
    /// Control: faults without the lock.
    ControlNoLock,
    /// [`PerCpuRwSemaphore`] (after, sleeping).
    PercpuRwsem,
    /// [`RwSemaphore`] (before, sleeping).
    RwSemaphore,
    /// Control of [`MmapSleep`]: faults (and their I/O) without the lock,
    /// the writer under the [`PerCpuRwSemaphore`].
    ControlSleepNoLock,
}

/// Every variant of both workloads (the settings store an index into it).
const ALL: &[(MmapVariant, &str)] = &[
    (MmapVariant::Percpu, "PerCpuRwLock"),
    (MmapVariant::Gated, "GatedPerCpuRwLock"),
    (MmapVariant::SpinRwLock, "spin::RwLock"),
    (MmapVariant::Rwsem, "ticket-lock rwsem"),
    (
        MmapVariant::ControlNoLock,
        "control: faults without the lock",
    ),
    (MmapVariant::PercpuRwsem, "PerCpuRwSemaphore"),
    (MmapVariant::RwSemaphore, "RwSemaphore"),
    (
        MmapVariant::ControlSleepNoLock,
        "control: sleeping faults without the lock",
    ),
];

/// [`MmapSleep`]: one fault in this many sleeps for a simulated I/O
/// (default of [`MmapSem::set_io`]).
pub const IO_EVERY: u32 = 1 << 16;
/// [`MmapSleep`]: how long the simulated I/O sleeps, microseconds: one
/// tick of a `HZ=1000` kernel (default of [`MmapSem::set_io`]).
pub const IO_US: u32 = 1000;
/// Under torture ([`Config::delay`] > 0), one fault in this many sleeps.
const TORTURE_IO_EVERY: u32 = 64;
/// Under torture, the I/O's length, microseconds.
const TORTURE_IO_US: u32 = 50;

/// Nobody ever wakes it: the simulated I/O's waits end by their deadlines.
static IO: WaitQueue = WaitQueue::new();

/// The `mmap_sem` workload.
#[derive(Debug)]
pub struct MmapSem {
    percpu: PerCpuRwLock<()>,
    gated: GatedPerCpuRwLock<()>,
    spin: spin::RwLock<()>,
    rwsem: Rwsem,
    percpu_rwsem: PerCpuRwSemaphore<()>,
    rw_semaphore: RwSemaphore<()>,
    /// [`MmapSleep`] runs: faults sleep now and then.
    io: AtomicBool,
    io_every: AtomicU32,
    io_us: AtomicU32,
    /// The CPU idles while its fault sleeps (see [`MmapSem::set_io`]).
    io_idles: AtomicBool,
    vmas: [Vma; VMAS],
    pages: [CachePadded<AtomicU64>; PAGES],
    settings: Settings,
    faults: Faults,
}

impl Default for MmapSem {
    fn default() -> Self {
        Self::new()
    }
}

impl MmapSem {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        MmapSem {
            percpu: PerCpuRwLock::new(()),
            gated: GatedPerCpuRwLock::new(()),
            spin: spin::RwLock::new(()),
            rwsem: Rwsem::new(),
            percpu_rwsem: PerCpuRwSemaphore::new(()),
            rw_semaphore: RwSemaphore::new(()),
            io: AtomicBool::new(false),
            io_every: AtomicU32::new(IO_EVERY),
            io_us: AtomicU32::new(IO_US),
            io_idles: AtomicBool::new(false),
            vmas: [const {
                Vma {
                    state: AtomicU32::new(UNMAPPED),
                }
            }; VMAS],
            pages: [const { CachePadded::new(AtomicU64::new(0)) }; PAGES],
            settings: Settings::new(),
            faults: Faults::new(),
        }
    }

    /// The simulated I/O of [`MmapSleep`]'s faults: one in `every` sleeps
    /// `us` microseconds (0: never; defaults [`IO_EVERY`], [`IO_US`];
    /// torture runs use their own). With `cpu_idles`, the fault's CPU
    /// enters an RCU extended quiescent state while it sleeps
    /// ([`rcu::idle_enter`]): right where a thread is a CPU (ksync's host
    /// test kernel, whose `block` reports nothing to RCU), where a sleeping
    /// thread's CPU has nothing else to run. A kernel with a scheduler
    /// reports the context switch itself; leave it `false` there. Call it
    /// with no run going.
    pub fn set_io(&self, every: u32, us: u32, cpu_idles: bool) {
        // Relaxed: between runs; the next run's start orders it.
        self.io_every.store(every, Relaxed);
        self.io_us.store(us, Relaxed);
        self.io_idles.store(cpu_idles, Relaxed);
    }

    /// The simulated I/O: a timed sleep inside the read section.
    #[cold]
    fn sleep_io(&self, us: u32) {
        // Relaxed: a setting (see `set_io`).
        let idles = self.io_idles.load(Relaxed);
        if idles {
            rcu::idle_enter();
        }
        let slept = IO.wait_event_timeout(|| false, Duration::from_micros(u64::from(us)));
        debug_assert!(!slept, "nobody wakes the I/O queue");
        if idles {
            rcu::idle_exit();
        }
    }

    /// Runs `f` under the read side of `variant`'s lock.
    #[inline]
    fn read<R>(&self, variant: MmapVariant, f: impl FnOnce() -> R) -> R {
        match variant {
            MmapVariant::Percpu => {
                let _g = self.percpu.read();
                f()
            }
            MmapVariant::Gated => {
                let _g = self.gated.read();
                f()
            }
            MmapVariant::SpinRwLock => {
                let _g = self.spin.read();
                f()
            }
            MmapVariant::Rwsem => {
                self.rwsem.down_read();
                let r = f();
                self.rwsem.up_read();
                r
            }
            MmapVariant::ControlNoLock | MmapVariant::ControlSleepNoLock => f(),
            MmapVariant::PercpuRwsem => {
                let _g = self.percpu_rwsem.read();
                f()
            }
            MmapVariant::RwSemaphore => {
                let _g = self.rw_semaphore.read();
                f()
            }
        }
    }

    /// Runs `f` under the write side of `variant`'s lock (the control's
    /// writer takes the per-CPU lock, which its readers ignore).
    #[inline]
    fn write<R>(&self, variant: MmapVariant, f: impl FnOnce() -> R) -> R {
        match variant {
            MmapVariant::Percpu | MmapVariant::ControlNoLock => {
                let _g = self.percpu.write();
                f()
            }
            MmapVariant::Gated => {
                let _g = self.gated.write();
                f()
            }
            MmapVariant::SpinRwLock => {
                let _g = self.spin.write();
                f()
            }
            MmapVariant::Rwsem => {
                self.rwsem.down_write();
                let r = f();
                self.rwsem.up_write();
                r
            }
            MmapVariant::PercpuRwsem | MmapVariant::ControlSleepNoLock => {
                let _g = self.percpu_rwsem.write();
                f()
            }
            MmapVariant::RwSemaphore => {
                let _g = self.rw_semaphore.write();
                f()
            }
        }
    }

    /// One empty write section of `variant`'s lock: the writer's cost
    /// (for the per-CPU locks, a sum over `MAX_CPUS` counts).
    pub fn write_cycle(&self, variant: MmapVariant) {
        self.write(variant, || ());
    }

    /// The fault handler, under the read lock: `true` if `addr` was mapped.
    #[inline]
    fn handle(&self, cpu: usize, addr: u64, delay: u32, io_us: u32) -> bool {
        // Relaxed: the lock orders VMA changes against faults.
        let vma = &self.vmas[(addr >> VMA_SHIFT) as usize % VMAS];
        let state = vma.state.load(Relaxed);
        if state == CHANGING {
            self.faults.record(0, addr);
        }
        if state != MAPPED {
            return false;
        }
        crate::delay(delay);
        if io_us != 0 {
            // The page is not in memory: read it in, holding the lock.
            self.sleep_io(io_us);
        }
        if vma.state.load(Relaxed) != MAPPED {
            self.faults.record(0, addr);
        }
        // This CPU's page: only this CPU writes it.
        let page = &self.pages[cpu % PAGES];
        page.store(page.load(Relaxed) + 1, Relaxed);
        true
    }

    /// `mmap` or `munmap` of a toggled VMA.
    fn map_or_unmap(&self, variant: MmapVariant, rng: &mut Rng, delay: u32) {
        let vma = &self.vmas[FIXED + rng.below((VMAS - FIXED) as u64) as usize];
        self.write(variant, || {
            // Relaxed: inside the write section.
            let was = vma.state.load(Relaxed);
            vma.state.store(CHANGING, Relaxed);
            crate::delay(delay);
            vma.state
                .store(if was == MAPPED { UNMAPPED } else { MAPPED }, Relaxed);
        });
    }
}

impl Workload for MmapSem {
    const NAME: &'static str = "mmap_sem";
    type Variant = MmapVariant;
    const VARIANTS: &'static [(MmapVariant, &'static str)] =
        &[ALL[0], ALL[1], ALL[2], ALL[3], ALL[4], ALL[5], ALL[6]];
    const CONTROL: MmapVariant = MmapVariant::ControlNoLock;
    const BENCH: Config = Config {
        write_every: 4096,
        delay: 0,
    };

    fn setup(&'static self, variant: MmapVariant, config: Config) {
        self.setup_run(variant, config, false);
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        self.step_run(cpu, n, rng)
    }

    fn check(&self) -> Result<(), Violation> {
        self.check_run()
    }
}

impl MmapSem {
    fn setup_run(&self, variant: MmapVariant, config: Config, io: bool) {
        self.settings.set(ALL, variant, config);
        // Relaxed: setup; the run's start orders it.
        self.io.store(io, Relaxed);
        self.faults.reset();
        // Relaxed: setup; the run's start orders it.
        for (k, v) in self.vmas.iter().enumerate() {
            v.state.store(
                if k < FIXED || k % 2 == 0 {
                    MAPPED
                } else {
                    UNMAPPED
                },
                Relaxed,
            );
        }
        for p in &self.pages {
            p.store(0, Relaxed);
        }
    }

    fn step_run(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        let (variant, config) = self.settings.get(ALL);
        // Relaxed: settings (see `setup_run` and `set_io`).
        let (io_every, io_us) = match (self.io.load(Relaxed), config.delay) {
            (false, _) => (0, 0),
            (true, 0) => (self.io_every.load(Relaxed), self.io_us.load(Relaxed)),
            (true, _) => (TORTURE_IO_EVERY, TORTURE_IO_US),
        };
        let mut c = Counts::default();
        for i in 0..n {
            if crate::writes_now(cpu, config, rng) {
                self.map_or_unmap(variant, rng, config.delay);
                c.writes += 1;
            }
            let r = rng.next_u64();
            let vma = if config.delay == 0 && r & 7 != 0 {
                cpu % FIXED
            } else {
                (r >> 32) as usize % VMAS
            };
            let addr = ((vma as u64) << VMA_SHIFT) | (((cpu % PAGES) as u64) << PAGE_SHIFT);
            let io = if io_every != 0 && rng.below(u64::from(io_every)) == 0 {
                io_us
            } else {
                0
            };
            if !self.read(variant, || self.handle(cpu, addr, config.delay, io)) {
                c.misses += 1;
            }
            c.ops += 1;
            crate::housekeeping(i);
        }
        rcu::quiescent_state();
        c
    }

    fn check_run(&self) -> Result<(), Violation> {
        self.faults.result(MmapSem::NAME, &MESSAGES)?;
        if let Some(k) = self
            .vmas
            .iter()
            .position(|v| v.state.load(Relaxed) > MAPPED)
        {
            return Err(crate::violation(
                MmapSem::NAME,
                "a VMA was left half-changed",
                k as u64,
            ));
        }
        if self.percpu.is_locked()
            || self.gated.is_locked()
            || self.spin.try_write().is_none()
            || !self.rwsem.is_idle()
            || self.percpu_rwsem.is_locked()
            || self.rw_semaphore.is_locked()
        {
            return Err(crate::violation(
                MmapSem::NAME,
                "a lock is still held after the run",
                0,
            ));
        }
        Ok(())
    }
}

/// The `mmap_sem` seed as it was: [`MmapSem`] with the sleeping locks
/// only, and faults that sleep now and then inside their read sections
/// (a simulated I/O; [`MmapSem::set_io`] on [`inner`](Self::inner)).
#[derive(Debug)]
pub struct MmapSleep {
    inner: MmapSem,
}

impl Default for MmapSleep {
    fn default() -> Self {
        Self::new()
    }
}

impl MmapSleep {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        MmapSleep {
            inner: MmapSem::new(),
        }
    }

    /// The address space (for [`MmapSem::set_io`]).
    pub fn inner(&self) -> &MmapSem {
        &self.inner
    }

    /// Violations the faults recorded so far in this run (a control may
    /// stop once it is caught).
    pub fn violations(&self) -> u64 {
        self.inner.faults.count()
    }
}

impl Workload for MmapSleep {
    const NAME: &'static str = "mmap_sem, sleeping faults";
    type Variant = MmapVariant;
    const VARIANTS: &'static [(MmapVariant, &'static str)] = &[ALL[5], ALL[6], ALL[7]];
    const CONTROL: MmapVariant = MmapVariant::ControlSleepNoLock;
    const BENCH: Config = MmapSem::BENCH;

    fn setup(&'static self, variant: MmapVariant, config: Config) {
        self.inner.setup_run(variant, config, true);
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        self.inner.step_run(cpu, n, rng)
    }

    fn check(&self) -> Result<(), Violation> {
        self.inner.check_run()
    }
}
