//! The ticket lock: the algorithm ([`TicketLock`], Linux's
//! `arch_spinlock_t`) and its tracked form's extra entry point (its items
//! are re-exported by `spinlock`).

use core::fmt;
use core::marker::PhantomData;

use super::tracked::{ArchSpinlock, FairArchSpinlock, RawSpinlock, tracked_constructors};
use super::up::{self, UP};
use super::{IrqState, PreemptDisabled, RelaxStrategy, Spin, SpinGuardian};
use crate::kernel::{Backoff, StallSite, StallWatch, kick_waiters, vcpu_preemptible};
use crate::sync::{AtomicU32, Ordering, const_fn, relax};

/// Width of each ticket: 32 bits, or 2 under loom, so that a model can wrap
/// the tickets in four acquisitions (`ticket_try_lock_across_a_wrap`).
const TICKET_BITS: u32 = if cfg!(ksync_loom) { 2 } else { u32::BITS };
/// The ticket space's mask: tickets count modulo `2^TICKET_BITS`.
const TICKET_MASK: u32 = if TICKET_BITS == u32::BITS {
    u32::MAX
} else {
    (1 << TICKET_BITS) - 1
};

/// How many distinct tickets there are: this many acquisitions bring the
/// lock's fields back to the values they started from. Models of the
/// wrap (loom only) need it.
#[cfg(ksync_loom)]
#[doc(hidden)]
pub const TICKETS: u32 = 1 << TICKET_BITS;

/// The ticket after `ticket`, in the ticket space.
#[inline(always)]
const fn bump(ticket: u32) -> u32 {
    ticket.wrapping_add(1) & TICKET_MASK
}

/// A fair (FIFO) ticket spinlock in two 32-bit words.
///
/// `owner` (the ticket being served) and `next` (the ticket the next
/// arrival takes) are two atomics; the lock is free when they are equal.
/// Locking takes a ticket with one `fetch_add` on `next` and spins until
/// `owner` reaches it; unlocking is a load and a Release store of
/// `owner + 1` (only the holder writes `owner`), with no read-modify-write:
/// that is Linux's ticket unlock (a plain add on the owner half), and what
/// makes the release cheap where an atomic RMW is dear (an emulator's
/// guest atomics). The two halves cannot share one word: Rust's memory
/// model forbids atomics of different sizes on one location while they
/// race, and a store of the whole word would lose a concurrent
/// `fetch_add`. Up to 65 535 CPUs may wait at once
/// ([`MAX_CPUS`](crate::kernel::MAX_CPUS) is bounded below that), far
/// inside the 2^32 tickets.
///
/// `try_lock` reads `owner`, then takes a ticket only if `next` still
/// equals it (a compare-exchange on `next`), and checks that its ticket is
/// served. The check fails only if all 2^32 tickets were handed out
/// between the read and the compare-exchange (the stalled CPU's `next`
/// came round again while the lock is held): it then holds a ticket
/// that is not served and waits its turn, so exclusion holds in every
/// case; at the tens of millions of acquisitions a second one lock can
/// take at most, that needs a `try_lock` stalled for minutes between two
/// instructions.
///
/// This is the algorithm alone (Linux's `arch_spinlock_t`): it tells
/// [`lockdep`](crate::lockdep) nothing. [`RawTicketLock`](super::RawTicketLock)
/// is the same lock with its lockdep class, the one to use.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::spinlock::TicketLock;
///
/// // The algorithm alone (`arch_spin_lock`): no preemption hook, no lockdep,
/// // e.g. for the early console before the kernel's hooks work.
/// static EARLY_CONSOLE: TicketLock = TicketLock::new();
/// EARLY_CONSOLE.lock();
/// // ... write the message to the UART ...
/// // SAFETY: this context took the lock just above.
/// unsafe { EARLY_CONSOLE.unlock() };
/// ```
///
/// # Invariants
/// `owner` only changes by the holder's unlock, by +1 (mod 2^32), and
/// `next - owner` (mod 2^32) is the number of holders plus waiters.
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock, the one [`new`](Self::new)
/// builds (owner 0, next 0: equal tickets). `bytemuck::Zeroable` with the
/// `bytemuck` feature.
#[doc(alias = "arch_spinlock_t")]
#[repr(C, align(4))]
pub struct TicketLock<R = Spin> {
    /// The ticket being served; written only by the holder's unlock.
    owner: AtomicU32,
    /// The next ticket to hand out.
    next: AtomicU32,
    relax: PhantomData<R>,
}

