//! Store-free path walking (Nick Piggin, 2009; the RCU walk merged in
//! 2.6.38): parallel `git diff` 3.18 s -> 3.12 s.
//!
//! Every CPU is a thread of one process (as `git diff`'s `lstat` threads
//! are) and resolves `src/dir/file<k>` relative to the shared working
//! directory; `src` is a mount point.
//!
//! * After: the process's (root, pwd) pair is read through a
//!   [`SeqLock`]; components are walked under RCU without references, each
//!   step validated with the parent's `d_seq`; the mount on `src` is looked
//!   up under this CPU's [`BrLock`] lock (`vfsmount_lock` as an lglock);
//!   only the final dentry gets a reference (lockref).
//! * Before: the pair is read under the process's `fs->lock` spinlock,
//!   taking a reference on the pwd and its mount (the two shared atomics
//!   under `fs->lock`); each component takes a reference on the child and
//!   drops the parent's (under the dentry's lock, 2009's `d_lock` +
//!   `d_count`); mounts are looked up under one global spinlock.
//! * Control: the after walk reading root and pwd in two separate seqlock
//!   reads: a `chdir` + `chroot` between them yields a pair that was never
//!   the process's (a pwd outside its root), which
//!   [`check`](crate::Workload::check) reports.
//!
//! CPU 0 switches the process between two (root, pwd) pairs now and then.

use core::sync::atomic::AtomicU32;
use core::sync::atomic::Ordering::Relaxed;

use ksync::LockRef;
use ksync::brlock::BrLock;
use ksync::rcu;
use ksync::seqlock::SeqLock;
use ksync::spinlock::TicketMutex;

use crate::dcache::{Dcache, Dentry, NO_PARENT, tag_of};
use crate::{Config, Counts, Faults, Rng, Settings, Violation, Workload};

const ROOT: [u32; 2] = [1, 2];
const HOME: u32 = 3;
const SRC: u32 = 4;
const MNT_ROOT: u32 = 5;
const DIR: u32 = 6;
const FILE0: u32 = 100;
/// Files in `dir`.
pub const FILES: u32 = 16;
/// Mounts: one on each pwd's `src`.
const MOUNTS: usize = 2;

const MESSAGES: [&str; 2] = [
    "a walk started from a (root, pwd) pair the process never had",
    "a walk reached a file with another file's data",
];

/// A mount (`struct vfsmount`).
#[derive(Debug)]
struct Mount {
    /// The dentry it is mounted on.
    point: AtomicU32,
    /// Its root dentry.
    root: AtomicU32,
    /// `mnt_count`.
    refs: LockRef,
}

impl Mount {
    const fn new() -> Self {
        Mount {
            point: AtomicU32::new(0),
            root: AtomicU32::new(0),
            refs: LockRef::new(1),
        }
    }
}

/// Which walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkVariant {
    /// Seqlock pair, brlock mounts, RCU walk without references (after).
    StoreFree,
    /// `fs->lock`, a global mount lock, a reference per component (before).
    Refcounted,
    /// Control: root and pwd read in two separate seqlock reads.
    ControlTornPair,
}

/// The path-walk workload: one process, every CPU one of its threads.
#[derive(Debug)]
pub struct PathWalk {
    dcache: Dcache,
    /// The after design's `fs`: (root, pwd).
    fs: SeqLock<[u32; 2]>,
    /// The before design's `fs` under `fs->lock`.
    fs_lock: TicketMutex<[u32; 2]>,
    /// `vfsmount_lock`, per CPU (after).
    vfsmount: BrLock<()>,
    /// One global mount lock (before).
    mount_lock: TicketMutex<()>,
    mounts: [Mount; MOUNTS],
    /// The mount holding root and pwd.
    root_mnt: LockRef,
    /// Which pair CPU 0 set last (writer only).
    pair: AtomicU32,
    /// Dentry indices of the two (root, pwd) pairs.
    pairs: [[AtomicU32; 2]; 2],
    settings: Settings,
    faults: Faults,
}

impl Default for PathWalk {
    fn default() -> Self {
        Self::new()
    }
}

