//! lockdep: lock-order checking, Linux's lockdep for ksync's locks
//! (feature `lockdep`, off by default).
//!
//! A deadlock between two CPUs needs an unlucky interleaving: CPU 0 holds
//! `A` and waits for `B` at the very moment CPU 1 holds `B` and waits for
//! `A`. Tests rarely hit that moment; a machine in the field eventually
//! does. lockdep does not wait for it. It records, for every *class* of
//! locks, which classes were held when it was taken, and reports a bug the
//! first time a program takes locks in an order that *could* deadlock, even
//! if this time nothing went wrong: once `A` then `B` has been seen
//! anywhere, `B` then `A` anywhere is a report.
//!
//! # What it reports
//!
//! Every report goes to the kernel's
//! [`Kernel::lockdep_report`](crate::kernel::Kernel::lockdep_report) hook
//! (default: `defmt` when that feature is on, then a panic with the
//! report). The [`Report`] implements `Display`; its [`kind`](Report::kind)
//! says which of these it is:
//!
//! * [`Cycle`](ReportKind::Cycle): taking a lock adds an edge "held class
//!   -> new class" that closes a cycle in the dependency graph (`A -> B`
//!   seen, now `B -> A`; or `A -> B -> C` seen, now `C -> A`). Found by a
//!   breadth-first search from the new class when an edge is added for the
//!   first time, so each order is checked once, not at every acquisition.
//! * [`IrqInversion`](ReportKind::IrqInversion): a class is taken in an
//!   interrupt handler and also, elsewhere, with interrupts enabled. The
//!   handler can interrupt the second holder on its own CPU and spin
//!   forever. It needs the kernel to say when it runs a handler
//!   ([`Kernel::in_interrupt`](crate::kernel::Kernel::in_interrupt)).
//!   Reads of a reader-writer lock count apart, as Linux's `_READ` usage
//!   bits: a read in a handler conflicts with a write with interrupts
//!   enabled, a write in a handler with a read too, and a read in a
//!   handler with a read with interrupts enabled not at all
//!   ([`RawRwSpinLock`](crate::spinlock::RawRwSpinLock#lock-order-checking)).
//! * [`IrqSafeToUnsafe`](ReportKind::IrqSafeToUnsafe): the same across
//!   classes, as Linux's `check_irq_usage`. A class is *IRQ-safe* once it
//!   is taken in an interrupt handler, *IRQ-unsafe* once taken with
//!   interrupts enabled outside one; an IRQ-safe class that leads, by one
//!   edge or a chain of them, to an IRQ-unsafe one can deadlock: CPU 0
//!   holds `B` with interrupts enabled, an interrupt on CPU 0 spins on
//!   `A`, CPU 1 holds `A` (interrupts masked) and waits for `B`. Found the
//!   first time the pattern is complete, at whichever part comes last: a
//!   new edge `A -> B` searches backward from `A` for an IRQ-safe class
//!   and forward from `B` for an IRQ-unsafe one; a class's first use in a
//!   handler searches forward from it, its first use with interrupts
//!   enabled backward. The report names both classes, where each was
//!   first used so, and the chain of edges between them. Taking a lock
//!   with interrupts masked (an IRQ-saving lock, or a plain one inside
//!   [`IrqState::save`](crate::kernel::irq::IrqState::save)) makes it
//!   neither: only a handler's use makes a class IRQ-safe.
//! * [`Recursion`](ReportKind::Recursion): a CPU takes a lock of a class
//!   it already holds: the same lock (a certain deadlock) or another lock
//!   of the class, which deadlocks against a CPU nesting the two the other
//!   way round. Deliberate, ordered nesting says so with a *subclass*
//!   (`lock_nested`, below).
//! * [`BadUnlock`](ReportKind::BadUnlock): a CPU releases a lock it does
//!   not hold.
//! * [`LocksHeld`](ReportKind::LocksHeld): [`assert_no_locks_held`] found
//!   held locks (RCU's `synchronize` and `barrier` ask it: waiting for a
//!   grace period with a spinlock held can wait forever).
//! * [`NotHeld`](ReportKind::NotHeld): a holder check
//!   ([`Map::assert_held`], the spinlocks' `assert_held`, Linux's
//!   `lockdep_assert_held`) found the lock not held by this CPU.
//! * [`TableFull`](ReportKind::TableFull) and
//!   [`TooDeep`](ReportKind::TooDeep): a fixed table ran out (below);
//!   checking turns itself off for good after this one report, and the
//!   locks go on working.
//!
//! Each distinct problem is reported once: a closing edge is recorded after
//! its report (the same order again finds the edge known), a class's
//! interrupt inversion and its recursion are reported once per class, and
//! an IRQ-safe -> IRQ-unsafe chain once per IRQ-unsafe class (its fix,
//! taking it with interrupts masked, covers every IRQ-safe class that
//! leads to it; one that is also IRQ-safe has its inversion report).
//!
//! # Which locks take part
//!
//! All of ksync's: the ticket, TTAS and queued locks and their `lock_api`
//! mutexes ([`spinlock`](crate::spinlock#lock-order-checking)), the
//! IRQ-saving forms (recorded as taken with interrupts off), the lock in
//! [`LockRef`](crate::LockRef), [`BrLock`](crate::brlock::BrLock)'s local
//! and global locks (one class), the per-CPU rw locks' readers and writers
//! ([`percpu_rwlock`](crate::percpu_rwlock#lock-order-checking)), the
//! sleeping [`Mutex`](crate::mutex::Mutex),
//! [`RwSemaphore`](crate::rwsem#lock-order-checking) and
//! [`PerCpuRwSemaphore`](crate::percpu_rwsem#lock-order-checking) (sleeping
//! acquisitions; their async forms are not tracked),
//! [`SeqLock`](crate::seqlock::SeqLock) writers (and its spinning readers
//! in interrupt handlers, checked against the writers' use of interrupts:
//! [`seqlock`](crate::seqlock#interrupts)), and the crate's own locks
//! (RCU's grace-period engine, callback lists and `RcuSync`, SRCU's
//! updaters' lock, the per-CPU counters' fold lock). An RCU read section is
//! a pseudo-lock of the class `"rcu_read_lock"`, taken like a try-lock
//! (read sections nest and never wait); RCU's waits (`synchronize`,
//! `cond_synchronize`, `barrier`, `RcuSync::enter`, SRCU's `synchronize`)
//! and [`quiescent_state`](crate::rcu::quiescent_state) report a CPU that
//! holds any lock or read section ([`assert_no_locks_held`]). SRCU read
//! sections are not tracked.
//!
//! # Lock classes
//!
//! lockdep reasons about classes, not individual locks: the thousand
//! dentries' locks are one class, so an order seen between two dentries'
//! locks on one CPU is checked against every other pair. A lock's class is
//! chosen when the lock is built, in this order:
//!
//! 1. An explicit key: a lock given a [`LockClassKey`] (made with
//!    [`lock_class!`](crate::lock_class), Linux's `lockdep_set_class` and
//!    Rust-for-Linux's `static_lock_class!`) belongs to that key's class,
//!    named by the key's name: `set_lock_class` on [`LockRef`](crate::LockRef),
//!    [`SeqLock`](crate::seqlock::SeqLock) and
//!    [`BrLock`](crate::brlock::BrLock), or [`Map::with_key`].
//! 2. The constructor's call site: `new` (and `from_fn`, `default`) are
//!    `#[track_caller]` in `lockdep` builds, so every lock built by one
//!    line of source shares a class, named `file:line:column`. A lock in a
//!    `static` is built by its own initialiser, so it is its own class;
//!    locks embedded in objects made by one constructor function share the
//!    class of the line in that function. (`Location::caller` is `const`,
//!    so this works in `const fn new` and in `static`s.)
//! 3. The lock itself ([`Map::per_instance`]): for constructors that have
//!    no call site to offer, such as `lock_api`'s `RawMutex::INIT`
//!    constant. The class is registered on the first acquisition (named
//!    by the lock's address then) and freed when the lock is dropped.
//!
//! A *subclass* (`0..MAX_SUBCLASSES`, Linux's `spin_lock_nested`) splits a
//! class for deliberate nesting: taking a parent's lock with subclass 0 and
//! a child's with subclass 1 records the order "class/0 -> class/1" and is
//! not recursion. [`LockRef::lock_nested`](crate::LockRef::lock_nested) takes one.
//!
//! # Where it runs, and what it costs
//!
//! Every lock has a [`Map`] field: with the feature off a zero-sized type
//! whose methods are empty, so the lock is byte for byte what it is without
//! lockdep (`tests/lockdep_size.rs` checks the sizes; the calls compile to
//! nothing). With it on, a `Map` holds the class key and a cached class
//! index (24 bytes), and each acquisition:
//!
//! 1. asks the kernel whether it is in an interrupt handler and whether
//!    interrupts are masked, then masks them itself and looks up the
//!    current task's *held-lock stack* (at most [`MAX_LOCK_DEPTH`]
//!    entries, one stack per task that holds locks, no allocation);
//! 2. checks the stack for the class (recursion), and the class's usage
//!    bits (interrupt inversion; a new usage bit searches the graph for
//!    an IRQ-safe -> IRQ-unsafe chain);
//! 3. for the lock on top of the stack (and those under it down to the
//!    first one that was not try-locked, as Linux does) checks the bit
//!    "held class -> this class" in the dependency matrix (a new edge
//!    searches for a cycle, then for an IRQ-safe -> IRQ-unsafe chain);
//! 4. pushes the new entry.
//!
//! Only what is new (a class's first use, a usage bit or an edge seen for
//! the first time) takes the engine's graph lock: a plain spin flag that
//! lockdep does not track, taken with interrupts masked, so lockdep never
//! recurses into itself. An order seen before costs a few loads. The
//! searches are breadth-first over the matrix (forward) and its transpose
//! (backward), with a visited bit, a queue slot and a parent per class in
//! static scratch space: each class is visited at most once, so a search
//! cannot run out of room or recurse, and costs at most one matrix row
//! per class. A release pops its entry from the task's stack (any entry:
//! locks may be released out of order). `benches/lockdep.rs` measures it:
//! see the README.
//!
//! The held-lock stacks are per task, as Linux's (`current->held_locks`):
//! the task is the kernel's
//! [`Kernel::current_task`](crate::kernel::Kernel::current_task), so a
//! task that holds a sleeping lock ([`Mutex`](crate::mutex::Mutex)) may
//! sleep, let other tasks run on its CPU and migrate without confusing
//! them, and an interrupt handler runs on the stack of the task it
//! interrupted (as in Linux; the IRQ rules below tell its locks apart).
//! A kernel without a scheduler keeps the default token, the CPU's id + 1:
//! then a stack per CPU. A task has a stack only while it holds locks,
//! from a table of `KSYNC_LOCKDEP_TASKS` (default: 2 per possible CPU).
//! Sleeping locks are marked on the stack: "locks held" checks that are
//! about sleeping ([`assert_no_locks_held`], which
//! [`wait::might_sleep`](crate::wait::might_sleep) and RCU's waits call)
//! count only the others.
//!
//! lockdep runs on the kernel's hooks ([`set_kernel!`](crate::set_kernel)):
//! this CPU's id, its interrupt masking, and two hooks of its own,
//! [`in_interrupt`](crate::kernel::Kernel::in_interrupt) and
//! [`irqs_disabled`](crate::kernel::Kernel::irqs_disabled). Those hooks
//! must not take ksync locks (lockdep turns a nested call away, and the
//! lock goes unrecorded). Masking done through ksync (the IRQ-saving locks
//! and every [`IrqState`](crate::kernel::irq::IrqState), kernel hooks or
//! [`ArchIrq`](crate::kernel::irq::ArchIrq)) is counted per CPU, so a plain
//! lock taken inside `IrqState::save()` counts as taken with interrupts
//! off.
//!
//! Acquisitions are recorded *before* a lock spins, so a real deadlock is
//! reported before it hangs; try-locks are recorded once they succeed, and
//! add no edge into the try-locked class (a try-lock cannot wait).
//! Dependencies are only recorded between locks taken in the same context:
//! locks taken by an interrupt handler do not depend on those held by the
//! code it interrupted (as in Linux, whose IRQ-usage rules cover that
//! case).
//!
//! # Fixed tables
//!
//! Everything lives in static tables sized at build time:
//!
//! | table | size | set with |
//! |---|---|---|
//! | classes | [`MAX_CLASSES`] (256) | `KSYNC_LOCKDEP_CLASSES` |
//! | dependencies (edges) | [`MAX_DEPENDENCIES`] (8 per class) | `KSYNC_LOCKDEP_DEPENDENCIES` |
//! | held locks per task | [`MAX_LOCK_DEPTH`] (48, Linux's) | fixed |
//! | tasks holding locks at once | 2 per possible CPU | `KSYNC_LOCKDEP_TASKS` |
//! | dependency matrix | one bit per pair of classes, its transpose, and the orders seen with the outer lock held for writing (3 × 8 KiB at 256) | follows the classes |
//!
//! (set the variables like `KSYNC_MAX_CPUS`, e.g. in the kernel's
//! `.cargo/config.toml` under `[env]`). At the defaults and 64 CPUs the
//! tables take about 240 KiB (the held-lock stacks, 128 of them, about
//! 150 KiB). A full table is reported once and turns
//! checking off; nothing is overwritten.
//!
//! # Reading a report
//!
//! A cycle, from `tests/lockdep.rs`: the `static`s `A` (line 57) and `B`
//! (line 58) are two classes; CPU 0 took `A` then `B` (lines 71, 72) and
//! released both; later CPU 1 took `B` (line 81) and is now taking `A`
//! (line 83). Nothing hung, yet:
//!
//! ```text
//! ksync lockdep: possible circular locking dependency, on CPU 1
//!   taking   class tests/lockdep.rs:57:21 at tests/lockdep.rs:83:20
//!   holding  class tests/lockdep.rs:58:21 at tests/lockdep.rs:81:20
//!   which closes this cycle of lock classes (each edge "held -> taken" where it was first seen):
//!     #0 tests/lockdep.rs:58:21 -> tests/lockdep.rs:57:21
//!          tests/lockdep.rs:58:21 taken at tests/lockdep.rs:81:20, then tests/lockdep.rs:57:21 at tests/lockdep.rs:83:20
//!     #1 tests/lockdep.rs:57:21 -> tests/lockdep.rs:58:21
//!          tests/lockdep.rs:57:21 taken at tests/lockdep.rs:71:24, then tests/lockdep.rs:58:21 at tests/lockdep.rs:72:24
//!   a CPU following one edge while another follows the rest deadlocks: take these locks in one order
//! ```
//!
//! * A class is named by where its locks are built: `file:line:column` of
//!   the `new` call (here the two `static`s' initialisers), or its key's
//!   name in quotes (`"inode"`); `/1` after it is a subclass. A lock of
//!   its own class is `lock@<address>`.
//! * `taking` is the acquisition that found the bug (its class, then where
//!   it is being taken), `holding` the held lock it would depend on.
//! * The cycle lists edges "held class -> class taken while holding it".
//!   Edge `#0` is the one being added now; the others are the path that
//!   already led from the class being taken back to the held one, each
//!   with the two places where it was seen first (the outer lock taken
//!   here, then the inner one there). Follow them in the source: every
//!   edge is a place that nests two locks.
//! * To fix it, pick one order and change the code of one edge (here: take
//!   `A` before `B` at lines 81-83), or, if the two are locks of one class
//!   that nest in a fixed order (parent before child), take the inner one
//!   with a subclass.
//!
//! The other reports follow the same pattern: a headline naming the bug and
//! the CPU, then `taking`/`holding` (recursion), the use in a handler and
//! the use with interrupts enabled (interrupt inversion), the IRQ-safe and
//! the IRQ-unsafe class with their first such uses and the chain of edges
//! from one to the other (`IrqSafeToUnsafe`), or the list of held locks
//! (`LocksHeld`, `TooDeep`), each with its class and location.
//!
//! # For lock implementers
//!
//! [`LockRef`](crate::LockRef) records only when its lock is taken
//! ([`lock`](crate::LockRef::lock), and the lockless operations' fallbacks
//! to the lock); its lockless updates take no lock and record nothing, as
//! in Linux.
//!
//! A lock joins in with a [`Map`] field and three calls:
//! [`Map::acquire`] before it spins (or after a try-lock succeeded, with
//! `try_lock` set), [`Map::release`] when it unlocks, or
//! [`Map::acquire_guard`], whose [`Acquired`] guard releases on drop. The
//! lock's `new` and locking methods carry
//! `#[cfg_attr(feature = "lockdep", track_caller)]`, so that classes and
//! acquisitions are named by the user's source lines, and nothing changes
//! without the feature.
//!
//! # Example
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::LockRef;
//! use ksync::lockdep;
//!
//! struct Inode {
//!     lockref: LockRef,
//! }
//!
//! impl Inode {
//!     fn new() -> Self {
//!         let mut lockref = LockRef::new(1);
//!         // Without this line, every inode's lock is the class of the
//!         // `LockRef::new` line above; with it, the class is "inode".
//!         lockref.set_lock_class(ksync::lock_class!("inode"));
//!         Inode { lockref }
//!     }
//! }
//!
//! let (parent, child) = (Inode::new(), Inode::new());
//! let _p = parent.lockref.lock();
//! // Same class, nested on purpose, always parent first: a subclass.
//! let _c = child.lockref.lock_nested(1);
//! assert_eq!(lockdep::held_lock_count(), if cfg!(feature = "lockdep") { 2 } else { 0 });
//! ```

