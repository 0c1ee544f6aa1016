//! A scalable reader-writer lock: readers touch only their own CPU's count.
//!
//! Linux's `percpu_rw_semaphore`, grown from the 2007 `rw_mutex` proposal.
//! A classic rwlock keeps one reader count, so every reader writes the same
//! cache line and readers on different CPUs serialise on it even though
//! they never block each other. Here each CPU counts its own readers in its
//! own [`PerCpu`] slot; a writer sets `block`, then waits until the sum of
//! all slots drops to zero. Readers pay for that in the writer's favour:
//! read-mostly data is where this lock belongs.
//!
//! # Flavours
//!
//! The type parameter `F` picks how readers learn that a writer is coming:
//!
//! * [`Fenced`] (the 2007 design, needs nothing else): a reader increments
//!   its CPU's count, issues one full fence and checks `block`; a writer
//!   sets `block`, issues one full fence and sums the counts. One fence per
//!   reader lock and one release fence per unlock.
//! * Gated (comes with RCU's `rcu_sync`): while no writer is around,
//!   readers skip the fence and the `block` check entirely; a writer first
//!   closes a gate, which costs one grace period (amortised over
//!   back-to-back writers), after which readers take the fenced path.
//!
//! # The barrier pairing
//!
//! ```text
//!   reader lock                        writer lock
//!   -----------                        -----------
//!   this_cpu count += 1                block: 0 -> 1 (CAS; excludes writers)
//!   fence(SeqCst)          /* A */     fence(SeqCst)             /* D */
//!   if block == 0: enter               wait until sum(counts) == 0
//!   else: count -= 1, wait, retry      fence(Acquire)            /* C */
//!
//!   reader unlock                      writer unlock
//!   -------------                      -------------
//!   fence(Release)         /* B */     block := 0 (Release)
//!   this_cpu count -= 1
//! ```
//!
//! * **A pairs with D** (store buffering: each side stores, fences, loads
//!   the other's variable): either the reader sees `block` set and backs
//!   out, or the writer's sum sees the reader's increment and waits. Both
//!   missing each other is impossible.
//! * **B pairs with C**: a writer whose sum saw a reader's decrement also
//!   sees everything that reader did inside its section (release fence
//!   before the decrement, acquire fence after the load that read it).
//! * The reader's `block == 0` load is Acquire and the writer's unlock store
//!   Release, so a reader entering after a writer sees its writes.
//!
//! # Rules
//!
//! * Do not take a read lock recursively on one CPU while a writer may
//!   come: the writer waits for the outer reader, the inner one waits for
//!   the writer (as with `percpu_rw_semaphore`).
//! * Readers and writers hold preemption off while they hold the lock (as
//!   Linux's `read_lock`/`write_lock`; through
//!   [`Kernel::preempt_disable`](crate::kernel::Kernel::preempt_disable),
//!   free in a kernel without preemption): a reader preempted on the CPU
//!   of a writer that waits for it with interrupts off would never run
//!   again. A reader that must sleep takes a
//!   [`PerCpuRwSemaphore`](crate::percpu_rwsem::PerCpuRwSemaphore), whose
//!   readers may be preempted and migrate (its counts are per CPU but only
//!   their sum matters: a slot may go negative).
//! * If readers run in interrupt handlers, writers must disable local
//!   interrupts around the write section, or a handler reading on the
//!   writer's CPU spins forever.
//!
//! # Lock-order checking
//!
//! With [`lockdep`](crate::lockdep), a lock is one class (the place it was
//! built; `lock_api`'s `RwLock::new` has no call site, so such a lock is a
//! class of its own), and readers and the writer both take it as a plain
//! lock: a writer waits for readers and new readers wait for a waiting
//! writer, so an order "this lock -> X" on one CPU against "X -> this
//! lock" on another is a possible deadlock whichever side reads. So is a
//! recursive read (the rule above): lockdep reports it as recursion. A
//! reader or writer is recorded before it waits (a gated writer after it
//! closed the gate, which waits for a grace period holding nothing), a
//! `try_` form once it succeeded.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::percpu_rwlock::PerCpuRwLock;
//!
//! static ROUTES: PerCpuRwLock<[u32; 4]> = PerCpuRwLock::new([0; 4]);
//!
//! let hop = ROUTES.read()[2]; // this CPU's count, one fence
//! ROUTES.write()[2] = hop + 1; // excludes readers and other writers
//! assert_eq!(ROUTES.read()[2], 1);
//! ```