impl PathWalk {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        PathWalk {
            dcache: Dcache::new(),
            fs: SeqLock::new([0; 2]),
            fs_lock: TicketMutex::new([0; 2]),
            vfsmount: BrLock::new(),
            mount_lock: TicketMutex::new(()),
            mounts: [const { Mount::new() }; MOUNTS],
            root_mnt: LockRef::new(1),
            pair: AtomicU32::new(0),
            pairs: [const { [AtomicU32::new(0), AtomicU32::new(0)] }; 2],
            settings: Settings::new(),
            faults: Faults::new(),
        }
    }

    /// The mount on dentry `point`, for a caller holding a mount lock.
    fn mount_on(&self, point: u32) -> Option<&Mount> {
        // Relaxed: mounts change only at setup.
        self.mounts.iter().find(|m| m.point.load(Relaxed) == point)
    }

    /// (root, pwd) pair `k`, with references for `fs`.
    fn pair_refs(&self, k: usize, delta: i32) -> [u32; 2] {
        let p = [
            self.pairs[k][0].load(Relaxed),
            self.pairs[k][1].load(Relaxed),
        ];
        for &d in &p {
            let d = self.dcache.get(d);
            if delta > 0 {
                d.refs.get();
            } else {
                crate::put_last(&d.refs);
            }
        }
        p
    }

    /// `chroot` + `chdir` to the other pair.
    fn switch(&self, variant: WalkVariant) {
        let k = 1 - self.pair.load(Relaxed) as usize;
        self.pair.store(k as u32, Relaxed);
        let new = self.pair_refs(k, 1);
        let old = match variant {
            WalkVariant::Refcounted => core::mem::replace(&mut *self.fs_lock.lock(), new),
            _ => core::mem::replace(&mut *self.fs.write(), new),
        };
        for d in old {
            crate::put_last(&self.dcache.get(d).refs);
        }
    }

    fn check_pair(&self, [root, pwd]: [u32; 2]) {
        if self.dcache.get(pwd).parent() != root {
            self.faults
                .record(0, u64::from(root) << 32 | u64::from(pwd));
        }
    }

    fn check_file(&self, d: &Dentry, tag: u32, k: u32) {
        if tag != tag_of(FILE0 + k) {
            self.faults.record(1, u64::from(d.index()));
        }
    }

    /// The after walk (and the control's).
    fn walk_store_free(&self, k: u32, variant: WalkVariant, delay: u32, c: &mut Counts) -> bool {
        'retry: loop {
            let pair = if variant == WalkVariant::ControlTornPair {
                let root = self.fs.read()[0];
                crate::delay(delay);
                [root, self.fs.read()[1]]
            } else {
                self.fs.read()
            };
            self.check_pair(pair);
            let guard = rcu::read_lock();
            let mut cur = self.dcache.get(pair[1]);
            let mut seq = cur.seq.read_begin();
            for name in [SRC, DIR, FILE0 + k] {
                let Some((mut child, mut child_seq)) = self.dcache.lookup(cur, name, &guard) else {
                    return false;
                };
                if cur.seq.read_retry(seq) {
                    c.retries += 1;
                    continue 'retry;
                }
                if child.is_mounted() {
                    let _mounts = self.vfsmount.local_lock();
                    let Some(m) = self.mount_on(child.index()) else {
                        return false;
                    };
                    child = self.dcache.get(m.root.load(Relaxed));
                    child_seq = child.seq.read_begin();
                }
                (cur, seq) = (child, child_seq);
            }
            crate::delay(delay);
            let tag = cur.tag();
            if !cur.refs.get_not_dead() {
                c.retries += 1;
                continue;
            }
            if cur.seq.read_retry(seq) {
                crate::put_last(&cur.refs);
                c.retries += 1;
                continue;
            }
            // Referenced: usable past the read section.
            let held = self.dcache.get(cur.index());
            drop(guard);
            self.check_file(held, tag, k);
            crate::put_last(&held.refs);
            return true;
        }
    }

    /// `dget` under the dentry's lock (2009).
    fn dget_locked(d: &Dentry) {
        let mut locked = d.refs.lock();
        let c = locked.count();
        locked.set_count(c + 1);
    }

    /// `dput` under the dentry's lock (2009).
    fn dput_locked(d: &Dentry) {
        let mut locked = d.refs.lock();
        let c = locked.count();
        locked.set_count(c - 1);
    }

    /// The before walk.
    fn walk_refcounted(&self, k: u32, delay: u32) -> bool {
        let pair = {
            let fs = self.fs_lock.lock();
            Self::dget_locked(self.dcache.get(fs[1]));
            self.root_mnt.get();
            *fs
        };
        self.check_pair(pair);
        let mut mnt = &self.root_mnt;
        let mut cur = self.dcache.get(pair[1]);
        let mut found = true;
        for name in [SRC, DIR, FILE0 + k] {
            let child = {
                let guard = rcu::read_lock();
                match self.dcache.lookup(cur, name, &guard) {
                    Some((child, _)) => {
                        Self::dget_locked(child);
                        // Referenced: usable past the read section.
                        Some(self.dcache.get(child.index()))
                    }
                    None => None,
                }
            };
            let Some(mut child) = child else {
                found = false;
                break;
            };
            Self::dput_locked(cur);
            if child.is_mounted() {
                let m = {
                    let _mounts = self.mount_lock.lock();
                    self.mount_on(child.index()).inspect(|m| m.refs.get())
                };
                if let Some(m) = m {
                    crate::put_last(mnt);
                    mnt = &m.refs;
                    let root = self.dcache.get(m.root.load(Relaxed));
                    Self::dget_locked(root);
                    Self::dput_locked(child);
                    child = root;
                }
            }
            cur = child;
        }
        if found {
            crate::delay(delay);
            let tag = cur.tag();
            self.check_file(cur, tag, k);
        }
        Self::dput_locked(cur);
        crate::put_last(mnt);
        found
    }
}

