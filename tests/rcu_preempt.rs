//! RCU in a preemptible kernel, and RCU's safe API in every build: the
//! host kernel's scheduler model (`ksync::host::preempt_at_next_point`,
//! `migrate_to`) preempts and migrates tasks only where the `Kernel`
//! contract allows it (while their preemption count is zero), and the
//! tests show that no safe code reaches an object after a grace period
//! that should have waited for its reader.
//!
//! "Freed" objects are poisoned instead of freed (an `AtomicU64` set to
//! `DEAD`), so a broken grace period is an assertion failure, not
//! undefined behaviour in the test itself.
//!
//! The tests run one at a time (`serial`): a grace period waits for every
//! CPU that RCU watches, so one test's online CPUs would hide another's
//! bug. Each brings its CPUs offline before it ends (threads that exit are
//! offline CPUs).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use ksync::host::{migrate_to, preempt_at_next_point, preempt_count, preemption_point};
use ksync::percpu_rwlock::GatedPerCpuRwLock;
use ksync::rcu::{self, Link, RcuList, RcuPtr};

const LIVE: u64 = 0x1111_1111;
const DEAD: u64 = 0xdead_dead;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A leaked object whose "free" poisons it.
fn object() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(LIVE)))
}

fn free(obj: &AtomicU64) {
    obj.store(DEAD, SeqCst);
}

/// One step of a two-thread handshake.
fn step() -> (Sender<()>, Receiver<()>) {
    channel()
}

/// A panic's message (the test expects one).
fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

// ---- issue 23.1: quiescent states for a CPU the task has left ----------

/// A task reads its CPU id in `quiescent_state`, is preempted and migrated
/// before it reports, and another task meanwhile starts reading on the CPU
/// it left; a grace period that needs that CPU starts. The stale report
/// must not end it: the object the new reader holds stays alive.
#[test]
fn quiescent_state_reports_for_the_cpu_it_runs_on() {
    let _serial = serial();
    let ptr: &'static RcuPtr<AtomicU64> = Box::leak(Box::new(RcuPtr::null()));
    let obj = object();
    // SAFETY: `obj` is leaked (never really freed).
    unsafe { ptr.publish(obj as *const AtomicU64 as *mut AtomicU64) };
    let (go_tx, go_rx) = step();
    let (read_tx, read_rx) = step();
    let (done_tx, done_rx) = step();
    let (cookie_tx, cookie_rx) = channel::<rcu::Cookie>();
    let updater = thread::spawn(move || {
        migrate_to(40);
        rcu::cpu_online();
        // The scheduler preempts this task at its next preemption point,
        // moves it to CPU 41 (never online) and runs the reader on CPU 40.
        preempt_at_next_point(move || {
            migrate_to(41);
            go_tx.send(()).unwrap();
            read_rx.recv().unwrap();
        });
        rcu::quiescent_state();
        // If the model did not preempt inside `quiescent_state` (no point
        // with preemption enabled), it does so here, after the report.
        preemption_point();
        let cookie = cookie_rx.recv().unwrap();
        if rcu::poll(cookie) {
            free(obj);
        }
        done_tx.send(()).unwrap();
        rcu::cpu_offline();
    });
    let reader = thread::spawn(move || {
        migrate_to(42); // never online
        go_rx.recv().unwrap();
        migrate_to(40); // the CPU the updater left
        let guard = rcu::read_lock();
        let got = ptr.read(&guard).unwrap();
        // Unpublish and start a grace period that needs CPU 40.
        // SAFETY: null.
        unsafe { ptr.publish(std::ptr::null_mut()) };
        cookie_tx.send(rcu::start_poll()).unwrap();
        read_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        let seen = got.load(SeqCst);
        drop(guard);
        rcu::quiescent_state();
        seen
    });
    updater.join().unwrap();
    let seen = reader.join().unwrap();
    assert_eq!(
        seen, LIVE,
        "a grace period ended under a reader: a stale quiescent state for the CPU the updater had left"
    );
}

