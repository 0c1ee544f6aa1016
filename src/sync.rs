//! The atomics shim: the one place the crate takes its atomics, fences,
//! `spin_loop` and cells from.
//!
//! * Normal builds on targets with compare-and-swap: `core`'s atomics.
//! * Targets without compare-and-swap (thumbv6m, riscv32i): `portable-atomic`,
//!   whose read-modify-write operations run inside a `critical-section`
//!   provided by the final binary. These targets are single-core, so that is
//!   both correct and IRQ-safe.
//! * `--cfg ksync_loom`: loom's model-checked types, so the algorithms are explored
//!   by the loom models in `tests/` without a `cfg` in the algorithm code.
//!
//! Non-loom builds get loom's API shape where the two differ (`UnsafeCell`'s
//! `with`/`with_mut`), following tokio's loom shim.

#[cfg(not(ksync_loom))]
pub(crate) use core::sync::atomic::Ordering;
#[cfg(not(any(ksync_loom, feature = "hostile")))]
pub(crate) use core::sync::atomic::fence;

// The hostile host kernel (feature `hostile`, host tests only): every
// atomic operation and fence is first a point where the kernel may
// preempt, migrate or interrupt the task (see `host::hostile`).
#[cfg(all(not(ksync_loom), feature = "hostile"))]
pub(crate) use crate::host::hostile::atomics::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize,
    fence,
};

/// A fence against the compiler only (loom has none, and needs none: its
/// models never take the single-CPU paths that use it).
pub(crate) use core::sync::atomic::compiler_fence;

#[cfg(all(not(ksync_loom), not(feature = "hostile"), target_has_atomic = "32"))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicUsize,
};

#[cfg(all(not(ksync_loom), not(target_has_atomic = "32")))]
pub(crate) use portable_atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicUsize,
};

// 64-bit atomics only where the hardware has them: lockref must never be
// routed through a hidden global lock (see `lockref`'s module docs).
#[cfg(all(not(ksync_loom), not(feature = "hostile"), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::{AtomicI64, AtomicU64};

#[cfg(ksync_loom)]
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
    pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
}

/// One iteration of a busy-wait loop. Under loom it yields to the model
/// scheduler, which needs to know the thread is waiting.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(ksync_loom))]
    core::hint::spin_loop();
    #[cfg(ksync_loom)]
    loom::thread::yield_now();
}

/// One iteration of a busy-wait loop under a caller-chosen
/// [`RelaxStrategy`](spin::relax::RelaxStrategy). Under loom it yields to the
/// model scheduler instead.
#[inline(always)]
#[cfg_attr(ksync_loom, allow(clippy::extra_unused_type_parameters))]
pub(crate) fn relax<R: spin::relax::RelaxStrategy>() {
    #[cfg(not(ksync_loom))]
    R::relax();
    #[cfg(ksync_loom)]
    loom::thread::yield_now();
}

/// `UnsafeCell` with loom's closure-based API.
#[cfg(not(ksync_loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

#[cfg(not(ksync_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(ksync_loom))]
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

#[cfg(ksync_loom)]
pub(crate) use loom::cell::UnsafeCell;

// ---- constructors and statics under loom ----------------------------------
//
// loom's atomics register with the running model, so they cannot be built
// in a constant context, and a loom `static` must be built once per model
// execution. Everything the algorithm files need for that is here, so they
// carry no `cfg(ksync_loom)`:
//
// * `const_fn!`: a constructor that is `const` in normal builds;
// * `array!`: `[value; N]` for non-`Copy` values;
// * `init`, `const_init!`, `const_init_item!`: `ConstInit` values (a
//   constant in normal builds, a function under loom);
// * `model_static!`: a `static` (loom: a `lazy_static`, one per execution);
// * `LockedI64`: an `i64` written under a lock (lock-free reads where the
//   target has 64-bit atomics).

