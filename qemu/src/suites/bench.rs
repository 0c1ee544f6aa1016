//! In-guest benchmark: one reference taken and dropped, three ways, by one
//! CPU and by all CPUs at once on the same cache line:
//!
//! * `lockref`: [`LockRef::get`] + [`LockRef::put_return`];
//! * `spinlock`: a [`TicketMutex`]-protected count, `+= 1` then `-= 1`;
//! * `atomic`: `fetch_add(1)` + `fetch_sub(1)`, the one-line ceiling;
//! * `xv6-irq-lock`: the lock a hobby kernel writes itself, xv6's
//!   test-and-set spinlock with `push_off`/`pop_off` interrupt counting and
//!   its `holding` checks ([`Xv6Lock`]), `+= 1` then `-= 1`: the baseline of
//! * `irq-ticket`, `irq-queued`, `irq-ttas`: the same with ksync's
//!   IRQ-saving locks ([`IrqTicketMutex`], [`IrqQueuedMutex`],
//!   [`IrqTtasMutex`]).
//!
//! Each phase runs for [`PHASE_MS`] in all, in [`ROUNDS`] slices: the
//! phases of one CPU count take turns, one slice of each op per round, so
//! that a host busy for a while (a loaded host running TCG) slows every op
//! alike and the ratios between ops (each IRQ-saving lock against the xv6
//! baseline) hold up where back-to-back phases would each catch a
//! different load. Every CPU reports its operations and the counter ticks
//! it spent (TSC on x86_64, `CNTVCT_EL0` on aarch64, `time` on riscv64),
//! summed over the slices, as `KSYNC-BENCH` lines. Under TCG these figures
//! are emulation costs, not hardware performance: the host runner labels
//! them so.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use ksync::LockRef;
use ksync::spinlock::{
    ArchIrq, IrqControl, IrqQueuedMutex, IrqTicketMutex, IrqTtasMutex, TicketMutex,
};

use crate::kernel::cpu::{self, MAX_CPUS};

use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::Counters;
use crate::kernel::time;
use crate::println;

/// Guest time per phase (the sum of its slices).
pub const PHASE_MS: u64 = 100;
/// Slices per phase (see the module docs).
const ROUNDS: u64 = 5;
/// Operations between two reads of the counter.
const BATCH: u64 = 64;

#[derive(Clone, Copy)]
enum Op {
    Lockref,
    Spinlock,
    Atomic,
    Xv6,
    IrqTicket,
    IrqQueued,
    IrqTtas,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Lockref => "lockref-get-put",
            Op::Spinlock => "spinlock-inc-dec",
            Op::Atomic => "atomic-add-sub",
            Op::Xv6 => "xv6-irq-lock",
            Op::IrqTicket => "irq-ticket",
            Op::IrqQueued => "irq-queued",
            Op::IrqTtas => "irq-ttas",
        }
    }
}

const OPS: [Op; 7] = [
    Op::Lockref,
    Op::Spinlock,
    Op::Atomic,
    Op::Xv6,
    Op::IrqTicket,
    Op::IrqQueued,
    Op::IrqTtas,
];

/// One CPU's interrupt-disable nesting, as xv6's `struct cpu` keeps it.
struct Xv6Cpu {
    /// Depth of `push_off` nesting (xv6's `noff`).
    noff: UnsafeCell<usize>,
    /// The interrupt state before the outermost `push_off` (xv6's
    /// `intena`; here the saved flags).
    intena: UnsafeCell<Option<<ArchIrq as IrqControl>::Flags>>,
}

/// Per CPU, each on its own line.
struct Xv6Cpus([crossbeam_utils::CachePadded<Xv6Cpu>; MAX_CPUS]);

// SAFETY: each CPU touches only its own entry, with interrupts masked
// (between its `push_off` and `pop_off`), as xv6 does.
unsafe impl Sync for Xv6Cpus {}

static XV6_CPUS: Xv6Cpus = Xv6Cpus(
    [const {
        crossbeam_utils::CachePadded::new(Xv6Cpu {
            noff: UnsafeCell::new(0),
            intena: UnsafeCell::new(None),
        })
    }; MAX_CPUS],
);

/// xv6's `push_off`: interrupts off, counting the nesting.
fn push_off() {
    let flags = ArchIrq::save();
    let me = &XV6_CPUS.0[cpu::current()];
    // SAFETY: this CPU's entry, interrupts masked (see `Xv6Cpus`).
    unsafe {
        if *me.noff.get() == 0 {
            *me.intena.get() = Some(flags);
        }
        *me.noff.get() += 1;
    }
}

