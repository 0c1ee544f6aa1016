//! RCU-protected intrusive lists: Linux's `rculist.h`, its `hlist` hash
//! chains, and a fixed-size hash table of them.
//!
//! Readers walk a list under an RCU read guard without taking a lock or
//! writing anything shared; writers link and unlink nodes under a lock of
//! the caller's choosing and free a removed node only after a grace
//! period. Nothing allocates: a node is a [`Link`] embedded in the caller's
//! object, and the list reaches the object from the link through the
//! offset that [`impl_linked!`](crate::impl_linked) records.
//!
//! # The shapes
//!
//! * [`RcuList`]: a list with O(1) insertion at both ends (`list_head`).
//! * [`Hlist`]: a hash chain, head insertion only, a smaller head
//!   (`hlist_head`).
//! * [`RcuHashTable`]: `N` hlists, the bucket chosen by a hash the caller
//!   computes (the dentry cache's shape).
//!
//! Every node is a [`Link`] of three words: `next`, which readers follow;
//! `pprev`, the address of the word that points at the node (the head's
//! `first` or the previous node's `next`), so removal needs no walk; and a
//! `state` word that says where the node is. An object can be on several
//! lists at once through several links, told apart by a tag type.
//!
//! # What the writer must guarantee
//!
//! 1. **All writers of one list hold the same lock.** Each writer call
//!    takes the held lock's guard (`&mut` a [`HeldLock`], for example a
//!    [`lock_api::MutexGuard`]); the first writer binds the list to that
//!    lock and later writers holding a different one panic. So this part is
//!    checked, and safe code cannot race two writers.
//! 2. **A node stays valid and in place from insertion until a grace period
//!    after its removal** (readers may still stand on it): free it through
//!    [`call_rcu`](super::call_rcu) or after [`synchronize`](super::synchronize).
//!    The list itself does not move while it has nodes. This is why the
//!    insertions are `unsafe fn`s; removal is safe.
//! 3. **A removed node is re-inserted only after a grace period**, or a
//!    reader standing on it would follow its `next` into its new position
//!    and could miss nodes or see some twice. This is checked: removal
//!    records an RCU cookie in the node, and inserting it again before the
//!    cookie completed panics.
//!
//! Inserting a node that is on a list, removing one that is not (or is on
//! another list), or anchoring an insertion at a node of another list
//! panics before anything is changed: misuse never corrupts a list.
//!
//! # Publication and removal
//!
//! An insertion fills in the new node's `next` first, then links it with a
//! single **Release** store into its predecessor's `next` (or the head):
//! whatever the caller wrote into the object before inserting it, and the
//! node's own `next`, is visible to a reader that loads the pointer with
//! the **Acquire** loads of [`iter`](RcuList::iter). (Linux relies on
//! address dependencies here; Rust has no consume ordering, so readers use
//! Acquire, which is a plain load on x86 and `ldar` on aarch64.)
//!
//! Removal stores the removed node's `next` into its predecessor, also with
//! Release: a reader that sees the successor through that store must see
//! the successor's contents, and the store that first published the
//! successor does not order them for it. The removed node's `next` is left
//! as it was, so a reader standing on the node carries on to the rest of
//! the list. `pprev` and `state` are read and written by writers only,
//! under their lock (Relaxed); the state's hand-over from one list to the
//! next (a removal, then an insertion elsewhere under another lock) is a
//! Release store paired with an Acquire compare-exchange.
//!
//! Replacing a node publishes the new one in the old one's place with one
//! Release store: a reader sees the old node or the new one, never neither.
//!
//! # States of a link
//!
//! | `state` | meaning |
//! |---|---|
//! | 0 | never linked (or its list was dropped) |
//! | even, non-zero | on the list whose head is at this address |
//! | odd | removed; `state & !1` is the cookie of the grace period that must pass before it is re-inserted (Linux's `LIST_POISON`) |
//!
//! # Example
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use core::mem::offset_of;
//! use ksync::rcu::{self, Link, RcuHead, RcuList};
//! use ksync::spinlock::TicketMutex;
//!
//! struct Entry { key: u32, link: Link, rcu: RcuHead }
//! ksync::impl_linked!(Entry, link);
//!
//! static LIST: RcuList<Entry> = RcuList::new();
//! static WRITERS: TicketMutex<()> = TicketMutex::new(());
//!
//! unsafe fn free_entry(head: *mut RcuHead) {
//!     // SAFETY: `head` is the `rcu` field of a boxed `Entry` (below).
//!     drop(unsafe { Box::from_raw(head.byte_sub(offset_of!(Entry, rcu)).cast::<Entry>()) });
//! }
//!
//! rcu::cpu_online();
//! for key in 1..=3 {
//!     let entry = Box::leak(Box::new(Entry { key, link: Link::new(), rcu: RcuHead::new() }));
//!     let mut w = WRITERS.lock();
//!     // SAFETY: the entry stays valid until `free_entry` runs, a grace
//!     // period after its removal.
//!     unsafe { LIST.push_back(&mut w, entry) };
//! }
//! {
//!     let guard = rcu::read_lock();
//!     let keys: Vec<u32> = LIST.iter(&guard).map(|e| e.key).collect();
//!     assert_eq!(keys, [1, 2, 3]);
//! }
//! // Remove the entry with key 2; readers may still see it until a grace
//! // period has passed, so free it through `call_rcu`.
//! let guard = rcu::read_lock();
//! let two = LIST.iter(&guard).find(|e| e.key == 2).unwrap();
//! LIST.remove(&mut WRITERS.lock(), two);
//! // SAFETY: removed; `free_entry` frees the box the entry came from.
//! unsafe { rcu::call_rcu(&two.rcu as *const RcuHead as *mut RcuHead, free_entry) };
//! drop(guard);
//! rcu::barrier();
//! assert_eq!(LIST.iter(&rcu::read_lock()).map(|e| e.key).collect::<Vec<_>>(), [1, 3]);
//! # let guard = rcu::read_lock();
//! # for e in LIST.iter(&guard) {
//! #     LIST.remove(&mut WRITERS.lock(), e);
//! #     unsafe { rcu::call_rcu(&e.rcu as *const RcuHead as *mut RcuHead, free_entry) };
//! # }
//! # drop(guard);
//! # rcu::barrier();
//! # rcu::cpu_offline();
//! ```

