//! Tests of SRCU, in two builds:
//!
//! * host (`cargo test --test srcu`): threads play CPUs; readers hold their
//!   sections across `yield_now` and hand some of them to another thread,
//!   which ends them there; the writer publishes, waits for a grace period
//!   and marks the old element freed. A reader that ever sees a freed
//!   element inside its section found a bug — and a `synchronize` that
//!   does not wait must be caught by the same test.
//! * loom (`RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//!   cargo test --release --test srcu`): models of the index flip in which a
//!   read section that began before `synchronize` must have ended when it
//!   returns, so the updater's free never races with the reader's access
//!   (loom checks the `UnsafeCell` accesses for causality). Two threads per
//!   model.

#[cfg(not(ksync_loom))]
mod host {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    use ksync::rcu::srcu::{Srcu, SrcuGuard};

    const SLOTS: usize = 4;
    /// Grace periods per pipeline run.
    const ROUNDS: usize = if cfg!(miri) { 20 } else { 1000 };

    /// What a pipeline run saw.
    struct Outcome {
        /// Freed elements seen by readers inside their sections.
        errors: usize,
        /// Rounds whose grace period began with a reader inside (so the
        /// run exercised waiting).
        contended: usize,
        /// Rounds the writer ran.
        rounds: usize,
    }