/// Declares a function that is `const` in normal builds and plain under
/// loom, whose atomics cannot be built in a constant context.
macro_rules! const_fn {
    ($(#[$attr:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(ksync_loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(ksync_loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
    ($(#[$attr:meta])* $vis:vis unsafe fn $($rest:tt)*) => {
        #[cfg(not(ksync_loom))]
        $(#[$attr])* $vis const unsafe fn $($rest)*
        #[cfg(ksync_loom)]
        $(#[$attr])* $vis unsafe fn $($rest)*
    };
}
pub(crate) use const_fn;

/// `[value; n]` for a value that is not `Copy` (atomics): an inline
/// `const` block in normal builds, `array::from_fn` under loom.
#[cfg(not(ksync_loom))]
macro_rules! array {
    ($value:expr; $n:expr) => {
        [const { $value }; $n]
    };
}
/// `[value; n]` for a value that is not `Copy` (loom builds: built per
/// element).
#[cfg(ksync_loom)]
macro_rules! array {
    ($value:expr; $n:expr) => {
        core::array::from_fn(|_| $value)
    };
}
pub(crate) use array;

/// The item of [`ConstInit`](crate::sync::ConstInit): the constant
/// `INIT` in normal builds, the function `init` under loom.
#[cfg(not(ksync_loom))]
macro_rules! const_init_item {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        const INIT: Self;
    };
}
/// The item of [`ConstInit`](crate::sync::ConstInit) (loom builds: a
/// function, called once per value).
#[cfg(ksync_loom)]
macro_rules! const_init_item {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        fn init() -> Self;
    };
}

/// Implements [`ConstInit`](crate::sync::ConstInit):
/// `const_init!(impl[T: Bound] for Type<T> = value; ...)` (the brackets
/// are optional). `value` is a constant expression in normal builds.
#[cfg(not(ksync_loom))]
macro_rules! const_init {
    ($(impl $([$($gen:tt)*])? for $ty:ty = $init:expr;)*) => {$(
        impl $(<$($gen)*>)? $crate::sync::ConstInit for $ty {
            const INIT: Self = $init;
        }
    )*};
}
/// Implements [`ConstInit`](crate::sync::ConstInit) (loom builds: the
/// value is built on each call).
#[cfg(ksync_loom)]
macro_rules! const_init {
    ($(impl $([$($gen:tt)*])? for $ty:ty = $init:expr;)*) => {$(
        impl $(<$($gen)*>)? $crate::sync::ConstInit for $ty {
            fn init() -> Self {
                $init
            }
        }
    )*};
}
pub(crate) use const_init;

const_fn! {
    /// A fresh `T::INIT` (`const` in normal builds; under loom a new value
    /// registered with the running model).
    #[inline(always)]
    pub(crate) fn init<T: crate::sync::ConstInit>() -> T {
        #[cfg(not(ksync_loom))]
        return T::INIT;
        #[cfg(ksync_loom)]
        return T::init();
    }
}

/// Declares a `static` that the models see fresh in every execution: a
/// plain `static` (its initializer a constant expression) in normal
/// builds, a `loom::lazy_static!` under loom.
#[cfg(not(ksync_loom))]
macro_rules! model_static {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        $(#[$attr])*
        static $name: $ty = $init;
    };
}
/// Declares a `static` built once per model execution (loom builds).
#[cfg(ksync_loom)]
macro_rules! model_static {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
}
pub(crate) use model_static;

// ---- a lock-protected i64 ----------------------------------------------------

/// An `i64` written only under a lock the owner keeps: an [`AtomicI64`]
/// where the target has 64-bit atomics, so that it can also be read
/// without the lock, and a plain cell elsewhere (thumbv6m, riscv32), where
/// every access takes the lock.
pub(crate) struct LockedI64 {
    #[cfg(target_has_atomic = "64")]
    value: AtomicI64,
    #[cfg(not(target_has_atomic = "64"))]
    value: UnsafeCell<i64>,
}

// Only needed without 64-bit atomics, where the value is an `UnsafeCell`.
#[cfg(not(target_has_atomic = "64"))]
// SAFETY: the value is read and written only through the `unsafe`
// methods, whose callers hold the owner's lock, or through `&mut self`.
unsafe impl Sync for LockedI64 {}

impl LockedI64 {
    const_fn! {
        /// A value of `value`.
        pub(crate) fn new(value: i64) -> Self {
            Self {
                #[cfg(target_has_atomic = "64")]
                value: AtomicI64::new(value),
                #[cfg(not(target_has_atomic = "64"))]
                value: UnsafeCell::new(value),
            }
        }
    }

    /// The value, read without the lock: `None` where the target has no
    /// 64-bit atomic load (take the lock and use [`get`](Self::get)).
    #[inline(always)]
    pub(crate) fn load_unlocked(&self) -> Option<i64> {
        // Relaxed: a snapshot; the writers order themselves with the lock.
        #[cfg(target_has_atomic = "64")]
        return Some(self.value.load(Ordering::Relaxed));
        #[cfg(not(target_has_atomic = "64"))]
        return None;
    }

    /// The value.
    ///
    /// # Safety
    /// The owner's lock is held.
    #[inline(always)]
    pub(crate) unsafe fn get(&self) -> i64 {
        // Relaxed: the lock orders the writes (its Acquire/Release).
        #[cfg(target_has_atomic = "64")]
        return self.value.load(Ordering::Relaxed);
        // SAFETY: the lock is held, so nobody writes the value.
        #[cfg(not(target_has_atomic = "64"))]
        return self.value.with(|value| unsafe { *value });
    }

    /// Sets the value.
    ///
    /// # Safety
    /// The owner's lock is held.
    #[inline(always)]
    pub(crate) unsafe fn set(&self, value: i64) {
        // Relaxed: the lock orders the writes; lock-free readers only
        // want a recent value.
        #[cfg(target_has_atomic = "64")]
        self.value.store(value, Ordering::Relaxed);
        // SAFETY: the lock is held, so nobody else reads or writes it.
        #[cfg(not(target_has_atomic = "64"))]
        self.value.with_mut(|cell| unsafe { *cell = value });
    }
}

// Defined here, below every module that implements it (the shim's
// macros name it); `percpu` re-exports it for users.
/// Types with a constant initial value, so that a [`PerCpu`](crate::percpu::PerCpu) of them can be
/// built in a `static` ([`PerCpu::new`](crate::percpu::PerCpu::new) is `const`).
///
/// Implemented for the integer atomics and `bool`/integer `Cell`-free
/// primitives; implement it for your own types whose initial value is a
/// constant expression.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::percpu::{ConstInit, PerCpu};
///
/// // Linux's `struct rq` statistics, one per CPU, in a `static`.
/// struct SchedStats { switches: AtomicU64, migrations: AtomicU64 }
///
/// impl ConstInit for SchedStats {
///     const INIT: Self = Self { switches: AtomicU64::new(0), migrations: AtomicU64::new(0) };
/// }
///
/// static SCHED_STATS: PerCpu<SchedStats> = PerCpu::new();
/// SCHED_STATS.get().switches.fetch_add(1, Relaxed);
/// # assert_eq!(SCHED_STATS.get().migrations.load(Relaxed), 0);
/// ```
pub trait ConstInit {
    // `const INIT: Self`; a function under loom, whose atomics cannot be
    // constants (see the atomics shim).
    const_init_item! {
        /// The initial value of every slot.
    }
}
