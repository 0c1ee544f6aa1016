//! Host tests of `call_rcu`, `process_callbacks`, `barrier` and
//! `defer_free` (threads play CPUs).

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Barrier, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ksync::rcu::{self, RcuHead};

/// An object freed through `call_rcu`: the callback marks it and counts.
struct Obj {
    head: RcuHead,
    /// Set by the callback.
    done: AtomicBool,
    /// Incremented by the callback (shared counter).
    counter: *const AtomicUsize,
}

// SAFETY: `counter` points to an atomic that outlives every callback (the
// tests call `rcu::barrier` before it goes out of scope).
unsafe impl Sync for Obj {}
// SAFETY: as above.
unsafe impl Send for Obj {}

impl Obj {
    fn new(counter: &AtomicUsize) -> Self {
        Obj {
            head: RcuHead::new(),
            done: AtomicBool::new(false),
            counter,
        }
    }
}

unsafe fn mark(head: *mut RcuHead) {
    // SAFETY: every head queued with `mark` is the `head` field of an `Obj`
    // that stays alive until after `rcu::barrier`.
    let obj = unsafe { &*head.byte_sub(offset_of!(Obj, head)).cast::<Obj>() };
    assert!(!obj.done.swap(true, SeqCst), "callback ran twice");
    // SAFETY: see `Obj`.
    unsafe { (*obj.counter).fetch_add(1, SeqCst) };
}

/// `n` objects sharing one counter, leaked (callbacks may outlive a test
/// that fails).
fn leaked_objs(n: usize) -> (&'static AtomicUsize, &'static [Obj]) {
    let counter: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let objs = (0..n).map(|_| Obj::new(counter)).collect::<Vec<_>>();
    (counter, Box::leak(objs.into_boxed_slice()))
}

fn queue(obj: &Obj) {
    let head = &obj.head as *const RcuHead as *mut RcuHead;
    // SAFETY: `obj` outlives the callback (barrier before it is dropped),
    // and its head is not queued.
    unsafe { rcu::call_rcu(head, mark) };
}

/// The tests run one at a time: `barrier` (and `process_callbacks` for
/// offline CPUs) runs other CPUs' callbacks, which would blur what each
/// test counts.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on a new thread and fails if it does not return in 20 s (a
/// stalled grace period would otherwise hang the test run).
fn within_20s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not finish within 20 s"))
}

/// A callback does not run while a read section that started before
/// `call_rcu` is open, and runs after it closes and a grace period passes.
#[test]
fn callback_waits_for_a_reader() {
    let _serial = serial();
    let counter = AtomicUsize::new(0);
    let obj = Obj::new(&counter);
    thread::scope(|s| {
        // Inside the scope: a failed assertion drops `out_tx`, which ends
        // the reader thread, so the scope can join it.
        let (in_tx, in_rx) = mpsc::channel();
        let (out_tx, out_rx) = mpsc::channel::<()>();
        s.spawn(move || {
            rcu::cpu_online();
            let guard = rcu::read_lock();
            in_tx.send(()).unwrap();
            let _ = out_rx.recv();
            drop(guard);
            rcu::quiescent_state();
            rcu::cpu_offline();
        });
        in_rx.recv().unwrap();
        rcu::cpu_online();
        queue(&obj);
        // SAFETY: only this thread touches the head now (it is queued, the
        // callback cannot run yet: see the assertions).
        assert!(unsafe { obj.head.is_queued() });
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            rcu::process_callbacks();
            rcu::quiescent_state();
            assert!(
                !obj.done.load(SeqCst),
                "callback ran inside a reader's grace period"
            );
        }
        out_tx.send(()).unwrap();
        let start = Instant::now();
        while !obj.done.load(SeqCst) {
            rcu::process_callbacks();
            rcu::quiescent_state();
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "callback never ran"
            );
        }
        rcu::cpu_offline();
    });
    assert_eq!(counter.load(SeqCst), 1);
}

/// `barrier` returns only after every callback queued before it, on every
/// CPU, has run — without anyone else calling `process_callbacks`.
#[test]
fn barrier_runs_every_queued_callback() {
    let _serial = serial();
    const THREADS: usize = 3;
    const PER_THREAD: usize = 200;
    let (counter, objs) = leaked_objs(THREADS * PER_THREAD);
    let queued = Barrier::new(THREADS + 1);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (queued, done) = (&queued, &done);
            s.spawn(move || {
                rcu::cpu_online();
                for obj in &objs[t * PER_THREAD..(t + 1) * PER_THREAD] {
                    queue(obj);
                }
                // Idle while the barrier runs: this CPU neither reports
                // quiescent states nor processes callbacks.
                rcu::idle_enter();
                queued.wait();
                while !done.load(SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
                rcu::idle_exit();
                rcu::cpu_offline();
            });
        }
        // Set on the way out, even when an assertion fails, so the
        // threads end and the scope can join them.
        struct SetOnDrop<'a>(&'a AtomicBool);
        impl Drop for SetOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let _release = SetOnDrop(&done);
        queued.wait();
        within_20s("rcu::barrier", rcu::barrier);
        assert_eq!(counter.load(SeqCst), THREADS * PER_THREAD);
        assert!(objs.iter().all(|o| o.done.load(SeqCst)));
    });
}

