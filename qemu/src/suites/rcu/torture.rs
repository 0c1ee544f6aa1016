//! The torture itself: CPU 0's writer rounds, the other CPUs' and the
//! interrupts' `call_rcu` rounds and read sections, and the final checks.
//! See the module docs of `suites::rcu`.

use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

use ksync::rcu::{self, Cookie, RcuPtr};
use ksync::spinlock::TtasMutex;

use super::flavour::Rcu;
use super::pool::{CB_IDLE, CB_QUEUED, Element, POOL, Pool, Removed, retire};
use crate::harness::{Ctx, Info, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::time;
use crate::suites::{Rng, busy_work};

/// The CPU that writes all the time.
const WRITER: usize = 0;
/// Histogram buckets: ages 0, 1, 2, 3 and above.
const AGES: usize = 4;
/// Reader-pipe buckets: 0 (current), 1 (removed), 2, 3, 4 and above (that
/// many minus one grace periods completed since the removal: a failure).
const PIPES: usize = 5;
/// Reader-batch buckets: 0, 1, 2 and above grace periods ended during a
/// read section.
const BATCHES: usize = 3;
/// A reader CPU tries a `call_rcu` round once in this many reads...
const READS_PER_WRITE: u64 = 1024;
/// ... and its timer interrupt once in this many ticks with suite work.
const TICKS_PER_WRITE: u64 = 8;

/// What the writers share, under the writer lock.
struct Writer {
    /// The last sequence number published.
    seq: u64,
    /// No more writes (set before the final `rcu::barrier()`).
    closed: bool,
}

impl Writer {
    /// Element 0 is published with sequence number 1.
    const fn new() -> Self {
        Self {
            seq: 1,
            closed: false,
        }
    }
}

/// The suite, over any [`Rcu`].
pub struct RcuTorture<R: 'static> {
    info: Info,
    rcu: R,
    ptr: RcuPtr<Element>,
    pool: Pool,
    writer: TtasMutex<Writer>,
    /// `rcu::gp_seq()` at the start.
    gp_start: AtomicUsize,
    publications: AtomicU64,
    syncs: AtomicU64,
    polled: AtomicU64,
    conds: AtomicU64,
    /// `rcu::barrier()` calls of CPU 0 when the pool ran dry, and the
    /// longest of them and of the final one, in counter ticks.
    barriers: AtomicU64,
    barrier_max: AtomicU64,
    final_barrier: AtomicU64,
    /// Elements freed by writers (not callbacks).
    freed: AtomicU64,
    /// CPU 0's waits for grace periods (`synchronize`, `cond_synchronize`
    /// that waited): count, total and longest, in counter ticks.
    waits: AtomicU64,
    wait_ticks: AtomicU64,
    wait_max: AtomicU64,
    /// Per CPU: elements retired through `call_rcu` from thread context ...
    call_rcus: Counters,
    /// ... and from the timer interrupt.
    irq_call_rcus: Counters,
    reads: Counters,
    irq_reads: Counters,
    /// Per bucket, per CPU: reads that saw that age.
    ages: [Counters; AGES],
    /// Per bucket, per CPU: rcutorture's reader pipe (see [`pipe_count`]).
    pipes: [Counters; PIPES],
    /// Per bucket, per CPU: rcutorture's reader batch, the grace periods
    /// that ended while a read section ran.
    batches: [Counters; BATCHES],
}

/// rcutorture's *pipe count* of an element a reader holds, at the end of
/// its read section, `gp` the grace-period sequence then: 0 if it is
/// still current, else 1 + the grace periods completed since its removal.
/// A count past 1 means a full grace period ended while a reader that
/// found the element before its removal still held it: a failure, even if
/// nothing was freed yet.
fn pipe_count(age: u64, removed_snap: usize, gp: usize) -> usize {
    if age == 0 {
        return 0;
    }
    // `removed_snap` is the first value proving one full grace period; each
    // further one adds 4 (wrapping compare, as ksync's).
    let past = gp.wrapping_sub(removed_snap) as isize;
    if past < 0 { 1 } else { 2 + past as usize / 4 }
}

