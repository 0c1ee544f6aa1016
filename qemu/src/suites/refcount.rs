//! Reference count torture: ksync's [`Kref`] (on its `RefCount`) in the
//! lookup-under-RCU idiom (Linux's `kref_get_unless_zero` in an RCU read
//! section, the last `kref_put` freeing through `call_rcu`), with gets and
//! puts racing on every CPU, in thread context and from the timer
//! interrupt, and one element whose count starts one short of overflowing.
//!
//! # The table
//!
//! [`SLOTS`] slots published through [`RcuPtr`]s point into a pool of
//! [`ELEMS`] elements (a free bitmap). Now and then a CPU takes the
//! writers' lock and replaces the element of one slot (not slot 0) by a
//! fresh one from the pool, then drops the table's reference to the old
//! one. The last reference dropped marks it dying and queues an RCU
//! callback, which marks it free and returns it to the pool; a fresh
//! element gets a new generation.
//!
//! Readers (thread context, and the timer interrupt on every CPU) find a
//! slot's element under `rcu::read_lock()`, take a reference with
//! `get_unless_zero` (refused: the element is dying), leave the read
//! section, sometimes count one or two more references with `get` (as a
//! reference is cloned), work a little, and drop them all.
//!
//! # The leaked element
//!
//! Slot 0's element is never replaced and starts with its count one short
//! of its overflow (`i32::MAX - 1`: 2^31 references leaked, as a missing
//! `put` in a loop leaves them): the first reader's extra `get` overflows
//! it. ksync's count saturates there and stays, so the element leaks and
//! is never freed; the suite requires that it did saturate (or it proved
//! nothing).
//!
//! # Checks
//!
//! * A reference taken must find its element live and of the generation
//!   it looked up, all the time it is held (no free, no reuse under it).
//! * A `put` must not bring the count to zero while the CPU still holds
//!   another reference of its own ("zero while referenced").
//! * Freeing: live -> dying (once: else "freed twice"), then the callback
//!   dying -> free, and the pool bit must have been clear (a double free).
//! * `Kref`'s release function runs exactly once per last put.
//! * At the end (after `rcu::barrier()`): every element in a slot is live
//!   with count 1 (slot 0's saturated), every other one free and in the
//!   pool.
//!
//! # The control
//!
//! [`WrappingCount`] is a reference count on a plain 32-bit atomic that
//! wraps (Linux's `atomic_t` used as a count before `refcount_t`): slot
//! 0's element starts at `u32::MAX - 1`, a reader's gets carry it past
//! zero to 1, and its own next `put` "drops the last reference" of an
//! element that it and the table still hold: caught as a count reaching
//! zero while referenced, then as a lookup finding a freed element.

use core::mem::offset_of;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};

use ksync::rcu::{self, RcuHead, RcuPtr};
use ksync::refcount::Kref;
use ksync::spinlock::IrqTicketMutex;

use super::{Rng, busy_work};
use crate::harness::{Ctx, Info, Kind, Suite, Summary, runner};
use crate::kernel::barrier::Barrier;
use crate::kernel::cpu::Counters;

/// Slots of the table (slot 0: the leaked element).
pub const SLOTS: usize = 8;
/// Elements in the pool (at most 64: one bitmap word).
pub const ELEMS: usize = 64;
/// One write per this many thread-context operations, on average.
const WRITE_ONE_IN: u64 = 16;
/// Work while holding a reference.
const HOLD_WORK: u32 = 32;
/// Lookups per timer interrupt.
const IRQ_LOOKUPS: u32 = 2;

const FREE: u8 = 0;
const LIVE: u8 = 1;
const DYING: u8 = 2;

/// A reference count under test.
pub trait Count: Send + Sync + 'static {
    /// A count of 0.
    const ZERO: Self;
    /// Whether the last put runs `Kref`'s release function (counted in
    /// [`RELEASES`]).
    const KREF: bool;
    /// Sets the count (for an element nobody else sees).
    fn set(&self, n: u32);
    /// Sets the count one short of its overflow.
    fn set_near_overflow(&self);
    /// Takes a reference unless the count is 0.
    fn get_unless_zero(&self) -> bool;
    /// Counts one more reference (the caller holds one).
    fn get(&self);
    /// Drops a reference the caller holds; `true` when it was the last.
    fn put(&self) -> bool;
    /// Whether the count is stuck at its saturation value.
    fn saturated(&self) -> bool;
    /// The count, for the final check (saturated or not).
    fn read(&self) -> i64;
}