/// Callbacks queued concurrently with `barrier` calls on several CPUs;
/// every callback runs exactly once and a final barrier sees them all.
#[test]
fn concurrent_queueing_and_barriers() {
    let _serial = serial();
    const THREADS: usize = 3;
    const PER_THREAD: usize = 300;
    let (counter, objs) = leaked_objs(THREADS * PER_THREAD);
    within_20s("queueing with barriers", move || {
        thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    rcu::cpu_online();
                    for (i, obj) in objs[t * PER_THREAD..(t + 1) * PER_THREAD]
                        .iter()
                        .enumerate()
                    {
                        queue(obj);
                        if i % 50 == 49 && t == 0 {
                            rcu::barrier();
                        }
                        if i % 7 == 0 {
                            rcu::process_callbacks();
                        }
                        rcu::quiescent_state();
                    }
                    rcu::cpu_offline();
                });
            }
        });
        rcu::barrier();
    });
    assert_eq!(counter.load(SeqCst), THREADS * PER_THREAD);
}

/// `process_callbacks` runs at most `CALLBACK_BATCH` per list and call, in
/// queue order, and reports how many it ran.
#[test]
fn callbacks_run_in_bounded_batches_in_order() {
    let _serial = serial();
    static ORDER: AtomicUsize = AtomicUsize::new(0);
    struct Seq {
        head: RcuHead,
        index: usize,
        ran_as: AtomicUsize,
    }
    unsafe fn record(head: *mut RcuHead) {
        // SAFETY: queued below as the head of a leaked `Seq`.
        let s = unsafe { &*head.byte_sub(offset_of!(Seq, head)).cast::<Seq>() };
        s.ran_as.store(ORDER.fetch_add(1, SeqCst), SeqCst);
    }
    const N: usize = 3 * rcu::CALLBACK_BATCH + 5;
    within_20s("batches", || {
        // A thread of its own: its CPU's list holds only these callbacks.
        rcu::cpu_online();
        let items: &'static [Seq] = Box::leak(
            (0..N)
                .map(|index| Seq {
                    head: RcuHead::new(),
                    index,
                    ran_as: AtomicUsize::new(usize::MAX),
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        for item in items {
            // SAFETY: leaked, so valid forever; queued once.
            unsafe { rcu::call_rcu(&item.head as *const _ as *mut _, record) };
        }
        assert!(rcu::pending_callbacks() >= N);
        assert!(rcu::has_callbacks());
        rcu::synchronize();
        let mut total = 0;
        while total < N {
            let ran = rcu::process_callbacks();
            assert!(ran <= rcu::CALLBACK_BATCH, "a batch of {ran}");
            total += ran;
            rcu::quiescent_state();
            thread::yield_now();
        }
        assert_eq!(total, N);
        assert!(!rcu::has_callbacks());
        let first = items[0].ran_as.load(SeqCst);
        for item in items {
            assert_eq!(item.ran_as.load(SeqCst), first + item.index, "out of order");
        }
        rcu::cpu_offline();
    });
}

/// A callback may queue its own head again (Linux allows it).
#[test]
fn callback_may_requeue_its_head() {
    let _serial = serial();
    struct Chain {
        head: RcuHead,
        left: AtomicUsize,
    }
    unsafe fn again(head: *mut RcuHead) {
        // SAFETY: the head of a leaked `Chain`.
        let c = unsafe { &*head.byte_sub(offset_of!(Chain, head)).cast::<Chain>() };
        if c.left.fetch_sub(1, SeqCst) > 1 {
            // SAFETY: the head's callback has started, so it is not queued.
            unsafe { rcu::call_rcu(head, again) };
        }
    }
    let chain: &'static Chain = Box::leak(Box::new(Chain {
        head: RcuHead::new(),
        left: AtomicUsize::new(5),
    }));
    within_20s("a re-queuing chain", move || {
        rcu::cpu_online();
        // SAFETY: leaked; not queued.
        unsafe { rcu::call_rcu(&chain.head as *const _ as *mut _, again) };
        while chain.left.load(SeqCst) != 0 {
            rcu::barrier();
        }
        rcu::cpu_offline();
    });
}

