//! A spinlock taken by a context whose `cpu_id` is `2^32 + 3` (a breach
//! of the contract: ids are below `nr_cpus`) panics naming the id and the
//! limit, before the id is kept anywhere. The owner record keeps an id in
//! 32 bits: kept, `2^32 + 3` would read back as 3, and the unlock would
//! uncount CPU 3's debug preemption count, held by a live
//! `preempt_disable` there, leaving `might_sleep` on CPU 3 silent (it did,
//! before the check). Debug builds only (the count is theirs).

use ksync_bad_kernel::CPU;
use std::sync::atomic::Ordering::Relaxed;

use ksync::spinlock::{PreemptDisabled, SpinLock};

static LOCK: SpinLock<u32, PreemptDisabled> = SpinLock::new(0);

/// One test at a time: the CPU id is process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// With preemption disabled on CPU 3, a lock and unlock as CPU `other`;
/// returns whether that panicked (and its message), and whether
/// `might_sleep` on CPU 3 still reports afterwards.
fn run(other: usize) -> (Option<String>, bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    CPU.store(3, Relaxed);
    let held = ksync::kernel::preempt_disable(); // CPU 3: preemption off
    CPU.store(other, Relaxed);
    let locked = std::panic::catch_unwind(|| {
        *LOCK.lock() += 1;
    });
    let panicked = locked.err().map(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    CPU.store(3, Relaxed);
    let reported = std::panic::catch_unwind(ksync::wait::might_sleep).is_err();
    drop(held);
    (panicked, reported)
}

#[test]
#[cfg(debug_assertions)]
fn an_in_range_id_leaves_cpu_3_counted() {
    let (panicked, reported) = run(2);
    assert_eq!(panicked, None);
    assert!(
        reported,
        "might_sleep on CPU 3 with preempt_disable held was silent"
    );
}

#[test]
#[cfg(debug_assertions)]
fn an_out_of_range_id_panics_and_does_not_uncount_another_cpu() {
    let (panicked, reported) = run((1 << 32) + 3);
    let message = panicked.expect("a lock on CPU id 2^32+3 did not panic");
    assert!(
        message.contains("4294967299") && message.contains("MAX_CPUS"),
        "the panic does not name the id and the limit: {message}"
    );
    assert!(
        reported,
        "might_sleep on CPU 3 with preempt_disable held was silent: a spinlock hold on CPU id \
         2^32+3 uncounted CPU 3"
    );
}
