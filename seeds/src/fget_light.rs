//! `fget_light` (Linux 2.6, 2003; reworked as `__fget_light` in 2009):
//! when a process's file table is not shared (`files->count == 1`), only
//! the process itself can close its fds, so the syscall skips both the
//! reference count and its drop: `dd bs=1` system time 2.10 s -> 1.87 s.
//!
//! Each CPU runs its own single-threaded process (a [`Files`] table and a
//! `users` count of the tasks sharing it): CPU `i` of a run of `n` owns
//! process `i % n`, `n` being [`PROCS`] unless the run says otherwise
//! ([`Workload::set_threads`], at most [`MAX_PROCS`]). Only the owner
//! raises `users` (as only `clone` does), so an owner that reads
//! `users == 1` knows nobody else uses the table until it says otherwise.
//!
//! * After: `users == 1` -> a plain lookup, no reference, no atomic
//!   read-modify-write; otherwise `fget` + `fput` (RCU + lockref).
//! * Before: always `fget` + `fput`.
//! * Control: the plain lookup even while the table is shared.
//!
//! Torture runs share tables: every 64 operations an owner raises `users`
//! and lets the CPU after it (its "second thread"; modulo `n`) close and
//! open fds in its table (on average every `write_every` operations of
//! that CPU), then,
//! 64 operations later, takes the table back (a store-load
//! handshake: `share := false`, wait for `helper_in == false`; the helper
//! sets `helper_in`, then re-checks `share`; both `SeqCst`). The control's
//! owner then uses files the helper closed: a count of 0 under a user that
//! holds no reference, which [`check`](crate::Workload::check) reports.
//! Measured runs never share: single-threaded processes, one per CPU.

use core::sync::atomic::Ordering::{Relaxed, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicUsize};

use ksync::LockRef;
use ksync::rcu;

use crate::fd::{Files, LONG_LIVED, Protect};
use crate::{Config, Counts, Rng, Settings, Violation, Workload};

/// Processes by default (one per CPU of a 4-CPU run; CPU `i` owns process
/// `i % PROCS`).
pub const PROCS: usize = 4;
/// The most processes a run may ask for ([`Workload::set_threads`]): one
/// per thread of 8 CPUs with 6 threads each.
pub const MAX_PROCS: usize = 48;
/// Fds looked up: the long-lived ones and as many the helper churns.
const LOOKUP_FDS: u64 = 2 * LONG_LIVED as u64;

/// A single-threaded process and the state of its sharing.
#[derive(Debug)]
struct Process {
    files: Files,
    /// Tasks using the table (`files->count`).
    users: LockRef,
    /// The owner lets its helper in.
    share: AtomicBool,
    /// The helper is inside the table.
    helper_in: AtomicBool,
}

impl Process {
    const fn new() -> Self {
        Process {
            files: Files::new(),
            users: LockRef::new(1),
            share: AtomicBool::new(false),
            helper_in: AtomicBool::new(false),
        }
    }

    /// The owner shares its table with its helper (a `clone`).
    fn share(&self) {
        self.users.get();
        self.share.store(true, SeqCst);
    }

    /// The owner takes its table back: from the return on, the helper is
    /// out and will not come in again.
    fn unshare(&self) {
        self.share.store(false, SeqCst);
        while self.helper_in.load(SeqCst) {
            rcu::quiescent_state();
            core::hint::spin_loop();
        }
        crate::put_last(&self.users);
    }

    /// The helper's write, if the owner lets it in.
    fn help(&self, rng: &mut Rng, delay: u32) -> bool {
        if !self.share.load(SeqCst) {
            return false;
        }
        self.helper_in.store(true, SeqCst);
        let inside = self.share.load(SeqCst);
        if inside {
            self.files.write_op(Protect::Rcu, rng, delay);
        }
        self.helper_in.store(false, SeqCst);
        inside
    }
}

/// Which design serves the lookups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LightVariant {
    /// Skip the count when the table is not shared (after).
    Light,
    /// Always `fget`/`fput` (before).
    AlwaysCount,
    /// Control: skip the count even when the table is shared.
    ControlIgnoreSharing,
}