use core::fmt;
#[cfg(not(feature = "lockdep"))]
use core::marker::PhantomData;

#[cfg(feature = "lockdep")]
mod engine;
#[cfg(feature = "lockdep")]
mod graph;

pub use crate::kernel::lockdep_report::{Class, Link, Report, ReportKind, Site};

#[cfg(all(feature = "lockdep", feature = "test-hooks"))]
pub(crate) use engine::{cpu_offline, task_exit};

pub use crate::kernel::lockdep_report::MAX_LOCK_DEPTH;

/// The number of subclasses of a class (`0..MAX_SUBCLASSES`), as Linux's
/// `MAX_LOCKDEP_SUBCLASSES`.
pub const MAX_SUBCLASSES: u8 = 8;

/// The number of lock classes lockdep can tell apart (every subclass
/// counts): `KSYNC_LOCKDEP_CLASSES` at build time, 256 by default.
pub const MAX_CLASSES: usize = match option_env!("KSYNC_LOCKDEP_CLASSES") {
    Some(text) => match crate::kernel::parse_setting(text, 1 << 14) {
        Some(value) if value >= 2 => value,
        _ => panic!("KSYNC_LOCKDEP_CLASSES must be a decimal number from 2 to 16384"),
    },
    None => 256,
};

/// The number of dependencies (edges "class A was held when class B was
/// taken") lockdep records: `KSYNC_LOCKDEP_DEPENDENCIES` at build time,
/// 8 per class by default.
pub const MAX_DEPENDENCIES: usize = match option_env!("KSYNC_LOCKDEP_DEPENDENCIES") {
    Some(text) => match crate::kernel::parse_setting(text, 1 << 20) {
        Some(value) if value >= 2 => value,
        _ => panic!("KSYNC_LOCKDEP_DEPENDENCIES must be a decimal number from 2 to 1048576"),
    },
    None => 8 * MAX_CLASSES,
};

