//! A dentry cache: a hash table of RCU lists of dentries, each with a
//! [`LockRef`] and a [`SeqCount`] (Linux's `d_lockref` and `d_seq`), used
//! by the [`stat`](crate::stat) and [`walk`](crate::walk) workloads.
//!
//! Dentries come from a fixed pool and are never freed (the workloads
//! create their trees at setup and only rename afterwards). Names are
//! numbers.
//!
//! Lookups (`__d_lookup_rcu`) walk a bucket under an RCU read guard and
//! return the dentry with the `d_seq` they read before comparing its
//! parent and name; the caller validates what it used with
//! [`SeqCount::read_retry`]. A rename moves a dentry between buckets while
//! readers may stand on it, so a reader can fall off into another bucket
//! and miss: a miss is believed only if the global `rename_seq` (Linux's
//! `rename_lock` seqlock) did not change meanwhile.
//!
//! # The hash chains: `ksync::rcu::list`, and why a dentry has aliases
//!
//! The table is a [`RcuHashTable`] of [`Alias`]es, not of dentries. Linux's
//! `d_move` unhashes a dentry and rehashes it at once, relying on
//! `rename_seq` to catch the readers that followed it into its new chain;
//! ksync's lists refuse that (a removed node may be re-inserted only a
//! grace period after its removal, checked), because the list cannot know
//! that its readers revalidate. So a rename unhashes the dentry's current
//! alias and hashes a free one, pointing at the same dentry: an alias is
//! free once a grace period has passed since its removal (polled cookies,
//! kept under the writers' lock). When none is free, the renamer waits for
//! a grace period outside every lock and read section. Readers pay one
//! more dependent load per chain entry (the alias, then its dentry).

use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

use ksync::LockRef;
use ksync::rcu::{self, Cookie, Link, RcuHashTable, ReadGuard};
use ksync::seqlock::SeqCount;
use ksync::spinlock::TicketMutex;

use crate::{Violation, violation};

/// Buckets in the hash table.
pub const BUCKETS: usize = 64;
/// Dentries in the pool.
pub const DENTRIES: usize = 48;
/// "No parent" (a root).
pub const NO_PARENT: u32 = u32::MAX;
/// Hash-chain entries ([`Alias`]es): twice the dentries, so that renames
/// seldom wait for a grace period.
pub const ALIASES: usize = 2 * DENTRIES;

/// A hash-chain entry for a dentry (see the [module docs](self)).
#[derive(Debug)]
pub struct Alias {
    link: Link,
    /// The dentry's index; written before the alias is hashed (published
    /// by the insertion's Release store).
    dentry: AtomicU32,
}

ksync::impl_linked!(Alias, link);

impl Alias {
    const fn new() -> Self {
        Alias {
            link: Link::new(),
            dentry: AtomicU32::new(0),
        }
    }
}

/// What the writers' lock guards: per alias, `None` if it is hashed or was
/// never used, or the cookie of the grace period after its removal.
#[derive(Debug)]
struct Writers {
    retired: [Option<Cookie>; ALIASES],
}

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
    /// The alias that hashes it (writers only, under the writers' lock).
    alias: AtomicU32,
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
            alias: AtomicU32::new(0),
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
    aliases: [Alias; ALIASES],
    table: RcuHashTable<Alias, BUCKETS>,
    /// Serialises every writer: adds, renames (`rename_lock`).
    rename_lock: TicketMutex<Writers>,
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
fn hash_of(parent: u32, name: u32) -> u64 {
    let h = parent.wrapping_mul(0x85eb_ca6b) ^ name.wrapping_mul(0x9e37_79b1);
    u64::from(h >> 16)
}

type WritersGuard<'a> = ksync::lock_api::MutexGuard<'a, ksync::spinlock::RawTicketLock, Writers>;

impl Dcache {
    /// An empty cache.
    pub const fn new() -> Self {
        Dcache {
            dentries: [const { Dentry::new() }; DENTRIES],
            aliases: [const { Alias::new() }; ALIASES],
            table: RcuHashTable::new(),
            rename_lock: TicketMutex::new(Writers {
                retired: [None; ALIASES],
            }),
            rename_seq: SeqCount::new(),
            used: AtomicUsize::new(0),
        }
    }

    /// Empties the cache (unhashes every dentry); nobody may use it
    /// meanwhile.
    pub fn reset(&self) {
        let mut w = self.rename_lock.lock();
        for d in &self.dentries[..self.used.load(Relaxed)] {
            // Every dentry below `used` is hashed (`add`, and `rename`
            // re-hashes).
            self.unhash(&mut w, d);
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
        let (mut w, alias) = self.lock_with_free_alias();
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
        self.hash(&mut w, d, alias, parent, name);
        i as u32
    }

    /// Dentry `i`.
    #[inline]
    pub fn get(&self, i: u32) -> &Dentry {
        &self.dentries[i as usize]
    }

    /// The writers' lock, with a free alias. Waits for a grace period
    /// (holding nothing) when none is free.
    fn lock_with_free_alias(&self) -> (WritersGuard<'_>, usize) {
        loop {
            let mut w = self.rename_lock.lock();
            let free = (0..ALIASES)
                .find(|&a| !self.aliases[a].link.is_linked() && w.retired[a].is_none_or(rcu::poll));
            if let Some(a) = free {
                w.retired[a] = None;
                return (w, a);
            }
            drop(w);
            rcu::synchronize();
        }
    }

    /// Hashes `d` under (`parent`, `name`) through the free `alias`.
    fn hash(&self, w: &mut WritersGuard<'_>, d: &Dentry, alias: usize, parent: u32, name: u32) {
        let a = &self.aliases[alias];
        // Relaxed: published by the insertion's Release store; `d.alias`
        // is read by writers only, under the lock.
        a.dentry.store(d.index(), Relaxed);
        d.alias.store(alias as u32, Relaxed);
        // SAFETY: the alias lives in the cache, as long as the table, and
        // is on no list: unused, or removed a grace period ago
        // (`lock_with_free_alias`).
        unsafe { self.table.insert(w, hash_of(parent, name), a) };
    }

    /// Unhashes `d` (hashed) and retires its alias.
    fn unhash(&self, w: &mut WritersGuard<'_>, d: &Dentry) {
        // Relaxed: writers only, under the lock.
        let alias = d.alias.load(Relaxed) as usize;
        self.table.remove(w, &self.aliases[alias]);
        w.retired[alias] = Some(rcu::get_state());
    }

    /// The dentry an alias points at.
    #[inline]
    fn dentry_of(&self, alias: &Alias) -> &Dentry {
        // Relaxed: see `Alias::dentry`.
        self.get(alias.dentry.load(Relaxed))
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
        let hash = hash_of(parent, name);
        loop {
            let renames = self.rename_seq.read_begin();
            for alias in self.table.iter_hash(hash, guard) {
                let d = self.dentry_of(alias);
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
        let (mut w, alias) = self.lock_with_free_alias();
        // SAFETY: `rename_lock` serialises every writer of `rename_seq`
        // and of every dentry's `d_seq` (only renames write them).
        unsafe {
            self.rename_seq.write_begin();
            d.seq.write_begin();
        }
        self.unhash(&mut w, d);
        // Relaxed: inside the write sections (their fences order them).
        d.name.store(name, Relaxed);
        crate::delay(delay);
        d.tag.store(tag_of(name), Relaxed);
        self.hash(&mut w, d, alias, d.parent(), name);
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
            let found = self
                .table
                .iter_hash(hash_of(d.parent(), d.name()), &guard)
                .filter(|a| core::ptr::eq(self.dentry_of(a), d))
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