use core::fmt;
use core::marker::PhantomData;
use core::ptr;

use super::{Cookie, ReadGuard, get_state, poll};
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

mod table;
pub use self::table::RcuHashTable;

/// The intrusive node: embed one in each object per list it can be on, and
/// name it with [`impl_linked!`](crate::impl_linked). Three words.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{Hlist, Link, RcuList};
/// # use ksync::spinlock::TicketMutex;
///
/// // A network device: on the list of all devices, and on a hash chain.
/// struct NetDevice { ifindex: u32, dev_list: Link, index_hlist: Link }
/// struct ByIndex; // tells the second link apart
/// ksync::impl_linked!(NetDevice, dev_list);
/// ksync::impl_linked!(NetDevice, index_hlist, ByIndex);
///
/// static ALL_DEVICES: RcuList<NetDevice> = RcuList::new();
/// static INDEX_CHAIN: Hlist<NetDevice, ByIndex> = Hlist::new();
/// # static RTNL: TicketMutex<()> = TicketMutex::new(());
/// static LO: NetDevice = NetDevice { ifindex: 1, dev_list: Link::new(), index_hlist: Link::new() };
///
/// let mut rtnl = RTNL.lock(); // both lists' writers' lock
/// // SAFETY: `LO` is a static: valid and in place for ever.
/// unsafe { ALL_DEVICES.push_back(&mut rtnl, &LO) };
/// unsafe { INDEX_CHAIN.push_front(&mut rtnl, &LO) };
/// assert!(LO.dev_list.is_linked() && LO.index_hlist.is_linked());
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`new`](Self::new): on no list (unlike Linux's
/// `list_head`, no pointer to itself needs writing).
#[doc(alias("list_head", "hlist_node"))]
#[repr(C)]
pub struct Link {
    /// The next node, null at the end. First field: a pointer to it is a
    /// pointer to the link (`pprev` of the following node relies on it).
    next: AtomicPtr<Link>,
    /// Writers only: the word that points at this node.
    pprev: AtomicPtr<AtomicPtr<Link>>,
    /// Writers only: the state table in the module docs.
    state: AtomicUsize,
}

impl Link {
    crate::sync::const_fn! {
        /// A link that is on no list.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::Link;
        ///
        /// struct Dentry {
        ///     d_hash: Link,
        /// }
        /// static ROOT: Dentry = Dentry { d_hash: Link::new() }; // const, for statics
        /// assert!(!ROOT.d_hash.is_linked());
        /// ```
        #[doc(alias = "INIT_LIST_HEAD")]
        pub fn new() -> Self {
            Self {
                next: AtomicPtr::new(ptr::null_mut()),
                pprev: AtomicPtr::new(ptr::null_mut()),
                state: AtomicUsize::new(0),
            }
        }
    }

    /// Whether the node is on a list. Exact for a writer holding the lock
    /// of the list in question; a stale hint for anyone else.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{Link, RcuList};
    /// use ksync::spinlock::TicketMutex;
    /// # struct Route { dst: u32, link: Link }
    /// # ksync::impl_linked!(Route, link);
    ///
    /// static ROUTES: RcuList<Route> = RcuList::new();
    /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
    /// static GW: Route = Route { dst: 0, link: Link::new() };
    ///
    /// // SAFETY: `GW` is a static: valid and in place for ever.
    /// unsafe { ROUTES.push_back(&mut ROUTES_LOCK.lock(), &GW) };
    /// assert!(GW.link.is_linked());
    /// ROUTES.remove(&mut ROUTES_LOCK.lock(), &GW);
    /// assert!(!GW.link.is_linked()); // Linux's hlist_unhashed
    /// ```
    #[doc(alias("hlist_unhashed", "list_empty"))]
    pub fn is_linked(&self) -> bool {
        // Relaxed: see above.
        let state = self.state.load(Ordering::Relaxed);
        state != 0 && state & 1 == 0
    }

    fn as_ptr(&self) -> *mut Link {
        self as *const Link as *mut Link
    }
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("linked", &self.is_linked())
            .finish()
    }
}

/// An object that lists reach through one of its [`Link`]s (`Tag` tells
/// several links of one type apart). Implement it with
/// [`impl_linked!`](crate::impl_linked).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::mem::offset_of;
/// use ksync::rcu::{Link, Linked};
///
/// struct Dentry {
///     d_hash: Link,
///     d_child: Link,
/// }
/// struct Children;
/// ksync::impl_linked!(Dentry, d_hash); // Linked<()>
/// ksync::impl_linked!(Dentry, d_child, Children); // Linked<Children>
///
/// // What `container_of` subtracts from a link's address:
/// assert_eq!(<Dentry as Linked>::OFFSET, offset_of!(Dentry, d_hash));
/// assert_eq!(<Dentry as Linked<Children>>::OFFSET, offset_of!(Dentry, d_child));
/// ```
///
/// # Safety
/// `OFFSET` is the byte offset of a [`Link`] field in `Self`.
#[doc(alias = "container_of")]
pub unsafe trait Linked<Tag = ()> {
    /// The offset of the link field.
    const OFFSET: usize;
}

