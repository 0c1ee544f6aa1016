//! The host kernel's armed preemption (`preempt_at_next_point`)
//! fired at a `cpu_id` read with interrupts masked (preemption count 0).
//! A CPU with interrupts off is not preempted (the reason `migrate_to` now
//! panics there and the hostile schedule holds off): the armed "scheduler"
//! ran anyway, and one that migrates panicked inside a legal program.

use std::cell::Cell;
use std::rc::Rc;

use ksync::kernel::irq::{ArchIrq, IrqState};
use ksync::{host, kernel};

fn armed_preemption_fires_with(mask: impl FnOnce() -> Box<dyn std::any::Any>) -> bool {
    #[cfg(feature = "hostile")]
    host::hostile::set_enabled(false);
    let fired = Rc::new(Cell::new(false));
    let seen = fired.clone();
    let irqs = mask();
    // Armed inside the masked section (on the host, `ArchIrq` masking is
    // the `critical-section` lock, which the host sees only once ksync has
    // counted it: the count's own CPU-id read, inside `save`, is a point
    // before that, a limit of the host model).
    host::preempt_at_next_point(move || seen.set(true));
    let _ = kernel::cpu_id(); // a preemption point only with interrupts on
    let fired_masked = fired.get();
    drop(irqs);
    // A point with interrupts on runs it if it was left armed (a thread
    // that exits with one armed hangs: tests/host_exit_armed.rs).
    let _ = kernel::cpu_id();
    assert!(fired.get(), "the armed preemption never ran");
    fired_masked
}

#[test]
fn no_armed_preemption_with_kernel_irqs_masked() {
    std::thread::spawn(|| {
        let fired = armed_preemption_fires_with(|| Box::new(IrqState::save()));
        assert!(
            !fired,
            "the armed preemption ran at a cpu_id read with interrupts masked (IrqState::save)"
        );
    })
    .join()
    .unwrap();
}

#[test]
#[cfg_attr(
    not(any(debug_assertions, feature = "lockdep")),
    ignore = "the host sees ArchIrq masking through ksync's count: debug builds and lockdep"
)]
fn no_armed_preemption_with_arch_irqs_masked() {
    std::thread::spawn(|| {
        let fired = armed_preemption_fires_with(|| Box::new(IrqState::<ArchIrq>::save_with()));
        assert!(
            !fired,
            "the armed preemption ran at a cpu_id read with interrupts masked (ArchIrq)"
        );
    })
    .join()
    .unwrap();
}
