//! The five Linux systems ksync's primitives were made for, rebuilt on
//! ksync's public API, each beside the design it replaced.
//!
//! | module | the seed | after | before |
//! |---|---|---|---|
//! | [`fd`] | RCU fd lookup (2004) | RCU table + `LockRef::get_not_zero`, `call_rcu` on the last put | one spinlock; a reader-writer lock |
//! | [`fget_light`] | skip the count when the table is not shared (2003/2009) | plain loads for a lone owner | count every lookup |
//! | [`stat`] | lockref (2013) | lockless get/put on the final dentry | the dentry's lock taken for every get and put |
//! | [`walk`] | store-free path walking (2009) | `SeqLock` (root, pwd), `BrLock` mounts, no refs per component | a shared `fs` spinlock, a global mount lock, a ref per component |
//! | [`mmap`] | scalable `mmap_sem` (2007) | `PerCpuRwLock`, `GatedPerCpuRwLock` | `spin::RwLock`; a ticket-lock-protected rwsem |
//! | [`mmap::MmapSleep`] | the same as it was: sleeping locks, faults that sleep for I/O holding it | `PerCpuRwSemaphore` | `RwSemaphore` |
//!
//! # The shape every workload has
//!
//! A workload is a [`Workload`]: a value in caller-provided storage (a
//! `static`, or a leaked box in host tests: it hands out pointers to itself,
//! hence `&'static self`) with
//!
//! * [`setup`](Workload::setup): (re)initialises it for one run of one
//!   variant, with nobody running steps;
//! * [`step`](Workload::step): `n` operations on the calling CPU, returning
//!   [`Counts`]. Thread (CPU) `0` also does the workload's writes now and
//!   then ([`Config::write_every`]). A step reports RCU quiescent states
//!   between operations and runs ready RCU callbacks, as a kernel's loop
//!   would; the caller must have called `rcu::cpu_online()` on this CPU;
//! * [`check`](Workload::check): once every CPU has finished its steps, the
//!   final consistency check (it waits for pending RCU callbacks itself),
//!   an error describing the first violation a step recorded or one it
//!   finds in the final state.
//!
//! Each workload has a deliberately broken variant (a *control*), which
//! [`check`](Workload::check) must catch under [`Config::TORTURE`].
//!
//! `#![no_std]` and no allocation: the QEMU kernel runs the same code as
//! 4-CPU torture suites.

#![no_std]

use core::fmt;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

pub mod dcache;
pub mod fd;
pub mod fget_light;
pub mod mmap;
pub mod stat;
pub mod walk;

/// What a [`Workload::step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Operations (lookups, stat calls, walks, faults): the throughput.
    pub ops: u64,
    /// Writes done by this CPU (opens/closes, renames, chdirs, maps).
    pub writes: u64,
    /// Operations retried (a seqcount changed, a lookup raced a rename).
    pub retries: u64,
    /// Operations that found nothing (a closed fd, a renamed name, an
    /// unmapped address): legitimate outcomes, counted.
    pub misses: u64,
}

impl core::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.ops += o.ops;
        self.writes += o.writes;
        self.retries += o.retries;
        self.misses += o.misses;
    }
}

/// A consistency violation: what was wrong, how often, and a detail of the
/// first occurrence (an fd, a dentry index, a count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The workload's name.
    pub workload: &'static str,
    /// What was wrong.
    pub what: &'static str,
    /// How many times (at least 1).
    pub count: u64,
    /// A workload-specific detail of the first occurrence.
    pub detail: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({} times; first: {})",
            self.workload, self.what, self.count, self.detail
        )
    }
}

/// How a run drives a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// CPU 0 does one write every this many operations, on average
    /// (0: never).
    pub write_every: u32,
    /// Steps of a busy loop ([`delay`]) inside each read section and
    /// write section, to widen race windows (torture); 0 for
    /// measurements.
    pub delay: u32,
}

impl Config {
    /// A torture run: a write after every operation on CPU 0, and race
    /// windows a few hundred cycles wide, so a broken control fails fast.
    pub const TORTURE: Config = Config {
        write_every: 1,
        delay: 200,
    };
}

/// A workload: see the [crate docs](crate) for the contract.
pub trait Workload: Sync + 'static {
    /// The workload's name (tables, plots, violations).
    const NAME: &'static str;
    /// Which design runs.
    type Variant: Copy + fmt::Debug + PartialEq + 'static;
    /// Every variant with its label; controls are listed in [`CONTROL`](Self::CONTROL).
    const VARIANTS: &'static [(Self::Variant, &'static str)];
    /// The deliberately broken variant.
    const CONTROL: Self::Variant;
    /// The measured configuration (how often CPU 0 writes).
    const BENCH: Config;

    /// Tells the workload that `threads` threads (ids `0..threads`) will
    /// call [`step`](Self::step) from now on; nobody may run steps
    /// meanwhile, and [`setup`](Self::setup) follows. Most workloads serve
    /// any number and ignore it; one with a per-thread part sizes it
    /// (without a call: 4).
    fn set_threads(&'static self, threads: usize) {
        let _ = threads;
    }
    /// Prepares one run of `variant`; nobody may run steps meanwhile.
    fn setup(&'static self, variant: Self::Variant, config: Config);
    /// `n` operations as CPU `cpu` of the run (0-based; CPU 0 also writes).
    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts;
    /// The final check, after every CPU finished its steps.
    fn check(&self) -> Result<(), Violation>;
}

