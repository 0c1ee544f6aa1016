//! The reader-writer spinlock: Linux's queued rwlock (`qrwlock`), with the
//! guard policies of [`SpinLock`](super::SpinLock) (its items are
//! re-exported by `spinlock`).
//!
//! The algorithm, and how lockdep sees it: [`RawRwSpinLock`](super::RawRwSpinLock#algorithm).

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

#[cfg(doc)]
use super::guardian::NoGuard;
use super::guardian::{IrqDisabled, PreemptDisabled, SpinGuardian};
use super::ticket::TicketLock;
use crate::kernel::{Waiter, kick_waiters, vcpu_preemptible};
use crate::lockdep::{LockClassKey, Map};
use crate::sync::{AtomicU32, Ordering, const_fn};

/// A writer holds the lock.
const QW_LOCKED: u32 = 0xff;
/// A writer waits for the readers to drain.
const QW_WAITING: u32 = 0x100;
/// Either writer bit.
const QW_WMASK: u32 = QW_LOCKED | QW_WAITING;
/// One reader.
pub const QR_BIAS: u32 = 1 << 9;
/// How many times a writer that finds the lock taken, with no writer
/// waiting and nobody queued, retries before it queues and announces
/// itself (one relax between tries; 2 under loom, where each relax is a
/// scheduling point).
const WRITE_SPIN_TRIES: u32 = if cfg!(ksync_loom) { 2 } else { 64 };
/// Debug builds: the owner record's mark of an upgradeable holder (a CPU
/// id + 1 never reaches it).
#[cfg(debug_assertions)]
const UPGRADEABLE_TAG: u32 = 1 << 31;

/// The raw queued reader-writer spinlock (Linux's `rwlock_t` on
/// `qrwlock`): see [Algorithm](#algorithm) below. `G` is what
/// it disables while held ([`SpinGuardian`]); through `lock_api` (policies
/// that save nothing: [`PreemptDisabled`], [`NoGuard`]) or
/// [`RwSpinLock`], whose guards carry what any policy saves.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lock_api::RawRwLock as _;
/// use ksync::spinlock::RawRwSpinLock;
///
/// let lock = RawRwSpinLock::<ksync::spinlock::PreemptDisabled>::new();
/// lock.lock_shared();
/// assert!(!lock.try_lock_exclusive());
/// // SAFETY: held shared, just above.
/// unsafe { lock.unlock_shared() };
/// assert!(lock.try_lock_exclusive());
/// // SAFETY: held exclusive.
/// unsafe { lock.unlock_exclusive() };
/// ```
///
/// # Algorithm
///
/// One 32-bit word, as Linux's `qrwlock.cnts`, and a ticket lock
/// (`wait_lock`) that queues everyone who cannot take the word at once:
///
/// | bits | name | meaning |
/// |---|---|---|
/// | 0..8 | `QW_LOCKED` (`0xff`) | a writer holds the lock |
/// | 8 | `QW_WAITING` | a writer (the head of the queue) waits for the readers to drain |
/// | 9..32 | readers | one [`QR_BIAS`] per reader that holds the lock, or tries to |
///
/// * **Read.** Add `QR_BIAS` (Acquire); if no writer bit is set, done.
///   If a writer waits (`QW_WAITING` was set when the bias went in), take
///   the bias back, queue on `wait_lock`, add it again and wait for the
///   writer to leave, then pass `wait_lock` on. If a writer only holds
///   the lock, keep the bias and wait for it to leave: the reader comes
///   before any writer that announces itself later (ksync's change to
///   Linux, which queues it too; with nobody else queued, the queue admits
///   it at the same moment, after four more writes to the lock's line:
///   the bias back, the queue taken, the bias again, the queue passed on).
///   Readers in interrupt context ([`Kernel::in_interrupt`](crate::kernel::Kernel::in_interrupt))
///   keep their bias in both cases and wait only while a writer *holds*
///   the lock, never behind a waiting one: a handler that read-locks on a
///   CPU whose task waits to write (in the queue, or as `QW_WAITING`)
///   would otherwise wait for itself (Linux's `queued_read_lock_slowpath`).
/// * **Write.** Compare-exchange `0 -> QW_LOCKED` (Acquire). Otherwise,
///   while no writer waits and nobody is queued, retry it a bounded number
///   of times (64, one relax hint between tries; ksync's addition: a short
///   hold, a reader's or another writer's, then costs no hand-off through
///   the queue, in which the readers coming next would queue too). Then
///   queue on `wait_lock`; at its head, try `0 -> QW_LOCKED` once more
///   (the readers may have left meanwhile), then set `QW_WAITING` (new
///   readers now queue behind it: writers are not starved, the bounded
///   retries only delay the announcement), wait for the readers to drain,
///   and turn `QW_WAITING` into `QW_LOCKED`.
/// * **Upgradeable read** (as `spin::RwLock`'s and `lock_api`'s): a
///   reader that also holds `wait_lock`, so no writer and no other
///   upgradeable reader gets past it, while plain readers still come and
///   go. `upgrade` turns its bias into `QW_WAITING` and waits for the
///   other readers as a queued writer does. (A reader that had to queue,
///   because a writer waited as it arrived, waits in the queue
///   behind the upgradeable holder: hold upgradeable reads briefly.)
///
/// At most 2^23 - 1 contexts hold or try the lock shared at once (the
/// reader count's bits), far above the 4 contexts of each of
/// [`MAX_CPUS_LIMIT`](crate::kernel::MAX_CPUS_LIMIT) CPUs.
///
/// Waiting spins with ksync's wait strategy (the relax hint, and, when
/// CPUs may be descheduled, the kernel's [`SpinWait`](crate::kernel::SpinWait)
/// policy every [`SPIN_LIMIT`](crate::kernel::SPIN_LIMIT) rounds); the
/// queue is a [`TicketLock`], which hands over by test-and-set with
/// backoff when CPUs are oversubscribed. Every store that can let a
/// waiter in is followed by the kick of halted waiters.
///
/// # Lock-order checking
///
/// With `lockdep`, a write is recorded as a spinlock's acquisition, and a
/// read too outside interrupt context: with a fair lock, a reader queued
/// behind a waiting writer waits for the readers ahead, so reads take part
/// in order cycles (two CPUs reading A then B and B then A deadlock once
/// writers wait on both) and a second read of a lock a CPU already reads
/// is reported. In interrupt context a read is recorded as a recursive
/// read: it never waits for a waiting writer, so it adds no order (Linux:
/// rwlock reads are recursive in interrupt context).
///
/// Interrupt usage is tracked for reads and writes apart, as Linux's
/// `LOCK_USED_IN_HARDIRQ_READ` and `LOCK_ENABLED_HARDIRQ_READ`: a read in
/// a handler waits while a writer holds the lock, so it is reported
/// against a write with interrupts enabled (CPU 0 write-holds the lock
/// with interrupts on; an interrupt on CPU 0 read-locks it: deadlock),
/// and a write in a handler against any use with interrupts enabled; a
/// read in a handler and a read with interrupts enabled are fine. Across
/// classes, a read in a handler makes the class IRQ-safe only along the
/// orders taken holding it for writing (Linux's `only_xr`): a CPU that
/// holds it for reading while it waits for another lock lets the
/// handler's read in.
///
/// # Zeroed memory
///
/// All-zero bytes are an unlocked lock (with `lockdep`, one of its own
/// class), and an [`RwSpinLock<T>`](RwSpinLock) around a zeroed `T` when
/// that is a valid `T` (`bytemuck::Zeroable` with the `bytemuck`
/// feature).
#[doc(alias("rwlock_t", "qrwlock"))]
pub struct RawRwSpinLock<G: SpinGuardian = PreemptDisabled> {
    cnts: AtomicU32,
    wait_lock: TicketLock,
    dep_map: Map,
    /// With `lockdep`: the CPU (+ 1) that holds the lock upgradeable, 0
    /// if none; a read by that CPU cannot wait (no writer gets past the
    /// upgradeable holder), so lockdep records it as a try-lock.
    #[cfg(feature = "lockdep")]
    upgrader: AtomicU32,
    /// Debug builds: the CPU + 1 that holds the lock for writing, or, with
    /// [`UPGRADEABLE_TAG`], upgradeable; 0 when neither (only for policies
    /// that record it, [`SpinGuardian::RECORDS_OWNER`]): a CPU that would
    /// wait for its own hold panics instead.
    #[cfg(debug_assertions)]
    owner: core::sync::atomic::AtomicU32,
    guardian: PhantomData<fn() -> G>,
}

