//! The lockref and spinlock models shared by `tests/loom.rs` (strict FIFO
//! hand-off) and `tests/loom_preemptible.rs` (test-and-set hand-off, the
//! mode for CPUs that may be descheduled while spinning). Each test binary
//! sets one mode for all of its models (the mode is process-wide).

/// Puts the process in the binary's mode before a model runs.
fn mode() {
    ksync::kernel::set_vcpu_preemptible(super::PREEMPTIBLE);
}

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use ksync::LockRef;
use ksync::lockref::DEAD;
use ksync::spinlock::{RawTicketLock, RawTtasLock};

#[path = "outcomes.rs"]
mod outcomes;
use outcomes::Outcomes;

/// Drops a reference the caller holds: lockless, or under the lock by hand
/// when `put_return` gives up. Returns whether the count reached zero.
fn put(lr: &LockRef) -> bool {
    match lr.put_return() {
        Some(count) => count == 0,
        None => match lr.put_or_lock() {
            None => false,
            Some(mut guard) => {
                let count = guard.count();
                assert_eq!(count, 1, "a held reference was not counted");
                guard.set_count(0);
                true
            }
        },
    }
}

/// (a) A lockless get + put races a lock holder that changes the count:
/// the holder sees the count stable under the lock, and no update is lost.
#[test]
fn lockless_get_put_vs_lock_holder() {
    mode();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let lr = Arc::new(LockRef::new(1));
        let holder = {
            let lr = Arc::clone(&lr);
            let seen = seen.clone();
            thread::spawn(move || {
                let mut guard = lr.lock();
                let count = guard.count();
                assert!(count == 1 || count == 2, "count {count}");
                seen.record(count as usize - 1);
                // Nobody else changes it while the lock is held.
                assert_eq!(lr.count(), count);
                guard.set_count(count + 10);
                assert_eq!(guard.count(), count + 10);
                assert_eq!(lr.count(), count + 10);
            })
        };
        let user = {
            let lr = Arc::clone(&lr);
            thread::spawn(move || {
                lr.get();
                assert!(!put(&lr), "the base reference is still held");
            })
        };
        holder.join().unwrap();
        user.join().unwrap();
        assert_eq!(lr.count(), 11);
        // Lock free at the end.
        assert_eq!(lr.put_return(), Some(10));
    });
    // The holder locked both before/after and during the user's reference.
    outcomes.assert_all_seen(2);
}

/// (b) The only holder drops its reference with `put_or_lock` while
/// `getters` threads try `get_not_dead`. Either a getter wins (the putter's
/// drop is a plain decrement and a later drop kills the object), or the
/// putter gets the lock at count one, kills the object, and `get_not_dead`
/// fails. The object is read only while referenced and torn down (written)
/// only by the killer: loom reports any missing ordering, and exactly one
/// drop kills.
fn dead_race(getters: usize, max_preemptions: usize) {
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(
        builder
            .preemption_bound
            .map_or(max_preemptions, |b| b.min(max_preemptions)),
    );
    builder.check(move || {
        let obj = Arc::new((LockRef::new(1), UnsafeCell::new(0u32)));

        // Drops one reference; the one that finds the count at one tears
        // the object down. Returns whether this call killed it.
        fn drop_ref(obj: &(LockRef, UnsafeCell<u32>)) -> bool {
            match obj.0.put_or_lock() {
                None => false,
                Some(mut guard) => {
                    assert_eq!(guard.count(), 1);
                    guard.mark_dead();
                    // SAFETY: nobody else holds a reference, so nobody else
                    // accesses the object.
                    obj.1.with_mut(|p| unsafe { *p = 1 });
                    true
                }
            }
        }
        fn read(obj: &(LockRef, UnsafeCell<u32>)) -> u32 {
            // SAFETY: the caller holds a reference, so the object is not
            // being torn down.
            obj.1.with(|p| unsafe { *p })
        }

        // (got a reference, killed it)
        let getters: Vec<_> = (0..getters)
            .map(|_| {
                let obj = Arc::clone(&obj);
                thread::spawn(move || {
                    if obj.0.get_not_dead() {
                        assert_eq!(read(&obj), 0, "got a reference to a dead object");
                        (true, drop_ref(&obj))
                    } else {
                        assert!(obj.0.is_dead());
                        (false, false)
                    }
                })
            })
            .collect();
        let putter = {
            let obj = Arc::clone(&obj);
            thread::spawn(move || {
                assert_eq!(read(&obj), 0);
                drop_ref(&obj)
            })
        };
        let getters: Vec<(bool, bool)> = getters.into_iter().map(|g| g.join().unwrap()).collect();
        let putter_killed = putter.join().unwrap();

        let kills = getters.iter().filter(|g| g.1).count() + usize::from(putter_killed);
        assert_eq!(kills, 1, "exactly one drop kills");
        let got = getters.iter().filter(|g| g.0).count();
        // 0: every getter refused; 1..: that many got in; and whether the
        // putter or a getter killed.
        seen.record(if got == 0 {
            0
        } else if putter_killed {
            1
        } else {
            2
        });
        assert_eq!(obj.0.count(), DEAD);
        assert!(!obj.0.get_not_dead());
        assert_eq!(read(&obj), 1);
    });
    // Getters refused; a getter got in and the putter killed; a getter got
    // in and killed.
    outcomes.assert_all_seen(3);
}