impl TicketLock {
    const_fn! {
        /// A new, unlocked ticket lock that spins with [`Spin`].
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::TicketLock;
        ///
        /// static LOCK: TicketLock = TicketLock::new(); // `__ARCH_SPIN_LOCK_UNLOCKED`
        /// assert!(!LOCK.is_locked());
        /// ```
        pub fn new() -> Self {
            Self::with_relax()
        }
    }
}

impl<R> TicketLock<R> {
    const_fn! {
        /// A new, unlocked ticket lock with the relax strategy `R`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::spinlock::{Loop, TicketLock};
        ///
        /// // Waiters that spin without the CPU's `pause`/`yield` hint.
        /// static LOCK: TicketLock<Loop> = TicketLock::with_relax();
        /// assert!(LOCK.try_lock());
        /// # unsafe { LOCK.unlock() };
        /// ```
        pub fn with_relax() -> Self {
            Self { owner: AtomicU32::new(0), next: AtomicU32::new(0), relax: PhantomData }
        }
    }

    const_fn! {
        /// A free lock whose next ticket is `ticket` (owner and next both
        /// `ticket`): for tests of the 2^32 wrap, which no test could reach
        /// by taking the lock. Not part of the API.
        #[cfg(feature = "test-hooks")]
        #[doc(hidden)]
        pub fn at_ticket(ticket: u32) -> Self {
            let ticket = ticket & TICKET_MASK;
            Self { owner: AtomicU32::new(ticket), next: AtomicU32::new(ticket), relax: PhantomData }
        }
    }

    /// `(owner, next)` now (a snapshot of two loads).
    #[inline]
    fn tickets(&self) -> (u32, u32) {
        let owner = self.owner.load(Ordering::Relaxed);
        (owner, self.next.load(Ordering::Relaxed))
    }

