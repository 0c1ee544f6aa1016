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
        #[doc(alias = "RCU_INITIALIZER")]
        pub unsafe fn new(target: *mut T) -> Self {
            Self { ptr: crate::sync::AtomicPtr::new(target) }
        }
    }

    /// The current target, valid for the read section of `guard`.
    ///
    /// Acquire: pairs with the Release in [`publish`](Self::publish), so
    /// the target's initialization is visible.
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