use core::fmt;
use core::marker::PhantomData;

use crate::arch;
use crate::lockdep::Map;
use crate::percpu::{ConstInit, PerCpu};
use crate::rcu::RcuSync;
use crate::sync::{AtomicBool, AtomicI32, Ordering, const_fn, fence, init, relax};
pub use spin::relax::{RelaxStrategy, Spin};

mod sealed {
    pub trait Sealed {}
}

/// How readers learn that a writer is coming: [`Fenced`] (or, with RCU, the
/// gated flavour). Sealed. A flavour's initial state is its
/// [`ConstInit`] value.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lock_api::RwLock;
/// use ksync::percpu_rwlock::{Fenced, Flavour, RawPerCpuRwLock};
///
/// // A routing table whose kernel picks the flavour (Gated when it runs RCU).
/// struct RouteTable<F: Flavour> {
///     routes: RwLock<RawPerCpuRwLock<F>, [u32; 4]>,
/// }
/// let table: RouteTable<Fenced> = RouteTable { routes: RwLock::new([0; 4]) };
/// assert_eq!(table.routes.read()[1], 0);
/// ```
pub trait Flavour: sealed::Sealed + ConstInit {
    /// Runs a reader's lock or unlock step `f` with preemption disabled,
    /// telling it whether it may skip the fence (the writer gate is open;
    /// `Fenced`: never) and this CPU's id. The gated flavour runs it inside
    /// an RCU read section, so that the gate check and the count update it
    /// covers do not straddle a quiescent state.
    #[doc(hidden)]
    fn reader_step<T>(&self, f: impl FnOnce(bool, usize) -> T) -> T;
    /// Called by a writer before it sets `block`.
    #[doc(hidden)]
    fn writer_enter(&self);
    /// Called by a `try_write` before it tries to set `block`: whether a
    /// writer may go on without waiting (if so, `writer_exit` undoes it).
    #[doc(hidden)]
    fn try_writer_enter(&self) -> bool;
    /// Called by a writer after it cleared `block`.
    #[doc(hidden)]
    fn writer_exit(&self);
    /// Called by a reader that took the slow path and got in.
    #[doc(hidden)]
    fn reader_slow(&self) {}
}

/// The flavour that needs no RCU: one full fence per reader lock.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_rwlock::PerCpuRwLock; // the Fenced flavour
///
/// // No RCU needed: every reader pays one full fence, never a grace period.
/// static MOUNTS: PerCpuRwLock<u32> = PerCpuRwLock::new(0);
/// *MOUNTS.write() += 1;
/// assert_eq!(*MOUNTS.read(), 1);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct Fenced;

impl sealed::Sealed for Fenced {}

crate::sync::const_init! {
    impl for Fenced = Fenced;
    impl for Gated = Gated { gate: RcuSync::new() };
}

impl Flavour for Fenced {
    #[inline(always)]
    fn reader_step<T>(&self, f: impl FnOnce(bool, usize) -> T) -> T {
        let (_preempt, cpu) = crate::kernel::preempt_disable_cpu();
        f(false, cpu)
    }
    #[inline(always)]
    fn writer_enter(&self) {}
    #[inline(always)]
    fn try_writer_enter(&self) -> bool {
        true
    }
    #[inline(always)]
    fn writer_exit(&self) {}
}