    /// Takes the next ticket. One `fetch_add` (its wrap at 2^32 is the
    /// ticket space's); under loom, whose tickets are 2 bits, an update
    /// modulo 4.
    ///
    /// AcqRel, as every take of a ticket (the compare-exchange in
    /// `try_lock` too): the takes on `next` form one release sequence, so
    /// a taker sees every `owner` store its predecessors made before they
    /// took theirs. Without it a taker whose ticket came round again could
    /// read an `owner` from before the wrap (coherence orders `owner`'s
    /// stores, not what a thread that never synchronized with them reads),
    /// take that stale value for its ticket being served and enter beside
    /// the holder: the loom model `ticket_try_lock_across_a_wrap` finds
    /// that with Relaxed takes. The critical section itself is ordered by
    /// the Acquire load of `owner` that finds the ticket served. (On
    /// x86_64 every RMW is a full barrier; elsewhere the Release half is
    /// the `l` of `ldaddal` / `.aqrl`.)
    #[inline(always)]
    fn take_ticket(&self) -> u32 {
        if TICKET_MASK == u32::MAX {
            self.next.fetch_add(1, Ordering::AcqRel)
        } else {
            match self
                .next
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| Some(bump(n)))
            {
                Ok(n) | Err(n) => n,
            }
        }
    }

    /// Tries to take the lock without spinning: succeeds only when nobody
    /// holds it or waits for it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// let lock = TicketLock::new();
    /// assert!(lock.try_lock()); // `arch_spin_trylock`
    /// assert!(!lock.try_lock()); // held: no waiting, no ticket taken
    /// // SAFETY: taken by the first `try_lock`.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "arch_spin_trylock")]
    #[inline]
    #[must_use = "the lock is held when this returns `true` and must be unlocked"]
    pub fn try_lock(&self) -> bool {
        if UP {
            return self.try_lock_up();
        }
        // Acquire pairs with the Release store in `unlock`: if our ticket
        // is this one, the critical section that served it happens-before
        // ours.
        let owner = self.owner.load(Ordering::Acquire);
        // Read first, so that a held lock costs no exclusive access to its
        // line (the exchange below would fail anyway).
        if self.next.load(Ordering::Relaxed) != owner {
            return false;
        }
        // Take ticket `owner` only if it is still the next one. AcqRel on
        // success: a take of a ticket (see `take_ticket`).
        if self
            .next
            .compare_exchange(owner, bump(owner), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Our ticket is served unless every ticket was handed out between
        // the two reads (see the type's docs): `owner` moves on only when
        // ticket `owner` is released, and that ticket is ours. Acquire:
        // as above.
        if self.owner.load(Ordering::Acquire) != owner {
            self.wait_for_ticket(owner);
        }
        true
    }

    /// A `try_lock` whose ticket came round again: waits for it (a lock
    /// in all but name; see the type's docs). Out of line and cold.
    #[cold]
    #[inline(never)]
    fn wait_for_ticket(&self, ticket: u32) {
        // Acquire pairs with the Release store in `unlock`.
        while self.owner.load(Ordering::Acquire) != ticket {
            crate::sync::spin_loop();
        }
    }

    /// Whether the lock is held. A snapshot, stale the moment it returns: do
    /// not use it for synchronization.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// let lock = TicketLock::new();
    /// lock.lock();
    /// assert!(lock.is_locked()); // for assertions only: stale at once
    /// // SAFETY: taken just above.
    /// unsafe { lock.unlock() };
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        let (owner, next) = self.tickets();
        owner != next
    }

    /// Whether other CPUs wait for the lock (a snapshot, like
    /// [`is_locked`](Self::is_locked)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// // A long critical section that drops the lock when others queue
    /// // (`spin_needbreak`, `cond_resched_lock`).
    /// let lock = TicketLock::new();
    /// lock.lock();
    /// if lock.is_contended() {
    ///     // SAFETY: held; retaken just below.
    ///     unsafe { lock.unlock() };
    ///     lock.lock();
    /// }
    /// # unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "arch_spin_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        let (owner, next) = self.tickets();
        (next.wrapping_sub(owner) & TICKET_MASK) > 1
    }

    /// Releases the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// let lock = TicketLock::new();
    /// lock.lock();
    /// // SAFETY: this context holds the lock: serves the next ticket.
    /// unsafe { lock.unlock() };
    /// assert!(!lock.is_locked());
    /// ```
    ///
    /// # Safety
    /// The lock must be held by the caller's context.
    #[doc(alias = "arch_spin_unlock")]
    #[inline]
    pub unsafe fn unlock(&self) {
        if UP {
            // SAFETY: forwarded caller contract.
            return unsafe { self.unlock_up() };
        }
        // Relaxed: only the holder (this CPU) writes `owner`.
        let owner = self.owner.load(Ordering::Relaxed);
        debug_assert!(
            owner != self.next.load(Ordering::Relaxed),
            "unlock of a ticket lock that is not held"
        );
        // Serve the next ticket with a store: nobody else writes `owner`.
        // Release pairs with the Acquire loads of `owner` in `lock`,
        // `lock_slow` and `try_lock`.
        self.owner.store(bump(owner), Ordering::Release);
        // In every mode: a test-and-set waiter from before a mode switch
        // may be halted (the `SpinWait` contract).
        kick_waiters();
    }
}