/// Releases by ksync's `Kref` (its release function): the suite counts
/// them against its frees.
static RELEASES: AtomicU64 = AtomicU64::new(0);

fn kref_release(_kref: NonNull<Kref<()>>) {
    // Relaxed: a statistic compared after the run's barriers.
    RELEASES.fetch_add(1, Ordering::Relaxed);
}

impl Count for Kref<()> {
    // SAFETY: the elements are `static` (they stay valid for ever) and the
    // release function only counts: the suite returns an element to its
    // pool after a grace period itself.
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: Self = unsafe { Kref::new((), kref_release) };
    const KREF: bool = true;
    fn set(&self, n: u32) {
        // SAFETY: `set` is no decrement: it re-initialises the count of an
        // element nobody else can see (Linux's `kref_init` on a reused
        // object).
        unsafe { self.refcount() }.set(n as i32);
    }
    fn set_near_overflow(&self) {
        // SAFETY: as in `set`.
        unsafe { self.refcount() }.set(i32::MAX - 1);
    }
    fn get_unless_zero(&self) -> bool {
        // The reference is tracked by the suite (a later `put`).
        self.get_unless_zero()
            .map(ksync::refcount::KrefRef::into_raw)
            .is_some()
    }
    fn get(&self) {
        Kref::get(self);
    }
    fn put(&self) -> bool {
        // SAFETY: the caller holds a counted reference (`Count::put`'s
        // contract) and uses neither it nor the element's count again
        // after the last one; the element's storage is `static`.
        unsafe { Kref::put(self) }
    }
    fn saturated(&self) -> bool {
        // SAFETY: only read.
        unsafe { self.refcount() }.is_saturated()
    }
    fn read(&self) -> i64 {
        i64::from(Kref::read(self))
    }
}

/// The control: a count that wraps at 2^32.
pub struct WrappingCount(AtomicU32);

impl Count for WrappingCount {
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: Self = Self(AtomicU32::new(0));
    const KREF: bool = false;
    fn set(&self, n: u32) {
        self.0.store(n, Ordering::Relaxed);
    }
    fn set_near_overflow(&self) {
        self.0.store(u32::MAX - 1, Ordering::Relaxed);
    }
    fn get_unless_zero(&self) -> bool {
        // Relaxed as `RefCount`'s: a reference is taken from a lookup
        // that RCU orders.
        let mut old = self.0.load(Ordering::Relaxed);
        loop {
            if old == 0 {
                return false;
            }
            match self.0.compare_exchange_weak(
                old,
                old.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => old = now,
            }
        }
    }
    fn get(&self) {
        // The bug: no overflow check.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn put(&self) -> bool {
        // AcqRel as `RefCount::dec_and_test`'s Release plus the Acquire of
        // the last one.
        self.0.fetch_sub(1, Ordering::AcqRel) == 1
    }
    fn saturated(&self) -> bool {
        false
    }
    fn read(&self) -> i64 {
        i64::from(self.0.load(Ordering::Relaxed))
    }
}

/// A pooled element.
pub struct Elem<C: 'static> {
    count: C,
    state: AtomicU8,
    generation: AtomicU64,
    head: RcuHead,
    index: usize,
    owner: AtomicPtr<RefTorture<C>>,
}

