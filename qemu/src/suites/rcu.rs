//! RCU torture, after Linux's rcutorture: writers publish element after
//! element through an [`RcuPtr`], retire the old ones in every way ksync
//! offers (waiting for grace periods, polled cookies, and `call_rcu`
//! callbacks), poison each old element once it may and later reuse it;
//! every CPU reads, in thread context and from its timer interrupt, and
//! checks that what it holds was not freed under it.
//!
//! # The pool
//!
//! Elements come from a static pool of [`POOL`] (no allocator). Each
//! element embeds an [`RcuHead`] (Linux's `struct rcu_head`), so retiring
//! it through [`rcu::call_rcu`] needs no memory either: the callback
//! ([`retire`]) finds the element from its head (`container_of`) and the
//! pool from the element, poisons the element (*age* 2, every word
//! [`POISON`]) and marks it free. Callbacks run in the kernel's timer
//! interrupts, in idle waits and in `rcu::barrier()`, on any CPU
//! (`kernel::rcu`), so everything they touch is atomic: the element's
//! words and the pool's free bitmap, which writers take elements from.
//!
//! # The writers
//!
//! Writers serialise on one writer lock while they publish. CPU 0 writes
//! all the time; each round it fills a free element (a new sequence number
//! in every word), publishes it, marks the element it replaced as removed
//! (age 1), and then, without the lock, retires it, at random:
//!
//! * `synchronize()`, after which every removed element may be freed;
//! * `start_poll()`: the removed element waits for its cookie to `poll()`
//!   complete;
//! * `get_state()`: likewise, but nothing starts a grace period until a
//!   later `cond_synchronize()` asks for one;
//! * `get_state()` and a `cond_synchronize()` on the oldest removed element;
//! * `call_rcu()` (two rounds in six): the callback frees it.
//!
//! Whenever the pool runs dry CPU 0 `cond_synchronize()`s on the oldest
//! element it removed or, when it has none, calls `rcu::barrier()` for the
//! callbacks. Every round, removed elements whose cookies completed are
//! freed. The other CPUs write too, now and then, from thread context and
//! from their timer interrupts: a round that only *tries* the writer lock
//! and retires through `call_rcu` (it never waits, so it is fine in an
//! interrupt handler), which puts callbacks on every CPU's list.
//!
//! Nobody waits for a grace period with the writer lock held: CPU 0 spins
//! on it without reporting quiescent states, so a holder waiting for a
//! grace period would wait for CPU 0, which waits for the holder.
//! Interrupt handlers take it too, yet it is no interrupt-saving lock: a
//! handler only tries, so it never spins on a lock its own CPU holds.
//!
//! At the end CPU 0 closes the writer side (no more `call_rcu`, as a
//! module does before unloading) and calls `rcu::barrier()`: every queued
//! callback must then have run, exactly once. Each element records whether
//! a callback is queued for it: queuing a queued one, or a callback
//! finding its element not queued (a second run), is counted as an error;
//! the totals of queued and run callbacks must match, and ksync must have
//! none pending.
//!
//! # The readers (every CPU but CPU 0; every CPU's interrupt)
//!
//! Under `read_lock()`: follow the pointer, check the words (not poisoned,
//! all carrying the element's sequence number), stretch the read section,
//! then read the element's age and check everything again. The age must be
//! 0 (current) or 1 (removed, grace period pending): 2 would mean a whole
//! grace period ended (or a callback ran) while this reader held it.
//! Readers record the ages they saw: the pipeline histogram. In QSBR an
//! interrupt handler's read section is covered by the code it interrupted,
//! which is not at a quiescent state (`kernel::rcu`); that is also why a
//! callback run by the timer interrupt cannot free what the interrupted
//! thread is reading.
//!
//! The readers report quiescent states only between read sections (each
//! `should_stop`), so every CPU holds up every grace period for no longer
//! than one read section.
//!
//! # Orderings
//!
//! The element words are Relaxed: RCU's publication (`RcuPtr`'s
//! Release/Acquire) orders a fill before readers, and the pool's free
//! bitmap (Release when freed, Acquire when taken) orders a poisoning
//! before the refill; a reader that sees a word change is the failure the
//! suite looks for. The statistics and the callback counters are Relaxed
//! too: the runner's barriers order them before `finish`, and ksync's
//! callback-list lock hands everything written before `call_rcu` to the
//! callback.
//!
//! # The controls
//!
//! * [`NoWaitRcu`] is ksync's RCU with a `synchronize()` that returns at
//!   once: the writer frees elements readers still hold.
//! * [`CallNowRcu`] is ksync's RCU with a `call_rcu()` that invokes the
//!   callback at once instead of after a grace period: the callbacks free
//!   elements readers still hold.

