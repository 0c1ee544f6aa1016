//! ksync's `defmt::Format` impls, printed for the runner to decode and
//! compare (`KSYNC-MCU format=NAME <the value>`), and a one-CPU RCU run
//! whose stall report ksync logs itself through `Kernel::rcu_stall`.
//!
//! The values are fixed so the runner knows the exact text to expect.

use ksync::rcu::{self, srcu::Srcu};
use ksync::spinlock::{RawTicketLock, RawTtasLock};
use ksync::{LockRef, lockref};

/// The stall bound and the clock value of the check that reports it.
const STALL_TIMEOUT: u64 = 100;
const STALL_NOW: u64 = 150;

static SRCU: Srcu = Srcu::new();

/// Prints every `Format` impl with a known value; `false` if a value was
/// not the one the runner will expect.
pub fn print_all() -> bool {
    let mut ok = true;

    let lockref = LockRef::new(3);
    defmt::info!("KSYNC-MCU format=lockref {}", lockref);
    {
        let guard = lockref.lock();
        defmt::info!("KSYNC-MCU format=lockref-guard {}", guard);
    }

    // Two lock/unlock rounds, then held: owner 2, next 3.
    let ticket = RawTicketLock::new();
    for _ in 0..2 {
        ticket.lock();
        // SAFETY: locked on the line above, by this context.
        unsafe { ticket.unlock() };
    }
    ticket.lock();
    defmt::info!("KSYNC-MCU format=ticket-held {}", ticket);
    // SAFETY: locked just above, by this context.
    unsafe { ticket.unlock() };
    defmt::info!("KSYNC-MCU format=ticket-free {}", ticket);

    let ttas = RawTtasLock::new();
    ok &= ttas.try_lock();
    defmt::info!("KSYNC-MCU format=ttas-held {}", ttas);
    // SAFETY: `try_lock` succeeded just above.
    unsafe { ttas.unlock() };
    defmt::info!("KSYNC-MCU format=ttas-free {}", ttas);

    defmt::info!("KSYNC-MCU format=lockref-stats {}", lockref::stats());
    defmt::info!("KSYNC-MCU format=srcu-cookie {}", SRCU.get_state());
    ok
}

/// One CPU through a grace period: a cookie, a stall (reported by ksync's
/// default `rcu_stall` hook with `defmt::warn!`, and returned), then the
/// grace period completed by this CPU's own quiescent states.
pub fn rcu_check() -> bool {
    rcu::cpu_online();
    let before = rcu::get_state();
    defmt::info!("KSYNC-MCU format=rcu-cookie {}", before);
    rcu::set_stall_timeout(STALL_TIMEOUT);
    let cookie = rcu::start_poll();
    let first_sight = rcu::check_stall(0);
    let report = rcu::check_stall(STALL_NOW);
    if let Some(report) = &report {
        defmt::info!("KSYNC-MCU format=stall-report {}", report);
    }
    let pending = !rcu::poll(cookie);
    rcu::cond_synchronize(cookie);
    let done = rcu::poll(cookie) && rcu::poll(before);
    rcu::set_stall_timeout(0);
    let why = if first_sight.is_some() {
        Some("a stall reported at first sight")
    } else if !report.is_some_and(|r| r.names(0) && r.age() == STALL_NOW) {
        Some("no stall report naming CPU 0")
    } else if !pending {
        Some("the grace period ended without a quiescent state")
    } else if !done {
        Some("the grace period did not complete")
    } else if rcu::stall_count() != 1 {
        Some("stall_count != 1")
    } else {
        None
    };
    defmt::info!(
        "KSYNC-MCU check=rcu result={=str} why={=str}",
        if why.is_none() { "PASS" } else { "FAIL" },
        why.unwrap_or("-")
    );
    why.is_none()
}
