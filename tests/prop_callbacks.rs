//! Property tests of the `call_rcu` callback lists: random sequences of
//! queuing (including double queuing, refused), read sections, quiescent
//! states, grace periods, batches (1 to `usize::MAX`) and barriers, against
//! a model: the queue order.
//!
//! On one CPU the lists are FIFO, so the callbacks that ran are always a
//! prefix of the queue order; none runs while a read section that was open
//! when it was queued is still open; each runs exactly once; after a grace
//! period and an unlimited batch every earlier callback has run; a barrier
//! leaves nothing pending.
#![cfg(not(ksync_loom))]

use std::mem::offset_of;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use ksync::rcu::{self, RcuHead};
use proptest::prelude::*;

#[path = "common/prop.rs"]
mod prop;
use prop::{quiet_expected_panics, serial};

struct Item {
    head: RcuHead,
    id: usize,
    runs: AtomicUsize,
}

/// The ids of the callbacks that ran, in order.
static LOG: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe fn record(head: *mut RcuHead) {
    // SAFETY: every head queued with `record` is the `head` of a leaked
    // `Item`.
    let item = unsafe { &*head.byte_sub(offset_of!(Item, head)).cast::<Item>() };
    item.runs.fetch_add(1, SeqCst);
    LOG.lock().unwrap().push(item.id);
}

fn items(n: usize) -> &'static [Item] {
    let v: Vec<Item> = (0..n)
        .map(|id| Item {
            head: RcuHead::new(),
            id,
            runs: AtomicUsize::new(0),
        })
        .collect();
    Box::leak(v.into_boxed_slice())
}

fn queue(item: &Item) {
    let head = &item.head as *const RcuHead as *mut RcuHead;
    // SAFETY: leaked items stay valid; a head still queued is refused
    // (a panic) without being touched.
    unsafe { rcu::call_rcu(head, record) };
}

const ITEMS: usize = 12;

#[derive(Clone, Debug)]
enum Op {
    Queue(usize),
    Process(usize),
    ProcessDefault,
    /// Open a read section, or close the open one.
    ToggleRead,
    QuiescentState,
    IdleCycle,
    Synchronize,
    Barrier,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..ITEMS).prop_map(Op::Queue),
        2 => prop_oneof![Just(1usize), Just(2), Just(16), Just(usize::MAX)].prop_map(Op::Process),
        2 => Just(Op::ProcessDefault),
        2 => Just(Op::ToggleRead),
        2 => Just(Op::QuiescentState),
        1 => Just(Op::IdleCycle),
        2 => Just(Op::Synchronize),
        1 => Just(Op::Barrier),
    ]
}

