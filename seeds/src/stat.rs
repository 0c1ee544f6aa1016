//! The `stat()` storm (Linux 3.12, 2013: lockref; Linus's loop of `stat()`
//! calls on one path from every thread of a 4-core/8-thread i7 went from
//! 26.7 M to 54.7 M loops, 2.05x).
//!
//! Every CPU walks the same 4-component path `/a/b/c/d` in RCU mode (no
//! references along the way; each step validated with the parent's
//! `d_seq`), then takes and drops a reference on the final dentry, which
//! all CPUs share:
//!
//! * After: [`LockRef::get_not_dead`](ksync::LockRef::get_not_dead) and
//!   `put_return`: one compare-exchange each, the lock never taken.
//! * Before: the same word's lock taken for each get and each put (Linux's
//!   `d_lock` + `d_count`).
//! * Control: the final dentry's `d_seq` is not re-checked after the
//!   reference is taken, so a `stat` can return the data of a dentry that
//!   was renamed under it (a name paired with another name's tag).
//!
//! Measured runs have no writer (Linus's loop renames nothing); torture
//! runs rename the final dentry between `d` and `e` on CPU 0.

use core::sync::atomic::AtomicU32;
use core::sync::atomic::Ordering::Relaxed;

use ksync::rcu;

use crate::dcache::{Dcache, Dentry, NO_PARENT, tag_of};
use crate::{Config, Counts, Faults, Rng, Settings, Violation, Workload};

/// The names along the path, and the final dentry's other name.
const ROOT: u32 = 1;
const PATH: [u32; 4] = [11, 12, 13, 14];
const RENAMED: u32 = 15;

const MESSAGES: [&str; 1] = ["stat returned a torn dentry (a name with another name's data)"];

/// How the final reference is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatVariant {
    /// Lockless lockref (after).
    Lockref,
    /// The dentry's lock for every get and put (before).
    Locked,
    /// Control: the final `d_seq` check is skipped.
    ControlNoRetry,
}

/// The `stat()` storm.
#[derive(Debug)]
pub struct StatStorm {
    dcache: Dcache,
    root: AtomicU32,
    last: AtomicU32,
    settings: Settings,
    faults: Faults,
}

impl Default for StatStorm {
    fn default() -> Self {
        Self::new()
    }
}

/// How one `stat` ended.
enum Outcome {
    Hit,
    Miss,
}

impl StatStorm {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        StatStorm {
            dcache: Dcache::new(),
            root: AtomicU32::new(0),
            last: AtomicU32::new(0),
            settings: Settings::new(),
            faults: Faults::new(),
        }
    }

    fn get_ref(d: &Dentry, variant: StatVariant) -> bool {
        match variant {
            StatVariant::Lockref | StatVariant::ControlNoRetry => d.refs.get_not_dead(),
            StatVariant::Locked => {
                let mut locked = d.refs.lock();
                if locked.is_dead() {
                    return false;
                }
                let c = locked.count();
                locked.set_count(c + 1);
                true
            }
        }
    }

    fn put_ref(d: &Dentry, variant: StatVariant) {
        match variant {
            StatVariant::Lockref | StatVariant::ControlNoRetry => {
                // The cache holds a reference: never the last.
                crate::put_last(&d.refs);
            }
            StatVariant::Locked => {
                let mut locked = d.refs.lock();
                let c = locked.count();
                locked.set_count(c - 1);
            }
        }
    }

    /// One `stat("/a/b/c/d")`.
    #[inline]
    fn stat(&self, variant: StatVariant, delay: u32, c: &mut Counts) -> Outcome {
        let root = self.dcache.get(self.root.load(Relaxed));
        'retry: loop {
            let guard = rcu::read_lock();
            let mut cur = root;
            let mut seq = cur.seq.read_begin();
            for name in PATH {
                let Some((child, child_seq)) = self.dcache.lookup(cur, name, &guard) else {
                    return Outcome::Miss;
                };
                if cur.seq.read_retry(seq) {
                    c.retries += 1;
                    continue 'retry;
                }
                (cur, seq) = (child, child_seq);
            }
            crate::delay(delay);
            let tag = cur.tag();
            if !Self::get_ref(cur, variant) {
                c.retries += 1;
                continue;
            }
            if variant != StatVariant::ControlNoRetry && cur.seq.read_retry(seq) {
                Self::put_ref(cur, variant);
                c.retries += 1;
                continue;
            }
            // Referenced: usable past the read section.
            let held = self.dcache.get(cur.index());
            drop(guard);
            if tag != tag_of(PATH[3]) {
                self.faults.record(0, u64::from(tag));
            }
            Self::put_ref(held, variant);
            return Outcome::Hit;
        }
    }
}

impl Workload for StatStorm {
    const NAME: &'static str = "stat() storm";
    type Variant = StatVariant;
    const VARIANTS: &'static [(StatVariant, &'static str)] = &[
        (StatVariant::Lockref, "lockref"),
        (StatVariant::Locked, "spinlock + count"),
        (StatVariant::ControlNoRetry, "control: no d_seq retry"),
    ];
    const CONTROL: StatVariant = StatVariant::ControlNoRetry;
    const BENCH: Config = Config {
        write_every: 0,
        delay: 0,
    };

    fn setup(&'static self, variant: StatVariant, config: Config) {
        self.settings.set(Self::VARIANTS, variant, config);
        self.faults.reset();
        self.dcache.reset();
        let root = self.dcache.add(NO_PARENT, ROOT);
        let last = PATH
            .iter()
            .fold(root, |parent, &name| self.dcache.add(parent, name));
        // Relaxed: setup; the run's start orders it.
        self.root.store(root, Relaxed);
        self.last.store(last, Relaxed);
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        let (variant, config) = self.settings.get(Self::VARIANTS);
        let mut c = Counts::default();
        for i in 0..n {
            if crate::writes_now(cpu, config, rng) {
                let last = self.last.load(Relaxed);
                let to = if self.dcache.get(last).name() == PATH[3] {
                    RENAMED
                } else {
                    PATH[3]
                };
                self.dcache.rename(last, to, config.delay / 4);
                c.writes += 1;
            }
            if let Outcome::Miss = self.stat(variant, config.delay, &mut c) {
                c.misses += 1;
            }
            c.ops += 1;
            crate::housekeeping(i);
        }
        rcu::quiescent_state();
        c
    }

    fn check(&self) -> Result<(), Violation> {
        self.faults.result(Self::NAME, &MESSAGES)?;
        self.dcache.check(Self::NAME, |_| 1)
    }
}
