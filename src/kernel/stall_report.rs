//! The report an RCU stall hands to the kernel's
//! [`Kernel::rcu_stall`](super::Kernel::rcu_stall) hook: data only, so the
//! hook layer defines it and imports nothing above it ([`crate::rcu`]
//! fills it in and re-exports it).

use core::fmt;

/// How many stalled CPU ids a [`StallReport`] lists (it counts all of
/// them).
pub const STALL_REPORT_CPUS: usize = 8;

/// A grace period that has been running for longer than the stall timeout.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::StallReport;
/// # macro_rules! pr_err { ($($t:tt)*) => { eprintln!($($t)*) } }
///
/// // The body of a kernel's `Kernel::rcu_stall` hook (see `rcu::check_stall`).
/// fn rcu_stall(report: &StallReport) {
///     pr_err!("{report}"); // rcu: grace period 0x.. stalled for .., waiting for CPUs 1, 3
/// }
/// # let _ = rcu_stall;
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StallReport {
    pub(crate) gp_seq: usize,
    pub(crate) age: u64,
    pub(crate) stalled: usize,
    pub(crate) listed: usize,
    pub(crate) cpus: [u32; STALL_REPORT_CPUS],
}

impl StallReport {
    /// The stalled grace period's sequence number.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::StallReport;
    ///
    /// // Report each stalled grace period once, however often it is checked.
    /// fn is_new(report: &StallReport, last_reported: &mut usize) -> bool {
    ///     core::mem::replace(last_reported, report.gp_seq()) != report.gp_seq()
    /// }
    /// # let _ = is_new;
    /// ```
    #[must_use]
    pub fn gp_seq(&self) -> usize {
        self.gp_seq
    }

    /// How long it has been running, in the unit of
    /// [`check_stall`](crate::rcu::check_stall)'s clock.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::StallReport;
    ///
    /// const TICKS_PER_SEC: u64 = 1000; // the clock passed to `check_stall`
    ///
    /// // A kernel's policy: warn at first, panic (Linux's `panic_on_rcu_stall`)
    /// // once the grace period has been stuck for a minute.
    /// fn rcu_stall(report: &StallReport) {
    ///     if report.age() > 60 * TICKS_PER_SEC {
    ///         panic!("{report}");
    ///     }
    /// }
    /// # let _ = rcu_stall;
    /// ```
    #[must_use]
    pub fn age(&self) -> u64 {
        self.age
    }

    /// How many CPUs still owe it a quiescent state.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::StallReport;
    ///
    /// // One CPU stuck is a bug in its code; all of them, a timekeeping problem.
    /// fn everyone_stalled(report: &StallReport) -> bool {
    ///     report.nr_stalled() == ksync::kernel::nr_cpus()
    /// }
    /// # let _ = everyone_stalled;
    /// ```
    #[must_use]
    pub fn nr_stalled(&self) -> usize {
        self.stalled
    }

    /// The first [`STALL_REPORT_CPUS`] of them, in id order.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::StallReport;
    /// # fn send_nmi_backtrace(_cpu: usize) {}
    ///
    /// // Linux's `rcu_dump_cpu_stacks`: ask each stalled CPU for its stack.
    /// fn rcu_stall(report: &StallReport) {
    ///     for cpu in report.cpus() {
    ///         send_nmi_backtrace(cpu);
    ///     }
    /// }
    /// # let _ = rcu_stall;
    /// ```
    #[must_use]
    pub fn cpus(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.cpus[..self.listed].iter().map(|&c| c as usize)
    }

    /// Whether `cpu` holds the grace period up (among the listed CPUs).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::StallReport;
    ///
    /// // On the CPU that runs the hook: is it the culprit itself?
    /// fn stalled_here(report: &StallReport) -> bool {
    ///     report.names(ksync::kernel::cpu_id())
    /// }
    /// # let _ = stalled_here;
    /// ```
    #[must_use]
    pub fn names(&self, cpu: usize) -> bool {
        self.cpus().any(|c| c == cpu)
    }
}

impl fmt::Display for StallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rcu: grace period {:#x} stalled for {}, waiting for CPU",
            self.gp_seq, self.age
        )?;
        if self.stalled != 1 {
            f.write_str("s")?;
        }
        for (i, cpu) in self.cpus().enumerate() {
            write!(f, "{}{cpu}", if i == 0 { " " } else { ", " })?;
        }
        if self.stalled > self.listed {
            write!(f, " (+{} more)", self.stalled - self.listed)?;
        }
        Ok(())
    }
}

impl fmt::Debug for StallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for StallReport {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "rcu: grace period {=usize:#x} stalled for {=u64}, {=usize} CPU(s) waiting: {=[?]}",
            self.gp_seq,
            self.age,
            self.stalled,
            &self.cpus[..self.listed]
        );
    }
}
