//! RCU torture, after Linux's rcutorture: one CPU publishes element after
//! element through an [`RcuPtr`], waits for grace periods in every way ksync
//! offers, and poisons each old element once it may, then reuses it; every
//! CPU reads, in thread context and from its timer interrupt, and checks
//! that what it holds was not freed under it.
//!
//! # The writer (CPU 0)
//!
//! Elements come from a static pool of [`POOL`] (no allocator). Each
//! round, the writer fills a free element (a new sequence number in every
//! word), publishes it, and marks the element it replaced as removed
//! (*age* 1). Then, at random:
//!
//! * `synchronize()`, after which every removed element may be freed;
//! * `start_poll()`: the removed element waits for its cookie to `poll()`
//!   complete;
//! * `get_state()`: likewise, but nothing starts a grace period until a
//!   later `cond_synchronize()` asks for one;
//! * `get_state()` and a `cond_synchronize()` on the oldest removed element.
//!
//! Whenever the pool runs dry it `cond_synchronize()`s on the oldest. Every
//! round, removed elements whose cookies completed are freed: age 2 (a full
//! grace period since removal), then every word poisoned; later the element
//! is reused.
//!
//! # The readers (every CPU but the writer; every CPU's interrupt)
//!
//! Under `read_lock()`: follow the pointer, check the words (not poisoned,
//! all carrying the element's sequence number), stretch the read section,
//! then read the element's age and check everything again. The age must be
//! 0 (current) or 1 (removed, grace period pending): 2 would mean a whole
//! grace period ended while this reader held it. Readers record the ages
//! they saw: the pipeline histogram. In QSBR an interrupt handler's read
//! section is covered by the code it interrupted, which is not at a
//! quiescent state (`kernel::hooks`).
//!
//! The readers report quiescent states only between read sections (each
//! `should_stop`), so every CPU holds up every grace period for no longer
//! than one read section.
//!
//! # The control
//!
//! [`NoWaitRcu`] is ksync's RCU with a `synchronize()` that returns at once:
//! the writer frees elements readers still hold.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ksync::rcu::{self, Cookie, RcuPtr};

use super::{Ctx, Info, Kind, Rng, Suite, Summary, busy_work};
use crate::kernel::cpu::Counters;

/// Elements in the pool.
pub const POOL: usize = 16;
/// Words per element.
const WORDS: usize = 4;
/// What a freed element's words hold.
const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;
/// The CPU that writes.
const WRITER: usize = 0;
/// Histogram buckets: ages 0, 1, 2, 3 and above.
const AGES: usize = 4;

/// What a live element's word `i` holds for sequence number `seq`.
fn word(seq: u64, i: usize) -> u64 {
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64
}

/// One element: a sequence number, its age and some words. All atomics, so
/// a reader of a freed element (a bug the suite looks for) reads wrong
/// values, not undefined behaviour.
pub struct Element {
    seq: AtomicU64,
    /// 0: published; 1: removed, grace period pending; 2: freed.
    age: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl Element {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            age: AtomicU64::new(2),
            words: [const { AtomicU64::new(POISON) }; WORDS],
        }
    }

    /// Writer: makes a free element live with `seq` (before publishing it,
    /// which orders these stores for readers).
    fn fill(&self, seq: u64) {
        self.seq.store(seq, Ordering::Relaxed);
        self.age.store(0, Ordering::Relaxed);
        for (i, w) in self.words.iter().enumerate() {
            w.store(word(seq, i), Ordering::Relaxed);
        }
    }

    /// Writer, after a grace period: frees the element (age 2, poison).
    fn free(&self) {
        self.age.store(2, Ordering::Relaxed);
        self.seq.store(0, Ordering::Relaxed);
        for w in &self.words {
            w.store(POISON, Ordering::Relaxed);
        }
    }

    /// Reader: whether the element is live and consistent with `seq`.
    fn check(&self, seq: u64) -> Result<(), &'static str> {
        for (i, w) in self.words.iter().enumerate() {
            match w.load(Ordering::Relaxed) {
                POISON => return Err("a reader saw a freed (poisoned) element"),
                v if v != word(seq, i) => {
                    return Err("a reader saw an element being reused under it");
                }
                _ => {}
            }
        }
        if self.seq.load(Ordering::Relaxed) != seq {
            return Err("a reader saw its element's sequence number change");
        }
        Ok(())
    }
}

