//! What lockdep tells the kernel: a [`Report`], a fixed-size value (no
//! allocation) that names the classes involved and where each lock and
//! each edge was first seen. It exists in every build, because the
//! kernel's hook names it; only `lockdep` builds make one. Plain data in
//! the hook layer (as the RCU stall report is), so that `kernel` does not
//! import `lockdep`; `lockdep` re-exports it.

use core::fmt;
use core::panic::Location;

/// The most locks one CPU may hold at once while lockdep checks (Linux's
/// `MAX_LOCK_DEPTH`); one more is a [`TooDeep`](ReportKind::TooDeep)
/// report and checking stops.
pub const MAX_LOCK_DEPTH: usize = 48;

/// A source location (of a lock's construction or acquisition).
pub(crate) type Loc = &'static Location<'static>;

/// The most links of a dependency cycle or chain a report lists (the rest
/// are counted).
pub(crate) const REPORT_CHAIN: usize = 8;
/// The most held locks a report lists (the rest are counted).
pub(crate) const REPORT_HELD: usize = 8;

/// Which bug a [`Report`] is about (see the [module docs](super#what-it-reports)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::{Report, ReportKind};
/// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
///
/// // A kernel's `Kernel::lockdep_report`: carry on after ordering bugs,
/// // stop after the ones that corrupt state.
/// fn lockdep_report(report: &Report) {
///     pr_warn!("{report}");
///     if matches!(report.kind(), ReportKind::BadUnlock | ReportKind::Recursion) {
///         panic!("lockdep: {:?}", report.kind());
///     }
/// }
/// # let _ = lockdep_report;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReportKind {
    /// A new lock order closes a cycle of lock classes.
    Cycle,
    /// A class used in an interrupt handler is also taken with interrupts
    /// enabled.
    IrqInversion,
    /// A class used in an interrupt handler (IRQ-safe) leads, by a chain
    /// of dependencies, to a class taken with interrupts enabled
    /// (IRQ-unsafe).
    IrqSafeToUnsafe,
    /// A lock taken while this CPU already holds its class.
    Recursion,
    /// A release of a lock this CPU does not hold (also: a holder that
    /// migrated to another CPU since it took the lock).
    BadUnlock,
    /// [`assert_no_locks_held`](crate::lockdep::assert_no_locks_held) found locks
    /// held.
    LocksHeld,
    /// A holder check ([`Map::assert_held`](crate::lockdep::Map::assert_held),
    /// a spinlock's `assert_held`) found the lock not held by this CPU
    /// (Linux's `lockdep_assert_held`).
    NotHeld,
    /// The class or dependency table is full: checking is off from now on.
    TableFull,
    /// More than [`MAX_LOCK_DEPTH`](MAX_LOCK_DEPTH) locks held on
    /// one CPU: checking is off from now on.
    TooDeep,
}

/// How a class is named.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "lockdep"), allow(dead_code))]
pub(crate) enum Name {
    /// Built at this source location.
    Location(Loc),
    /// An explicit key's name.
    Named(&'static str),
    /// A lock of its own class, at this address.
    Instance(usize),
}

/// A lock class, as a [`Report`] names it: where its locks are built
/// (`file:line:column`), its key's name (in quotes), or, for a lock of its
/// own class, its address; then `/n` for a subclass `n` other than 0.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::{Class, Report};
///
/// // Name the held class of the new edge, with its subclass: "file:line:col/1".
/// fn held_class(report: &Report) -> Option<Class> {
///     report.cycle().next().map(|link| link.from())
/// }
/// # let _ = held_class;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Class {
    pub(crate) name: Name,
    pub(crate) subclass: u8,
}