/// Implements [`Linked`](crate::rcu::list::Linked) for a type and one of
/// its [`Link`](crate::rcu::list::Link) fields, checking the field's type:
/// `impl_linked!(Dentry, hash_link)`, or with a tag type for a second link,
/// `impl_linked!(Dentry, child_link, Children)`.
///
/// The field must be a `Link` itself, not something that derefs to one
/// (`&Link`, `Box<Link>`, `Arc<Link>`...: a build error), and must be
/// aligned (not in a `repr(packed)` struct).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{Link, RcuList};
/// # use ksync::spinlock::TicketMutex;
///
/// // On the list of all tasks, and on its parent's list of children.
/// struct Task { pid: u32, tasks: Link, sibling: Link }
/// struct Siblings;
/// ksync::impl_linked!(Task, tasks);
/// ksync::impl_linked!(Task, sibling, Siblings);
///
/// static ALL_TASKS: RcuList<Task> = RcuList::new();
/// static INIT_CHILDREN: RcuList<Task, Siblings> = RcuList::new();
/// # static TASKLIST_LOCK: TicketMutex<()> = TicketMutex::new(());
/// static KTHREADD: Task = Task { pid: 2, tasks: Link::new(), sibling: Link::new() };
///
/// let mut w = TASKLIST_LOCK.lock();
/// // SAFETY: `KTHREADD` is a static: valid and in place for ever.
/// unsafe { ALL_TASKS.push_back(&mut w, &KTHREADD) };
/// unsafe { INIT_CHILDREN.push_back(&mut w, &KTHREADD) }; // through `sibling`
/// ```
#[macro_export]
macro_rules! impl_linked {
    ($ty:ty, $field:ident) => {
        $crate::impl_linked!($ty, $field, ());
    };
    ($ty:ty, $field:ident, $tag:ty) => {
        // The field's type is exactly `Link` (Linux's `__same_type` in
        // `container_of`): a raw pointer to the field is never coerced, so
        // a field that only derefs to a `Link` is a type mismatch. Never
        // called: only its type is checked.
        const _: fn(*const $ty) -> *const $crate::rcu::list::Link =
            // SAFETY: never called.
            |node| unsafe { &raw const (*node).$field };
        // The field is aligned: a reference to a field of a packed struct
        // is refused.
        const _: fn(&$ty) -> &$crate::rcu::list::Link = |node| &node.$field;
        // SAFETY: the offset of an aligned field whose type is `Link`
        // (checked above).
        unsafe impl $crate::rcu::list::Linked<$tag> for $ty {
            const OFFSET: usize = ::core::mem::offset_of!($ty, $field);
        }
    };
}

/// Compile-time tests of [`impl_linked!`](crate::impl_linked)'s field
/// check (doc tests only, never built otherwise).
///
/// Every test builds the same `Node`, whose fields are a `Link` and six
/// pointers that deref to one, and differs only in the field it names.
/// The `Link` is accepted (so the `Node` and the call are well formed):
///
/// ```
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// struct Node {
///     _key: u64,
///     link: Link,
///     by_ref: &'static Link,
///     boxed: Box<Link>,
///     arc: Arc<Link>,
///     rc: Rc<Link>,
///     pinned: Pin<Box<Link>>,
///     handle: Handle, // derefs to a `Link`
/// }
/// ksync::impl_linked!(Node, link);
/// ```
///
/// Each pointer is refused (the list would write a 24-byte `Link` over
/// it). On nightly, rustdoc also checks that the error is the type
/// mismatch (`E0308`) of the macro's check.
///
/// A reference:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, by_ref);
/// ```
///
/// A `Box`:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, boxed);
/// ```
///
/// An `Arc`:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, arc);
/// ```
///
/// An `Rc`:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, rc);
/// ```
///
/// A pinned `Box`:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, pinned);
/// ```
///
/// A type of the user's own that derefs to a `Link`:
///
/// ```compile_fail,E0308
/// # use core::ops::Deref;
/// # use std::{pin::Pin, rc::Rc, sync::Arc};
/// # use ksync::rcu::list::Link;
/// # struct Handle(&'static Link);
/// # impl Deref for Handle {
/// #     type Target = Link;
/// #     fn deref(&self) -> &Link { self.0 }
/// # }
/// # struct Node {
/// #     _key: u64,
/// #     link: Link,
/// #     by_ref: &'static Link,
/// #     boxed: Box<Link>,
/// #     arc: Arc<Link>,
/// #     rc: Rc<Link>,
/// #     pinned: Pin<Box<Link>>,
/// #     handle: Handle, // derefs to a `Link`
/// # }
/// ksync::impl_linked!(Node, handle);
/// ```
#[cfg(doctest)]
pub struct ImplLinkedFieldChecks;

/// A lock guard that proves its holder serialises a list's writers.
///
/// The list's writer calls take `&mut` the guard for their whole run, so
/// the proof they need is about those borrows.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::mutex::Mutex;
/// use ksync::rcu::{Link, RcuList};
/// # struct Module { link: Link }
/// # ksync::impl_linked!(Module, link);
///
/// // Any `lock_api` mutex guard is one: here a sleeping mutex, for writers
/// // that may sleep (Linux's `module_mutex`).
/// static MODULES: RcuList<Module> = RcuList::new();
/// static MODULE_MUTEX: Mutex<()> = Mutex::new(());
/// static OTHER: Mutex<()> = Mutex::new(());
/// static EXT4: Module = Module { link: Link::new() };
///
/// // SAFETY: `EXT4` is a static. The first writer binds the list to its lock...
/// unsafe { MODULES.push_back(&mut MODULE_MUTEX.lock(), &EXT4) };
/// // ...and a writer holding another lock panics.
/// assert!(std::panic::catch_unwind(|| MODULES.remove(&mut OTHER.lock(), &EXT4)).is_err());
/// ```
///
/// # Safety
/// While a `&mut` of `self` is live, no `&mut` of another guard with the
/// same `lock_id` is live, in any context: two writer calls with the same
/// id never overlap. Ids are non-zero and do not change while the guard
/// exists.
pub unsafe trait HeldLock {
    /// The lock's identity (its address, for the `lock_api` guards).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::HeldLock;
    /// use ksync::spinlock::TicketMutex;
    ///
    /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
    /// let guard = ROUTES_LOCK.lock();
    /// assert_eq!(guard.lock_id(), &ROUTES_LOCK as *const _ as usize);
    /// ```
    fn lock_id(&self) -> usize;
}