/// An explicit lock class: every lock given this key (by `set_lock_class`
/// or [`Map::with_key`]) belongs to one class, named `name` in reports.
/// The key's address is its identity, so it lives in a `static`; make one
/// with [`lock_class!`](crate::lock_class).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::LockClassKey;
/// use ksync::spinlock::RawSpinlock;
/// # use ksync::spinlock::TicketLock;
///
/// // Every runqueue lock, wherever it is built, is one class "rq->lock".
/// static RQ_LOCK_KEY: LockClassKey = LockClassKey::new("rq->lock");
///
/// let mut rq_lock = RawSpinlock::<TicketLock>::new();
/// rq_lock.set_lock_class(&RQ_LOCK_KEY);
/// ```
#[doc(alias("lock_class_key", "static_lock_class"))]
pub struct LockClassKey {
    name: &'static str,
}

impl LockClassKey {
    /// A key named `name`. Put it in a `static` (or leak it): two keys are
    /// two classes even if their names are equal.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::{LockClassKey, Map};
    ///
    /// static INODE_KEY: LockClassKey = LockClassKey::new("inode");
    /// static I_LOCK: Map = Map::with_key(&INODE_KEY); // reports say "inode"
    /// # let _ = &I_LOCK;
    /// ```
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }

    /// The name reports give the class.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let key = ksync::lock_class!("dentry->d_lock");
    /// assert_eq!(key.name(), "dentry->d_lock");
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl fmt::Debug for LockClassKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockClassKey").field(&self.name).finish()
    }
}

