//! Review of issue 38 (adversarial): `might_sleep`'s preemption check is
//! skipped whenever lockdep counts a held lock (`held_lock_count() != 0`,
//! "the preemption check is left to that report"), but lockdep's report
//! covers non-sleeping locks only: holding a sleeping lock (a `Mutex`, an
//! rw semaphore) inside `preempt_disable()` or a `PerCpu::get()` reference,
//! a sleeping call is not reported at all. Run with `--features lockdep`
//! (without it the count is always 0 and the check runs).

#![cfg(not(ksync_loom))]

use std::sync::atomic::AtomicU32;
use std::thread;

use ksync::mutex::Mutex;
use ksync::semaphore::Semaphore;

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `sleep` on a fresh thread while `m` is held and inside the
/// context `enter` opens; the panic message (empty if none).
fn sleep_in(enter: fn() -> Box<dyn std::any::Any>, sleep: fn()) -> String {
    thread::spawn(move || {
        static M: Mutex<u32> = Mutex::new(0);
        let held = M.lock(); // a sleeping lock: allowed across a sleep
        let ctx = enter();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(sleep));
        drop(ctx);
        drop(held);
        match r {
            Ok(()) => String::new(),
            Err(p) => panic_text(&p),
        }
    })
    .join()
    .unwrap()
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn a_sleep_inside_preempt_disable_is_reported_while_a_mutex_is_held() {
    let sleeps: [(&str, fn()); 3] = [
        ("Semaphore::down", || Semaphore::new(1).down()),
        ("Mutex::lock", || drop(Mutex::new(0).lock())),
        ("RwSemaphore::write", || {
            drop(ksync::rwsem::RwSemaphore::new(0).write())
        }),
    ];
    for (name, sleep) in sleeps {
        let msg = sleep_in(|| Box::new(ksync::kernel::preempt_disable()), sleep);
        assert!(
            msg.contains("preemption disabled"),
            "REVIEW38: {name} inside preempt_disable() with a Mutex held: no might_sleep report ({msg:?})"
        );
        let msg = sleep_in(
            || {
                static P: ksync::percpu::PerCpu<AtomicU32> = ksync::percpu::PerCpu::new();
                Box::new(P.get())
            },
            sleep,
        );
        assert!(
            msg.contains("preemption disabled"),
            "REVIEW38: {name} holding a PerCpu::get() reference with a Mutex held: no might_sleep report ({msg:?})"
        );
    }
}