/// The flavour whose readers skip the fence while no writer is around: an
/// [`RcuSync`] gate. A writer pays one RCU grace period to close it (none
/// if writers follow each other while it is closed), and the gate reopens a
/// grace period after the last writer leaves.
///
/// Needs a kernel that reports RCU quiescent states ([`crate::rcu`]). A
/// reader's gate check and count update run inside an RCU read section
/// (which also makes a CPU that RCU is not watching watched for it).
///
/// [`try_write`](RawPerCpuRwLock::try_write) never waits for the grace
/// period that closing an open gate takes (Linux's `percpu_rw_semaphore`
/// offers no write trylock at all; `lock_api` needs one): it fails while
/// the gate is open, and succeeds without waiting while it is closed or
/// still closed from a writer that left less than a grace period ago, when
/// neither a writer nor a reader is inside. A caller that wants the lock
/// soon after a failure calls [`write`](RawPerCpuRwLock::write), which
/// waits.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_rwlock::GatedPerCpuRwLock;
///
/// // `cgroup_threadgroup_rwsem`-like: read on every fork, written rarely.
/// static THREADGROUP: GatedPerCpuRwLock<u64> = GatedPerCpuRwLock::new(0);
/// let forks = *THREADGROUP.read(); // gate open: no fence, no shared line
/// *THREADGROUP.write() = forks + 1; // closes the gate: one grace period
/// assert_eq!(*THREADGROUP.read(), 1);
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid, idle gate (an [`RcuSync`]).
#[derive(Debug)]
pub struct Gated {
    gate: RcuSync,
}

impl sealed::Sealed for Gated {}

impl Flavour for Gated {
    #[inline(always)]
    fn reader_step<T>(&self, f: impl FnOnce(bool, usize) -> T) -> T {
        // The fast path is safe only if the writer's grace period waits
        // for this step: the gate check and the count update must not
        // straddle a quiescent state. A read section (untracked by lockdep:
        // the lock itself is tracked), which also keeps preemption off,
        // covers both.
        let (_rcu, cpu) = crate::rcu::ReadSection::enter_cpu();
        f(self.gate.is_idle(), cpu)
    }
    #[inline]
    fn writer_enter(&self) {
        self.gate.enter();
    }
    #[inline]
    fn try_writer_enter(&self) -> bool {
        self.gate.try_enter()
    }
    #[inline]
    fn writer_exit(&self) {
        self.gate.exit();
    }
    #[inline]
    fn reader_slow(&self) {
        // Reopen the gate once the last writer's grace period is over.
        self.gate.poll_idle();
    }
}

/// A [`lock_api::RwLock`] over a [`RawPerCpuRwLock`] of the [`Fenced`]
/// flavour.
pub type PerCpuRwLock<T> = lock_api::RwLock<RawPerCpuRwLock<Fenced>, T>;

/// A [`lock_api::RwLock`] over a [`RawPerCpuRwLock`] of the [`Gated`]
/// flavour.
pub type GatedPerCpuRwLock<T> = lock_api::RwLock<RawPerCpuRwLock<Gated>, T>;

/// The raw scalable reader-writer lock (see the [module docs](self)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::percpu_rwlock::RawPerCpuRwLock;
///
/// // The raw lock guards data of the caller's choosing, as `rwlock_t` does.
/// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
/// LOCK.read();
/// assert!(LOCK.is_locked());
/// // SAFETY: this context took the read lock just above.
/// unsafe { LOCK.unlock_read() };
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock of either flavour:
/// [`new`](RawPerCpuRwLock::new) or [`gated`](RawPerCpuRwLock::gated) (no
/// reader counted, writers not blocking, the gate idle), with `lockdep` in
/// a class of its own. `Zeroable` for `F: Zeroable` ([`Fenced`], [`Gated`])
/// with the `bytemuck` feature.
#[doc(alias = "percpu_rw_semaphore")]
pub struct RawPerCpuRwLock<F = Fenced, R = Spin> {
    /// Readers per CPU (incremented on lock, decremented on unlock, maybe
    /// on another CPU: only the sum is meaningful).
    readers: PerCpu<AtomicI32>,
    /// Set by a writer from before it waits for readers until it unlocks.
    block: AtomicBool,
    flavour: F,
    relax: PhantomData<R>,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
}

impl RawPerCpuRwLock<Fenced> {
    const_fn! {
        /// A new, unlocked lock of the [`Fenced`] flavour. `const`, for
        /// `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::percpu_rwlock::RawPerCpuRwLock;
        ///
        /// static SB_LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new(); // `const`
        /// assert!(!SB_LOCK.is_locked());
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn new() -> Self {
            Self::with_flavour()
        }
    }
}

impl RawPerCpuRwLock<Gated> {
    const_fn! {
        /// A new, unlocked lock of the [`Gated`] flavour. `const`, for
        /// `static`s.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::percpu_rwlock::{Gated, RawPerCpuRwLock};
        ///
        /// static NAMESPACE_LOCK: RawPerCpuRwLock<Gated> = RawPerCpuRwLock::gated();
        /// assert!(NAMESPACE_LOCK.try_read()); // gate open: the reader fast path
        /// // SAFETY: taken just above.
        /// unsafe { NAMESPACE_LOCK.unlock_read() };
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn gated() -> Self {
            Self::with_flavour()
        }
    }
}

