//! loom models of the RCU-protected lists (`ksync::rcu::list`): a reader
//! racing an insertion sees the whole node or none of it; a reader racing
//! a removal or a replacement, the grace period and the free never reads
//! freed data and sees the replaced position filled.
//!
//! Run with `RUSTFLAGS="--cfg ksync_loom" KSYNC_MAX_CPUS=4 LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --test loom_rculist`. Each loom thread is a CPU.
//! A node's payload is a loom `UnsafeCell`, written by the writer before
//! the insertion and "freed" (overwritten) after the grace period, so loom
//! reports a reader whose read is not ordered after the initialisation or
//! before the free.
//!
//! Mutants checked by hand (each made the named model fail, then was
//! reverted): the publication store in `Head::link_at` Relaxed instead of
//! Release (`reader_sees_whole_inserted_node`, a causality violation on the
//! payload); the readers' loads in `Iter::next` and `Head::first` Relaxed
//! instead of Acquire (the same model); the store in `Head::unlink` Relaxed
//! instead of Release (`reader_racing_replace_sees_one`); a removal that
//! clears the removed node's `next` (`reader_racing_remove_never_sees_freed`:
//! the reader standing on it misses node 2); and that model without its
//! `synchronize` (a causality violation on the freed payload).
#![cfg(ksync_loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex, MutexGuard};
use loom::thread;

use ksync::rcu::{self, HeldLock, Link, RcuList};

#[path = "common/outcomes.rs"]
mod outcomes;
use outcomes::Outcomes;

const FREED: u64 = u64::MAX;

struct Node {
    data: UnsafeCell<u64>,
    link: Link,
}
ksync::impl_linked!(Node, link);

impl Node {
    /// A node whose payload `value` is written after construction, as a
    /// caller initialising its object would.
    fn new(value: u64) -> Self {
        let node = Node {
            data: UnsafeCell::new(0),
            link: Link::new(),
        };
        // SAFETY: not shared yet.
        node.data.with_mut(|p| unsafe { *p = value });
        node
    }

    fn read(&self) -> u64 {
        // SAFETY: the property under test: loom checks that the read is
        // ordered after the initialisation and before the free.
        let v = self.data.with(|p| unsafe { *p });
        assert_ne!(v, FREED, "read a freed node");
        v
    }

    fn free(&self) {
        // SAFETY: as for `read`.
        self.data.with_mut(|p| unsafe { *p = FREED });
    }
}

/// The writers' lock: loom's `Mutex`, identified by its address.
struct Held<'a> {
    _guard: MutexGuard<'a, ()>,
    id: usize,
}

// SAFETY: the guard holds the mutex at `id` exclusively while it lives.
unsafe impl HeldLock for Held<'_> {
    fn lock_id(&self) -> usize {
        self.id
    }
}

fn lock(m: &Mutex<()>) -> Held<'_> {
    Held {
        _guard: m.lock().unwrap(),
        id: m as *const Mutex<()> as usize,
    }
}

/// The list first, so that it is dropped while its nodes are alive.
struct World {
    list: RcuList<Node>,
    nodes: [Node; 2],
    lock: Mutex<()>,
}

impl World {
    /// A list holding `nodes[0]` (payload 1); `nodes[1]` is not on it,
    /// and gets its payload from `init_second`.
    fn new() -> Arc<Self> {
        let w = Arc::new(World {
            list: RcuList::new(),
            nodes: [Node::new(1), Node::new(0)],
            lock: Mutex::new(()),
        });
        // SAFETY: the nodes live in the `Arc` with the list, which is
        // dropped first, and never move.
        unsafe { w.list.push_front(&mut lock(&w.lock), &w.nodes[0]) };
        w
    }

    /// Writes node 2's payload (2): the writer does it after spawning the
    /// reader, so only the list's publication orders it for the reader.
    fn init_second(&self) {
        // SAFETY: node 2 is on no list yet: the reader cannot reach it.
        self.nodes[1].data.with_mut(|p| unsafe { *p = 2 });
    }

    /// One read section over the list: the payloads in order.
    fn read_all(&self) -> Vec<u64> {
        let guard = rcu::read_lock();
        self.list.iter(&guard).map(Node::read).collect()
    }
}

/// A reader CPU running one read section; returns what it saw.
fn reader(w: Arc<World>) -> thread::JoinHandle<Vec<u64>> {
    thread::spawn(move || {
        rcu::cpu_online();
        let seen = w.read_all();
        rcu::cpu_offline();
        seen
    })
}

/// A reader races `push_back`, `push_front` and `insert_after` of node 2:
/// it sees [1] or the list with node 2 in place, with its payload.
#[test]
fn reader_sees_whole_inserted_node() {
    for how in 0..3 {
        let outcomes = Outcomes::new();
        let o = outcomes.clone();
        loom::model(move || {
            let w = World::new();
            let r = reader(w.clone());
            let (n1, n2) = (&w.nodes[0], &w.nodes[1]);
            w.init_second();
            // SAFETY: as in `World::new`.
            unsafe {
                match how {
                    0 => w.list.push_back(&mut lock(&w.lock), n2),
                    1 => w.list.push_front(&mut lock(&w.lock), n2),
                    _ => w.list.insert_after(&mut lock(&w.lock), n1, n2),
                }
            }
            let seen = r.join().unwrap();
            let after = if how == 1 { [2, 1] } else { [1, 2] };
            if seen == [1] {
                o.record(0);
            } else {
                assert_eq!(seen, after, "a half-linked list");
                o.record(1);
            }
        });
        outcomes.assert_all_seen(2);
    }
}

/// List [1, 2]; the writer removes node 1, waits for a grace period and
/// frees it. The reader never reads it freed, and always reaches node 2
/// (standing on node 1 when it is removed, it carries on through node 1's
/// `next`).
#[test]
fn reader_racing_remove_never_sees_freed() {
    let outcomes = Outcomes::new();
    let o = outcomes.clone();
    loom::model(move || {
        let w = World::new();
        w.init_second();
        // SAFETY: as in `World::new`.
        unsafe { w.list.push_back(&mut lock(&w.lock), &w.nodes[1]) };
        let r = reader(w.clone());
        rcu::cpu_online();
        w.list.remove(&mut lock(&w.lock), &w.nodes[0]);
        rcu::synchronize();
        w.nodes[0].free();
        rcu::cpu_offline();
        let seen = r.join().unwrap();
        match seen[..] {
            [1, 2] => o.record(0),
            [2] => o.record(1),
            _ => panic!("the reader saw {seen:?}"),
        }
    });
    outcomes.assert_all_seen(2);
}

/// List [1]; the writer replaces node 1 by node 2 (initialised just
/// before), waits and frees node 1. The reader sees exactly one of them,
/// whole.
#[test]
fn reader_racing_replace_sees_one() {
    let outcomes = Outcomes::new();
    let o = outcomes.clone();
    loom::model(move || {
        let w = World::new();
        let r = reader(w.clone());
        rcu::cpu_online();
        w.init_second();
        // SAFETY: as in `World::new`.
        unsafe { w.list.replace(&mut lock(&w.lock), &w.nodes[0], &w.nodes[1]) };
        rcu::synchronize();
        w.nodes[0].free();
        rcu::cpu_offline();
        let seen = r.join().unwrap();
        match seen[..] {
            [1] => o.record(0),
            [2] => o.record(1),
            _ => panic!("the reader saw {seen:?}"),
        }
    });
    outcomes.assert_all_seen(2);
}