/// The address of a lock, refusing zero-sized ones (they have none of
/// their own).
fn address_of<L>(lock: &L) -> usize {
    assert!(
        size_of::<L>() != 0,
        "rculist: a zero-sized lock cannot identify a list's writers"
    );
    lock as *const L as usize
}

// SAFETY: a `MutexGuard` holds its mutex exclusively, so two guards of one
// mutex never coexist. Could a guard of *another* lock have the same id?
// Two live objects of non-zero size share an address only if one contains
// the other (in safe code: overlapping storage is a field, transitively;
// unions need unsafe code to read), and `lock_api::Mutex` is `repr(Rust)`,
// so its data may well sit at offset 0: a `Mutex<R, Mutex<R2, T>>` and its
// inner mutex can share an address. The argument is therefore not about
// layout but about reachability. The inner lock lies in the outer lock's
// data (safe code cannot reach one inside the raw lock `R`: `raw()` is
// unsafe) and is reachable only through a guard of the outer lock (by its
// holder, or by whoever it lent a shared borrow of the guard to), through
// `&mut` of the outer lock (no guard of it can exist meanwhile), through
// `MutexGuard::leak` (the outer lock then stays locked, with no guard, for
// ever), or through unsafe code. So a guard of the inner lock borrows,
// transitively, the outer lock's guard (shared) or the outer lock (`&mut`):
// while it lives, no `&mut` of an outer guard can be live, and while a
// `&mut` of the outer guard is live, no inner guard exists. Inner guards
// among themselves exclude each other by the inner lock.
unsafe impl<R: lock_api::RawMutex, T> HeldLock for lock_api::MutexGuard<'_, R, T> {
    fn lock_id(&self) -> usize {
        address_of(lock_api::MutexGuard::mutex(self))
    }
}

// SAFETY: as for `MutexGuard`: a write guard excludes every other guard of
// its lock, and a lock at the same address is inside its data (or contains
// it), reachable only through a borrow of a guard of the outer lock (read
// guards, which exclude the write guard, or the write guard itself), of
// `&mut` the outer lock, or through unsafe code.
unsafe impl<R: lock_api::RawRwLock, T> HeldLock for lock_api::RwLockWriteGuard<'_, R, T> {
    fn lock_id(&self) -> usize {
        address_of(lock_api::RwLockWriteGuard::rwlock(self))
    }
}

/// The object whose link is `link`.
///
/// # Safety
/// `link` is the `T::OFFSET` field of a live `T`.
unsafe fn container<T: Linked<Tag>, Tag>(link: *const Link) -> *const T {
    // SAFETY: the caller's contract; `Linked`'s contract gives the offset.
    unsafe { link.byte_sub(T::OFFSET).cast::<T>() }
}

fn link_of<T: Linked<Tag>, Tag>(node: &T) -> &Link {
    // SAFETY: `Linked`'s contract: a `Link` field lies at `OFFSET`.
    unsafe { &*(node as *const T).byte_add(T::OFFSET).cast::<Link>() }
}

// ---- the shared head --------------------------------------------------------

/// What every list head has: the first node and the writers' lock. Its
/// address is the list's identity in its nodes' `state`.
#[repr(C)]
struct Head {
    first: AtomicPtr<Link>,
    /// The `lock_id` of the lock that serialises the writers; 0 until the
    /// first writer.
    lock: AtomicUsize,
}

impl Head {
    crate::sync::const_fn! {
        fn new() -> Self {
            Self { first: AtomicPtr::new(ptr::null_mut()), lock: AtomicUsize::new(0) }
        }
    }

    fn id(&self) -> usize {
        self as *const Head as usize
    }

    /// Checks that `lock` serialises this list's writers, binding the list
    /// to it on first use.
    #[track_caller]
    fn bind(&self, lock: &impl HeldLock) {
        let id = lock.lock_id();
        assert_ne!(id, 0, "rculist: a lock id is zero");
        // Relaxed: the binding is written once (0 -> id), so a load sees 0
        // or the final value; a 0 sends us to the compare-exchange, which
        // sees the latest value. The lock itself orders the writers.
        let bound = match self.lock.load(Ordering::Relaxed) {
            0 => match self
                .lock
                .compare_exchange(0, id, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => id,
                Err(other) => other,
            },
            other => other,
        };
        assert!(
            bound == id,
            "rculist: this writer holds a different lock from the one that serialises the list's writers"
        );
    }

    /// Panics unless `node` is on this list. Under the list's lock the
    /// answer is exact: only this list's writers move a node onto or off it.
    #[track_caller]
    fn check_member(&self, node: &Link, what: &str) {
        // Relaxed: under the lock (above).
        match node.state.load(Ordering::Relaxed) {
            s if s == self.id() => {}
            0 => panic!("rculist: {what}: the node is not on a list"),
            s if s & 1 == 1 => panic!("rculist: {what}: the node was already removed"),
            _ => panic!("rculist: {what}: the node is on another list"),
        }
    }

