//! Time from the CPU's free-running counter: the TSC on x86_64 (calibrated
//! against the PIT at boot), `CNTVCT_EL0` on aarch64 (its frequency is in
//! `CNTFRQ_EL0`). Both are the same on every CPU, so a deadline read on one
//! CPU is valid on all.

use crate::arch;

/// The counter now.
#[inline]
pub fn now() -> u64 {
    arch::counter()
}

/// Counter ticks per second.
pub fn hz() -> u64 {
    arch::counter_hz()
}

/// Counter ticks in `ms` milliseconds.
pub fn ms_to_ticks(ms: u64) -> u64 {
    hz() / 1000 * ms
}

/// Milliseconds in `ticks` counter ticks (with [`now`], the monotonic
/// clock ksync's RCU stall detection is given: `kernel::rcu`).
pub fn ticks_to_ms(ticks: u64) -> u64 {
    ticks / (hz() / 1000).max(1)
}

/// Nanoseconds in `ticks` counter ticks.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(hz().max(1))) as u64
}

/// The first counter value whose [`ticks_to_ns`] is `ns` or more (the
/// counter ticks in `ns` nanoseconds, rounded up): a deadline on the
/// nanosecond clock (ksync's `Kernel::clock_ns`, `kernel::hooks`) as a
/// counter value.
pub fn ns_to_ticks_ceil(ns: u64) -> u64 {
    let ticks = (u128::from(ns) * u128::from(hz())).div_ceil(1_000_000_000);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}
