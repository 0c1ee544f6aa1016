//! The atomics shim: the one place the crate takes its atomics, fences,
//! `spin_loop` and cells from.
//!
//! * Normal builds on targets with compare-and-swap: `core`'s atomics.
//! * Targets without compare-and-swap (thumbv6m, riscv32i): `portable-atomic`,
//!   whose read-modify-write operations run inside a `critical-section`
//!   provided by the final binary. These targets are single-core, so that is
//!   both correct and IRQ-safe.
//! * `--cfg loom`: loom's model-checked types, so the algorithms are explored
//!   by the loom models in `tests/` without a `cfg` in the algorithm code.
//!
//! Non-loom builds get loom's API shape where the two differ (`UnsafeCell`'s
//! `with`/`with_mut`), following tokio's loom shim.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{Ordering, fence};

#[cfg(all(not(loom), target_has_atomic = "32"))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicUsize,
};

#[cfg(all(not(loom), not(target_has_atomic = "32")))]
pub(crate) use portable_atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicUsize,
};

// 64-bit atomics only where the hardware has them: lockref must never be
// routed through a hidden global lock (see `lockref`'s module docs).
#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::{AtomicI64, AtomicU64};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize,
    Ordering, fence,
};

/// Statistics counters that are never part of a modelled algorithm (for
/// example the process-wide count of saturated references). They stay
/// `core` atomics under loom so they can live in `static`s.
#[cfg(target_has_atomic = "ptr")]
pub(crate) use core::sync::atomic::AtomicUsize as StatCounter;
#[cfg(not(target_has_atomic = "ptr"))]
pub(crate) use portable_atomic::AtomicUsize as StatCounter;

/// Atomics that hold configuration, never part of a modelled algorithm
/// (the spin-wait policy): `core`'s even under loom, so they can live in
/// `static`s. Only loads and stores are used, which every target has.
pub(crate) mod config {
    pub(crate) use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
}

/// One iteration of a busy-wait loop. Under loom it yields to the model
/// scheduler, which needs to know the thread is waiting.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// One iteration of a busy-wait loop under a caller-chosen
/// [`RelaxStrategy`](spin::relax::RelaxStrategy). Under loom it yields to the
/// model scheduler instead.
#[inline(always)]
#[cfg_attr(loom, allow(clippy::extra_unused_type_parameters))]
pub(crate) fn relax<R: spin::relax::RelaxStrategy>() {
    #[cfg(not(loom))]
    R::relax();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// `UnsafeCell` with loom's closure-based API.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Declares a function that is `const` in normal builds and plain under
/// loom, whose atomics cannot be built in a constant context.
macro_rules! const_fn {
    ($(#[$attr:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
}
pub(crate) use const_fn;
