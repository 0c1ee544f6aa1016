//! Host tests of `SeqCount` and `SeqLock`: writers keep an invariant across
//! several words, readers on other threads must never see it broken.
//!
//! Miri runs them too (`cargo +nightly miri test --test seqlock`), with
//! smaller counts: every access to the protected data must be free of data
//! races and of uninitialised-byte loads.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use ksync::seqlock::{SeqCount, SeqData, SeqLock};
use ksync::spinlock::TicketMutex;

/// Writes per writer thread.
const WRITES: u64 = if cfg!(miri) { 40 } else { 20_000 };
/// Writes per writer thread where two writers take turns on the ticket lock
/// (a hand-off to a preempted waiter costs a time slice on a loaded host).
const SHARED_WRITES: u64 = if cfg!(miri) { 20 } else { 2_000 };

/// Waits until `n` threads have arrived at `gate` (so writers start only
/// once readers are running: on a loaded host they might otherwise finish
/// before any reader was scheduled).
fn wait_for(gate: &AtomicUsize, n: usize) {
    while gate.load(SeqCst) < n {
        thread::yield_now();
    }
}

/// A user type: `x` and its complement, which readers check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
struct Pair {
    x: u64,
    not_x: u64,
}

const _: () = assert!(size_of::<Pair>() == 8 + 8);
// SAFETY: `#[repr(C)]`, two `u64`s whose sizes add up to the struct's
// (asserted above): no padding, no pointers, every bit pattern valid.
unsafe impl SeqData for Pair {}

/// Two writers (one with `write`, one with `write_irqsave`) bump
/// `[k, k, k, k]`; two readers (`read`, and `read_with`/`try_read`/
/// `read_at` in turn) check that all four words agree and that `k` never
/// goes backwards.
#[test]
fn readers_never_see_torn_words() {
    let lock = SeqLock::new([0u64; 4]);
    let writers_done = AtomicUsize::new(0);
    let readers = AtomicUsize::new(0);
    let reads = AtomicU64::new(0);
    thread::scope(|s| {
        for w in 0..2 {
            let (lock, writers_done, readers) = (&lock, &writers_done, &readers);
            s.spawn(move || {
                wait_for(readers, 2);
                for _ in 0..SHARED_WRITES {
                    let mut g = if w == 0 {
                        lock.write()
                    } else {
                        lock.write_irqsave()
                    };
                    let k = g[0] + 1;
                    // One word at a time, so a torn copy would show.
                    for word in g.iter_mut() {
                        *word = k;
                    }
                }
                writers_done.fetch_add(1, SeqCst);
            });
        }
        for r in 0..2 {
            let (lock, writers_done, reads, readers) = (&lock, &writers_done, &reads, &readers);
            s.spawn(move || {
                readers.fetch_add(1, SeqCst);
                let mut last = 0;
                let mut i = 0u64;
                while writers_done.load(SeqCst) < 2 {
                    let v = match (r, i % 3) {
                        (0, _) => lock.read(),
                        (_, 0) => lock.read_with(|v| *v),
                        (_, 1) => match lock.try_read() {
                            Some(v) => v,
                            None => continue,
                        },
                        _ => match lock.read_at(lock.read_begin()) {
                            Some(v) => v,
                            None => continue,
                        },
                    };
                    assert!(v.iter().all(|&w| w == v[0]), "torn read: {v:?}");
                    assert!(v[0] >= last, "went backwards: {} after {last}", v[0]);
                    last = v[0];
                    i += 1;
                }
                reads.fetch_add(i, Relaxed);
            });
        }
    });
    assert_eq!(lock.read(), [2 * SHARED_WRITES; 4]);
    assert!(reads.load(Relaxed) > 0);
}

/// A user `SeqData` struct: `not_x == !x` at every publication.
#[test]
fn user_struct_keeps_its_invariant() {
    let lock = SeqLock::new(Pair { x: 0, not_x: !0 });
    let stop = AtomicBool::new(false);
    let readers = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            wait_for(&readers, 2);
            for i in 1..=WRITES {
                if i % 2 == 0 {
                    lock.store(Pair { x: i, not_x: !i });
                } else {
                    let mut g = lock.write();
                    g.x = i;
                    g.not_x = !i;
                }
            }
            stop.store(true, SeqCst);
        });
        for _ in 0..2 {
            s.spawn(|| {
                readers.fetch_add(1, SeqCst);
                while !stop.load(SeqCst) {
                    let p = lock.read();
                    assert_eq!(p.not_x, !p.x, "torn: {p:?}");
                }
            });
        }
    });
    assert_eq!(
        lock.into_inner(),
        Pair {
            x: WRITES,
            not_x: !WRITES
        }
    );
}

