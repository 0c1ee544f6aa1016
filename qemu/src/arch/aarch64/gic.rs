//! Interrupts: the GICv2 of QEMU's `virt` board (through `arm-gic`) and the
//! generic timer's virtual timer (PPI 11, INTID 27, the one Linux uses in
//! guests), reloaded from its handler for a periodic tick.

use core::sync::atomic::{AtomicU64, Ordering};

use aarch64_cpu::registers::{CNTFRQ_EL0, CNTV_CTL_EL0, CNTV_TVAL_EL0, Readable, Writeable};
use arm_gic::gicv2::GicV2;
use arm_gic::gicv2::registers::{Gicc, Gicd};
use arm_gic::{IntId, InterruptGroup};

use super::TIMER_HZ;
use crate::arch::{CpuLocal, MAX_CPUS, upcalls};

const GICD_BASE: usize = 0x0800_0000;
const GICC_BASE: usize = 0x0801_0000;
/// The EL1 virtual timer's interrupt.
const TIMER: IntId = IntId::ppi(11);

/// Counter ticks per timer period.
static PERIOD: AtomicU64 = AtomicU64::new(0);

/// Each CPU's handle on the GIC.
///
/// The CPU interface (GICC) and the distributor's registers for SGIs and
/// PPIs are banked per CPU, so what one CPU's handle touches is its own,
/// except the distributor's global control and group registers, which
/// `setup` sets to the same values from every CPU.
static GIC: CpuLocal<Option<GicV2<'static>>> = CpuLocal::new([const { None }; MAX_CPUS]);

/// Which group our interrupts are in: group 1 if the GIC has the security
/// extensions (then the non-secure world only sees group 1), else group 0.
fn group(gic: &GicV2<'_>) -> InterruptGroup {
    if gic.typer().has_security_extension() {
        InterruptGroup::Group1
    } else {
        InterruptGroup::Group0
    }
}

/// Boot CPU: the timer period.
pub fn init_platform() {
    PERIOD.store(CNTFRQ_EL0.get() / TIMER_HZ, Ordering::Relaxed);
}

/// Every CPU: distributor and CPU interface on, the timer interrupt enabled
/// at the GIC, the timer itself still off.
pub fn init_local() {
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR);
    // SAFETY: the virt board's GICv2 distributor and CPU interface, mapped
    // as device memory by `mmu`; one handle per CPU, shared per the banking
    // argument on `GIC`.
    let mut gic = unsafe { GicV2::new(GICD_BASE as *mut Gicd, GICC_BASE as *mut Gicc) };
    gic.setup();
    gic.set_interrupt_priority(TIMER, 0x80);
    gic.enable_interrupt(TIMER, true)
        .expect("the virtual timer PPI can be enabled");
    GIC.with(|slot| *slot = Some(gic));
}

/// Starts this CPU's periodic timer.
pub fn timer_start() {
    CNTV_TVAL_EL0.set(PERIOD.load(Ordering::Relaxed));
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
}

/// The IRQ exception: acknowledge, handle, end. `pc`: where it
/// interrupted this CPU.
pub fn handle_irq(pc: u64) {
    let Some((intid, group)) = GIC.with(|gic| {
        let gic = gic.as_mut().expect("GIC initialised on this CPU");
        let group = group(gic);
        gic.get_and_acknowledge_interrupt(group)
            .map(|intid| (intid, group))
    }) else {
        return; // spurious
    };
    if intid == TIMER {
        // Re-arm first: the condition (count >= compare) stays asserted
        // until the compare value moves.
        CNTV_TVAL_EL0.set(PERIOD.load(Ordering::Relaxed));
        upcalls::timer_tick(pc);
    } else {
        upcalls::fatal(format_args!("KSYNC-FAULT unexpected interrupt {intid:?}"));
    }
    GIC.with(|gic| {
        gic.as_mut()
            .expect("GIC initialised on this CPU")
            .end_interrupt(intid, group)
    });
}