use core::mem::offset_of;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use ksync::rcu::{self, Callback, Cookie, RcuHead, RcuPtr};
use ksync::spinlock::TtasMutex;

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary};
use crate::kernel::cpu::{self, Counters};
use crate::kernel::time;

/// Elements in the pool.
pub const POOL: usize = 32;
/// Words per element.
const WORDS: usize = 4;
/// What a freed element's words hold.
const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;
/// The CPU that writes all the time.
const WRITER: usize = 0;
/// Histogram buckets: ages 0, 1, 2, 3 and above.
const AGES: usize = 4;
/// A reader CPU tries a `call_rcu` round once in this many reads...
const READS_PER_WRITE: u64 = 1024;
/// ... and its timer interrupt once in this many ticks with suite work.
const TICKS_PER_WRITE: u64 = 8;

/// [`Element::cb`]: no callback queued.
const CB_IDLE: u8 = 0;
/// [`Element::cb`]: a `call_rcu` callback is queued and has not started.
const CB_QUEUED: u8 = 1;

/// The free bitmap has a bit per element.
const _: () = assert!(POOL <= 32);

/// What a live element's word `i` holds for sequence number `seq`.
fn word(seq: u64, i: usize) -> u64 {
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64
}

/// One element: a sequence number, its age and some words, all atomics so
/// that a reader of a freed element (a bug the suite looks for) reads
/// wrong values, not undefined behaviour; and what `call_rcu` needs.
pub struct Element {
    seq: AtomicU64,
    /// 0: published; 1: removed, grace period pending; 2: freed.
    age: AtomicU64,
    words: [AtomicU64; WORDS],
    /// `call_rcu`'s link, handed to ksync while a callback is queued.
    head: RcuHead,
    /// [`CB_IDLE`] or [`CB_QUEUED`].
    cb: AtomicU8,
    /// The pool the element belongs to, for its callback (set by `setup`;
    /// the pools are in `static`s).
    home: AtomicPtr<Pool>,
}

impl Element {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            age: AtomicU64::new(2),
            words: [const { AtomicU64::new(POISON) }; WORDS],
            head: RcuHead::new(),
            cb: AtomicU8::new(CB_IDLE),
            home: AtomicPtr::new(ptr::null_mut()),
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

    /// A writer or a callback, after a grace period: frees the element
    /// (age 2, poison). Marking it free in the pool afterwards orders
    /// these stores before its reuse.
    fn free(&self) {
        self.age.store(2, Ordering::Relaxed);
        self.seq.store(0, Ordering::Relaxed);
        for w in &self.words {
            w.store(POISON, Ordering::Relaxed);
        }
    }

    /// Reader: whether the element is live and consistent with `seq`
    /// (Relaxed loads: see "Orderings" in the module docs).
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

    /// The head to queue with `call_rcu`. Derived from a pointer to the
    /// whole element, so that [`retire`] may go back from it to the
    /// element.
    fn head_ptr(&self) -> *mut RcuHead {
        // `RcuHead` is all interior mutability: ksync may write it through
        // this pointer although it comes from a shared reference.
        ptr::from_ref(self)
            .wrapping_byte_add(offset_of!(Element, head))
            .cast::<RcuHead>()
            .cast_mut()
    }
}

