//! The *probe*: a check that a lock refuses a lockless or `try_` entry while
//! another CPU holds it, without relying on lucky timing.
//!
//! Checks that look for two CPUs overlapping inside a lock need two vCPUs
//! running at the same instant, which four vCPUs on a loaded two-core host
//! rarely provide. The probe arranges the overlap instead:
//!
//! 1. a *prober* ([`Probe::probe`]) announces it is ready;
//! 2. a *server* on another CPU ([`Probe::serve`], called by every CPU now
//!    and then) claims it, takes the lock and tells the prober so;
//! 3. the prober makes its attempt (a lockless `put_return`, a `try_read`),
//!    which must be refused, and answers;
//! 4. the server, still holding the lock, sees the answer and lets go.
//!
//! The prober spins on the probe word, not on the lock, so the lock is held
//! only while a committed prober answers. A prober that nobody serves gives
//! up after [`WAIT_US`]; once a server has claimed it, it waits for good.
//!
//! The word: 0 when idle, else a CPU index + 1 in the low bits (`CPU`) and
//! the state above (`STATE`): `READY` (the prober's), `CLAIMED` and
//! `LOCKED` (the server's), `ANSWERED` (the prober's again).

use core::cell::Cell;
use core::sync::atomic::{AtomicUsize, Ordering};

use ksync::spinlock::IrqState;

use crate::kernel::cpu::Counters;
use crate::kernel::time;

/// How long a prober waits for a server, in microseconds of guest time.
pub const WAIT_US: u64 = 200;

const READY: usize = 1 << 16;
const CLAIMED: usize = 2 << 16;
const LOCKED: usize = 3 << 16;
const ANSWERED: usize = 4 << 16;
/// The state bits of the word.
const STATE: usize = 7 << 16;
/// The CPU bits of the word.
const CPU: usize = 0xffff;

/// One probe handshake slot (one probe at a time) and its statistics.
pub struct Probe {
    word: AtomicUsize,
    /// Per CPU: probes it ran as the prober.
    done: Counters,
}

impl Probe {
    /// No probe running.
    pub const fn new() -> Self {
        Self {
            word: AtomicUsize::new(0),
            done: Counters::new(),
        }
    }

    /// Forgets any probe and the statistics (no CPU runs the suite).
    pub fn reset(&self) {
        // Relaxed: the runner's barriers order setup before every CPU's run.
        self.word.store(0, Ordering::Relaxed);
        self.done.reset();
    }

    /// Per CPU: the probes it ran as the prober.
    pub fn done(&self) -> &Counters {
        &self.done
    }

    /// The prober, on `cpu`, in thread context, outside any RCU read
    /// section: announces it is ready, waits a little for a server to take
    /// the lock, then runs `attempt`, which must find the lock held (and
    /// flag a failure if it got in). If nobody comes, `attempt` does not
    /// run.
    ///
    /// While it waits it reports RCU quiescent states: a server may have to
    /// wait for a grace period before it holds the lock (a gated rw lock's
    /// writer closing its gate), and that grace period waits for this CPU.
    pub fn probe(&self, cpu: usize, attempt: impl FnOnce()) {
        let me = cpu + 1;
        // The prober is "a CPU" for the whole handshake: in scheduler mode
        // a prober preempted after it announced itself would leave its
        // server spinning with the lock held and interrupts off, and the
        // threads that then run on the prober's CPU spinning on that lock
        // with preemption off: nobody would run the prober again.
        let _preempt = ksync::kernel::preempt_disable();
        // Relaxed: claiming the slot publishes nothing; the handshake below
        // orders what matters.
        if self
            .word
            .compare_exchange(0, me | READY, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another probe is on
        }
        let deadline = time::now() + time::hz() / 1_000_000 * WAIT_US;
        let mut spins = 0u32;
        loop {
            // Acquire pairs with the Release store of LOCKED in `serve`: we
            // see the lock taken, so our attempt must find it held.
            if self.word.load(Ordering::Acquire) & STATE == LOCKED {
                break;
            }
            spins = spins.wrapping_add(1);
            // Read the clock rarely (it is slow under TCG). Once a server
            // has claimed the probe, it is on its way: no giving up.
            // Relaxed: withdrawing publishes nothing.
            if spins.is_multiple_of(64)
                && time::now() > deadline
                && self
                    .word
                    .compare_exchange(me | READY, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return; // nobody came
            }
            // Waiting, outside any read section: a quiescent state (see
            // above).
            ksync::rcu::quiescent_state();
            core::hint::spin_loop();
        }
        attempt();
        // Release pairs with the server's Acquire wait for ANSWERED: had our
        // attempt got in, the server sees its effects while it still holds
        // the lock.
        self.word.store(me | ANSWERED, Ordering::Release);
        self.done.add(cpu, 1);
    }

    /// The server, on `cpu`, in thread context, each iteration: if another
    /// CPU is ready for a probe, claims it and, with local interrupts off
    /// (the prober waits for us, and interrupt handlers may take the lock),
    /// runs `hold`. `hold` takes the lock, calls the handshake it is given
    /// exactly once while it holds the lock (it tells the prober and waits
    /// for its answer), may check the protected state did not move, and
    /// lets go.
    ///
    /// # Panics
    /// If `hold` returns without calling the handshake.
    pub fn serve(&self, cpu: usize, hold: impl FnOnce(&dyn Fn())) {
        // Relaxed: a hint; the claim below decides.
        let ready = self.word.load(Ordering::Relaxed);
        if ready & STATE != READY || ready & CPU == cpu + 1 {
            return;
        }
        let me = cpu + 1;
        let _irq = IrqState::save();
        // Relaxed: the Release/Acquire pair of the handshake orders the
        // lock and the attempt; the claim only picks one server.
        if self
            .word
            .compare_exchange(ready, me | CLAIMED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // the prober gave up, or another CPU serves it
        }
        let handed_over = Cell::new(false);
        hold(&|| {
            // Release pairs with the prober's Acquire wait for LOCKED.
            self.word.store(me | LOCKED, Ordering::Release);
            // Acquire pairs with the prober's Release store of ANSWERED.
            while self.word.load(Ordering::Acquire) & STATE != ANSWERED {
                core::hint::spin_loop();
            }
            handed_over.set(true);
        });
        assert!(handed_over.get(), "a probe server did not hand over");
        // Relaxed: the next prober and server meet through the word and the
        // lock again.
        self.word.store(0, Ordering::Relaxed);
    }
}