impl<F: Flavour, R> RawPerCpuRwLock<F, R> {
    const_fn! {
        /// A new, unlocked lock of any flavour and relax strategy (name
        /// them: `RawPerCpuRwLock::<Gated, Loop>::with_flavour()`).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::percpu_rwlock::{Fenced, RawPerCpuRwLock};
        /// use ksync::spinlock::Loop;
        ///
        /// // Waiters that spin without the `pause`/`yield` hint (`Loop`).
        /// static LOCK: RawPerCpuRwLock<Fenced, Loop> = RawPerCpuRwLock::with_flavour();
        /// assert!(!LOCK.is_locked());
        /// ```
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub fn with_flavour() -> Self {
            Self::with_map(Map::new())
        }
    }

    const_fn! {
        /// A new, unlocked lock with `dep_map` as its lockdep record (also
        /// [`PerCpuRwSemaphore`](crate::percpu_rwsem)'s).
        pub(crate) fn with_map(dep_map: Map) -> Self {
            Self {
                readers: PerCpu::new(),
                block: AtomicBool::new(false),
                flavour: init::<F>(),
                relax: PhantomData,
                dep_map,
            }
        }
    }
}

impl<F, R> RawPerCpuRwLock<F, R> {
    /// The lock's lockdep record (for
    /// [`PerCpuRwSemaphore`](crate::percpu_rwsem), which records its own
    /// acquisitions in it and uses only the untracked steps).
    #[inline(always)]
    pub(crate) fn dep_map(&self) -> &Map {
        &self.dep_map
    }
}

impl<F: Flavour, R> Default for RawPerCpuRwLock<F, R> {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn default() -> Self {
        Self::with_flavour()
    }
}