impl<R: RelaxStrategy> TicketLock<R> {
    /// Takes a ticket and spins until it is served; when CPUs may be
    /// descheduled while spinning ([`vcpu_preemptible`]), takes the lock
    /// by test-and-set instead (see [`lock_preemptible`](Self::lock_preemptible)).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// static LOCK: TicketLock = TicketLock::new();
    /// LOCK.lock(); // takes a ticket, spins until it is served
    /// // SAFETY: held by this context.
    /// unsafe { LOCK.unlock() };
    /// ```
    #[doc(alias = "arch_spin_lock")]
    #[inline]
    pub fn lock(&self) {
        if UP {
            return self.lock_up();
        }
        if vcpu_preemptible() {
            return self.lock_preemptible();
        }
        let ticket = self.take_ticket();
        // Acquire pairs with the Release store in `unlock`: the critical
        // section that served our ticket happens-before ours. The line is
        // this CPU's after the `fetch_add`, so the load is a hit.
        if self.owner.load(Ordering::Acquire) == ticket {
            return;
        }
        self.lock_slow(ticket);
    }

    /// Waits until `ticket` is served, watching `owner` for a stall (the
    /// kernel's `StallWatch`: no hand-off for
    /// [`STALL_BOUND_MS`](crate::kernel::STALL_BOUND_MS) means a CPU ahead
    /// is descheduled; in watched FIFO mode the locks then switch to
    /// test-and-set). Gives the CPU away every
    /// [`SPIN_LIMIT`](crate::kernel::SPIN_LIMIT) rounds through the
    /// kernel's [`SpinWait`](crate::kernel::SpinWait), as the queued lock's
    /// FIFO waiters do, so that the queue stays live behind a descheduled
    /// CPU. Out of line: only contended acquisitions pay for the call.
    #[inline(never)]
    fn lock_slow(&self, ticket: u32) {
        let mut watch = StallWatch::new(StallSite::Ticket);
        loop {
            // Acquire pairs with the Release store in `unlock`.
            let owner = self.owner.load(Ordering::Acquire);
            if owner == ticket {
                return;
            }
            watch.wait::<R>(|| owner, true);
        }
    }

    /// Takes the lock without a ticket: waits (read-only, with bounded
    /// exponential backoff, giving the CPU away now and then through the
    /// kernel's [`SpinWait`](crate::kernel::SpinWait)) until it looks free,
    /// then tries [`try_lock`](Self::try_lock). A waiter that is
    /// descheduled holds no place in a queue, so the lock never waits for
    /// it: fairness is traded for progress, as Linux's `virt_spin_lock`
    /// does in guests. Used by [`lock`](Self::lock) when
    /// [`vcpu_preemptible`] is set; a lock may be taken both ways at once
    /// (a test-and-set taker only succeeds when no ticket is outstanding).
    ///
    /// The uncontended case is inline, waiting out of line.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::TicketLock;
    ///
    /// // A guest that knows its vCPUs can be descheduled: never queue behind one.
    /// let lock = TicketLock::new();
    /// lock.lock_preemptible(); // `virt_spin_lock`: test-and-set with backoff
    /// // SAFETY: held by this context.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "virt_spin_lock")]
    #[inline]
    pub fn lock_preemptible(&self) {
        if !self.try_lock() {
            self.lock_preemptible_slow();
        }
    }

    #[inline(never)]
    fn lock_preemptible_slow(&self) {
        let mut backoff = Backoff::new();
        // `try_lock` reads before it writes: waiting is read-only.
        while !self.try_lock() {
            backoff.backoff::<R>();
        }
    }
}

// ---- the single-CPU build (`KSYNC_MAX_CPUS=1`, see `up`) -------------------