impl Class {
    /// The subclass (0 unless taken with a `*_nested` method).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Site;
    ///
    /// // A nested acquisition (`lock_nested(1)`) shows as subclass 1.
    /// fn is_nested(site: &Site) -> bool {
    ///     site.class().subclass() != 0
    /// }
    /// # let _ = is_nested;
    /// ```
    #[must_use]
    pub fn subclass(&self) -> u8 {
        self.subclass
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Name::Location(l) => write!(f, "{l}")?,
            Name::Named(n) => write!(f, "\"{n}\"")?,
            Name::Instance(a) => write!(f, "lock@{a:#x}")?,
        }
        if self.subclass != 0 {
            write!(f, "/{}", self.subclass)?;
        }
        Ok(())
    }
}

/// A lock in a report: its class, and where it was taken (if known).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::Report;
/// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
///
/// fn lockdep_report(report: &Report) {
///     if let Some(site) = report.lock() {
///         pr_warn!("while taking {site}"); // class "inode" at fs/inode.rs:42:9
///     }
/// }
/// # let _ = lockdep_report;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Site {
    pub(crate) class: Class,
    pub(crate) at: Option<Loc>,
}

impl Site {
    /// The lock's class.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    ///
    /// // Which class a kernel should blame in its bug tracker.
    /// fn culprit(report: &Report) -> Option<String> {
    ///     report.lock().map(|site| site.class().to_string())
    /// }
    /// # let _ = culprit;
    /// ```
    #[must_use]
    pub fn class(&self) -> Class {
        self.class
    }

    /// Where it was taken (or released, for a bad unlock).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    ///
    /// // The source file of the offending acquisition, for a `MAINTAINERS` lookup.
    /// fn file(report: &Report) -> Option<&'static str> {
    ///     report.lock()?.at().map(|at| at.file())
    /// }
    /// # let _ = file;
    /// ```
    #[must_use]
    pub fn at(&self) -> Option<&'static Location<'static>> {
        self.at
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "class {}", self.class)?;
        if let Some(at) = self.at {
            write!(f, " at {at}")?;
        }
        Ok(())
    }
}

/// One edge of a dependency cycle: `to` was taken while `from` was held;
/// `from_at` and `to_at` are where the two were taken the first time this
/// order was seen.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockdep::Report;
/// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
///
/// // One line per edge of a circular dependency: `A -> B`.
/// fn print_cycle(report: &Report) {
///     for (i, link) in report.cycle().enumerate() {
///         pr_warn!("  #{i} {} -> {}", link.from(), link.to());
///     }
/// }
/// # let _ = print_cycle;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub(crate) from: Class,
    pub(crate) to: Class,
    pub(crate) from_at: Option<Loc>,
    pub(crate) to_at: Option<Loc>,
}

impl Link {
    /// The class held.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Link;
    ///
    /// // The lock that was held when `to` was taken.
    /// fn held(link: &Link) -> String {
    ///     link.from().to_string()
    /// }
    /// # let _ = held;
    /// ```
    #[must_use]
    pub fn from(&self) -> Class {
        self.from
    }

    /// The class taken while `from` was held.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Link;
    ///
    /// // An edge into a subclass: a `lock_nested` acquisition took part.
    /// fn into_nested(link: &Link) -> bool {
    ///     link.to().subclass() != 0
    /// }
    /// # let _ = into_nested;
    /// ```
    #[must_use]
    pub fn to(&self) -> Class {
        self.to
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.from, self.to)?;
        if self.from_at.is_none() && self.to_at.is_none() {
            return Ok(());
        }
        write!(f, "\n         {} taken at ", self.from)?;
        write_at(f, self.from_at)?;
        write!(f, ", then {} at ", self.to)?;
        write_at(f, self.to_at)
    }
}

fn write_at(f: &mut fmt::Formatter<'_>, at: Option<Loc>) -> fmt::Result {
    match at {
        Some(at) => write!(f, "{at}"),
        None => f.write_str("?"),
    }
}

