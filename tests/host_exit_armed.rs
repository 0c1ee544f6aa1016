//! A thread that exits with a preemption armed
//! (`host::preempt_at_next_point`) and not yet run used to never finish
//! its exit (now it is disarmed when `PREEMPTION` is gone, and `free_late`
//! keeps the id until it is released). Its `PREEMPTION` local is gone by then, so `preempt_now` cannot
//! take the armed switch nor mark the thread unarmed: every `cpu_id` of
//! its destructors takes the slow path. One that comes after `THIS_CPU`'s
//! and `EXIT_CPU`'s destructors claims a `LATE_CPU` id; `free_late`
//! clears `LATE_CPU` and then `release`s the id, whose offlining asks for
//! the CPU id again: a new late id, a new `free_late` registered, and so
//! on for ever (the thread spins in `__call_tls_dtors` -> `free_late`).

use std::sync::mpsc;
use std::time::Duration;

use ksync::{host, kernel};

#[test]
fn thread_exits_with_a_preemption_armed() {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let exiting = std::thread::spawn(|| {
            #[cfg(feature = "hostile")]
            host::hostile::set_enabled(false);
            let _ = kernel::cpu_id(); // a CPU id of its own
            // Armed, and the thread ends before its next point.
            host::preempt_at_next_point(|| {});
        });
        let _ = exiting.join();
        let _ = done.send(());
    });
    assert!(
        finished.recv_timeout(Duration::from_secs(60)).is_ok(),
        "a thread that exited with a preemption armed did not finish its exit in 60 s"
    );
}
