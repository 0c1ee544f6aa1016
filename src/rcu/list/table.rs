//! [`RcuHashTable`]: a fixed array of [`Hlist`] buckets, as the dentry
//! cache uses.

use core::fmt;

use super::{HeldLock, Hlist, Iter, Linked, link_of};
use crate::rcu::ReadGuard;
use crate::sync::{Ordering, array, const_fn};

/// `N` [`Hlist`] buckets; an object lives in bucket `hash % N` of a hash
/// the caller computes (the same one for insertion and lookup). Writers of
/// one bucket share a lock; one lock for the whole table, or one per
/// bucket (each bucket binds its own), both work.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, Link, RcuHashTable};
/// use ksync::spinlock::TicketMutex;
///
/// struct Name { hash: u64, text: &'static str, link: Link }
/// ksync::impl_linked!(Name, link);
///
/// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
/// static LOCK: TicketMutex<()> = TicketMutex::new(());
///
/// let name: &'static Name = Box::leak(Box::new(Name { hash: 0x9e37, text: "etc", link: Link::new() }));
/// // SAFETY: leaked: valid for ever.
/// unsafe { NAMES.insert(&mut LOCK.lock(), name.hash, name) };
/// rcu::cpu_online(); // this CPU reads: RCU must watch it
/// let guard = rcu::read_lock();
/// let found = NAMES.find(0x9e37, &guard, |n| n.text == "etc");
/// assert!(found.is_some_and(|n| core::ptr::eq(n, name)));
/// assert!(NAMES.find(0x9e37, &guard, |n| n.text == "usr").is_none());
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new) (every bucket empty) for any
/// `N > 0`.
#[doc(alias("hlist_bl_head", "DEFINE_HASHTABLE"))]
pub struct RcuHashTable<T, const N: usize, Tag = ()> {
    buckets: [Hlist<T, Tag>; N],
}