/// A locking bug found by lockdep, handed to
/// [`Kernel::lockdep_report`](crate::kernel::Kernel::lockdep_report).
/// `Display` prints it in full (see the [module docs](super#reading-a-report)
/// for an example and how to read it).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::Kernel;
/// use ksync::lockdep::Report;
/// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
///
/// # struct MyKernel;
/// // SAFETY: one CPU, never preempted.
/// unsafe impl Kernel for MyKernel {
/// #     fn cpu_id() -> usize { 0 }
/// #     fn nr_cpus() -> usize { 1 }
///     fn lockdep_report(report: &Report) {
///         pr_warn!("{report}"); // the whole splat, as the module docs show
///     }
/// }
/// ksync::set_kernel!(MyKernel);
/// ```
#[derive(Clone, Debug)]
pub struct Report {
    pub(crate) kind: ReportKind,
    pub(crate) cpu: usize,
    /// The lock being taken or released (or the one that did not fit).
    pub(crate) lock: Option<Site>,
    /// The other side: the held lock of the same class (recursion), the
    /// first use the other way (interrupt inversion), the held lock whose
    /// new edge completed an IRQ-safe -> IRQ-unsafe chain.
    pub(crate) other: Option<Site>,
    /// The IRQ-safe class of a chain, where first taken in a handler.
    pub(crate) irq_safe: Option<Site>,
    /// The IRQ-unsafe class of a chain, where first taken with interrupts
    /// enabled.
    pub(crate) irq_unsafe: Option<Site>,
    /// Recursion on the very same lock; inversion first seen in a handler.
    pub(crate) flag: bool,
    pub(crate) chain: [Option<Link>; REPORT_CHAIN],
    pub(crate) chain_len: usize,
    pub(crate) held: [Option<Site>; REPORT_HELD],
    pub(crate) held_len: usize,
    /// What [`assert_no_locks_held`](crate::lockdep::assert_no_locks_held) was
    /// asked about, which table filled up, or how the lock completing an
    /// IRQ-safe -> IRQ-unsafe chain is taken (empty: while holding
    /// `other`).
    pub(crate) what: &'static str,
    /// Where [`assert_no_locks_held`](crate::lockdep::assert_no_locks_held) was
    /// called.
    pub(crate) at: Option<Loc>,
    /// The size of the table that filled up.
    pub(crate) limit: usize,
}

impl Report {
    #[cfg_attr(not(feature = "lockdep"), allow(dead_code))]
    pub(crate) const fn new(kind: ReportKind, cpu: usize) -> Self {
        Self {
            kind,
            cpu,
            lock: None,
            other: None,
            irq_safe: None,
            irq_unsafe: None,
            flag: false,
            chain: [None; REPORT_CHAIN],
            chain_len: 0,
            held: [None; REPORT_HELD],
            held_len: 0,
            what: "",
            at: None,
            limit: 0,
        }
    }

    /// Which bug this is.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::{Report, ReportKind};
    ///
    /// // Interrupt inversions are the ones worth a reboot in production.
    /// fn fatal(report: &Report) -> bool {
    ///     matches!(report.kind(), ReportKind::IrqInversion | ReportKind::IrqSafeToUnsafe)
    /// }
    /// # let _ = fatal;
    /// ```
    #[must_use]
    pub fn kind(&self) -> ReportKind {
        self.kind
    }

    /// The CPU that found it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    /// # fn dump_stack_of(_cpu: usize) {}
    ///
    /// fn lockdep_report(report: &Report) {
    ///     dump_stack_of(report.cpu()); // the CPU that tripped over it
    /// }
    /// # let _ = lockdep_report;
    /// ```
    #[must_use]
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The lock being taken or released when the bug was found.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    ///
    /// fn where_taken(report: &Report) -> String {
    ///     match report.lock() {
    ///         Some(site) => site.to_string(),
    ///         None => "no lock (a check)".into(),
    ///     }
    /// }
    /// # let _ = where_taken;
    /// ```
    #[must_use]
    pub fn lock(&self) -> Option<Site> {
        self.lock
    }

