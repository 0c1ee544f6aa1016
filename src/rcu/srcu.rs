//! SRCU: sleepable RCU, with grace periods counted on per-CPU counters.
//!
//! Linux's `kernel/rcu/srcutree.c` (the classic counter-flip algorithm of
//! Lai Jiangshan's 2012 rewrite, which Tree SRCU still runs per domain).
//! An SRCU read section may block, sleep, be preempted and migrate; it need
//! not be inside an RCU read section and it never holds up an RCU grace
//! period, because SRCU does not use quiescent states at all. Instead each
//! domain ([`Srcu`]) counts its readers: a reader increments a per-CPU
//! lock count on entry and a per-CPU unlock count on exit, and a grace
//! period waits until the two sums match. A slow reader holds up only its
//! own domain's updaters.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use std::sync::atomic::{AtomicPtr, Ordering};
//! use ksync::rcu::srcu::Srcu;
//!
//! static DEVICES: Srcu = Srcu::new();
//! static TABLE: AtomicPtr<[u32; 4]> = AtomicPtr::new(core::ptr::null_mut());
//!
//! TABLE.store(Box::into_raw(Box::new([1, 2, 3, 4])), Ordering::Release);
//! {
//!     let _reader = DEVICES.read_lock();
//!     // SAFETY: published above; freed only after a grace period.
//!     let table = unsafe { &*TABLE.load(Ordering::Acquire) };
//!     std::thread::yield_now(); // SRCU readers may sleep
//!     assert_eq!(table[2], 3);
//! }
//! let old = TABLE.swap(Box::into_raw(Box::new([5, 6, 7, 8])), Ordering::AcqRel);
//! DEVICES.synchronize(); // every reader that could see `old` is done
//! // SAFETY: unpublished, and a grace period has passed.
//! drop(unsafe { Box::from_raw(old) });
//! # drop(unsafe { Box::from_raw(TABLE.swap(core::ptr::null_mut(), Ordering::AcqRel)) });
//! ```
//!
//! # The counters
//!
//! Each CPU has `locks[2]` and `unlocks[2]`, indexed by the low bit of the
//! domain's `idx`. A reader reads `idx`, increments `locks[idx]` on the
//! CPU it runs on, and, when its guard drops — possibly on another CPU —
//! increments `unlocks[idx]` on *that* CPU, for the same `idx` (the guard
//! carries it). Per CPU the counts mean nothing; summed over all CPUs,
//! `sum(locks[i]) - sum(unlocks[i])` is the number of readers inside on
//! index `i`. Each increment touches only the current CPU's cache line,
//! with interrupts on this CPU excluded but no `lock`-prefixed instruction
//! where the architecture allows (`arch::local_add`, as for
//! [`PerCpuCounter`](crate::percpu_counter::PerCpuCounter)).
//!
//! The counts are 32 bits and compared modulo 2³²: a false match would
//! need 2³² readers to enter the old index during one scan, and after a
//! flip each reader context can enter the old index only a couple of times
//! more (see C below).
//!
//! # A grace period
//!
//! ```text
//!   wait until readers on idx ^ 1 are gone   /* stragglers of the last flip */
//!   idx += 1                                 /* flip: new readers use the other index */
//!   wait until readers on the old idx are gone
//! ```
//!
//! "Readers on `i` are gone" is one *scan*: sum `unlocks[i]` over all
//! CPUs, a full fence, sum `locks[i]`, and compare. It is repeated until
//! the sums match.
//!
//! ## Why the unlocks are summed first
//!
//! The sums are not taken at one instant: CPU 0's count is read before CPU
//! 1's, while readers keep coming and going. Summed the other way round
//! (locks, then unlocks), a reader that enters and leaves after its CPU's
//! lock count was read but before its CPU's unlock count is read
//! contributes an unlock without a lock, and that surplus cancels a reader
//! still inside whose lock was counted: the sums match with a reader
//! inside. Summing unlocks first, with a full fence (D) before the locks,
//! every counted unlock has its lock counted too (the reader's fence B
//! before its unlock pairs with D, and its lock increment precedes B), so
//! `locks - unlocks` counts exactly the counted readers that have not
//! left, and nothing else.
//!
//! ## Why twice
//!
//! A reader reads `idx` and then increments `locks[idx]`; it may be
//! preempted in between for as long as the scheduler likes. Flipping and
//! waiting only for the old index once is not enough:
//!
//! 1. Grace period 1 flips `idx` from 0 to 1 and scans index 0. Reader R
//!    read `idx == 0` before the flip but increments `locks[0]` only after
//!    the scan: grace period 1 ends without it. That is still correct for
//!    grace period 1 — R's increment came after the scan, so by the A/D
//!    pairing R sees everything the updater did before it, including the
//!    removal that grace period 1 protects.
//! 2. R, still inside, now reads data that grace period 2 will remove.
//!    Grace period 2 flips `idx` from 1 to 0 and scans index 1 only. R
//!    sits on index 0 and is not waited for: the data is freed under it.
//!
//! So before each flip the grace period also waits for the index readers
//! are *not* told to use, which holds only such stragglers: R is caught by
//! the first wait of grace period 2. Linux does the same (`SRCU_STATE_SCAN1`,
//! flip, `SRCU_STATE_SCAN2` in `srcu_advance_state`): one flip per grace
//! period, two waits — flip-and-wait for each index in turn.
//!
//! # Memory barriers
//!
//! ```text
//!   reader                                  updater (one scan of index i)
//!   ------                                  -----------------------------
//!   i := idx (Relaxed)                      (remove the element; flip idx)
//!   locks[i] += 1    (this CPU)             fence(SeqCst)              /* C */
//!   fence(SeqCst)                  /* A */  u := sum unlocks[i] (Relaxed)
//!   ... read section ...                    fence(SeqCst)              /* D */
//!   fence(SeqCst)                  /* B */  l := sum locks[i]   (Relaxed)
//!   unlocks[i] += 1  (this CPU)             readers gone if l == u
//! ```
//!
//! * **A pairs with D** (store buffering: each side writes, fences, reads
//!   what the other wrote). The two fences are ordered one way or the
//!   other. If A comes first, the updater's lock sum (after D) sees the
//!   reader's increment (before A): the reader is counted and waited for
//!   until its unlock is counted too. If D comes first, the reader's loads
//!   (after A) see everything the updater wrote before D — the removal, so
//!   the reader cannot find the element this grace period will free. A
//!   reader on the *other* index, which read `idx` after the flip, is
//!   covered the same way by the first scan's D: the flip is stored after
//!   it, so D synchronizes with the reader's A.
//! * **B pairs with D**: if the updater's unlock sum sees a reader's
//!   unlock increment (after B), the whole read section (before B)
//!   happens-before everything after D: the lock sum counts the reader's
//!   lock (see "Why the unlocks are summed first"), and the caller's free,
//!   after the last scan, cannot race with the reader's accesses. If it
//!   does not see it, the reader's lock is counted without its unlock and
//!   the scan fails; the updater scans again.
//! * **C pairs with B and A** (progress): if C comes before a reader's
//!   next fence (its B, or the A of its next `read_lock`), every `read_lock`
//!   after that fence reads the flipped `idx` and leaves the old index
//!   alone. If the fence comes before C, everything the reader stored
//!   before it — its lock, or its unlock — is counted by the scan, so a
//!   scan that misses a reader's unlock has its next fence after C. Either
//!   way each reader context adds at most a couple of locks to the old
//!   index after the flip: the scans terminate while new readers keep
//!   arriving, and the counts cannot wrap during a scan. Safety rests on
//!   A, B and D alone (the loom models pass with C removed, and fail with
//!   any of the others removed); C is what bounds the wait, as in Linux.
//!
//! # Guards may move
//!
//! [`SrcuGuard`] is `Send`: the guard may be dropped on another CPU or by
//! another thread (Linux allows `srcu_read_unlock` after migration, and
//! `srcu_up_read` from another task). The unlock increments the unlocking
//! CPU's count with the index the guard carries; only the sums matter.
//!
//! # Waiting
//!
//! [`synchronize`](Srcu::synchronize) spins. SRCU readers may sleep, so
//! on a kernel where a spinning updater keeps a sleeping reader from
//! running (one CPU, no preemption), call
//! [`synchronize_with`](Srcu::synchronize_with) and give it the
//! scheduler's yield. Updaters of one domain are serialised; an updater
//! that waits while another runs a grace period returns without running
//! its own if that one already covers it.
//!
//! Never call `synchronize` on a domain inside a read section of the same
//! domain: it waits for itself (Linux forbids it too). Forgetting a guard
//! (`mem::forget`) stalls the domain's grace periods forever.
//!
//! # Polled grace periods
//!
//! `gp_seq` counts grace periods: odd while one runs, +1 at its start and
//! at its end. [`get_state`](Srcu::get_state) returns the first value
//! that proves a full grace period since the call (`(gp_seq + 3) & !1`),
//! [`poll`](Srcu::poll) checks it without waiting, and
//! [`cond_synchronize`](Srcu::cond_synchronize) waits only if it has not
//! passed. `get_state` issues a full fence before it reads `gp_seq`: if it
//! read a value from before a grace period's start, that fence precedes
//! the fences of the grace period's scans (which follow the start), so the
//! A/D argument above covers everything the caller did before `get_state`.
//!
//! # Compared with Linux
//!
//! | Linux | here |
//! |---|---|
//! | `struct srcu_struct`, `DEFINE_STATIC_SRCU` | [`Srcu`], `static S: Srcu = Srcu::new()` |
//! | `srcu_read_lock`, `srcu_read_unlock` | [`Srcu::read_lock`], dropping the [`SrcuGuard`] |
//! | `srcu_down_read`, `srcu_up_read` | the same: the guard is `Send` |
//! | `synchronize_srcu` | [`Srcu::synchronize`], [`Srcu::synchronize_with`] |
//! | `get_state_synchronize_srcu`, `poll_state_synchronize_srcu` | [`Srcu::get_state`], [`Srcu::poll`] |
//! | `srcu_lock_count`, `srcu_unlock_count` | per-CPU `locks`, `unlocks` |
//!
//! Not here: `call_srcu` and expedited grace periods (a grace period is
//! driven by the updater that waits for it), and Tree SRCU's funnel of
//! nodes (one domain is one set of counters).