/// (b) One getter.
#[test]
fn put_or_lock_to_dead_vs_get_not_dead() {
    mode();
    dead_race(1, 2);
}

/// (b) Two getters (preemption bound at most 1: see [`exclusion`]).
#[test]
fn put_or_lock_to_dead_vs_two_get_not_dead() {
    mode();
    dead_race(2, 1);
}

/// (e) Two holders each write their part of the object and drop their
/// reference with `put_return`; the one that gets `Some(0)` frees the
/// object, reading both parts: the other holder's write must
/// happen-before it.
#[test]
fn put_return_some_zero_orders_the_free() {
    mode();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let obj = Arc::new((
            LockRef::new(2),
            UnsafeCell::new(0u32),
            UnsafeCell::new(0u32),
        ));
        let free = |obj: &(LockRef, UnsafeCell<u32>, UnsafeCell<u32>)| {
            // SAFETY: the last reference is gone, so no
            // other thread accesses the object.
            let parts = obj.1.with(|a| obj.2.with(|b| unsafe { (*a, *b) }));
            assert_eq!(parts, (1, 2));
        };
        let holders: Vec<_> = [1, 2]
            .into_iter()
            .map(|part| {
                let obj = Arc::clone(&obj);
                thread::spawn(move || {
                    let cell = if part == 1 { &obj.1 } else { &obj.2 };
                    // SAFETY: only this thread writes its part, while it
                    // holds its reference.
                    cell.with_mut(|p| unsafe { *p = part });
                    let last = put(&obj.0);
                    if last {
                        free(&obj);
                    }
                    last
                })
            })
            .collect();
        let lasts: Vec<bool> = holders.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(lasts[0] != lasts[1], "exactly one drop reaches zero");
        seen.record(usize::from(lasts[1]));
        assert_eq!(obj.0.count(), 0);
    });
    outcomes.assert_all_seen(2);
}

