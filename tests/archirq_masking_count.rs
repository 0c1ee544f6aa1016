//! Found by tests/preempt_count_balance.rs
//! under the hostile kernel (seeds 1, 2, 3: "ksync: a sleeping wait with
//! interrupts masked on this CPU" on a CPU nobody uses), before the fix:
//! `ArchIrq::save` masks (on the host: `critical-section`), then counts the masking on
//! the CPU id it reads (src/kernel/irq.rs `count_masked`). The host
//! kernel sees `ArchIrq` masking only through that count
//! (`masked_by_ksync`), so the `cpu_id` read inside `count_masked` is a
//! preemption point where the task may still be moved: the masking is
//! counted on the CPU it left, and the restore uncounts the new CPU
//! (saturating). The CPU left keeps a count of 1 for good, and every
//! `might_sleep` of the next task there reports interrupts masked.
//! (tests/host_archirq_migrate.rs covers a migration once the count is
//! taken, which the host refuses; this is the window before it.) Now the
//! count is taken with no point of the host's schedule in it.

use ksync::spinlock::ArchIrqTicketMutex;
use ksync::{host, kernel, wait};

static ARCH: ArchIrqTicketMutex<u64> = ArchIrqTicketMutex::new(0);

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the count is debug builds'")]
fn a_move_while_archirq_masks_leaves_no_masking_count_behind() {
    #[cfg(feature = "hostile")]
    host::hostile::set_enabled(false);
    let left = std::thread::spawn(|| {
        let here = kernel::cpu_id();
        let other = (0..kernel::nr_cpus()).rev().find(|&c| c != here).unwrap();
        // The scheduler moves the task at its next point (a `cpu_id`
        // read with preemption enabled and no masking known to it).
        host::preempt_at_next_point(move || host::migrate_to(other));
        *ARCH.lock() += 1;
        here
    })
    .join()
    .unwrap();
    let r = std::thread::spawn(move || {
        host::migrate_to(left);
        std::panic::catch_unwind(wait::might_sleep)
    })
    .join()
    .unwrap();
    assert!(
        r.is_ok(),
        "might_sleep on CPU {left} with nothing masked panicked: the ArchIrq masking of a task \
         moved between the mask and its count stayed on the CPU it left"
    );
}
