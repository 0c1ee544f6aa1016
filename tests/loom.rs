//! loom models of lockref and the spinlocks: every interleaving (within
//! loom's preemption bound) of small races, with loom's `UnsafeCell`
//! standing for the protected object so that a missing happens-before is
//! reported as a data race.
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`.
//! Under loom the crate uses loom's atomics, its `const fn`s are plain
//! functions and the `lock_api` impls are compiled out, so these models use
//! the raw inherent API. The `SAFETY` claims on `UnsafeCell` accesses are
//! exactly what loom checks.
//!
//! Every racing role runs in a spawned thread and the model's main thread
//! only joins them: loom's DPOR compares a thread's next access only with
//! the *last* access to the object, so when the main thread does a plain
//! load and a spawned thread then does its own load before its
//! compare-exchange, loom never tries the spawned thread first (a model
//! written that way ran exactly one execution).

#![cfg(ksync_loom)]

/// Strict FIFO hand-off: the mode of bare metal with a CPU per core.
const PREEMPTIBLE: bool = false;

#[path = "common/lock_models.rs"]
mod models;
