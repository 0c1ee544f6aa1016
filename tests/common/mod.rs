//! Helpers shared by the threaded host tests.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Wall-clock budget of each threaded test. Threads playing CPUs spin in
/// the lockref's ticket lock, and on a loaded 2-core machine a preempted
/// waiter stalls everyone behind it (a convoy: a few hundred acquisitions
/// per second at worst), so the threaded tests stop early rather than run
/// for minutes. They still check everything they did.
pub(crate) const TIME_BUDGET: Duration = Duration::from_millis(1500);

/// Operations each thread does regardless of the budget.
pub(crate) const MIN_OPS: usize = 16;

/// Per-thread iteration budget: `max` iterations, stopping early once the
/// shared deadline has passed (but never before `MIN_OPS`).
pub(crate) struct Budget {
    deadline: Instant,
    max: usize,
    pub(crate) done: usize,
}

impl Budget {
    pub(crate) fn new(start: Instant, max: usize) -> Self {
        Self {
            deadline: start + TIME_BUDGET,
            max,
            done: 0,
        }
    }

    pub(crate) fn next(&mut self) -> bool {
        if self.done >= self.max
            || (self.done >= MIN_OPS
                && self.done.is_multiple_of(8)
                && Instant::now() >= self.deadline)
        {
            return false;
        }
        self.done += 1;
        true
    }
}