impl Workload for PathWalk {
    const NAME: &'static str = "path walk";
    type Variant = WalkVariant;
    const VARIANTS: &'static [(WalkVariant, &'static str)] = &[
        (WalkVariant::StoreFree, "seqlock + brlock + RCU walk"),
        (WalkVariant::Refcounted, "fs->lock + refs per component"),
        (WalkVariant::ControlTornPair, "control: torn (root, pwd)"),
    ];
    const CONTROL: WalkVariant = WalkVariant::ControlTornPair;
    const BENCH: Config = Config {
        write_every: 4096,
        delay: 0,
    };

    fn setup(&'static self, variant: WalkVariant, config: Config) {
        self.settings.set(Self::VARIANTS, variant, config);
        self.faults.reset();
        self.dcache.reset();
        let d = &self.dcache;
        let mnt_root = d.add(NO_PARENT, MNT_ROOT);
        let dir = d.add(mnt_root, DIR);
        for k in 0..FILES {
            d.add(dir, FILE0 + k);
        }
        for (k, &name) in ROOT.iter().enumerate() {
            let root = d.add(NO_PARENT, name);
            let home = d.add(root, HOME);
            let src = d.add(home, SRC);
            d.get(src).set_mounted(true);
            // Relaxed: setup; the run's start orders it.
            self.mounts[k].point.store(src, Relaxed);
            self.mounts[k].root.store(mnt_root, Relaxed);
            self.mounts[k].refs.lock().set_count(1);
            self.pairs[k][0].store(root, Relaxed);
            self.pairs[k][1].store(home, Relaxed);
        }
        self.root_mnt.lock().set_count(1);
        self.pair.store(0, Relaxed);
        let first = self.pair_refs(0, 1);
        self.fs.store(first);
        *self.fs_lock.lock() = first;
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        let (variant, config) = self.settings.get(Self::VARIANTS);
        let mut c = Counts::default();
        for i in 0..n {
            if crate::writes_now(cpu, config, rng) {
                self.switch(variant);
                c.writes += 1;
            }
            let k = rng.below(u64::from(FILES)) as u32;
            let found = match variant {
                WalkVariant::Refcounted => self.walk_refcounted(k, config.delay),
                _ => self.walk_store_free(k, variant, config.delay, &mut c),
            };
            if !found {
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
        let k = self.pair.load(Relaxed) as usize;
        let held = [
            self.pairs[k][0].load(Relaxed),
            self.pairs[k][1].load(Relaxed),
        ];
        self.dcache
            .check(Self::NAME, |i| if held.contains(&i) { 2 } else { 1 })?;
        for m in self.mounts.iter().map(|m| &m.refs).chain([&self.root_mnt]) {
            if m.count() != 1 {
                return Err(crate::violation(
                    Self::NAME,
                    "a mount's count is off after the run",
                    m.count() as u64,
                ));
            }
        }
        Ok(())
    }
}