/// The same shape in `synchronize`: its wait reports this CPU's quiescent
/// states, reading the id each time. The updater is preempted in its wait
/// for a first grace period; the reader, on the CPU it left, reports that
/// one, reads, unpublishes and starts a second; the updater's stale report
/// must not end the second one.
#[test]
fn synchronize_reports_for_the_cpu_it_runs_on() {
    let _serial = serial();
    let ptr: &'static RcuPtr<AtomicU64> = Box::leak(Box::new(RcuPtr::null()));
    let obj = object();
    // SAFETY: leaked.
    unsafe { ptr.publish(obj as *const AtomicU64 as *mut AtomicU64) };
    let (go_tx, go_rx) = step();
    let (read_tx, read_rx) = step();
    let (done_tx, done_rx) = step();
    let updater = thread::spawn(move || {
        migrate_to(43);
        rcu::cpu_online();
        preempt_at_next_point(move || {
            migrate_to(45);
            go_tx.send(()).unwrap();
            read_rx.recv().unwrap();
        });
        rcu::synchronize();
        // The reader may have gone (its exit is an offline CPU).
        let _ = done_tx.send(());
        rcu::cpu_offline();
    });
    let reader = thread::spawn(move || {
        migrate_to(46); // never online
        go_rx.recv().unwrap();
        migrate_to(43);
        rcu::quiescent_state();
        let guard = rcu::read_lock();
        let got = ptr.read(&guard).unwrap();
        // SAFETY: null.
        unsafe { ptr.publish(std::ptr::null_mut()) };
        let cookie = rcu::start_poll();
        read_tx.send(()).unwrap();
        // A fixed updater waits for this section; give it a moment.
        let _ = done_rx.recv_timeout(Duration::from_millis(300));
        if rcu::poll(cookie) {
            free(obj);
        }
        let seen = got.load(SeqCst);
        drop(guard);
        rcu::quiescent_state();
        seen
    });
    let seen = reader.join().unwrap();
    updater.join().unwrap();
    assert_eq!(
        seen, LIVE,
        "a grace period ended under a reader: a stale quiescent state from synchronize's wait"
    );
}

// ---- issue 23.2: readers that can be preempted -------------------------

/// A reader holding an object is interrupted by the tick; a kernel whose
/// scheduler reports a quiescent state at each context switch would
/// preempt it there if its preemption count were zero. The read guard
/// keeps preemption disabled, so the scheduler may not.
#[test]
fn a_read_section_is_not_preemptible() {
    let _serial = serial();
    let ptr: &'static RcuPtr<AtomicU64> = Box::leak(Box::new(RcuPtr::null()));
    let obj = object();
    // SAFETY: leaked.
    unsafe { ptr.publish(obj as *const AtomicU64 as *mut AtomicU64) };
    let (read_tx, read_rx) = step();
    let (gp_tx, gp_rx) = step();
    let (point_tx, point_rx) = step();
    let (checked_tx, checked_rx) = step();
    let reader = thread::spawn(move || {
        rcu::cpu_online();
        let guard = rcu::read_lock();
        let got = ptr.read(&guard).unwrap();
        let count_inside = preempt_count();
        read_tx.send(()).unwrap();
        gp_rx.recv().unwrap();
        // The context switch reports this CPU's quiescent state, as the
        // module docs tell kernels to.
        preempt_at_next_point(rcu::quiescent_state);
        preemption_point(); // the tick
        point_tx.send(()).unwrap();
        checked_rx.recv().unwrap();
        let seen = got.load(SeqCst);
        drop(guard); // preempted here at the latest
        assert_eq!(preempt_count(), 0);
        rcu::cpu_offline();
        (seen, count_inside)
    });
    let updater = thread::spawn(move || {
        rcu::cpu_online();
        read_rx.recv().unwrap();
        // SAFETY: null.
        unsafe { ptr.publish(std::ptr::null_mut()) };
        let cookie = rcu::start_poll();
        gp_tx.send(()).unwrap();
        point_rx.recv().unwrap();
        rcu::quiescent_state();
        if rcu::poll(cookie) {
            free(obj);
        }
        checked_tx.send(()).unwrap();
        rcu::cpu_offline();
    });
    updater.join().unwrap();
    let (seen, count_inside) = reader.join().unwrap();
    assert_eq!(seen, LIVE, "a grace period ended under a preempted reader");
    assert!(
        count_inside > 0,
        "a read section runs with preemption disabled"
    );
}

// ---- issue 23.3: quiescent states and waits inside a read section ------

