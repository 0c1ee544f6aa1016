//! CPU hotplug churn, after rcutorture's `onoff_interval`: while a suite
//! that allows it runs, CPUs other than the boot CPU go offline and come
//! back again and again, at random intervals from a seeded generator (the
//! run's `seed=`, so a failure can be replayed).
//!
//! # Who does what
//!
//! * The boot CPU's timer interrupt is the controller ([`tick`]): at random
//!   intervals of 1 to [`MAX_GAP_MS`] ms it picks a CPU at random and asks
//!   it to go offline if it is online (with three CPUs or more, as long as
//!   another non-boot CPU stays online), or restarts it if it is offline.
//! * A CPU asked to go offline does so at its next quiescent point in
//!   thread context, `Ctx::should_stop` ([`offline_point`]): interrupts
//!   off, RCU told it is gone (`kernel::rcu::cpu_down`: from now on grace
//!   periods do not wait for it, and its queued callbacks are run by the
//!   CPUs that stay), then the arch code saves what the CPU must keep and
//!   powers it down (aarch64: PSCI `CPU_OFF`; riscv64: SBI HSM `hart_stop`)
//!   or parks it (x86_64).
//! * The controller restarts it (PSCI `CPU_ON`, SBI `hart_start`,
//!   INIT-SIPI-SIPI); it sets
//!   itself up again, tells RCU it is back (`kernel::rcu::cpu_back`) before
//!   interrupts come back on and before it returns to the suite, so its
//!   first reader, in a handler or in thread context, is watched.
//! * When the suite's time is up the boot CPU ([`settle`]) stops the churn
//!   and brings every CPU back before the runner's closing barrier.
//!
//! A CPU goes through [`ONLINE`] -> [`REQUESTED`] (the controller) ->
//! [`GOING`] (the CPU accepted) -> [`OFF`] (saved and on its way down: may
//! be restarted) -> [`STARTING`] (the controller restarted it) -> `ONLINE`
//! (the CPU, back and watched by RCU).
//!
//! Suites say whether they allow churn (`Suite::hotplug`); the run asks for
//! it with the word `hotplug` (`harness::args`).

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use ksync::spinlock::IrqState;

use super::cpu::MAX_CPUS;
use super::{rcu, time};
use crate::arch;

/// Online, running.
pub const ONLINE: u8 = 0;
/// The controller asked it to go offline.
pub const REQUESTED: u8 = 1;
/// It accepted and is going down.
pub const GOING: u8 = 2;
/// Its state is saved and it is down (or about to be): may be restarted.
pub const OFF: u8 = 3;
/// Restarted, not yet back.
pub const STARTING: u8 = 4;

/// The longest interval between two churn events, in milliseconds.
pub const MAX_GAP_MS: u64 = 8;
/// How long [`settle`] waits for every CPU to be back.
const SETTLE_TIMEOUT_MS: u64 = 3_000;

static STATE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(ONLINE) }; MAX_CPUS];
/// Churn on (only during a suite that allows it).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// CPUs in the run.
static CPUS: AtomicUsize = AtomicUsize::new(0);
/// The controller's generator state (only the boot CPU's timer interrupt
/// and [`start`] touch it).
static RNG: AtomicU64 = AtomicU64::new(1);
/// When the controller acts next (counter ticks).
static NEXT: AtomicU64 = AtomicU64::new(0);
/// CPUs that went offline / came back since [`start`].
static OFFS: AtomicU64 = AtomicU64::new(0);
static ONS: AtomicU64 = AtomicU64::new(0);
/// Restarts the arch code refused for now (PSCI: still on; SBI: not
/// stopped yet; x86: another restart in flight), retried later.
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// Whether this architecture can take CPUs offline.
pub fn supported() -> bool {
    arch::HOTPLUG
}

/// Boot CPU, before a suite that allows churn: starts it for `cpus` CPUs
/// with the generator seeded from `seed`.
pub fn start(cpus: usize, seed: u64) {
    CPUS.store(cpus, Ordering::Relaxed);
    RNG.store(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        Ordering::Relaxed,
    );
    for counter in [&OFFS, &ONS, &RETRIES] {
        counter.store(0, Ordering::Relaxed);
    }
    NEXT.store(time::now() + time::ms_to_ticks(1), Ordering::Relaxed);
    // Relaxed: the runner's barrier orders this before the suite runs.
    ACTIVE.store(cpus >= 2 && supported(), Ordering::Relaxed);
}

