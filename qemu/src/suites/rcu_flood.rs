//! RCU forward progress under a `call_rcu` flood, after rcutorture's
//! forward-progress test (`rcu_torture_fwd_prog_cr`): CPU 0 queues
//! callbacks as fast as it can while every other CPU reads (long read
//! sections, in thread context and from the timer interrupt), and the
//! suite watches that grace periods keep completing and callbacks keep
//! being invoked.
//!
//! # The flood
//!
//! The callbacks' heads come from a static pool of [`POOL`] nodes, used
//! round robin: CPU 0 queues node after node and, when the next one is
//! still queued (the pool is full: the backlog is [`POOL`]), spins on it
//! (reporting quiescent states, as any thread would) until its callback
//! has run. Each node records that it is queued; its callback clears that
//! (finding it clear is a second invocation) and counts.
//!
//! # Checks and what "bounded" means here
//!
//! The run is cut into [`BUCKETS`] buckets of time, and for each the suite
//! counts the callbacks invoked and the grace periods completed (the
//! invocation histogram rcutorture prints). The flood fails if
//! [`STARVED_BUCKETS`] buckets in a row (half the run, 1.5 s)
//! see no callback invoked while some are pending (*unbounded backlog*:
//! the callbacks are not being processed, so the backlog only grows) or no
//! grace period completed. The backlog can never pass the pool's size,
//! which is the flood's memory; the peak backlog (queued minus invoked,
//! and ksync's own `pending_callbacks()`) is reported. At the end CPU 0
//! calls `rcu::barrier()`: every callback must have run exactly once.
//!
//! The kernel's RCU policy keeps up with a flood by running, after a full
//! batch in a tick, more in proportion to the backlog (`kernel::rcu::tick`,
//! Linux's `rcu_divisor`).
//!
//! # The control
//!
//! `rcu-flood-stuck` floods a queue that is never processed (a `call_rcu`
//! whose callbacks never run, as if no CPU ever called
//! `process_callbacks`): it must be reported as an unbounded backlog.

use core::mem::offset_of;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ksync::rcu::{self, RcuHead};

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// Heads in the pool: the largest backlog the flood can build.
pub const POOL: usize = 8192;
/// Buckets of time the run is cut into for the histograms.
pub const BUCKETS: usize = 30;
/// Buckets in a row without an invocation (or a grace period) that fail
/// the flood: with [`BUDGET_MS`], 1.5 s. Generous on purpose: at 500 ms
/// (5 of 20 buckets in a 2 s run) the test failed once in scheduler mode
/// at -smp 8 (24 threads on a two-core host at a load of 25: "no callback
/// invoked for 500 ms"), where the CPU that runs callbacks can wait that
/// long for the host. The control's queue is never processed, so it is
/// caught at any bound inside the run.
pub const STARVED_BUCKETS: usize = 15;
/// The suite's budget.
const BUDGET_MS: u64 = 3000;
const _: () = assert!(BUDGET_MS / BUCKETS as u64 * STARVED_BUCKETS as u64 == 1500);

/// One callback's head, and whether it is queued.
struct Node {
    head: RcuHead,
    queued: AtomicBool,
}

/// The pool, shared by the test and its control (they never run at once;
/// `setup` finds every node idle: the previous run ended with a barrier or
/// never queued anything with ksync).
static NODES: [Node; POOL] = [const {
    Node {
        head: RcuHead::new(),
        queued: AtomicBool::new(false),
    }
}; POOL];
/// Callbacks invoked, and invocations that found their node not queued.
static INVOKED: AtomicU64 = AtomicU64::new(0);
static DOUBLE: AtomicU64 = AtomicU64::new(0);

impl Node {
    /// Its head, from a pointer to the whole node (for `container_of`).
    fn head_ptr(&self) -> *mut RcuHead {
        // `RcuHead` is all interior mutability (see `suites::rcu::pool`).
        ptr::from_ref(self)
            .wrapping_byte_add(offset_of!(Node, head))
            .cast::<RcuHead>()
            .cast_mut()
    }
}

/// The flood's callback.
///
/// # Safety
/// `head` is a [`Node`]'s head from [`Node::head_ptr`].
unsafe fn invoked(head: *mut RcuHead) {
    let node = head
        .wrapping_byte_sub(offset_of!(Node, head))
        .cast::<Node>();
    // SAFETY: the caller's contract: a node of the static pool.
    let node = unsafe { &*node };
    // Release pairs with the flooder's Acquire load: the node is free for
    // it once it sees `false`, after ksync is done with the head.
    if !node.queued.swap(false, Ordering::Release) {
        DOUBLE.fetch_add(1, Ordering::Relaxed);
    }
    INVOKED.fetch_add(1, Ordering::Relaxed);
}