impl<G: SpinGuardian> RawRwSpinLock<G> {
    const_fn! {
        /// An unlocked lock, in the lockdep class of the place it is built.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
        /// assert!(!lock.is_locked());
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        #[must_use]
        pub fn new() -> Self {
            Self {
                cnts: AtomicU32::new(0),
                wait_lock: TicketLock::new(),
                dep_map: Map::new(),
                #[cfg(feature = "lockdep")]
                upgrader: AtomicU32::new(0),
                #[cfg(debug_assertions)]
                owner: core::sync::atomic::AtomicU32::new(0),
                guardian: PhantomData,
            }
        }
    }

    const_fn! {
        /// An unlocked lock in `key`'s [lockdep](crate::lockdep) class.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::{RawRwSpinLock, RwSpinLock};
        /// static ROUTES: RwSpinLock<u32> =
        ///     RwSpinLock::from_raw(RawRwSpinLock::with_class(ksync::lock_class!("routes")), 0);
        /// assert_eq!(*ROUTES.read(), 0);
        /// ```
        #[must_use]
        pub fn with_class(key: &'static LockClassKey) -> Self {
            Self {
                cnts: AtomicU32::new(0),
                wait_lock: TicketLock::new(),
                dep_map: Map::with_key(key),
                #[cfg(feature = "lockdep")]
                upgrader: AtomicU32::new(0),
                #[cfg(debug_assertions)]
                owner: core::sync::atomic::AtomicU32::new(0),
                guardian: PhantomData,
            }
        }
    }

