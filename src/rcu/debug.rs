//! The misuse checks of debug builds (Linux's `RCU_LOCKDEP_WARN`): a
//! reader on a CPU that RCU is not watching, a quiescent state inside a read
//! section, and a wait for a grace period inside a read section or a
//! `call_rcu` callback (see the [module docs](super#misuse-that-debug-builds-catch)).
//! Release builds compile them to nothing.
//!
//! With [`lockdep`](crate::lockdep), in every build, the waits also report
//! held locks, and a read section is a lock to lockdep (the class
//! `"rcu_read_lock"`, taken as a try-lock: read sections nest, and never
//! wait), so a wait inside one is a report naming it. Where both the debug
//! check and lockdep would catch a bug, the debug check runs first: a
//! kernel sees one report for one bug.

use crate::lockdep::Map;

/// The read sections' lockdep pseudo-lock.
static RCU_READ: Map = Map::with_key(crate::lock_class!("rcu_read_lock"));

/// The read sections' lockdep pseudo-lock (zero-sized, with empty methods,
/// without `lockdep`).
#[inline(always)]
pub(super) fn lockdep_read() -> &'static Map {
    &RCU_READ
}

#[cfg(debug_assertions)]
use super::engine;
#[cfg(debug_assertions)]
use crate::kernel;
#[cfg(debug_assertions)]
use crate::sync::Ordering;

#[inline]
#[track_caller]
pub(super) fn check_not_reading(cpu: usize) {
    #[cfg(debug_assertions)]
    if engine().cpus.cpu(cpu).nesting.load(Ordering::Relaxed) != 0 {
        panic!("rcu: quiescent state reported inside a read-side critical section (CPU {cpu})");
    }
    let _ = cpu;
}

/// Debug builds: panics unless RCU watches `cpu` (the calling CPU), for a
/// reader named `what`.
#[cfg(debug_assertions)]
#[inline]
#[track_caller]
pub(crate) fn check_watching(cpu: usize, what: &str) {
    // Relaxed: only this CPU changes its own `watching`.
    if engine().cpus.cpu(cpu).watching.load(Ordering::Relaxed) & 1 == 0 {
        not_watching(cpu, what);
    }
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
#[track_caller]
fn not_watching(cpu: usize, what: &str) -> ! {
    panic!(
        "rcu: {what} on CPU {cpu}, which RCU is not watching (never brought online, \
         offline, or idle): call rcu::cpu_online() when the CPU comes up, and \
         rcu::idle_exit() before reading on an idle CPU (e.g. in an interrupt handler)"
    )
}

/// Debug builds: panics if the calling CPU is inside a read section or a
/// `call_rcu` callback, where `what` (a wait for a grace period or for
/// callbacks) would wait for itself.
#[inline]
#[track_caller]
pub(crate) fn check_may_wait(what: &'static str) {
    #[cfg(debug_assertions)]
    {
        let cpu = kernel::cpu_id();
        let state = engine().cpus.cpu(cpu);
        if state.nesting.load(Ordering::Relaxed) != 0 {
            panic!(
                "rcu: {what} inside a read-side critical section (CPU {cpu}): it waits \
                 for a grace period, which the read section holds up; drop the guard \
                 first, or use rcu::call_rcu"
            );
        }
        if state.in_callback.load(Ordering::Relaxed) != 0 {
            panic!(
                "rcu: {what} from a call_rcu callback (CPU {cpu}): callbacks must not \
                 block or wait for grace periods; queue another callback instead"
            );
        }
    }
    // A CPU waiting with a spinlock held (or in a read section, in builds
    // without the check above) can wait forever.
    crate::lockdep::assert_no_locks_held(what);
}

/// Marks this CPU as running `call_rcu` callbacks until it drops (debug
/// builds; nothing in release builds).
pub(crate) struct InCallback {
    #[cfg(debug_assertions)]
    cpu: usize,
}

impl InCallback {
    #[inline]
    pub(crate) fn enter() -> Self {
        #[cfg(debug_assertions)]
        {
            let cpu = kernel::cpu_id();
            // Relaxed (here and in `drop`): only this CPU touches it.
            engine()
                .cpus
                .cpu(cpu)
                .in_callback
                .fetch_add(1, Ordering::Relaxed);
            InCallback { cpu }
        }
        #[cfg(not(debug_assertions))]
        InCallback {}
    }
}

impl Drop for InCallback {
    #[inline]
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        engine()
            .cpus
            .cpu(self.cpu)
            .in_callback
            .fetch_sub(1, Ordering::Relaxed);
    }
}