/// The grace-period calls the writer makes: ksync's RCU, or the control's.
pub trait Rcu: Sync {
    /// `rcu::synchronize`.
    fn synchronize(&self);
    /// `rcu::get_state`.
    fn get_state(&self) -> Cookie {
        rcu::get_state()
    }
    /// `rcu::start_poll`.
    fn start_poll(&self) -> Cookie {
        rcu::start_poll()
    }
    /// `rcu::poll`.
    fn poll(&self, cookie: Cookie) -> bool {
        rcu::poll(cookie)
    }
    /// `rcu::cond_synchronize`.
    fn cond_synchronize(&self, cookie: Cookie) {
        rcu::cond_synchronize(cookie)
    }
}

/// ksync's RCU.
pub struct KsyncRcu;

impl Rcu for KsyncRcu {
    fn synchronize(&self) {
        rcu::synchronize()
    }
}

/// The control: ksync's RCU but `synchronize` does not wait.
pub struct NoWaitRcu;

impl Rcu for NoWaitRcu {
    fn synchronize(&self) {}
}

/// The writer's private bookkeeping.
struct Writer {
    /// Bit `i`: pool element `i` is free.
    free: u32,
    /// Removed elements waiting for their cookies, oldest first.
    removed: [(usize, Cookie); POOL],
    len: usize,
    seq: u64,
}

const _: () = assert!(POOL <= 32);

impl Writer {
    fn oldest(&self) -> Option<Cookie> {
        (self.len > 0).then(|| self.removed[0].1)
    }

    fn push(&mut self, index: usize, cookie: Cookie) {
        self.removed[self.len] = (index, cookie);
        self.len += 1;
    }

    /// Frees the oldest `n` removed elements.
    fn free_oldest(&mut self, pool: &[Element; POOL], n: usize) {
        for &(index, _) in &self.removed[..n] {
            pool[index].free();
            self.free |= 1 << index;
        }
        self.removed.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

/// The suite, over any [`Rcu`].
pub struct RcuTorture<R: 'static> {
    info: Info,
    rcu: R,
    ptr: RcuPtr<Element>,
    pool: [Element; POOL],
    /// `rcu::gp_seq()` at the start.
    gp_start: AtomicUsize,
    publications: AtomicU64,
    syncs: AtomicU64,
    polled: AtomicU64,
    conds: AtomicU64,
    freed: AtomicU64,
    reads: Counters,
    irq_reads: Counters,
    /// Per bucket, per CPU: reads that saw that age.
    ages: [Counters; AGES],
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL];

/// The test: ksync's RCU.
pub static TEST: RcuTorture<KsyncRcu> =
    RcuTorture::new(Info::new("rcu", Kind::Test, 1000), KsyncRcu);
/// The control: `synchronize` returns at once.
pub static CONTROL: RcuTorture<NoWaitRcu> =
    RcuTorture::new(Info::new("rcu-nowait", Kind::Control, 1000), NoWaitRcu);

impl<R: Rcu> RcuTorture<R> {
    const fn new(info: Info, rcu: R) -> Self {
        Self {
            info,
            rcu,
            ptr: RcuPtr::null(),
            pool: [const { Element::new() }; POOL],
            gp_start: AtomicUsize::new(0),
            publications: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            polled: AtomicU64::new(0),
            conds: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            reads: Counters::new(),
            irq_reads: Counters::new(),
            ages: [const { Counters::new() }; AGES],
        }
    }

    fn index_of(&self, element: *const Element) -> usize {
        let index = (element.addr() - self.pool.as_ptr().addr()) / core::mem::size_of::<Element>();
        assert!(
            index < POOL,
            "an element from outside the pool was published"
        );
        index
    }