/// (e, under the lock) One holder drops with `put_return`, the other with
/// `put_or_lock`; whoever drops the last reference frees the object:
/// either `put_return` gets `Some(0)` or `put_or_lock` hands over the lock
/// at count one and the count is set to zero under it. Either way the
/// other holder's write must happen-before the free.
#[test]
fn put_or_lock_free_under_the_lock_is_ordered() {
    mode();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let obj = Arc::new((
            LockRef::new(2),
            UnsafeCell::new(0u32),
            UnsafeCell::new(0u32),
        ));
        let free = |obj: &(LockRef, UnsafeCell<u32>, UnsafeCell<u32>)| {
            // SAFETY: the last reference is gone, so no other thread
            // accesses the object.
            let parts = obj.1.with(|a| obj.2.with(|b| unsafe { (*a, *b) }));
            assert_eq!(parts, (1, 2));
        };
        let with_return = {
            let obj = Arc::clone(&obj);
            thread::spawn(move || {
                // SAFETY: only this thread writes part 1, while it holds its
                // reference.
                obj.1.with_mut(|p| unsafe { *p = 1 });
                let last = put(&obj.0);
                if last {
                    free(&obj);
                }
                last
            })
        };
        let with_lock = {
            let obj = Arc::clone(&obj);
            thread::spawn(move || {
                // SAFETY: only this thread writes part 2, while it holds its
                // reference.
                obj.2.with_mut(|p| unsafe { *p = 2 });
                match obj.0.put_or_lock() {
                    None => false,
                    Some(mut guard) => {
                        assert_eq!(guard.count(), 1);
                        guard.set_count(0);
                        free(&obj);
                        true
                    }
                }
            })
        };
        let return_last = with_return.join().unwrap();
        let lock_last = with_lock.join().unwrap();
        assert!(return_last != lock_last, "exactly one drop reaches zero");
        seen.record(usize::from(lock_last));
        assert_eq!(obj.0.count(), 0);
    });
    outcomes.assert_all_seen(2);
}

/// `get_not_zero` succeeding on an object re-initialised under the lock
/// sees the initialisation (its success is Acquire).
#[test]
fn get_not_zero_sees_the_reinitialised_object() {
    mode();
    let outcomes = Outcomes::new();
    let seen = outcomes.clone();
    loom::model(move || {
        let obj = Arc::new((LockRef::new(0), UnsafeCell::new(0u32)));
        let init = {
            let obj = Arc::clone(&obj);
            thread::spawn(move || {
                let mut guard = obj.0.lock();
                // SAFETY: the count is zero, so nobody
                // holds a reference, and we hold the lock.
                obj.1.with_mut(|p| unsafe { *p = 7 });
                guard.set_count(1);
            })
        };
        let getter = {
            let obj = Arc::clone(&obj);
            thread::spawn(move || {
                let got = obj.0.get_not_zero();
                if got {
                    // SAFETY: we hold a reference.
                    assert_eq!(obj.1.with(|p| unsafe { *p }), 7);
                    assert!(!put(&obj.0));
                }
                got
            })
        };
        init.join().unwrap();
        seen.record(usize::from(getter.join().unwrap()));
        assert_eq!(obj.0.count(), 1);
    });
    outcomes.assert_all_seen(2);
}

/// The raw inherent API of both spinlocks.
trait RawLock: Send + Sync + 'static {
    fn new() -> Self;
    fn lock(&self);
    fn try_lock(&self) -> bool;
    /// # Safety
    /// The caller holds the lock.
    unsafe fn unlock(&self);
    fn is_locked(&self) -> bool;
}

impl RawLock for RawTicketLock {
    fn new() -> Self {
        RawTicketLock::new()
    }
    fn lock(&self) {
        RawTicketLock::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawTicketLock::try_lock(self)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawTicketLock::unlock(self) }
    }
    fn is_locked(&self) -> bool {
        RawTicketLock::is_locked(self)
    }
}

impl RawLock for RawTtasLock {
    fn new() -> Self {
        RawTtasLock::new()
    }
    fn lock(&self) {
        RawTtasLock::lock(self)
    }
    fn try_lock(&self) -> bool {
        RawTtasLock::try_lock(self)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { RawTtasLock::unlock(self) }
    }
    fn is_locked(&self) -> bool {
        RawTtasLock::is_locked(self)
    }
}