/// A tuple without padding is `SeqData`: a pair whose halves must agree is
/// never seen torn.
#[test]
fn padding_free_tuple() {
    let lock = SeqLock::new((0u64, !0u64, 0u32, !0u32));
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=WRITES {
                lock.store((i, !i, i as u32, !(i as u32)));
            }
            stop.store(true, SeqCst);
        });
        s.spawn(|| {
            while !stop.load(SeqCst) {
                let (a, not_a, b, not_b) = lock.read();
                assert_eq!((not_a, not_b), (!a, !b), "torn tuple");
                assert_eq!(a as u32, b);
            }
        });
    });
    assert_eq!(lock.read().0, WRITES);
}

/// Sizes that are not a multiple of the word: the copy covers a zeroed
/// tail after `T`. `[u8; 13]` is two words on 64-bit targets (four on
/// 32-bit) with three (or three) tail bytes; `[bool; 3]` less than one.
#[test]
fn odd_sizes_are_copied_whole() {
    let bytes = SeqLock::new([0u8; 13]);
    let flags = SeqLock::new([false; 3]);
    let stop = AtomicBool::new(false);
    let readers = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            wait_for(&readers, 1);
            for i in 1..=WRITES {
                bytes.store([i as u8; 13]);
                let mut g = flags.write();
                *g = [!g[0]; 3];
            }
            stop.store(true, SeqCst);
        });
        s.spawn(|| {
            readers.fetch_add(1, SeqCst);
            while !stop.load(SeqCst) {
                let b = bytes.read();
                assert!(b.iter().all(|&x| x == b[0]), "torn: {b:?}");
                let f = flags.read();
                assert!(f.iter().all(|&x| x == f[0]), "torn: {f:?}");
            }
        });
    });
    assert_eq!(bytes.read(), [WRITES as u8; 13]);
}

/// `SeqCount` with an external lock serialising two writers; the data is
/// two atomics, `x` and `!x`, read through `SeqCount::read`.
#[test]
fn seqcount_with_external_lock() {
    let writers = TicketMutex::new(());
    let seq = SeqCount::new();
    let (x, not_x) = (AtomicU64::new(0), AtomicU64::new(!0));
    let done = AtomicUsize::new(0);
    let readers = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                wait_for(&readers, 2);
                for _ in 0..SHARED_WRITES {
                    let _w = writers.lock();
                    // SAFETY: `writers` is held by every writer of `seq`.
                    let _write = unsafe { seq.write() };
                    let v = x.load(Relaxed) + 1;
                    x.store(v, Relaxed);
                    not_x.store(!v, Relaxed);
                }
                done.fetch_add(1, SeqCst);
            });
        }
        for _ in 0..2 {
            s.spawn(|| {
                readers.fetch_add(1, SeqCst);
                let mut last = 0;
                while done.load(SeqCst) < 2 {
                    let (a, b) = seq.read(|| (x.load(Relaxed), not_x.load(Relaxed)));
                    assert_eq!(b, !a, "torn: ({a}, {b:#x})");
                    assert!(a >= last);
                    last = a;
                }
            });
        }
    });
    assert_eq!(x.load(Relaxed), 2 * SHARED_WRITES);
    assert_eq!(seq.sequence(), (4 * SHARED_WRITES) as u32);
}

/// The control for the tests above: the same data read without the retry
/// check does tear, so the tests can tell a broken seqlock. Gives up
/// (failing) after one second.
#[test]
#[cfg_attr(miri, ignore = "timing-based; Miri's scheduler is too coarse")]
fn unchecked_reads_do_tear() {
    let (x, not_x) = (AtomicU64::new(0), AtomicU64::new(!0));
    let stop = AtomicBool::new(false);
    let torn = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            let mut v = 0u64;
            while !stop.load(Relaxed) {
                v += 1;
                x.store(v, Relaxed);
                not_x.store(!v, Relaxed);
            }
        });
        s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline && torn.load(Relaxed) < 10 {
                for _ in 0..1000 {
                    let (a, b) = (x.load(Relaxed), not_x.load(Relaxed));
                    if b != !a {
                        torn.fetch_add(1, Relaxed);
                    }
                }
            }
            stop.store(true, Relaxed);
        });
    });
    assert!(
        torn.load(Relaxed) > 0,
        "no torn read seen without the check"
    );
}

#[test]
fn seqcount_protocol() {
    let seq = SeqCount::new();
    let start = seq.read_begin();
    assert_eq!(start, 0);
    assert!(!seq.read_retry(start));
    // SAFETY: single thread: the only writer.
    unsafe { seq.write_begin() };
    assert_eq!(seq.try_read_begin(), None, "odd while writing");
    assert!(seq.read_retry(start));
    // SAFETY: ends the write begun above.
    unsafe { seq.write_end() };
    assert_eq!(seq.try_read_begin(), Some(2));
    assert!(seq.read_retry(start), "a write happened since `start`");
    assert_eq!(format!("{seq:?}"), "SeqCount { seq: 2 }");
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "write_begin while a write is in progress")]
fn nested_write_begin_is_caught() {
    let seq = SeqCount::new();
    // SAFETY: deliberately broken (two writers): the debug check panics
    // before anything is read.
    unsafe {
        seq.write_begin();
        seq.write_begin();
    }
}