use core::fmt;

use super::seq_ge;
use crate::percpu::PerCpu;
use crate::sync::{AtomicBool, AtomicI32, AtomicUsize, Ordering, const_fn, fence, spin_loop};

/// One CPU's reader counts.
struct Counts {
    /// `read_lock`s on this CPU, by index.
    locks: [AtomicI32; 2],
    /// Guard drops on this CPU, by the index of the guard.
    unlocks: [AtomicI32; 2],
}

crate::sync::const_init! {
    impl for Counts = Counts {
        locks: [AtomicI32::new(0), AtomicI32::new(0)],
        unlocks: [AtomicI32::new(0), AtomicI32::new(0)],
    };
}

/// An SRCU domain: readers that may sleep, and updaters that wait for the
/// readers of this domain only.
///
/// Takes one cache line per possible CPU
/// ([`MAX_CPUS`](crate::kernel::MAX_CPUS) of them) for the counters.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::srcu::Srcu;
///
/// static DOMAIN: Srcu = Srcu::new();
///
/// let guard = DOMAIN.read_lock();
/// // The guard may move to another thread (or CPU) and be dropped there.
/// std::thread::spawn(move || drop(guard)).join().unwrap();
/// DOMAIN.synchronize();
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): index 0, no grace period
/// started, every CPU's counts 0.
#[doc(alias("srcu_struct", "DEFINE_SRCU", "DEFINE_STATIC_SRCU"))]
pub struct Srcu {
    /// Bit 0: the index new readers use. `+1` per flip, under the
    /// updaters' lock.
    idx: AtomicUsize,
    /// Grace periods: odd while one runs; `+1` at start and end, under
    /// the updaters' lock.
    gp_seq: AtomicUsize,
    /// The updaters' lock: set while an updater runs grace periods. Taken
    /// only by a compare-exchange, never spun on, and held with preemption
    /// *enabled*: the holder calls the caller's `wait`, which may sleep or
    /// yield (Linux's updaters sleep on `srcu_gp_mutex`), and an updater
    /// that finds it set calls its own `wait` and tries again, so a
    /// preempted holder delays the others but cannot deadlock them.
    updating: AtomicBool,
    cpus: PerCpu<Counts>,
}