/// Every call that reports a quiescent state or waits for a grace period
/// panics inside a read section, in every build (they used to be checked
/// in debug builds only, and in release builds ended the grace period
/// under the reader).
#[test]
fn quiescent_states_inside_a_read_section_panic() {
    let _serial = serial();
    thread::spawn(|| {
        rcu::cpu_online();
        let cookie = rcu::get_state();
        rcu::synchronize(); // completes `cookie`
        let gate = rcu::RcuSync::new();
        let lock = GatedPerCpuRwLock::new(0u32);
        let calls: [(&str, &dyn Fn()); 8] = [
            ("rcu::quiescent_state()", &rcu::quiescent_state),
            ("rcu::synchronize()", &rcu::synchronize),
            ("rcu::barrier()", &rcu::barrier),
            ("rcu::cond_synchronize()", &|| rcu::cond_synchronize(cookie)),
            ("rcu::idle_enter()", &rcu::idle_enter),
            ("rcu::cpu_offline()", &rcu::cpu_offline),
            ("RcuSync::enter()", &|| gate.enter()),
            ("RcuSync::enter()", &|| drop(lock.write())),
        ];
        for (name, call) in calls {
            let msg = panic_message(|| {
                let _guard = rcu::read_lock();
                call();
            });
            assert!(msg.contains(name), "{name}: {msg}");
            assert!(msg.contains("inside a read-side critical section"), "{msg}");
            assert!(!rcu::read_lock_held());
            assert_eq!(preempt_count(), 0, "the panic left preemption disabled");
        }
        // Outside a read section they work.
        rcu::quiescent_state();
        rcu::cond_synchronize(cookie);
        gate.enter();
        gate.exit();
        *lock.write() += 1;
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

/// The object-level view of the same bug: a `synchronize` inside a read
/// section (here the gated lock's writer, which waits for one) must not
/// return while the section's object is in use.
#[test]
fn a_writer_inside_a_read_section_does_not_free_under_it() {
    let _serial = serial();
    let ptr: &'static RcuPtr<AtomicU64> = Box::leak(Box::new(RcuPtr::null()));
    let obj = object();
    // SAFETY: leaked.
    unsafe { ptr.publish(obj as *const AtomicU64 as *mut AtomicU64) };
    let seen = thread::spawn(move || {
        rcu::cpu_online();
        let lock = GatedPerCpuRwLock::new(());
        let guard = rcu::read_lock();
        let got = ptr.read(&guard).unwrap();
        // SAFETY: null.
        unsafe { ptr.publish(std::ptr::null_mut()) };
        let cookie = rcu::get_state();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(lock.write())));
        if rcu::poll(cookie) {
            free(obj);
        }
        let seen = got.load(SeqCst);
        drop(guard);
        rcu::cpu_offline();
        seen
    })
    .join()
    .unwrap();
    assert_eq!(
        seen, LIVE,
        "a wait inside a read section ended its grace period"
    );
}

// ---- issue 18.3: readers on CPUs that RCU does not watch ---------------

struct Node {
    value: AtomicU64,
    link: Link,
}
ksync::impl_linked!(Node, link);

/// The program: a reader on a CPU that never came online (then an
/// idle one, then an offline one) walks a list; the writer removes the
/// node, waits with `synchronize` and frees it. The reader must still see
/// it alive (its section makes its CPU watched), or panic clearly.
#[test]
fn readers_on_unwatched_cpus_are_protected() {
    let _serial = serial();
    for how in ["never online", "idle", "offline"] {
        let list: &'static RcuList<Node> = Box::leak(Box::new(RcuList::new()));
        let node: &'static Node = Box::leak(Box::new(Node {
            value: AtomicU64::new(LIVE),
            link: Link::new(),
        }));
        let writers_lock: &'static ksync::spinlock::TicketMutex<()> =
            Box::leak(Box::new(ksync::spinlock::TicketMutex::new(())));
        // SAFETY: `node` is leaked (its "free" poisons it).
        unsafe { list.push_back(&mut writers_lock.lock(), node) };
        let (read_tx, read_rx) = step();
        let (freed_tx, freed_rx) = channel::<bool>();
        let reader = thread::spawn(move || {
            match how {
                "idle" => {
                    rcu::cpu_online();
                    rcu::idle_enter();
                }
                "offline" => {
                    rcu::cpu_online();
                    rcu::cpu_offline();
                }
                _ => {}
            }
            let guard = rcu::read_lock();
            let got = list.iter(&guard).next().unwrap();
            read_tx.send(()).unwrap();
            // A broken grace period ends (and the writer frees) meanwhile.
            let freed_early = freed_rx.recv_timeout(Duration::from_millis(200)).is_ok();
            let seen = got.value.load(SeqCst);
            drop(guard);
            (seen, freed_early)
        });
        let writer = thread::spawn(move || {
            rcu::cpu_online();
            read_rx.recv().unwrap();
            list.remove(&mut writers_lock.lock(), node);
            rcu::synchronize();
            free(&node.value);
            let _ = freed_tx.send(true);
            rcu::cpu_offline();
        });
        let (seen, freed_early) = reader.join().unwrap();
        writer.join().unwrap();
        assert!(
            !freed_early && seen == LIVE,
            "{how}: synchronize returned under a reader on an unwatched CPU"
        );
    }
}

// ---- issue 23.4: a gated try_write must not wait -----------------------

