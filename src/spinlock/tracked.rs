//! One tracked lock above the algorithms: [`RawSpinlock<A>`] holds the
//! lockdep map, the entry points that tell lockdep, the `lock_api` impls and
//! `#[track_caller]`, for any [`ArchSpinlock`] `A` (the ticket, TTAS and
//! queued locks). Linux layers the same way: `arch_spinlock_t` (the
//! algorithm) below `raw_spinlock_t` (which adds `dep_map`), and
//! Rust-for-Linux's `Lock<T, B: Backend>` is generic over small backends.

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

#[cfg(doc)]
use super::guardian::{IrqDisabled, NoGuard};
use super::guardian::{PreemptDisabled, SpinGuardian};
use crate::lockdep::{LockClassKey, Map};
use crate::sync::const_fn;

/// A spinlock algorithm without lock-order checking (Linux's
/// `arch_spinlock_t`): what [`RawSpinlock`] wraps. [`TicketLock`],
/// [`TtasLock`] and [`QueuedLock`] implement it.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicBool, Ordering::{Acquire, Relaxed, Release}};
/// use ksync::spinlock::{ArchSpinlock, SpinLock};
///
/// /// A test-and-set lock, as on a core whose only atomic is a swap.
/// struct TasLock(AtomicBool);
///
/// // SAFETY: a `swap` that returns `false` takes the flag for this context
/// // alone, with Acquire; only the holder clears it, with Release.
/// unsafe impl ArchSpinlock for TasLock {
///     const UNLOCKED: Self = TasLock(AtomicBool::new(false));
///     fn lock(&self) { while self.0.swap(true, Acquire) { core::hint::spin_loop() } }
///     fn try_lock(&self) -> bool { !self.0.swap(true, Acquire) }
///     unsafe fn unlock(&self) { self.0.store(false, Release) }
///     fn is_locked(&self) -> bool { self.0.load(Relaxed) }
/// }
///
/// // Tracked like ksync's own: preemption off, lockdep, `lock_api`.
/// static IRQ_DESCS: SpinLock<u32, ksync::spinlock::PreemptDisabled, TasLock> = SpinLock::new(0);
/// *IRQ_DESCS.lock() += 1;
/// ```
///
/// # Safety
/// `lock` returns, and `try_lock` returns `true`, only when the calling
/// context holds the lock and no other does; taking it has Acquire
/// ordering and `unlock` Release, so one holder's critical section
/// happens-before the next one's. A lock whose holder forgets to unlock
/// stays held (no unwinding releases it).
///
/// [`TicketLock`]: super::TicketLock
/// [`TtasLock`]: super::TtasLock
/// [`QueuedLock`]: super::QueuedLock
pub unsafe trait ArchSpinlock {
    /// An unlocked lock, for `lock_api`'s `INIT` (not under loom, whose
    /// atomics cannot be constants).
    #[cfg(not(ksync_loom))]
    const UNLOCKED: Self;

    /// Takes the lock, spinning until it is free.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{ArchSpinlock, QueuedLock, TicketLock};
    ///
    /// // Code generic over the algorithm, e.g. a benchmark of each.
    /// fn with_lock<A: ArchSpinlock>(lock: &A, work: impl FnOnce()) {
    ///     lock.lock();
    ///     work();
    ///     // SAFETY: taken just above by this context.
    ///     unsafe { lock.unlock() };
    /// }
    /// with_lock(&TicketLock::new(), || {});
    /// with_lock(&QueuedLock::new(), || {});
    /// ```
    fn lock(&self);

    /// Takes the lock if that needs no waiting.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{ArchSpinlock, TtasLock};
    ///
    /// fn try_work<A: ArchSpinlock>(lock: &A) -> bool {
    ///     if !lock.try_lock() {
    ///         return false; // busy: come back later
    ///     }
    ///     // SAFETY: taken just above.
    ///     unsafe { lock.unlock() };
    ///     true
    /// }
    /// assert!(try_work(&TtasLock::new()));
    /// ```
    fn try_lock(&self) -> bool;

    /// Releases the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{ArchSpinlock, TicketLock};
    ///
    /// let lock = TicketLock::new();
    /// ArchSpinlock::lock(&lock);
    /// // SAFETY: this context holds the lock.
    /// unsafe { ArchSpinlock::unlock(&lock) };
    /// assert!(!ArchSpinlock::is_locked(&lock));
    /// ```
    ///
    /// # Safety
    /// The lock is held by the caller's context.
    unsafe fn unlock(&self);

    /// Whether the lock is held: a snapshot, not for synchronization.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{ArchSpinlock, TtasLock};
    ///
    /// fn debug_check_unlocked<A: ArchSpinlock>(lock: &A) {
    ///     debug_assert!(!lock.is_locked(), "freeing an object whose lock is held");
    /// }
    /// debug_check_unlocked(&TtasLock::new());
    /// ```
    fn is_locked(&self) -> bool;
}