/// xv6's `pop_off`: the outermost one restores the interrupt state. As
/// xv6's, it panics if interrupts are on or there was no `push_off`.
fn pop_off() {
    if crate::arch::irq_enabled() {
        panic!("pop_off - interruptible");
    }
    let me = &XV6_CPUS.0[cpu::current()];
    // SAFETY: as in `push_off`.
    unsafe {
        if *me.noff.get() < 1 {
            panic!("pop_off");
        }
        *me.noff.get() -= 1;
        let outermost = *me.noff.get() == 0;
        if let Some(flags) = (*me.intena.get()).take_if(|_| outermost) {
            // SAFETY: the outermost `push_off`'s save on this CPU.
            ArchIrq::restore(flags);
        }
    }
}

/// xv6's spinlock as a hobby kernel ports it: test-and-set, interrupts
/// counted off with `push_off`/`pop_off`, the holder's CPU recorded and
/// checked (`holding`) on both sides, as xv6's `acquire` and `release` do.
struct Xv6Lock {
    locked: AtomicBool,
    cpu: AtomicUsize,
    value: UnsafeCell<u64>,
}

// SAFETY: `value` is touched only while `locked` is held.
unsafe impl Sync for Xv6Lock {}

impl Xv6Lock {
    const fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
            cpu: AtomicUsize::new(usize::MAX),
            value: UnsafeCell::new(0),
        }
    }

    /// xv6's `holding`: whether this CPU holds the lock.
    #[inline(always)]
    fn holding(&self) -> bool {
        // Relaxed: as xv6's plain reads; `cpu` is this CPU's only while
        // this CPU holds the lock (it stores and clears it as holder).
        self.locked.load(Ordering::Relaxed) && self.cpu.load(Ordering::Relaxed) == cpu::current()
    }

    /// xv6's `acquire` + the update + `release`, with xv6's `holding`
    /// checks (`panic("acquire")`, `panic("release")`).
    #[inline(always)]
    fn update(&self, f: impl FnOnce(&mut u64)) {
        push_off();
        if self.holding() {
            panic!("acquire");
        }
        // Acquire pairs with the Release store below (xv6: the
        // test-and-set, then `__sync_synchronize`).
        while self.locked.swap(true, Ordering::Acquire) {
            core::hint::spin_loop();
        }
        // Relaxed: xv6's `lk->cpu = mycpu()`, read by `holding`.
        self.cpu.store(cpu::current(), Ordering::Relaxed);
        // SAFETY: the lock is held.
        f(unsafe { &mut *self.value.get() });
        if !self.holding() {
            panic!("release");
        }
        self.cpu.store(usize::MAX, Ordering::Relaxed);
        // Release pairs with the Acquire swap above.
        self.locked.store(false, Ordering::Release);
        pop_off();
    }

    fn value(&self) -> u64 {
        let mut v = 0;
        self.update(|x| v = *x);
        v
    }
}

/// The benchmark's state. Every lock, the barrier and the slice's end
/// sit on cache lines of their own: with them packed together, the CPUs
/// that wait at the barrier during a one-CPU phase kept pulling the line
/// of whichever lock shared it (under TCG the host's cache lines are the
/// guest's), and that lock's figure depended on the struct's layout (the
/// xv6 baseline's one-CPU phases ran at about half speed in one build).
pub struct Bench {
    info: Info,
    lockref: CachePadded<LockRef>,
    spinlock: CachePadded<TicketMutex<u64>>,
    atomic: CachePadded<AtomicU64>,
    xv6: CachePadded<Xv6Lock>,
    irq_ticket: CachePadded<IrqTicketMutex<u64>>,
    irq_queued: CachePadded<IrqQueuedMutex<u64>>,
    irq_ttas: CachePadded<IrqTtasMutex<u64>>,
    barrier: CachePadded<Barrier>,
    phase_end: CachePadded<AtomicU64>,
    /// Per op (in [`OPS`] order), per CPU, over the slices of a phase.
    ops: [Counters; OPS.len()],
    /// As `ops`, the counter ticks.
    ticks: [Counters; OPS.len()],
    total_ops: AtomicU64,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&BENCH];