impl<C: Count> Elem<C> {
    const fn new(index: usize) -> Self {
        Self {
            count: C::ZERO,
            state: AtomicU8::new(FREE),
            generation: AtomicU64::new(0),
            head: RcuHead::new(),
            index,
            owner: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// The suite over a count `C`.
pub struct RefTorture<C: 'static> {
    info: Info,
    elems: [Elem<C>; ELEMS],
    slots: [RcuPtr<Elem<C>>; SLOTS],
    /// Free elements, one bit each.
    free: AtomicU64,
    writer: IrqTicketMutex<()>,
    barrier: Barrier,
    /// Set when slot 0's count was seen saturated.
    saturated: AtomicBool,
    frees: AtomicU64,
    callbacks: AtomicU64,
    lookups: Counters,
    misses: Counters,
    writes: Counters,
    irq_lookups: Counters,
}

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TORTURE, &CONTROL];

/// ksync's `Kref` (on `RefCount`).
pub static TORTURE: RefTorture<Kref<()>> = RefTorture::new(Info::new("refcount", Kind::Test, 1000));
/// The control: a count that wraps.
pub static CONTROL: RefTorture<WrappingCount> =
    RefTorture::new(Info::new("refcount-wrap", Kind::Control, 1000));

/// The RCU callback of an element's last put: back to its pool.
///
/// # Safety
/// `head` is the `head` of an `Elem<C>` whose `owner` is set.
unsafe fn elem_free_rcu<C: Count>(head: *mut RcuHead) {
    // SAFETY: queued by `RefTorture::free` with the head of an `Elem<C>`.
    let e = unsafe { &*head.byte_sub(offset_of!(Elem<C>, head)).cast::<Elem<C>>() };
    // SAFETY: `setup` pointed every element at its suite, a `static`.
    let owner = unsafe { &*e.owner.load(Ordering::Relaxed) };
    owner.release(e);
}

impl<C: Count> RefTorture<C> {
    const fn new(info: Info) -> Self {
        let mut elems = [const { Elem::new(0) }; ELEMS];
        let mut i = 0;
        while i < ELEMS {
            elems[i].index = i;
            i += 1;
        }
        Self {
            info,
            elems,
            slots: [const { RcuPtr::null() }; SLOTS],
            free: AtomicU64::new(0),
            writer: IrqTicketMutex::new(()),
            barrier: Barrier::new(),
            saturated: AtomicBool::new(false),
            frees: AtomicU64::new(0),
            callbacks: AtomicU64::new(0),
            lookups: Counters::new(),
            misses: Counters::new(),
            writes: Counters::new(),
            irq_lookups: Counters::new(),
        }
    }

    fn meet(&self, ctx: &Ctx) {
        match runner::threads() {
            1 => self.barrier.wait(ctx.cpus),
            n => self.barrier.wait_threads(ctx.cpus * n),
        }
    }

    /// A free element, live with count 1 and a new generation.
    fn alloc(&self) -> Option<&Elem<C>> {
        // Acquire pairs with the AcqRel `fetch_or` of `release`: the
        // element's callback is done with it.
        let mut free = self.free.load(Ordering::Acquire);
        loop {
            if free == 0 {
                return None;
            }
            let bit = free.trailing_zeros() as usize;
            match self.free.compare_exchange_weak(
                free,
                free & !(1 << bit),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let e = &self.elems[bit];
                    // Relaxed: published by the slot's Release publication.
                    e.generation.fetch_add(1, Ordering::Relaxed);
                    e.count.set(1);
                    e.state.store(LIVE, Ordering::Relaxed);
                    return Some(e);
                }
                Err(now) => free = now,
            }
        }
    }

    /// The last reference to `e` is gone: dying, and freed after a grace
    /// period.
    fn free(&self, ctx: &Ctx, e: &Elem<C>) {
        // Relaxed: the count's last put ordered the holders' accesses.
        if e.state
            .compare_exchange(LIVE, DYING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            ctx.fail("an element was freed twice (its last reference dropped twice)");
            return;
        }
        self.frees.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the element went live -> dying just above, once per
        // incarnation, so its head is not queued; it is `static`; the
        // callback only returns it to this suite's pool.
        unsafe {
            rcu::call_rcu(
                &e.head as *const RcuHead as *mut RcuHead,
                elem_free_rcu::<C>,
            )
        };
    }