fn next_random() -> u64 {
    let mut x = RNG.load(Ordering::Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    RNG.store(x, Ordering::Relaxed);
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// The boot CPU's timer interrupt: the controller (see the module docs).
pub fn tick(now: u64) {
    // Relaxed: a flag; the states carry the hand-overs.
    if !ACTIVE.load(Ordering::Relaxed) || now < NEXT.load(Ordering::Relaxed) {
        return;
    }
    let r = next_random();
    NEXT.store(
        now + time::ms_to_ticks(1 + r % MAX_GAP_MS),
        Ordering::Relaxed,
    );
    let cpus = CPUS.load(Ordering::Relaxed);
    let cpu = 1 + (r >> 32) as usize % (cpus - 1);
    match STATE[cpu].load(Ordering::Acquire) {
        ONLINE => {
            // With three CPUs or more keep one non-boot CPU online, so
            // that something runs beside the boot CPU all along.
            let online = (1..cpus)
                .filter(|&c| STATE[c].load(Ordering::Relaxed) == ONLINE)
                .count();
            if online > 1 || cpus == 2 {
                // Relaxed: the CPU acts on it in its own time; what it
                // needs comes with its state changes, not with this.
                let _ = STATE[cpu].compare_exchange(
                    ONLINE,
                    REQUESTED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        OFF => {
            restart(cpu);
        }
        _ => {}
    }
}

/// Restarts `cpu` if it is down; whether it did.
fn restart(cpu: usize) -> bool {
    // Acquire pairs with the Release store of OFF: the CPU's saved state
    // is written.
    if STATE[cpu]
        .compare_exchange(OFF, STARTING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    if arch::cpu_restart(cpu) {
        true
    } else {
        RETRIES.fetch_add(1, Ordering::Relaxed);
        STATE[cpu].store(OFF, Ordering::Relaxed);
        false
    }
}

/// Whether `cpu` was asked to go offline (a load; `Ctx::should_stop`
/// calls it every time).
#[inline]
pub fn requested(cpu: usize) -> bool {
    // Relaxed: a hint; `offline_point` decides with a compare-exchange.
    STATE[cpu].load(Ordering::Relaxed) == REQUESTED
}

/// `cpu` (this CPU, not the boot CPU), thread context, at a quiescent point
/// (no read section, no lock held), asked to go offline: goes offline and
/// returns once it is back, watched by RCU again. See the module docs.
#[cold]
#[inline(never)]
pub fn offline_point(cpu: usize) {
    let irq = IrqState::save();
    // Relaxed: the controller's request carries nothing.
    if STATE[cpu]
        .compare_exchange(REQUESTED, GOING, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return; // cancelled by `settle`
    }
    rcu::cpu_down();
    arch::cpu_off(cpu, mark_off);
    // Back: set up again, interrupts still off.
    rcu::cpu_back();
    ONS.fetch_add(1, Ordering::Relaxed);
    // Release: pairs with the Acquire loads of `settle`.
    STATE[cpu].store(ONLINE, Ordering::Release);
    drop(irq);
}

/// The arch code's `on_saved`: the CPU's state is saved; from now on it
/// may be restarted.
extern "C" fn mark_off(cpu: usize) {
    OFFS.fetch_add(1, Ordering::Relaxed);
    // Release pairs with the Acquire of `restart`.
    STATE[cpu].store(OFF, Ordering::Release);
}

/// Boot CPU, thread context, after its `run` of a suite with churn: stops
/// the churn and brings every CPU back. Err if one did not come back in
/// time. Reports quiescent states while it waits (it is between two
/// suites' operations, in no read section).
pub fn settle() -> Result<(), &'static str> {
    if !ACTIVE.swap(false, Ordering::Relaxed) {
        return Ok(());
    }
    let cpus = CPUS.load(Ordering::Relaxed);
    let deadline = time::now() + time::ms_to_ticks(SETTLE_TIMEOUT_MS);
    for (cpu, state) in STATE.iter().enumerate().take(cpus).skip(1) {
        loop {
            match state.load(Ordering::Acquire) {
                ONLINE => break,
                REQUESTED => {
                    let _ = state.compare_exchange(
                        REQUESTED,
                        ONLINE,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                OFF => {
                    restart(cpu);
                }
                _ => {}
            }
            if time::now() > deadline {
                return Err("hotplug: a CPU did not come back online in time");
            }
            ksync::rcu::quiescent_state();
            core::hint::spin_loop();
        }
    }
    Ok(())
}

/// CPUs that went offline and came back since [`start`], and restarts the
/// arch code asked to retry.
pub fn events() -> (u64, u64, u64) {
    (
        OFFS.load(Ordering::Relaxed),
        ONS.load(Ordering::Relaxed),
        RETRIES.load(Ordering::Relaxed),
    )
}

/// Whether `cpu` is offline (on its way down, down, or not yet back).
pub fn is_offline(cpu: usize) -> bool {
    matches!(STATE[cpu].load(Ordering::Relaxed), GOING | OFF | STARTING)
}
