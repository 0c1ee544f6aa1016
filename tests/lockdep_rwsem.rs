//! lockdep and the rw semaphores (`RwSemaphore`, `PerCpuRwSemaphore`):
//! each is a lock class whose reads and writes are sleeping acquisitions
//! on the holder task's stack; reads are not recursive (a second read in
//! one task is reported, as Linux's rwsem read), and both sides take part
//! in order cycles with other locks. Run with
//! `cargo test --features test-hooks,lockdep --test lockdep_rwsem`.

#![cfg(all(feature = "lockdep", not(ksync_loom)))]

use std::thread;
use std::time::Duration;

use ksync::lock_api::RwLockWriteGuard;
use ksync::lock_class;
use ksync::lockdep;
use ksync::mutex::{Mutex, RawMutex};
use ksync::percpu_rwsem::{PerCpuRwSemaphore, RawPerCpuRwSemaphore};
use ksync::rwsem::{RawRwSemaphore, RwSemaphore};
use ksync::wait::might_sleep;

#[path = "common/lockdep_reports.rs"]
mod lockdep_reports;
use lockdep_reports::{no_report, one_report, start};

fn on_cpu(f: impl FnOnce() + Send) {
    thread::scope(|s| s.spawn(f).join().unwrap());
}

static MA: Mutex<u32> = Mutex::from_raw(RawMutex::with_class(lock_class!("rws-mutex-A")), 0);
static MC: Mutex<u32> = Mutex::from_raw(RawMutex::with_class(lock_class!("rws-mutex-C")), 0);
static MD: Mutex<u32> = Mutex::from_raw(RawMutex::with_class(lock_class!("rws-mutex-D")), 0);
static WB: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-B")), 0);
static RR: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-R")), 0);
static REC: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-rec")), 0);
static SL: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-sleep")), 0);
static TM: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-timed")), 0);
static DG: RwSemaphore<u32> =
    RwSemaphore::from_raw(RawRwSemaphore::with_class(lock_class!("rwsem-down")), 0);
static PW: PerCpuRwSemaphore<u32> =
    PerCpuRwSemaphore::from_raw(RawPerCpuRwSemaphore::with_class(lock_class!("pcpu-W")), 0);
static PR: PerCpuRwSemaphore<u32> =
    PerCpuRwSemaphore::from_raw(RawPerCpuRwSemaphore::with_class(lock_class!("pcpu-R")), 0);
static PREC: PerCpuRwSemaphore<u32> =
    PerCpuRwSemaphore::from_raw(RawPerCpuRwSemaphore::with_class(lock_class!("pcpu-rec")), 0);

fn migrate() {
    let free = (0..ksync::kernel::MAX_CPUS)
        .rev()
        .find(|&c| c != ksync::kernel::cpu_id())
        .unwrap();
    ksync::host::migrate_to(free);
}

#[test]
fn mutex_then_rwsem_write_against_the_other_order_is_a_cycle() {
    let _s = start();
    on_cpu(|| {
        let _a = MA.lock();
        *WB.write() += 1;
    });
    no_report();
    on_cpu(|| {
        let _b = WB.write();
        *MA.lock() += 1;
    });
    let report = one_report();
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(
        report.contains("\"rws-mutex-A\"") && report.contains("\"rwsem-B\""),
        "{report}"
    );
}

#[test]
fn rwsem_reads_take_part_in_cycles() {
    let _s = start();
    on_cpu(|| {
        let _r = RR.read();
        *MC.lock() += 1;
    });
    no_report();
    // A writer queued on RR behind the first task's read would block this
    // read while the first task waits for MC: a deadlock, reported.
    on_cpu(|| {
        let _c = MC.lock();
        let _r = RR.read();
    });
    let report = one_report();
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(report.contains("\"rwsem-R\""), "{report}");
}

#[test]
fn a_second_rwsem_read_in_one_task_is_recursion() {
    let _s = start();
    on_cpu(|| {
        let _outer = REC.read();
        let _inner = REC.read();
    });
    let report = one_report();
    assert!(report.contains("\"rwsem-rec\""), "{report}");
    assert!(report.to_lowercase().contains("recursi"), "{report}");
}

#[test]
fn an_rwsem_holder_may_sleep_and_migrate() {
    let _s = start();
    on_cpu(|| {
        let r = SL.read();
        might_sleep(); // a sleeping lock held: fine
        thread::sleep(Duration::from_millis(1));
        migrate();
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(r);
        assert_eq!(lockdep::held_lock_count(), 0);
        let w = SL.write();
        might_sleep();
        migrate();
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(w);
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    no_report();
}

#[test]
fn an_rwsem_timed_wait_that_gives_up_drops_its_record() {
    let _s = start();
    let w = TM.write();
    on_cpu(|| {
        assert!(TM.try_read_for(Duration::from_millis(2)).is_none());
        assert!(TM.try_write_for(Duration::from_millis(2)).is_none());
        assert!(TM.try_read().is_none());
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    drop(w);
    on_cpu(|| {
        let r = TM.try_read_for(Duration::from_millis(2)).unwrap();
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(r);
        let t = TM.try_write().unwrap();
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(t);
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    no_report();
}

#[test]
fn an_rwsem_downgrade_keeps_one_record_that_the_read_unlock_drops() {
    let _s = start();
    on_cpu(|| {
        let w = DG.write();
        assert_eq!(lockdep::held_lock_count(), 1);
        let r = RwLockWriteGuard::downgrade(w);
        assert_eq!(lockdep::held_lock_count(), 1);
        assert!(!DG.is_locked_exclusive());
        drop(r);
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    no_report();
}

#[test]
fn an_untracked_async_read_is_released_without_a_report() {
    let _s = start();
    on_cpu(|| {
        let mut fut = core::pin::pin!(ksync::rwsem::read_async(&DG));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let core::task::Poll::Ready(guard) = fut.as_mut().poll(&mut cx) else {
            panic!("uncontended async read pending");
        };
        assert_eq!(lockdep::held_lock_count(), 0);
        drop(guard);
    });
    no_report();
}

#[test]
fn mutex_then_percpu_rwsem_write_against_the_other_order_is_a_cycle() {
    let _s = start();
    on_cpu(|| {
        let _d = MD.lock();
        *PW.write() += 1;
    });
    no_report();
    on_cpu(|| {
        let _w = PW.write();
        *MD.lock() += 1;
    });
    let report = one_report();
    assert!(report.contains("circular locking dependency"), "{report}");
    assert!(report.contains("\"pcpu-W\""), "{report}");
}

#[test]
fn a_percpu_rwsem_reader_may_sleep_and_migrate_and_is_not_recursive() {
    let _s = start();
    on_cpu(|| {
        let r = PR.read();
        might_sleep();
        thread::sleep(Duration::from_millis(1));
        migrate();
        assert_eq!(lockdep::held_lock_count(), 1);
        drop(r);
        assert_eq!(lockdep::held_lock_count(), 0);
        let t = PR.try_read().unwrap();
        drop(t);
        assert_eq!(lockdep::held_lock_count(), 0);
    });
    no_report();
    on_cpu(|| {
        let _outer = PREC.read();
        let _inner = PREC.read();
    });
    let report = one_report();
    assert!(report.contains("\"pcpu-rec\""), "{report}");
}