/// [`Srcu::updating`] held; released when it drops (also when `wait`
/// panics).
struct Updating<'a>(&'a AtomicBool);

impl Drop for Updating<'_> {
    fn drop(&mut self) {
        // Release pairs with the Acquire that takes it next: this
        // updater's grace periods happen-before the next one's.
        self.0.store(false, Ordering::Release);
    }
}

/// A grace-period cookie of one [`Srcu`] domain, from
/// [`get_state`](Srcu::get_state). Meaningless for another domain.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// # use ksync::rcu::srcu::Srcu;
/// let domain = Srcu::new();
/// let cookie = domain.get_state(); // after unpublishing something
/// // ... later, without waiting:
/// if !domain.poll(cookie) {
///     domain.cond_synchronize(cookie);
/// }
/// assert!(domain.poll(cookie)); // now it may be freed
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SrcuCookie(usize);

impl Srcu {
    const_fn! {
        /// A domain with no readers. `const`, for `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::srcu::Srcu;
        ///
        /// // One domain per subsystem: its slow readers hold up only its updaters.
        /// static NOTIFIER_SRCU: Srcu = Srcu::new(); // DEFINE_STATIC_SRCU
        /// let per_device = Srcu::new(); // init_srcu_struct
        /// drop(NOTIFIER_SRCU.read_lock());
        /// per_device.synchronize();
        /// ```
        #[doc(alias("init_srcu_struct", "DEFINE_STATIC_SRCU"))]
        pub fn new() -> Self {
            Self {
                idx: AtomicUsize::new(0),
                gp_seq: AtomicUsize::new(0),
                updating: AtomicBool::new(false),
                cpus: PerCpu::new(),
            }
        }
    }

