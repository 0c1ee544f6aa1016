//! Reader-writer spinlock torture: ksync's `RwSpinLock` algorithm
//! ([`RawRwSpinLock`], Linux's queued rwlock, `qrwlock`, through
//! `lock_api`, as `RwSpinLock<T, PreemptDisabled>` wraps it) under the rw lock suite of [`super::rwlock`]:
//! readers on every CPU, in thread context and from the timer interrupt,
//! writers now and then with interrupts off, the probe (`try_read()` while
//! another CPU holds the write lock must be refused), the three-word
//! invariant and the non-atomic version (see that module for the checks).
//!
//! # The interrupt-reader rule
//!
//! Here the timer interrupt's readers call `read()` and wait
//! ([`IrqRead::Wait`]), as Linux's `read_lock` in an interrupt handler
//! does: a qrwlock reader in interrupt context waits only while a writer
//! *holds* the lock, never behind a writer that waits for the readers to
//! drain. Thread-context readers hold the lock with interrupts on, so a
//! handler on a reader's CPU often finds a writer (on another CPU, with
//! interrupts off) waiting for that very reader: with the rule it gets
//! in; without it, it would queue behind the writer and wait for itself.
//! (With the rule taken out of `read_slow`, this suite hung in every TCG
//! configuration, every CPU stuck in its handler: the host's timeout
//! reports it.)
//!
//! # The control
//!
//! [`IrqBargeRwLock`] is ksync's lock with the rule widened by one step
//! too far: a reader in interrupt context walks in whatever the writer
//! bits say, a *holding* writer included (it takes nothing). Interrupt
//! readers on the other CPUs then read while a writer is inside, which the
//! checks must catch.

use ksync::lock_api::{self, GuardNoSend, RawRwLock};
use ksync::spinlock::{PreemptDisabled, RawRwSpinLock};

use super::rwlock::{Data, IrqRead, RwTorture};
use crate::harness::{Info, Kind, Suite};

/// The guard policy under test: preemption off while held (`read_lock`,
/// `write_lock`); the suite's writers and probe server add the interrupt
/// masking themselves (`write_lock_irqsave`).
type Raw = RawRwSpinLock<PreemptDisabled>;

/// This file's suites.
pub static SUITES: &[&dyn Suite] = &[&TORTURE, &CONTROL];

/// ksync's `RwSpinLock`, interrupt readers waiting.
pub static TORTURE: RwTorture<Raw> = RwTorture::with_irq_read(
    Info::new("rwspinlock", Kind::Test, 1000),
    lock_api::RwLock::const_new(Raw::new(), Data::new()),
    IrqRead::Wait,
);

/// The control: interrupt readers that ignore a holding writer.
pub static CONTROL: RwTorture<IrqBargeRwLock> = RwTorture::with_irq_read(
    Info::new("rwspinlock-irqbarge", Kind::Control, 1000),
    lock_api::RwLock::const_new(IrqBargeRwLock::new(), Data::new()),
    IrqRead::Wait,
);

/// The control's lock: ksync's [`RawRwSpinLock`] in thread context; in
/// interrupt context, readers enter without taking it.
pub struct IrqBargeRwLock {
    inner: Raw,
}

impl IrqBargeRwLock {
    const fn new() -> Self {
        Self { inner: Raw::new() }
    }
}

/// Whether this CPU runs an interrupt handler.
fn in_irq() -> bool {
    crate::kernel::irq::in_handler()
}

// SAFETY: deliberately NOT upheld: interrupt readers enter while a writer
// holds the lock. It only guards `Data`, whose words are atomics, in the
// control suite: the missing exclusion shows up in the checks, not as
// undefined behaviour. Thread-context readers and all writers are
// ksync's lock.
unsafe impl RawRwLock for IrqBargeRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = GuardNoSend;

    fn lock_shared(&self) {
        // The bug: in a handler, no look at the writer bits at all.
        if !in_irq() {
            self.inner.lock_shared();
        }
    }

    fn try_lock_shared(&self) -> bool {
        if in_irq() {
            self.lock_shared();
            true
        } else {
            self.inner.try_lock_shared()
        }
    }

    unsafe fn unlock_shared(&self) {
        if !in_irq() {
            // SAFETY: taken in thread context by `lock_shared` (a handler
            // runs and returns within the interrupted context's section,
            // so the context that unlocks is the one that locked).
            unsafe { self.inner.unlock_shared() };
        }
    }

    fn lock_exclusive(&self) {
        self.inner.lock_exclusive();
    }

    fn try_lock_exclusive(&self) -> bool {
        self.inner.try_lock_exclusive()
    }

    unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded: the caller holds it exclusive.
        unsafe { self.inner.unlock_exclusive() };
    }

    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }
}
