//! The suites: torture tests of ksync's primitives on every CPU, in thread
//! and interrupt context, each with a deliberately broken *control* that must
//! fail (a torture test that cannot fail proves nothing), and a benchmark.
//!
//! # Adding a suite
//!
//! Write one file here with a type that implements
//! [`Suite`](crate::harness::Suite) (it keeps an
//! [`Info`](crate::harness::Info), its name, kind and budget, and reports
//! through it), `static`s of it (the test and its control) listed in the
//! file's `SUITES`, and add that list to [`REGISTRY`]: one line. [`probe`]
//! has the handshake for a check that one CPU's lockless or `try_` path is
//! refused while another holds the lock. The harness (`harness::runner`)
//! does the rest: lock-step start on every CPU, the timer-interrupt hook,
//! the deadline, the quiescing before `finish`, the per-CPU interrupt check
//! and the `KSYNC-RESULT` line. The host runner picks new suites up from
//! the `list` output: nothing to change there.
//!
//! Besides the registry this module holds what several suites share:
//! [`Rng`], [`busy_work`] and [`bump_pair`].

pub mod bench;
pub mod brlock;
pub mod cost;
pub mod irq_mask;
pub mod lockdep;
pub mod lockref;
pub mod once;
pub mod percpu_counter;
pub mod probe;
pub mod rcu;
pub mod rcu_flood;
pub mod rcu_stall;
pub mod refcount;
pub mod rwlock;
pub mod rwlock_flood;
pub mod rwspinlock;
pub mod sched;
pub mod sched_oncpu;
pub mod sched_wait;
pub mod seeds;
pub mod sleep;
pub mod spinlock;
pub mod spinlock_halt;

use core::sync::atomic::{AtomicU64, Ordering};

use crate::harness::{Ctx, Registry};

/// Every suite the kernel knows, file by file, in the order `tests` and
/// `controls` run them. `main.rs` hands it to the harness.
pub static REGISTRY: Registry = Registry::new(&[
    lockref::SUITES,
    spinlock::SUITES,
    spinlock_halt::SUITES,
    percpu_counter::SUITES,
    rwlock::SUITES,
    rwlock_flood::SUITES,
    rwspinlock::SUITES,
    once::SUITES,
    refcount::SUITES,
    brlock::SUITES,
    rcu::SUITES,
    rcu_flood::SUITES,
    rcu_stall::SUITES,
    irq_mask::SUITES,
    lockdep::SUITES,
    bench::SUITES,
    cost::SUITES,
    seeds::SUITES,
    sched::SUITES,
    sched_wait::SUITES,
    sched_oncpu::SUITES,
    sleep::SUITES,
]);

/// A small per-CPU pseudo-random generator (xorshift64*), to vary the mix of
/// operations without any shared state.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A generator for this CPU in this run: `salt` (one per suite)
    /// mixed with the CPU and the run's seed (`seed=`; with seed 0 the
    /// same sequence as `new(cpu + salt)`), so that a run is replayed by
    /// its seed.
    pub fn for_ctx(ctx: &Ctx, salt: u64) -> Self {
        Self::new(ctx.seed().wrapping_mul(0x0100_0000_01B3) ^ (ctx.cpu as u64 + salt))
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The critical section of the lock suites: increments `first`, stretches
/// the section by `work` ([`busy_work`]), then checks that `second` still
/// equals what `first` held and increments it too. Under mutual exclusion
/// the two always match; if they do not (a torn update: two CPUs were
/// inside at once), fails the suite with `torn`.
///
/// Relaxed: the lock under test orders these; without it, lost updates show
/// in the counters.
pub fn bump_pair(ctx: &Ctx, first: &AtomicU64, second: &AtomicU64, work: u32, torn: &'static str) {
    let seen = first.load(Ordering::Relaxed);
    busy_work(work);
    first.store(seen + 1, Ordering::Relaxed);
    let other = second.load(Ordering::Relaxed);
    if other != seen {
        ctx.fail(torn);
    }
    second.store(other + 1, Ordering::Relaxed);
}

/// Spins for about `n` iterations without touching memory, to stretch a
/// critical section (not `spin_loop`: under TCG `pause` leaves the
/// translated code, which would change the timing the test relies on).
#[inline]
pub fn busy_work(n: u32) {
    for i in 0..n {
        core::hint::black_box(i);
    }
}