/// The benchmark.
pub static BENCH: Bench = Bench {
    // Every phase, plus slack for the barriers (two per slice, 70 per
    // boot): at -smp 8 on a two-core host at a load of 20 they took more
    // than 10 s past a budget of 1.5 s of slack, and the watchdog failed
    // 4 of 5 boots. The suite ends when its phases do, so a generous
    // budget costs nothing. Past it, each slice's end is progress
    // (`Ctx::progress`): the watchdog fails the run only when no slice
    // ended for its grace, so a host that stretches every slice cannot
    // fail it, and a hang still does.
    info: Info::new(
        "bench",
        Kind::Bench,
        PHASE_MS * 2 * OPS.len() as u64 + 30_000,
    ),
    lockref: CachePadded::new(LockRef::new(1)),
    spinlock: CachePadded::new(TicketMutex::new(0)),
    atomic: CachePadded::new(AtomicU64::new(0)),
    xv6: CachePadded::new(Xv6Lock::new()),
    irq_ticket: CachePadded::new(IrqTicketMutex::new(0)),
    irq_queued: CachePadded::new(IrqQueuedMutex::new(0)),
    irq_ttas: CachePadded::new(IrqTtasMutex::new(0)),
    barrier: CachePadded::new(Barrier::new()),
    phase_end: CachePadded::new(AtomicU64::new(0)),
    ops: [const { Counters::new() }; OPS.len()],
    ticks: [const { Counters::new() }; OPS.len()],
    total_ops: AtomicU64::new(0),
};

/// One function per op, each in its own `.text.bench_loop.N` section, and
/// [`Bench::hammer`], which calls the op's one.
macro_rules! op_loops {
    ($($name:ident: $op:ident, $section:literal;)*) => {
        impl Bench {
            $(
                #[inline(never)]
                // SAFETY: a plain code section of this kernel's own,
                // placed by `arch/bench_loops.ld` inside `.text`; nothing
                // else is put there.
                #[unsafe(link_section = $section)]
                fn $name(&self, start: u64, end: u64) -> (u64, u64) {
                    self.hammer_inline(Op::$op, start, end)
                }
            )*

            /// Runs `op` from `start` until the counter reaches `end`;
            /// returns the operations done and the counter at the end.
            /// Each op's loop is a function of its own at the start of a
            /// guest page of its own (the `.text.bench_loop.N` sections,
            /// aligned by `arch/bench_loops.ld`): TCG chains translated
            /// blocks directly only within a guest page, so a loop that
            /// crosses a page boundary pays a block lookup at every
            /// crossing. With the loops where the compiler put them,
            /// the same source in two places read 0.72x-0.76x and
            /// 0.92x-1.10x the xv6 lock (x86_64, 4 boots; the slow copy's
            /// loop crossed a page boundary).
            fn hammer(&self, op: Op, start: u64, end: u64) -> (u64, u64) {
                match op {
                    $(Op::$op => self.$name(start, end),)*
                }
            }
        }
    };
}

