//! reviewg: a spinlock taken and released by a context whose `cpu_id` is
//! `2^32 + 3` (a breach of the contract: ids are below `nr_cpus`) counts
//! its preemption disable on no CPU (`PREEMPT_OFF.get` is `None` past
//! `MAX_CPUS`) but, since e72eeb6^/37db448, uncounts it on CPU 3: the
//! owner record keeps `id as u32 + 1`, and `clear_owner` hands
//! `tag - 1 = 3` to `exit_on_cpu`. CPU 3's count, held by a live
//! `preempt_disable` guard, drops to zero and `might_sleep` there is
//! silent. Before the change the uncount asked `cpu_id` (`None` too) and
//! nothing else moved. Debug builds only (the count is theirs).

use reviewg_bogus_id::CPU;
use std::sync::atomic::Ordering::Relaxed;

use ksync::spinlock::{PreemptDisabled, SpinLock};

fn lock_and_unlock_on(cpu: usize) {
    CPU.store(cpu, Relaxed);
    static LOCK: SpinLock<u32, PreemptDisabled> = SpinLock::new(0);
    *LOCK.lock() += 1;
}

fn run(other: usize) -> bool {
    CPU.store(3, Relaxed);
    let held = ksync::kernel::preempt_disable(); // CPU 3: preemption off
    lock_and_unlock_on(other);
    CPU.store(3, Relaxed);
    let reported = std::panic::catch_unwind(ksync::wait::might_sleep).is_err();
    drop(held);
    reported
}

#[test]
fn control_an_in_range_id_leaves_cpu_3_counted() {
    assert!(run(2), "might_sleep on CPU 3 with preempt_disable held was silent");
}

#[test]
#[ignore = "reviewg: demonstrates a wrong-CPU uncount with an out-of-range id (fails when run)"]
fn an_out_of_range_id_does_not_uncount_another_cpu() {
    assert!(
        run((1 << 32) + 3),
        "might_sleep on CPU 3 with preempt_disable held was silent: a spinlock hold on CPU id \
         2^32+3 uncounted CPU 3"
    );
}
