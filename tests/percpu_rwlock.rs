//! Host tests of the scalable reader-writer lock and of brlock (threads play
//! CPUs through the `test-hooks` kernel hooks).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

mod common;

use ksync::brlock::BrLock;
use ksync::percpu_rwlock::{PerCpuRwLock, RawPerCpuRwLock};

const THREADS: usize = 4;

/// Readers and writers mixed; a writer-active flag and a reader count must
/// never be seen together, and the protected pair must stay consistent.
#[test]
fn rwlock_excludes() {
    let lock = PerCpuRwLock::new((0u64, 0u64));
    let iters = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    common::check_rwlock_exclusion(&lock, THREADS, iters, 16, false);
}

/// A writer arriving while readers hold the lock waits for them, and
/// readers arriving while it waits or holds wait for it.
#[test]
fn writer_waits_for_readers_and_blocks_new_ones() {
    let lock = PerCpuRwLock::new(0u32);
    let reader = lock.read();
    thread::scope(|s| {
        let w = s.spawn(|| {
            *lock.write() = 7;
        });
        thread::sleep(Duration::from_millis(20));
        assert!(!w.is_finished(), "writer entered with a reader inside");
        assert!(lock.raw_is_write_locked_hint());
        // A new reader on another thread cannot enter now.
        let r = s.spawn(|| *lock.read());
        thread::sleep(Duration::from_millis(20));
        assert!(!r.is_finished(), "reader entered while a writer waits");
        assert!(lock.try_read().is_none());
        drop(reader);
        w.join().unwrap();
        assert_eq!(r.join().unwrap(), 7);
    });
}

trait Hint {
    fn raw_is_write_locked_hint(&self) -> bool;
}
impl<T> Hint for PerCpuRwLock<T> {
    fn raw_is_write_locked_hint(&self) -> bool {
        // SAFETY: only reads a snapshot.
        unsafe { self.raw() }.is_write_locked()
    }
}

#[test]
fn try_variants() {
    let lock = PerCpuRwLock::new(1);
    {
        let r = lock.try_read().expect("free");
        assert!(lock.try_write().is_none(), "try_write with a reader inside");
        assert_eq!(*r, 1);
    }
    {
        let w = lock.try_write().expect("free");
        assert!(lock.try_write().is_none());
        assert!(lock.try_read().is_none());
        drop(w);
    }
    assert!(lock.try_read().is_some());
    let raw = RawPerCpuRwLock::new();
    assert!(!raw.is_locked());
    raw.read();
    assert!(raw.is_locked());
    assert!(!raw.try_write());
    // SAFETY: locked just above.
    unsafe { raw.unlock_read() };
    assert!(raw.try_write());
    assert!(raw.is_write_locked());
    // SAFETY: locked just above.
    unsafe { raw.unlock_write() };
    assert!(!raw.is_locked());
}

#[test]
fn brlock_local_and_global_exclude() {
    let lock: BrLock<u64> = BrLock::new();
    let global_in = AtomicBool::new(false);
    let iters = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..THREADS {
            let (lock, global_in) = (&lock, &global_in);
            s.spawn(move || {
                for i in 0..iters {
                    if (i + t) % 512 == 0 {
                        let mut g = lock.global_lock();
                        assert!(!global_in.swap(true, SeqCst), "two global holders");
                        let n = g.iter_mut().count();
                        assert_eq!(n, ksync::kernel::nr_cpus());
                        global_in.store(false, SeqCst);
                    } else {
                        let mut g = lock.local_lock();
                        assert!(!global_in.load(SeqCst), "local with a global holder");
                        *g += 1;
                    }
                }
            });
        }
    });
    let locals = (0..THREADS)
        .map(|t| (0..iters).filter(|i| (i + t) % 512 != 0).count())
        .sum::<usize>();
    let total: u64 = lock.global_lock().iter_mut().map(|n| *n).sum();
    assert_eq!(total as usize, locals);
    let _ = start;
}

#[test]
fn brlock_irqsave_and_cpu_lock() {
    let lock: BrLock<u32> = BrLock::new();
    {
        let mut g = lock.local_lock_irqsave();
        *g += 1;
    }
    {
        let mut g = lock.global_lock_irqsave();
        let sum: u32 = g.iter_mut().map(|n| *n).sum();
        assert_eq!(sum, 1);
    }
    // Another CPU's slot: this thread's own id depends on which other
    // tests hold ids right now, and its slot already holds the 1.
    let other = (ksync::kernel::cpu_id() + 1) % ksync::kernel::nr_cpus();
    *lock.cpu_lock(other) += 5;
    assert_eq!(*lock.global_lock().cpu_mut(other), 5);
    let nr = ksync::kernel::nr_cpus();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(lock.cpu_lock(nr))))
        .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains(&nr.to_string()) && msg.contains("out of range"),
        "{msg}"
    );
}