impl<R> TicketLock<R> {
    /// [`try_lock`](Self::try_lock) on one CPU: loads and two stores.
    #[inline(always)]
    fn try_lock_up(&self) -> bool {
        // Relaxed loads and stores: on one CPU only an interrupt handler
        // can run between them (the `up` module's argument). A handler
        // that takes and releases the lock between the loads and the first
        // store moves both fields on by one; storing `next` alone would
        // then leave them equal, a free lock that this CPU believes it
        // holds. So both are stored, `next` first: the lock is held from
        // that store on (a handler finds `owner != next`), and the second
        // puts back the `owner` read, whatever a handler did before.
        // The two loads are one snapshot only if no handler took the lock
        // between them: one that did moved `next` on, and a second load
        // of it tells (a handler that found the lock held changed nothing).
        let owner = loop {
            let next = self.next.load(Ordering::Relaxed);
            let owner = self.owner.load(Ordering::Relaxed);
            if owner == next {
                break owner;
            }
            if self.next.load(Ordering::Relaxed) == next {
                return false;
            }
        };
        self.next.store(bump(owner), Ordering::Relaxed);
        self.owner.store(owner, Ordering::Relaxed);
        up::acquired();
        true
    }

    /// [`unlock`](Self::unlock) on one CPU: serve the next ticket with a
    /// store (nobody else writes `owner`).
    ///
    /// # Safety
    /// As for [`unlock`](Self::unlock).
    #[inline(always)]
    unsafe fn unlock_up(&self) {
        let owner = self.owner.load(Ordering::Relaxed);
        debug_assert!(
            owner != self.next.load(Ordering::Relaxed),
            "unlock of a ticket lock that is not held"
        );
        up::releasing();
        // Relaxed: `releasing` keeps the critical section above it; a
        // handler that takes the lock next runs after it on this CPU.
        self.owner.store(bump(owner), Ordering::Relaxed);
    }
}

impl<R: RelaxStrategy> TicketLock<R> {
    /// [`lock`](Self::lock) on one CPU.
    #[inline(always)]
    fn lock_up(&self) {
        if !self.try_lock_up() {
            self.lock_up_held();
        }
    }

    /// The lock is held on the only CPU: a recursion (panics in debug
    /// builds); release builds spin, as the SMP lock would.
    #[cold]
    #[inline(never)]
    fn lock_up_held(&self) {
        up::held_on_entry("ticket lock");
        while !self.try_lock_up() {
            relax::<R>();
        }
    }
}

impl<R> Default for TicketLock<R> {
    fn default() -> Self {
        Self::with_relax()
    }
}

impl<R> fmt::Debug for TicketLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (owner, next) = self.tickets();
        f.debug_struct("TicketLock")
            .field("owner", &owner)
            .field("next", &next)
            .finish()
    }
}

#[cfg(feature = "defmt")]
impl<R> defmt::Format for TicketLock<R> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "TicketLock {{ owner: {}, next: {} }}",
            self.tickets().0,
            self.tickets().1
        )
    }
}

tracked_constructors!(TicketLock, RawTicketLock, "ticket lock");

/// The ticket lock with its [lockdep](crate::lockdep) class: what kernels
/// use (through [`TicketMutex`](super::TicketMutex) or by hand).
///
/// # Zeroed memory
///
/// All-zero bytes are a valid unlocked lock in every build (`Zeroable` with
/// the `bytemuck` feature). Without `lockdep` they are exactly what `new`
/// builds; with it, a zeroed lock is its own lockdep class, as `lock_api`'s
/// `INIT` is (see [`Map`](crate::lockdep::Map#zeroed-memory)).
#[doc(alias = "arch_spinlock_t")]
pub type RawTicketLock<R = Spin, G = PreemptDisabled> = RawSpinlock<TicketLock<R>, G>;

impl<R: RelaxStrategy, G: SpinGuardian> RawSpinlock<TicketLock<R>, G> {
    /// [`lock`](RawSpinlock::lock) waiting by test-and-set
    /// ([`TicketLock::lock_preemptible`]) whatever the mode: disables what
    /// `G` disables, tells lockdep, keeps the saved state and (debug
    /// builds) the owner record, as `lock` does, so that
    /// [`unlock`](RawSpinlock::unlock) releases it like any other hold.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::spinlock::RawTicketLock;
    ///
    /// let lock = RawTicketLock::new();
    /// lock.lock_preemptible(); // preemption off and lockdep, as `lock`
    /// // SAFETY: taken through this `RawSpinlock` just above.
    /// unsafe { lock.unlock() };
    /// ```
    #[doc(alias = "virt_spin_lock")]
    #[inline]
    #[cfg_attr(any(feature = "lockdep", debug_assertions), track_caller)]
    pub fn lock_preemptible(&self) {
        self.lock_with(0, TicketLock::lock_preemptible);
    }
}