static STATIC_LOCK: SeqLock<[u64; 2]> = SeqLock::new([1, 2]);

#[test]
fn seqlock_api() {
    assert_eq!(STATIC_LOCK.read(), [1, 2]);

    let lock = SeqLock::new(Pair::default());
    {
        let mut g = lock.write();
        g.x = 5;
        // Not published yet: readers (even on this thread) see the old
        // value and do not wait for the write section.
        assert_eq!(lock.read(), Pair::default());
        assert_eq!(lock.try_read(), Some(Pair::default()));
        assert!(lock.try_write().is_none(), "the writers' lock is held");
        g.not_x = !5;
        assert_eq!(format!("{g:?}"), format!("{:?}", Pair { x: 5, not_x: !5 }));
    }
    assert_eq!(lock.read(), Pair { x: 5, not_x: !5 });

    let start = lock.read_begin();
    assert_eq!(lock.read_at(start), Some(Pair { x: 5, not_x: !5 }));
    assert_eq!(lock.read_at(start + 1), None, "odd: never a valid start");
    assert_eq!(lock.read_at(start + 2), None, "not the current sequence");
    assert!(!lock.read_retry(start));
    lock.try_write().unwrap().x = 6;
    assert!(lock.read_retry(start));
    assert_eq!(lock.read_at(start), None);
    assert_eq!(lock.read_with(|p| p.x), 6);

    let mut lock = lock;
    lock.get_mut().x = 7;
    assert_eq!(lock.read().x, 7);
    assert!(format!("{lock:?}").starts_with("SeqLock { data: Pair { x: 7"));

    let unit = SeqLock::new(());
    unit.store(());
    assert_eq!(unit.read(), ());
    assert_eq!(SeqLock::<char>::default().read(), '\0');
    let c = SeqLock::new('é');
    *c.write() = 'ß';
    assert_eq!(c.into_inner(), 'ß');
    let big = SeqLock::new(u128::MAX - 1);
    *big.write_irqsave() += 1;
    assert_eq!(big.read(), u128::MAX);
}

/// A writer holds the writers' spinlock, so it must not be preempted
/// (Linux's `write_seqlock` is `spin_lock`): a preempted writer leaves the
/// other writers of its CPU spinning on a lock whose holder cannot run, and
/// readers on the odd sequence. Every way to take the lock disables
/// preemption until the guard has published and unlocked.
#[test]
fn writers_run_with_preemption_disabled() {
    use ksync::host::{irqs_disabled, preempt_count};
    let lock = SeqLock::new(0u64);
    assert_eq!(preempt_count(), 0);
    {
        let mut w = lock.write();
        assert!(
            preempt_count() >= 1,
            "write(): preempt_count {}",
            preempt_count()
        );
        *w += 1;
    }
    assert_eq!(preempt_count(), 0);
    {
        let mut w = lock.try_write().unwrap();
        assert!(
            preempt_count() >= 1,
            "try_write(): preempt_count {}",
            preempt_count()
        );
        *w += 1;
    }
    assert_eq!(preempt_count(), 0);
    {
        let mut w = lock.write_irqsave();
        assert!(
            preempt_count() >= 1,
            "write_irqsave(): preempt_count {}",
            preempt_count()
        );
        assert!(irqs_disabled());
        *w += 1;
    }
    assert_eq!((preempt_count(), irqs_disabled()), (0, false));
    lock.store(4);
    assert_eq!(preempt_count(), 0);
    assert_eq!(lock.read(), 4);
}

/// The writers' policy is a type, as for `SpinLock`: `NoGuard` disables
/// nothing (the kernel keeps preemption off), `IrqDisabled` masks
/// interrupts for every write.
#[test]
fn writer_policies() {
    use ksync::host::{irqs_disabled, preempt_count};
    use ksync::spinlock::{IrqDisabled, NoGuard};
    static RAW: SeqLock<u64, NoGuard> = SeqLock::with_policy(0);
    static IRQ: SeqLock<u64, IrqDisabled> = SeqLock::with_policy(0);
    {
        let mut w = RAW.write();
        assert_eq!((preempt_count(), irqs_disabled()), (0, false));
        *w += 1;
    }
    {
        let mut w = IRQ.write();
        assert!(preempt_count() >= 1 && irqs_disabled());
        *w += 1;
        drop(w);
        let _again = IRQ.write_irqsave();
        assert!(preempt_count() >= 1 && irqs_disabled());
    }
    assert_eq!((preempt_count(), irqs_disabled()), (0, false));
    IRQ.store(5);
    assert!(IRQ.try_write().is_some());
    assert_eq!((RAW.read(), IRQ.read()), (1, 5));
    assert_eq!((preempt_count(), irqs_disabled()), (0, false));
    assert_eq!(SeqLock::<u8, NoGuard>::default().read(), 0);
}