    /// For a [`Cycle`](ReportKind::Cycle): its edges, starting with the one
    /// being added (held class -> class being taken), then the path that
    /// leads back (at most 8 are kept; [`cycle_len`](Self::cycle_len) is
    /// the full length). For an
    /// [`IrqSafeToUnsafe`](ReportKind::IrqSafeToUnsafe): the chain of
    /// edges from the IRQ-safe class to the IRQ-unsafe one.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::{Report, ReportKind};
    ///
    /// // The classes of an AB-BA deadlock, in the order they close the circle.
    /// fn cycle_classes(report: &Report) -> Vec<String> {
    ///     assert_eq!(report.kind(), ReportKind::Cycle);
    ///     report.cycle().map(|link| link.to().to_string()).collect()
    /// }
    /// # let _ = cycle_classes;
    /// ```
    pub fn cycle(&self) -> impl Iterator<Item = &Link> {
        self.chain.iter().flatten()
    }

    /// The number of edges in the cycle or chain (0 for other kinds).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    ///
    /// // A two-lock AB-BA is the common case; longer cycles deserve a closer look.
    /// fn is_ab_ba(report: &Report) -> bool {
    ///     report.cycle_len() == 2
    /// }
    /// # let _ = is_ab_ba;
    /// ```
    #[must_use]
    pub fn cycle_len(&self) -> usize {
        self.chain_len
    }

    /// For an [`IrqSafeToUnsafe`](ReportKind::IrqSafeToUnsafe): the
    /// IRQ-safe class, and where it was first taken in a handler.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    /// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
    ///
    /// fn explain(report: &Report) {
    ///     if let (Some(safe), Some(unsafe_)) = (report.irq_safe(), report.irq_unsafe()) {
    ///         pr_warn!("{safe} is taken in a handler and leads to {unsafe_}");
    ///     }
    /// }
    /// # let _ = explain;
    /// ```
    #[must_use]
    pub fn irq_safe(&self) -> Option<Site> {
        self.irq_safe
    }

    /// For an [`IrqSafeToUnsafe`](ReportKind::IrqSafeToUnsafe): the
    /// IRQ-unsafe class, and where it was first taken with interrupts
    /// enabled.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    ///
    /// // The lock to convert to an IRQ-saving one (`spin_lock_irqsave`).
    /// fn to_fix(report: &Report) -> Option<String> {
    ///     report.irq_unsafe().map(|site| site.class().to_string())
    /// }
    /// # let _ = to_fix;
    /// ```
    #[must_use]
    pub fn irq_unsafe(&self) -> Option<Site> {
        self.irq_unsafe
    }

