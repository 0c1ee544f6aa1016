//! `might_sleep` with nothing held read
//! ksync's debug preemption count (`PREEMPT_OFF`, src/kernel.rs
//! `preempt_disabled_by_ksync`) on a CPU id it read with preemption
//! enabled. A preemptible kernel may move the task right after the id is
//! read (the `Kernel` contract; the host's `cpu_id` is such a point); the
//! count read is then the CPU the task left, where another task may hold
//! a spinlock or a `preempt_disable` section: `might_sleep` reports "a
//! sleeping wait with preemption disabled on this CPU" for a task that
//! holds nothing. (Linux's `preempt_count()` is the task's own, read in
//! one instruction: no such window.) Now the id and the count are read
//! with preemption disabled through the kernel's hooks.
//!
//! The host's scheduler is played by hand: at every preemption point of
//! the checked task (re-armed after each), the task moves to a free CPU
//! and a helper task moves onto the CPU it left and disables preemption
//! there through ksync.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc;

use ksync::kernel::irq::{ArchIrq, IrqState};
use ksync::{host, kernel, wait};

/// What the helper task holds on the CPU the checked task left.
#[derive(Clone, Copy)]
enum Hold {
    /// `kernel::preempt_disable` (as a spinlock's holder).
    Preempt,
    /// `ArchIrq` masking (as an `ArchIrq` lock's holder).
    ArchIrq,
    /// A spinlock (with `lockdep`: recorded as held on that CPU).
    Spin,
}

static HELPERS_LOCK: ksync::spinlock::TicketMutex<u64> = ksync::spinlock::TicketMutex::new(0);

enum Held {
    Preempt(#[allow(dead_code)] kernel::PreemptGuard),
    ArchIrq(#[allow(dead_code)] IrqState<ArchIrq>),
    Spin(#[allow(dead_code)] ksync::spinlock::SpinLockGuard<'static, u64>),
}

/// Spare CPU ids, one per test (they run at once): from the top down.
static SPARE: AtomicUsize = AtomicUsize::new(1);

/// What the helper is told: move to this CPU and disable preemption there,
/// or stop.
enum Order {
    MoveAndHold(usize),
    Stop,
}

struct Dance {
    to_helper: mpsc::Sender<Order>,
    acks: mpsc::Receiver<usize>,
    /// The free CPU id the checked task moves to next.
    free: usize,
    points: usize,
}

fn arm(dance: std::rc::Rc<std::cell::RefCell<Dance>>) {
    host::preempt_at_next_point(move || {
        {
            let mut d = dance.borrow_mut();
            d.points += 1;
            // Not through the hook: the task's id now.
            let left = kernel::cpu_id();
            let to = d.free;
            host::migrate_to(to);
            d.to_helper.send(Order::MoveAndHold(left)).unwrap();
            // The helper's old CPU is the next free one.
            d.free = d.acks.recv().unwrap();
        }
        arm(dance);
    });
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the count is debug builds'")]
fn might_sleep_after_a_migration_does_not_read_the_cpu_it_left() {
    dance_around_might_sleep(Hold::Preempt);
}

/// The same for the `ArchIrq` masking count (src/kernel/irq.rs
/// `masked_by_ksync`, whose comment says a stale read "can only hide a
/// use with interrupts on, never invent one").
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the count is debug builds'")]
fn might_sleep_after_a_migration_does_not_read_the_masking_of_the_cpu_it_left() {
    dance_around_might_sleep(Hold::ArchIrq);
}

/// The same with a spinlock held there (with `lockdep`, its per-CPU
/// record of held locks is read too).
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the count is debug builds'")]
fn might_sleep_after_a_migration_does_not_read_the_locks_of_the_cpu_it_left() {
    dance_around_might_sleep(Hold::Spin);
}

/// One dance at a time: the helpers share `HELPERS_LOCK`, and a thread
/// another test starts may claim the spare CPU id a dance moves to.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dance_around_might_sleep(hold: Hold) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(feature = "hostile")]
    host::hostile::set_enabled(false);
    let (to_helper, orders) = mpsc::channel::<Order>();
    let (ack, acks) = mpsc::channel::<usize>();
    let (ready_tx, ready) = mpsc::channel::<usize>();
    let helper = std::thread::spawn(move || {
        ready_tx.send(kernel::cpu_id()).unwrap();
        let mut held: Option<Held> = None;
        while let Ok(Order::MoveAndHold(cpu)) = orders.recv() {
            drop(held.take());
            let was = kernel::cpu_id();
            host::migrate_to(cpu);
            // Another task on that CPU, preemption disabled through ksync
            // (as a spinlock's holder has it).
            held = Some(match hold {
                Hold::Preempt => Held::Preempt(kernel::preempt_disable()),
                Hold::ArchIrq => Held::ArchIrq(IrqState::<ArchIrq>::save_with()),
                Hold::Spin => Held::Spin(HELPERS_LOCK.lock()),
            });
            ack.send(was).unwrap();
        }
        drop(held);
    });
    let helper_cpu = ready.recv().unwrap();
    let me = kernel::cpu_id();
    let free = kernel::nr_cpus() - SPARE.fetch_add(1, Relaxed);
    assert!(free != me && free != helper_cpu, "no spare CPU id");
    let dance = std::rc::Rc::new(std::cell::RefCell::new(Dance {
        to_helper: to_helper.clone(),
        acks,
        free,
        points: 0,
    }));
    arm(dance.clone());
    // This task holds nothing: it may sleep.
    let r = std::panic::catch_unwind(wait::might_sleep);
    // Disarm (a no-op switch replaces the dance).
    host::preempt_at_next_point(|| {});
    host::preemption_point();
    let points = dance.borrow().points;
    to_helper.send(Order::Stop).unwrap();
    helper.join().unwrap();
    assert!(
        r.is_ok(),
        "might_sleep, with nothing held or masked, reported: it read the count of the CPU it was \
         moved off ({points} preemption points inside might_sleep)"
    );
    assert!(
        points > 0,
        "no preemption point inside might_sleep: the test tested nothing"
    );
}