/// The elements and what callbacks update: atomics only (callbacks run in
/// interrupt handlers on any CPU, see the module docs).
pub struct Pool {
    elements: [Element; POOL],
    /// Bit `i`: element `i` is free. Callbacks and writers set bits (after
    /// poisoning), only writers (under the writer lock) clear them.
    free: AtomicU32,
    /// Callbacks queued (`call_rcu` calls) ...
    cb_queued: AtomicU64,
    /// ... and run.
    cb_ran: AtomicU64,
    /// A callback found its element not queued, or a writer found a queued
    /// element free: a callback ran twice or for nothing.
    cb_errors: AtomicU64,
    /// Per CPU: callbacks run there.
    cb_ran_on: Counters,
}

impl Pool {
    const fn new() -> Self {
        Self {
            elements: [const { Element::new() }; POOL],
            free: AtomicU32::new(0),
            cb_queued: AtomicU64::new(0),
            cb_ran: AtomicU64::new(0),
            cb_errors: AtomicU64::new(0),
            cb_ran_on: Counters::new(),
        }
    }

    fn index_of(&self, element: *const Element) -> usize {
        let index = (element.addr() - self.elements.as_ptr().addr()) / size_of::<Element>();
        assert!(index < POOL, "an element from outside the pool");
        index
    }

    /// Marks element `index` free: after its poisoning.
    fn release(&self, index: usize) {
        // Release pairs with the writers' Acquire load in `take`: the
        // poison stores happen-before the element is filled again.
        self.free.fetch_or(1 << index, Ordering::Release);
    }

    /// Writer, under the writer lock: takes a free element, if any.
    fn take(&self) -> Option<usize> {
        // Acquire pairs with the Release in `release`.
        let free = self.free.load(Ordering::Acquire);
        if free == 0 {
            return None;
        }
        let index = free.trailing_zeros() as usize;
        // Relaxed: only writers clear bits, under the lock, so the bit is
        // still set; the load above ordered the free before us.
        self.free.fetch_and(!(1 << index), Ordering::Relaxed);
        // Relaxed: the callback that freed it wrote `cb` before `release`.
        if self.elements[index].cb.load(Ordering::Relaxed) != CB_IDLE {
            self.cb_errors.fetch_add(1, Ordering::Relaxed);
        }
        Some(index)
    }

    /// The callback's work on `element`, whose grace period has ended.
    fn retired(&self, element: &Element) {
        // Relaxed: the writer's store of `CB_QUEUED` came before its
        // `call_rcu`, which hands the head to us through ksync's list lock.
        if element.cb.swap(CB_IDLE, Ordering::Relaxed) != CB_QUEUED {
            // Ran twice (or for an element nobody queued): do not free it
            // again, it may be live by now.
            self.cb_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        element.free();
        self.cb_ran.fetch_add(1, Ordering::Relaxed);
        self.cb_ran_on.add(cpu::current(), 1);
        self.release(self.index_of(element));
    }
}

/// The `call_rcu` callback of every element: frees it.
///
/// # Safety
/// `head` is the `head` of an [`Element`] whose `home` was set, obtained
/// with [`Element::head_ptr`] (the only heads this suite queues).
unsafe fn retire(head: *mut RcuHead) {
    // `container_of`: the head sits at this offset in its element, and the
    // pointer carries the whole element's provenance (`head_ptr`).
    let element = head
        .wrapping_byte_sub(offset_of!(Element, head))
        .cast::<Element>();
    // SAFETY: `element` points to an `Element` in a pool in a `static` (the
    // caller's contract), valid for ever; we only share it.
    let element = unsafe { &*element };
    // Relaxed: set by `setup` before the suite started, which the runner's
    // barrier orders before every `call_rcu` of the suite.
    let pool = element.home.load(Ordering::Relaxed);
    // SAFETY: `home` points to the pool holding the element, in the same
    // `static`.
    unsafe { &*pool }.retired(element);
}

/// The grace-period calls the writers make: ksync's RCU, or a control's.
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
    /// `rcu::call_rcu`.
    ///
    /// # Safety
    /// As for `rcu::call_rcu`.
    unsafe fn call_rcu(&self, head: *mut RcuHead, func: Callback) {
        // SAFETY: the caller's contract is `call_rcu`'s.
        unsafe { rcu::call_rcu(head, func) }
    }
}

