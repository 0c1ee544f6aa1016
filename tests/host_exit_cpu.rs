//! a CPU id claimed by a thread-local destructor that runs
//! after both `THIS_CPU`'s and `EXIT_CPU`'s destructors is never freed
//! (src/host/threads.rs, `cpu_id_slow`'s last fallback). Two destructors
//! of the user's, registered before ksync's, that each call ksync at
//! thread exit: the first (run after `THIS_CPU`'s) claims `EXIT_CPU`, whose
//! destructor (registered during the teardown, so run next) frees it; the
//! second then finds both gone and claims an id for good. After
//! `MAX_CPUS` such threads have exited, no thread can get a CPU id.

use std::cell::Cell;

use ksync::kernel::{self, MAX_CPUS};

struct CallsKsyncAtExit(Cell<u8>);

impl Drop for CallsKsyncAtExit {
    fn drop(&mut self) {
        // A thread-local destructor that uses per-CPU data (a logger that
        // bumps a per-CPU counter, a pool that returns a buffer...).
        let _ = kernel::cpu_id();
    }
}

thread_local! {
    static FIRST: CallsKsyncAtExit = const { CallsKsyncAtExit(Cell::new(0)) };
    static SECOND: CallsKsyncAtExit = const { CallsKsyncAtExit(Cell::new(0)) };
}

#[test]
fn exiting_threads_do_not_leak_cpu_ids() {
    // Twice as many exits as there are ids: a leak of one per exit runs out.
    for i in 0..2 * MAX_CPUS {
        std::thread::spawn(|| {
            // Registered before ksync's own thread-locals.
            FIRST.with(|c| c.0.set(1));
            SECOND.with(|c| c.0.set(1));
            let _ = kernel::cpu_id();
        })
        .join()
        .unwrap();
        let probe = std::thread::spawn(kernel::cpu_id).join();
        assert!(
            probe.is_ok(),
            "after {} threads exited (MAX_CPUS = {MAX_CPUS}), a new thread gets no CPU id: ids leaked",
            i + 1
        );
    }
}