impl<T: Linked<Tag>, const N: usize, Tag> RcuHashTable<T, N, Tag> {
    const_fn! {
        /// An empty table.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// # use ksync::rcu::{self, Link, RcuHashTable};
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Name { hash: u64, text: &'static str, link: Link }
        /// # ksync::impl_linked!(Name, link);
        ///
        /// static DCACHE: RcuHashTable<Name, 256> = RcuHashTable::new(); // DEFINE_HASHTABLE
        /// assert!(DCACHE.buckets().iter().all(|b| b.is_empty()));
        /// ```
        pub fn new() -> Self {
            assert!(N > 0, "rculist: a hash table needs at least one bucket");
            Self {
                buckets: array![Hlist::new(); N],
            }
        }
    }

    /// The bucket for `hash`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// // One lock per bucket, say, chosen by the same hash:
    /// static LOCKS: [TicketMutex<()>; 64] = [const { TicketMutex::new(()) }; 64];
    /// static ETC: Name = Name { hash: 0x9e37, text: "etc", link: Link::new() };
    ///
    /// let bucket = NAMES.bucket(ETC.hash); // bucket `hash % 64`
    /// // SAFETY: `ETC` is a static: valid and in place for ever.
    /// unsafe { bucket.push_front(&mut LOCKS[(ETC.hash % 64) as usize].lock(), &ETC) };
    /// assert!(!NAMES.bucket(0x9e37).is_empty());
    /// ```
    #[inline]
    pub fn bucket(&self, hash: u64) -> &Hlist<T, Tag> {
        &self.buckets[(hash % N as u64) as usize]
    }

    /// All buckets.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// # static LOCK: TicketMutex<()> = TicketMutex::new(());
    /// # static ETC: Name = Name { hash: 0x9e37, text: "etc", link: Link::new() };
    /// # unsafe { NAMES.insert(&mut LOCK.lock(), ETC.hash, &ETC) };
    ///
    /// // Statistics: how full the chains are.
    /// let used = NAMES.buckets().iter().filter(|b| !b.is_empty()).count();
    /// assert_eq!(used, 1);
    /// ```
    pub fn buckets(&self) -> &[Hlist<T, Tag>; N] {
        &self.buckets
    }

    /// The objects in `hash`'s bucket (some with other hashes), for the
    /// read section of `guard`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// # static LOCK: TicketMutex<()> = TicketMutex::new(());
    /// # static ETC: Name = Name { hash: 0x9e37, text: "etc", link: Link::new() };
    /// # unsafe { NAMES.insert(&mut LOCK.lock(), ETC.hash, &ETC) };
    ///
    /// let guard = rcu::read_lock();
    /// let same_hash = NAMES.iter_hash(0x9e37, &guard).filter(|n| n.hash == 0x9e37);
    /// assert_eq!(same_hash.count(), 1);
    /// ```
    #[doc(alias = "hash_for_each_possible_rcu")]
    pub fn iter_hash<'g>(&'g self, hash: u64, guard: &'g ReadGuard) -> Iter<'g, T, Tag> {
        self.bucket(hash).iter(guard)
    }

    /// The first object in `hash`'s bucket that `matches`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// # static LOCK: TicketMutex<()> = TicketMutex::new(());
    /// # static ETC: Name = Name { hash: 0x9e37, text: "etc", link: Link::new() };
    /// # unsafe { NAMES.insert(&mut LOCK.lock(), ETC.hash, &ETC) };
    ///
    /// // A lookup (the dentry cache's d_lookup_rcu): no lock taken.
    /// let guard = rcu::read_lock();
    /// let hit = NAMES.find(0x9e37, &guard, |n| n.text == "etc");
    /// assert_eq!(hit.map(|n| n.text), Some("etc"));
    /// ```
    pub fn find<'g>(
        &'g self,
        hash: u64,
        guard: &'g ReadGuard,
        mut matches: impl FnMut(&T) -> bool,
    ) -> Option<&'g T> {
        self.iter_hash(hash, guard).find(|t| matches(t))
    }

    /// Inserts `node` at the front of `hash`'s bucket.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// static NAMES_LOCK: TicketMutex<()> = TicketMutex::new(()); // one for the table
    /// static USR: Name = Name { hash: 0x51ed, text: "usr", link: Link::new() };
    ///
    /// // SAFETY: `USR` is a static: valid and in place for ever.
    /// unsafe { NAMES.insert(&mut NAMES_LOCK.lock(), USR.hash, &USR) };
    /// assert!(USR.link.is_linked());
    /// ```
    ///
    /// # Safety
    /// As for [`Hlist::push_front`].
    ///
    /// # Panics
    /// As [`Hlist::push_front`].
    #[doc(alias = "hash_add_rcu")]
    #[track_caller]
    pub unsafe fn insert(&self, lock: &mut impl HeldLock, hash: u64, node: &T) {
        // SAFETY: the caller's contract.
        unsafe { self.bucket(hash).push_front(lock, node) }
    }

    /// Removes `node` from whichever bucket it is in; as
    /// [`Hlist::remove`].
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// # use ksync::rcu::{self, Link, RcuHashTable};
    /// # use ksync::spinlock::TicketMutex;
    /// # struct Name { hash: u64, text: &'static str, link: Link }
    /// # ksync::impl_linked!(Name, link);
    ///
    /// static NAMES: RcuHashTable<Name, 64> = RcuHashTable::new();
    /// static NAMES_LOCK: TicketMutex<()> = TicketMutex::new(());
    /// # static USR: Name = Name { hash: 0x51ed, text: "usr", link: Link::new() };
    /// # unsafe { NAMES.insert(&mut NAMES_LOCK.lock(), USR.hash, &USR) };
    ///
    /// NAMES.remove(&mut NAMES_LOCK.lock(), &USR); // no hash needed
    /// rcu::synchronize(); // before it is freed or inserted again
    /// assert!(NAMES.find(USR.hash, &rcu::read_lock(), |n| n.text == "usr").is_none());
    /// ```
    ///
    /// # Panics
    /// If `node` is not in this table, or `lock` is not the lock of its
    /// bucket's writers.
    #[doc(alias = "hash_del_rcu")]
    #[track_caller]
    pub fn remove(&self, lock: &mut impl HeldLock, node: &T) {
        // Relaxed: a hint to find the bucket; its `remove` checks it again
        // under the lock.
        let state = link_of(node).state.load(Ordering::Relaxed);
        let offset = state.wrapping_sub(self.buckets.as_ptr() as usize);
        let size = size_of::<Hlist<T, Tag>>();
        let index = if offset % size == 0 && offset / size < N {
            offset / size
        } else {
            0 // Not in this table: the bucket's check panics.
        };
        self.buckets[index].remove(lock, node);
    }
}

impl<T: Linked<Tag>, const N: usize, Tag> Default for RcuHashTable<T, N, Tag> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize, Tag> fmt::Debug for RcuHashTable<T, N, Tag> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RcuHashTable<{N}>")
    }
}
