//! The pool the writers take elements from and retire them to: elements
//! with their `call_rcu` heads, the free bitmap, the callback that frees an
//! element ([`retire`]) and CPU 0's list of removed elements waiting for
//! their cookies ([`Removed`]). See the module docs of `suites::rcu`.

use core::mem::offset_of;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use ksync::rcu::{Cookie, RcuHead};

use crate::kernel::cpu::{self, Counters};
use crate::kernel::hotplug;

/// Elements in the pool.
pub const POOL: usize = 32;
/// Words per element.
const WORDS: usize = 4;
/// What a freed element's words hold.
const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;

/// [`Element::cb`]: no callback queued.
pub(super) const CB_IDLE: u8 = 0;
/// [`Element::cb`]: a `call_rcu` callback is queued and has not started.
pub(super) const CB_QUEUED: u8 = 1;

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
    pub(super) seq: AtomicU64,
    /// 0: published; 1: removed, grace period pending; 2: freed.
    pub(super) age: AtomicU64,
    /// Set when it is removed (before `age` becomes 1): the first
    /// `rcu::gp_seq()` value that proves a full grace period since the
    /// removal, for the readers' pipe counts.
    pub(super) removed_snap: AtomicUsize,
    /// The CPU that queued its callback (valid while `cb` is queued).
    pub(super) queued_on: AtomicUsize,
    words: [AtomicU64; WORDS],
    /// `call_rcu`'s link, handed to ksync while a callback is queued.
    head: RcuHead,
    /// [`CB_IDLE`] or [`CB_QUEUED`].
    pub(super) cb: AtomicU8,
    /// The pool the element belongs to, for its callback (set by `setup`;
    /// the pools are in `static`s).
    pub(super) home: AtomicPtr<Pool>,
}

impl Element {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            age: AtomicU64::new(2),
            removed_snap: AtomicUsize::new(0),
            queued_on: AtomicUsize::new(0),
            words: [const { AtomicU64::new(POISON) }; WORDS],
            head: RcuHead::new(),
            cb: AtomicU8::new(CB_IDLE),
            home: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Writer: makes a free element live with `seq` (before publishing it,
    /// which orders these stores for readers).
    pub(super) fn fill(&self, seq: u64) {
        self.seq.store(seq, Ordering::Relaxed);
        self.age.store(0, Ordering::Relaxed);
        for (i, w) in self.words.iter().enumerate() {
            w.store(word(seq, i), Ordering::Relaxed);
        }
    }

    /// A writer or a callback, after a grace period: frees the element
    /// (age 2, poison). Marking it free in the pool afterwards orders
    /// these stores before its reuse.
    pub(super) fn free(&self) {
        self.age.store(2, Ordering::Relaxed);
        self.seq.store(0, Ordering::Relaxed);
        for w in &self.words {
            w.store(POISON, Ordering::Relaxed);
        }
    }

    /// Reader: whether the element is live and consistent with `seq`
    /// (Relaxed loads: see "Orderings" in the module docs).
    pub(super) fn check(&self, seq: u64) -> Result<(), &'static str> {
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
    pub(super) fn head_ptr(&self) -> *mut RcuHead {
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
    pub(super) elements: [Element; POOL],
    /// Bit `i`: element `i` is free. Callbacks and writers set bits (after
    /// poisoning), only writers (under the writer lock) clear them.
    pub(super) free: AtomicU32,
    /// Callbacks queued (`call_rcu` calls) ...
    pub(super) cb_queued: AtomicU64,
    /// ... and run.
    pub(super) cb_ran: AtomicU64,
    /// A callback found its element not queued, or a writer found a queued
    /// element free: a callback ran twice or for nothing.
    pub(super) cb_errors: AtomicU64,
    /// Per CPU: callbacks run there.
    pub(super) cb_ran_on: Counters,
    /// Callbacks run by another CPU than the one that queued them ...
    pub(super) cb_elsewhere: AtomicU64,
    /// ... of which while that CPU was offline (CPU hotplug): adopted.
    pub(super) cb_adopted: AtomicU64,
}

impl Pool {
    pub(super) const fn new() -> Self {
        Self {
            elements: [const { Element::new() }; POOL],
            free: AtomicU32::new(0),
            cb_queued: AtomicU64::new(0),
            cb_ran: AtomicU64::new(0),
            cb_errors: AtomicU64::new(0),
            cb_ran_on: Counters::new(),
            cb_elsewhere: AtomicU64::new(0),
            cb_adopted: AtomicU64::new(0),
        }
    }

    pub(super) fn index_of(&self, element: *const Element) -> usize {
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
    pub(super) fn take(&self) -> Option<usize> {
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
        // Relaxed: written before `call_rcu`, like `cb`.
        let owner = element.queued_on.load(Ordering::Relaxed);
        let here = cpu::current();
        if owner != here {
            self.cb_elsewhere.fetch_add(1, Ordering::Relaxed);
            if hotplug::is_offline(owner) {
                self.cb_adopted.fetch_add(1, Ordering::Relaxed);
            }
        }
        element.free();
        self.cb_ran.fetch_add(1, Ordering::Relaxed);
        self.cb_ran_on.add(here, 1);
        self.release(self.index_of(element));
    }
}

/// The `call_rcu` callback of every element: frees it.
///
/// # Safety
/// `head` is the `head` of an [`Element`] whose `home` was set, obtained
/// with [`Element::head_ptr`] (the only heads this suite queues).
pub(super) unsafe fn retire(head: *mut RcuHead) {
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

/// CPU 0's own bookkeeping: the elements it removed and retires by
/// waiting (the other writers only use `call_rcu`).
pub(super) struct Removed {
    /// Removed elements waiting for their cookies, oldest first.
    pub(super) removed: [(usize, Cookie); POOL],
    pub(super) len: usize,
}

impl Removed {
    pub(super) const fn new() -> Self {
        Self {
            removed: [(0, Cookie::COMPLETED); POOL],
            len: 0,
        }
    }

    pub(super) fn oldest(&self) -> Option<Cookie> {
        (self.len > 0).then(|| self.removed[0].1)
    }

    pub(super) fn push(&mut self, index: usize, cookie: Cookie) {
        self.removed[self.len] = (index, cookie);
        self.len += 1;
    }

    /// Frees the oldest `n` removed elements.
    pub(super) fn free_oldest(&mut self, pool: &Pool, n: usize) {
        for &(index, _) in &self.removed[..n] {
            pool.elements[index].free();
            pool.release(index);
        }
        self.removed.copy_within(n..self.len, 0);
        self.len -= n;
    }
}