proptest! {
    #![proptest_config(prop::config())]

    #[test]
    fn callback_lists_match_the_model(ops in proptest::collection::vec(op(), 1..64)) {
        let _serial = serial();
        quiet_expected_panics("rcu: call_rcu on a head that is already queued");
        LOG.lock().unwrap().clear();
        rcu::cpu_online();
        prop_assert_eq!(rcu::pending_callbacks(), 0, "left over from before");
        let items = items(ITEMS);
        // The model: ids in queue order, whether each is queued now, the
        // queue length when the open read section started, and how many
        // had been queued before the latest completed grace period.
        let mut order: Vec<usize> = Vec::new();
        let mut queued = [false; ITEMS];
        let mut guard: Option<(rcu::ReadGuard, usize)> = None;
        let mut before_gp = 0;
        for op in &ops {
            let ran_before = LOG.lock().unwrap().len();
            match *op {
                Op::Queue(i) => {
                    let r = catch_unwind(AssertUnwindSafe(|| queue(&items[i])));
                    prop_assert_eq!(r.is_err(), queued[i], "double call_rcu must panic, and only that");
                    if !queued[i] {
                        queued[i] = true;
                        order.push(i);
                    }
                }
                Op::Process(limit) => {
                    let n = rcu::process_callbacks_max(limit);
                    prop_assert!(n <= limit);
                    prop_assert_eq!(LOG.lock().unwrap().len() - ran_before, n);
                    if limit == usize::MAX && guard.is_none() {
                        prop_assert!(LOG.lock().unwrap().len() >= before_gp, "a completed callback was left");
                    }
                }
                Op::ProcessDefault => {
                    let n = rcu::process_callbacks();
                    prop_assert!(n <= rcu::CALLBACK_BATCH);
                    prop_assert_eq!(LOG.lock().unwrap().len() - ran_before, n);
                }
                Op::ToggleRead => match guard.take() {
                    Some((g, _)) => drop(g),
                    None => guard = Some((rcu::read_lock(), order.len())),
                },
                // Reporting or waiting inside a read section is a bug (debug
                // builds panic): these only run outside one.
                Op::QuiescentState if guard.is_none() => rcu::quiescent_state(),
                Op::IdleCycle if guard.is_none() => {
                    rcu::idle_enter();
                    rcu::idle_exit();
                }
                Op::Synchronize if guard.is_none() => {
                    before_gp = order.len();
                    rcu::synchronize();
                }
                Op::Barrier if guard.is_none() => {
                    rcu::barrier();
                    prop_assert_eq!(LOG.lock().unwrap().len(), order.len(), "barrier left callbacks");
                    prop_assert_eq!(rcu::pending_callbacks(), 0);
                }
                _ => {}
            }
            let log = LOG.lock().unwrap().clone();
            // FIFO: what ran is a prefix of the queue order.
            prop_assert_eq!(&log[..], &order[..log.len()], "callbacks out of order");
            if let Some((_, open_at)) = &guard {
                prop_assert!(log.len() <= *open_at, "a callback ran inside a read section that predates it");
            }
            for i in &log[ran_before..] {
                queued[*i] = false;
            }
            let pending = order.len() - log.len();
            prop_assert_eq!(rcu::pending_callbacks(), pending);
            prop_assert_eq!(rcu::has_callbacks(), pending != 0);
        }
        drop(guard);
        rcu::barrier();
        let log = std::mem::take(&mut *LOG.lock().unwrap());
        prop_assert_eq!(log, order.clone());
        for (i, item) in items.iter().enumerate() {
            let times = order.iter().filter(|&&j| j == i).count();
            prop_assert_eq!(item.runs.load(SeqCst), times, "item {} ran a wrong number of times", i);
        }
        rcu::cpu_offline();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Threads (CPUs) queue callbacks between read sections and quiescent
    /// states, run batches, and some go offline with callbacks still
    /// queued (adopted): after a barrier every callback ran exactly once.
    #[test]
    fn callbacks_on_many_cpus_run_once(
        plans in proptest::collection::vec((proptest::collection::vec(0..4u8, 1..120), any::<bool>()), 2..4),
    ) {
        let _serial = serial();
        LOG.lock().unwrap().clear();
        let pools: Vec<&'static [Item]> = plans.iter().map(|(plan, _)| items(plan.len())).collect();
        std::thread::scope(|s| {
            for ((plan, drain), pool) in plans.iter().zip(&pools) {
                s.spawn(move || {
                    rcu::cpu_online();
                    for (step, item) in plan.iter().zip(pool.iter()) {
                        match step {
                            0 => queue(item),
                            1 => {
                                let _g = rcu::read_lock();
                                queue(item);
                            }
                            2 => {
                                queue(item);
                                rcu::process_callbacks_max(1);
                            }
                            _ => {
                                queue(item);
                                rcu::quiescent_state();
                                rcu::process_callbacks();
                            }
                        }
                    }
                    if *drain {
                        rcu::barrier();
                    }
                    rcu::cpu_offline();
                });
            }
        });
        rcu::cpu_online();
        rcu::barrier();
        rcu::cpu_offline();
        prop_assert_eq!(rcu::pending_callbacks(), 0);
        for pool in &pools {
            for item in pool.iter() {
                prop_assert_eq!(item.runs.load(SeqCst), 1, "callback {} ran a wrong number of times", item.id);
            }
        }
        LOG.lock().unwrap().clear();
    }
}