/// Queuing a head that is already queued is caught, not a corrupt list.
#[test]
fn double_call_rcu_panics() {
    let _serial = serial();
    let counter: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let obj: &'static Obj = Box::leak(Box::new(Obj::new(counter)));
    within_20s("double call_rcu", move || {
        queue(obj);
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| queue(obj)));
        let message = second.expect_err("a second call_rcu on a queued head was accepted");
        let text = message
            .downcast_ref::<&str>()
            .copied()
            .or(message.downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default();
        assert!(text.contains("already queued"), "{text}");
        // The list is intact: the callback runs exactly once.
        rcu::barrier();
        assert_eq!(counter.load(SeqCst), 1);
    });
}

/// An offline CPU's callbacks are run by another CPU's
/// `process_callbacks`.
#[test]
fn offline_cpu_callbacks_are_adopted() {
    let _serial = serial();
    let counter: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let obj: &'static Obj = Box::leak(Box::new(Obj::new(counter)));
    within_20s("adoption", move || {
        // Take a CPU id first, so the thread below gets another one.
        rcu::cpu_online();
        thread::spawn(move || {
            rcu::cpu_online();
            queue(obj);
            rcu::cpu_offline();
        })
        .join()
        .unwrap();
        while !obj.done.load(SeqCst) {
            rcu::process_callbacks();
            rcu::quiescent_state();
        }
        rcu::cpu_offline();
    });
}

/// `defer_free` drops the value after a grace period, not before.
#[test]
fn defer_free_drops_after_a_grace_period() {
    let _serial = serial();
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Noisy;
    impl Drop for Noisy {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, SeqCst);
        }
    }
    within_20s("defer_free", || {
        rcu::cpu_online();
        let guard = rcu::read_lock();
        rcu::defer_free(Box::new(Noisy));
        // This CPU is in a read section: the grace period cannot end.
        for _ in 0..100 {
            rcu::process_callbacks();
        }
        assert_eq!(DROPPED.load(SeqCst), 0, "dropped inside a read section");
        drop(guard);
        rcu::barrier();
        assert_eq!(DROPPED.load(SeqCst), 1);
        rcu::cpu_offline();
    });
}

/// What the waits tried from inside a callback reported (debug builds).
#[cfg(debug_assertions)]
static FROM_CALLBACK: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Tries every blocking wait; each must panic before it does anything.
/// The panics are caught here, so the callback returns normally and the
/// list stays consistent.
#[cfg(debug_assertions)]
unsafe fn wait_in_callback(_head: *mut RcuHead) {
    let gate = rcu::RcuSync::new();
    let waits: [&dyn Fn(); 4] = [
        &rcu::synchronize,
        &rcu::barrier,
        &|| rcu::cond_synchronize(rcu::get_state()),
        &|| gate.enter(),
    ];
    for wait in waits {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(wait))
            .expect_err("a wait inside a callback did not panic");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        FROM_CALLBACK.lock().unwrap().push(msg);
    }
}

/// Regression: `synchronize`, `barrier`, `cond_synchronize` and
/// `RcuSync::enter` from a callback would wait for themselves (the
/// barrier for its own list, which is busy invoking the callback); debug
/// builds now panic at once.
#[test]
#[cfg(debug_assertions)]
fn waits_inside_a_callback_panic() {
    let _serial = serial();
    within_20s("the callback test", || {
        rcu::cpu_online();
        let head = Box::leak(Box::new(RcuHead::new())) as *mut RcuHead;
        // SAFETY: a leaked head, queued once.
        unsafe { rcu::call_rcu(head, wait_in_callback) };
        rcu::barrier();
        let msgs = std::mem::take(&mut *FROM_CALLBACK.lock().unwrap());
        assert_eq!(msgs.len(), 4, "{msgs:?}");
        for (msg, name) in msgs.iter().zip([
            "rcu::synchronize()",
            "rcu::barrier()",
            "rcu::cond_synchronize()",
            "RcuSync::enter()",
        ]) {
            assert!(
                msg.contains(name) && msg.contains("call_rcu callback"),
                "{msg}"
            );
        }
        // Outside the callback, the same calls work.
        rcu::synchronize();
        rcu::barrier();
        rcu::cpu_offline();
    });
}

/// What the callback of `preempted_callback_leaves_no_mark` saw, and what
/// the task that the "scheduler" ran at the callback's preemption point
/// got from a wait outside any callback.
static PREEMPTED: Mutex<(Option<u32>, Option<WaitResult>)> = Mutex::new((None, None));