impl<F: Flavour, R: RelaxStrategy> RawPerCpuRwLock<F, R> {
    /// Tries to take a read lock without waiting. Fails while a writer holds
    /// or waits for the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// let lock = RawPerCpuRwLock::new();
    /// lock.write();
    /// assert!(!lock.try_read()); // a writer holds it
    /// // SAFETY: this context holds the write lock.
    /// unsafe { lock.unlock_write() };
    /// assert!(lock.try_read());
    /// // SAFETY: the read lock taken just above.
    /// unsafe { lock.unlock_read() };
    /// ```
    #[doc(alias = "percpu_down_read_trylock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_read(&self) -> bool {
        // Preemption off for the whole read section (released in
        // `unlock_read`), as Linux's `read_lock`: a reader preempted on
        // the CPU of a writer that waits for it with interrupts off would
        // never run again.
        crate::kernel::preempt_disable_hook();
        let got = self.try_read_untracked();
        if got {
            self.dep_map.acquire(0, true, false);
        } else {
            crate::kernel::preempt_enable_hook();
        }
        got
    }

    /// [`try_read`](Self::try_read) without telling lockdep (also the
    /// reader step of [`PerCpuRwSemaphore`](crate::percpu_rwsem)). A
    /// `false` has backed the increment out again, after the fence: a
    /// writer may have counted it meanwhile.
    #[inline]
    pub(crate) fn try_read_untracked(&self) -> bool {
        // No quiescent state between the gate check and the increment
        // (gated flavour: `reader_step`'s read section).
        self.flavour.reader_step(|fast, cpu| {
            let slot = self.readers.this_cpu(cpu);
            if fast {
                arch::local_add(slot, 1);
                return true;
            }
            arch::local_add(slot, 1);
            // A pairs with D (see the module docs).
            fence(Ordering::SeqCst);
            // Acquire pairs with the Release in `unlock_write`.
            if !self.block.load(Ordering::Acquire) {
                self.flavour.reader_slow();
                return true;
            }
            arch::local_add(slot, -1);
            false
        })
    }

    /// Takes a read lock, spinning while a writer holds or waits for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.read(); // `percpu_down_read`: this CPU's count, then one fence
    /// // ... read the protected data ...
    /// // SAFETY: the read lock taken above.
    /// unsafe { LOCK.unlock_read() };
    /// ```
    #[doc(alias = "percpu_down_read")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read(&self) {
        // Recorded before waiting, so a deadlock is reported first (and
        // forgotten if a debug check panics meanwhile).
        let dep = self.dep_map.acquire_guard(0, false, false);
        // Preemption off until `unlock_read` (see `try_read`).
        crate::kernel::preempt_disable_hook();
        while !self.try_read_untracked() {
            while self.block.load(Ordering::Relaxed) {
                relax::<R>();
            }
        }
        dep.keep();
    }

    /// Releases a read lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.read();
    /// // SAFETY: this context holds the read lock (`percpu_up_read`).
    /// unsafe { LOCK.unlock_read() };
    /// assert!(LOCK.try_write());
    /// # // SAFETY: the write lock just taken.
    /// # unsafe { LOCK.unlock_write() };
    /// ```
    ///
    /// # Safety
    /// The caller holds a read lock taken with [`read`](Self::read) or
    /// [`try_read`](Self::try_read).
    #[doc(alias = "percpu_up_read")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_read(&self) {
        self.dep_map.release();
        self.unlock_read_untracked();
        // The read section's preemption count (`read`, `try_read`).
        crate::kernel::preempt_enable_hook();
    }

    /// [`unlock_read`](Self::unlock_read) without telling lockdep (also
    /// the reader unlock of [`PerCpuRwSemaphore`](crate::percpu_rwsem)):
    /// whether it took the slow path (the gate was not open), where a
    /// writer may be waiting for this decrement.
    #[inline]
    pub(crate) fn unlock_read_untracked(&self) -> bool {
        self.flavour.reader_step(|fast, cpu| {
            let slot = self.readers.this_cpu(cpu);
            if !fast {
                // B pairs with C: the read section happens-before a writer
                // that sees this decrement.
                fence(Ordering::Release);
            }
            arch::local_add(slot, -1);
            !fast
        })
    }

    /// Takes the write lock: closes the gate, excludes other writers, then
    /// waits for the readers to drain.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.write(); // `percpu_down_write`: blocks new readers, waits for the rest
    /// assert!(LOCK.is_write_locked());
    /// // SAFETY: the write lock taken above.
    /// unsafe { LOCK.unlock_write() };
    /// ```
    #[doc(alias = "percpu_down_write")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write(&self) {
        // Closing the gate may wait for a grace period: with preemption
        // on. The write section holds it off from here to `unlock_write`
        // (Linux's `write_lock`).
        self.flavour.writer_enter();
        crate::kernel::preempt_disable_hook();
        // Recorded before waiting for other writers and for readers (after
        // the gate, whose grace period must be waited for holding nothing).
        self.dep_map.acquire(0, false, false);
        // Acquire pairs with the previous writer's Release in
        // `unlock_write`. A compare-exchange rather than a swap: a waiting
        // writer does not write the line while another holds it.
        while !self.try_block() {
            while self.block.load(Ordering::Relaxed) {
                relax::<R>();
            }
        }
        // D pairs with A.
        fence(Ordering::SeqCst);
        while self.readers_active() {
            relax::<R>();
        }
        // C pairs with B.
        fence(Ordering::Acquire);
    }

    /// Tries to take the write lock without waiting: fails if another writer
    /// holds it or any reader is inside, and (gated flavour) if the gate is
    /// open, since closing it takes a grace period (see [`Gated`]).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.read();
    /// assert!(!LOCK.try_write()); // a reader is inside
    /// // SAFETY: the read lock taken above.
    /// unsafe { LOCK.unlock_read() };
    /// assert!(LOCK.try_write());
    /// // SAFETY: the write lock just taken.
    /// unsafe { LOCK.unlock_write() };
    /// ```
    #[doc(alias = "percpu_down_write_trylock")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn try_write(&self) -> bool {
        if self.block.load(Ordering::Relaxed) {
            return false;
        }
        if !self.flavour.try_writer_enter() {
            return false;
        }
        // Preemption off until `unlock_write` (see `write`).
        crate::kernel::preempt_disable_hook();
        if !self.try_block() {
            self.flavour.writer_exit();
            crate::kernel::preempt_enable_hook();
            return false;
        }
        // D pairs with A.
        fence(Ordering::SeqCst);
        if self.readers_active() {
            self.clear_block();
            self.flavour.writer_exit();
            crate::kernel::preempt_enable_hook();
            return false;
        }
        // C pairs with B.
        fence(Ordering::Acquire);
        self.dep_map.acquire(0, true, false);
        true
    }

    /// Releases the write lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.write();
    /// // SAFETY: this context holds the write lock (`percpu_up_write`).
    /// unsafe { LOCK.unlock_write() };
    /// assert!(!LOCK.is_locked());
    /// ```
    ///
    /// # Safety
    /// The caller holds the write lock.
    #[doc(alias = "percpu_up_write")]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub unsafe fn unlock_write(&self) {
        self.dep_map.release();
        self.clear_block();
        self.flavour.writer_exit();
        // The write section's preemption count (`write`, `try_write`).
        crate::kernel::preempt_enable_hook();
    }

    /// Sets `block` if it was clear (the writer-writer exclusion).
    #[inline]
    pub(crate) fn try_block(&self) -> bool {
        self.block
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether any reader is inside (or between its increment and backing
    /// out): the per-CPU counts do not sum to zero.
    pub(crate) fn readers_active(&self) -> bool {
        self.readers
            .iter()
            .fold(0i32, |sum, n| sum.wrapping_add(n.load(Ordering::Relaxed)))
            != 0
    }

    /// Clears `block` (a writer leaves, or a `try_write` backs out).
    #[inline]
    pub(crate) fn clear_block(&self) {
        // Release pairs with readers' Acquire load of `block` and the next
        // writer's Acquire compare-exchange.
        self.block.store(false, Ordering::Release);
    }

    /// The flavour (the gate, for the gated one).
    #[inline]
    pub(crate) fn flavour(&self) -> &F {
        &self.flavour
    }

    /// Whether a writer holds or waits for the lock: a snapshot.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::PerCpuRwLock;
    ///
    /// static CONFIG: PerCpuRwLock<u32> = PerCpuRwLock::new(0);
    /// let guard = CONFIG.write();
    /// // `lock_api` reaches the raw lock, e.g. for a `debug_assert!`.
    /// // SAFETY: only reads its state; the guard still unlocks it.
    /// assert!(unsafe { CONFIG.raw() }.is_write_locked());
    /// # drop(guard);
    /// ```
    #[inline]
    pub fn is_write_locked(&self) -> bool {
        self.block.load(Ordering::Relaxed)
    }

    /// Whether anyone holds the lock: a snapshot.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::percpu_rwlock::RawPerCpuRwLock;
    ///
    /// static LOCK: RawPerCpuRwLock = RawPerCpuRwLock::new();
    /// LOCK.read();
    /// assert!(LOCK.is_locked()); // readers count too (a snapshot)
    /// assert!(!LOCK.is_write_locked());
    /// // SAFETY: the read lock taken above.
    /// unsafe { LOCK.unlock_read() };
    /// ```
    pub fn is_locked(&self) -> bool {
        self.is_write_locked() || self.readers_active()
    }
}

impl<F, R> fmt::Debug for RawPerCpuRwLock<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPerCpuRwLock")
            .field("block", &self.block.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

// SAFETY: `write` returns only with `block` set by this writer's swap (so
// writers exclude each other) and after seeing no readers (A/D: readers
// arriving later see `block` and back out); `read` returns only after
// seeing `block` clear after its increment. Acquire/Release as in the
// module docs. Forgetting a guard leaves the lock held, which is safe.
// Not under loom: `INIT` is a constant, which loom's atomics cannot be.
#[cfg(not(ksync_loom))]
unsafe impl<F: Flavour, R: RelaxStrategy> lock_api::RawRwLock for RawPerCpuRwLock<F, R> {
    // No call site for a class: with lockdep, each lock built from `INIT`
    // (`RwLock::new`) is its own class.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::with_map(Map::per_instance());
    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) {
        self.read();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> bool {
        self.try_read()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self) {
        // SAFETY: forwarded caller contract (a read lock is held).
        unsafe { self.unlock_read() }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) {
        self.write();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> bool {
        self.try_write()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded caller contract (the write lock is held).
        unsafe { self.unlock_write() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawPerCpuRwLock::is_locked(self)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.is_write_locked()
    }
}
