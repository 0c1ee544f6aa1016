//! Review of issue 38 (adversarial): `might_sleep` in debug builds, on the
//! uncontended path, for the sleeping entry points the fixed test does not
//! try (timed and exclusive forms) and in atomic contexts it does not try
//! (other spinlock kinds, RCU read sections). Each row is one context, one
//! entry point; every one must panic. Found: without `lockdep`, a spinlock
//! that masks with `ArchIrq` (`ArchIrqTicketMutex`) is not reported: ksync
//! counts `ArchIrq` masking only with `lockdep` (`masked_by_ksync`), and
//! debug builds without it ask only the kernel's `irqs_disabled` hook, which
//! the host kernel (and any kernel whose `ArchIrq` is the critical-section
//! fallback) answers false. With `--features lockdep` the sweep passes.

#![cfg(not(ksync_loom))]

use std::sync::atomic::AtomicU32;
use std::thread;
use std::time::Duration;

use ksync::completion::Completion;
use ksync::semaphore::Semaphore;
use ksync::wait::WaitQueue;

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

type Entry = fn();

fn entries() -> Vec<(&'static str, Entry)> {
    vec![
        ("Completion::wait_for_completion_timeout", || {
            let c = Completion::new();
            c.complete();
            let _ = c.wait_for_completion_timeout(Duration::from_secs(1));
        }),
        ("RwSemaphore::try_read_for", || {
            let s = ksync::rwsem::RwSemaphore::new(0);
            drop(s.try_read_for(Duration::from_secs(1)));
        }),
        ("RwSemaphore::try_write_for", || {
            let s = ksync::rwsem::RwSemaphore::new(0);
            drop(s.try_write_for(Duration::from_secs(1)));
        }),
        ("WaitQueue::wait_event_exclusive", || {
            WaitQueue::new().wait_event_exclusive(|| true)
        }),
        ("WaitQueue::wait_event_exclusive_timeout", || {
            let _ = WaitQueue::new().wait_event_exclusive_timeout(|| true, Duration::from_secs(1));
        }),
        ("Semaphore::down", || Semaphore::new(1).down()),
        ("Mutex::lock", || drop(ksync::mutex::Mutex::new(0).lock())),
    ]
}

type Ctx = fn() -> Box<dyn std::any::Any>;

fn contexts() -> Vec<(&'static str, Ctx)> {
    vec![
        ("rcu::read_lock", || Box::new(ksync::rcu::read_lock())),
        ("preempt_disable", || {
            Box::new(ksync::kernel::preempt_disable())
        }),
        ("TtasMutex held", || {
            static S: ksync::spinlock::TtasMutex<u32> = ksync::spinlock::TtasMutex::new(0);
            Box::new(S.lock())
        }),
        ("RwSpinLock read", || {
            static S: ksync::spinlock::RwSpinLock<u32> = ksync::spinlock::RwSpinLock::new(0);
            Box::new(S.read())
        }),
        ("RwSpinLock write", || {
            static S: ksync::spinlock::RwSpinLock<u32> = ksync::spinlock::RwSpinLock::new(0);
            Box::new(S.write())
        }),
        ("PerCpu::get", || {
            static P: ksync::percpu::PerCpu<AtomicU32> = ksync::percpu::PerCpu::new();
            Box::new(P.get())
        }),
        ("LockRef::lock", || {
            let l: &'static ksync::lockref::LockRef =
                Box::leak(Box::new(ksync::lockref::LockRef::new(1)));
            Box::new(l.lock())
        }),
        ("ArchIrqTicketMutex held", || {
            static S: ksync::spinlock::ArchIrqTicketMutex<u32> =
                ksync::spinlock::ArchIrqTicketMutex::new(0);
            Box::new(S.lock())
        }),
    ]
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the checks are debug builds'")]
fn every_sleeping_entry_reports_every_atomic_context() {
    let mut missed = Vec::new();
    for (cname, ctx) in contexts() {
        for (ename, entry) in entries() {
            let msg = thread::spawn(move || {
                let guard = ctx();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(entry));
                drop(guard);
                match r {
                    Ok(()) => String::new(),
                    Err(p) => panic_text(&p),
                }
            })
            .join()
            .unwrap_or_else(|p| format!("(the thread itself failed: {})", panic_text(&p)));
            if msg.is_empty() {
                missed.push(format!("{ename} in {cname}"));
            }
        }
    }
    assert!(
        missed.is_empty(),
        "REVIEW38: no might_sleep report for: {missed:?}"
    );
}