/// An [`ArchSpinlock`] whose plain unlock hands the lock to the longest
/// waiter (FIFO), so it is `lock_api`'s fair unlock too.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{FairArchSpinlock, QueuedLock, TicketLock};
///
/// // Only FIFO algorithms: a waiter is served in arrival order.
/// fn waiters_queued<A: FairArchSpinlock>(lock: &A) -> bool {
///     lock.is_contended()
/// }
/// assert!(!waiters_queued(&TicketLock::new()));
/// assert!(!waiters_queued(&QueuedLock::new()));
/// ```
///
/// # Safety
/// `unlock` hands the lock over in arrival order whenever someone waits in
/// the lock's FIFO order, and `is_contended` says whether anyone waits.
pub unsafe trait FairArchSpinlock: ArchSpinlock {
    /// Whether other contexts wait for the lock (a snapshot).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{ArchSpinlock, FairArchSpinlock, TicketLock};
    ///
    /// let lock = TicketLock::new();
    /// lock.lock();
    /// assert!(!FairArchSpinlock::is_contended(&lock)); // held, nobody waiting
    /// # unsafe { ArchSpinlock::unlock(&lock) };
    /// ```
    fn is_contended(&self) -> bool;
}

/// A spinlock that takes part in [`lockdep`](crate::lockdep) (Linux's
/// `raw_spinlock_t`): the algorithm `A`, what it disables while held (its
/// guard policy `G`, [`PreemptDisabled`] unless named: see
/// [`SpinGuardian`]) and the lock's class. Without the `lockdep` feature
/// the map is zero-sized and, in release builds, the lock is `A`'s word
/// and whatever state `G` saves. Named through its aliases:
/// [`RawTicketLock`](super::RawTicketLock),
/// [`RawTtasLock`](super::RawTtasLock),
/// [`RawQueuedLock`](super::RawQueuedLock), and through the `lock_api`
/// mutexes over them.
///
/// `lock` disables what `G` disables, then spins; `unlock` releases, then
/// undoes it (Linux's `spin_lock`: preemption off first, so the holder is
/// never switched out while CPUs spin for it). The state `G` saves is kept
/// in the lock while it is held, so a held lock can be released from
/// another function, or by the next task after a context switch on the
/// same CPU (Linux's run-queue lock, released in `finish_task_switch`):
/// see [`replace_saved`](Self::replace_saved) and
/// [`lockdep_release`](Self::lockdep_release).
///
/// With `lockdep`, `lock` (and `lock_nested`) records the acquisition
/// before it spins, `try_lock` once it succeeded, `unlock` the release. A
/// lock's class is the place it was built: the constructors are
/// `#[track_caller]` with `lockdep`, or take an explicit key (`with_class`,
/// [`set_lock_class`](Self::set_lock_class)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::RawTicketLock;
///
/// // By hand, as C code uses `raw_spinlock_t` (no data inside the lock).
/// static DEVICES_LOCK: RawTicketLock = RawTicketLock::new();
///
/// DEVICES_LOCK.lock(); // preemption off, then the ticket
/// assert!(DEVICES_LOCK.is_held());
/// // SAFETY: this context took it just above.
/// unsafe { DEVICES_LOCK.unlock() };
/// ```
///
/// # Holder checks
///
/// [`is_held`](Self::is_held) and [`assert_held`](Self::assert_held) ask
/// whether *this CPU* holds the lock (Linux's `lockdep_is_held`,
/// `lockdep_assert_held`): exact with `lockdep` (its record of what each
/// CPU holds), and in debug builds from an owner record kept in the lock
/// (Linux's debug spinlock: owner CPU), which also reports taking a lock
/// this CPU already holds ("spinlock recursion", a certain deadlock) and
/// releasing a lock that another CPU holds. In release builds without
/// `lockdep` there is no record: `assert_held` costs nothing and
/// `is_held` can only say whether anyone holds it. The owner record asks
/// [`kernel::cpu_id`](crate::kernel::cpu_id), so it is kept only by
/// policies that use the kernel's hooks anyway (not [`NoGuard`]).
#[repr(C)]
pub struct RawSpinlock<A, G: SpinGuardian = PreemptDisabled> {
    arch: A,
    /// What the holder's `G::enter` saved: written after taking `arch`,
    /// read before releasing it, by the holder only (zero-sized when `G`
    /// saves nothing).
    saved: UnsafeCell<MaybeUninit<G::Saved>>,
    /// Debug builds: the holder's CPU + 1, 0 when free (only for policies
    /// that record it, [`SpinGuardian::RECORDS_OWNER`]).
    #[cfg(debug_assertions)]
    owner: core::sync::atomic::AtomicU32,
    /// The lock's lockdep class (zero-sized without `lockdep`).
    dep_map: Map,
    guardian: PhantomData<fn() -> G>,
}

// SAFETY: `arch` is shared as `A` allows; `saved` is written and read only
// by the context that holds `arch` (or the one it handed the lock to on
// its CPU), one at a time, and holds plain `Copy` data that may be read on
// another thread (`Send`); `owner` is atomic.
unsafe impl<A: Sync, G: SpinGuardian> Sync for RawSpinlock<A, G> where G::Saved: Send {}

// A panic cannot leave `saved` half-written (it is one `Copy` store by
// the holder), so the lock is as unwind-safe as its algorithm.
impl<A: core::panic::RefUnwindSafe, G: SpinGuardian> core::panic::RefUnwindSafe
    for RawSpinlock<A, G>
{
}
impl<A: core::panic::UnwindSafe, G: SpinGuardian> core::panic::UnwindSafe for RawSpinlock<A, G> {}