/// A `&'static` [`LockClassKey`] named by the argument, from a `static`
/// this macro defines (each use of the macro is its own class), as
/// Rust-for-Linux's `static_lock_class!`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// let mut lockref = ksync::LockRef::new(0);
/// lockref.set_lock_class(ksync::lock_class!("dentry"));
/// ```
#[macro_export]
macro_rules! lock_class {
    ($name:expr) => {{
        static KEY: $crate::lockdep::LockClassKey = $crate::lockdep::LockClassKey::new($name);
        &KEY
    }};
}

/// How this CPU's locks look to lockdep: the number of locks this CPU
/// holds now (in every context; 0 without the feature or once checking
/// stopped).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep;
/// use ksync::spinlock::TicketMutex;
///
/// let lock = TicketMutex::new(());
/// let _guard = lock.lock();
/// // `lockdep_depth(current)`: 0 without the feature.
/// assert_eq!(lockdep::held_lock_count(), usize::from(cfg!(feature = "lockdep")));
/// ```
#[doc(alias = "lockdep_depth")]
#[inline]
#[must_use]
pub fn held_lock_count() -> usize {
    #[cfg(feature = "lockdep")]
    return engine::held_lock_count();
    #[cfg(not(feature = "lockdep"))]
    0
}

/// The number of locks other than sleeping ones (spinlocks, ...) this CPU
/// holds, as lockdep sees them: those [`assert_no_locks_held`] reports
/// (0 without the feature, and once lockdep turned itself off after a
/// report, when `assert_no_locks_held` reports nothing).
#[inline]
#[cfg_attr(not(debug_assertions), allow(dead_code))] // might_sleep's, debug only
pub(crate) fn held_spinning_lock_count() -> usize {
    #[cfg(feature = "lockdep")]
    return engine::held_spinning_lock_count();
    #[cfg(not(feature = "lockdep"))]
    0
}

