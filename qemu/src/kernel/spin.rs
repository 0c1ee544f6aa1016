//! How this kernel's lock waiters behave. It is always a guest, usually
//! with more vCPUs than the host has cores (`-smp 4` or `8` on a two-core
//! CI runner), and it does *not* tell ksync so: it keeps ksync's default
//! ([`ksync::kernel::vcpu_mode`]), as a kernel that knows nothing about
//! oversubscription would. On x86_64 that is CPUID's hypervisor bit
//! (test-and-set hand-off from the start); on aarch64 and riscv64 it is
//! FIFO *watching*: the first FIFO waiter that sees no hand-off for
//! [`ksync::kernel::STALL_BOUND_MS`] switches the ticket lock, lockref's
//! lock and the queued lock to test-and-set hand-off, and the hook
//! registered here records when ([`report`] prints it).
//!
//! The run's words (see `harness::args`) force a mode for the whole boot,
//! to compare with the default: `fifo` (strict FIFO, never switched),
//! `preempt` (test-and-set from the start), `watch` (FIFO watching, even
//! on x86_64). The `*-fifo` suites turn strict FIFO on for themselves
//! ([`set_fifo_for_suite`]) so that the queue paths are tested too, and
//! put the mode they found back in their `finish` ([`restore`]).
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

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use ksync::kernel::{self as ksync_kernel, VcpuMode, VcpuStall};

use crate::arch;
use crate::println;

/// The mode a suite found in its `setup` ([`save`]), put back by
/// [`restore`]: a `VcpuMode` as [`encode`] writes it.
static SAVED: AtomicU8 = AtomicU8::new(NONE);
const NONE: u8 = 0;

/// When a stall switched the mode (counter ticks; 0: it did not), and the
/// report.
static STALL_AT: AtomicU64 = AtomicU64::new(0);

fn encode(mode: VcpuMode) -> u8 {
    match mode {
        VcpuMode::Fifo => 1,
        VcpuMode::FifoWatching => 2,
        _ => 3,
    }
}

fn decode(mode: u8) -> Option<VcpuMode> {
    match mode {
        1 => Some(VcpuMode::Fifo),
        2 => Some(VcpuMode::FifoWatching),
        3 => Some(VcpuMode::Preemptible),
        _ => None,
    }
}

fn name(mode: VcpuMode) -> &'static str {
    match mode {
        VcpuMode::Fifo => "fifo",
        VcpuMode::FifoWatching => "watching",
        _ => "preemptible",
    }
}

/// The stall hook: runs inside a lock wait, so it only records the time
/// (printing would take the console's lock); ksync keeps the report.
fn stalled(_stall: &VcpuStall) {
    // Relaxed: read after the suites, ordered by the runner's barriers.
    STALL_AT.store(crate::kernel::time::now().max(1), Ordering::Relaxed);
}

/// Boot CPU, before the other CPUs start and before any lock is taken:
/// registers the stall hook and leaves the mode to ksync's default.
pub fn init() {
    ksync_kernel::set_vcpu_stall_hook(stalled);
}

/// Where the stall watch's clock rate came from ([`init_clock`]): 0 not
/// yet resolved, [`RATE_KSYNC`] ksync found it, [`RATE_STATED`] this
/// kernel stated it.
static RATE_FROM: AtomicU8 = AtomicU8::new(0);
const RATE_KSYNC: u8 = 1;
const RATE_STATED: u8 = 2;

/// Boot CPU, after `arch::init_platform` (which learns the counter's
/// rate) and before the other CPUs start: gives ksync's FIFO stall watch
/// the rate of the counter it reads (the same counter as [`time::now`]:
/// TSC, `CNTVCT_EL0`, `time`), as README.md asks of a kernel, so that its
/// bound is [`ksync::kernel::STALL_BOUND_MS`] of real time and not
/// [`ksync::kernel::STALL_BOUND_ROUNDS`] spin rounds. Rounds only pass
/// while the waiting vCPU runs: with 8 vCPUs on a loaded two-core host a
/// waiter counted 2^22 rounds in about 20 s of strict FIFO hand-offs (the
/// riscv64 `-smp 8` bench boots, which ran out of their budget).
///
/// * riscv64: ksync knows no rate; stated from the device tree's
///   `timebase-frequency` (`arch::counter_hz`), / 1000.
/// * x86_64: ksync reads CPUID leaves 0x15/0x16 (and a hypervisor's
///   0x40000010); QEMU's `qemu64` model has none of them, so the TSC rate
///   this kernel calibrated against the PIT is stated.
/// * aarch64: ksync reads `CNTFRQ_EL0`, which is the rate this kernel
///   uses too ([`time::hz`]): nothing to state unless firmware left it 0.
///
/// [`time::now`]: crate::kernel::time::now
/// [`time::hz`]: crate::kernel::time::hz
pub fn init_clock() {
    let from = if ksync_kernel::stall_clock_rate().is_some() {
        RATE_KSYNC
    } else {
        ksync_kernel::set_stall_clock_rate(crate::kernel::time::hz() / 1000);
        RATE_STATED
    };
    // Relaxed: written before the other CPUs start, read by the boot CPU.
    RATE_FROM.store(from, Ordering::Relaxed);
}