    /// Puts the lock in `key`'s [lockdep](crate::lockdep) class (Linux's
    /// `lockdep_set_class`). Nothing without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let mut lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// lock.set_lock_class(ksync::lock_class!("files"));
    /// ```
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }

    /// Whether anyone holds the lock (a snapshot, not for synchronization).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// assert!(!lock.is_locked());
    /// ```
    #[inline]
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.cnts.load(Ordering::Relaxed) & !QW_WAITING != 0 || self.wait_lock.is_locked()
    }

    /// Whether a writer holds the lock (a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// assert!(!lock.is_write_locked());
    /// ```
    #[inline]
    #[must_use]
    pub fn is_write_locked(&self) -> bool {
        self.cnts.load(Ordering::Relaxed) & QW_LOCKED != 0
    }

    /// How many readers hold the lock, or are about to (a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// assert_eq!(lock.reader_count(), 0);
    /// ```
    #[inline]
    #[must_use]
    pub fn reader_count(&self) -> u32 {
        self.cnts.load(Ordering::Relaxed) >> 9
    }

    // ---- the algorithm (nothing disabled, nothing recorded) -------------

    #[inline]
    fn read_acquire(&self) {
        // Acquire pairs with the Release of the writer's unlock (and
        // downgrade): its critical section happens-before ours.
        let cnts = self.cnts.fetch_add(QR_BIAS, Ordering::Acquire);
        if cnts & QW_WMASK != 0 {
            self.read_slow(cnts);
        }
    }

    #[cold]
    #[inline(never)]
    #[cfg_attr(debug_assertions, track_caller)]
    fn read_slow(&self, cnts: u32) {
        // (An upgradeable holder's reads never come here: no writer bit
        // can be set while it holds the queue and a reader's bias.)
        self.check_not_mine(false);
        // `cnts` is the word our bias went into. Without `QW_WAITING` in
        // it, a writer holds the lock and none waited when we arrived: we
        // come before any writer that announces itself later, so keep the
        // bias and wait for the holder to leave (with nobody else queued,
        // the queue would admit us at the same moment, after four more
        // writes to the lock's line). In interrupt context, keep it in any
        // case: wait only while a writer holds the lock (a waiting writer
        // waits for us). Acquire: as in `read_acquire`.
        if cnts & QW_WAITING == 0 || crate::kernel::in_interrupt() {
            self.wait_while(|c| c & QW_LOCKED != 0);
            return;
        }
        // Give the bias back and queue behind whoever waits.
        self.cnts.fetch_sub(QR_BIAS, Ordering::Relaxed);
        // A waiting writer may have been waiting for our bias to go.
        kick_waiters();
        self.queue_for_read();
        // SAFETY: taken by `queue_for_read`, in this context.
        unsafe { self.wait_lock.unlock() };
    }

    /// Queues on `wait_lock`, then takes a reader's bias and waits for a
    /// writer that holds the lock (one that passed the queue before us)
    /// to leave. Returns holding `wait_lock`: the queued reader passes it
    /// on, the upgradeable one keeps it.
    fn queue_for_read(&self) {
        self.wait_lock.lock();
        self.cnts.fetch_add(QR_BIAS, Ordering::Relaxed);
        // Acquire pairs with the writer's Release unlock.
        self.wait_while(|c| c & QW_LOCKED != 0);
    }

    #[inline]
    fn try_read_acquire(&self) -> bool {
        let mut cnts = self.cnts.load(Ordering::Relaxed);
        loop {
            if cnts & QW_WMASK != 0 {
                return false;
            }
            // Acquire: as in `read_acquire`.
            match self.cnts.compare_exchange_weak(
                cnts,
                cnts + QR_BIAS,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => cnts = seen,
            }
        }
    }

    #[inline]
    fn read_release(&self) {
        // Release pairs with the Acquire of the writer that waits for the
        // readers to drain: our reads happen-before its writes.
        self.cnts.fetch_sub(QR_BIAS, Ordering::Release);
        kick_waiters();
    }

    #[inline]
    fn write_acquire(&self) {
        // Acquire pairs with the Release of the last unlock.
        if self
            .cnts
            .compare_exchange(0, QW_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.write_slow();
        }
    }

    #[cold]
    #[inline(never)]
    #[cfg_attr(debug_assertions, track_caller)]
    fn write_slow(&self) {
        self.check_not_mine(true);
        if self.write_spin() {
            return;
        }
        self.wait_lock.lock();
        // At the head of the queue: take the lock at once if the readers
        // left meanwhile (Linux's `queued_write_lock_slowpath` does), so
        // that the readers coming next are not sent through the queue.
        // SAFETY: `wait_lock` taken just above.
        if unsafe { self.take_queued(0, Some(0)) } {
            return;
        }
        // Announce ourselves: new readers queue behind us from now on.
        // Relaxed: the Acquire compare-exchange in `take_queued` orders
        // what matters.
        self.cnts.fetch_or(QW_WAITING, Ordering::Relaxed);
        // SAFETY: `QW_WAITING` set just above, `wait_lock` taken.
        unsafe { self.take_queued(QW_WAITING, None) };
    }

    /// The optimistic part of a contended write: while no writer waits
    /// and nobody is queued, retry `0 -> QW_LOCKED` up to
    /// [`WRITE_SPIN_TRIES`] times, without announcing ourselves, so that
    /// a short hold (a reader's, or another writer's) costs no hand-off
    /// through the queue. Bounded: then the caller queues and sets
    /// `QW_WAITING`, which holds new readers back (writers are not
    /// starved). Returns whether it took the lock.
    #[inline]
    fn write_spin(&self) -> bool {
        let mut tries = WRITE_SPIN_TRIES;
        loop {
            let cnts = self.cnts.load(Ordering::Relaxed);
            // A writer that announced itself, or anyone queued (a queued
            // reader or writer, an upgradeable holder): take our place
            // behind them.
            if cnts & QW_WAITING != 0 || self.wait_lock.is_locked() {
                return false;
            }
            // Acquire: as in `write_acquire`.
            if cnts == 0
                && self
                    .cnts
                    .compare_exchange(0, QW_LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
            tries -= 1;
            if tries == 0 {
                return false;
            }
            crate::sync::relax::<spin::relax::Spin>();
        }
    }

    /// The head of the queue takes the lock for writing once the word
    /// reads `from` (`0`: free; `QW_WAITING`: our announcement alone, the
    /// readers drained), then leaves the queue; gives up (still queued)
    /// after `rounds` rounds if given. Returns whether it took the lock.
    ///
    /// # Safety
    /// This context holds `wait_lock`, and set `QW_WAITING` if `from` is
    /// that.
    unsafe fn take_queued(&self, from: u32, rounds: Option<u32>) -> bool {
        let mut waiter = Waiter::new();
        let preemptible = vcpu_preemptible();
        let mut left = rounds;
        loop {
            // Acquire pairs with the readers' Release unlocks.
            if self.cnts.load(Ordering::Relaxed) == from
                && self
                    .cnts
                    .compare_exchange(from, QW_LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // SAFETY: held (caller contract).
                unsafe { self.wait_lock.unlock() };
                return true;
            }
            match left {
                Some(0) => return false,
                Some(n) => left = Some(n - 1),
                None => {}
            }
            waiter.wait::<spin::relax::Spin>(preemptible);
        }
    }

    #[inline]
    fn try_write_acquire(&self) -> bool {
        // Acquire: as in `write_acquire`.
        self.cnts
            .compare_exchange(0, QW_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    fn write_release(&self) {
        // Release pairs with the Acquire of the next reader or writer.
        self.cnts.fetch_sub(QW_LOCKED, Ordering::Release);
        kick_waiters();
    }

    #[cfg_attr(debug_assertions, track_caller)]
    fn upgradeable_acquire(&self) {
        self.check_not_mine(true);
        self.queue_for_read();
    }

    fn try_upgradeable_acquire(&self) -> bool {
        if !self.wait_lock.try_lock() {
            return false;
        }
        if self.try_read_acquire() {
            return true;
        }
        // SAFETY: taken just above.
        unsafe { self.wait_lock.unlock() };
        false
    }

    /// # Safety
    /// The caller holds the lock upgradeable.
    unsafe fn upgradeable_release(&self) {
        self.read_release();
        // SAFETY: an upgradeable reader holds `wait_lock` (caller contract).
        unsafe { self.wait_lock.unlock() };
    }

    /// # Safety
    /// The caller holds the lock upgradeable.
    unsafe fn upgrade_inner(&self) {
        self.mark_upgrader(false);
        // Our bias becomes the waiting-writer bit in one step, so no
        // reader count ever shows us as both.
        self.cnts
            .fetch_add(QW_WAITING.wrapping_sub(QR_BIAS), Ordering::Relaxed);
        // SAFETY: `QW_WAITING` set just above; `wait_lock` held since the
        // upgradeable acquire (caller contract).
        unsafe { self.take_queued(QW_WAITING, None) };
    }

    /// # Safety
    /// The caller holds the lock upgradeable.
    unsafe fn try_upgrade_inner(&self) -> bool {
        // Acquire pairs with the other readers' Release unlocks.
        if self
            .cnts
            .compare_exchange(QR_BIAS, QW_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.mark_upgrader(false);
        // SAFETY: held since the upgradeable acquire (caller contract).
        unsafe { self.wait_lock.unlock() };
        true
    }

    /// # Safety
    /// The caller holds the lock upgradeable.
    unsafe fn downgrade_upgradeable_inner(&self) {
        self.mark_upgrader(false);
        // SAFETY: held since the upgradeable acquire (caller contract);
        // the bias stays: a plain reader now.
        unsafe { self.wait_lock.unlock() };
    }

    fn downgrade_inner(&self) {
        // Release: our writes happen-before the readers we let in (and a
        // later writer's Acquire, through the readers' own releases).
        self.cnts
            .fetch_add(QR_BIAS.wrapping_sub(QW_LOCKED), Ordering::Release);
        kick_waiters();
    }

    /// Waits while `blocked(word)`; the load that ends it is Acquire.
    #[inline]
    fn wait_while(&self, blocked: impl Fn(u32) -> bool) {
        let mut waiter = Waiter::new();
        let preemptible = vcpu_preemptible();
        while blocked(self.cnts.load(Ordering::Acquire)) {
            waiter.wait::<spin::relax::Spin>(preemptible);
        }
    }

    // ---- debug builds: the owner's CPU ------------------------------------

    /// Debug builds (policies that record an owner): panics if this CPU
    /// holds the lock for writing, or, with `upgradeable`, upgradeable
    /// (the writer and the upgradeable paths wait for `wait_lock`, which
    /// the upgradeable holder keeps, and for its reader's bias), since
    /// waiting here would wait for itself. Called only on the paths that
    /// wait; one load of a word the lock's own line holds.
    #[inline]
    #[cfg_attr(debug_assertions, track_caller)]
    fn check_not_mine(&self, upgradeable: bool) {
        let _ = upgradeable;
        #[cfg(debug_assertions)]
        if G::RECORDS_OWNER {
            let me = crate::kernel::cpu_id() as u32 + 1;
            // Relaxed: only this CPU stores its own tag; another CPU's
            // tag, stale or not, is never ours.
            let tag = self.owner.load(core::sync::atomic::Ordering::Relaxed);
            if tag == me {
                rw_recursion(me - 1, "for writing");
            }
            if upgradeable && tag == me | UPGRADEABLE_TAG {
                rw_recursion(me - 1, "upgradeable");
            }
        }
    }

    /// Debug builds: records (`true`) or forgets this CPU as the writer.
    #[inline(always)]
    fn set_writer(&self, holds: bool) {
        self.set_owner(holds, 0);
    }

    /// Debug builds: records this CPU as the owner (`holds`), marked with
    /// `tag`, or forgets the owner.
    #[inline(always)]
    fn set_owner(&self, holds: bool, tag: u32) {
        let _ = (holds, tag);
        #[cfg(debug_assertions)]
        if G::RECORDS_OWNER {
            let tag = if holds {
                (crate::kernel::cpu_id() as u32 + 1) | tag
            } else {
                0
            };
            // Relaxed: see `check_not_mine`.
            self.owner.store(tag, core::sync::atomic::Ordering::Relaxed);
        }
    }

    // ---- lockdep ----------------------------------------------------------

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn dep_read(&self, try_lock: bool) {
        // In interrupt context a read never waits for a waiting writer:
        // a recursive read, it adds no lock order (but it waits while a
        // writer holds the lock: interrupt usage). Nor does a read by the
        // CPU that holds the lock upgradeable.
        #[cfg(feature = "lockdep")]
        let recursive = crate::kernel::in_interrupt()
            // Relaxed: only this CPU stores its own id here.
            || self.upgrader.load(Ordering::Relaxed) == crate::kernel::cpu_id() as u32 + 1;
        #[cfg(not(feature = "lockdep"))]
        let recursive = false;
        self.dep_map.acquire_read(0, try_lock, recursive);
    }

    /// Records (`true`) or forgets this CPU as the upgradeable holder:
    /// for lockdep (its reads), and in debug builds for the owner checks.
    #[inline(always)]
    fn mark_upgrader(&self, holds: bool) {
        let _ = holds;
        #[cfg(debug_assertions)]
        self.set_owner(holds, UPGRADEABLE_TAG);
        #[cfg(feature = "lockdep")]
        self.upgrader.store(
            if holds {
                crate::kernel::cpu_id() as u32 + 1
            } else {
                0
            },
            Ordering::Relaxed,
        );
    }

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn dep_write(&self, try_lock: bool) {
        self.dep_map.acquire(0, try_lock, false);
    }

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn dep_release(&self) {
        self.dep_map.release();
    }

    // ---- with the policy ------------------------------------------------

    /// Disables what `G` disables and tries `acquire`; on failure restores
    /// it. What every `try_*_lock` shares (each records itself after).
    #[inline(always)]
    fn try_enter(&self, acquire: fn(&Self) -> bool) -> Option<G::Saved> {
        let saved = G::enter();
        if acquire(self) {
            Some(saved)
        } else {
            // SAFETY: the matching `enter`, just above.
            unsafe { G::exit(saved) };
            None
        }
    }

    /// Takes the lock shared: disables what `G` disables, then waits
    /// while a writer holds it or (outside interrupt context) one waits.
    /// Returns what `G` saved, for [`read_unlock`](Self::read_unlock).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.read_lock();
    /// // SAFETY: held shared, with what it saved.
    /// unsafe { lock.read_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read_lock(&self) -> G::Saved {
        let saved = G::enter();
        self.dep_read(false);
        self.read_acquire();
        saved
    }

    /// Takes the lock shared if no writer holds it or waits.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.try_read_lock().unwrap();
    /// // SAFETY: held shared.
    /// unsafe { lock.read_unlock(saved) };
    /// ```
    #[doc(alias = "read_trylock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_read_lock(&self) -> Option<G::Saved> {
        let saved = self.try_enter(Self::try_read_acquire)?;
        self.dep_read(true);
        Some(saved)
    }

    /// Releases a shared hold.
    ///
    /// # Safety
    /// The caller's context holds the lock shared, and `saved` is what its
    /// `read_lock` returned (on this CPU, in nesting order).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.read_lock();
    /// // SAFETY: held shared.
    /// unsafe { lock.read_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn read_unlock(&self, saved: G::Saved) {
        self.dep_release();
        self.read_release();
        // SAFETY: caller contract.
        unsafe { G::exit(saved) };
    }

    /// Takes the lock exclusive: disables what `G` disables, then queues
    /// and waits for the readers to drain.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.write_lock();
    /// assert!(lock.is_write_locked());
    /// // SAFETY: held exclusive.
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write_lock(&self) -> G::Saved {
        let saved = G::enter();
        self.dep_write(false);
        self.write_acquire();
        self.set_writer(true);
        saved
    }

    /// Takes the lock exclusive if it is free.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.try_write_lock().unwrap();
    /// // SAFETY: held exclusive.
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[doc(alias = "write_trylock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write_lock(&self) -> Option<G::Saved> {
        let saved = self.try_enter(Self::try_write_acquire)?;
        self.dep_write(true);
        self.set_writer(true);
        Some(saved)
    }

    /// Releases an exclusive hold.
    ///
    /// # Safety
    /// The caller's context holds the lock exclusive, and `saved` is what
    /// its `write_lock` returned.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.write_lock();
    /// // SAFETY: held exclusive.
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn write_unlock(&self, saved: G::Saved) {
        self.set_writer(false);
        self.dep_release();
        self.write_release();
        // SAFETY: caller contract.
        unsafe { G::exit(saved) };
    }

    /// Takes the lock upgradeable: shared with readers, exclusive with
    /// writers and other upgradeable readers.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.upgradeable_lock();
    /// assert!(lock.try_read_lock().is_some_and(|s| {
    ///     // SAFETY: held shared.
    ///     unsafe { lock.read_unlock(s) };
    ///     true
    /// }));
    /// // SAFETY: held upgradeable.
    /// let saved = unsafe { lock.upgrade(saved) };
    /// // SAFETY: held exclusive.
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn upgradeable_lock(&self) -> G::Saved {
        let saved = G::enter();
        self.dep_write(false);
        self.upgradeable_acquire();
        self.mark_upgrader(true);
        saved
    }

    /// Takes the lock upgradeable if that needs no waiting.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.try_upgradeable_lock().unwrap();
    /// // SAFETY: held upgradeable.
    /// unsafe { lock.upgradeable_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_upgradeable_lock(&self) -> Option<G::Saved> {
        let saved = self.try_enter(Self::try_upgradeable_acquire)?;
        self.dep_write(true);
        self.mark_upgrader(true);
        Some(saved)
    }

    /// Releases an upgradeable hold.
    ///
    /// # Safety
    /// The caller's context holds the lock upgradeable, with `saved`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.upgradeable_lock();
    /// // SAFETY: held upgradeable.
    /// unsafe { lock.upgradeable_unlock(saved) };
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn upgradeable_unlock(&self, saved: G::Saved) {
        self.mark_upgrader(false);
        self.dep_release();
        // SAFETY: caller contract.
        unsafe { self.upgradeable_release() };
        // SAFETY: caller contract.
        unsafe { G::exit(saved) };
    }

    /// Turns an upgradeable hold into an exclusive one, waiting for the
    /// other readers to leave (new ones queue behind it).
    ///
    /// # Safety
    /// The caller's context holds the lock upgradeable; `saved` becomes the
    /// exclusive hold's.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.upgradeable_lock();
    /// // SAFETY: held upgradeable.
    /// let saved = unsafe { lock.upgrade(saved) };
    /// // SAFETY: held exclusive.
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[inline]
    pub unsafe fn upgrade(&self, saved: G::Saved) -> G::Saved {
        // SAFETY: caller contract.
        unsafe { self.upgrade_inner() };
        self.set_writer(true);
        saved
    }

    /// Turns an upgradeable hold into an exclusive one if no other reader
    /// holds the lock.
    ///
    /// # Safety
    /// The caller's context holds the lock upgradeable (still, when this
    /// returns `false`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.upgradeable_lock();
    /// // SAFETY: held upgradeable; on success exclusive.
    /// assert!(unsafe { lock.try_upgrade() });
    /// unsafe { lock.write_unlock(saved) };
    /// ```
    #[inline]
    #[must_use]
    pub unsafe fn try_upgrade(&self) -> bool {
        // SAFETY: caller contract.
        let upgraded = unsafe { self.try_upgrade_inner() };
        if upgraded {
            self.set_writer(true);
        }
        upgraded
    }

    /// Turns an exclusive hold into a shared one, letting waiting readers
    /// in (Linux's `downgrade_write` on an rwsem).
    ///
    /// # Safety
    /// The caller's context holds the lock exclusive; its saved state
    /// stays the shared hold's.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.write_lock();
    /// // SAFETY: held exclusive, then shared.
    /// unsafe { lock.downgrade() };
    /// unsafe { lock.read_unlock(saved) };
    /// ```
    #[inline]
    pub unsafe fn downgrade(&self) {
        self.set_writer(false);
        self.downgrade_inner();
    }

    /// Turns an upgradeable hold into a plain shared one.
    ///
    /// # Safety
    /// The caller's context holds the lock upgradeable.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::spinlock::RawRwSpinLock::<ksync::spinlock::NoGuard>::new();
    /// let saved = lock.upgradeable_lock();
    /// // SAFETY: held upgradeable, then shared.
    /// unsafe { lock.downgrade_upgradeable() };
    /// unsafe { lock.read_unlock(saved) };
    /// ```
    #[inline]
    pub unsafe fn downgrade_upgradeable(&self) {
        // SAFETY: caller contract.
        unsafe { self.downgrade_upgradeable_inner() };
    }
}