/// Reports ([`LocksHeld`](ReportKind::LocksHeld)) if the current task
/// holds any lock other than sleeping ones: for code that must not run
/// under a spinlock, such as waiting for an RCU grace period or sleeping. `what` names that code in the report. Does nothing
/// without the feature.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// ksync::lockdep::assert_no_locks_held("rcu::synchronize");
/// ```
#[doc(alias = "lockdep_assert_none_held_once")]
#[cfg_attr(feature = "lockdep", track_caller)]
#[inline]
pub fn assert_no_locks_held(what: &'static str) {
    #[cfg(feature = "lockdep")]
    engine::assert_no_locks_held(what, core::panic::Location::caller());
    #[cfg(not(feature = "lockdep"))]
    let _ = what;
}

// ---- the per-lock field -------------------------------------------------------

/// A lock's lockdep identity (Linux's `struct lockdep_map`): the field a
/// lock carries to take part. Zero-sized, with empty methods, without the
/// `lockdep` feature.
///
/// See the [module docs](self#for-lock-implementers) for how a lock uses
/// it and [`Lock classes`](self#lock-classes) for how the class is chosen.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::Map;
///
/// static MAP: Map = Map::new(); // its own class, named by this line
/// MAP.acquire(0, false, false); // before spinning on the lock it tracks
/// MAP.release(); // when unlocking it
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are a valid `Map` in every build: without `lockdep` it
/// has no bytes; with it, zero is a map that is its own class
/// ([`per_instance`](Self::per_instance), named by its address in
/// reports) with no class registered yet. So a lock in zero-filled memory
/// (Linux's `kzalloc`) is a valid, unlocked lock with `lockdep` too; give
/// it a named class with `set_lock_class` before first use if its reports
/// should name one.
#[doc(alias = "lockdep_map")]
pub struct Map {
    #[cfg(feature = "lockdep")]
    key: MapKey,
    /// Index + 1 of the class of subclass 0, 0 until registered.
    #[cfg(feature = "lockdep")]
    class: crate::sync::AtomicU32,
    #[cfg(not(feature = "lockdep"))]
    _none: (),
}