/// The `fget_light` workload: a process per CPU.
#[derive(Debug)]
pub struct FgetLight {
    procs: [Process; MAX_PROCS],
    /// Processes in use: the run's threads ([`PROCS`] by default).
    owners: AtomicUsize,
    settings: Settings,
}

impl Default for FgetLight {
    fn default() -> Self {
        Self::new()
    }
}

impl FgetLight {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        FgetLight {
            procs: [const { Process::new() }; MAX_PROCS],
            owners: AtomicUsize::new(PROCS),
            settings: Settings::new(),
        }
    }

    /// The processes of this run.
    fn procs(&self) -> &[Process] {
        // Relaxed: see `set_threads`.
        &self.procs[..self.owners.load(Relaxed)]
    }
}

impl Workload for FgetLight {
    const NAME: &'static str = "fget_light";
    type Variant = LightVariant;
    const VARIANTS: &'static [(LightVariant, &'static str)] = &[
        (LightVariant::Light, "fget_light (unshared: no count)"),
        (LightVariant::AlwaysCount, "fget + fput every time"),
        (
            LightVariant::ControlIgnoreSharing,
            "control: light while shared",
        ),
    ];
    const CONTROL: LightVariant = LightVariant::ControlIgnoreSharing;
    const BENCH: Config = Config {
        write_every: 0,
        delay: 0,
    };

    /// One process per thread: a process two threads owned would be
    /// shared for good, and the unshared fast path wrong for it.
    fn set_threads(&'static self, threads: usize) {
        assert!(
            (1..=MAX_PROCS).contains(&threads),
            "fget_light: 1 to {MAX_PROCS} threads"
        );
        // Relaxed: as the settings, before the run's steps start (the
        // driver's thread spawn or barrier orders it).
        self.owners.store(threads, Relaxed);
    }

    fn setup(&'static self, variant: LightVariant, config: Config) {
        rcu::barrier();
        self.settings.set(Self::VARIANTS, variant, config);
        for p in self.procs() {
            p.files.setup(LOOKUP_FDS as usize);
            p.users.lock().set_count(1);
            p.share.store(false, SeqCst);
            p.helper_in.store(false, SeqCst);
        }
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        let (variant, config) = self.settings.get(Self::VARIANTS);
        let procs = self.procs();
        let me = &procs[cpu % procs.len()];
        let other = &procs[(cpu + 1) % procs.len()];
        // Torture runs only (measured runs never share).
        let sharing = config.write_every != 0;
        let mut shared = false;
        let mut c = Counts::default();
        for i in 0..n {
            if sharing {
                if i % 64 == 0 {
                    if shared {
                        me.unshare();
                    } else {
                        me.share();
                    }
                    shared = !shared;
                }
                if crate::random_write(config, rng)
                    && !core::ptr::eq(me, other)
                    && other.help(rng, config.delay)
                {
                    c.writes += 1;
                }
            }
            let fd = rng.below(LOOKUP_FDS) as usize;
            let light = match variant {
                // Relaxed snapshot: only this task raises `users`.
                LightVariant::Light => me.users.count() == 1,
                LightVariant::AlwaysCount => false,
                LightVariant::ControlIgnoreSharing => true,
            };
            if light {
                match me.files.fget_unshared(fd) {
                    Some(f) => {
                        crate::delay(config.delay);
                        // Nobody else can close it: its count is the
                        // table's reference.
                        if f.count() <= 0 {
                            me.files.faults.record(2, fd as u64);
                        }
                        core::hint::black_box(f.fd());
                    }
                    None => c.misses += 1,
                }
            } else {
                match me.files.fget(fd, Protect::Rcu, config.delay) {
                    Some(f) => {
                        core::hint::black_box(f.fd());
                        me.files.fput(f, Protect::Rcu);
                    }
                    None => c.misses += 1,
                }
            }
            c.ops += 1;
            crate::housekeeping(i);
        }
        if shared {
            me.unshare();
        }
        rcu::quiescent_state();
        c
    }

    fn check(&self) -> Result<(), Violation> {
        for p in self.procs() {
            p.files.check(Self::NAME)?;
            if p.users.count() != 1 {
                return Err(crate::violation(
                    Self::NAME,
                    "a table is still shared after the run",
                    p.users.count() as u64,
                ));
            }
        }
        Ok(())
    }
}
