//! What the architectures' CPU hotplug code shares. Each one saves a
//! going-down CPU's callee-saved registers in that CPU's context with an
//! assembly `hotplug_suspend(context, cpu, down, on_saved)`, which then
//! tail-calls `down(cpu, on_saved)`; `down` calls `on_saved` and stops or
//! parks the CPU. Which registers, and how the CPU is restarted and
//! resumed, are each architecture's own (its `hotplug.rs`).

use core::cell::UnsafeCell;

use super::MAX_CPUS;

/// What the kernel runs once a CPU going down has saved its context.
pub type OnSaved = extern "C" fn(usize);

/// What `hotplug_suspend` tail-calls once the context is saved: calls
/// `on_saved`, then stops or parks the CPU; never returns.
pub type PowerDown = extern "C" fn(usize, OnSaved) -> !;

/// One saved context `C` per CPU, each written by its CPU before it goes
/// down and read by it when it comes back, from assembly only.
pub struct Contexts<C>(UnsafeCell<[C; MAX_CPUS]>);

// SAFETY: CPU `i` alone touches slot `i`, and only from its architecture's
// suspend and resume assembly, before it goes down and after it is back.
unsafe impl<C> Sync for Contexts<C> {}

impl<C> Contexts<C> {
    /// The contexts, each `slots[i]` to begin with.
    pub const fn new(slots: [C; MAX_CPUS]) -> Self {
        Self(UnsafeCell::new(slots))
    }

    /// CPU `cpu`'s slot, for its `hotplug_suspend` (never dereferenced in
    /// Rust).
    pub fn slot(&self, cpu: usize) -> *mut C {
        self.0.get().cast::<C>().wrapping_add(cpu)
    }
}