    /// Claims `node` for this list: it must be on none, and a removed node
    /// must have waited out its grace period.
    #[track_caller]
    fn claim(&self, node: &Link) {
        // Relaxed: the compare-exchange below decides.
        let state = node.state.load(Ordering::Relaxed);
        if state & 1 == 1 {
            assert!(
                poll(Cookie(state & !1)),
                "rculist: inserting a removed node before a grace period has passed since its removal"
            );
        } else {
            assert!(
                state == 0,
                "rculist: inserting a node that is already on a list"
            );
        }
        // Acquire pairs with the Release in `retire`: the previous list's
        // writes to the link happen-before ours. The exchange also catches
        // two lists claiming one node at once.
        let claimed =
            node.state
                .compare_exchange(state, self.id(), Ordering::Acquire, Ordering::Relaxed);
        assert!(
            claimed.is_ok(),
            "rculist: inserting a node that another writer is inserting"
        );
    }

    /// Links the claimed `node` in at `pprev` (this head's `first` or the
    /// `next` of a node on this list), updating `last` if it becomes the
    /// last node.
    ///
    /// # Safety
    /// The caller holds the list's lock and has claimed `node`; the nodes
    /// on the list are valid.
    unsafe fn link_at(&self, pprev: &AtomicPtr<Link>, node: &Link, last: Option<&AtomicPtr<Link>>) {
        // Relaxed (here to the publication): writer-side fields, ordered by
        // the lock, and the new node's `next`, published below.
        let next = pprev.load(Ordering::Relaxed);
        node.next.store(next, Ordering::Relaxed);
        node.pprev
            .store(pprev as *const _ as *mut _, Ordering::Relaxed);
        // SAFETY: `next` is null or a node on this list (caller's contract).
        match unsafe { next.as_ref() } {
            Some(next) => next
                .pprev
                .store(&node.next as *const _ as *mut _, Ordering::Relaxed),
            None => {
                if let Some(last) = last {
                    last.store(node.as_ptr(), Ordering::Relaxed);
                }
            }
        }
        // Release: publishes the node and the caller's object; pairs with
        // the readers' Acquire loads in `Iter::next` and `first`.
        pprev.store(node.as_ptr(), Ordering::Release);
    }

    /// Unlinks `node` (on this list); with `new` (claimed), puts it in its
    /// place. Leaves `node.next` for the readers standing on it.
    ///
    /// # Safety
    /// As [`link_at`](Self::link_at), and `node` is on this list.
    unsafe fn unlink(&self, node: &Link, new: Option<&Link>, last: Option<&AtomicPtr<Link>>) {
        // Relaxed: writer-side fields, ordered by the lock.
        let pprev = node.pprev.load(Ordering::Relaxed);
        let next = node.next.load(Ordering::Relaxed);
        let (succ, succ_pprev): (*mut Link, *mut AtomicPtr<Link>) = match new {
            Some(new) => {
                new.next.store(next, Ordering::Relaxed);
                new.pprev.store(pprev, Ordering::Relaxed);
                (new.as_ptr(), &new.next as *const _ as *mut _)
            }
            None => (next, pprev),
        };
        // SAFETY: `next` is null or a node on this list.
        match unsafe { next.as_ref() } {
            Some(next) => next.pprev.store(succ_pprev, Ordering::Relaxed),
            None => {
                if let Some(last) = last {
                    let tail = if new.is_some() {
                        succ
                    } else if ptr::eq(pprev, &self.first) {
                        ptr::null_mut()
                    } else {
                        // `pprev` is the previous node's `next`, its first
                        // field.
                        pprev.cast::<Link>()
                    };
                    last.store(tail, Ordering::Relaxed);
                }
            }
        }
        // Release: a reader that sees `succ` through this store sees its
        // contents (the new node's, or the successor's, which the store
        // that first published it orders only for readers of that store).
        // Pairs with the readers' Acquire loads.
        // SAFETY: `pprev` is this head's `first` or the `next` of a node on
        // this list.
        unsafe { (*pprev).store(succ, Ordering::Release) };
        Self::retire(node);
    }

    /// Marks an unlinked node removed, with the cookie of the grace period
    /// that must pass before it may be linked again.
    fn retire(node: &Link) {
        node.pprev.store(ptr::null_mut(), Ordering::Relaxed);
        // `get_state`'s full fence orders the unlinking store before the
        // cookie's snapshot, as for `call_rcu`. Release pairs with the
        // Acquire in `claim`.
        node.state.store(get_state().0 | 1, Ordering::Release);
    }

    /// The first node, for a reader.
    fn first(&self) -> *const Link {
        // Acquire pairs with the Release stores that link nodes.
        self.first.load(Ordering::Acquire)
    }
}

impl Drop for Head {
    /// The nodes still on the list leave it (no reader can be on them:
    /// readers borrow the list), so no later list at this address can
    /// mistake them for its own.
    fn drop(&mut self) {
        let mut cur = self.first.load(Ordering::Relaxed);
        // SAFETY: the nodes on the list are valid (insertion contract).
        while let Some(link) = unsafe { cur.as_ref() } {
            cur = link.next.load(Ordering::Relaxed);
            link.pprev.store(ptr::null_mut(), Ordering::Relaxed);
            link.state.store(0, Ordering::Relaxed);
        }
    }
}

// ---- readers ----------------------------------------------------------------