impl<A, G: SpinGuardian> RawSpinlock<A, G> {
    const_fn! {
        /// `arch` in the class of the place this is called from.
        #[cfg_attr(feature = "lockdep", track_caller)]
        pub(crate) fn from_arch(arch: A) -> Self {
            Self::with_map(arch, Map::new())
        }
    }

    const_fn! {
        /// `arch` in `key`'s class.
        pub(crate) fn from_arch_in(arch: A, key: &'static LockClassKey) -> Self {
            Self::with_map(arch, Map::with_key(key))
        }
    }

    const_fn! {
        fn with_map(arch: A, dep_map: Map) -> Self {
            Self {
                arch,
                saved: UnsafeCell::new(MaybeUninit::uninit()),
                #[cfg(debug_assertions)]
                owner: core::sync::atomic::AtomicU32::new(0),
                dep_map,
                guardian: PhantomData,
            }
        }
    }

    /// The algorithm underneath, which tells lockdep nothing and disables
    /// nothing (for locks that record at their own level). A hold taken
    /// through it is released through it (`arch().unlock()`), never with
    /// this lock's [`unlock`](Self::unlock), which would undo a policy
    /// `enter` that never happened (see its `# Safety`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// let lock = RawTicketLock::new();
    /// // The bare algorithm: no preemption change, no lockdep record.
    /// let arch = lock.arch();
    /// arch.lock();
    /// assert!(lock.is_locked());
    /// // SAFETY: taken through `arch`, released through it.
    /// unsafe { arch.unlock() };
    /// ```
    #[inline]
    pub fn arch(&self) -> &A {
        &self.arch
    }

    /// Puts the lock in `key`'s [lockdep](crate::lockdep) class instead of
    /// the class of the place it was built. Does nothing without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// // A lock built in a generic constructor, named for the reports.
    /// let mut lock = RawTicketLock::new();
    /// lock.set_lock_class(ksync::lock_class!("pidmap_lock"));
    /// lock.lock();
    /// # unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "lockdep_set_class")]
    #[inline]
    pub fn set_lock_class(&mut self, key: &'static LockClassKey) {
        self.dep_map.set_class(key);
    }

    /// Keeps what the new holder's `G::enter` saved.
    ///
    /// # Safety
    /// The caller holds `arch`, taken after it saved `saved`.
    #[inline]
    unsafe fn keep(&self, saved: G::Saved) {
        // SAFETY: only the holder touches `saved` (caller contract).
        unsafe { (*self.saved.get()).write(saved) };
    }

    /// What the holder saved, to hand to `G::exit` after the release.
    ///
    /// # Safety
    /// The caller holds `arch`, taken through `lock` or `try_lock` (which
    /// kept a state).
    #[inline]
    unsafe fn take(&self) -> G::Saved {
        // SAFETY: only the holder touches `saved`, initialised by `keep`
        // when the lock was taken (caller contract).
        unsafe { (*self.saved.get()).assume_init() }
    }

    /// Exchanges the state the holder saved (restored by `unlock`) for
    /// `saved`, and returns the old one: a held lock's saved state can be
    /// taken out and another put back, as a context switch that hands the
    /// lock to the next task may need (the interrupt state of an
    /// [`IrqDisabled`] lock: pair it with
    /// [`IrqState::into_flags`](crate::kernel::irq::IrqState::into_flags)
    /// and [`from_flags`](crate::kernel::irq::IrqState::from_flags)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::IrqState;
    /// use ksync::spinlock::{IrqDisabled, RawTicketLock, Spin};
    ///
    /// let lock: RawTicketLock<Spin, IrqDisabled> = RawTicketLock::with_relax();
    /// let preempt = ksync::kernel::preempt_disable(); // as in `__schedule`
    /// lock.lock(); // saved: interrupts were on
    /// // Keep interrupts off past the unlock: the unlock restores "off",
    /// // and the "on" state is ours to restore later.
    /// let off = IrqState::save().into_flags();
    /// // SAFETY: held; `off` was saved on this CPU after the lock's state.
    /// let on = unsafe { lock.replace_saved(off) };
    /// // SAFETY: held by this context.
    /// unsafe { lock.unlock() };
    /// assert!(ksync::host::irqs_disabled());
    /// // SAFETY: `on` came out of the lock, saved on this CPU, not restored.
    /// let restored: IrqState = unsafe { IrqState::from_flags(on) };
    /// drop(restored);
    /// assert!(!ksync::host::irqs_disabled());
    /// drop(preempt);
    /// ```
    ///
    /// # Safety
    /// The caller's context holds the lock (or was handed it on this CPU);
    /// `saved` is a state that `unlock` may hand to `G::exit` on this CPU
    /// in nesting order, and the returned state is now the caller's to
    /// restore (or to drop, if the policy allows: `()` for
    /// [`PreemptDisabled`] still owes one `preempt_enable`, which the
    /// `saved` put back stands for).
    #[inline]
    pub unsafe fn replace_saved(&self, saved: G::Saved) -> G::Saved {
        // SAFETY: the caller holds the lock (contract): `saved` is
        // initialised and only the holder touches it.
        unsafe { core::mem::replace((*self.saved.get()).assume_init_mut(), saved) }
    }

