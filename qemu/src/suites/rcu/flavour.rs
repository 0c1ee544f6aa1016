//! The grace-period calls the writers make, as a trait ([`Rcu`]): ksync's
//! RCU for the test, and the two controls' deliberately broken versions.

use ksync::rcu::{self, Callback, Cookie, RcuHead};

/// The grace-period calls the writers make: ksync's RCU, or a control's.
pub trait Rcu: Sync {
    /// `rcu::synchronize`.
    fn synchronize(&self);
    /// `rcu::get_state`.
    fn get_state(&self) -> Cookie {
        rcu::get_state()
    }
    /// `rcu::start_poll`.
    fn start_poll(&self) -> Cookie {
        rcu::start_poll()
    }
    /// `rcu::poll`.
    fn poll(&self, cookie: Cookie) -> bool {
        rcu::poll(cookie)
    }
    /// `rcu::cond_synchronize`.
    fn cond_synchronize(&self, cookie: Cookie) {
        rcu::cond_synchronize(cookie)
    }
    /// `rcu::call_rcu`.
    ///
    /// # Safety
    /// As for `rcu::call_rcu`.
    unsafe fn call_rcu(&self, head: *mut RcuHead, func: Callback) {
        // SAFETY: the caller's contract is `call_rcu`'s.
        unsafe { rcu::call_rcu(head, func) }
    }
}

/// ksync's RCU.
pub struct KsyncRcu;

impl Rcu for KsyncRcu {
    fn synchronize(&self) {
        rcu::synchronize()
    }
}

/// A control: ksync's RCU but `synchronize` does not wait.
pub struct NoWaitRcu;

impl Rcu for NoWaitRcu {
    fn synchronize(&self) {}
}

/// A control: ksync's RCU but `call_rcu` runs the callback at once.
pub struct CallNowRcu;

impl Rcu for CallNowRcu {
    fn synchronize(&self) {
        rcu::synchronize()
    }

    unsafe fn call_rcu(&self, head: *mut RcuHead, func: Callback) {
        // SAFETY: `head` is valid and `func` is its callback (the caller's
        // contract). Calling it now, before a grace period, is this
        // control's deliberate bug: it breaks RCU's promise to the readers
        // but not memory safety, since the suite's only callback, `retire`,
        // touches nothing but atomics of an element in a `static` (readers
        // see poison, not freed memory).
        unsafe { func(head) }
    }
}