    /// The callback's work: dying -> free, back into the pool.
    fn release(&self, e: &Elem<C>) {
        self.callbacks.fetch_add(1, Ordering::Relaxed);
        if e.state
            .compare_exchange(DYING, FREE, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // No `Ctx` in a callback: the final check reports it.
            return;
        }
        // AcqRel: Release pairs with `alloc`'s Acquire.
        if self.free.fetch_or(1 << e.index, Ordering::AcqRel) & (1 << e.index) != 0 {
            e.state.store(DYING, Ordering::Relaxed); // seen by the final check
        }
    }

    /// Drops one of the `held` references this context holds to `e`.
    fn put(&self, ctx: &Ctx, e: &Elem<C>, held: u32) {
        if e.count.put() {
            if held > 1 {
                ctx.fail("a put brought the count to zero while this CPU still held a reference");
            }
            self.free(ctx, e);
        }
    }

    /// One lookup of `slot`, holding `extra` more references for a while.
    fn lookup(&self, ctx: &Ctx, slot: usize, extra: u32, work: u32) -> bool {
        let e = {
            let guard = rcu::read_lock();
            let Some(e) = self.slots[slot].read(&guard) else {
                return false;
            };
            // Relaxed: read again under the reference below.
            let generation = e.generation.load(Ordering::Relaxed);
            if !e.count.get_unless_zero() {
                return false; // dying
            }
            if e.state.load(Ordering::Relaxed) != LIVE {
                ctx.fail("a lookup got a reference to a dying or freed element");
            }
            // SAFETY: the elements are `static`: the reference is only a
            // shorter way to them, valid past the read section.
            let e: &Elem<C> = unsafe { &*(e as *const Elem<C>) };
            (e, generation)
        };
        let (e, generation) = e;
        for _ in 0..extra {
            e.count.get();
        }
        if slot == 0 && e.count.saturated() {
            self.saturated.store(true, Ordering::Relaxed);
        }
        busy_work(work);
        if e.state.load(Ordering::Relaxed) != LIVE
            || e.generation.load(Ordering::Relaxed) != generation
        {
            ctx.fail("an element was freed or reused under a reference");
        }
        for held in (1..=extra + 1).rev() {
            self.put(ctx, e, held);
        }
        true
    }

    /// Replaces the element of one slot (not slot 0).
    fn write(&self, ctx: &Ctx, rng: &mut Rng) -> bool {
        let Some(_w) = self.writer.try_lock() else {
            return false;
        };
        let Some(new) = self.alloc() else {
            return false;
        };
        let slot = 1 + rng.below(SLOTS as u64 - 1) as usize;
        // SAFETY: only elements of `self.elems` (static) are published.
        let old = unsafe { self.slots[slot].publish(new as *const Elem<C> as *mut Elem<C>) };
        // SAFETY: as above.
        if let Some(old) = unsafe { old.as_ref() } {
            self.put(ctx, old, 1); // the table's reference
        }
        true
    }

    /// The final check (CPU 0, the others waiting, callbacks done).
    fn check(&self) -> Option<&'static str> {
        let mut installed = 0u64;
        for (slot, p) in self.slots.iter().enumerate() {
            // SAFETY: as in `write`.
            let Some(e) = (unsafe { p.load().as_ref() }) else {
                continue;
            };
            installed |= 1 << e.index;
            if e.state.load(Ordering::Relaxed) != LIVE {
                return Some("an element in the table is not live after the run");
            }
            if slot == 0 {
                if !e.count.saturated() {
                    return Some("the leaked element's count did not saturate");
                }
            } else if e.count.read() != 1 {
                return Some("an element in the table has a count other than 1 after the run");
            }
        }
        let free = self.free.load(Ordering::Relaxed);
        if free & installed != 0 || (free | installed).count_ones() as usize != ELEMS {
            return Some("elements leaked or freed twice (table + pool != all)");
        }
        for e in &self.elems {
            if free & (1 << e.index) != 0
                && (e.state.load(Ordering::Relaxed) != FREE || e.count.read() != 0)
            {
                return Some("a pooled element is not free with count 0 (freed twice?)");
            }
        }
        if self.frees.load(Ordering::Relaxed) != self.callbacks.load(Ordering::Relaxed) {
            return Some("RCU callbacks do not match the frees");
        }
        None
    }
}