/// Where a [`Map`]'s class comes from.
///
/// `repr(usize)` with `Instance` at discriminant 0: the layout is defined
/// (a tag word, then the variant's fields), so an all-zero `Map` is a
/// valid per-instance map with no class registered yet, and a lock in
/// zero-filled memory is a valid lock in `lockdep` builds too (see
/// [`Map`]'s "Zeroed memory").
#[cfg(feature = "lockdep")]
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub(crate) enum MapKey {
    /// The lock itself (what all-zero bytes are).
    Instance = 0,
    /// The constructor's call site.
    Location(&'static core::panic::Location<'static>),
    /// An explicit key.
    Named(&'static LockClassKey),
}

// Off, a `Map` costs nothing: the size check every lock relies on.
#[cfg(not(feature = "lockdep"))]
const _: () = assert!(size_of::<Map>() == 0 && size_of::<Acquired<'_>>() == 0);

#[cfg(feature = "lockdep")]
impl Map {
    const fn with(key: MapKey) -> Self {
        Self {
            key,
            class: crate::sync::AtomicU32::new(0),
        }
    }

    /// A lock whose class is the caller's source location (the place the
    /// lock is built: put `#[track_caller]` on its constructor).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::AtomicBool;
    /// use ksync::lockdep::Map;
    ///
    /// /// Linux's `bit_spin_lock`, taking part in lockdep.
    /// struct BitLock { locked: AtomicBool, dep_map: Map }
    ///
    /// impl BitLock {
    ///     #[track_caller] // the class is the line that builds the lock
    ///     const fn new() -> Self {
    ///         Self { locked: AtomicBool::new(false), dep_map: Map::new() }
    ///     }
    /// }
    /// # let _ = BitLock::new();
    /// ```
    #[track_caller]
    pub const fn new() -> Self {
        Self::with(MapKey::Location(core::panic::Location::caller()))
    }

    /// A lock of `key`'s class.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    ///
    /// // A lock built in many places, one class: "journal->j_state_lock".
    /// fn state_map() -> Map {
    ///     Map::with_key(ksync::lock_class!("journal->j_state_lock"))
    /// }
    /// let (a, b) = (state_map(), state_map());
    /// let _a = a.acquire_guard(0, false, false);
    /// let _b = b.acquire_guard(1, false, false); // same class: nest by subclass
    /// ```
    pub const fn with_key(key: &'static LockClassKey) -> Self {
        Self::with(MapKey::Named(key))
    }

    /// A lock that is its own class, registered when first taken and freed
    /// when the lock drops (for constructors without a call site, such as
    /// `lock_api`'s `INIT`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    ///
    /// // `lock_api`'s `INIT` has no call site to name: each lock its own class.
    /// struct RawBitLock { dep_map: Map }
    /// impl RawBitLock {
    ///     const INIT: Self = Self { dep_map: Map::per_instance() };
    /// }
    /// let lock = RawBitLock::INIT;
    /// lock.dep_map.acquire(0, false, false);
    /// lock.dep_map.release();
    /// ```
    pub const fn per_instance() -> Self {
        Self::with(MapKey::Instance)
    }

    /// Moves the lock to `key`'s class (Linux's `lockdep_set_class`): call
    /// it before the lock is first used.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    ///
    /// // `lockdep_set_class`: before first use, give a lock built in a
    /// // generic helper the class of what it protects.
    /// let mut map = Map::new();
    /// map.set_class(ksync::lock_class!("sk->sk_lock"));
    /// map.acquire(0, false, false);
    /// map.release();
    /// ```
    pub fn set_class(&mut self, key: &'static LockClassKey) {
        engine::forget(self);
        self.key = MapKey::Named(key);
        *self.class.get_mut() = 0;
    }

    /// Records that this CPU is taking the lock, at the caller's location.
    /// Call it before spinning (so a deadlock is reported before it
    /// hangs), or after a try-lock succeeded with `try_lock` set.
    /// `irqs_off`: the lock path itself masked interrupts (IRQ-saving
    /// locks). `subclass` is `0` unless nesting on purpose.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicBool, Ordering::{Acquire, Release}};
    /// use ksync::lockdep::Map;
    ///
    /// struct BitLock { locked: AtomicBool, dep_map: Map }
    /// impl BitLock {
    ///     #[track_caller]
    ///     fn lock(&self) {
    ///         self.dep_map.acquire(0, false, false); // before spinning: reported, not hung
    ///         while self.locked.swap(true, Acquire) { core::hint::spin_loop() }
    ///     }
    ///     fn try_lock(&self) -> bool {
    ///         let ok = !self.locked.swap(true, Acquire);
    ///         if ok { self.dep_map.acquire(0, true, false) } // after it succeeded
    ///         ok
    ///     }
    /// }
    /// # let l = BitLock { locked: AtomicBool::new(false), dep_map: Map::new() };
    /// # l.lock(); assert!(!l.try_lock()); l.dep_map.release(); l.locked.store(false, Release);
    /// ```
    ///
    /// # Panics
    /// If `subclass` is not below [`MAX_SUBCLASSES`].
    #[doc(alias = "lock_acquire")]
    #[track_caller]
    #[inline]
    pub fn acquire(&self, subclass: u8, try_lock: bool, irqs_off: bool) {
        self.record(
            subclass,
            try_lock,
            irqs_off,
            false,
            engine::Access::Exclusive,
        );
    }

    /// What every acquisition records, at the caller's caller's location.
    #[track_caller]
    #[inline(always)]
    fn record(
        &self,
        subclass: u8,
        try_lock: bool,
        irqs_off: bool,
        sleeping: bool,
        access: engine::Access,
    ) {
        engine::acquire(
            self,
            core::panic::Location::caller(),
            subclass,
            try_lock,
            irqs_off,
            sleeping,
            access,
        );
    }

    /// [`acquire`](Self::acquire) for a reader-writer lock's read
    /// (Linux's `lock_acquire_shared`, or with `recursive`
    /// `lock_acquire_shared_recursive`): its interrupt usage is tracked
    /// apart from writes (a read in a handler conflicts only with a write
    /// with interrupts enabled), and a `recursive` read (one that never
    /// waits behind a waiting writer) adds no lock order and is no
    /// recursion.
    #[track_caller]
    #[inline]
    pub(crate) fn acquire_read(&self, subclass: u8, try_lock: bool, recursive: bool) {
        let access = if recursive {
            engine::Access::SharedRecursive
        } else {
            engine::Access::Shared
        };
        self.record(subclass, try_lock, false, false, access);
    }

    /// [`acquire`](Self::acquire) for a sleeping lock (a mutex, an rw
    /// semaphore): its holder may sleep, so it does not count as a lock
    /// held where sleeping is not allowed
    /// ([`assert_no_locks_held`](super::assert_no_locks_held)).
    #[track_caller]
    #[inline]
    pub(crate) fn acquire_sleeping(&self, subclass: u8, try_lock: bool) {
        self.record(subclass, try_lock, false, true, engine::Access::Exclusive);
    }

    /// [`acquire_sleeping`](Self::acquire_sleeping), and a guard that
    /// records the release when it drops: for a wait that may give up (a
    /// timeout) or unwind; [`Acquired::keep`] once the lock is held.
    #[track_caller]
    #[inline]
    pub(crate) fn acquire_sleeping_guard(&self, subclass: u8, try_lock: bool) -> Acquired<'_> {
        self.acquire_sleeping(subclass, try_lock);
        Acquired { map: self }
    }

    /// Records that this CPU released the lock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicBool, Ordering::Release};
    /// use ksync::lockdep::Map;
    ///
    /// struct BitLock { locked: AtomicBool, dep_map: Map }
    /// impl BitLock {
    ///     fn unlock(&self) {
    ///         self.dep_map.release(); // `lock_release`, then the real unlock
    ///         self.locked.store(false, Release);
    ///     }
    /// }
    /// # let l = BitLock { locked: AtomicBool::new(true), dep_map: Map::new() };
    /// # l.dep_map.acquire(0, false, false); l.unlock();
    /// ```
    #[doc(alias = "lock_release")]
    #[track_caller]
    #[inline]
    pub fn release(&self) {
        engine::release(self, core::panic::Location::caller());
    }

    /// Whether this CPU holds the lock (Linux's `lockdep_is_held`):
    /// `None` once checking stopped (after a report that turns it off).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    ///
    /// let map = Map::new();
    /// let held = map.acquire_guard(0, false, false);
    /// // `lockdep_is_held`: `None` without the feature or once checking stopped.
    /// assert_ne!(map.is_held(), Some(false));
    /// drop(held);
    /// assert_ne!(map.is_held(), Some(true));
    /// ```
    #[doc(alias = "lockdep_is_held")]
    #[inline]
    #[must_use]
    pub fn is_held(&self) -> Option<bool> {
        engine::is_held(self)
    }

    /// Reports ([`NotHeld`](ReportKind::NotHeld)) unless this CPU holds
    /// the lock (Linux's `lockdep_assert_held`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    ///
    /// struct Queue { dep_map: Map, len: core::cell::Cell<usize> }
    /// impl Queue {
    ///     // Callers must hold the queue's lock: `lockdep_assert_held`.
    ///     fn len_locked(&self) -> usize {
    ///         self.dep_map.assert_held();
    ///         self.len.get()
    ///     }
    /// }
    /// let q = Queue { dep_map: Map::new(), len: core::cell::Cell::new(0) };
    /// let _held = q.dep_map.acquire_guard(0, false, false);
    /// assert_eq!(q.len_locked(), 0);
    /// ```
    #[doc(alias = "lockdep_assert_held")]
    #[track_caller]
    #[inline]
    pub fn assert_held(&self) {
        engine::assert_held(self, core::panic::Location::caller());
    }

    /// [`acquire`](Self::acquire), and a guard that calls
    /// [`release`](Self::release) when it drops (put it in the lock's
    /// guard).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::{Acquired, Map};
    ///
    /// // A guard type that records the release wherever it is dropped.
    /// struct BitLockGuard<'a> { _dep: Acquired<'a> /* , the lock word ... */ }
    ///
    /// let dep_map = Map::new();
    /// let guard = BitLockGuard { _dep: dep_map.acquire_guard(0, false, false) };
    /// drop(guard); // `lock_release`
    /// ```
    #[track_caller]
    #[inline]
    pub fn acquire_guard(&self, subclass: u8, try_lock: bool, irqs_off: bool) -> Acquired<'_> {
        self.acquire(subclass, try_lock, irqs_off);
        Acquired { map: self }
    }

    /// A seqlock reader that may spin, checked against this (writers'
    /// lock's) class: Linux's `seqcount_lockdep_reader_access`, see
    /// `engine::read_access`.
    #[track_caller]
    #[inline]
    pub(crate) fn read_access(&self) {
        engine::read_access(self, core::panic::Location::caller());
    }

    pub(crate) fn key(&self) -> MapKey {
        self.key
    }

    pub(crate) fn class_cache(&self) -> &crate::sync::AtomicU32 {
        &self.class
    }
}

