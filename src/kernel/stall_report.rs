//! The report an RCU stall hands to the kernel's
//! [`Kernel::rcu_stall`](super::Kernel::rcu_stall) hook: data only, so the
//! hook layer defines it and imports nothing above it ([`crate::rcu`]
//! fills it in and re-exports it).

use core::fmt;

/// How many stalled CPU ids a [`StallReport`] lists (it counts all of
/// them).
pub const STALL_REPORT_CPUS: usize = 8;

/// A grace period that has been running for longer than the stall timeout.
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
    #[must_use]
    pub fn gp_seq(&self) -> usize {
        self.gp_seq
    }

    /// How long it has been running, in the unit of
    /// [`check_stall`](crate::rcu::check_stall)'s clock.
    #[must_use]
    pub fn age(&self) -> u64 {
        self.age
    }

    /// How many CPUs still owe it a quiescent state.
    #[must_use]
    pub fn nr_stalled(&self) -> usize {
        self.stalled
    }

    /// The first [`STALL_REPORT_CPUS`] of them, in id order.
    #[must_use]
    pub fn cpus(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.cpus[..self.listed].iter().map(|&c| c as usize)
    }

    /// Whether `cpu` holds the grace period up (among the listed CPUs).
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
