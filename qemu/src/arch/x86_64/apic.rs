//! Interrupt controllers and clocks: the local APIC (timer, IPIs, EOI) through
//! the `x2apic` crate (xAPIC MMIO under TCG; x2APIC MSRs where the CPU has
//! them, as under KVM), the legacy 8259 PICs (remapped and masked, through
//! `pic8259`), and the calibration of the TSC and of the APIC timer against
//! the 8254 PIT.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ::x86_64::instructions::port::Port;
use pic8259::ChainedPics;
use x2apic::lapic::{LocalApic, LocalApicBuilder, TimerDivide, TimerMode, xapic_base};

use super::TIMER_HZ;
use crate::arch::{CpuLocal, MAX_CPUS};

/// Local APIC timer interrupt vector.
pub const TIMER_VECTOR: u8 = 0x40;
/// Local APIC error interrupt vector.
pub const ERROR_VECTOR: u8 = 0x41;
/// The kick of a halting lock wait (`kick_others`): wakes a halted CPU,
/// does nothing else.
pub const KICK_VECTOR: u8 = 0x42;
/// Local APIC spurious interrupt vector.
pub const SPURIOUS_VECTOR: u8 = 0xFF;
/// Where the legacy PICs' vectors go (0x20..0x30), away from exceptions,
/// should one of them still signal a spurious IRQ 7 or 15.
pub const PIC_VECTORS: u8 = 0x20;

/// TSC ticks per second, measured at boot.
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// APIC timer ticks (after its divider) per timer period.
static APIC_PERIOD: AtomicU32 = AtomicU32::new(0);

/// Each CPU's local APIC handle. `LocalApic` is `!Send`: its registers are
/// those of the CPU that uses it, so each CPU keeps its own.
static LAPIC: CpuLocal<Option<LocalApic>> = CpuLocal::new([const { None }; MAX_CPUS]);

/// PIT input clock, Hz.
const PIT_HZ: u64 = 1_193_182;
/// Calibration interval, ms.
const CALIBRATION_MS: u64 = 20;

/// The TSC frequency measured by [`init_platform`].
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Boot CPU: masks the legacy PICs and calibrates the TSC and the APIC
/// timer.
pub fn init_platform() {
    // SAFETY: the PICs sit at their fixed ports; remapping them to 0x20..0x30
    // (which the IDT routes to the trap handler) and masking every line is
    // what every APIC-based kernel does first.
    unsafe {
        let mut pics = ChainedPics::new(PIC_VECTORS, PIC_VECTORS + 8);
        pics.initialize();
        pics.write_masks(0xFF, 0xFF);
    }
    let mut apic = build(TimerMode::OneShot, u32::MAX);
    // SAFETY: this CPU's local APIC, interrupts off; the one-shot countdown
    // from u32::MAX cannot expire during the calibration.
    unsafe { apic.enable() };
    // SAFETY: reading this CPU's APIC timer count register.
    let apic_start = unsafe { apic.timer_current() };
    let tsc_start = rdtsc();
    pit_wait_ms(CALIBRATION_MS);
    let tsc_end = rdtsc();
    // SAFETY: as above.
    let apic_end = unsafe { apic.timer_current() };
    // SAFETY: this CPU's local APIC: stop the calibration countdown.
    unsafe { apic.disable_timer() };
    let tsc_hz = (tsc_end - tsc_start) * 1000 / CALIBRATION_MS;
    let apic_hz = u64::from(apic_start - apic_end) * 1000 / CALIBRATION_MS;
    TSC_HZ.store(tsc_hz, Ordering::Relaxed);
    APIC_PERIOD.store((apic_hz / TIMER_HZ).max(1) as u32, Ordering::Relaxed);
}

/// Every CPU: enables its local APIC with the periodic timer configured but
/// masked until [`timer_start`].
pub fn init_local() {
    let mut apic = build(TimerMode::Periodic, APIC_PERIOD.load(Ordering::Relaxed));
    // SAFETY: this CPU's local APIC, interrupts off; the vectors are routed
    // by the IDT, which is loaded.
    unsafe {
        apic.enable();
        apic.disable_timer();
    }
    // SAFETY: reads this CPU's APIC ID register.
    let id = unsafe { apic.id() };
    // Relaxed: read by restarters only after this CPU came up and went
    // down again, which the hotplug states order.
    APIC_IDS[super::cpu_index()].store(id, Ordering::Relaxed);
    LAPIC.with(|slot| *slot = Some(apic));
}

/// Each CPU index's APIC ID as the ICR's destination field wants it (the
/// raw ID register: bits 24..32 in xAPIC mode, the whole word in x2APIC
/// mode; the `x2apic` crate writes the destination as given).
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