/// `try_write` on a gated lock whose gate is open needs a grace period to
/// close it; with a CPU that holds grace periods up (online, no quiescent
/// state for a second) it must fail at once, not wait.
#[test]
fn gated_try_write_does_not_wait() {
    let _serial = serial();
    let lock: &'static GatedPerCpuRwLock<u32> = Box::leak(Box::new(GatedPerCpuRwLock::new(0)));
    let (online_tx, online_rx) = step();
    let (stop_tx, stop_rx) = step();
    let staller = thread::spawn(move || {
        rcu::cpu_online();
        online_tx.send(()).unwrap();
        // Holds up every grace period until told to stop.
        stop_rx.recv().unwrap();
        rcu::cpu_offline();
    });
    online_rx.recv().unwrap();
    let took = thread::spawn(move || {
        rcu::cpu_online();
        let start = Instant::now();
        let got = lock.try_write().map(|mut w| *w += 1).is_some();
        let took = start.elapsed();
        rcu::cpu_offline();
        (got, took)
    });
    // A broken try_write waits until the staller goes away.
    thread::sleep(Duration::from_millis(1000));
    stop_tx.send(()).unwrap();
    let (got, took) = took.join().unwrap();
    staller.join().unwrap();
    assert!(
        took < Duration::from_millis(500),
        "try_write waited {took:?} for a grace period (succeeded: {got})"
    );
    assert!(!got, "an open gate cannot be closed without a grace period");
    // Once a writer closed the gate, a try_write right after it succeeds
    // without a grace period, even with a CPU holding them up.
    thread::spawn(move || {
        rcu::cpu_online();
        *lock.write() += 1;
        let start = Instant::now();
        let got = lock.try_write().map(|mut w| *w += 1).is_some();
        assert!(got && start.elapsed() < Duration::from_millis(500));
        assert_eq!(*lock.read(), 2);
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

/// `try_write` never waits, so it cannot end a grace period under a read
/// section either: inside one it fails or succeeds at once, and a cookie
/// taken in the section stays incomplete.
#[test]
fn gated_try_write_inside_a_read_section_reports_nothing() {
    let _serial = serial();
    thread::spawn(|| {
        rcu::cpu_online();
        let lock = GatedPerCpuRwLock::new(0u32);
        let guard = rcu::read_lock();
        let cookie = rcu::start_poll();
        assert!(lock.try_write().is_none(), "the gate is open");
        assert!(
            !rcu::poll(cookie),
            "a grace period ended inside the section"
        );
        drop(guard);
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

// ---- issue 23.5: RcuSync::exit, idle transitions in interrupt handlers --

/// An `exit` without an `enter` panics in every build, and leaves the gate
/// as it was (it used to wrap the writer count in release builds and
/// reopen the gate under a writer).
#[test]
fn unpaired_rcu_sync_exit_panics() {
    let _serial = serial();
    thread::spawn(|| {
        rcu::cpu_online();
        let gate = rcu::RcuSync::new();
        let msg = panic_message(|| gate.exit());
        assert!(msg.contains("exit without enter"), "{msg}");
        gate.enter();
        gate.exit();
        let msg = panic_message(|| gate.exit());
        assert!(msg.contains("exit without enter"), "{msg}");
        assert!(
            !gate.is_idle(),
            "the gate reopens only a grace period after the exit"
        );
        rcu::synchronize();
        assert!(gate.is_idle());
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}

/// An interrupt handler that calls `idle_exit`/`idle_enter` on a CPU that
/// was not idle, interrupting a reader: the `idle_enter` panics (the
/// reader's section is still open) instead of putting the reader into an
/// extended quiescent state. A handler needs neither call: its read
/// sections watch the CPU themselves.
#[test]
fn idle_enter_in_a_handler_that_interrupted_a_reader_panics() {
    let _serial = serial();
    thread::spawn(|| {
        rcu::cpu_online();
        let guard = rcu::read_lock();
        ksync::host::enter_interrupt();
        rcu::idle_exit(); // the CPU was not idle: nothing to do
        let msg = panic_message(rcu::idle_enter);
        ksync::host::exit_interrupt();
        assert!(msg.contains("rcu::idle_enter()"), "{msg}");
        assert!(msg.contains("inside a read-side critical section"), "{msg}");
        drop(guard);
        // On an idle CPU, a handler's reader needs no idle_exit.
        rcu::idle_enter();
        ksync::host::enter_interrupt();
        let guard = rcu::read_lock();
        let cookie = rcu::start_poll();
        assert!(
            !rcu::poll(cookie),
            "the handler's section holds the grace period up"
        );
        drop(guard);
        ksync::host::exit_interrupt();
        rcu::cpu_offline();
    })
    .join()
    .unwrap();
}