impl<R: Rcu> RcuTorture<R> {
    pub(super) const fn new(info: Info, rcu: R) -> Self {
        Self {
            info,
            rcu,
            ptr: RcuPtr::null(),
            pool: Pool::new(),
            writer: TtasMutex::new(Writer::new()),
            gp_start: AtomicUsize::new(0),
            publications: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            polled: AtomicU64::new(0),
            conds: AtomicU64::new(0),
            barriers: AtomicU64::new(0),
            barrier_max: AtomicU64::new(0),
            final_barrier: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_ticks: AtomicU64::new(0),
            wait_max: AtomicU64::new(0),
            call_rcus: Counters::new(),
            irq_call_rcus: Counters::new(),
            reads: Counters::new(),
            irq_reads: Counters::new(),
            ages: [const { Counters::new() }; AGES],
            pipes: [const { Counters::new() }; PIPES],
            batches: [const { Counters::new() }; BATCHES],
        }
    }

    /// Times one wait for a grace period.
    fn timed_wait(&self, wait: impl FnOnce()) {
        let start = time::now();
        wait();
        let ticks = time::now().saturating_sub(start);
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_ticks.fetch_add(ticks, Ordering::Relaxed);
        self.wait_max.fetch_max(ticks, Ordering::Relaxed);
    }

    /// Frees the removed elements whose cookies completed (oldest first;
    /// cookies taken later never complete earlier).
    fn reclaim(&self, w: &mut Removed) {
        let done = w.removed[..w.len]
            .iter()
            .take_while(|&&(_, cookie)| self.rcu.poll(cookie))
            .count();
        if done > 0 {
            w.free_oldest(&self.pool, done);
            self.polled.fetch_add(done as u64, Ordering::Relaxed);
            self.freed.fetch_add(done as u64, Ordering::Relaxed);
        }
    }

    /// Fills a free element, publishes it and marks the one it replaced
    /// removed; returns that one's index. `None` if the pool is empty (or
    /// the writers are closed). Under the writer lock.
    fn replace(&self, w: &mut Writer) -> Option<usize> {
        if w.closed {
            return None;
        }
        let index = self.pool.take()?;
        w.seq += 1;
        let element = &self.pool.elements[index];
        element.fill(w.seq);
        // SAFETY: the pool's elements are statics, valid forever; an element
        // is reused only after a grace period since it was unpublished.
        let old = unsafe { self.ptr.publish(ptr::from_ref(element).cast_mut()) };
        self.publications.fetch_add(1, Ordering::Relaxed);
        let old = self.pool.index_of(old);
        // The snapshot for the readers' pipe counts, taken as
        // `rcu::get_state()` takes its cookie: a full fence after the
        // unpublishing, then the sequence.
        fence(Ordering::SeqCst);
        let snap = (rcu::gp_seq() + 7) & !3;
        let element = &self.pool.elements[old];
        element.removed_snap.store(snap, Ordering::Relaxed);
        // Release pairs with the readers' Acquire load of `age`: one that
        // sees 1 sees this removal's snapshot. A marker for readers that
        // still hold it (0 or 1 is fine for them); 2 only comes after a
        // grace period.
        element.age.store(1, Ordering::Release);
        Some(old)
    }