    /// Tells [lockdep](crate::lockdep) that this CPU's current context
    /// gives the held lock up without releasing it (Linux's
    /// `spin_release` before a context switch that hands the lock to the
    /// next task); [`lockdep_acquire`](Self::lockdep_acquire) in the next
    /// context takes it back. Nothing without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// static RQ_LOCK: RawTicketLock = RawTicketLock::new();
    ///
    /// // `__schedule` in the outgoing task: the next task will unlock.
    /// RQ_LOCK.lock();
    /// RQ_LOCK.lockdep_release(); // `spin_release`
    /// // ... context_switch(prev, next) ...
    /// // `finish_task_switch` in the incoming task, same CPU:
    /// RQ_LOCK.lockdep_acquire(); // `spin_acquire`
    /// // SAFETY: handed over on this CPU; taken through this `RawSpinlock`.
    /// unsafe { RQ_LOCK.unlock() };
    /// ```
    #[doc(alias = "spin_release")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lockdep_release(&self) {
        self.dep_map.release();
    }

    /// Tells [lockdep](crate::lockdep) that this context now holds the
    /// lock it was handed (Linux's `spin_acquire` in `finish_task_switch`),
    /// before it releases it with `unlock`. Nothing without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// let rq_lock = RawTicketLock::new();
    /// rq_lock.lock();
    /// rq_lock.lockdep_release(); // the outgoing task gives it up
    /// rq_lock.lockdep_acquire(); // the incoming task takes it over
    /// // SAFETY: handed over on this CPU.
    /// unsafe { rq_lock.unlock() };
    /// ```
    #[doc(alias = "spin_acquire")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn lockdep_acquire(&self) {
        // A try-lock acquisition: it is held already, nothing waits.
        self.dep_map.acquire(0, true, false);
    }
}