impl<G: SpinGuardian> Default for RawRwSpinLock<G> {
    fn default() -> Self {
        Self::new()
    }
}

impl<G: SpinGuardian> fmt::Debug for RawRwSpinLock<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cnts = self.cnts.load(Ordering::Relaxed);
        f.debug_struct("RawRwSpinLock")
            .field("readers", &(cnts >> 9))
            .field("write_locked", &(cnts & QW_LOCKED != 0))
            .field("writer_waiting", &(cnts & QW_WAITING != 0))
            .finish()
    }
}

#[cfg(not(ksync_loom))] // lock_api's `INIT` is a constant; loom's atomics cannot be one
// SAFETY: shared holders exclude exclusive ones and exclusive holders
// exclude everyone (the word's writer bits and reader count, see the
// module docs); taking has Acquire and releasing Release ordering. The
// policy saves nothing (`Saved = ()`), so no state is lost between lock
// and unlock; its guard marker says whether the guard may move.
unsafe impl<G: SpinGuardian<Saved = ()>> lock_api::RawRwLock for RawRwSpinLock<G> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = G::GuardMarker;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) {
        self.read_lock();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> bool {
        self.try_read_lock().is_some()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self) {
        // SAFETY: forwarded caller contract; the policy saved nothing.
        unsafe { self.read_unlock(()) }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) {
        self.write_lock();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> bool {
        self.try_write_lock().is_some()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { self.write_unlock(()) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawRwSpinLock::is_locked(self)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.is_write_locked()
    }
}

#[cfg(not(ksync_loom))]
// SAFETY: an upgradeable holder holds `wait_lock` and a reader's bias, so
// it excludes writers and other upgradeable holders and shares with
// readers; `upgrade` waits as a queued writer does.
unsafe impl<G: SpinGuardian<Saved = ()>> lock_api::RawRwLockUpgrade for RawRwSpinLock<G> {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_upgradable(&self) {
        self.upgradeable_lock();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_upgradable(&self) -> bool {
        self.try_upgradeable_lock().is_some()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_upgradable(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { self.upgradeable_unlock(()) }
    }

    #[inline]
    unsafe fn upgrade(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawRwSpinLock::upgrade(self, ()) }
    }

    #[inline]
    unsafe fn try_upgrade(&self) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { RawRwSpinLock::try_upgrade(self) }
    }
}

#[cfg(not(ksync_loom))]
// SAFETY: the writer's bit becomes a reader's bias in one Release RMW.
unsafe impl<G: SpinGuardian<Saved = ()>> lock_api::RawRwLockDowngrade for RawRwSpinLock<G> {
    #[inline]
    unsafe fn downgrade(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawRwSpinLock::downgrade(self) }
    }
}

/// A reader-writer spinlock around a `T` (Linux's `rwlock_t`, `spin::RwLock`):
/// [Linux's queued rwlock](RawRwSpinLock#algorithm), fair between readers and writers (a
/// waiting writer holds new readers back), readers in interrupt context
/// admitted whenever no writer holds it. `G` is what it disables while
/// held, as [`SpinLock`](super::SpinLock): [`PreemptDisabled`] (the
/// default), [`NoGuard`], [`IrqDisabled`] ([`IrqRwSpinLock`]). Its guards
/// carry what the policy saved, so every policy works, and the method
/// names are `spin::RwLock`'s.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::RwSpinLock;
///
/// static ROUTES: RwSpinLock<Vec<u32>> = RwSpinLock::new(Vec::new());
///
/// ROUTES.write().push(10);
/// assert_eq!(ROUTES.read()[0], 10);
/// let table = ROUTES.upgradeable_read();
/// if table.is_empty() {
///     table.upgrade().push(1);
/// }
/// ```
#[doc(alias("rwlock_t", "RwLock"))]
pub struct RwSpinLock<T: ?Sized, G: SpinGuardian = PreemptDisabled> {
    raw: RawRwSpinLock<G>,
    data: UnsafeCell<T>,
}

/// An [`RwSpinLock`] that saves and disables local interrupts while held
/// (Linux's `read_lock_irqsave`/`write_lock_irqsave`), as
/// [`IrqTicketMutex`](super::IrqTicketMutex) is for the mutexes.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// static STATS: ksync::spinlock::IrqRwSpinLock<u64> = ksync::spinlock::IrqRwSpinLock::new(0);
/// *STATS.write() += 1; // also taken from an interrupt handler
/// assert_eq!(*STATS.read(), 1);
/// ```
pub type IrqRwSpinLock<T> = RwSpinLock<T, IrqDisabled>;

// SAFETY: the lock hands out `&mut T` to one writer at a time (T: Send
// moves access between threads) and `&T` to many readers (T: Sync).
unsafe impl<T: ?Sized + Send + Sync, G: SpinGuardian> Sync for RwSpinLock<T, G> {}
// SAFETY: moving the lock moves the `T`.
unsafe impl<T: ?Sized + Send, G: SpinGuardian> Send for RwSpinLock<T, G> {}

impl<T, G: SpinGuardian> RwSpinLock<T, G> {
    const_fn! {
        /// An unlocked lock around `value`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// static X: ksync::RwSpinLock<u8> = ksync::RwSpinLock::new(1);
        /// assert_eq!(*X.read(), 1);
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        #[must_use]
        pub fn new(value: T) -> Self {
            Self {
                raw: RawRwSpinLock::new(),
                data: UnsafeCell::new(value),
            }
        }
    }