/// The stall watch's clock as `KSYNC-SPIN` fields: `stall_rate` (ticks
/// per ms, or `rounds`) and `stall_rate_from` (`kernel`: stated by
/// [`init_clock`], `ksync`: the architecture's, `none`).
struct ClockFields;

impl core::fmt::Display for ClockFields {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let from = match RATE_FROM.load(Ordering::Relaxed) {
            RATE_KSYNC => "ksync",
            RATE_STATED => "kernel",
            _ => "none",
        };
        match ksync_kernel::stall_clock_rate() {
            Some(rate) => write!(f, "stall_rate={rate} stall_rate_from={from}"),
            None => write!(f, "stall_rate=rounds stall_rate_from={from}"),
        }
    }
}

/// Forces `mode` for the whole boot (the run's `fifo`, `preempt` and
/// `watch` words; boot CPU, before the other CPUs start).
pub fn force(mode: VcpuMode) {
    ksync_kernel::set_vcpu_mode(mode);
}

/// Prints the mode as a `KSYNC-SPIN` line: `mode` (`fifo`, `watching`,
/// `preemptible`), `preemptible` (0/1), and when a stall switched it, the
/// stall (`stall_ms`: when, after boot; `stall_lock`, `stall_waited`,
/// `stall_bound`: ksync's report, in counter ticks).
pub fn report() {
    let mode = ksync_kernel::vcpu_mode();
    let at = STALL_AT.load(Ordering::Relaxed);
    match ksync_kernel::vcpu_stall() {
        Some(stall) => println!(
            "KSYNC-SPIN mode={} preemptible={} wait=spin {} stall_ms={} stall_lock=\"{}\" stall_waited={} stall_bound={} stall_unit={}",
            name(mode),
            u8::from(ksync_kernel::vcpu_preemptible()),
            ClockFields,
            crate::kernel::time::ticks_to_ms(at),
            stall.lock,
            stall.waited,
            stall.bound,
            if stall.ticks { "ticks" } else { "rounds" },
        ),
        None => println!(
            "KSYNC-SPIN mode={} preemptible={} wait=spin {}",
            name(mode),
            u8::from(ksync_kernel::vcpu_preemptible()),
            ClockFields,
        ),
    }
}

/// The mode now, as the `spin` field of a `KSYNC-RESULT` line: `fifo`,
/// `watching`, `preemptible`, or `detected` (preemptible because a stall
/// switched it).
pub fn mode_word() -> &'static str {
    match ksync_kernel::vcpu_mode() {
        VcpuMode::Preemptible if ksync_kernel::vcpu_stall().is_some() => "detected",
        mode => name(mode),
    }
}

/// Remembers the mode, for [`restore`] (a suite's `setup`, boot CPU).
pub fn save() {
    // Relaxed: the boot CPU's own variable.
    SAVED.store(encode(ksync_kernel::vcpu_mode()), Ordering::Relaxed);
}

/// Strict FIFO hand-off for one suite (boot CPU, in its `setup`, before
/// the other CPUs start it); [`restore`] undoes it.
pub fn set_fifo_for_suite() {
    save();
    ksync_kernel::set_vcpu_preemptible(false);
}

/// Back to the mode [`save`] found (after a suite, with the other CPUs
/// quiet).
pub fn restore() {
    if let Some(mode) = decode(SAVED.swap(NONE, Ordering::Relaxed)) {
        ksync_kernel::set_vcpu_mode(mode);
    }
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