    /// rcutorture's pipeline in miniature, for SRCU. `wait` is the grace
    /// period under test.
    fn pipeline(srcu: &Srcu, wait: fn(&Srcu), rounds: usize) -> Outcome {
        let current = AtomicUsize::new(0);
        let freed: [AtomicBool; SLOTS] = Default::default();
        let stop = AtomicBool::new(false);
        let errors = AtomicUsize::new(0);
        let started = AtomicUsize::new(0);
        let inside = AtomicUsize::new(0);
        let contended = AtomicUsize::new(0);
        let ran = AtomicUsize::new(0);
        // Sections handed over to the migrator thread, which ends them (a
        // bounded queue: a migrator that falls behind holds up grace periods
        // with an ever longer backlog).
        let (tx, rx) = mpsc::sync_channel::<(SrcuGuard<'_>, usize)>(2);
        let check = |slot: usize| {
            if freed[slot].load(SeqCst) {
                errors.fetch_add(1, SeqCst);
            }
        };
        thread::scope(|s| {
            for r in 0..2 {
                let tx = tx.clone();
                let (current, stop, started, check, inside) =
                    (&current, &stop, &started, &check, &inside);
                s.spawn(move || {
                    started.fetch_add(1, SeqCst);
                    let mut i = 0usize;
                    while !stop.load(SeqCst) {
                        let guard = srcu.read_lock();
                        inside.fetch_add(1, SeqCst);
                        let slot = current.load(SeqCst);
                        check(slot);
                        // A sleeping reader: other threads run meanwhile.
                        thread::yield_now();
                        check(slot);
                        i += 1;
                        if (i + r) % 4 == 0 {
                            // Migrate: the section ends on another thread.
                            tx.send((guard, slot)).unwrap();
                        } else {
                            thread::yield_now();
                            check(slot);
                            inside.fetch_sub(1, SeqCst);
                            drop(guard);
                        }
                    }
                });
            }
            drop(tx);
            let inside = &inside;
            s.spawn(move || {
                for (guard, slot) in rx {
                    check(slot);
                    thread::yield_now();
                    check(slot);
                    inside.fetch_sub(1, SeqCst);
                    drop(guard);
                }
            });
            s.spawn(|| {
                while started.load(SeqCst) < 2 {
                    thread::yield_now();
                }
                // The rounds asked for, and on (up to 100 times as many)
                // until a grace period had to wait for a reader: a
                // schedule that kept the readers out of the way (a loaded
                // host, the hostile kernel) proves nothing.
                let mut round = 0;
                while round < rounds || (contended.load(SeqCst) == 0 && round < rounds * 100) {
                    let old = current.load(SeqCst);
                    let new = (round + 1) % SLOTS;
                    freed[new].store(false, SeqCst);
                    current.store(new, SeqCst);
                    if inside.load(SeqCst) > 0 {
                        contended.fetch_add(1, SeqCst);
                    }
                    wait(srcu);
                    freed[old].store(true, SeqCst);
                    thread::yield_now();
                    round += 1;
                }
                ran.store(round, SeqCst);
                stop.store(true, SeqCst);
            });
        });
        Outcome {
            errors: errors.load(SeqCst),
            contended: contended.load(SeqCst),
            rounds: ran.load(SeqCst),
        }
    }

    fn synchronize(srcu: &Srcu) {
        srcu.synchronize_with(thread::yield_now);
    }

    #[test]
    fn synchronize_waits_for_sleeping_and_migrating_readers() {
        static DOMAIN: Srcu = Srcu::new();
        let outcome = pipeline(&DOMAIN, synchronize, ROUNDS);
        assert_eq!(outcome.errors, 0, "a reader saw a freed element");
        assert!(outcome.contended > 0, "no grace period had to wait");
        assert_eq!(
            DOMAIN.gp_seq(),
            2 * outcome.rounds,
            "one grace period per round"
        );
    }

    #[test]
    fn polled_cookies_wait_for_readers() {
        fn wait(srcu: &Srcu) {
            let cookie = srcu.get_state();
            while !srcu.poll(cookie) {
                srcu.cond_synchronize_with(cookie, thread::yield_now);
            }
        }
        let domain = Srcu::new();
        let outcome = pipeline(&domain, wait, ROUNDS);
        assert_eq!(outcome.errors, 0, "a reader saw a freed element");
        assert!(outcome.contended > 0, "no grace period had to wait");
    }

    /// The control: a `synchronize` that does not wait must be caught.
    #[test]
    fn broken_synchronize_is_caught() {
        fn no_wait(_: &Srcu) {}
        let domain = Srcu::new();
        let mut caught = 0;
        for _ in 0..20 {
            caught += pipeline(&domain, no_wait, if cfg!(miri) { 200 } else { 2000 }).errors;
            if caught > 0 {
                break;
            }
        }
        assert!(caught > 0, "the pipeline cannot tell a no-op synchronize");
    }

    /// Several updaters at once: each returns only after a full grace period
    /// (the reader inside when they started has left), and an updater whose
    /// cookie a grace period run by another already covers runs none.
    #[test]
    fn concurrent_updaters() {
        let domain = Srcu::new();
        let reader_in = AtomicBool::new(false);
        let release = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                let _g = domain.read_lock();
                reader_in.store(true, SeqCst);
                while !release.load(SeqCst) {
                    thread::yield_now();
                }
            });
            while !reader_in.load(SeqCst) {
                thread::yield_now();
            }
            let updaters: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        domain.synchronize_with(thread::yield_now);
                        // The reader entered before we started: it must be
                        // gone (`release` set before its guard dropped).
                        assert!(
                            release.load(SeqCst),
                            "synchronize returned with a reader inside"
                        );
                    })
                })
                .collect();
            thread::sleep(Duration::from_millis(20));
            assert!(updaters.iter().all(|u| !u.is_finished()));
            release.store(true, SeqCst);
            for u in updaters {
                u.join().unwrap();
            }
        });
        // At most one grace period per updater, and at least one.
        let gps = domain.gp_seq() / 2;
        assert!((1..=3).contains(&gps), "{gps} grace periods");
    }

    /// Updaters wait with preemption enabled (issue 37, defect 5): the
    /// caller's `wait` may sleep or yield (Linux's updaters sleep on
    /// `srcu_gp_mutex` and completions), both while another updater runs
    /// a grace period and while readers are inside.
    #[test]
    fn updaters_wait_with_preemption_enabled() {
        fn preemptible() {
            assert_eq!(
                ksync::host::preempt_count(),
                0,
                "an SRCU updater's wait ran with preemption disabled"
            );
            thread::yield_now();
        }
        let domain = Srcu::new();
        let reader_in = AtomicBool::new(false);
        let release = AtomicBool::new(false);
        let waits = AtomicUsize::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                let _g = domain.read_lock();
                reader_in.store(true, SeqCst);
                while !release.load(SeqCst) {
                    thread::yield_now();
                }
            });
            while !reader_in.load(SeqCst) {
                thread::yield_now();
            }
            let updaters: Vec<_> = (0..2)
                .map(|i| {
                    let (domain, waits) = (&domain, &waits);
                    s.spawn(move || {
                        let wait = || {
                            waits.fetch_add(1, SeqCst);
                            preemptible();
                        };
                        if i == 0 {
                            domain.synchronize_with(wait);
                        } else {
                            domain.cond_synchronize_with(domain.get_state(), wait);
                        }
                    })
                })
                .collect();
            // The updaters waited (for the reader, or for each other)
            // before the reader leaves; one that panicked ends the wait.
            while waits.load(SeqCst) < 10 && !updaters.iter().any(|u| u.is_finished()) {
                thread::yield_now();
            }
            release.store(true, SeqCst);
            for u in updaters {
                u.join().unwrap();
            }
        });
    }

    #[test]
    fn synchronize_waits_for_a_guard_dropped_elsewhere() {
        static DOMAIN: Srcu = Srcu::new();
        let guard = DOMAIN.read_lock();
        let done = AtomicBool::new(false);
        thread::scope(|s| {
            let updater = s.spawn(|| {
                DOMAIN.synchronize_with(thread::yield_now);
                done.store(true, SeqCst);
            });
            thread::sleep(Duration::from_millis(20));
            assert!(
                !done.load(SeqCst),
                "synchronize did not wait for the reader"
            );
            // End the section on a third thread (another CPU).
            s.spawn(move || drop(guard)).join().unwrap();
            updater.join().unwrap();
        });
        assert!(done.load(SeqCst));
    }

    #[test]
    fn cookies_and_nesting() {
        let domain = Srcu::new();
        let c0 = domain.get_state();
        assert!(!domain.poll(c0));
        {
            let outer = domain.read_lock();
            let inner = domain.read_lock();
            assert_eq!(outer.index(), inner.index());
            // Readers of another domain do not hold this one up.
            let other = Srcu::new();
            other.synchronize();
            assert_eq!(other.gp_seq(), 2);
            drop(outer);
            drop(inner);
        }
        domain.cond_synchronize(c0);
        assert!(domain.poll(c0));
        assert_eq!(domain.gp_seq(), 2);
        // Complete: no new grace period.
        domain.cond_synchronize(c0);
        assert_eq!(domain.gp_seq(), 2);
        let c1 = domain.get_state();
        domain.synchronize();
        assert!(domain.poll(c1));
        // The flip alternates the index new readers use.
        let a = domain.read_lock().index();
        domain.synchronize();
        let b = domain.read_lock().index();
        assert_ne!(a, b);
        assert_eq!(
            format!("{domain:?}"),
            format!("Srcu {{ idx: {b}, gp_seq: 6, .. }}")
        );
    }

    #[test]
    fn guards_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<SrcuGuard<'static>>();
        send_sync::<Srcu>();
    }
}