/// How the flood queues a callback: ksync's `call_rcu`, or the control's
/// queue that nobody processes.
pub trait Queue: Sync {
    /// Queues `head` with the flood's callback.
    ///
    /// # Safety
    /// As for `rcu::call_rcu`, with [`invoked`] as the callback.
    unsafe fn queue(&self, head: *mut RcuHead);
    /// Waits for every queued callback (`rcu::barrier()`).
    fn barrier(&self);
}

/// ksync's `call_rcu`.
pub struct CallRcu;

impl Queue for CallRcu {
    unsafe fn queue(&self, head: *mut RcuHead) {
        // SAFETY: the caller's contract.
        unsafe { rcu::call_rcu(head, invoked) }
    }
    fn barrier(&self) {
        rcu::barrier();
    }
}

/// The control: callbacks that are never processed.
pub struct NeverProcessed;

impl Queue for NeverProcessed {
    unsafe fn queue(&self, _head: *mut RcuHead) {}
    fn barrier(&self) {}
}

/// The suite.
pub struct Flood<Q: 'static> {
    info: Info,
    queue: Q,
    queued: AtomicU64,
    /// Times the flooder found the next node still queued (pool full).
    full: AtomicU64,
    /// Largest queued - invoked, and largest `pending_callbacks()`.
    peak_backlog: AtomicU64,
    peak_pending: AtomicU64,
    /// Per bucket: callbacks invoked, grace periods completed.
    invoked_hist: [AtomicU64; BUCKETS],
    gp_hist: [AtomicU64; BUCKETS],
    /// Per CPU: read sections in thread context and in interrupts.
    reads: Counters,
    irq_reads: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// The test: ksync's `call_rcu`.
pub static TEST: Flood<CallRcu> =
    Flood::new(Info::new("rcu-flood", Kind::Test, BUDGET_MS), CallRcu);
/// The control: a flood nobody processes.
pub static CONTROL: Flood<NeverProcessed> = Flood::new(
    Info::new("rcu-flood-stuck", Kind::Control, BUDGET_MS),
    NeverProcessed,
);

impl<Q: Queue> Flood<Q> {
    const fn new(info: Info, queue: Q) -> Self {
        Self {
            info,
            queue,
            queued: AtomicU64::new(0),
            full: AtomicU64::new(0),
            peak_backlog: AtomicU64::new(0),
            peak_pending: AtomicU64::new(0),
            invoked_hist: [const { AtomicU64::new(0) }; BUCKETS],
            gp_hist: [const { AtomicU64::new(0) }; BUCKETS],
            reads: Counters::new(),
            irq_reads: Counters::new(),
        }
    }

    /// A read section, stretched by `work`.
    fn read(&self, work: u32) {
        let guard = rcu::read_lock();
        busy_work(work);
        drop(guard);
    }

    /// CPU 0: the flood, with the bucket bookkeeping.
    fn flood(&self, ctx: &Ctx) {
        let start = time::now();
        let bucket_ticks = time::ms_to_ticks(self.info.budget_ms / BUCKETS as u64).max(1);
        let (mut next, mut queued, mut full) = (0, 0u64, 0u64);
        let mut bucket = 0;
        let mut invoked_at = INVOKED.load(Ordering::Relaxed);
        let mut gp_at = rcu::gp_seq() >> 2;
        let (mut quiet_invoked, mut quiet_gp) = (0, 0);
        let mut iterations = 0u64;
        while !ctx.should_stop() {
            let node = &NODES[next];
            // Acquire pairs with the Release in `invoked`.
            if node.queued.load(Ordering::Acquire) {
                full += 1;
            } else {
                // Relaxed: `call_rcu` hands it to the callback.
                node.queued.store(true, Ordering::Relaxed);
                // SAFETY: the node's head is not queued (its callback ran,
                // or it never was), it is a static, and nothing else
                // touches it until `invoked` runs.
                unsafe { self.queue.queue(node.head_ptr()) };
                queued += 1;
                next = (next + 1) % POOL;
            }
            iterations += 1;
            if !iterations.is_multiple_of(64) {
                continue;
            }
            let invoked = INVOKED.load(Ordering::Relaxed);
            let backlog = queued - invoked.min(queued);
            self.peak_backlog.fetch_max(backlog, Ordering::Relaxed);
            let now_bucket = ((time::now() - start) / bucket_ticks) as usize;
            while bucket < now_bucket.min(BUCKETS) {
                // Close `bucket`.
                let gp = rcu::gp_seq() >> 2;
                let (di, dg) = (invoked - invoked_at, (gp - gp_at) as u64);
                self.invoked_hist[bucket].store(di, Ordering::Relaxed);
                self.gp_hist[bucket].store(dg, Ordering::Relaxed);
                (invoked_at, gp_at) = (invoked, gp);
                self.peak_pending
                    .fetch_max(rcu::pending_callbacks() as u64, Ordering::Relaxed);
                quiet_invoked = if di == 0 && backlog > 0 {
                    quiet_invoked + 1
                } else {
                    0
                };
                quiet_gp = if dg == 0 { quiet_gp + 1 } else { 0 };
                if quiet_invoked >= STARVED_BUCKETS {
                    ctx.fail("unbounded backlog: no callback invoked for 1.5 s while callbacks were pending");
                } else if quiet_gp >= STARVED_BUCKETS {
                    ctx.fail("no grace period completed for 1.5 s during the flood");
                }
                bucket += 1;
            }
        }
        // The bucket the deadline fell in, cut short.
        if bucket < BUCKETS {
            let gp = rcu::gp_seq() >> 2;
            let invoked = INVOKED.load(Ordering::Relaxed);
            self.invoked_hist[bucket].store(invoked - invoked_at, Ordering::Relaxed);
            self.gp_hist[bucket].store((gp - gp_at) as u64, Ordering::Relaxed);
        }
        self.queued.store(queued, Ordering::Relaxed);
        self.full.store(full, Ordering::Relaxed);
        self.queue.barrier();
    }
}

