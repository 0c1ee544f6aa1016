//! Review (reviewg) demonstration: `might_sleep` with nothing held reads
//! ksync's debug preemption count (`PREEMPT_OFF`, src/kernel.rs
//! `preempt_disabled_by_ksync`) on a CPU id it read with preemption
//! enabled. A preemptible kernel may move the task right after the id is
//! read (the `Kernel` contract; the host's `cpu_id` is such a point); the
//! count read is then the CPU the task left, where another task may hold
//! a spinlock or a `preempt_disable` section: `might_sleep` reports "a
//! sleeping wait with preemption disabled on this CPU" for a task that
//! holds nothing. (Linux's `preempt_count()` is the task's own, read in
//! one instruction: no such window.)
//!
//! The host's scheduler is played by hand: at every preemption point of
//! the checked task (re-armed after each), the task moves to a free CPU
//! and a helper task moves onto the CPU it left and disables preemption
//! there through ksync.

use std::sync::mpsc;

use ksync::{host, kernel, wait};

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
#[ignore = "reviewg: demonstrates a false might_sleep report after a migration (fails when run)"]
fn might_sleep_after_a_migration_does_not_read_the_cpu_it_left() {
    #[cfg(feature = "hostile")]
    host::hostile::set_enabled(false);
    let (to_helper, orders) = mpsc::channel::<Order>();
    let (ack, acks) = mpsc::channel::<usize>();
    let (ready_tx, ready) = mpsc::channel::<usize>();
    let helper = std::thread::spawn(move || {
        ready_tx.send(kernel::cpu_id()).unwrap();
        let mut held: Option<kernel::PreemptGuard> = None;
        while let Ok(Order::MoveAndHold(cpu)) = orders.recv() {
            drop(held.take());
            let was = kernel::cpu_id();
            host::migrate_to(cpu);
            // Another task on that CPU, preemption disabled through ksync
            // (as a spinlock's holder has it).
            held = Some(kernel::preempt_disable());
            ack.send(was).unwrap();
        }
        drop(held);
    });
    let helper_cpu = ready.recv().unwrap();
    let me = kernel::cpu_id();
    let free = (0..kernel::nr_cpus())
        .rev()
        .find(|&c| c != me && c != helper_cpu)
        .unwrap();
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
        "might_sleep, with nothing held, reported preemption disabled: it read the count of the \
         CPU it was moved off ({points} preemption points inside might_sleep)"
    );
    assert!(
        points > 0,
        "no preemption point inside might_sleep: the test tested nothing"
    );
}
