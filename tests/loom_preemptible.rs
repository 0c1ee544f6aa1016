//! The models of `tests/loom.rs` with CPUs that may be descheduled while
//! spinning (`ksync::kernel::set_vcpu_preemptible(true)`): the ticket lock
//! and the lock inside `LockRef` hand off by test-and-set with backoff
//! instead of strict FIFO, and every model must hold just the same.
//!
//! Run with
//! `RUSTFLAGS="--cfg ksync_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_preemptible`.

#![cfg(ksync_loom)]

/// Test-and-set hand-off.
const PREEMPTIBLE: bool = true;

#[path = "common/lock_models.rs"]
mod models;
