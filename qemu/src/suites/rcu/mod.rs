//! RCU torture, after Linux's rcutorture: writers publish element after
//! element through an [`RcuPtr`], retire the old ones in every way ksync
//! offers (waiting for grace periods, polled cookies, and `call_rcu`
//! callbacks), poison each old element once it may and later reuse it;
//! every CPU reads, in thread context and from its timer interrupt, and
//! checks that what it holds was not freed under it.
//!
//! # The pool
//!
//! Elements come from a static pool of [`POOL`](pool::POOL) (no allocator). Each
//! element embeds an [`RcuHead`] (Linux's `struct rcu_head`), so retiring
//! it through [`rcu::call_rcu`] needs no memory either: the callback
//! ([`retire`](pool::retire)) finds the element from its head (`container_of`) and the
//! pool from the element, poisons the element (*age* 2, every word
//! [`POISON`](pool::POISON)) and marks it free. Callbacks run in the kernel's timer
//! interrupts, in idle waits and in `rcu::barrier()`, on any CPU
//! (`kernel::rcu`), so everything they touch is atomic: the element's
//! words and the pool's free bitmap, which writers take elements from.
//!
//! # The writers
//!
//! Writers serialise on one writer lock while they publish. CPU 0 writes
//! all the time; each round it fills a free element (a new sequence number
//! in every word), publishes it, marks the element it replaced as removed
//! (age 1), and then, without the lock, retires it, at random:
//!
//! * `synchronize()`, after which every removed element may be freed;
//! * `start_poll()`: the removed element waits for its cookie to `poll()`
//!   complete;
//! * `get_state()`: likewise, but nothing starts a grace period until a
//!   later `cond_synchronize()` asks for one;
//! * `get_state()` and a `cond_synchronize()` on the oldest removed element;
//! * `call_rcu()` (two rounds in six): the callback frees it.
//!
//! Whenever the pool runs dry CPU 0 `cond_synchronize()`s on the oldest
//! element it removed or, when it has none, calls `rcu::barrier()` for the
//! callbacks. Every round, removed elements whose cookies completed are
//! freed. The other CPUs write too, now and then, from thread context and
//! from their timer interrupts: a round that only *tries* the writer lock
//! and retires through `call_rcu` (it never waits, so it is fine in an
//! interrupt handler), which puts callbacks on every CPU's list.
//!
//! Nobody waits for a grace period with the writer lock held: CPU 0 spins
//! on it without reporting quiescent states, so a holder waiting for a
//! grace period would wait for CPU 0, which waits for the holder.
//! Interrupt handlers take it too, yet it is no interrupt-saving lock: a
//! handler only tries, so it never spins on a lock its own CPU holds.
//!
//! At the end CPU 0 closes the writer side (no more `call_rcu`, as a
//! module does before unloading) and calls `rcu::barrier()`: every queued
//! callback must then have run, exactly once. Each element records whether
//! a callback is queued for it: queuing a queued one, or a callback
//! finding its element not queued (a second run), is counted as an error;
//! the totals of queued and run callbacks must match, and ksync must have
//! none pending.
//!
//! # The readers (every CPU but CPU 0; every CPU's interrupt)
//!
//! Under `read_lock()`: follow the pointer, check the words (not poisoned,
//! all carrying the element's sequence number), stretch the read section,
//! then read the element's age and check everything again. The age must be
//! 0 (current) or 1 (removed, grace period pending): 2 would mean a whole
//! grace period ended (or a callback ran) while this reader held it.
//! Readers record the ages they saw: the pipeline histogram. In QSBR an
//! interrupt handler's read section is covered by the code it interrupted,
//! which is not at a quiescent state (`kernel::rcu`); that is also why a
//! callback run by the timer interrupt cannot free what the interrupted
//! thread is reading.
//!
//! The readers report quiescent states only between read sections (each
//! `should_stop`), so every CPU holds up every grace period for no longer
//! than one read section.
//!
//! # Orderings
//!
//! The element words are Relaxed: RCU's publication (`RcuPtr`'s
//! Release/Acquire) orders a fill before readers, and the pool's free
//! bitmap (Release when freed, Acquire when taken) orders a poisoning
//! before the refill; a reader that sees a word change is the failure the
//! suite looks for. The statistics and the callback counters are Relaxed
//! too: the runner's barriers order them before `finish`, and ksync's
//! callback-list lock hands everything written before `call_rcu` to the
//! callback.
//!
//! # The controls
//!
//! * [`NoWaitRcu`] is ksync's RCU with a `synchronize()` that returns at
//!   once: the writer frees elements readers still hold.
//! * [`CallNowRcu`] is ksync's RCU with a `call_rcu()` that invokes the
//!   callback at once instead of after a grace period: the callbacks free
//!   elements readers still hold.

mod flavour;
mod pool;
mod torture;

pub use self::flavour::{CallNowRcu, KsyncRcu, NoWaitRcu};
pub use self::torture::RcuTorture;
use crate::harness::{Info, Kind, Suite};

/// This module's suites.
pub static SUITES: &[&dyn Suite] = &[&TEST, &CONTROL, &CONTROL_CALL_NOW];

/// The test: ksync's RCU.
pub static TEST: RcuTorture<KsyncRcu> =
    RcuTorture::new(Info::new("rcu", Kind::Test, 1000), KsyncRcu);
/// A control: `synchronize` returns at once.
pub static CONTROL: RcuTorture<NoWaitRcu> =
    // 4 s: a control ends when caught, and at riscv64 -smp 8 in scheduler
    // mode on a two-core host at a load of 18 one second missed it three
    // boots in a row.
    RcuTorture::new(Info::new("rcu-nowait", Kind::Control, 4000), NoWaitRcu);
/// A control: `call_rcu` runs the callback at once.
pub static CONTROL_CALL_NOW: RcuTorture<CallNowRcu> =
    RcuTorture::new(Info::new("rcu-callnow", Kind::Control, 1000), CallNowRcu);
