//! How this kernel's lock waiters behave: it is always a guest, usually
//! with more vCPUs than the host has cores (`-smp 4` or `8` on a two-core
//! CI runner), so it tells ksync that its CPUs may be descheduled while
//! they spin ([`ksync::kernel::set_vcpu_preemptible`]): the FIFO locks
//! (ticket lock, the lock inside `LockRef`, the queued lock) then hand off
//! by test-and-set with backoff instead of to a waiter whose vCPU thread
//! the host may not be running.
//!
//! The run's word `fifo` (see `harness::args`) turns that off for the whole
//! boot, to compare with strict FIFO hand-off; the `*-fifo` suites turn it
//! off for themselves ([`set_fifo_for_suite`]) so that the queue paths are
//! tested too, and put the boot's setting back in their `finish`
//! ([`restore`]).
//!
//! # Waiting
//!
//! ksync's waiters call a [`ksync::kernel::SpinWait`] after a bounded spin.
//! This kernel keeps ksync's default (keep spinning), because nothing a
//! guest can do there helped under TCG (measured, README.md "Measurements
//! and history"): every lock in the suites is waited for with interrupts
//! masked, where x86_64's `hlt` never wakes and `pause` only leaves the
//! translated code; on aarch64 `wfe` (with `sev` as the kick) measured
//! within the noise of spinning, and `wfi` hung the suites (a waiter inside
//! the timer handler sleeps for the tick that only its own return re-arms).
//! The `spinlock-halt` suites are the exception: they install [`HALTING`],
//! a wait that really halts until kicked, to test that the locks never
//! lose a wake-up.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::arch;
use crate::println;

/// The boot's setting: whether CPUs may be descheduled while they spin.
static BOOT_PREEMPTIBLE: AtomicBool = AtomicBool::new(true);

/// Sets the boot's mode (boot CPU, before the other CPUs start): preemptible
/// unless the run says `fifo`.
pub fn init(preemptible: bool) {
    // Relaxed: the other CPUs start after this (their start-up orders it),
    // and ksync's own setting is a waiting strategy, never exclusion.
    BOOT_PREEMPTIBLE.store(preemptible, Ordering::Relaxed);
    ksync::kernel::set_vcpu_preemptible(preemptible);
}

/// Prints the mode as a `KSYNC-SPIN` line.
pub fn report() {
    println!(
        "KSYNC-SPIN preemptible={} wait=spin",
        u8::from(ksync::kernel::vcpu_preemptible())
    );
}

/// Strict FIFO hand-off for one suite (boot CPU, in its `setup`, before
/// the other CPUs start it); [`restore`] undoes it.
pub fn set_fifo_for_suite() {
    ksync::kernel::set_vcpu_preemptible(false);
}

/// Back to the boot's setting (after a suite, with the other CPUs quiet).
pub fn restore() {
    ksync::kernel::set_vcpu_preemptible(BOOT_PREEMPTIBLE.load(Ordering::Relaxed));
}

// ---- a halting wait, for the `spinlock-halt` suites ----------------------------

/// A [`SpinWait`](ksync::kernel::SpinWait) whose `wait` really halts the
/// CPU until it is kicked (the `spinlock-halt` suites install it for their
/// run; everything else keeps the spinning default, see above).
///
/// The latch is a per-CPU flag that every kick sets before it sends the
/// hardware wake-up ([`arch::kick_others`]): `wait` returns only when it
/// finds its flag set (and clears it), checked with interrupts off before
/// each [`arch::halt_until_event`], which returns at once if the wake-up
/// came after the check. So `wait` is latched as the contract asks, and it
/// returns only because of a kick, on every architecture: even where the
/// halt instruction does not sleep (`wfe` under TCG), a lost kick is a
/// waiter that never returns. Timer ticks wake the halt too; `wait` uses
/// them to give up after [`LOST_KICK_MS`] and report a lost wake-up
/// ([`halting_counts`]) instead of hanging; after the first, it no longer
/// halts, so that the run ends quickly and reports.
///
/// Called with interrupts off (a waiter inside an IRQ-saving lock), it
/// does not halt (x86_64's `hlt` would never wake, and opening interrupts
/// there would let a handler queue behind its own CPU): it returns at
/// once, a spurious return, which the contract allows.
pub static HALTING: ksync::kernel::SpinWait = ksync::kernel::SpinWait {
    wait: halt_wait,
    kick: Some(kick),
};

