//! [`RcuPtr`]: the pointer readers follow under a read section and writers
//! replace, freeing the old target after a grace period.

use core::fmt;

use super::ReadGuard;
use crate::sync::Ordering;

/// A pointer that readers follow under [`read_lock`](super::read_lock) and writers replace
/// with [`publish`](RcuPtr::publish), freeing the old target only after a
/// grace period.
///
/// A reference obtained through [`read`](RcuPtr::read) borrows the read
/// guard, so it cannot outlive the read section.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::rcu::{self, RcuPtr};
///
/// static CONFIG: RcuPtr<u32> = RcuPtr::null();
///
/// rcu::cpu_online(); // this CPU's readers are watched from now on
/// // SAFETY: a fresh box, freed only after it is unpublished and a grace
/// // period has passed (below).
/// let old = unsafe { CONFIG.publish(Box::into_raw(Box::new(7))) };
/// assert!(old.is_null());
/// {
///     let guard = rcu::read_lock();
///     assert_eq!(CONFIG.read(&guard), Some(&7));
/// }
/// // SAFETY: as above.
/// let old = unsafe { CONFIG.publish(Box::into_raw(Box::new(8))) };
/// rcu::synchronize(); // no reader can still see `old`
/// // SAFETY: unpublished and a grace period has passed.
/// drop(unsafe { Box::from_raw(old) });
/// # rcu::synchronize();
/// # drop(unsafe { Box::from_raw(CONFIG.publish(core::ptr::null_mut())) });
/// # rcu::cpu_offline();
/// ```
///
/// # Zeroed memory
///
/// All-zero bytes are [`null`](Self::null).
#[doc(alias = "__rcu")]
pub struct RcuPtr<T> {
    ptr: crate::sync::AtomicPtr<T>,
}

// SAFETY: readers on any CPU get `&T` (so `T: Sync`), and the writer hands
// ownership of targets between CPUs (so `T: Send`).
unsafe impl<T: Send + Sync> Sync for RcuPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for RcuPtr<T> {}

impl<T> RcuPtr<T> {
    crate::sync::const_fn! {
        /// A null pointer.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::{self, RcuPtr};
        ///
        /// struct NetConfig { mtu: u32 }
        /// static NET_CONFIG: RcuPtr<NetConfig> = RcuPtr::null(); // nothing published yet
        /// assert!(NET_CONFIG.read(&rcu::read_lock()).is_none());
        /// ```
        pub fn null() -> Self {
            Self { ptr: crate::sync::AtomicPtr::new(core::ptr::null_mut()) }
        }
    }

    crate::sync::const_fn! {
        /// A pointer to `target` (null allowed).
        ///
        /// # Safety
        /// As for [`publish`](Self::publish): a non-null `target` stays
        /// valid for shared access from any CPU until it is unpublished and
        /// a grace period has passed.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// use ksync::rcu::{self, RcuPtr};
        ///
        /// struct NetConfig { mtu: u32 }
        /// static BOOT_CONFIG: NetConfig = NetConfig { mtu: 1500 };
        /// // SAFETY: a static: valid for ever (and never freed when replaced).
        /// static NET_CONFIG: RcuPtr<NetConfig> =
        ///     unsafe { RcuPtr::new(&BOOT_CONFIG as *const NetConfig as *mut NetConfig) };
        /// assert_eq!(NET_CONFIG.read(&rcu::read_lock()).map(|c| c.mtu), Some(1500));
        /// ```
        #[doc(alias = "RCU_INITIALIZER")]
        pub unsafe fn new(target: *mut T) -> Self {
            Self { ptr: crate::sync::AtomicPtr::new(target) }
        }
    }

    /// The current target, valid for the read section of `guard`.
    ///
    /// Acquire: pairs with the Release in [`publish`](Self::publish), so
    /// the target's initialization is visible.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuPtr};
    ///
    /// struct NetConfig { mtu: u32 }
    /// static NET_CONFIG: RcuPtr<NetConfig> = RcuPtr::null();
    /// # // SAFETY: leaked, never freed.
    /// # unsafe { NET_CONFIG.publish(Box::leak(Box::new(NetConfig { mtu: 9000 }))) };
    ///
    /// // The packet path: no lock, no shared write.
    /// let guard = rcu::read_lock();
    /// let mtu = NET_CONFIG.read(&guard).map_or(1500, |c| c.mtu);
    /// assert_eq!(mtu, 9000);
    /// ```
    #[doc(alias = "rcu_dereference")]
    #[inline]
    pub fn read<'g>(&self, _guard: &'g ReadGuard) -> Option<&'g T> {
        let ptr = self.ptr.load(Ordering::Acquire);
        // SAFETY: a published target stays valid until a grace period after
        // it is unpublished (the writer's contract in `publish`), and the
        // returned borrow cannot outlive the read section of `_guard`.
        unsafe { ptr.as_ref() }
    }

    /// Replaces the target with `new` (null allowed) and returns the old
    /// one, which readers may still see: free it only after a grace period
    /// ([`synchronize`](super::synchronize), a completed cookie, [`call_rcu`](super::call_rcu), ...).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::{self, RcuPtr};
    ///
    /// struct NetConfig { mtu: u32 }
    /// static NET_CONFIG: RcuPtr<NetConfig> = RcuPtr::null();
    ///
    /// let new = Box::into_raw(Box::new(NetConfig { mtu: 9000 }));
    /// // SAFETY: freed only once unpublished and a grace period has passed.
    /// let old = unsafe { NET_CONFIG.publish(new) };
    /// assert!(old.is_null()); // the first one
    /// # rcu::synchronize();
    /// # drop(unsafe { Box::from_raw(NET_CONFIG.publish(core::ptr::null_mut())) });
    /// ```
    ///
    /// # Safety
    /// A non-null `new` must be valid for shared access (`&T`) from any
    /// CPU until it is unpublished (replaced by a later `publish`) and a
    /// grace period has passed since: safe code reads it through
    /// [`read`](Self::read).
    #[doc(alias = "rcu_assign_pointer")]
    #[inline]
    pub unsafe fn publish(&self, new: *mut T) -> *mut T {
        // Release pairs with the Acquire in `read`; Acquire makes the old
        // target's contents ours to drop.
        self.ptr.swap(new, Ordering::AcqRel)
    }

    /// The current target, for the writer side (no read section needed:
    /// the caller holds the writers' lock).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::rcu::RcuPtr;
    /// use ksync::spinlock::TicketMutex;
    ///
    /// struct NetConfig { mtu: u32 }
    /// static NET_CONFIG: RcuPtr<NetConfig> = RcuPtr::null();
    /// static CONFIG_LOCK: TicketMutex<()> = TicketMutex::new(()); // the writers'
    ///
    /// let _w = CONFIG_LOCK.lock();
    /// let current = NET_CONFIG.load(); // rcu_dereference_protected
    /// // SAFETY: under the writers' lock nobody unpublishes (and frees) it.
    /// let mtu = unsafe { current.as_ref() }.map_or(1500, |c| c.mtu);
    /// assert_eq!(mtu, 1500);
    /// ```
    #[doc(alias = "rcu_dereference_protected")]
    #[inline]
    pub fn load(&self) -> *mut T {
        self.ptr.load(Ordering::Acquire)
    }
}

impl<T> Default for RcuPtr<T> {
    fn default() -> Self {
        Self::null()
    }
}

impl<T> fmt::Debug for RcuPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RcuPtr")
            .field(&self.ptr.load(Ordering::Relaxed))
            .finish()
    }
}