    const_fn! {
        /// A lock around `value` over `raw` (for a lockdep class:
        /// [`RawRwSpinLock::with_class`]).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::{NoGuard, RawRwSpinLock, RwSpinLock};
        /// let lock = RwSpinLock::<u8, NoGuard>::from_raw(RawRwSpinLock::new(), 1);
        /// assert_eq!(*lock.read(), 1);
        /// ```
        #[must_use]
        pub fn from_raw(raw: RawRwSpinLock<G>, value: T) -> Self {
            Self {
                raw,
                data: UnsafeCell::new(value),
            }
        }
    }

    /// The value, consuming the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// assert_eq!(ksync::RwSpinLock::<u8>::new(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized, G: SpinGuardian> RwSpinLock<T, G> {
    /// Locks for reading (Linux's `read_lock`): waits while a writer holds
    /// the lock, or (outside interrupt context) waits for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// std::thread::scope(|s| {
    ///     let other = s.spawn(|| *lock.read()); // another CPU
    ///     let mine = lock.read();
    ///     assert_eq!(*mine + other.join().unwrap(), 2);
    /// });
    /// ```
    ///
    /// A second read of a lock this CPU already reads can wait behind a
    /// writer queued between the two (which waits for the first): lockdep
    /// reports it outside interrupt context, as Linux's does for its
    /// queued rwlock.
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read(&self) -> RwSpinLockReadGuard<'_, T, G> {
        let saved = self.raw.read_lock();
        RwSpinLockReadGuard {
            lock: self,
            saved,
            marker: PhantomData,
        }
    }