/// The objects of a list, in order, for the read section of `'g`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, Link, RcuList, list::Iter};
/// # use ksync::spinlock::TicketMutex;
/// # struct Route { mtu: u32, link: Link }
/// # ksync::impl_linked!(Route, link);
///
/// static ROUTES: RcuList<Route> = RcuList::new();
/// # static LOCK: TicketMutex<()> = TicketMutex::new(());
/// # static R1: Route = Route { mtu: 1500, link: Link::new() };
/// # static R2: Route = Route { mtu: 9000, link: Link::new() };
/// # unsafe { ROUTES.push_back(&mut LOCK.lock(), &R1) };
/// # unsafe { ROUTES.push_back(&mut LOCK.lock(), &R2) };
///
/// fn max_mtu(routes: Iter<'_, Route>) -> Option<u32> {
///     routes.map(|r| r.mtu).max()
/// }
/// let guard = rcu::read_lock();
/// assert_eq!(max_mtu(ROUTES.iter(&guard)), Some(9000));
/// ```
#[doc(alias("list_for_each_entry_rcu", "hlist_for_each_entry_rcu"))]
pub struct Iter<'g, T, Tag = ()> {
    next: *const Link,
    _marker: PhantomData<fn() -> (&'g T, Tag)>,
}

impl<'g, T: Linked<Tag> + 'g, Tag> Iterator for Iter<'g, T, Tag> {
    type Item = &'g T;

    #[inline]
    fn next(&mut self) -> Option<&'g T> {
        // SAFETY: a node reached under the read guard stays valid until a
        // grace period after its removal (insertion contract), which cannot
        // end before the guard of `'g` drops.
        let link = unsafe { self.next.as_ref()? };
        // Acquire pairs with the Release store that linked (or unlinked
        // into place) the node after this one.
        self.next = link.next.load(Ordering::Acquire);
        // SAFETY: as above; the link is a `T`'s `OFFSET` field.
        Some(unsafe { &*container::<T, Tag>(link) })
    }
}

impl<T, Tag> fmt::Debug for Iter<'_, T, Tag> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Iter")
    }
}

// ---- the lists --------------------------------------------------------------