/// ksync's RCU.
pub struct KsyncRcu;

impl Rcu for KsyncRcu {
    fn synchronize(&self) {
        rcu::synchronize()
    }
}

/// A control: ksync's RCU but `synchronize` does not wait.
pub struct NoWaitRcu;

impl Rcu for NoWaitRcu {
    fn synchronize(&self) {}
}

/// A control: ksync's RCU but `call_rcu` runs the callback at once.
pub struct CallNowRcu;

impl Rcu for CallNowRcu {
    fn synchronize(&self) {
        rcu::synchronize()
    }

    unsafe fn call_rcu(&self, head: *mut RcuHead, func: Callback) {
        // SAFETY: `head` is valid and `func` is its callback (the caller's
        // contract). Calling it now, before a grace period, is this
        // control's deliberate bug: it breaks RCU's promise to the readers
        // but not memory safety, since the suite's only callback, `retire`,
        // touches nothing but atomics of an element in a `static` (readers
        // see poison, not freed memory).
        unsafe { func(head) }
    }
}

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

/// CPU 0's own bookkeeping: the elements it removed and retires by
/// waiting (the other writers only use `call_rcu`).
struct Removed {
    /// Removed elements waiting for their cookies, oldest first.
    removed: [(usize, Cookie); POOL],
    len: usize,
}

impl Removed {
    const fn new() -> Self {
        Self {
            removed: [(0, Cookie::COMPLETED); POOL],
            len: 0,
        }
    }

    fn oldest(&self) -> Option<Cookie> {
        (self.len > 0).then(|| self.removed[0].1)
    }

    fn push(&mut self, index: usize, cookie: Cookie) {
        self.removed[self.len] = (index, cookie);
        self.len += 1;
    }

    /// Frees the oldest `n` removed elements.
    fn free_oldest(&mut self, pool: &Pool, n: usize) {
        for &(index, _) in &self.removed[..n] {
            pool.elements[index].free();
            pool.release(index);
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
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL, &CONTROL_CALL_NOW];

/// The test: ksync's RCU.
pub static TEST: RcuTorture<KsyncRcu> =
    RcuTorture::new(Info::new("rcu", Kind::Test, 1000), KsyncRcu);
/// A control: `synchronize` returns at once.
pub static CONTROL: RcuTorture<NoWaitRcu> =
    RcuTorture::new(Info::new("rcu-nowait", Kind::Control, 1000), NoWaitRcu);
/// A control: `call_rcu` runs the callback at once.
pub static CONTROL_CALL_NOW: RcuTorture<CallNowRcu> =
    RcuTorture::new(Info::new("rcu-callnow", Kind::Control, 1000), CallNowRcu);

impl<R: Rcu> RcuTorture<R> {
    const fn new(info: Info, rcu: R) -> Self {
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
        // Relaxed: a marker for readers that still hold it (0 or 1 is
        // fine for them); 2 only comes after a grace period.
        self.pool.elements[old].age.store(1, Ordering::Relaxed);
        Some(old)
    }

    /// Retires the removed element `index` through `call_rcu`.
    fn retire_later(&self, index: usize) {
        let element = &self.pool.elements[index];
        // Relaxed: `call_rcu` hands this store to the callback (list lock).
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
        for bucket in &self.ages {
            bucket.reset();
        }
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::new(ctx.cpu as u64 + 41);
        if ctx.cpu == WRITER {
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
        let publications = self.publications.load(Ordering::Relaxed);
        let failure = if histogram[2..].iter().any(|&n| n > 0) {
            Some("a reader held an element for a whole grace period after its removal")
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
    }
}