fn build(mode: TimerMode, initial: u32) -> LocalApic {
    // SAFETY: reads IA32_APIC_BASE, which every x86_64 CPU has.
    let base = unsafe { xapic_base() };
    LocalApicBuilder::new()
        .timer_vector(usize::from(TIMER_VECTOR))
        .error_vector(usize::from(ERROR_VECTOR))
        .spurious_vector(usize::from(SPURIOUS_VECTOR))
        .timer_mode(mode)
        .timer_divide(TimerDivide::Div16)
        .timer_initial(initial)
        // Identity-mapped (and uncached) by the boot page tables.
        .set_xapic_base(base)
        .build()
        .expect("local APIC configuration is complete")
}

fn with_apic<R>(f: impl FnOnce(&mut LocalApic) -> R) -> R {
    LAPIC.with(|slot| f(slot.as_mut().expect("local APIC initialised on this CPU")))
}

/// Unmasks this CPU's periodic timer.
pub fn timer_start() {
    // SAFETY: this CPU's local APIC, configured by `init_local`.
    with_apic(|apic| unsafe { apic.enable_timer() });
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    // SAFETY: called from an interrupt handler of an APIC-delivered vector.
    with_apic(|apic| unsafe { apic.end_of_interrupt() });
}

/// Masks this CPU's timer (before it goes offline).
pub fn timer_stop() {
    // SAFETY: this CPU's local APIC, configured by `init_local`.
    with_apic(|apic| unsafe { apic.disable_timer() });
}

/// Restarts CPU `cpu`, parked with interrupts off after hotplug: INIT,
/// then STARTUP twice with `vector`. No delays: a CPU handles a pending
/// INIT before a STARTUP, and a STARTUP that finds it already running is
/// ignored (QEMU's APIC needs none; Linux skips them on modern CPUs too).
pub fn restart(cpu: usize, vector: u8) {
    // Relaxed: see `init_local`.
    let id = APIC_IDS[cpu].load(Ordering::Relaxed);
    // SAFETY: the target parked for good (hotplug) and runs nothing; the
    // trampoline is in place at `vector << 12`.
    with_apic(|apic| unsafe {
        apic.send_init_ipi(id);
        apic.send_sipi(vector, id);
        apic.send_sipi(vector, id);
    });
}

/// Sends [`KICK_VECTOR`] to every other CPU (with interrupts off: a
/// handler on this CPU may use the APIC too, and `CpuLocal` refuses
/// re-entry).
pub fn send_kick_all_others() {
    let state = ksync::spinlock::IrqState::save();
    // SAFETY: a fixed-delivery IPI of a vector the IDT routes to a handler
    // that only acknowledges it.
    with_apic(|apic| unsafe {
        apic.send_ipi_all(
            KICK_VECTOR,
            x2apic::lapic::IpiAllShorthand::AllExcludingSelf,
        );
    });
    drop(state);
}

/// Broadcasts INIT to every other CPU.
pub fn send_init_all_others() {
    // SAFETY: starting the APs is what INIT is for; they run nothing yet.
    with_apic(|apic| unsafe { apic.send_init_ipi_all() });
}

/// Broadcasts STARTUP with `vector` (page number of the entry) to every
/// other CPU.
pub fn send_startup_all_others(vector: u8) {
    // SAFETY: the trampoline is in place at `vector << 12`.
    with_apic(|apic| unsafe { apic.send_sipi_all(vector) });
}

/// The TSC.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86_64 CPU and has no side
    // effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Waits `ms` milliseconds on PIT channel 2 (gate controlled through port
/// 0x61, no interrupt), as Linux's `pit_calibrate_tsc` does.
fn pit_wait_ms(ms: u64) {
    let latch = (PIT_HZ * ms / 1000) as u16;
    let mut gate: Port<u8> = Port::new(0x61);
    let mut command: Port<u8> = Port::new(0x43);
    let mut channel2: Port<u8> = Port::new(0x42);
    // SAFETY: the PC speaker/PIT ports; channel 2 only drives the speaker,
    // which stays off (bit 1 clear), and nothing else uses it.
    unsafe {
        let value = gate.read();
        gate.write((value & !0x02) | 0x01); // gate on, speaker off
        command.write(0xB0); // channel 2, lobyte/hibyte, mode 0, binary
        channel2.write(latch as u8);
        channel2.write((latch >> 8) as u8);
        // OUT2 (bit 5) rises when the count reaches zero.
        while gate.read() & 0x20 == 0 {
            core::hint::spin_loop();
        }
    }
}