/// The control's policy: `wait` halts as [`HALTING`]'s does, but the kick
/// is dropped (it counts, and wakes nobody). Every waiter that halts then
/// stays halted until [`LOST_KICK_MS`] and reports a lost wake-up.
pub static DROPPED_KICK: ksync::kernel::SpinWait = ksync::kernel::SpinWait {
    wait: halt_wait,
    kick: Some(drop_kick),
};

/// What the suites put back after their run: keep spinning (ksync's
/// default on bare metal).
pub static SPINNING: ksync::kernel::SpinWait = ksync::kernel::SpinWait {
    wait: core::hint::spin_loop,
    kick: None,
};

/// How long a halted waiter waits for a kick before it reports a lost
/// wake-up: far longer than any critical section, even on a vCPU the host
/// deschedules (8 vCPUs on 2 cores under TCG), and well inside the
/// runner's watchdog grace.
pub const LOST_KICK_MS: u64 = 3000;

/// Per CPU: a kick came since this CPU's last return from `halt_wait`.
static KICKED: [AtomicBool; crate::kernel::cpu::MAX_CPUS] =
    [const { AtomicBool::new(false) }; crate::kernel::cpu::MAX_CPUS];
/// Halts that slept (no kick was waiting), kicks sent, lost wake-ups.
static HALTS: AtomicU64 = AtomicU64::new(0);
static KICKS: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);

fn halt_wait() {
    // After a lost wake-up, stop halting (a spurious return): the run is
    // failed already, and every later hand-off would cost a timeout too.
    if !arch::irq_enabled() || LOST.load(Ordering::Relaxed) != 0 {
        core::hint::spin_loop();
        return;
    }
    let cpu = crate::kernel::cpu::current();
    let give_up = crate::kernel::time::now() + crate::kernel::time::ms_to_ticks(LOST_KICK_MS);
    let mut slept = false;
    loop {
        arch::irq_disable();
        // Acquire pairs with the Release store in `kick`: what the kicker
        // wrote before it kicked is visible once we see the flag (and the
        // hardware wake-up is sent only after that store).
        if KICKED[cpu].swap(false, Ordering::Acquire) {
            break;
        }
        if crate::kernel::time::now() >= give_up {
            LOST.fetch_add(1, Ordering::Relaxed);
            break;
        }
        if !slept {
            slept = true;
            HALTS.fetch_add(1, Ordering::Relaxed);
        }
        arch::halt_until_event();
        arch::irq_enable();
    }
    arch::irq_enable();
}

fn kick() {
    KICKS.fetch_add(1, Ordering::Relaxed);
    for flag in &KICKED {
        // Release pairs with the Acquire swap in `halt_wait`.
        flag.store(true, Ordering::Release);
    }
    arch::kick_others();
}

fn drop_kick() {
    KICKS.fetch_add(1, Ordering::Relaxed);
}

/// `(halts, kicks, lost wake-ups)` since [`reset_halting`].
pub fn halting_counts() -> (u64, u64, u64) {
    (
        HALTS.load(Ordering::Relaxed),
        KICKS.load(Ordering::Relaxed),
        LOST.load(Ordering::Relaxed),
    )
}

/// Zeroes the counts and the latches (boot CPU, others quiet).
pub fn reset_halting() {
    for flag in &KICKED {
        flag.store(false, Ordering::Relaxed);
    }
    HALTS.store(0, Ordering::Relaxed);
    KICKS.store(0, Ordering::Relaxed);
    LOST.store(0, Ordering::Relaxed);
}
