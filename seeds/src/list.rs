//! A private stand-in for `ksync::rcu::list` (an RCU hlist), until that
//! lands: just what the dentry cache needs, behind the three calls
//! [`Head::add_head`], [`Head::del`] and [`Head::iter`] (and the two
//! constructors), so that switching is a change of this file only: make
//! `Head` and `Link` the library's head and node types (or thin wrappers
//! over them) and forward the three calls.
//!
//! Writers (insertion and removal) are serialised by the caller's lock;
//! readers iterate under an RCU read guard. Nodes live as long as their
//! heads: the dentries sit in the cache's fixed pool next to the buckets.

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use ksync::rcu::ReadGuard;

/// The link embedded in a list member (`struct hlist_node`).
#[derive(Debug)]
pub(crate) struct Link {
    next: AtomicPtr<Link>,
    linked: AtomicBool,
}

impl Link {
    pub(crate) const fn new() -> Self {
        Link {
            next: AtomicPtr::new(ptr::null_mut()),
            linked: AtomicBool::new(false),
        }
    }
}

/// A list head (`struct hlist_head`).
#[derive(Debug)]
pub(crate) struct Head {
    first: AtomicPtr<Link>,
}

impl Head {
    pub(crate) const fn new() -> Self {
        Head {
            first: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Adds `node` at the front (`hlist_add_head_rcu`).
    ///
    /// # Panics
    /// If `node` is already on a list.
    ///
    /// # Safety
    /// The caller holds the lock that serialises this list's writers, and
    /// `node` stays valid as long as this head (readers of the head may
    /// reach it until then; the dentry cache keeps both in one pool).
    pub(crate) unsafe fn add_head(&self, node: &Link) {
        // Relaxed: writers are serialised by the caller's lock.
        assert!(
            !node.linked.swap(true, Ordering::Relaxed),
            "rcu list: adding a node that is already on a list"
        );
        node.next
            .store(self.first.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release pairs with the Acquire loads in `Iter::next`: a reader
        // that finds the node sees its `next` and the member's fields as
        // the writer initialised them.
        self.first
            .store(node as *const Link as *mut Link, Ordering::Release);
    }

    /// Unlinks `node` (`hlist_del_rcu`); its `next` stays intact, so a
    /// reader standing on it can go on.
    ///
    /// # Panics
    /// If `node` is not on this list.
    ///
    /// # Safety
    /// As for [`add_head`](Self::add_head).
    pub(crate) unsafe fn del(&self, node: &Link) {
        let target = node as *const Link as *mut Link;
        let mut prev = &self.first;
        loop {
            // Relaxed: writers are serialised by the caller's lock.
            let cur = prev.load(Ordering::Relaxed);
            assert!(
                !cur.is_null(),
                "rcu list: removing a node that is not on this list"
            );
            if cur == target {
                // Release: the successor's publication (its own Release,
                // seen under the writers' lock) carries over to readers
                // that load this pointer with Acquire.
                prev.store(node.next.load(Ordering::Relaxed), Ordering::Release);
                node.linked.store(false, Ordering::Relaxed);
                return;
            }
            // SAFETY: every node on a list lives as long as the head
            // (`add_head`), so `cur` is valid.
            prev = unsafe { &(*cur).next };
        }
    }

    /// The members, lock-free, for the read section of `guard`
    /// (`hlist_for_each_entry_rcu`).
    pub(crate) fn iter<'g>(&'g self, _guard: &'g ReadGuard) -> Iter<'g> {
        Iter {
            next: &self.first,
            _guard,
        }
    }
}

/// Iterator of [`Head::iter`].
pub(crate) struct Iter<'g> {
    next: &'g AtomicPtr<Link>,
    _guard: &'g ReadGuard,
}

impl<'g> Iterator for Iter<'g> {
    type Item = &'g Link;

    #[inline]
    fn next(&mut self) -> Option<&'g Link> {
        // Acquire pairs with the Release stores in `add_head` / `del`.
        let cur = self.next.load(Ordering::Acquire);
        // SAFETY: nodes live as long as the head (`add_head`), which
        // outlives `'g`.
        let link = unsafe { cur.as_ref() }?;
        self.next = &link.next;
        Some(link)
    }
}

#[cfg(test)]
mod tests {
    use super::{Head, Link};
    use ksync::rcu;

    fn collect(head: &Head, links: &[Link]) -> [Option<usize>; 4] {
        let guard = rcu::read_lock();
        let mut out = [None; 4];
        for (slot, l) in out.iter_mut().zip(head.iter(&guard)) {
            *slot = links.iter().position(|x| core::ptr::eq(x, l));
        }
        out
    }

    #[test]
    fn add_iterate_remove() {
        let (head, links) = (Head::new(), [Link::new(), Link::new(), Link::new()]);
        for l in &links {
            // SAFETY: single-threaded; `links` outlives `head`'s use.
            unsafe { head.add_head(l) };
        }
        assert_eq!(collect(&head, &links), [Some(2), Some(1), Some(0), None]);
        // SAFETY: as above.
        unsafe { head.del(&links[1]) };
        assert_eq!(collect(&head, &links), [Some(2), Some(0), None, None]);
        // SAFETY: as above; re-adding a removed node is allowed.
        unsafe { head.add_head(&links[1]) };
        assert_eq!(collect(&head, &links), [Some(1), Some(2), Some(0), None]);
    }

    #[test]
    #[should_panic(expected = "already on a list")]
    fn double_add_panics() {
        let (head, link) = (Head::new(), Link::new());
        // SAFETY: single-threaded; `link` outlives `head`'s use.
        unsafe {
            head.add_head(&link);
            head.add_head(&link);
        }
    }

    #[test]
    #[should_panic(expected = "not on this list")]
    fn removing_a_stranger_panics() {
        let (head, link) = (Head::new(), Link::new());
        // SAFETY: single-threaded.
        unsafe { head.del(&link) };
    }
}