/// A small xorshift generator (one per CPU; no shared state).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value).
    pub const fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (`n > 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
}

/// Busy-waits `n` steps of a loop the compiler must keep (the torture
/// windows): about as long on every architecture and emulator. Not
/// `spin_loop`: under QEMU's TCG an x86_64 `pause` leaves the vCPU's
/// translated code for QEMU's main loop, about 220 ns each against 3.5 ns
/// for aarch64's `isb` (the `cost` suite of `qemu/`), so 200 of them made
/// every x86_64 torture operation about 45 us and the x86_64 guests ran
/// 30-100x fewer seed operations than the aarch64 ones.
#[inline]
pub(crate) fn delay(n: u32) {
    for i in 0..n {
        core::hint::black_box(i);
    }
}

/// Per-operation RCU housekeeping, as a kernel loop does it: a quiescent
/// state every 64 operations, ready callbacks every 256.
#[inline]
pub(crate) fn housekeeping(i: u64) {
    if i % 64 == 63 {
        ksync::rcu::quiescent_state();
    }
    if i % 256 == 255 {
        ksync::rcu::process_callbacks();
    }
}

/// Violations recorded by steps: a count and the first one.
#[derive(Debug)]
pub(crate) struct Faults {
    count: AtomicU64,
    /// Index into the workload's list of messages, + 1 (0: none yet).
    first: AtomicUsize,
    detail: AtomicU64,
}

impl Faults {
    pub(crate) const fn new() -> Self {
        Faults {
            count: AtomicU64::new(0),
            first: AtomicUsize::new(0),
            detail: AtomicU64::new(0),
        }
    }

    pub(crate) fn reset(&self) {
        // Relaxed: setup runs with no step running; the run's start (the
        // driver's thread spawn or barrier) orders it.
        self.count.store(0, Relaxed);
        self.first.store(0, Relaxed);
        self.detail.store(0, Relaxed);
    }

    /// Records violation `what` (an index into the messages of
    /// [`result`](Self::result)).
    #[cold]
    pub(crate) fn record(&self, what: usize, detail: u64) {
        // Relaxed: read by `check` after the run's end (thread joins).
        if self
            .first
            .compare_exchange(0, what + 1, Relaxed, Relaxed)
            .is_ok()
        {
            self.detail.store(detail, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
    }

    /// Violations recorded so far.
    pub(crate) fn count(&self) -> u64 {
        // Relaxed: a statistic (the check reads it after the run).
        self.count.load(Relaxed)
    }

    pub(crate) fn result(
        &self,
        workload: &'static str,
        messages: &[&'static str],
    ) -> Result<(), Violation> {
        let first = self.first.load(Relaxed);
        if first == 0 {
            return Ok(());
        }
        Err(Violation {
            workload,
            what: messages[first - 1],
            count: self.count.load(Relaxed),
            detail: self.detail.load(Relaxed),
        })
    }
}

/// A violation of the final state.
pub(crate) fn violation(workload: &'static str, what: &'static str, detail: u64) -> Violation {
    Violation {
        workload,
        what,
        count: 1,
        detail,
    }
}

/// A workload's run settings, set by `setup` and read by every step.
#[derive(Debug)]
pub(crate) struct Settings {
    variant: AtomicUsize,
    write_every: core::sync::atomic::AtomicU32,
    delay: core::sync::atomic::AtomicU32,
}

impl Settings {
    pub(crate) const fn new() -> Self {
        Settings {
            variant: AtomicUsize::new(0),
            write_every: core::sync::atomic::AtomicU32::new(0),
            delay: core::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Stores `variant` (as its index in `variants`) and `config`.
    pub(crate) fn set<V: PartialEq>(&self, variants: &[(V, &str)], variant: V, config: Config) {
        let i = variants
            .iter()
            .position(|(v, _)| *v == variant)
            .expect("variant not in VARIANTS");
        // Relaxed: setup runs before the run's steps start (the driver's
        // thread spawn or barrier orders it).
        self.variant.store(i, Relaxed);
        self.write_every.store(config.write_every, Relaxed);
        self.delay.store(config.delay, Relaxed);
    }

    /// The variant and configuration of this run.
    #[inline]
    pub(crate) fn get<V: Copy>(&self, variants: &[(V, &str)]) -> (V, Config) {
        // Relaxed: see `set`.
        let config = Config {
            write_every: self.write_every.load(Relaxed),
            delay: self.delay.load(Relaxed),
        };
        (variants[self.variant.load(Relaxed)].0, config)
    }
}

/// Drops a reference counted by `refs`; `true` if it was the last.
#[inline]
pub(crate) fn put_last(refs: &ksync::LockRef) -> bool {
    match refs.put_return() {
        Some(n) => n == 0,
        // The lockless path declined (count <= 1, or the lock is held):
        // decide under the lock.
        None => match refs.put_or_lock() {
            None => false,
            Some(mut locked) => {
                let c = locked.count();
                locked.set_count(c - 1);
                c == 1
            }
        },
    }
}

/// Whether CPU `cpu` writes before its next operation: CPU 0, on average
/// once every [`Config::write_every`] operations (random, so that the rate
/// does not depend on how many operations a step is asked for).
#[inline]
pub(crate) fn writes_now(cpu: usize, config: Config, rng: &mut Rng) -> bool {
    cpu == 0 && random_write(config, rng)
}

/// True on average once every [`Config::write_every`] calls (never at 0).
#[inline]
pub(crate) fn random_write(config: Config, rng: &mut Rng) -> bool {
    match config.write_every {
        0 => false,
        1 => true,
        n => rng.below(u64::from(n)) == 0,
    }
}