impl<A: ArchSpinlock, G: SpinGuardian> RawSpinlock<A, G> {
    /// Takes the lock: disables what `G` disables, then spins (see each
    /// algorithm's `lock` for how it waits). With lockdep, recorded before
    /// spinning, so that a deadlock is reported first.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawQueuedLock;
    ///
    /// static PIDMAP_LOCK: RawQueuedLock = RawQueuedLock::new();
    /// PIDMAP_LOCK.lock(); // `raw_spin_lock`: lockdep first, then the spin
    /// // ... allocate a pid ...
    /// // SAFETY: held by this context.
    /// unsafe { PIDMAP_LOCK.unlock() };
    /// ```
    ///
    /// # Panics
    /// In debug builds (policies that record the owner), if this CPU holds
    /// the lock already: it would spin for ever.
    #[doc(alias = "spin_lock")]
    #[inline]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub fn lock(&self) {
        self.lock_nested_inner(0);
    }

    /// [`lock`](Self::lock) for deliberate nesting of two locks of one
    /// [lockdep](crate::lockdep) class (Linux's `spin_lock_nested`): the
    /// outer one with `lock`, the inner one with `lock_nested(1)`.
    /// Without `lockdep`, exactly `lock`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// // Every run queue's lock is built here: one lockdep class.
    /// fn rq_lock() -> RawTicketLock { RawTicketLock::new() }
    /// let (this_rq, busiest) = (rq_lock(), rq_lock());
    ///
    /// // `double_rq_lock` while balancing: the second one nested, in a fixed order.
    /// this_rq.lock();
    /// busiest.lock_nested(1); // "rq -> rq/1", not recursion
    /// // SAFETY: both held by this context.
    /// unsafe { busiest.unlock(); this_rq.unlock() };
    /// ```
    ///
    /// # Panics
    /// With `lockdep`, if `subclass` is not below
    /// [`MAX_SUBCLASSES`](crate::lockdep::MAX_SUBCLASSES); as `lock` in
    /// debug builds.
    #[doc(alias = "spin_lock_nested")]
    #[inline]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub fn lock_nested(&self, subclass: u8) {
        self.lock_nested_inner(subclass);
    }

    #[inline(always)]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    fn lock_nested_inner(&self, subclass: u8) {
        self.lock_with(subclass, A::lock);
    }

    /// [`lock_nested`](Self::lock_nested) with `take` as the algorithm's
    /// acquisition (for an algorithm's other ways to wait, such as
    /// [`TicketLock::lock_preemptible`](super::TicketLock::lock_preemptible)):
    /// everything `lock` does around it (the policy's `enter`, lockdep,
    /// the saved state and the owner record), so that
    /// [`unlock`](Self::unlock) undoes exactly what was done.
    #[inline(always)]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub(crate) fn lock_with(&self, subclass: u8, take: impl FnOnce(&A)) {
        let (saved, cpu) = G::enter_with_cpu();
        self.dep_map.acquire(subclass, false, false);
        // This CPU's tag, read once (by `G::enter_with_cpu` where it read
        // the id anyway): `G::enter` keeps the context on its CPU (the
        // policies that record an owner disable preemption or
        // interrupts), so it is still this CPU's once the lock is taken.
        #[cfg(debug_assertions)]
        let tag = self.check_not_mine(cpu);
        let _ = cpu;
        take(&self.arch);
        // SAFETY: held by this context, taken after `saved` was saved.
        unsafe { self.keep(saved) };
        #[cfg(debug_assertions)]
        self.set_owner(tag);
    }

    /// Takes the lock if that needs no waiting (see each algorithm's
    /// `try_lock`); when it does not, what `G` disabled is enabled again.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTtasLock;
    ///
    /// let lock = RawTtasLock::new();
    /// if lock.try_lock() { // `raw_spin_trylock`
    ///     // SAFETY: taken just above.
    ///     unsafe { lock.unlock() };
    /// }
    /// ```
    #[doc(alias = "spin_trylock")]
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[must_use = "the lock is held when this returns `true` and must be unlocked"]
    pub fn try_lock(&self) -> bool {
        let saved = G::enter();
        if !self.arch.try_lock() {
            // SAFETY: the matching `enter`, just above.
            unsafe { G::exit(saved) };
            return false;
        }
        self.dep_map.acquire(0, true, false);
        // SAFETY: held by this context, taken after `saved` was saved.
        unsafe { self.keep(saved) };
        #[cfg(debug_assertions)]
        self.set_owner(owner_tag_of::<G>());
        true
    }

    /// Releases the lock, then enables what `G` disabled when it was
    /// taken (the state kept in the lock: see
    /// [`replace_saved`](Self::replace_saved)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// let lock = RawTicketLock::new();
    /// lock.lock();
    /// // SAFETY: taken through this lock by this context, on this CPU.
    /// unsafe { lock.unlock() }; // releases, then `preempt_enable`
    /// assert_eq!(ksync::host::preempt_count(), 0);
    /// ```
    ///
    /// # Safety
    /// The lock must be held by the caller's context, or by a context of
    /// this CPU that handed it over (a context switch); for a policy other
    /// than [`NoGuard`], on the CPU that took it. It must have been taken
    /// through this `RawSpinlock` (`lock`, `lock_nested`, `try_lock`,
    /// `lock_preemptible`), which ran the policy's `enter` and kept its
    /// state: a hold taken through [`arch`](Self::arch) is released with
    /// `arch().unlock()` (this `unlock` would run `G::exit` for an `enter`
    /// that never ran, unbalancing the preemption count, and read a saved
    /// state never written).
    ///
    /// # Panics
    /// In debug builds (policies that record the owner), if the lock is
    /// held by another CPU or by nobody (which catches a hold taken
    /// through [`arch`](Self::arch): it records no owner).
    #[doc(alias = "spin_unlock")]
    #[inline]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub unsafe fn unlock(&self) {
        self.dep_map.release();
        // This CPU's id, where the owner record just checked it.
        #[cfg(debug_assertions)]
        let cpu = self.clear_owner();
        #[cfg(not(debug_assertions))]
        let cpu = None;
        // SAFETY: held (caller contract), so the state it saved is there.
        let saved = unsafe { self.take() };
        // SAFETY: forwarded caller contract.
        unsafe { self.arch.unlock() };
        // SAFETY: the holder's `enter`, on this CPU (caller contract);
        // undone once the lock is free, as Linux's `spin_unlock`. `cpu`
        // is this CPU's id (the owner record's check).
        unsafe { G::exit_on_cpu(saved, cpu) };
    }

    /// Whether the lock is held, by anyone. A snapshot, stale the moment
    /// it returns: do not use it for synchronization.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// let lock = RawTicketLock::new();
    /// assert!(!lock.is_locked()); // a snapshot: `raw_spin_is_locked`
    /// lock.lock();
    /// assert!(lock.is_locked());
    /// # unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "spin_is_locked")]
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.arch.is_locked()
    }

    /// Whether this CPU holds the lock (Linux's `lockdep_is_held`): exact
    /// with `lockdep` (while it checks) and, in debug builds, for policies
    /// that record the owner; otherwise nothing records the holder and
    /// this is [`is_locked`](Self::is_locked) (which another CPU's hold
    /// also makes true).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// static LOCK: RawTicketLock = RawTicketLock::new();
    /// LOCK.lock();
    /// // `lockdep_is_held`: exact with lockdep or debug assertions.
    /// assert!(LOCK.is_held());
    /// # unsafe { LOCK.unlock() };
    /// ```
    #[doc(alias("lockdep_is_held", "spin_is_held"))]
    #[inline]
    pub fn is_held(&self) -> bool {
        if let Some(held) = self.dep_map.is_held() {
            return held;
        }
        #[cfg(debug_assertions)]
        if G::RECORDS_OWNER {
            return self.owner_tag() == this_cpu_tag();
        }
        self.is_locked()
    }

    /// Reports unless this CPU holds the lock (Linux's
    /// `lockdep_assert_held`, for code that must run under it): with
    /// `lockdep` through [`Kernel::lockdep_report`](crate::kernel::Kernel::lockdep_report)
    /// ([`NotHeld`](crate::lockdep::ReportKind::NotHeld)); in debug builds
    /// from the owner record (a panic naming the holder); a free lock is
    /// caught in debug builds by every policy. Costs nothing in release
    /// builds without `lockdep`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// static RQ_LOCK: RawTicketLock = RawTicketLock::new();
    /// fn enqueue_task() {
    ///     RQ_LOCK.assert_held(); // `lockdep_assert_held(&rq->lock)`
    ///     // ... touch the run queue ...
    /// }
    /// RQ_LOCK.lock();
    /// enqueue_task();
    /// # unsafe { RQ_LOCK.unlock() };
    /// ```
    #[doc(alias("lockdep_assert_held", "assert_spin_locked"))]
    #[inline]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub fn assert_held(&self) {
        if self.dep_map.is_held().is_some() {
            self.dep_map.assert_held();
        } else if cfg!(debug_assertions) {
            #[cfg(debug_assertions)]
            if G::RECORDS_OWNER {
                let (owner, me) = (self.owner_tag(), this_cpu_tag());
                if owner != me {
                    not_held(owner, me);
                }
            } else if !self.is_locked() {
                not_held(0, u32::MAX);
            }
        }
    }

    #[cfg(debug_assertions)]
    #[inline]
    fn owner_tag(&self) -> u32 {
        // Relaxed: only the holder stores its own tag and clears it before
        // releasing, so this CPU's tag is seen exactly while this CPU holds
        // the lock (program order on one CPU); any other value is some
        // other CPU's or none, which is all a check needs.
        self.owner.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Debug builds: panics if this CPU holds the lock already; returns
    /// this CPU's tag for [`set_owner`](Self::set_owner) (0 for policies
    /// that record no owner). `cpu`: this CPU's id if the policy's
    /// `enter_with_cpu` read it (then the kernel is not asked again).
    #[cfg(debug_assertions)]
    #[inline]
    #[track_caller]
    fn check_not_mine(&self, cpu: Option<usize>) -> u32 {
        let me = match cpu {
            Some(id) if G::RECORDS_OWNER => (id as u32).wrapping_add(1),
            _ => owner_tag_of::<G>(),
        };
        if G::RECORDS_OWNER && self.owner_tag() == me {
            recursion(me);
        }
        me
    }

    /// Debug builds: records `tag` ([`owner_tag_of`], read on this CPU
    /// while `G` keeps the context there) as the holder.
    #[cfg(debug_assertions)]
    #[inline]
    fn set_owner(&self, tag: u32) {
        if G::RECORDS_OWNER {
            // Relaxed: see `owner_tag`.
            self.owner.store(tag, core::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Debug builds: panics unless this CPU holds the lock, then forgets
    /// the owner; returns this CPU's id (`None` for policies that record
    /// no owner).
    #[cfg(debug_assertions)]
    #[inline]
    #[track_caller]
    fn clear_owner(&self) -> Option<usize> {
        if G::RECORDS_OWNER {
            let (owner, me) = (self.owner_tag(), this_cpu_tag());
            if owner != me {
                bad_unlock(owner, me);
            }
            // Relaxed: see `owner_tag`; the release that follows orders it
            // before the next holder's store.
            self.owner.store(0, core::sync::atomic::Ordering::Relaxed);
            // `me` is `cpu_id() + 1`, and 1 or more.
            return Some(me.wrapping_sub(1) as usize);
        }
        None
    }
}

/// This CPU's owner tag: its id + 1 (0 is "free"). Unchecked, and the +1
/// wrapping (no overflow branch where overflow checks are on): the tag is
/// only compared, ids are below `MAX_CPUS`, and the per-CPU code checks
/// the id where it indexes.
#[cfg(debug_assertions)]
#[inline]
fn this_cpu_tag() -> u32 {
    (crate::kernel::cpu_id_unchecked() as u32).wrapping_add(1)
}

/// [`this_cpu_tag`] for a policy that records the owner, 0 (no call of
/// the kernel's `cpu_id`) for one that does not.
#[cfg(debug_assertions)]
#[inline]
fn owner_tag_of<G: SpinGuardian>() -> u32 {
    if G::RECORDS_OWNER { this_cpu_tag() } else { 0 }
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn recursion(me: u32) -> ! {
    panic!(
        "ksync: spinlock recursion: CPU {} takes a lock it already holds (it would spin for ever; an interrupt handler taking a lock its CPU holds needs the IRQ-saving form outside handlers)",
        me - 1
    )
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn bad_unlock(owner: u32, me: u32) -> ! {
    if owner == 0 {
        panic!(
            "ksync: unlock of a spinlock that is not held, on CPU {}",
            me - 1
        )
    }
    panic!(
        "ksync: spinlock released on CPU {} but held by CPU {} (a lock that disables preemption or interrupts is released on the CPU that took it)",
        me - 1,
        owner - 1
    )
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn not_held(owner: u32, me: u32) -> ! {
    match (owner, me) {
        (0, u32::MAX) => panic!("ksync: spinlock not held (assert_held)"),
        (0, me) => panic!(
            "ksync: spinlock not held by CPU {} (assert_held): it is free",
            me - 1
        ),
        (owner, me) => panic!(
            "ksync: spinlock not held by CPU {} (assert_held): CPU {} holds it",
            me - 1,
            owner - 1
        ),
    }
}

/// Holder checks on a `lock_api` mutex over a [`RawSpinlock`]
/// ([`TicketMutex`](super::TicketMutex) and the others): the lock's
/// [`is_held`](RawSpinlock::is_held) and
/// [`assert_held`](RawSpinlock::assert_held).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::{HolderCheck, TicketMutex};
///
/// static RUNQUEUE: TicketMutex<u32> = TicketMutex::new(0);
///
/// fn enqueue(len: &mut u32) {
///     RUNQUEUE.assert_held(); // xv6's `holding(lock)`
///     *len += 1;
/// }
/// enqueue(&mut RUNQUEUE.lock());
/// assert!(!RUNQUEUE.is_locked());
/// ```
pub trait HolderCheck {
    /// Whether this CPU holds the lock (see [`RawSpinlock::is_held`]).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{HolderCheck, TicketMutex};
    ///
    /// static RUNQUEUE: TicketMutex<u32> = TicketMutex::new(0);
    /// let guard = RUNQUEUE.lock();
    /// assert!(RUNQUEUE.is_held()); // this CPU holds it
    /// # drop(guard);
    /// ```
    fn is_held(&self) -> bool;
    /// Reports unless this CPU holds the lock (see
    /// [`RawSpinlock::assert_held`]).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::{HolderCheck, TicketMutex};
    ///
    /// static TASKLIST: TicketMutex<Vec<u32>> = TicketMutex::new(Vec::new());
    /// fn unhash_task(list: &mut Vec<u32>, pid: u32) {
    ///     TASKLIST.assert_held();
    ///     list.retain(|&p| p != pid);
    /// }
    /// unhash_task(&mut TASKLIST.lock(), 7);
    /// ```
    #[track_caller]
    fn assert_held(&self);
}

impl<A: ArchSpinlock + Sync, G: SpinGuardian, T: ?Sized> HolderCheck
    for lock_api::Mutex<RawSpinlock<A, G>, T>
where
    G::Saved: Send,
{
    #[inline]
    fn is_held(&self) -> bool {
        // SAFETY: the raw lock is only asked, never locked or unlocked.
        unsafe { self.raw() }.is_held()
    }

    #[inline]
    #[track_caller]
    fn assert_held(&self) {
        // SAFETY: as in `is_held`.
        unsafe { self.raw() }.assert_held()
    }
}

impl<A: FairArchSpinlock, G: SpinGuardian> RawSpinlock<A, G> {
    /// Whether other CPUs wait for the lock (a snapshot, like
    /// [`is_locked`](Self::is_locked)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// // `spin_needbreak`: a long walk under the lock lets waiters in.
    /// let lock = RawTicketLock::new();
    /// lock.lock();
    /// for _chunk in 0..3 {
    ///     if lock.is_contended() {
    ///         // SAFETY: held; taken again at once.
    ///         unsafe { lock.unlock() };
    ///         lock.lock();
    ///     }
    /// }
    /// # unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "spin_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.arch.is_contended()
    }
}

impl<A: fmt::Debug, G: SpinGuardian> fmt::Debug for RawSpinlock<A, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.arch.fmt(f)
    }
}

#[cfg(feature = "defmt")]
impl<A: defmt::Format, G: SpinGuardian> defmt::Format for RawSpinlock<A, G> {
    fn format(&self, f: defmt::Formatter<'_>) {
        self.arch.format(f)
    }
}

/// The constructors of one algorithm's tracked lock: `new`, `with_class`,
/// `with_relax` and `Default`. Written once per algorithm, not generic:
/// `RawTicketLock::new()` must infer the default relax strategy, which an
/// impl generic over the algorithm could not (a type alias's default
/// parameter does not take part in inference).
macro_rules! tracked_constructors {
    ($arch:ident, $alias:ident, $name:literal) => {
        impl $crate::spinlock::RawSpinlock<$arch> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " that spins with [`Spin`](crate::spinlock::Spin).")]
                ///
                #[cfg_attr(feature = "test-hooks", doc = " ```")]
                #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
                #[doc = concat!("use ksync::spinlock::", stringify!($alias), ";")]
                ///
                #[doc = concat!("static LOCK: ", stringify!($alias), " = ", stringify!($alias), "::new(); // `DEFINE_RAW_SPINLOCK`")]
                /// LOCK.lock();
                /// // SAFETY: held by this context.
                /// unsafe { LOCK.unlock() };
                /// ```
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn new() -> Self {
                    Self::from_arch($arch::new())
                }
            }

            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " in `key`'s [lockdep](crate::lockdep)")]
                /// class (Linux's `lockdep_set_class`); exactly `new`
                /// without `lockdep`. `const`, for a `lock_api` mutex in a
                /// `static`: `TicketMutex::from_raw(RawTicketLock::with_class(lock_class!("runqueue")), 0)`.
                ///
                #[cfg_attr(feature = "test-hooks", doc = " ```")]
                #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
                #[doc = concat!("use ksync::spinlock::", stringify!($alias), ";")]
                ///
                /// // Every mount's lock in one class, named in reports.
                #[doc = concat!("static MOUNT_LOCK: ", stringify!($alias), " =")]
                #[doc = concat!("    ", stringify!($alias), "::with_class(ksync::lock_class!(\"mount_lock\"));")]
                /// MOUNT_LOCK.lock();
                /// // SAFETY: held by this context.
                /// unsafe { MOUNT_LOCK.unlock() };
                /// ```
                #[doc(alias = "lockdep_set_class")]
                pub fn with_class(key: &'static $crate::lockdep::LockClassKey) -> Self {
                    Self::from_arch_in($arch::new(), key)
                }
            }
        }

        impl<R, G: $crate::spinlock::SpinGuardian> $crate::spinlock::RawSpinlock<$arch<R>, G> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " with the relax strategy `R` (name")]
                #[doc = concat!("it: `", stringify!($alias), "::<Loop>::with_relax()`) and the guard policy")]
                #[doc = concat!("`G` (`", stringify!($alias), "::<Spin, NoGuard>::with_relax()`).")]
                ///
                #[cfg_attr(feature = "test-hooks", doc = " ```")]
                #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
                #[doc = concat!("use ksync::spinlock::{", stringify!($alias), ", Loop, NoGuard};")]
                ///
                /// // No spin hint, and no kernel hook (firmware without `set_kernel!`).
                #[doc = concat!("static LOCK: ", stringify!($alias), "<Loop, NoGuard> = ", stringify!($alias), "::with_relax();")]
                /// LOCK.lock();
                /// // SAFETY: held by this context.
                /// unsafe { LOCK.unlock() };
                /// ```
                #[cfg_attr(feature = "lockdep", track_caller)]
                pub fn with_relax() -> Self {
                    Self::from_arch($arch::with_relax())
                }
            }
        }

        impl<R, G: $crate::spinlock::SpinGuardian> $crate::spinlock::RawSpinlock<$arch<R>, G> {
            $crate::sync::const_fn! {
                #[doc = concat!("A new, unlocked ", $name, " in `key`'s [lockdep](crate::lockdep) class,")]
                /// with the relax strategy and guard policy the context
                /// names (`with_class` is the default ones'), for the
                #[doc = concat!("`Irq` aliases: `SpinLock::<u64, IrqDisabled, ", stringify!($arch), ">::from_raw(")]
                #[doc = concat!(stringify!($alias), "::with_relax_in_class(lock_class!(\"timers\")), 0)`.")]
                ///
                #[cfg_attr(feature = "test-hooks", doc = " ```")]
                #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
                #[doc = concat!("use ksync::spinlock::{", stringify!($alias), ", ", stringify!($arch), ", IrqDisabled, Spin, SpinLock};")]
                ///
                /// // A timer base lock: interrupts off while held, one named class.
                #[doc = concat!("static TIMERS: SpinLock<u64, IrqDisabled, ", stringify!($arch), "> = SpinLock::from_raw(")]
                #[doc = concat!("    ", stringify!($alias), "::<Spin, IrqDisabled>::with_relax_in_class(ksync::lock_class!(\"timers\")),")]
                ///     0,
                /// );
                /// *TIMERS.lock() += 1;
                /// ```
                #[doc(alias = "lockdep_set_class")]
                pub fn with_relax_in_class(key: &'static $crate::lockdep::LockClassKey) -> Self {
                    Self::from_arch_in($arch::with_relax(), key)
                }
            }
        }

        impl<R, G: $crate::spinlock::SpinGuardian> Default for $crate::spinlock::RawSpinlock<$arch<R>, G> {
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn default() -> Self {
                Self::with_relax()
            }
        }
    };
}
pub(crate) use tracked_constructors;