#[cfg(not(feature = "lockdep"))]
impl Map {
    /// A lock whose class is the caller's source location (with `lockdep`).
    #[inline(always)]
    #[must_use]
    pub const fn new() -> Self {
        Self { _none: () }
    }

    /// A lock of `key`'s class (with `lockdep`).
    #[inline(always)]
    #[must_use]
    pub const fn with_key(key: &'static LockClassKey) -> Self {
        let _ = key;
        Self::new()
    }

    /// A lock that is its own class (with `lockdep`).
    #[inline(always)]
    #[must_use]
    pub const fn per_instance() -> Self {
        Self::new()
    }

    /// Moves the lock to `key`'s class (with `lockdep`; nothing here).
    #[inline(always)]
    pub fn set_class(&mut self, key: &'static LockClassKey) {
        let _ = key;
    }

    /// Records an acquisition (with `lockdep`; nothing here).
    #[inline(always)]
    pub fn acquire(&self, subclass: u8, try_lock: bool, irqs_off: bool) {
        let _ = (subclass, try_lock, irqs_off);
    }

    /// Records a read acquisition (with `lockdep`; nothing here).
    #[inline(always)]
    pub(crate) fn acquire_read(&self, subclass: u8, try_lock: bool, recursive: bool) {
        let _ = (subclass, try_lock, recursive);
    }