    fn write_chain(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, link) in self.cycle().enumerate() {
            write!(f, "\n    #{i} {link}")?;
        }
        if self.chain_len > REPORT_CHAIN {
            write!(f, "\n    ... and {} more", self.chain_len - REPORT_CHAIN)?;
        }
        Ok(())
    }

    /// The locks this CPU held (for [`LocksHeld`](ReportKind::LocksHeld)
    /// and [`TooDeep`](ReportKind::TooDeep); at most 8 are kept).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::lockdep::Report;
    /// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
    ///
    /// // `LocksHeld`: what was still held where sleeping was not allowed.
    /// fn print_held(report: &Report) {
    ///     for site in report.held() {
    ///         pr_warn!("  held: {site}");
    ///     }
    /// }
    /// # let _ = print_held;
    /// ```
    pub fn held(&self) -> impl Iterator<Item = &Site> {
        self.held.iter().flatten()
    }

    fn write_held(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, site) in self.held().enumerate() {
            write!(f, "\n    #{i} {site}")?;
        }
        if self.held_len > REPORT_HELD {
            write!(f, "\n    ... and {} more", self.held_len - REPORT_HELD)?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = Site {
            class: Class {
                name: Name::Named("?"),
                subclass: 0,
            },
            at: None,
        };
        let lock = self.lock.unwrap_or(none);
        let other = self.other.unwrap_or(none);
        let cpu = self.cpu;
        match self.kind {
            ReportKind::Cycle => {
                write!(
                    f,
                    "ksync lockdep: possible circular locking dependency, on CPU {cpu}\n  taking   {lock}\n  holding  {other}\n  which closes this cycle of lock classes (each edge \"held -> taken\" where it was first seen):"
                )?;
                self.write_chain(f)?;
                write!(
                    f,
                    "\n  a CPU following one edge while another follows the rest deadlocks: take these locks in one order"
                )
            }
            ReportKind::IrqInversion => {
                let (irq, on) = if self.flag {
                    (other, lock)
                } else {
                    (lock, other)
                };
                write!(
                    f,
                    "ksync lockdep: lock class {} is taken in an interrupt handler and with interrupts enabled, on CPU {cpu}\n  in a handler:            {irq}\n  with interrupts enabled: {on}\n  the handler can interrupt a holder on its own CPU and spin forever: take it with interrupts masked (the `_irqsave` forms) outside handlers",
                    lock.class
                )
            }
            ReportKind::IrqSafeToUnsafe => {
                write!(
                    f,
                    "ksync lockdep: IRQ-safe -> IRQ-unsafe lock order, on CPU {cpu}\n  taking   {lock}{}",
                    self.what
                )?;
                if self.what.is_empty() {
                    write!(f, "\n  holding  {other}")?;
                }
                write!(
                    f,
                    "\n  IRQ-safe:   {} (first taken in an interrupt handler there)\n  IRQ-unsafe: {} (first taken with interrupts enabled there)\n  and the first leads to the second by this chain of lock classes (each edge \"held -> taken\" where it was first seen):",
                    self.irq_safe.unwrap_or(none),
                    self.irq_unsafe.unwrap_or(none),
                )?;
                self.write_chain(f)?;
                write!(
                    f,
                    "\n  an interrupt on a CPU that holds the IRQ-unsafe lock can spin on the IRQ-safe one, held by another CPU that waits (along the chain) for the IRQ-unsafe one: deadlock. Take the IRQ-unsafe class with interrupts masked everywhere (the `_irqsave` forms), or do not take it under the IRQ-safe one"
                )
            }
            ReportKind::Recursion => {
                let what = if self.flag {
                    "the same lock: this CPU deadlocks on itself"
                } else {
                    "another lock of the class: a CPU nesting them the other way deadlocks with this one; if the nesting is deliberate and ordered, take the inner one with a subclass (`lock_nested`)"
                };
                write!(
                    f,
                    "ksync lockdep: recursive locking, on CPU {cpu}\n  taking   {lock}\n  holding  {other}\n  {what}"
                )
            }
            ReportKind::BadUnlock => write!(
                f,
                "ksync lockdep: release of a lock this CPU does not hold, on CPU {cpu}\n  releasing {lock}\n  (released twice, never taken, or taken on another CPU)"
            ),
            ReportKind::NotHeld => {
                write!(
                    f,
                    "ksync lockdep: lock not held by this CPU, on CPU {cpu}\n  expected {lock}"
                )?;
                if let Some(at) = self.at {
                    write!(f, "\n  checked at {at}")?;
                }
                write!(f, "\n  held:")?;
                self.write_held(f)
            }
            ReportKind::LocksHeld => {
                write!(
                    f,
                    "ksync lockdep: {} called with locks held, on CPU {cpu}",
                    self.what
                )?;
                if let Some(at) = self.at {
                    write!(f, " (at {at})")?;
                }
                write!(f, "\n  held:")?;
                self.write_held(f)
            }
            ReportKind::TableFull => write!(
                f,
                "ksync lockdep: the {} table is full ({}), on CPU {cpu}, taking {lock}\n  lock checking is off from now on: raise {}",
                self.what,
                self.limit,
                if self.what == "class" {
                    "KSYNC_LOCKDEP_CLASSES"
                } else {
                    "KSYNC_LOCKDEP_DEPENDENCIES"
                }
            ),
            ReportKind::TooDeep => {
                write!(
                    f,
                    "ksync lockdep: more than {} locks held on CPU {cpu}, taking {lock}\n  lock checking is off from now on; held:",
                    MAX_LOCK_DEPTH
                )?;
                self.write_held(f)
            }
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Report {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}