// SAFETY: exclusion and Acquire/Release are `A`'s (the `ArchSpinlock`
// contract); forgetting a guard leaves the lock held, which is safe; a
// lock cannot unwind.
unsafe impl<A: ArchSpinlock + Sync, G: SpinGuardian> lock_api::RawMutex for RawSpinlock<A, G>
where
    G::Saved: Send,
{
    // No call site to name a class after: with lockdep, each mutex built
    // from `INIT` (`Mutex::new`) is a class of its own.
    #[cfg(not(ksync_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::with_map(A::UNLOCKED, Map::per_instance());
    // loom's atomics cannot be constants: under loom a mutex is built
    // with `Mutex::from_raw(RawTicketLock::new(), value)`.
    #[cfg(ksync_loom)]
    const INIT: Self = panic!(
        "ksync under loom: lock_api's `Mutex::new` needs a constant lock; build it with `from_raw(RawTicketLock::new(), value)` (or the lock of your choice)"
    );
    type GuardMarker = G::GuardMarker;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) {
        RawSpinlock::lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> bool {
        RawSpinlock::try_lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract (the lock is held).
        unsafe { RawSpinlock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawSpinlock::is_locked(self)
    }
}

// SAFETY: `A`'s plain unlock is its fair one (the `FairArchSpinlock`
// contract).
unsafe impl<A: FairArchSpinlock + Sync, G: SpinGuardian> lock_api::RawMutexFair
    for RawSpinlock<A, G>
where
    G::Saved: Send,
{
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawSpinlock::unlock(self) }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn bump(&self) {
        if self.is_contended() {
            // SAFETY: forwarded caller contract; re-locked before return.
            unsafe { RawSpinlock::unlock(self) };
            RawSpinlock::lock(self);
        }
    }
}