    /// Locks for reading if no writer holds the lock or waits for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let w = lock.write();
    /// assert!(lock.try_read().is_none());
    /// drop(w);
    /// assert!(lock.try_read().is_some());
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_read(&self) -> Option<RwSpinLockReadGuard<'_, T, G>> {
        let saved = self.raw.try_read_lock()?;
        Some(RwSpinLockReadGuard {
            lock: self,
            saved,
            marker: PhantomData,
        })
    }

    /// Locks for writing (Linux's `write_lock`): queues, holds new readers
    /// back, and waits for the readers to leave.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// *lock.write() += 1;
    /// assert_eq!(*lock.read(), 2);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write(&self) -> RwSpinLockWriteGuard<'_, T, G> {
        let saved = self.raw.write_lock();
        RwSpinLockWriteGuard {
            lock: self,
            saved,
            marker: PhantomData,
        }
    }

    /// Locks for writing if the lock is free.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let r = lock.read();
    /// assert!(lock.try_write().is_none());
    /// drop(r);
    /// assert!(lock.try_write().is_some());
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write(&self) -> Option<RwSpinLockWriteGuard<'_, T, G>> {
        let saved = self.raw.try_write_lock()?;
        Some(RwSpinLockWriteGuard {
            lock: self,
            saved,
            marker: PhantomData,
        })
    }

    /// Locks for an upgradeable read: shared with readers, exclusive with
    /// writers and other upgradeable readers (`spin::RwLock::upgradeable_read`).
    ///
    /// Its holder may read the lock again, but must not take it
    /// upgradeable or for writing (use [`upgrade`](RwSpinLockUpgradableGuard::upgrade)):
    /// that waits for its own hold for ever. Debug builds panic instead
    /// (policies that record the owner, as for a writer that waits for
    /// itself); with `lockdep`, it is reported as recursion first.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let up = lock.upgradeable_read();
    /// assert_eq!(*lock.read(), 1); // readers still come in
    /// *up.upgrade() = 2;
    /// assert_eq!(*lock.read(), 2);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn upgradeable_read(&self) -> RwSpinLockUpgradableGuard<'_, T, G> {
        let saved = self.raw.upgradeable_lock();
        RwSpinLockUpgradableGuard {
            lock: self,
            saved,
            marker: PhantomData,
        }
    }

    /// [`upgradeable_read`](Self::upgradeable_read) under `lock_api`'s name.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// assert_eq!(*lock.upgradable_read(), 1);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn upgradable_read(&self) -> RwSpinLockUpgradableGuard<'_, T, G> {
        self.upgradeable_read()
    }

    /// An upgradeable read if that needs no waiting.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let up = lock.try_upgradeable_read().unwrap();
    /// assert!(lock.try_upgradeable_read().is_none());
    /// drop(up);
    /// ```
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_upgradeable_read(&self) -> Option<RwSpinLockUpgradableGuard<'_, T, G>> {
        let saved = self.raw.try_upgradeable_lock()?;
        Some(RwSpinLockUpgradableGuard {
            lock: self,
            saved,
            marker: PhantomData,
        })
    }

    /// The value, mutably: `&mut self` proves nobody holds the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let mut lock = ksync::RwSpinLock::<u8>::new(1);
    /// *lock.get_mut() = 5;
    /// assert_eq!(*lock.read(), 5);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// Whether anyone holds the lock (a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let r = lock.read();
    /// assert!(lock.is_locked());
    /// # drop(r);
    /// ```
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    /// How many readers hold the lock (a snapshot; `spin::RwLock::reader_count`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let _r = lock.read();
    /// assert_eq!(lock.reader_count(), 1);
    /// ```
    #[must_use]
    pub fn reader_count(&self) -> usize {
        self.raw.reader_count() as usize
    }

    /// Whether a writer holds the lock: 1 or 0 (a snapshot;
    /// `spin::RwLock::writer_count`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let _w = lock.write();
    /// assert_eq!(lock.writer_count(), 1);
    /// ```
    #[must_use]
    pub fn writer_count(&self) -> usize {
        usize::from(self.raw.is_write_locked())
    }

    /// The raw lock (for its lockdep class, or a hand-over).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// assert!(!lock.raw().is_locked());
    /// ```
    #[must_use]
    pub fn raw(&self) -> &RawRwSpinLock<G> {
        &self.raw
    }
}