    /// Enters a read section of this domain, which lasts until the guard
    /// drops. The section may sleep, be preempted and migrate, and the
    /// guard may be dropped on another CPU or thread. Nests. Usable from
    /// interrupt handlers.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// let outer = domain.read_lock();
    /// let inner = domain.read_lock();
    /// drop(outer); // any order
    /// drop(inner);
    /// domain.synchronize();
    /// ```
    #[doc(alias("srcu_read_lock", "srcu_down_read"))]
    #[inline]
    pub fn read_lock(&self) -> SrcuGuard<'_> {
        // Relaxed: which index a reader uses is never what makes it safe —
        // both indices are waited for — A is (see the module docs).
        let idx = self.idx.load(Ordering::Relaxed) & 1;
        this_cpu_inc(|c| &c.locks[idx], &self.cpus);
        // A: pairs with D: either the updater counts this reader, or this
        // section sees everything the updater did before D.
        fence(Ordering::SeqCst);
        SrcuGuard { srcu: self, idx }
    }

    /// Waits for a grace period: every read section of this domain that
    /// began before the call has ended when it returns. Spins; see
    /// [`synchronize_with`](Self::synchronize_with).
    ///
    /// Must not be called inside a read section of the same domain (it
    /// would wait for itself), nor from an interrupt handler.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// domain.synchronize(); // no readers: returns at once
    /// ```
    #[doc(alias = "synchronize_srcu")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn synchronize(&self) {
        self.synchronize_with(spin_loop);
    }

    /// [`synchronize`](Self::synchronize), calling `wait` on each round of
    /// waiting (for the updaters' lock or for readers): pass the kernel's
    /// yield or `schedule` so that sleeping readers get to run. `wait`
    /// runs with preemption enabled (no ksync lock is held across it), as
    /// the whole wait does: the updater may be preempted or migrate.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// domain.synchronize_with(std::thread::yield_now);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn synchronize_with(&self, wait: impl FnMut()) {
        let cookie = self.get_state();
        self.cond_synchronize_with(cookie, wait);
    }

    /// A cookie for the state now: [`poll`](Self::poll) on it returns
    /// `true` once a full grace period of this domain has elapsed since
    /// this call. Starts nothing.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// let cookie = domain.get_state();
    /// assert!(!domain.poll(cookie));
    /// domain.synchronize();
    /// assert!(domain.poll(cookie));
    /// ```
    #[doc(alias = "get_state_synchronize_srcu")]
    #[inline]
    #[must_use = "a cookie is only useful passed to `poll`"]
    pub fn get_state(&self) -> SrcuCookie {
        // Orders the caller's earlier updates before the snapshot: a grace
        // period whose start this load misses has its scans' fences after
        // this one (module docs, "Polled grace periods").
        fence(Ordering::SeqCst);
        let seq = self.gp_seq.load(Ordering::Relaxed);
        // Even (idle): the next grace period ends at seq + 2. Odd (one is
        // running, maybe past its scans already): the one after it, at
        // seq + 3.
        SrcuCookie(seq.wrapping_add(3) & !1)
    }

    /// Whether a full grace period of this domain has elapsed since
    /// `cookie` was taken. When `true`, the caller may free what it
    /// unpublished before taking it, as after
    /// [`synchronize`](Self::synchronize). Never waits, and never starts a
    /// grace period: some updater must run one.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// let cookie = domain.get_state();
    /// domain.synchronize();
    /// assert!(domain.poll(cookie));
    /// ```
    #[doc(alias = "poll_state_synchronize_srcu")]
    #[inline]
    #[must_use = "only `true` means a grace period has passed"]
    pub fn poll(&self, cookie: SrcuCookie) -> bool {
        // Acquire pairs with the Release store that ends a grace period:
        // the readers' sections, ordered before the updater's last D,
        // happen-before our return.
        let done = seq_ge(self.gp_seq.load(Ordering::Acquire), cookie.0);
        if done {
            // Keeps the caller's later accesses (the free) after the load,
            // as `synchronize` would.
            fence(Ordering::SeqCst);
        }
        done
    }

    /// Waits until [`poll`](Self::poll)`(cookie)` holds, running grace
    /// periods as needed (spinning).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// let cookie = domain.get_state();
    /// domain.cond_synchronize(cookie);
    /// let seq = domain.gp_seq();
    /// domain.cond_synchronize(cookie); // already complete: no new grace period
    /// assert_eq!(domain.gp_seq(), seq);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn cond_synchronize(&self, cookie: SrcuCookie) {
        self.cond_synchronize_with(cookie, spin_loop);
    }

    /// [`cond_synchronize`](Self::cond_synchronize), calling `wait` on
    /// each round of waiting.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::srcu::Srcu;
    /// let domain = Srcu::new();
    /// domain.cond_synchronize_with(domain.get_state(), std::thread::yield_now);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn cond_synchronize_with(&self, cookie: SrcuCookie, mut wait: impl FnMut()) {
        // With lockdep: waiting for readers with a spinlock held (or in an
        // RCU read section) can wait forever, even when this call would
        // not have waited.
        crate::lockdep::assert_no_locks_held("srcu::synchronize");
        // Take the updaters' lock, unless a grace period run meanwhile by
        // the holder already covers the cookie.
        let _locked = loop {
            if self.poll(cookie) {
                return;
            }
            if let Some(locked) = self.try_lock_updating() {
                break locked;
            }
            wait();
        };
        // With the lock held no grace period is running, so one more
        // completes any cookie taken before the lock was (get_state adds at
        // most 3 to an odd value that has since ended).
        while !self.poll(cookie) {
            self.grace_period_locked(&mut wait);
        }
    }

    /// The grace-period sequence number: odd while one runs (for
    /// statistics and tests).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::srcu::Srcu;
    ///
    /// let domain = Srcu::new();
    /// let before = domain.gp_seq();
    /// domain.synchronize();
    /// let after = domain.gp_seq();
    /// assert!(after != before && after % 2 == 0); // one ran, and none runs now
    /// ```
    pub fn gp_seq(&self) -> usize {
        self.gp_seq.load(Ordering::Relaxed)
    }

    /// Takes the updaters' lock if it is free (preemption stays enabled).
    fn try_lock_updating(&self) -> Option<Updating<'_>> {
        // Acquire pairs with the Release in `Updating::drop`.
        // Built only on success: an `Updating` built on failure would
        // release the holder's lock when it drops.
        match self
            .updating
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Some(Updating(&self.updating)),
            Err(_) => None,
        }
    }

    /// One grace period; the updaters' lock is held.
    fn grace_period_locked(&self, wait: &mut impl FnMut()) {
        // Read-modify-writes, not load-then-store, although only the lock
        // holder writes these: one each per grace period, and under loom a
        // single access per update keeps the readers' accesses visible to
        // its DPOR (it tracks the last access per object only).
        //
        // Relaxed: ordered before the scans by their fences.
        let seq = self.gp_seq.fetch_add(1, Ordering::Relaxed);
        debug_assert!(seq & 1 == 0, "srcu: grace period already running");

        let idx = self.idx.load(Ordering::Relaxed);
        // Stragglers of the previous flip, on the index new readers do not
        // use ("Why twice" in the module docs).
        self.wait_for_readers((idx & 1) ^ 1, wait);
        // The flip: new readers use the other index. Relaxed: the scan
        // just done ended with D (readers reading the new index see what
        // came before it, A pairs with that D), and the next scan starts
        // with C (progress).
        self.idx.fetch_add(1, Ordering::Relaxed);
        self.wait_for_readers(idx & 1, wait);

        // Release: the readers' sections, ordered before the last D,
        // happen-before a `poll` that sees the new value (Acquire).
        self.gp_seq.fetch_add(1, Ordering::Release);
    }

    /// Scans index `idx` until no reader that the scan can see is inside.
    fn wait_for_readers(&self, idx: usize, wait: &mut impl FnMut()) {
        while !self.readers_gone(idx) {
            wait();
        }
    }

    /// One scan of index `idx`: whether every reader that the sums can see
    /// has left (see the module docs for the barriers).
    fn readers_gone(&self, idx: usize) -> bool {
        // C: pairs with the readers' A and B (progress): a reader whose
        // unlock this scan misses reads the flipped index from its next
        // fence on.
        fence(Ordering::SeqCst);
        // Unlocks first: every unlock counted has its lock counted below.
        let unlocks = self.sum(|c| &c.unlocks[idx]);
        // D: pairs with A (a reader is counted, or sees our updates) and
        // with B (a counted unlock's read section happens-before us).
        fence(Ordering::SeqCst);
        let locks = self.sum(|c| &c.locks[idx]);
        locks == unlocks
    }

    /// The sum over all CPUs of one counter, modulo 2³².
    #[inline]
    fn sum(&self, counter: impl Fn(&Counts) -> &AtomicI32) -> u32 {
        self.cpus.iter().fold(0u32, |sum, counts| {
            // Relaxed: ordered by C and D (module docs).
            sum.wrapping_add(counter(counts).load(Ordering::Relaxed) as u32)
        })
    }
}