/// The loom models.
///
/// They raise the preemption bound to at least [`MIN_PREEMPTIONS`]: they
/// are small (loom orders everything around a `SeqCst` fence, which prunes
/// most interleavings; a few hundred iterations each), and the
/// nested-section bug that `inner_section_does_not_hide_outer` exists for
/// (unlocks summed after locks) needs three preemptions to show.
#[cfg(ksync_loom)]
mod loom_models {
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    use ksync::rcu::srcu::Srcu;

    /// The smallest preemption bound the models run with.
    const MIN_PREEMPTIONS: usize = 4;

    /// `loom::model` with the preemption bound raised to [`MIN_PREEMPTIONS`].
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(
            builder
                .preemption_bound
                .map_or(MIN_PREEMPTIONS, |b| b.max(MIN_PREEMPTIONS)),
        );
        builder.check(f);
    }

    /// Element `i` (1 or 2) is published while `current == i`; "freeing" it
    /// writes to its cell, which loom flags if a reader's access is not
    /// ordered before. `current` is Relaxed everywhere: only SRCU's barriers
    /// order anything.
    struct World {
        srcu: Srcu,
        current: AtomicUsize,
        elements: [UnsafeCell<usize>; 3],
    }

    impl World {
        fn new() -> Arc<Self> {
            Arc::new(World {
                srcu: Srcu::new(),
                current: AtomicUsize::new(1),
                elements: [UnsafeCell::new(0), UnsafeCell::new(1), UnsafeCell::new(2)],
            })
        }

        /// One read section: look up the current element and read it.
        fn read(&self) {
            let _guard = self.srcu.read_lock();
            let i = self.current.load(Relaxed);
            if i != 0 {
                // SAFETY: (of the model) published elements are valid until a
                // grace period after their removal; loom checks it.
                let v = self.elements[i].with(|p| unsafe { *p });
                assert_eq!(v, i, "read a freed element");
            }
        }

        /// Unpublish element `old` (replacing it by `new`), wait, free it.
        fn replace(&self, old: usize, new: usize) {
            self.current.store(new, Relaxed);
            self.srcu.synchronize();
            // SAFETY: (of the model) unpublished and a grace period passed.
            self.elements[old].with_mut(|p| unsafe { *p = usize::MAX });
        }
    }

    /// One reader, one grace period.
    #[test]
    fn reader_before_synchronize_finishes_first() {
        model(|| {
            let w = World::new();
            let reader = {
                let w = w.clone();
                thread::spawn(move || w.read())
            };
            w.replace(1, 0);
            reader.join().unwrap();
        });
    }

    /// The straggler case: one reader section against two grace periods
    /// (two index flips). A reader that read `idx` before the first flip but
    /// counted itself after the first scan must still be waited for by the
    /// second grace period, which flips `idx` back.
    #[test]
    fn straggler_is_caught_by_the_next_grace_period() {
        model(|| {
            let w = World::new();
            let reader = {
                let w = w.clone();
                thread::spawn(move || w.read())
            };
            w.replace(1, 2);
            w.replace(2, 0);
            reader.join().unwrap();
        });
    }

    /// A nested section that enters and leaves while the outer one stays in:
    /// the scan must not let the inner unlock cancel the outer lock. This is
    /// what summing the unlocks first, with the full fence D before the locks,
    /// is for (summed the other way round, or without D, the inner unlock can
    /// be counted while the inner lock is not, and the sums match with the
    /// outer section still inside).
    ///
    /// The reader is the main thread and enters before the updater exists;
    /// it yields (sleeps) around the inner section, so that the interesting
    /// interleavings are within loom's preemption bound.
    #[test]
    fn inner_section_does_not_hide_outer() {
        model(|| {
            let w = World::new();
            let outer = w.srcu.read_lock();
            let i = w.current.load(Relaxed);
            let updater = {
                let w = w.clone();
                thread::spawn(move || w.replace(1, 0))
            };
            thread::yield_now();
            drop(w.srcu.read_lock());
            thread::yield_now();
            // SAFETY: loom checks this access against the others (a race fails the model).
            let v = w.elements[i].with(|p| unsafe { *p });
            assert_eq!(v, i, "read a freed element");
            drop(outer);
            updater.join().unwrap();
        });
    }

    /// A section that migrates: begun on one CPU, handed to the other, ended
    /// there, while the first CPU runs the grace period that must wait for it.
    /// (The world is leaked so that the guard can cross threads.)
    #[test]
    fn migrated_section_is_waited_for() {
        model(|| {
            let w: &'static World = Box::leak(Box::new(World {
                srcu: Srcu::new(),
                current: AtomicUsize::new(1),
                elements: [UnsafeCell::new(0), UnsafeCell::new(1), UnsafeCell::new(2)],
            }));
            let handoff = Arc::new(Mutex::new(None));
            let updater = {
                let handoff = handoff.clone();
                thread::spawn(move || {
                    let guard = w.srcu.read_lock();
                    let i = w.current.load(Relaxed);
                    *handoff.lock().unwrap() = Some((guard, i));
                    w.replace(1, 0);
                })
            };
            let (guard, i) = loop {
                if let Some(section) = handoff.lock().unwrap().take() {
                    break section;
                }
                thread::yield_now();
            };
            // SAFETY: loom checks this access against the others (a race fails the model).
            let v = w.elements[i].with(|p| unsafe { *p });
            assert_eq!(v, i, "read a freed element");
            drop(guard);
            updater.join().unwrap();
        });
    }
}