/// Declares a list type: the struct (a [`Head`] and `$extra` fields), its
/// `Send`, `Sync`, `Default` and `Debug`, `new`, and the methods the list
/// types share.
macro_rules! list_type {
    ($(#[$attr:meta])* $name:ident { $($extra:ident: $ty:ty = $init:expr,)* } $alias:literal) => {
        $(#[$attr])*
        #[repr(C)]
        pub struct $name<T, Tag = ()> {
            head: Head,
            $($extra: $ty,)*
            _marker: PhantomData<(*const T, fn() -> Tag)>,
        }

        // SAFETY: readers on any CPU get `&T` (`T: Sync`) and writers hand
        // nodes between CPUs (`T: Send`); the head is atomics.
        unsafe impl<T: Send + Sync, Tag> Sync for $name<T, Tag> {}
        // SAFETY: as above.
        unsafe impl<T: Send + Sync, Tag> Send for $name<T, Tag> {}

        impl<T: Linked<Tag>, Tag> Default for $name<T, Tag> {
            fn default() -> Self {
                Self::new()
            }
        }

        impl<T, Tag> fmt::Debug for $name<T, Tag> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(stringify!($name))
            }
        }

        impl<T: Linked<Tag>, Tag> $name<T, Tag> {
            crate::sync::const_fn! {
                /// An empty list.
                ///
                #[cfg_attr(feature = "test-hooks", doc = " ```")]
                #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
                #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
                /// # use ksync::spinlock::TicketMutex;
                /// # struct Route { dst: u32, link: Link }
                /// # ksync::impl_linked!(Route, link);
                ///
                #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new(); // const: a static, or a field")]
                /// assert!(ROUTES.is_empty());
                /// ```
                #[doc(alias = $alias)]
                pub fn new() -> Self {
                    Self { head: Head::new(), $($extra: $init,)* _marker: PhantomData }
                }
            }

        /// The list's objects, for the read section of `guard`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// # static LOCK: TicketMutex<()> = TicketMutex::new(());
        /// # static A: Route = Route { dst: 10, link: Link::new() };
        /// # static B: Route = Route { dst: 20, link: Link::new() };
        /// # unsafe { ROUTES.push_front(&mut LOCK.lock(), &B) };
        /// # unsafe { ROUTES.push_front(&mut LOCK.lock(), &A) };
        ///
        /// let guard = rcu::read_lock(); // no lock taken, nothing shared written
        /// let dsts: Vec<u32> = ROUTES.iter(&guard).map(|r| r.dst).collect();
        /// assert_eq!(dsts, [10, 20]);
        /// ```
        #[doc(alias("list_for_each_entry_rcu", "hlist_for_each_entry_rcu"))]
        pub fn iter<'g>(&'g self, _guard: &'g ReadGuard) -> Iter<'g, T, Tag> {
            Iter { next: self.head.first(), _marker: PhantomData }
        }

        /// The first object, for the read section of `guard`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static PENDING: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// # static LOCK: TicketMutex<()> = TicketMutex::new(());
        /// # static A: Route = Route { dst: 10, link: Link::new() };
        /// # unsafe { PENDING.push_front(&mut LOCK.lock(), &A) };
        ///
        /// let guard = rcu::read_lock();
        /// if let Some(route) = PENDING.first(&guard) {
        ///     assert_eq!(route.dst, 10);
        /// }
        /// ```
        #[doc(alias("list_first_or_null_rcu", "hlist_first_rcu"))]
        pub fn first<'g>(&'g self, guard: &'g ReadGuard) -> Option<&'g T> {
            self.iter(guard).next()
        }

        /// Whether the list is empty (a hint unless the caller holds the
        /// writers' lock).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
        /// static GW: Route = Route { dst: 0, link: Link::new() };
        ///
        /// assert!(ROUTES.is_empty());
        /// let mut w = ROUTES_LOCK.lock();
        /// // SAFETY: `GW` is a static: valid and in place for ever.
        /// unsafe { ROUTES.push_front(&mut w, &GW) };
        /// assert!(!ROUTES.is_empty()); // exact: the writers' lock is held
        /// ```
        #[doc(alias("list_empty_rcu", "hlist_empty"))]
        pub fn is_empty(&self) -> bool {
            // Relaxed: nothing is read through the pointer.
            self.head.first.load(Ordering::Relaxed).is_null()
        }

        /// Removes `node`, leaving its `next` for readers that stand on it.
        /// Free it only after a grace period ([`call_rcu`](super::call_rcu)),
        /// and re-insert it only after one (checked).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
        /// # static GW: Route = Route { dst: 0, link: Link::new() };
        /// # unsafe { ROUTES.push_front(&mut ROUTES_LOCK.lock(), &GW) };
        ///
        /// ROUTES.remove(&mut ROUTES_LOCK.lock(), &GW); // readers may still be on it
        /// rcu::synchronize(); // now none is: free it, or insert it again
        /// // SAFETY: `GW` is a static: valid and in place for ever.
        /// unsafe { ROUTES.push_front(&mut ROUTES_LOCK.lock(), &GW) };
        /// ```
        ///
        /// # Panics
        /// If `node` is not on this list, or `lock` is not the lock of this
        /// list's writers.
        #[doc(alias("list_del_rcu", "hlist_del_rcu", "hlist_del_init_rcu"))]
        #[track_caller]
        pub fn remove(&self, lock: &mut impl HeldLock, node: &T) {
            self.head.bind(lock);
            self.head.check_member(link_of(node), "remove");
            // SAFETY: under the list's lock, `node` is on it.
            unsafe { self.head.unlink(link_of(node), None, self.last()) };
        }

        /// Puts `new` in `old`'s place with one store: a reader sees one or
        /// the other. `old` is removed as by [`remove`](Self::remove).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
        /// static OLD: Route = Route { dst: 10, link: Link::new() };
        /// static NEW: Route = Route { dst: 11, link: Link::new() };
        /// # unsafe { ROUTES.push_front(&mut ROUTES_LOCK.lock(), &OLD) };
        ///
        /// // SAFETY: `NEW` is a static: valid and in place for ever.
        /// unsafe { ROUTES.replace(&mut ROUTES_LOCK.lock(), &OLD, &NEW) };
        /// let guard = rcu::read_lock();
        /// assert_eq!(ROUTES.first(&guard).map(|r| r.dst), Some(11));
        /// ```
        ///
        /// # Safety
        /// As for [`push_front`](Self::push_front), for `new`.
        ///
        /// # Panics
        /// If `old` is not on this list, `new` cannot be inserted, or `lock`
        /// is not the lock of this list's writers.
        #[doc(alias("list_replace_rcu", "hlist_replace_rcu"))]
        #[track_caller]
        pub unsafe fn replace(&self, lock: &mut impl HeldLock, old: &T, new: &T) {
            self.head.bind(lock);
            self.head.check_member(link_of(old), "replace");
            self.head.claim(link_of(new));
            // SAFETY: under the list's lock, `old` is on it, `new` claimed.
            unsafe {
                self.head
                    .unlink(link_of(old), Some(link_of(new)), self.last())
            };
        }

        /// Inserts `node` at the front.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new();")]
        /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
        /// static DEFAULT: Route = Route { dst: 0, link: Link::new() };
        ///
        /// // SAFETY: `DEFAULT` is a static: valid and in place for ever.
        /// unsafe { ROUTES.push_front(&mut ROUTES_LOCK.lock(), &DEFAULT) };
        /// let guard = rcu::read_lock();
        /// assert_eq!(ROUTES.first(&guard).map(|r| r.dst), Some(0));
        /// ```
        ///
        /// # Safety
        /// `node` stays valid, and is neither moved nor mutated except
        /// through its atomics and cells, from now until a grace period has
        /// passed since its removal (or the list is dropped); `self` does
        /// not move while `node` is on it.
        ///
        /// # Panics
        /// If `node` is on a list, was removed less than a grace period ago,
        /// or `lock` is not the lock of this list's writers.
        #[doc(alias("list_add_rcu", "hlist_add_head_rcu"))]
        #[track_caller]
        pub unsafe fn push_front(&self, lock: &mut impl HeldLock, node: &T) {
            self.head.bind(lock);
            self.head.claim(link_of(node));
            // SAFETY: under the list's lock, `node` claimed.
            unsafe {
                self.head
                    .link_at(&self.head.first, link_of(node), self.last())
            };
        }

        /// Inserts `node` right after `anchor`, which is on this list.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        #[doc = concat!(" # use ksync::rcu::{self, Link, ", stringify!($name), "};")]
        /// # use ksync::spinlock::TicketMutex;
        /// # struct Route { dst: u32, link: Link }
        /// # ksync::impl_linked!(Route, link);
        ///
        #[doc = concat!(" static ROUTES: ", stringify!($name), "<Route> = ", stringify!($name), "::new(); // kept sorted by `dst`")]
        /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
        /// static A: Route = Route { dst: 10, link: Link::new() };
        /// static B: Route = Route { dst: 20, link: Link::new() };
        /// # unsafe { ROUTES.push_front(&mut ROUTES_LOCK.lock(), &A) };
        ///
        /// // SAFETY: `B` is a static: valid and in place for ever.
        /// unsafe { ROUTES.insert_after(&mut ROUTES_LOCK.lock(), &A, &B) };
        /// let guard = rcu::read_lock();
        /// assert_eq!(ROUTES.iter(&guard).map(|r| r.dst).collect::<Vec<_>>(), [10, 20]);
        /// ```
        ///
        /// # Safety
        /// As for [`push_front`](Self::push_front).
        ///
        /// # Panics
        /// As [`push_front`](Self::push_front), and if `anchor` is not on
        /// this list.
        #[doc(alias("list_add_rcu", "hlist_add_behind_rcu"))]
        #[track_caller]
        pub unsafe fn insert_after(&self, lock: &mut impl HeldLock, anchor: &T, node: &T) {
            self.head.bind(lock);
            self.head
                .check_member(link_of(anchor), "insert_after (the anchor)");
            self.head.claim(link_of(node));
            // SAFETY: under the list's lock, `anchor` is on it, `node` claimed.
            unsafe {
                self.head
                    .link_at(&link_of(anchor).next, link_of(node), self.last())
            };
        }
        }
    };
}