/// A counter protected by a raw lock, incremented by `threads` threads;
/// `try_first` makes one thread use `try_lock` in a loop instead of `lock`.
///
/// With three spinning threads a preemption bound of 2 does not finish in
/// reasonable time (loom explores the spinning), so three-thread models
/// run with a bound of at most 1.
fn exclusion<L: RawLock>(threads: usize, try_first: bool) {
    let mut builder = loom::model::Builder::new();
    if threads > 2 {
        builder.preemption_bound = Some(builder.preemption_bound.map_or(1, |b| b.min(1)));
    }
    builder.check(move || {
        let shared = Arc::new((L::new(), UnsafeCell::new(0usize)));
        let increment = move |shared: &(L, UnsafeCell<usize>), with_try: bool| {
            if with_try {
                while !shared.0.try_lock() {
                    thread::yield_now();
                }
            } else {
                shared.0.lock();
            }
            assert!(shared.0.is_locked());
            // SAFETY: we hold the lock.
            shared.1.with_mut(|p| unsafe { *p += 1 });
            // SAFETY: locked above by this thread.
            unsafe { shared.0.unlock() };
        };
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || increment(&shared, try_first && i == 0))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(!shared.0.is_locked());
        // SAFETY: every other thread has been joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), threads);
    });
}

/// (c) Ticket lock exclusion, two threads.
#[test]
fn ticket_exclusion_2() {
    mode();
    exclusion::<RawTicketLock>(2, false);
}

/// (c) Ticket lock exclusion, three threads.
#[test]
fn ticket_exclusion_3() {
    mode();
    exclusion::<RawTicketLock>(3, false);
}

/// (c) Ticket lock: `try_lock` against `lock`.
#[test]
fn ticket_try_lock_exclusion() {
    mode();
    exclusion::<RawTicketLock>(2, true);
}

/// (d) TTAS lock exclusion, two threads.
#[test]
fn ttas_exclusion_2() {
    mode();
    exclusion::<RawTtasLock>(2, false);
}

/// (d) TTAS lock exclusion, three threads.
#[test]
fn ttas_exclusion_3() {
    mode();
    exclusion::<RawTtasLock>(3, false);
}

/// (d) TTAS lock: `try_lock` against `lock`.
#[test]
fn ttas_try_lock_exclusion() {
    mode();
    exclusion::<RawTtasLock>(2, true);
}

/// (c) Ticket lock: a `try_lock` stalled between its read of `owner` and
/// its compare-exchange on `next` while another thread takes the lock
/// [`TICKETS`](ksync::spinlock::TICKETS) times (the tickets wrap) and
/// keeps it on the last one. The compare-exchange may then succeed (`next`
/// is back at the value read): the ticket it took is not served, and the
/// `try_lock` must see that and wait its turn. Without that check, or with
/// Relaxed ticket takes (the re-check may then read `owner` from before
/// the wrap), two threads hold the lock. Loom's build has 2-bit tickets,
/// so four acquisitions wrap.
#[test]
fn ticket_try_lock_across_a_wrap() {
    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    mode();
    loom::model(|| {
        let shared = Arc::new((RawTicketLock::new(), AtomicUsize::new(0)));
        // Counts the holders; each asserts it is alone.
        let enter = |holders: &AtomicUsize| {
            assert_eq!(holders.fetch_add(1, SeqCst), 0, "two holders at once");
        };
        let trier = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                if shared.0.try_lock() {
                    enter(&shared.1);
                    shared.1.fetch_sub(1, SeqCst);
                    // SAFETY: taken by the `try_lock` above.
                    unsafe { shared.0.unlock() };
                }
            })
        };
        let cycler = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                for round in 0..ksync::spinlock::TICKETS {
                    shared.0.lock();
                    enter(&shared.1);
                    if round + 1 < ksync::spinlock::TICKETS {
                        shared.1.fetch_sub(1, SeqCst);
                        // SAFETY: locked above by this thread.
                        unsafe { shared.0.unlock() };
                    }
                }
                // Still holding the last ticket: the window in which a stale
                // `try_lock` must not succeed.
                thread::yield_now();
                shared.1.fetch_sub(1, SeqCst);
                // SAFETY: the last `lock` of the loop.
                unsafe { shared.0.unlock() };
            })
        };
        trier.join().unwrap();
        cycler.join().unwrap();
        assert!(!shared.0.is_locked());
    });
}
