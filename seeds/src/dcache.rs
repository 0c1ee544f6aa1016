//! A dentry cache: a hash table of RCU lists of dentries, each with a
//! [`LockRef`] and a [`SeqCount`] (Linux's `d_lockref` and `d_seq`), used
//! by the [`stat`](crate::stat) and [`walk`](crate::walk) workloads.
//!
//! Dentries come from a fixed pool and are never freed (the workloads
//! create their trees at setup and only rename afterwards), so the RCU
//! lists need no `call_rcu` here. Names are numbers.
//!
//! Lookups (`__d_lookup_rcu`) walk a bucket under an RCU read guard and
//! return the dentry with the `d_seq` they read before comparing its
//! parent and name; the caller validates what it used with
//! [`SeqCount::read_retry`]. A rename moves a dentry between buckets while
//! readers may stand on it, so a reader can fall off into another bucket
//! and miss: a miss is believed only if the global `rename_seq` (Linux's
//! `rename_lock` seqlock) did not change meanwhile.
//!
//! The lists are `crate::list`, a private stand-in for
//! `ksync::rcu::list` until that lands.

use core::mem::offset_of;
use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

use ksync::LockRef;
use ksync::rcu::{self, ReadGuard};
use ksync::seqlock::SeqCount;
use ksync::spinlock::TicketMutex;

use crate::list::{Head, Link};
use crate::{Violation, violation};

/// Buckets in the hash table.
pub const BUCKETS: usize = 64;
/// Dentries in the pool.
pub const DENTRIES: usize = 48;
/// "No parent" (a root).
pub const NO_PARENT: u32 = u32::MAX;

/// The "inode data" a `stat` reads: a function of the name, written with
/// it under `d_seq`, so a reader that pairs a name with another name's tag
/// read a torn dentry.
#[inline]
pub const fn tag_of(name: u32) -> u32 {
    name.wrapping_mul(0x9e37_79b1) ^ 0x5eed
}

/// A dentry, on cache lines of its own (Linux aligns dentries to a cache
/// line too).
#[derive(Debug)]
#[repr(align(128))]
pub struct Dentry {
    link: Link,
    parent: AtomicU32,
    name: AtomicU32,
    tag: AtomicU32,
    /// Something is mounted here (`DCACHE_MOUNTED`).
    mounted: AtomicBool,
    /// `d_lockref`: the count of references.
    pub refs: LockRef,
    /// `d_seq`: written around every change of the name (and its tag).
    pub seq: SeqCount,
    index: AtomicU32,
}

impl Dentry {
    const fn new() -> Self {
        Dentry {
            link: Link::new(),
            parent: AtomicU32::new(NO_PARENT),
            name: AtomicU32::new(0),
            tag: AtomicU32::new(0),
            mounted: AtomicBool::new(false),
            refs: LockRef::new(0),
            seq: SeqCount::new(),
            index: AtomicU32::new(0),
        }
    }

    /// The dentry's index in its cache.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index.load(Relaxed)
    }

    /// The parent's index ([`NO_PARENT`] for a root); validate with `seq`.
    #[inline]
    pub fn parent(&self) -> u32 {
        self.parent.load(Relaxed)
    }

    /// The name; validate with `seq`.
    #[inline]
    pub fn name(&self) -> u32 {
        self.name.load(Relaxed)
    }

    /// The inode data; validate with `seq`.
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag.load(Relaxed)
    }

    /// Whether something is mounted on it.
    #[inline]
    pub fn is_mounted(&self) -> bool {
        self.mounted.load(Relaxed)
    }

    /// Marks it as a mount point (setup only).
    pub fn set_mounted(&self, mounted: bool) {
        // Relaxed: setup; the run's start orders it.
        self.mounted.store(mounted, Relaxed);
    }
}

/// The cache.
#[derive(Debug)]
pub struct Dcache {
    dentries: [Dentry; DENTRIES],
    buckets: [Head; BUCKETS],
    /// Serialises every writer: adds, renames (`rename_lock`).
    rename_lock: TicketMutex<()>,
    /// Changes around every rename (`rename_lock`'s sequence).
    rename_seq: SeqCount,
    used: AtomicUsize,
}

impl Default for Dcache {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn bucket_of(parent: u32, name: u32) -> usize {
    let h = parent.wrapping_mul(0x85eb_ca6b) ^ name.wrapping_mul(0x9e37_79b1);
    (h >> 16) as usize % BUCKETS
}

impl Dcache {
    /// An empty cache.
    pub const fn new() -> Self {
        Dcache {
            dentries: [const { Dentry::new() }; DENTRIES],
            buckets: [const { Head::new() }; BUCKETS],
            rename_lock: TicketMutex::new(()),
            rename_seq: SeqCount::new(),
            used: AtomicUsize::new(0),
        }
    }

    /// Empties the cache (unhashes every dentry); nobody may use it
    /// meanwhile.
    pub fn reset(&self) {
        let _lock = self.rename_lock.lock();
        for d in &self.dentries[..self.used.load(Relaxed)] {
            // SAFETY: we hold `rename_lock`, which serialises the lists'
            // writers; every dentry below `used` is hashed (`add`, and
            // `rename` re-hashes).
            unsafe { self.buckets[bucket_of(d.parent(), d.name())].del(&d.link) };
            d.refs.lock().set_count(0);
            d.set_mounted(false);
        }
        // Relaxed: nobody runs; the run's start orders it.
        self.used.store(0, Relaxed);
    }