// SAFETY: `lock` returns only once this CPU's ticket is served (or its
// test-and-set took a free lock with no ticket outstanding), and `owner`
// moves on only by the holder's unlock: one holder at a time. Acquire on
// taking, Release on unlock, as documented on the methods. Forgetting to
// unlock leaves the lock held.
unsafe impl<R: RelaxStrategy> ArchSpinlock for TicketLock<R> {
    #[cfg(not(ksync_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const UNLOCKED: Self = Self::with_relax();

    #[inline]
    fn lock(&self) {
        TicketLock::lock(self)
    }

    #[inline]
    fn try_lock(&self) -> bool {
        TicketLock::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { TicketLock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        TicketLock::is_locked(self)
    }
}

// SAFETY: a ticket unlock serves the next ticket, the longest waiter in
// FIFO mode; `is_contended` counts outstanding tickets.
unsafe impl<R: RelaxStrategy> FairArchSpinlock for TicketLock<R> {
    #[inline]
    fn is_contended(&self) -> bool {
        TicketLock::is_contended(self)
    }
}

// ---- crate-internal IRQ-saving guard ----------------------------------------

/// A [`RawTicketLock`] held by the crate's own code, released when the
/// guard drops: the RAII form of `lock`/`unlock` pairs inside the crate.
///
/// `I` is the saved interrupt state ([`IrqState`], from [`lock_irqsave`])
/// or `()` (from [`try_lock`]). Fields drop after [`Drop::drop`], so the
/// lock is free before interrupts are restored.
///
/// # Invariants
/// `lock` is held, taken by the function that built the guard, and is
/// released only by this guard's `Drop`.
#[must_use = "dropping the guard unlocks at once"]
pub(crate) struct LockGuard<'a, I = ()> {
    lock: &'a RawTicketLock,
    _irq: I,
}

/// Saves and masks local interrupts, then takes `lock`; the guard unlocks,
/// then restores the interrupt state (`spin_lock_irqsave` /
/// `spin_unlock_irqrestore`).
#[inline]
#[cfg_attr(feature = "lockdep", track_caller)]
pub(crate) fn lock_irqsave(
    lock: &RawTicketLock,
) -> LockGuard<'_, (IrqState, crate::kernel::PreemptGuard)> {
    // Interrupts off before spinning: a handler on this CPU must not find
    // the lock held by the code it interrupted. Preemption off once more
    // around the lock's own count, so that the release restores the
    // interrupts (the tuple's first field) before the count returns to
    // zero (its second): the preemption point there is not lost with
    // interrupts masked (`spin_unlock_irqrestore`'s order).
    let irq = IrqState::save();
    let preempt = crate::kernel::preempt_disable();
    lock.lock();
    LockGuard {
        lock,
        _irq: (irq, preempt),
    }
}

/// Takes `lock` if nobody holds or waits for it, without touching the
/// interrupt state (for locks that are only ever try-locked, which never
/// spin, or never taken from interrupt handlers).
#[inline]
#[cfg_attr(feature = "lockdep", track_caller)]
pub(crate) fn try_lock(lock: &RawTicketLock) -> Option<LockGuard<'_>> {
    // `then`, not `then_some`: a guard built on failure would unlock a
    // lock that someone else holds when it drops.
    lock.try_lock().then(|| LockGuard { lock, _irq: () })
}

impl<I> Drop for LockGuard<'_, I> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard's invariant: the lock is held, and only this
        // drop releases it.
        unsafe { self.lock.unlock() }
    }
}