impl<T: Default, G: SpinGuardian> Default for RwSpinLock<T, G> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug, G: SpinGuardian> fmt::Debug for RwSpinLock<T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_read() {
            Some(guard) => f
                .debug_struct("RwSpinLock")
                .field("data", &&*guard)
                .finish(),
            None => f
                .debug_struct("RwSpinLock")
                .field("data", &format_args!("<locked>"))
                .finish(),
        }
    }
}

/// A shared hold of an [`RwSpinLock`]; `Deref`s to the value.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// let lock = ksync::RwSpinLock::<u8>::new(4);
/// let guard: ksync::spinlock::RwSpinLockReadGuard<'_, u8> = lock.read();
/// assert_eq!(*guard, 4);
/// ```
#[must_use = "the lock is released when the guard drops"]
pub struct RwSpinLockReadGuard<'a, T: ?Sized, G: SpinGuardian = PreemptDisabled> {
    lock: &'a RwSpinLock<T, G>,
    saved: G::Saved,
    /// `!Send` unless the policy's guard may move (`lock_api`'s marker).
    marker: PhantomData<G::GuardMarker>,
}

/// An exclusive hold of an [`RwSpinLock`]; `DerefMut`s to the value.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// let lock = ksync::RwSpinLock::<u8>::new(4);
/// let mut guard = lock.write();
/// *guard += 1;
/// let read = guard.downgrade(); // readers may come in now
/// assert_eq!(*read, 5);
/// ```
#[must_use = "the lock is released when the guard drops"]
pub struct RwSpinLockWriteGuard<'a, T: ?Sized, G: SpinGuardian = PreemptDisabled> {
    lock: &'a RwSpinLock<T, G>,
    saved: G::Saved,
    marker: PhantomData<G::GuardMarker>,
}