    /// Retires the removed element `index` through `call_rcu`.
    fn retire_later(&self, index: usize) {
        let element = &self.pool.elements[index];
        // Relaxed: `call_rcu` hands these stores to the callback (list
        // lock).
        element.queued_on.store(cpu::current(), Ordering::Relaxed);
        if element.cb.swap(CB_QUEUED, Ordering::Relaxed) != CB_IDLE {
            self.pool.cb_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.pool.cb_queued.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the element is unpublished (only readers that found it
        // before `replace` can hold it), its head is not queued (no
        // callback was pending for it: `cb` was idle), and it stays valid
        // (a `static`) and untouched until `retire` runs: its free bit is
        // clear, so no writer takes it, and it is in no `removed` list.
        // `retire` is the right callback for an element's head.
        unsafe { self.rcu.call_rcu(element.head_ptr(), retire) };
    }

    /// One round of CPU 0. It takes the writer lock only to publish, and
    /// waits for grace periods without it.
    fn write(&self, ctx: &Ctx, r: &mut Removed, rng: &mut Rng) {
        self.reclaim(r);
        let mut attempts = 0;
        let old = loop {
            if let Some(old) = self.replace(&mut self.writer.lock()) {
                break old;
            }
            attempts += 1;
            if attempts > POOL || ctx.failed() {
                ctx.fail("the pool stayed empty after waiting for grace periods and callbacks");
                return;
            }
            // The pool is dry: wait for the oldest element CPU 0 removed,
            // or for the callbacks (the other writers may take what comes
            // free first: try again).
            if let Some(cookie) = r.oldest() {
                self.timed_wait(|| self.rcu.cond_synchronize(cookie));
                self.conds.fetch_add(1, Ordering::Relaxed);
                self.reclaim(r);
            } else {
                let start = time::now();
                rcu::barrier();
                self.barriers.fetch_add(1, Ordering::Relaxed);
                self.barrier_max
                    .fetch_max(time::now() - start, Ordering::Relaxed);
            }
        };
        match rng.below(6) {
            0 => {
                // Every element CPU 0 removed, this one included, was
                // unpublished before the grace period began.
                r.push(old, Cookie::COMPLETED);
                self.timed_wait(|| self.rcu.synchronize());
                self.syncs.fetch_add(1, Ordering::Relaxed);
                let n = r.len;
                r.free_oldest(&self.pool, n);
                self.freed.fetch_add(n as u64, Ordering::Relaxed);
            }
            1 => r.push(old, self.rcu.start_poll()),
            2 => r.push(old, self.rcu.get_state()),
            3 => {
                r.push(old, self.rcu.get_state());
                if let Some(cookie) = r.oldest()
                    && !self.rcu.poll(cookie)
                {
                    self.timed_wait(|| self.rcu.cond_synchronize(cookie));
                    self.conds.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                self.retire_later(old);
                self.call_rcus.add(ctx.cpu, 1);
            }
        }
        self.reclaim(r);
    }

    /// A round of any other CPU or of an interrupt handler: only if the
    /// writer lock and an element are free; retires through `call_rcu`.
    /// Never waits.
    fn try_write(&self) -> bool {
        let Some(mut w) = self.writer.try_lock() else {
            return false;
        };
        let Some(old) = self.replace(&mut w) else {
            return false;
        };
        // Still under the lock: once CPU 0 has closed the writers, no
        // callback can be queued behind its final `rcu::barrier()`.
        self.retire_later(old);
        true
    }

    /// One read section; `delay` stretches it.
    fn read(&self, ctx: &Ctx, delay: u32) {
        let guard = rcu::read_lock();
        let gp_start = rcu::gp_seq();
        let Some(element) = self.ptr.read(&guard) else {
            ctx.fail("a reader found nothing published");
            return;
        };
        let seq = element.seq.load(Ordering::Relaxed);
        let mut verdict = element.check(seq);
        busy_work(delay);
        // Acquire pairs with the Release store of 1 in `replace`.
        let age = element.age.load(Ordering::Acquire);
        let removed_snap = element.removed_snap.load(Ordering::Relaxed);
        let gp_end = rcu::gp_seq();
        verdict = verdict.and_then(|()| element.check(seq));
        drop(guard);
        let pipe = pipe_count(age, removed_snap, gp_end);
        self.pipes[pipe.min(PIPES - 1)].add(ctx.cpu, 1);
        let batch = (gp_end >> 2).wrapping_sub(gp_start >> 2);
        self.batches[batch.min(BATCHES - 1)].add(ctx.cpu, 1);
        if pipe > 1 {
            ctx.fail("reader pipe: a grace period ended while a reader held an element removed before it");
        }
        if let Err(reason) = verdict {
            ctx.fail(reason);
        }
        if age > 1 {
            ctx.fail("a reader held an element for a whole grace period after its removal");
        }
        self.ages[(age as usize).min(AGES - 1)].add(ctx.cpu, 1);
    }

    /// The callback checks of `finish`.
    fn callback_failure(&self) -> Option<&'static str> {
        let queued = self.pool.cb_queued.load(Ordering::Relaxed);
        let ran = self.pool.cb_ran.load(Ordering::Relaxed);
        let still_queued = self
            .pool
            .elements
            .iter()
            .any(|e| e.cb.load(Ordering::Relaxed) != CB_IDLE);
        if self.pool.cb_errors.load(Ordering::Relaxed) != 0 {
            Some("a call_rcu callback ran twice, or for an element that was not queued")
        } else if ran != queued || still_queued {
            Some("rcu::barrier() returned before every queued callback ran")
        } else if rcu::pending_callbacks() != 0 {
            Some("ksync reports callbacks pending after rcu::barrier()")
        } else if queued == 0 {
            Some("no element was retired through call_rcu")
        } else {
            None
        }
    }
}

impl<R: Rcu> Suite for RcuTorture<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // No reader or writer runs and no callback of ours is queued: the
        // other CPUs wait at the runner's barrier, the suite's interrupt
        // work is not on yet, and a previous run ended with
        // `rcu::barrier()`.
        let home = ptr::from_ref(&self.pool).cast_mut();
        // Relaxed: the runner's barrier orders `setup` before every CPU's
        // `run`.
        for element in &self.pool.elements {
            element.free();
            element.cb.store(CB_IDLE, Ordering::Relaxed);
            element.home.store(home, Ordering::Relaxed);
        }
        self.pool.elements[0].fill(1);
        // SAFETY: as in `replace`: a static pool element.
        unsafe {
            self.ptr
                .publish(ptr::from_ref(&self.pool.elements[0]).cast_mut())
        };
        self.pool
            .free
            .store(((1u64 << POOL) - 2) as u32, Ordering::Relaxed);
        *self.writer.lock() = Writer::new();
        self.gp_start.store(rcu::gp_seq(), Ordering::Relaxed);
        for stat in [
            &self.publications,
            &self.syncs,
            &self.polled,
            &self.conds,
            &self.barriers,
            &self.barrier_max,
            &self.final_barrier,
            &self.freed,
            &self.waits,
            &self.wait_ticks,
            &self.wait_max,
            &self.pool.cb_queued,
            &self.pool.cb_ran,
            &self.pool.cb_errors,
        ] {
            stat.store(0, Ordering::Relaxed);
        }
        for stat in [
            &self.pool.cb_ran_on,
            &self.call_rcus,
            &self.irq_call_rcus,
            &self.reads,
            &self.irq_reads,
        ] {
            stat.reset();
        }
        for bucket in self.ages.iter().chain(&self.pipes).chain(&self.batches) {
            bucket.reset();
        }
        for counter in [&self.pool.cb_elsewhere, &self.pool.cb_adopted] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    fn hotplug(&self) -> Result<(), &'static str> {
        // CPU 0, the writer, never goes offline; the readers and their
        // `call_rcu` rounds do, and the callbacks they leave queued are
        // adopted.
        Ok(())
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 41);
        // One writer thread (the CPU's first, in the harness's scheduler
        // mode too): it alone retires what it removes.
        if ctx.cpu == WRITER && ctx.thread == 0 {
            let mut removed = Removed::new();
            while !ctx.should_stop() {
                self.write(ctx, &mut removed, &mut rng);
                // Let the readers see the new element for a while.
                busy_work(rng.below(256) as u32);
            }
            // Close the writer side, then wait for every callback: after
            // this nothing of the pool is queued in ksync any more.
            self.writer.lock().closed = true;
            let start = time::now();
            rcu::barrier();
            self.final_barrier
                .store(time::now() - start, Ordering::Relaxed);
        } else {
            let (mut reads, mut writes) = (0, 0);
            while !ctx.should_stop() {
                self.read(ctx, rng.below(128) as u32);
                reads += 1;
                if rng.below(READS_PER_WRITE) == 0 && self.try_write() {
                    writes += 1;
                }
                busy_work(rng.below(16) as u32);
            }
            self.reads.add(ctx.cpu, reads);
            self.call_rcus.add(ctx.cpu, writes);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        self.read(ctx, 64);
        self.irq_reads.add(ctx.cpu, 1);
        if self.irq_reads.get(ctx.cpu).is_multiple_of(TICKS_PER_WRITE) && self.try_write() {
            self.irq_call_rcus.add(ctx.cpu, 1);
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        let gps = (rcu::gp_seq() >> 2) - (self.gp_start.load(Ordering::Relaxed) >> 2);
        let histogram = self.ages.each_ref().map(|bucket| bucket.sum(cpus));
        let pipes = self.pipes.each_ref().map(|bucket| bucket.sum(cpus));
        let batches = self.batches.each_ref().map(|bucket| bucket.sum(cpus));
        let publications = self.publications.load(Ordering::Relaxed);
        let failure = if histogram[2..].iter().any(|&n| n > 0) {
            Some("a reader held an element for a whole grace period after its removal")
        } else if pipes[2..].iter().any(|&n| n > 0) {
            Some(
                "reader pipe: a grace period ended while a reader held an element removed before it",
            )
        } else if gps == 0 || publications == 0 {
            Some("no grace period completed: the writer never got going")
        } else {
            self.callback_failure()
        };
        for cpu in 0..cpus {
            self.info.report_cpu(
                cpu,
                format_args!(
                    "reads={} irq_reads={} call_rcu={} irq_call_rcu={} callbacks_run_here={} ages seen: 0:{} 1:{} 2:{} 3+:{}",
                    self.reads.get(cpu),
                    self.irq_reads.get(cpu),
                    self.call_rcus.get(cpu),
                    self.irq_call_rcus.get(cpu),
                    self.pool.cb_ran_on.get(cpu),
                    self.ages[0].get(cpu),
                    self.ages[1].get(cpu),
                    self.ages[2].get(cpu),
                    self.ages[3].get(cpu)
                ),
            );
        }
        self.info.report(format_args!(
            "{gps} grace periods, {publications} publications, {} synchronize, {} cond_synchronize, {} freed by writers ({} by polled cookies), {} barriers on an empty pool",
            self.syncs.load(Ordering::Relaxed),
            self.conds.load(Ordering::Relaxed),
            self.freed.load(Ordering::Relaxed),
            self.polled.load(Ordering::Relaxed),
            self.barriers.load(Ordering::Relaxed),
        ));
        self.info.report(format_args!(
            "call_rcu: {} queued, {} callbacks run, {} errors, {} pending after the final barrier ({} us; longest barrier on an empty pool {} us)",
            self.pool.cb_queued.load(Ordering::Relaxed),
            self.pool.cb_ran.load(Ordering::Relaxed),
            self.pool.cb_errors.load(Ordering::Relaxed),
            rcu::pending_callbacks(),
            time::ticks_to_ns(self.final_barrier.load(Ordering::Relaxed)) / 1000,
            time::ticks_to_ns(self.barrier_max.load(Ordering::Relaxed)) / 1000,
        ));
        let waits = self.waits.load(Ordering::Relaxed);
        self.info.report(format_args!(
            "grace-period waits of CPU 0: {waits}, mean {} us, longest {} us",
            time::ticks_to_ns(self.wait_ticks.load(Ordering::Relaxed) / waits.max(1)) / 1000,
            time::ticks_to_ns(self.wait_max.load(Ordering::Relaxed)) / 1000,
        ));
        self.info.report(format_args!(
            "pipeline age histogram (reads that saw age 0/1/2/3+): {} {} {} {}",
            histogram[0], histogram[1], histogram[2], histogram[3]
        ));
        self.info.report(format_args!(
            "reader pipe (grace periods an element survived under a reader, 0/1/2/3/4+; past 1 fails): {} {} {} {} {}",
            pipes[0], pipes[1], pipes[2], pipes[3], pipes[4]
        ));
        self.info.report(format_args!(
            "reader batch (grace periods ended during a read section, 0/1/2+): {} {} {}",
            batches[0], batches[1], batches[2]
        ));
        self.info.report(format_args!(
            "callbacks run by another CPU than the queuing one: {}, of which adopted from an offline CPU: {}",
            self.pool.cb_elsewhere.load(Ordering::Relaxed),
            self.pool.cb_adopted.load(Ordering::Relaxed),
        ));
        crate::println!(
            "KSYNC-RCU-HIST suite={} pipe={},{},{},{},{} batch={},{},{} adopted={}",
            self.info.name,
            pipes[0],
            pipes[1],
            pipes[2],
            pipes[3],
            pipes[4],
            batches[0],
            batches[1],
            batches[2],
            self.pool.cb_adopted.load(Ordering::Relaxed)
        );
        let spread = if cpus > 1 {
            // CPU 0 does not read in thread context: its 0 is not
            // unfairness.
            (1..cpus)
                .map(|cpu| self.reads.get(cpu))
                .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
        } else {
            self.reads.min_max(cpus)
        };
        Summary::new(
            self.reads.sum(cpus) + self.irq_reads.sum(cpus) + publications,
            spread,
            failure,
        )
        .with_callbacks(
            self.pool.cb_queued.load(Ordering::Relaxed),
            self.pool.cb_ran.load(Ordering::Relaxed),
        )
    }
}