    /// Adds a dentry `name` under `parent` (or a root, with
    /// [`NO_PARENT`]) holding one reference (the cache's), and returns its
    /// index.
    ///
    /// # Panics
    /// If the pool is full.
    pub fn add(&self, parent: u32, name: u32) -> u32 {
        let _lock = self.rename_lock.lock();
        let i = self.used.load(Relaxed);
        assert!(i < DENTRIES, "dcache: pool of {DENTRIES} dentries is full");
        self.used.store(i + 1, Relaxed);
        let d = &self.dentries[i];
        // Relaxed: published by `add_head`'s Release.
        d.index.store(i as u32, Relaxed);
        d.parent.store(parent, Relaxed);
        d.name.store(name, Relaxed);
        d.tag.store(tag_of(name), Relaxed);
        d.refs.lock().set_count(1);
        // SAFETY: we hold `rename_lock`, which serialises the lists'
        // writers; the dentry lives in the same pool as the bucket.
        unsafe { self.buckets[bucket_of(parent, name)].add_head(&d.link) };
        i as u32
    }

    /// Dentry `i`.
    #[inline]
    pub fn get(&self, i: u32) -> &Dentry {
        &self.dentries[i as usize]
    }

    #[inline]
    fn dentry_of(link: &Link) -> &Dentry {
        // SAFETY: every link on the buckets is the `link` field of a
        // dentry of the pool (`add`, `rename`), valid as long as the link is.
        unsafe {
            &*(link as *const Link)
                .byte_sub(offset_of!(Dentry, link))
                .cast::<Dentry>()
        }
    }

    /// The child `name` of `parent` and the `d_seq` read before its parent
    /// and name were compared (`__d_lookup_rcu`, with `d_lookup`'s
    /// `rename_lock` check for misses).
    #[inline]
    pub fn lookup<'g>(
        &'g self,
        parent: &Dentry,
        name: u32,
        guard: &'g ReadGuard,
    ) -> Option<(&'g Dentry, u32)> {
        let parent = parent.index();
        let bucket = &self.buckets[bucket_of(parent, name)];
        loop {
            let renames = self.rename_seq.read_begin();
            for link in bucket.iter(guard) {
                let d = Self::dentry_of(link);
                let seq = d.seq.read_begin();
                if d.parent() == parent && d.name() == name {
                    return Some((d, seq));
                }
            }
            if !self.rename_seq.read_retry(renames) {
                return None;
            }
        }
    }

    /// Renames dentry `i` (in place: same parent) to `name` (`d_move`),
    /// with `delay` spins between the name and the tag.
    pub fn rename(&self, i: u32, name: u32, delay: u32) {
        let d = self.get(i);
        let _lock = self.rename_lock.lock();
        // SAFETY: `rename_lock` serialises every writer of `rename_seq`
        // and of every dentry's `d_seq` (only renames write them).
        unsafe {
            self.rename_seq.write_begin();
            d.seq.write_begin();
        }
        let parent = d.parent();
        // SAFETY: we hold `rename_lock`, which serialises the lists' writers.
        unsafe { self.buckets[bucket_of(parent, d.name())].del(&d.link) };
        // Relaxed: inside the write sections (their fences order them).
        d.name.store(name, Relaxed);
        crate::delay(delay);
        d.tag.store(tag_of(name), Relaxed);
        // SAFETY: as above; `d` is one of this cache's dentries, so it
        // lives as long as the bucket.
        unsafe { self.buckets[bucket_of(parent, name)].add_head(&d.link) };
        // SAFETY: ends the write sections begun above, under the same lock.
        unsafe {
            d.seq.write_end();
            self.rename_seq.write_end();
        }
    }

    /// The final check: every dentry holds `expected(index)` references,
    /// its tag matches its name, and it is found by a lookup of its name.
    pub fn check(
        &self,
        name: &'static str,
        expected: impl Fn(u32) -> i32,
    ) -> Result<(), Violation> {
        let guard = rcu::read_lock();
        for d in &self.dentries[..self.used.load(Relaxed)] {
            let i = d.index();
            if d.refs.count() != expected(i) {
                return Err(violation(
                    name,
                    "a dentry's count is off after the run (leaked or lost reference)",
                    u64::from(i) << 32 | d.refs.count() as u32 as u64,
                ));
            }
            if d.tag() != tag_of(d.name()) {
                return Err(violation(
                    name,
                    "a dentry's tag does not match its name",
                    i.into(),
                ));
            }
            let found = self.buckets[bucket_of(d.parent(), d.name())]
                .iter(&guard)
                .filter(|l| core::ptr::eq(Self::dentry_of(l), d))
                .count();
            if found != 1 {
                return Err(violation(
                    name,
                    "a dentry is not hashed exactly once",
                    i.into(),
                ));
            }
        }
        Ok(())
    }
}