impl<Q: Queue> Suite for Flood<Q> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        // The flooder is CPU 0, which never goes offline; the readers do.
        Ok(())
    }

    fn setup(&self, _cpus: usize) {
        for node in &NODES {
            // Relaxed: the runner's barrier orders this before the run.
            node.queued.store(false, Ordering::Relaxed);
        }
        for counter in [
            &INVOKED,
            &DOUBLE,
            &self.queued,
            &self.full,
            &self.peak_backlog,
            &self.peak_pending,
        ]
        .into_iter()
        .chain(&self.invoked_hist)
        .chain(&self.gp_hist)
        {
            counter.store(0, Ordering::Relaxed);
        }
        self.reads.reset();
        self.irq_reads.reset();
    }

    fn run(&self, ctx: &Ctx) {
        // One flooder: CPU 0's first thread (in the harness's scheduler
        // mode its other threads read).
        if ctx.cpu == 0 && ctx.thread == 0 {
            self.flood(ctx);
            return;
        }
        let mut rng = Rng::for_ctx(ctx, 53);
        let mut reads = 0;
        while !ctx.should_stop() {
            self.read(rng.below(512) as u32);
            reads += 1;
        }
        self.reads.add(ctx.cpu, reads);
    }

    fn irq(&self, ctx: &Ctx) {
        self.read(64);
        self.irq_reads.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        let queued = self.queued.load(Ordering::Relaxed);
        let invoked = INVOKED.load(Ordering::Relaxed);
        let failure = if DOUBLE.load(Ordering::Relaxed) != 0 {
            Some("a flood callback ran twice")
        } else if invoked != queued {
            Some("rcu::barrier() returned before every flood callback ran")
        } else if rcu::pending_callbacks() != 0 {
            Some("ksync reports callbacks pending after rcu::barrier()")
        } else if queued == 0 {
            Some("the flood queued nothing")
        } else {
            None
        };
        let hist = |h: &[AtomicU64; BUCKETS]| h.each_ref().map(|b| b.load(Ordering::Relaxed));
        self.info.report(format_args!(
            "{queued} callbacks queued, {invoked} invoked; peak backlog {} of a pool of {POOL} (ksync's pending_callbacks() peaked at {}); the flooder found the pool full {} times",
            self.peak_backlog.load(Ordering::Relaxed),
            self.peak_pending.load(Ordering::Relaxed),
            self.full.load(Ordering::Relaxed),
        ));
        self.info.report(format_args!(
            "invocation histogram (callbacks invoked per {} ms): {:?}",
            self.info.budget_ms / BUCKETS as u64,
            hist(&self.invoked_hist)
        ));
        self.info.report(format_args!(
            "grace periods per {} ms: {:?}",
            self.info.budget_ms / BUCKETS as u64,
            hist(&self.gp_hist)
        ));
        self.info.report_per_cpu(
            cpus,
            &[("reads", &self.reads), ("irq_reads", &self.irq_reads)],
        );
        let spread = if cpus > 1 {
            (1..cpus)
                .map(|cpu| self.reads.get(cpu))
                .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
        } else {
            (queued, queued)
        };
        Summary::new(
            queued + self.reads.sum(cpus) + self.irq_reads.sum(cpus),
            spread,
            failure,
        )
        .with_callbacks(queued, invoked)
    }
}