/// An upgradeable hold of an [`RwSpinLock`]; `Deref`s to the value.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// let lock = ksync::RwSpinLock::<u8>::new(4);
/// let up = lock.upgradeable_read();
/// let up = match up.try_upgrade() {
///     Ok(mut w) => { *w += 1; w.downgrade() }
///     Err(up) => up.downgrade(),
/// };
/// assert_eq!(*up, 5);
/// ```
#[must_use = "the lock is released when the guard drops"]
pub struct RwSpinLockUpgradableGuard<'a, T: ?Sized, G: SpinGuardian = PreemptDisabled> {
    lock: &'a RwSpinLock<T, G>,
    saved: G::Saved,
    marker: PhantomData<G::GuardMarker>,
}

// SAFETY: a shared guard hands out `&T` only (T: Sync).
unsafe impl<T: ?Sized + Sync, G: SpinGuardian> Sync for RwSpinLockReadGuard<'_, T, G> {}
// SAFETY: as for a shared reference to `T`; a write guard's `&T` only.
unsafe impl<T: ?Sized + Sync, G: SpinGuardian> Sync for RwSpinLockWriteGuard<'_, T, G> {}
// SAFETY: as for the read guard.
unsafe impl<T: ?Sized + Sync, G: SpinGuardian> Sync for RwSpinLockUpgradableGuard<'_, T, G> {}

impl<'a, T: ?Sized, G: SpinGuardian> RwSpinLockWriteGuard<'a, T, G> {
    /// Turns the exclusive hold into a shared one without letting another
    /// writer in between.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let r = lock.write().downgrade();
    /// assert!(lock.try_read().is_some());
    /// # drop(r);
    /// ```
    pub fn downgrade(self) -> RwSpinLockReadGuard<'a, T, G> {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: this guard holds the lock exclusive; its saved state
        // moves to the read guard.
        unsafe { this.lock.raw.downgrade() };
        RwSpinLockReadGuard {
            lock: this.lock,
            saved: this.saved,
            marker: PhantomData,
        }
    }
}

impl<'a, T: ?Sized, G: SpinGuardian> RwSpinLockUpgradableGuard<'a, T, G> {
    /// Waits for the other readers to leave and takes the lock exclusive.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// *lock.upgradeable_read().upgrade() += 1;
    /// assert_eq!(*lock.read(), 2);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn upgrade(self) -> RwSpinLockWriteGuard<'a, T, G> {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: this guard holds the lock upgradeable.
        let saved = unsafe { this.lock.raw.upgrade(this.saved) };
        RwSpinLockWriteGuard {
            lock: this.lock,
            saved,
            marker: PhantomData,
        }
    }

    /// Takes the lock exclusive if no other reader holds it; the guard
    /// back otherwise.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let up = lock.upgradeable_read();
    /// let r = lock.read();
    /// let up = up.try_upgrade().unwrap_err();
    /// drop(r);
    /// assert!(up.try_upgrade().is_ok());
    /// ```
    pub fn try_upgrade(self) -> Result<RwSpinLockWriteGuard<'a, T, G>, Self> {
        // SAFETY: this guard holds the lock upgradeable.
        if unsafe { self.lock.raw.try_upgrade() } {
            let this = core::mem::ManuallyDrop::new(self);
            Ok(RwSpinLockWriteGuard {
                lock: this.lock,
                saved: this.saved,
                marker: PhantomData,
            })
        } else {
            Err(self)
        }
    }

    /// Turns the upgradeable hold into a plain shared one (writers and
    /// other upgradeable readers may queue again).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lock = ksync::RwSpinLock::<u8>::new(1);
    /// let r = lock.upgradeable_read().downgrade();
    /// assert!(lock.try_upgradeable_read().is_some());
    /// # drop(r);
    /// ```
    pub fn downgrade(self) -> RwSpinLockReadGuard<'a, T, G> {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: this guard holds the lock upgradeable.
        unsafe { this.lock.raw.downgrade_upgradeable() };
        RwSpinLockReadGuard {
            lock: this.lock,
            saved: this.saved,
            marker: PhantomData,
        }
    }
}

impl<T: ?Sized, G: SpinGuardian> Deref for RwSpinLockReadGuard<'_, T, G> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held shared: no writer has `&mut T`.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized, G: SpinGuardian> Deref for RwSpinLockUpgradableGuard<'_, T, G> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held upgradeable (shared): no writer has `&mut T`.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized, G: SpinGuardian> Deref for RwSpinLockWriteGuard<'_, T, G> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held exclusive.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized, G: SpinGuardian> DerefMut for RwSpinLockWriteGuard<'_, T, G> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: held exclusive, and `&mut self` is the only access.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized, G: SpinGuardian> Drop for RwSpinLockReadGuard<'_, T, G> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock shared, with `saved`; the
        // guard is `!Send` when the state belongs to this CPU.
        unsafe { self.lock.raw.read_unlock(self.saved) };
    }
}

impl<T: ?Sized, G: SpinGuardian> Drop for RwSpinLockWriteGuard<'_, T, G> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock exclusive, with `saved`.
        unsafe { self.lock.raw.write_unlock(self.saved) };
    }
}

impl<T: ?Sized, G: SpinGuardian> Drop for RwSpinLockUpgradableGuard<'_, T, G> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock upgradeable, with `saved`.
        unsafe { self.lock.raw.upgradeable_unlock(self.saved) };
    }
}

impl<T: ?Sized + fmt::Debug, G: SpinGuardian> fmt::Debug for RwSpinLockReadGuard<'_, T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Debug, G: SpinGuardian> fmt::Debug for RwSpinLockWriteGuard<'_, T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Debug, G: SpinGuardian> fmt::Debug for RwSpinLockUpgradableGuard<'_, T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn rw_recursion(cpu: u32, how: &str) -> ! {
    panic!(
        "ksync: rwlock recursion: CPU {cpu} waits for an RwSpinLock it holds {how} (it would spin for ever; an interrupt handler that takes a lock its CPU holds needs the IRQ-saving form outside handlers)"
    )
}