    /// Frees the removed elements whose cookies completed (oldest first;
    /// cookies taken later never complete earlier).
    fn reclaim(&self, w: &mut Writer) {
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

    /// One round of the writer.
    fn write(&self, w: &mut Writer, rng: &mut Rng) {
        if w.free == 0 {
            // Everything is removed or current: wait for the oldest.
            if let Some(cookie) = w.oldest() {
                self.rcu.cond_synchronize(cookie);
                self.conds.fetch_add(1, Ordering::Relaxed);
            }
            self.reclaim(w);
        }
        let index = w.free.trailing_zeros() as usize;
        w.free &= !(1 << index);
        w.seq += 1;
        let element = &self.pool[index];
        element.fill(w.seq);
        let old = self.ptr.publish(core::ptr::from_ref(element).cast_mut());
        self.publications.fetch_add(1, Ordering::Relaxed);
        let old = self.index_of(old);
        self.pool[old].age.store(1, Ordering::Relaxed);
        match rng.below(4) {
            0 => {
                // Every removed element, this one included, was unpublished
                // before the grace period began.
                w.push(old, Cookie::COMPLETED);
                self.rcu.synchronize();
                self.syncs.fetch_add(1, Ordering::Relaxed);
                let n = w.len;
                w.free_oldest(&self.pool, n);
                self.freed.fetch_add(n as u64, Ordering::Relaxed);
            }
            1 => w.push(old, self.rcu.start_poll()),
            2 => w.push(old, self.rcu.get_state()),
            _ => {
                w.push(old, self.rcu.get_state());
                if let Some(cookie) = w.oldest() {
                    self.rcu.cond_synchronize(cookie);
                    self.conds.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.reclaim(w);
    }

    /// One read section; `delay` stretches it.
    fn read(&self, ctx: &Ctx, delay: u32) {
        let guard = rcu::read_lock();
        let Some(element) = self.ptr.read(&guard) else {
            ctx.fail("a reader found nothing published");
            return;
        };
        let seq = element.seq.load(Ordering::Relaxed);
        let mut verdict = element.check(seq);
        busy_work(delay);
        let age = element.age.load(Ordering::Relaxed);
        verdict = verdict.and_then(|()| element.check(seq));
        drop(guard);
        if let Err(reason) = verdict {
            ctx.fail(reason);
        }
        if age > 1 {
            ctx.fail("a reader held an element for a whole grace period after its removal");
        }
        self.ages[(age as usize).min(AGES - 1)].add(ctx.cpu, 1);
    }
}

impl<R: Rcu> Suite for RcuTorture<R> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // No reader runs: the other CPUs wait at the runner's barrier and
        // the suite's interrupt work is not on yet.
        for element in &self.pool {
            element.free();
        }
        self.pool[0].fill(1);
        self.ptr
            .publish(core::ptr::from_ref(&self.pool[0]).cast_mut());
        self.gp_start.store(rcu::gp_seq(), Ordering::Relaxed);
        for stat in [
            &self.publications,
            &self.syncs,
            &self.polled,
            &self.conds,
            &self.freed,
        ] {
            stat.store(0, Ordering::Relaxed);
        }
        self.reads.reset();
        self.irq_reads.reset();
        for bucket in &self.ages {
            bucket.reset();
        }
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::new(ctx.cpu as u64 + 41);
        if ctx.cpu == WRITER {
            let mut w = Writer {
                free: ((1u64 << POOL) - 2) as u32,
                removed: [(0, Cookie::COMPLETED); POOL],
                len: 0,
                seq: 1,
            };
            while !ctx.should_stop() {
                self.write(&mut w, &mut rng);
                // Let the readers see the new element for a while.
                busy_work(rng.below(256) as u32);
            }
        } else {
            let mut reads = 0;
            while !ctx.should_stop() {
                self.read(ctx, rng.below(128) as u32);
                reads += 1;
                busy_work(rng.below(16) as u32);
            }
            self.reads.add(ctx.cpu, reads);
        }
    }

    fn irq(&self, ctx: &Ctx) {
        self.read(ctx, 64);
        self.irq_reads.add(ctx.cpu, 1);
    }

    fn finish(&self, cpus: usize) -> Summary {
        let gps = (rcu::gp_seq() >> 2) - (self.gp_start.load(Ordering::Relaxed) >> 2);
        let histogram = self.ages.each_ref().map(|bucket| bucket.sum(cpus));
        let publications = self.publications.load(Ordering::Relaxed);
        let failure = if histogram[2..].iter().any(|&n| n > 0) {
            Some("a reader held an element for a whole grace period after its removal")
        } else if gps == 0 || publications == 0 {
            Some("no grace period completed: the writer never got going")
        } else {
            None
        };
        for cpu in 0..cpus {
            self.info.report_cpu(
                cpu,
                format_args!(
                    "reads={} irq_reads={} ages seen: 0:{} 1:{} 2:{} 3+:{}",
                    self.reads.get(cpu),
                    self.irq_reads.get(cpu),
                    self.ages[0].get(cpu),
                    self.ages[1].get(cpu),
                    self.ages[2].get(cpu),
                    self.ages[3].get(cpu)
                ),
            );
        }
        self.info.report(format_args!(
            "{gps} grace periods, {publications} publications, {} synchronize, {} cond_synchronize, {} freed ({} by polled cookies)",
            self.syncs.load(Ordering::Relaxed),
            self.conds.load(Ordering::Relaxed),
            self.freed.load(Ordering::Relaxed),
            self.polled.load(Ordering::Relaxed),
        ));
        self.info.report(format_args!(
            "pipeline age histogram (reads that saw age 0/1/2/3+): {} {} {} {}",
            histogram[0], histogram[1], histogram[2], histogram[3]
        ));
        let spread = if cpus > 1 {
            // The writer does not read: its 0 is not unfairness.
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
    }
}
