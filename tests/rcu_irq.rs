//! RCU read sections interrupted by read sections of an interrupt handler
//! on the same CPU (issue 20's `rwlock-gated` panic): a POSIX signal sent
//! to the reading thread plays the interrupt (Linux only), so its handler
//! runs between any two instructions of the reader, as an interrupt
//! handler does. A section's begin and end each add to one of this CPU's
//! two counters; if an add were a load and a store, a handler section
//! between the two would have its begin overwritten while its end stays
//! counted, and the CPU would look one section short for good (the next
//! `quiescent_state` panics; `read_lock_held` says yes outside any
//! section).

// Under loom the crate is built for the models only.
#![cfg(all(not(ksync_loom), target_os = "linux"))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use ksync::rcu;

#[path = "common/signal.rs"]
mod posix_signal;

/// Handler runs (each one whole read section).
static IRQ_SECTIONS: AtomicUsize = AtomicUsize::new(0);
/// Handler runs that found this CPU inside a read section (the reader's).
static IRQ_INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Signals that arrived while this CPU had interrupts masked.
static MASKED: AtomicUsize = AtomicUsize::new(0);

/// The "interrupt handler": one read section, as an interrupt handler that
/// reads RCU-protected data runs one. Only this thread's per-CPU state and
/// atomics: async-signal-safe (the CPU is watched, so neither end reports
/// to the engine, which takes a lock).
extern "C" fn on_signal(_: libc::c_int) {
    // Interrupts "masked" (lockdep's bookkeeping, an IRQ-saving lock):
    // hardware would hold the interrupt pending; a signal cannot wait, so
    // this one is dropped. Running it there would break what masking
    // promises the interrupted code (seen: lockdep's held-lock stack
    // updated from both sides at once).
    if ksync::host::irqs_disabled() {
        MASKED.fetch_add(1, Relaxed);
        return;
    }
    ksync::host::enter_interrupt();
    if rcu::read_lock_held() {
        IRQ_INSIDE.fetch_add(1, Relaxed);
    }
    let guard = rcu::read_lock();
    core::hint::black_box(&guard);
    drop(guard);
    IRQ_SECTIONS.fetch_add(1, Relaxed);
    ksync::host::exit_interrupt();
}

#[test]
fn interrupt_sections_leave_the_counts_balanced() {
    rcu::cpu_online();
    let old = posix_signal::install(libc::SIGUSR2, on_signal);
    // SAFETY: `pthread_self` has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let done = AtomicBool::new(false);
    let mut rounds = 0u64;
    let mut short = None;
    thread::scope(|s| {
        // Stops the "interrupt controller" however this closure ends: a
        // panic in the loop below must fail the test, not leave the scope
        // waiting for a signaller that never sees `done`.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        let _done = Done(&done);
        // The "interrupt controller": uses no ksync, only signals us.
        s.spawn(|| {
            while !done.load(Relaxed) {
                // SAFETY: `me` runs until `done` (it joins this scope
                // first), and SIGUSR2 has our handler.
                unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
                thread::yield_now();
            }
        });
        // Enough handler sections inside the reader's sections that a
        // split add would be hit (a lost begin ends the loop; bounded:
        // 10 s).
        let start = Instant::now();
        while short.is_none()
            && IRQ_INSIDE.load(Relaxed) < 5_000
            && start.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..1_000 {
                let guard = rcu::read_lock();
                core::hint::black_box(&guard);
                drop(guard);
            }
            rounds += 1_000;
            // Outside any section: the counts must balance.
            if rcu::read_lock_held() {
                short = Some(rounds);
            }
        }
    });
    posix_signal::restore(libc::SIGUSR2, &old);
    let (sections, inside) = (IRQ_SECTIONS.load(Relaxed), IRQ_INSIDE.load(Relaxed));
    let masked = MASKED.load(Relaxed);
    println!(
        "{rounds} reader sections, {sections} handler sections, {inside} inside the reader's, {masked} masked"
    );
    assert!(
        short.is_none(),
        "the CPU looked inside a read section between sections (from round {short:?} on: a handler's begin was lost)"
    );
    assert!(
        inside > 0,
        "no handler ran inside a reader's section: the test saw nothing"
    );
    // Panics inside a read section.
    rcu::quiescent_state();
    rcu::cpu_offline();
}
