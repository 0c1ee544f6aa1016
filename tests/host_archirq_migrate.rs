//! the host kernel's debug builds count `ArchIrq` masking per
//! CPU id (src/kernel/irq.rs `count_masked`/`count_unmasking`, indexed by
//! the CPU id at the time), for `might_sleep`. A task that is moved to
//! another CPU while it has interrupts masked through `ArchIrq` (the
//! host's `migrate_to` and the hostile kernel's migrations look only at
//! the preemption count and the host's own `irqs_disabled`, which does not
//! see `ArchIrq`) leaves its count on the CPU it left: the restore takes
//! one off the new CPU's count (saturating at 0) and the old CPU's stays
//! at 1. The next task on that CPU id is then told "a sleeping wait with
//! interrupts masked" by every `might_sleep`, with nothing masked.

use ksync::host;
use ksync::kernel::{self, irq::ArchIrq, irq::IrqState};

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the count is debug builds'")]
fn a_migration_inside_an_archirq_section_leaves_no_masking_behind() {
    #[cfg(feature = "hostile")]
    host::hostile::set_enabled(false);
    let left = std::thread::spawn(|| {
        let here = kernel::cpu_id();
        let masked = IrqState::<ArchIrq>::save_with();
        // A scheduler does not move a task off a CPU whose interrupts are
        // masked: the host kernel refuses, naming the cause, and its
        // hostile schedule does not migrate or preempt then.
        let other = (0..kernel::nr_cpus()).rev().find(|&c| c != here).unwrap();
        let moved = std::panic::catch_unwind(|| host::migrate_to(other));
        assert!(
            moved.is_err() || !cfg!(debug_assertions),
            "migrate_to inside an ArchIrq section was allowed"
        );
        drop(masked);
        here
    })
    .join()
    .unwrap();
    // A task that later runs on the CPU the first one left, with nothing
    // masked, may sleep.
    let r = std::thread::spawn(move || {
        host::migrate_to(left);
        std::panic::catch_unwind(ksync::wait::might_sleep)
    })
    .join()
    .unwrap();
    assert!(
        r.is_ok(),
        "might_sleep on CPU {left} with nothing masked panicked: the masking count of a task \
         that migrated inside an ArchIrq section stayed on the CPU it left"
    );
}