list_type! {
    /// An RCU-protected doubly linked list, with O(1) insertion at both ends
    /// and removal of any node (Linux's `list_head` under `rculist.h`).
    /// Three words. See the [module docs](self) for the writers' contract.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, Link, RcuList};
    /// use ksync::spinlock::TicketMutex;
    ///
    /// struct Route { dst: u32, gateway: u32, link: Link }
    /// ksync::impl_linked!(Route, link);
    ///
    /// static ROUTES: RcuList<Route> = RcuList::new();
    /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(()); // the writers'
    /// static DEFAULT: Route = Route { dst: 0, gateway: 0x0a00_0001, link: Link::new() };
    ///
    /// // SAFETY: `DEFAULT` is a static: valid and in place for ever.
    /// unsafe { ROUTES.push_back(&mut ROUTES_LOCK.lock(), &DEFAULT) };
    /// let guard = rcu::read_lock(); // a lookup on the packet path: no lock
    /// let via = ROUTES.iter(&guard).find(|r| r.dst == 0).map(|r| r.gateway);
    /// assert_eq!(via, Some(0x0a00_0001));
    /// ```
    ///
    /// # Zeroed memory
    ///
    /// All-zero bytes are `new()`: empty, no writers' lock bound yet.
    #[doc(alias = "list_head")]
    RcuList { last: AtomicPtr<Link> = AtomicPtr::new(ptr::null_mut()), } "LIST_HEAD_INIT"
}

list_type! {
    /// An RCU-protected hash chain (Linux's `hlist_head`): insertion at the
    /// front or after a node, removal of any node. Two words. See the
    /// [module docs](self) for the writers' contract.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, Hlist, Link};
    /// use ksync::spinlock::TicketMutex;
    ///
    /// struct Pid { nr: u32, pid_chain: Link }
    /// ksync::impl_linked!(Pid, pid_chain);
    ///
    /// // One bucket of a pid hash (see `RcuHashTable` for the whole table).
    /// static CHAIN: Hlist<Pid> = Hlist::new();
    /// static PIDMAP_LOCK: TicketMutex<()> = TicketMutex::new(());
    /// static INIT: Pid = Pid { nr: 1, pid_chain: Link::new() };
    ///
    /// // SAFETY: `INIT` is a static: valid and in place for ever.
    /// unsafe { CHAIN.push_front(&mut PIDMAP_LOCK.lock(), &INIT) };
    /// let guard = rcu::read_lock();
    /// assert!(CHAIN.iter(&guard).any(|p| p.nr == 1)); // find_pid_ns
    /// ```
    ///
    /// # Zeroed memory
    ///
    /// All-zero bytes are `new()`: empty, no writers' lock bound yet.
    #[doc(alias = "hlist_head")]
    Hlist {} "HLIST_HEAD_INIT"
}

impl<T: Linked<Tag>, Tag> RcuList<T, Tag> {
    fn last(&self) -> Option<&AtomicPtr<Link>> {
        Some(&self.last)
    }

    /// Inserts `node` at the back.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, Link, RcuList};
    /// use ksync::spinlock::TicketMutex;
    /// # struct Route { dst: u32, link: Link }
    /// # ksync::impl_linked!(Route, link);
    ///
    /// static ROUTES: RcuList<Route> = RcuList::new();
    /// static ROUTES_LOCK: TicketMutex<()> = TicketMutex::new(());
    /// static A: Route = Route { dst: 10, link: Link::new() };
    /// static B: Route = Route { dst: 20, link: Link::new() };
    ///
    /// let mut w = ROUTES_LOCK.lock();
    /// // SAFETY: `A` and `B` are statics: valid and in place for ever.
    /// unsafe { ROUTES.push_back(&mut w, &A) };
    /// unsafe { ROUTES.push_back(&mut w, &B) };
    /// drop(w);
    /// let guard = rcu::read_lock();
    /// assert_eq!(ROUTES.iter(&guard).map(|r| r.dst).collect::<Vec<_>>(), [10, 20]);
    /// ```
    ///
    /// # Safety
    /// As for [`push_front`](Self::push_front).
    ///
    /// # Panics
    /// As [`push_front`](Self::push_front).
    #[doc(alias = "list_add_tail_rcu")]
    #[track_caller]
    pub unsafe fn push_back(&self, lock: &mut impl HeldLock, node: &T) {
        self.head.bind(lock);
        self.head.claim(link_of(node));
        // Relaxed: writer-side, under the lock.
        let last = self.last.load(Ordering::Relaxed);
        // SAFETY: `last` is null or a node on this list, valid.
        let pprev = unsafe { last.as_ref() }.map_or(&self.head.first, |l| &l.next);
        // SAFETY: under the list's lock, `node` claimed.
        unsafe { self.head.link_at(pprev, link_of(node), self.last()) };
    }
}

impl<T: Linked<Tag>, Tag> Hlist<T, Tag> {
    fn last(&self) -> Option<&AtomicPtr<Link>> {
        None
    }
}