op_loops! {
    loop_lockref: Lockref, ".text.bench_loop.0";
    loop_spinlock: Spinlock, ".text.bench_loop.1";
    loop_atomic: Atomic, ".text.bench_loop.2";
    loop_xv6: Xv6, ".text.bench_loop.3";
    loop_irq_ticket: IrqTicket, ".text.bench_loop.4";
    loop_irq_queued: IrqQueued, ".text.bench_loop.5";
    loop_irq_ttas: IrqTtas, ".text.bench_loop.6";
}

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
            Op::Xv6 => {
                self.xv6.update(|v| *v += 1);
                self.xv6.update(|v| *v -= 1);
            }
            Op::IrqTicket => {
                *self.irq_ticket.lock() += 1;
                *self.irq_ticket.lock() -= 1;
            }
            Op::IrqQueued => {
                *self.irq_queued.lock() += 1;
                *self.irq_queued.lock() -= 1;
            }
            Op::IrqTtas => {
                *self.irq_ttas.lock() += 1;
                *self.irq_ttas.lock() -= 1;
            }
        }
    }

    /// The loop of [`hammer`](Self::hammer), inlined into each op's own
    /// function.
    #[inline(always)]
    fn hammer_inline(&self, op: Op, start: u64, end: u64) -> (u64, u64) {
        let mut ops = 0;
        let mut now = start;
        while now < end {
            for _ in 0..BATCH {
                self.once(op);
            }
            ops += BATCH;
            now = time::now();
        }
        (ops, now)
    }

    /// The phases of `cpus` CPUs: [`ROUNDS`] rounds of one slice per op.
    fn phases(&self, ctx: &Ctx, cpus: usize) {
        if ctx.cpu == 0 {
            for (ops, ticks) in self.ops.iter().zip(&self.ticks) {
                ops.reset();
                ticks.reset();
            }
        }
        for _ in 0..ROUNDS {
            for (i, op) in OPS.into_iter().enumerate() {
                self.slice(ctx, i, op, cpus);
            }
        }
        if ctx.cpu == 0 {
            for (i, op) in OPS.into_iter().enumerate() {
                self.report(i, op, cpus);
            }
        }
    }

    /// One slice: `cpus` CPUs hammer `op` (`OPS[i]`) until the slice ends.
    ///
    /// The end is set once every CPU has passed the barrier, by CPU 0 (the
    /// others that take part wait for it): with more vCPUs than host cores
    /// the barrier itself can take longer than a slice, and an end set
    /// before it left some slices no time at all.
    fn slice(&self, ctx: &Ctx, i: usize, op: Op, cpus: usize) {
        if ctx.cpu == 0 {
            // Relaxed: the barrier orders it before the other CPUs' loads.
            self.phase_end.store(0, Ordering::Relaxed);
        }
        self.barrier.wait(ctx.cpus);
        if ctx.cpu < cpus {
            if ctx.cpu == 0 {
                let end = time::now() + time::ms_to_ticks(PHASE_MS / ROUNDS);
                // Release pairs with the Acquire loads below (a plain
                // value; Release keeps it simple to reason about).
                self.phase_end.store(end, Ordering::Release);
            }
            let end = loop {
                // Acquire pairs with CPU 0's Release store above.
                match self.phase_end.load(Ordering::Acquire) {
                    0 => core::hint::spin_loop(),
                    end => break end,
                }
            };
            let start = time::now();
            let (ops, now) = self.hammer(op, start, end);
            self.ops[i].add(ctx.cpu, ops);
            self.ticks[i].add(ctx.cpu, now - start);
        } else {
            self.sit_out();
        }
        self.barrier.wait(ctx.cpus);
        // Every CPU finished the slice: the watchdog's grace counts from
        // here (a slice that never ends, a hang, still fails).
        if ctx.cpu == 0 {
            ctx.progress();
        }
    }

    /// A CPU that takes no part in this slice (the one-CPU phase of a boot
    /// with more): sleeps until the slice's end, a timer tick at a time
    /// (`sched::relax`: `hlt`/`wfi`, which TCG turns into a host thread
    /// that sleeps), and only then joins the barrier. Spinning at the
    /// barrier instead kept every idle vCPU busy on the host, competing
    /// with the one working vCPU for the host's cores (at `-smp 8` on two
    /// cores, seven spinning vCPUs against one). The one-CPU cells of
    /// `-smp 4` and `8` stay noisy on a loaded host all the same (the
    /// host's other jobs); `cargo xtask bench --guest --icount` counts
    /// instructions instead.
    fn sit_out(&self) {
        // Acquire pairs with CPU 0's Release store in `slice` (the value
        // is all that is read; CPU 0 reset it to 0 before the barrier).
        let end = loop {
            match self.phase_end.load(Ordering::Acquire) {
                0 => crate::sched::relax(),
                end => break end,
            }
        };
        while time::now() < end {
            crate::sched::relax();
        }
    }

    fn report(&self, i: usize, op: Op, cpus: usize) {
        let (ops, ticks) = (&self.ops[i], &self.ticks[i]);
        // Mean over CPUs of each CPU's ticks per operation, in tenths.
        let mut tenths = 0;
        for cpu in 0..cpus {
            tenths += ticks.get(cpu) * 10 / ops.get(cpu).max(1);
        }
        let tenths = tenths / cpus as u64;
        let ns_tenths = time::ticks_to_ns(tenths);
        let ops = ops.sum(cpus);
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
        self.phases(ctx, 1);
        self.phases(ctx, ctx.cpus);
    }

    fn irq(&self, _ctx: &Ctx) {}

    fn finish(&self, _cpus: usize) -> Summary {
        let intact = self.lockref.count() == 1
            && *self.spinlock.lock() == 0
            && self.atomic.load(Ordering::Relaxed) == 0
            && self.xv6.value() == 0
            && *self.irq_ticket.lock() == 0
            && *self.irq_queued.lock() == 0
            && *self.irq_ttas.lock() == 0;
        Summary::new(
            self.total_ops.load(Ordering::Relaxed),
            (0, 0),
            (!intact).then_some("a count did not return to its start value"),
        )
    }
}