/// Adds one to this CPU's `counter` in `cpus`: a local add (no
/// `lock`-prefixed instruction where the architecture has one; atomic with
/// respect to interrupts on this CPU), with preemption disabled so that it
/// lands on the CPU it was read for. Under loom it is the portable local
/// add, one relaxed `fetch_add`, so loom sees every interleaving.
#[inline]
fn this_cpu_inc(counter: impl Fn(&Counts) -> &AtomicI32, cpus: &PerCpu<Counts>) {
    let counts = cpus.get();
    crate::arch::local_add(counter(&counts), 1);
}

impl Default for Srcu {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Srcu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srcu")
            .field("idx", &(self.idx.load(Ordering::Relaxed) & 1))
            .field("gp_seq", &self.gp_seq())
            .finish_non_exhaustive()
    }
}

/// A read section of an [`Srcu`] domain; it ends when the guard drops.
///
/// `Send` and `Sync`: it may be dropped on another CPU or thread (see
/// the [module docs](self#guards-may-move)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::srcu::Srcu;
///
/// static DOMAIN: Srcu = Srcu::new();
///
/// let (tx, rx) = std::sync::mpsc::channel();
/// tx.send(DOMAIN.read_lock()).unwrap(); // hand the section to another thread
/// std::thread::spawn(move || drop(rx.recv().unwrap())).join().unwrap();
/// DOMAIN.synchronize();
/// ```
#[must_use = "the read section ends when the guard drops"]
pub struct SrcuGuard<'a> {
    srcu: &'a Srcu,
    /// The index this section's lock counted on (0 or 1); the unlock
    /// counts on the same one.
    idx: usize,
}

impl SrcuGuard<'_> {
    /// The counter index this section uses (0 or 1), for debugging.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::srcu::Srcu;
    ///
    /// let domain = Srcu::new();
    /// let reader = domain.read_lock();
    /// assert!(reader.index() < 2); // which of the two counter pairs it counts on
    /// ```
    #[must_use]
    pub fn index(&self) -> usize {
        self.idx
    }
}

impl Drop for SrcuGuard<'_> {
    #[doc(alias("srcu_read_unlock", "srcu_up_read"))]
    #[inline]
    fn drop(&mut self) {
        // B: pairs with D: an updater whose unlock sum sees the increment
        // below sees this whole section as finished.
        fence(Ordering::SeqCst);
        let idx = self.idx;
        this_cpu_inc(|c| &c.unlocks[idx], &self.srcu.cpus);
    }
}

impl fmt::Debug for SrcuGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrcuGuard").field("idx", &self.idx).finish()
    }
}