/// A wait's outcome: its panic message if it panicked.
type WaitResult = Result<(), String>;

/// Arms a preemption and passes a preemption point (a timer tick), as a
/// preemptible callback would meet one. The "other task" that the
/// scheduler runs there, on this CPU, waits outside any callback.
unsafe fn tick_in_callback(_head: *mut RcuHead) {
    PREEMPTED.lock().unwrap().0 = Some(ksync::host::preempt_count());
    ksync::host::preempt_at_next_point(|| {
        // The cookie is complete: only the context check can object.
        let result = std::panic::catch_unwind(|| rcu::cond_synchronize(rcu::Cookie::COMPLETED))
            .map_err(|e| e.downcast_ref::<String>().cloned().unwrap_or_default());
        PREEMPTED.lock().unwrap().1 = Some(result);
    });
    ksync::host::preemption_point();
}

/// Issue 42, defect 4: callbacks run with preemption disabled (as Linux's
/// run in softirq context), so the "inside a callback" mark, which belongs
/// to the CPU, cannot be left on a CPU whose task was switched out inside
/// a callback: another task there that waits outside any callback must
/// not be taken for a callback.
#[test]
fn preempted_callback_leaves_no_mark() {
    let _serial = serial();
    within_20s("the preempted callback test", || {
        rcu::cpu_online();
        let head = Box::leak(Box::new(RcuHead::new())) as *mut RcuHead;
        // SAFETY: a leaked head, queued once.
        unsafe { rcu::call_rcu(head, tick_in_callback) };
        rcu::synchronize();
        while rcu::process_callbacks() == 0 {
            rcu::synchronize();
        }
        // The armed preemption ran by now: at the callback's tick if
        // callbacks were preemptible, else when preemption came back on.
        ksync::host::preemption_point();
        let (count, other) = std::mem::take(&mut *PREEMPTED.lock().unwrap());
        other
            .expect("the armed preemption never ran")
            .expect("a task switched in where a callback was preempted is taken for a callback");
        assert!(count.unwrap() > 0, "a callback ran with preemption enabled");
        rcu::cpu_offline();
    });
}

/// Set by the switch of `barrier_waits_preemptibly` when it ran inside the
/// barrier's wait; the sender releases the CPU that holds the grace
/// period up.
static IN_BARRIER_WAIT: Mutex<Option<mpsc::Sender<()>>> = Mutex::new(None);

/// Re-arms itself until the barrier has queued its head behind the other
/// CPU's callback (two callbacks pending): then the task is inside the
/// barrier's wait, and a preemption there releases the other CPU.
/// Does nothing once the test took the sender back.
fn switch_in_barrier_wait() {
    let mut slot = IN_BARRIER_WAIT.lock().unwrap();
    if slot.is_none() {
        return;
    }
    if rcu::pending_callbacks() < 2 {
        ksync::host::preempt_at_next_point(switch_in_barrier_wait);
        return;
    }
    let _ = slot.take().unwrap().send(());
}

/// `rcu::barrier` waits preemptibly (issue 37): it holds no
/// preempt-disabling lock across the wait for a grace period and the
/// callbacks, as Linux's `rcu_barrier` sleeps on its mutex and a
/// completion. Another CPU holds the grace period up until a preemption
/// lands inside the barrier's wait; with preemption disabled there, none
/// can, and the other CPU gives up after 10 s.
#[test]
fn barrier_waits_preemptibly() {
    let _serial = serial();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (queued_tx, queued_rx) = mpsc::channel::<()>();
    let counter: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let obj: &'static Obj = Box::leak(Box::new(Obj::new(counter)));
    let holder = thread::spawn(move || {
        rcu::cpu_online();
        queue(obj);
        queued_tx.send(()).unwrap();
        // No quiescent state until released: the callback waits.
        let released = release_rx.recv_timeout(Duration::from_secs(10)).is_ok();
        rcu::cpu_offline();
        released
    });
    queued_rx.recv().unwrap();
    assert_eq!(rcu::pending_callbacks(), 1);
    *IN_BARRIER_WAIT.lock().unwrap() = Some(release_tx);
    within_20s("the preemptible barrier test", || {
        // Outside the barrier the switch only re-arms; inside its wait it
        // releases the holder.
        ksync::host::preempt_at_next_point(switch_in_barrier_wait);
        rcu::barrier();
        // Disarm: the switch finds no sender and does not re-arm.
        IN_BARRIER_WAIT.lock().unwrap().take();
        ksync::host::preemption_point();
    });
    let released = holder.join().unwrap();
    assert_eq!(counter.load(SeqCst), 1);
    assert!(
        released,
        "no preemption point with preemption enabled inside rcu::barrier's wait"
    );
}
