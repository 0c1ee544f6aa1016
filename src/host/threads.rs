//! The host hooks on OS threads: ids from a process-wide table, freed when
//! a thread exits.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use crate::kernel::MAX_CPUS;

/// Ids in use (index = id).
static IN_USE: Mutex<Vec<bool>> = Mutex::new(Vec::new());

struct ThreadCpu(Cell<Option<usize>>);

impl Drop for ThreadCpu {
    fn drop(&mut self) {
        if let Some(id) = self.0.get() {
            // An exiting thread is an offline CPU: it must not hold up
            // grace periods, and the next thread with this id starts
            // offline.
            crate::rcu::offline_cpu(id);
            #[cfg(feature = "lockdep")]
            crate::lockdep::cpu_offline(id);
            let _ = CPU_ID.try_with(|c| c.set(usize::MAX));
            let mut used = lock_in_use();
            used[id] = false;
        }
    }
}

// The id sits in a destructor-less thread-local (a plain TLS load on the
// hot path, `usize::MAX` until claimed); the one with the destructor that
// frees the id is touched only when the id is claimed.
std::thread_local! {
    /// This thread's "interrupts off" flag: what a CPU has. Masking
    /// interrupts on one thread never excludes another.
    static IRQS_OFF: Cell<bool> = const { Cell::new(false) };
    /// Nesting of `enter_interrupt`, and the "interrupts off" flag it
    /// found on the way in.
    static IN_IRQ: Cell<(u32, bool)> = const { Cell::new((0, false)) };
    static CPU_ID: Cell<usize> = const { Cell::new(usize::MAX) };
    static THIS_CPU: ThreadCpu = const { ThreadCpu(Cell::new(None)) };
}

fn lock_in_use() -> MutexGuard<'static, Vec<bool>> {
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

fn claim() -> usize {
    let mut used = lock_in_use();
    if used.is_empty() {
        used.resize(MAX_CPUS, false);
    }
    let Some(id) = used.iter().position(|u| !u) else {
        drop(used);
        panic!(
            "ksync test hooks: more than {MAX_CPUS} threads use per-CPU data at once \
             (MAX_CPUS = {MAX_CPUS}; raise KSYNC_MAX_CPUS)"
        );
    };
    used[id] = true;
    id
}

#[inline]
pub(super) fn cpu_id() -> usize {
    let id = CPU_ID.with(Cell::get);
    if id != usize::MAX {
        return id;
    }
    let id = THIS_CPU.with(|cpu| {
        let id = claim();
        cpu.0.set(Some(id));
        id
    });
    CPU_ID.with(|c| c.set(id));
    id
}

#[inline]
pub(super) fn irq_save() -> usize {
    usize::from(IRQS_OFF.with(|off| off.replace(true)))
}

#[inline]
pub(super) fn irq_restore(flags: usize) {
    debug_assert!(
        IRQS_OFF.with(Cell::get),
        "ksync test hooks: interrupts restored while not disabled"
    );
    IRQS_OFF.with(|off| off.set(flags != 0));
}

/// Whether this thread has "interrupts" disabled (inside an IRQ-saving
/// lock or an [`IrqState`](crate::spinlock::IrqState)): Linux's
/// `irqs_disabled()` for the host hooks.
pub fn irqs_disabled() -> bool {
    IRQS_OFF.with(Cell::get)
}

/// From now on this thread plays an interrupt handler: the kernel's
/// [`in_interrupt`](crate::kernel::Kernel::in_interrupt) is true and
/// "interrupts" are off, until the matching [`exit_interrupt`]. Nests.
pub fn enter_interrupt() {
    IN_IRQ.with(|irq| {
        let (depth, saved) = irq.get();
        let saved = if depth == 0 {
            IRQS_OFF.with(|off| off.replace(true))
        } else {
            saved
        };
        irq.set((depth + 1, saved));
    });
}

/// Ends the innermost [`enter_interrupt`]: at the outermost, "interrupts"
/// are as they were before it.
///
/// # Panics
/// Without a matching `enter_interrupt`.
pub fn exit_interrupt() {
    IN_IRQ.with(|irq| {
        let (depth, saved) = irq.get();
        assert!(
            depth > 0,
            "ksync test hooks: exit_interrupt without enter_interrupt"
        );
        if depth == 1 {
            IRQS_OFF.with(|off| off.set(saved));
        }
        irq.set((depth - 1, saved));
    });
}

#[inline]
pub(super) fn in_interrupt() -> bool {
    IN_IRQ.with(|irq| irq.get().0 != 0)
}