impl<C: Count> Suite for RefTorture<C> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn setup(&self, _cpus: usize) {
        // No callback of an earlier run may be pending.
        rcu::barrier();
        let owner = self as *const Self as *mut Self;
        for e in &self.elems {
            e.owner.store(owner, Ordering::Relaxed);
            e.count.set(0);
            e.state.store(FREE, Ordering::Relaxed);
        }
        self.free.store(u64::MAX >> (64 - ELEMS), Ordering::Relaxed);
        for slot in &self.slots {
            let e = self
                .alloc()
                .expect("the pool holds more elements than slots");
            // SAFETY: as in `write`; nobody reads yet.
            unsafe { slot.publish(e as *const Elem<C> as *mut Elem<C>) };
        }
        // SAFETY: as in `write`.
        let leaked = unsafe { &*self.slots[0].load() };
        leaked.count.set_near_overflow();
        self.saturated.store(false, Ordering::Relaxed);
        RELEASES.store(0, Ordering::Relaxed);
        for c in [&self.frees, &self.callbacks] {
            c.store(0, Ordering::Relaxed);
        }
        for c in [&self.lookups, &self.misses, &self.writes, &self.irq_lookups] {
            c.reset();
        }
    }

    fn run(&self, ctx: &Ctx) {
        let mut rng = Rng::for_ctx(ctx, 71);
        let (mut lookups, mut misses, mut writes) = (0, 0, 0);
        while !ctx.should_stop() {
            if rng.below(WRITE_ONE_IN) == 0 && self.write(ctx, &mut rng) {
                writes += 1;
            }
            let slot = rng.below(SLOTS as u64) as usize;
            let extra = rng.below(3) as u32;
            if self.lookup(ctx, slot, extra, HOLD_WORK) {
                lookups += 1;
            } else {
                misses += 1;
            }
        }
        self.lookups.add(ctx.cpu, lookups);
        self.misses.add(ctx.cpu, misses);
        self.writes.add(ctx.cpu, writes);
        // The final check: every CPU done, every callback run.
        self.meet(ctx);
        if ctx.cpu == 0 && ctx.thread == 0 {
            rcu::barrier();
            if let Some(failure) = self.check() {
                ctx.fail(failure);
            }
            // `Kref`'s release function ran once per last put (the
            // control's count has none).
            if C::KREF && RELEASES.load(Ordering::Relaxed) != self.frees.load(Ordering::Relaxed) {
                ctx.fail("Kref's release did not run exactly once per last put");
            }
        }
        self.meet(ctx);
    }

    fn irq(&self, ctx: &Ctx) {
        let mut rng = Rng::new(ctx.cpu as u64 ^ self.irq_lookups.get(ctx.cpu));
        for _ in 0..IRQ_LOOKUPS {
            let slot = rng.below(SLOTS as u64) as usize;
            if self.lookup(ctx, slot, 1, HOLD_WORK / 4) {
                self.irq_lookups.add(ctx.cpu, 1);
            }
        }
    }

    fn finish(&self, cpus: usize) -> Summary {
        self.info.report_per_cpu(
            cpus,
            &[
                ("lookups", &self.lookups),
                ("misses", &self.misses),
                ("writes", &self.writes),
                ("irq_lookups", &self.irq_lookups),
            ],
        );
        self.info.report(format_args!(
            "{} lookups ({} in interrupts), {} writes, {} frees through call_rcu, {} callbacks; leaked element saturated: {}",
            self.lookups.sum(cpus) + self.irq_lookups.sum(cpus),
            self.irq_lookups.sum(cpus),
            self.writes.sum(cpus),
            self.frees.load(Ordering::Relaxed),
            self.callbacks.load(Ordering::Relaxed),
            self.saturated.load(Ordering::Relaxed),
        ));
        Summary::new(
            self.lookups.sum(cpus) + self.irq_lookups.sum(cpus),
            self.lookups.min_max(cpus),
            None,
        )
        .with_callbacks(
            self.frees.load(Ordering::Relaxed),
            self.callbacks.load(Ordering::Relaxed),
        )
    }
}