    /// Records a sleeping lock's acquisition (with `lockdep`; nothing
    /// here).
    #[inline(always)]
    pub(crate) fn acquire_sleeping(&self, subclass: u8, try_lock: bool) {
        let _ = (subclass, try_lock);
    }

    /// A sleeping lock's acquisition and its releasing guard (with
    /// `lockdep`; nothing here).
    #[inline(always)]
    pub(crate) fn acquire_sleeping_guard(&self, subclass: u8, try_lock: bool) -> Acquired<'_> {
        let _ = (subclass, try_lock);
        Acquired { map: PhantomData }
    }

    /// Records a release (with `lockdep`; nothing here).
    #[inline(always)]
    pub fn release(&self) {}

    /// Whether this CPU holds the lock (with `lockdep`; unknown here).
    #[inline(always)]
    #[must_use]
    pub fn is_held(&self) -> Option<bool> {
        None
    }

    /// Checks that this CPU holds the lock (with `lockdep`; nothing here).
    #[inline(always)]
    pub fn assert_held(&self) {}

    /// An acquisition and its releasing guard (with `lockdep`; nothing
    /// here).
    #[inline(always)]
    pub fn acquire_guard(&self, subclass: u8, try_lock: bool, irqs_off: bool) -> Acquired<'_> {
        let _ = (subclass, try_lock, irqs_off);
        Acquired { map: PhantomData }
    }

    /// A seqlock reader (with `lockdep`; nothing here).
    #[inline(always)]
    pub(crate) fn read_access(&self) {}
}

impl Default for Map {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "lockdep")]
impl Drop for Map {
    fn drop(&mut self) {
        engine::forget(self);
    }
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Map");
        #[cfg(feature = "lockdep")]
        d.field("key", &self.key);
        d.finish_non_exhaustive()
    }
}

/// An acquisition recorded by [`Map::acquire_guard`]; dropping it records
/// the release. Zero-sized without the feature.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::Map;
///
/// let map = Map::new();
/// {
///     let _acquired = map.acquire_guard(0, false, false);
///     // ... critical section ...
/// } // the release is recorded here, on unwinding too
/// assert_ne!(map.is_held(), Some(true));
/// ```
#[must_use = "dropping it records the release at once"]
pub struct Acquired<'a> {
    #[cfg(feature = "lockdep")]
    map: &'a Map,
    #[cfg(not(feature = "lockdep"))]
    map: PhantomData<&'a Map>,
}

impl Acquired<'_> {
    /// Keeps the acquisition recorded past the guard: a lock whose waiting
    /// may panic (a misuse check) takes its record as a guard, so that an
    /// unwinding waiter is not left recorded as holding it, and keeps it
    /// once it got the lock; its unlock calls [`Map::release`].
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Map;
    /// # fn wait_for_owner() -> bool { true }
    ///
    /// // A wait that may panic on misuse: recorded as a guard, so an unwinding
    /// // waiter is not left holding the lock; kept once the lock is taken.
    /// let map = Map::new();
    /// let record = map.acquire_guard(0, false, false);
    /// assert!(wait_for_owner(), "lock misused");
    /// record.keep(); // held now: the unlock path calls `release`
    /// map.release();
    /// ```
    #[inline(always)]
    pub fn keep(self) {
        #[cfg(feature = "lockdep")]
        core::mem::forget(self);
    }
}

#[cfg(feature = "lockdep")]
impl Drop for Acquired<'_> {
    #[inline]
    fn drop(&mut self) {
        self.map.release();
    }
}

impl fmt::Debug for Acquired<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Acquired")
    }
}
