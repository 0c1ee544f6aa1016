//! Host tests of the RCU-protected lists (`ksync::rcu::list`): the API, the
//! misuse panics, and a threaded torture with its broken control (threads
//! play CPUs).

use std::mem::offset_of;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ksync::impl_linked;
use ksync::rcu::{self, Hlist, Link, RcuHashTable, RcuHead, RcuList};
use ksync::spinlock::{TicketMutex, TtasMutex};

// ---- API --------------------------------------------------------------------

struct Item {
    key: u32,
    link: Link,
    other: Link,
}
impl_linked!(Item, link);
/// The tag of `Item::other`: the same items on a second list.
struct Other;
impl_linked!(Item, other, Other);

/// Leaked, so that a test that panics half-way leaves no dangling node.
fn item(key: u32) -> &'static Item {
    Box::leak(Box::new(Item {
        key,
        link: Link::new(),
        other: Link::new(),
    }))
}

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// A read section on a test thread that is not otherwise an RCU CPU: the
/// thread comes online for it (debug builds check that RCU watches every
/// reader) and goes offline after, so it never holds up another test's
/// grace periods.
struct Reading(Option<rcu::ReadGuard>);

fn reading() -> Reading {
    rcu::cpu_online();
    Reading(Some(rcu::read_lock()))
}

impl std::ops::Deref for Reading {
    type Target = rcu::ReadGuard;
    fn deref(&self) -> &rcu::ReadGuard {
        self.0.as_ref().unwrap()
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        drop(self.0.take());
        rcu::cpu_offline();
    }
}

fn keys<Tag>(list: &RcuList<Item, Tag>) -> Vec<u32>
where
    Item: ksync::rcu::Linked<Tag>,
{
    list.iter(&reading()).map(|i| i.key).collect()
}

fn hkeys(list: &Hlist<Item>) -> Vec<u32> {
    list.iter(&reading()).map(|i| i.key).collect()
}

#[test]
fn list_insert_remove_replace() {
    let list: &RcuList<Item> = leak(RcuList::new());
    let lock = TicketMutex::new(());
    let w = &mut lock.lock();
    let [a, b, c, d, e] = [1, 2, 3, 4, 5].map(item);
    assert!(list.is_empty() && list.first(&reading()).is_none());
    // SAFETY: leaked items, valid for ever.
    unsafe {
        list.push_back(w, b);
        list.push_front(w, a);
        list.push_back(w, d);
        list.insert_after(w, b, c);
    }
    assert_eq!(keys(list), [1, 2, 3, 4]);
    assert!(a.link.is_linked() && !e.link.is_linked());
    // Removing the last node moves the tail back: the next push_back lands
    // after `c`.
    list.remove(w, d);
    assert!(!d.link.is_linked());
    // SAFETY: leaked nodes, valid for ever.
    unsafe { list.push_back(w, e) };
    assert_eq!(keys(list), [1, 2, 3, 5]);
    list.remove(w, a);
    list.remove(w, c);
    assert_eq!(keys(list), [2, 5]);
    // Replacing the last node makes the new one the tail.
    let f = item(6);
    // SAFETY: leaked nodes, valid for ever.
    unsafe { list.replace(w, e, f) };
    // SAFETY: leaked nodes, valid for ever.
    unsafe { list.push_back(w, item(7)) };
    assert_eq!(keys(list), [2, 6, 7]);
    let first = item(8);
    // SAFETY: leaked nodes, valid for ever.
    unsafe { list.replace(w, b, first) };
    assert_eq!(list.first(&reading()).map(|i| i.key), Some(8));
    assert_eq!(keys(list), [8, 6, 7]);
}

#[test]
fn hlist_insert_remove_replace() {
    let list: &Hlist<Item> = leak(Hlist::new());
    let lock = TtasMutex::new(());
    let w = &mut lock.lock();
    let [a, b, c, d] = [1, 2, 3, 4].map(item);
    // SAFETY: leaked items, valid for ever.
    unsafe {
        list.push_front(w, c);
        list.push_front(w, a);
        list.insert_after(w, a, b);
    }
    assert_eq!(hkeys(list), [1, 2, 3]);
    // SAFETY: leaked nodes, valid for ever.
    unsafe { list.replace(w, c, d) };
    assert_eq!(hkeys(list), [1, 2, 4]);
    list.remove(w, a);
    list.remove(w, d);
    assert_eq!(hkeys(list), [2]);
    list.remove(w, b);
    assert!(list.is_empty());
}

#[test]
fn one_object_on_two_lists() {
    let by_link: &RcuList<Item> = leak(RcuList::new());
    let by_other: &RcuList<Item, Other> = leak(RcuList::new());
    let lock = TicketMutex::new(());
    let w = &mut lock.lock();
    let items = [1, 2, 3].map(item);
    for i in items {
        // SAFETY: leaked items.
        unsafe {
            by_link.push_back(w, i);
            by_other.push_front(w, i);
        }
    }
    assert_eq!(keys(by_link), [1, 2, 3]);
    assert_eq!(keys(by_other), [3, 2, 1]);
    by_other.remove(w, items[1]);
    assert_eq!(keys(by_link), [1, 2, 3]);
    assert_eq!(keys(by_other), [3, 1]);
}

#[test]
fn hash_table_lookup_and_remove() {
    let table: &RcuHashTable<Item, 4> = leak(RcuHashTable::new());
    let lock = TicketMutex::new(());
    let w = &mut lock.lock();
    let items: Vec<&Item> = (0..12).map(item).collect();
    for i in &items {
        // SAFETY: leaked items.
        unsafe { table.insert(w, u64::from(i.key), i) };
    }
    let guard = reading();
    for key in 0..12 {
        let found = table.find(u64::from(key), &guard, |i| i.key == key);
        assert_eq!(found.map(|i| i.key), Some(key));
        assert!(table.iter_hash(u64::from(key), &guard).count() == 3);
    }
    table.remove(w, items[5]);
    assert!(table.find(5, &guard, |i| i.key == 5).is_none());
    assert_eq!(table.bucket(1).iter(&guard).count(), 2);
    assert_eq!(
        table
            .buckets()
            .iter()
            .map(|b| b.iter(&guard).count())
            .sum::<usize>(),
        11
    );
}

#[test]
fn reinsert_after_a_grace_period() {
    let list: &RcuList<Item> = leak(RcuList::new());
    let lock = TicketMutex::new(());
    let a = item(1);
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
    list.remove(&mut lock.lock(), a);
    rcu::synchronize();
    // SAFETY: leaked item.
    unsafe { list.push_back(&mut lock.lock(), a) };
    assert_eq!(keys(list), [1]);
}

#[test]
fn one_lock_for_many_buckets_or_one_each() {
    let table: &RcuHashTable<Item, 2> = leak(RcuHashTable::new());
    let locks = [TicketMutex::new(()), TicketMutex::new(())];
    for key in 0..4 {
        let i = item(key);
        let mut w = locks[key as usize % 2].lock();
        // SAFETY: leaked item.
        unsafe { table.insert(&mut w, u64::from(key), i) };
    }
    assert_eq!(table.iter_hash(1, &reading()).count(), 2);
}

#[test]
fn dropping_a_list_releases_its_nodes() {
    let lock = TicketMutex::new(());
    let a = item(1);
    {
        let list: RcuList<Item> = RcuList::new();
        // SAFETY: leaked item; the list does not move while `a` is on it.
        unsafe { list.push_front(&mut lock.lock(), a) };
    }
    assert!(!a.link.is_linked());
    let list: &RcuList<Item> = leak(RcuList::new());
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
}

// ---- misuse -----------------------------------------------------------------

#[test]
#[should_panic(expected = "rculist: inserting a node that is already on a list")]
fn double_insert_panics() {
    let list: &RcuList<Item> = leak(RcuList::new());
    let lock = TicketMutex::new(());
    let a = item(1);
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
    // SAFETY: leaked item.
    unsafe { list.push_back(&mut lock.lock(), a) };
}

#[test]
fn double_insert_leaves_the_list_intact() {
    let list: &Hlist<Item> = leak(Hlist::new());
    let other: &Hlist<Item> = leak(Hlist::new());
    let lock = leak(TicketMutex::new(()));
    let [a, b] = [1, 2].map(item);
    // SAFETY: leaked items.
    unsafe {
        list.push_front(&mut lock.lock(), b);
        list.push_front(&mut lock.lock(), a);
    }
    let panicked = thread::spawn(move || {
        // SAFETY: leaked item.
        unsafe { other.push_front(&mut lock.lock(), a) };
    })
    .join();
    assert!(panicked.is_err());
    assert_eq!(hkeys(list), [1, 2]);
    assert!(other.is_empty());
    list.remove(&mut lock.lock(), a);
    assert_eq!(hkeys(list), [2]);
}

#[test]
#[should_panic(expected = "rculist: remove: the node is not on a list")]
fn removing_a_non_member_panics() {
    let list: &RcuList<Item> = leak(RcuList::new());
    list.remove(&mut TicketMutex::new(()).lock(), item(1));
}

#[test]
#[should_panic(expected = "rculist: remove: the node was already removed")]
fn removing_twice_panics() {
    let list: &Hlist<Item> = leak(Hlist::new());
    let lock = TicketMutex::new(());
    let a = item(1);
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
    list.remove(&mut lock.lock(), a);
    list.remove(&mut lock.lock(), a);
}

#[test]
#[should_panic(expected = "rculist: remove: the node is on another list")]
fn removing_from_the_wrong_list_panics() {
    let [one, two]: [&RcuList<Item>; 2] = [leak(RcuList::new()), leak(RcuList::new())];
    let lock = TicketMutex::new(());
    let a = item(1);
    // SAFETY: leaked items.
    unsafe {
        one.push_front(&mut lock.lock(), a);
        two.push_front(&mut lock.lock(), item(2));
    }
    two.remove(&mut lock.lock(), a);
}

#[test]
#[should_panic(expected = "rculist: remove: the node is on another list")]
fn removing_from_the_wrong_table_panics() {
    let [one, two]: [&RcuHashTable<Item, 4>; 2] =
        [leak(RcuHashTable::new()), leak(RcuHashTable::new())];
    let lock = TicketMutex::new(());
    let a = item(1);
    // SAFETY: leaked item.
    unsafe { one.insert(&mut lock.lock(), 1, a) };
    two.remove(&mut lock.lock(), a);
}

#[test]
#[should_panic(expected = "rculist: insert_after (the anchor): the node is not on a list")]
fn anchor_off_the_list_panics() {
    let list: &RcuList<Item> = leak(RcuList::new());
    // SAFETY: leaked items.
    unsafe { list.insert_after(&mut TicketMutex::new(()).lock(), item(1), item(2)) };
}

#[test]
#[should_panic(expected = "rculist: this writer holds a different lock")]
fn a_second_lock_panics() {
    let list: &RcuList<Item> = leak(RcuList::new());
    let [l1, l2] = [TicketMutex::new(()), TicketMutex::new(())];
    // SAFETY: leaked items.
    unsafe {
        list.push_front(&mut l1.lock(), item(1));
        list.push_front(&mut l2.lock(), item(2));
    }
}

#[test]
#[should_panic(expected = "rculist: inserting a removed node before a grace period")]
fn reinsert_before_a_grace_period_panics() {
    let list: &RcuList<Item> = leak(RcuList::new());
    let lock = TicketMutex::new(());
    let a = item(1);
    // This CPU is watching and inside a read section, so no grace period
    // can end in between, whatever the other tests do.
    rcu::cpu_online();
    let _guard = rcu::read_lock();
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
    list.remove(&mut lock.lock(), a);
    // SAFETY: leaked item.
    unsafe { list.push_front(&mut lock.lock(), a) };
}

// ---- torture ----------------------------------------------------------------

const MAGIC: u64 = 0x5eed_1157_0b1e_c75a;
const POISON: u64 = 0xdead_dead_dead_dead;
/// Nodes on the list the writers keep it near.
const TARGET: usize = 24;
const BUCKETS: usize = 8;

struct ListTag;
struct HashTag;

/// A torture node, on the list and in the table at once.
struct Node {
    magic: AtomicU64,
    freed: AtomicBool,
    key: AtomicU64,
    list_link: Link,
    hash_link: Link,
    rcu: RcuHead,
    world: &'static World,
}
impl_linked!(Node, list_link, ListTag);
impl_linked!(Node, hash_link, HashTag);

struct World {
    list: RcuList<Node, ListTag>,
    table: RcuHashTable<Node, BUCKETS, HashTag>,
    /// The writers' lock; it guards the live nodes (for picking victims).
    writers: TtasMutex<Vec<&'static Node>>,
    /// Nodes freed after a grace period, for reuse.
    pool: Mutex<Vec<&'static Node>>,
    /// Reader failures: a poisoned or freed node seen.
    errors: AtomicUsize,
    reads: AtomicU64,
    /// Operations by kind: push_front, push_back, insert_after, replace, remove.
    ops: [AtomicU64; 5],
    frees: AtomicU64,
    /// Nodes ever allocated: a walk that visits more than that many went
    /// round a cycle (a node is visited at most once per walk: none is
    /// freed, so none is reused, while the reader's section is open).
    allocated: AtomicU64,
    stop: AtomicBool,
}

unsafe fn free_node(head: *mut RcuHead) {
    // SAFETY: queued by `retire` as the `rcu` field of a leaked `Node`.
    let node = unsafe { &*head.byte_sub(offset_of!(Node, rcu)).cast::<Node>() };
    node.magic.store(POISON, SeqCst);
    node.freed.store(true, SeqCst);
    node.world.frees.fetch_add(1, SeqCst);
    node.world.pool.lock().unwrap().push(node);
}

/// Frees a removed node: after a grace period, or at once (the control).
fn retire(node: &'static Node, grace: bool) {
    if grace {
        // SAFETY: removed from both lists; the head is idle (the node's
        // previous callback ran before it returned to the pool).
        // SAFETY: leaked nodes, valid for ever.
        unsafe { rcu::call_rcu(&node.rcu as *const RcuHead as *mut RcuHead, free_node) };
    } else {
        // No grace period: the memory "is reused" now. The node is leaked,
        // never reused (its link still says "removed"), so readers that
        // find it read valid memory and see the poison.
        node.magic.store(POISON, SeqCst);
        node.freed.store(true, SeqCst);
    }
}

fn check(world: &World, node: &Node) {
    let ok = |n: &Node| n.magic.load(SeqCst) == MAGIC && !n.freed.load(SeqCst);
    let mut good = ok(node);
    // Dawdle on the node, as a reader doing real work would: a writer that
    // frees without a grace period gets its chance to do it under us.
    for _ in 0..200 {
        std::hint::spin_loop();
    }
    good &= ok(node);
    if !good {
        world.errors.fetch_add(1, SeqCst);
    }
}

fn reader(world: &World, seed: u64) {
    let mut rng = seed;
    let mut n = 0u64;
    while !world.stop.load(SeqCst) {
        {
            let guard = rcu::read_lock();
            let mut len = 0;
            for node in world.list.iter(&guard) {
                check(world, node);
                len += 1;
                // Not a fixed bound: a reader slower than the writers'
                // push_backs chases the tail through ever new nodes.
                assert!(
                    len <= world.allocated.load(SeqCst),
                    "the list has a cycle: a walk of {len} nodes, {} allocated",
                    world.allocated.load(SeqCst)
                );
            }
            rng = xorshift(rng);
            for node in world.table.iter_hash(rng, &guard) {
                check(world, node);
            }
        }
        world.reads.fetch_add(1, SeqCst);
        rcu::quiescent_state();
        n += 1;
        if n % 32 == 0 {
            rcu::process_callbacks();
        }
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^ (x << 17)
}

fn writer(world: &'static World, seed: u64, grace: bool) {
    let mut rng = seed;
    let new_node = |key: u64| -> &'static Node {
        let reused = if grace {
            world.pool.lock().unwrap().pop()
        } else {
            None
        };
        let node = reused.unwrap_or_else(|| {
            world.allocated.fetch_add(1, SeqCst);
            Box::leak(Box::new(Node {
                magic: AtomicU64::new(0),
                freed: AtomicBool::new(true),
                key: AtomicU64::new(0),
                list_link: Link::new(),
                hash_link: Link::new(),
                rcu: RcuHead::new(),
                world,
            }))
        });
        node.key.store(key, SeqCst);
        node.magic.store(MAGIC, SeqCst);
        node.freed.store(false, SeqCst);
        node
    };
    while !world.stop.load(SeqCst) {
        rng = xorshift(rng);
        let mut live = world.writers.lock();
        let pick = (rng >> 32) as usize % live.len().max(1);
        let op = if live.len() < TARGET / 2 {
            rng % 3
        } else if live.len() > TARGET * 2 {
            4
        } else {
            rng % 5
        };
        let key = rng >> 40;
        let mut freed = None;
        // The insertions' contract: nodes are leaked, and reused only after
        // a grace period since their removal (`free_node` feeds the pool).
        match op {
            0..=2 if op < 2 || live.is_empty() => {
                let node = new_node(key);
                // SAFETY: leaked nodes, valid for ever.
                unsafe {
                    if op == 0 {
                        world.list.push_front(&mut live, node);
                    } else {
                        world.list.push_back(&mut live, node);
                    }
                    world.table.insert(&mut live, key, node);
                }
                live.push(node);
            }
            2 => {
                let node = new_node(key);
                let anchor = live[pick];
                // SAFETY: leaked nodes, valid for ever.
                unsafe {
                    world.list.insert_after(&mut live, anchor, node);
                    world.table.insert(&mut live, key, node);
                }
                live.push(node);
            }
            3 if !live.is_empty() => {
                let old = live[pick];
                let old_key = old.key.load(SeqCst);
                let node = new_node(old_key);
                // SAFETY: leaked nodes, valid for ever.
                unsafe {
                    world.list.replace(&mut live, old, node);
                    world.table.bucket(old_key).replace(&mut live, old, node);
                }
                live[pick] = node;
                freed = Some(old);
            }
            _ if !live.is_empty() => {
                let old = live.swap_remove(pick);
                world.list.remove(&mut live, old);
                world.table.remove(&mut live, old);
                freed = Some(old);
            }
            _ => continue,
        }
        world.ops[op as usize].fetch_add(1, SeqCst);
        drop(live);
        if let Some(old) = freed {
            retire(old, grace);
        }
        rcu::quiescent_state();
        rcu::process_callbacks();
    }
}

/// Runs `f` on a thread of its own; a run longer than `limit` is a hang
/// and fails the test.
fn with_timeout<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || tx.send(f()).unwrap());
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung for {limit:?}"),
        // `f` panicked: pass its panic on.
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!(),
        },
    }
}

/// How much a torture run does (see [`torture`]).
#[derive(Clone, Copy)]
struct Work {
    /// Running time at least.
    time: Duration,
    /// Reader passes over the list and a hash chain.
    reads: u64,
    /// Runs of each writer operation.
    ops: u64,
}

/// Watchdog of the torture runs: only a hang takes this long. Each run
/// took 0.2-10 s at host load 12-18 on a 2-core machine (with lockdep
/// too).
const HANG: Duration = Duration::from_secs(120);

struct Outcome {
    errors: usize,
    reads: u64,
    ops: [u64; 5],
    frees: u64,
}

/// Two readers and two writers (4 threads on this 2-core machine). With
/// `grace`, removed nodes are freed through `call_rcu` and reused; without,
/// they are freed at once and the run goes on until a reader notices (or
/// `work` is done).
///
/// The run ends once `work.time` has passed, the readers have made
/// `work.reads` passes and every writer operation has run `work.ops`
/// times: a loaded machine takes longer but tests at least as much, and
/// only a hang (the callers' watchdog, far above any loaded run) is a
/// failure of time.
fn torture(grace: bool, work: Work) -> Outcome {
    let world: &'static World = leak(World {
        list: RcuList::new(),
        table: RcuHashTable::new(),
        writers: TtasMutex::new(Vec::new()),
        pool: Mutex::new(Vec::new()),
        errors: AtomicUsize::new(0),
        reads: AtomicU64::new(0),
        ops: Default::default(),
        frees: AtomicU64::new(0),
        allocated: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                rcu::cpu_online();
                let seed = 0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0x2545_f491);
                if t < 2 {
                    reader(world, seed);
                } else {
                    writer(world, seed, grace);
                }
                rcu::cpu_offline();
            });
        }
        let done = || {
            start.elapsed() >= work.time
                && world.reads.load(SeqCst) >= work.reads
                && world.ops.iter().all(|o| o.load(SeqCst) >= work.ops)
        };
        while !done() && (grace || world.errors.load(SeqCst) == 0) {
            thread::sleep(Duration::from_millis(5));
        }
        world.stop.store(true, SeqCst);
    });
    // Free what is left, and let every callback run.
    let mut live = world.writers.lock();
    for node in std::mem::take(&mut *live) {
        world.list.remove(&mut live, node);
        world.table.remove(&mut live, node);
        retire(node, grace);
    }
    drop(live);
    rcu::barrier();
    Outcome {
        errors: world.errors.load(SeqCst),
        reads: world.reads.load(SeqCst),
        ops: world.ops.each_ref().map(|o| o.load(SeqCst)),
        frees: world.frees.load(SeqCst),
    }
}

#[test]
fn torture_readers_never_see_freed_nodes() {
    let out = with_timeout(HANG, || {
        torture(
            true,
            Work {
                time: Duration::from_millis(1500),
                reads: 1_000,
                ops: 100,
            },
        )
    });
    eprintln!(
        "torture: {} reads, ops (front, back, after, replace, remove) {:?}, {} freed",
        out.reads, out.ops, out.frees
    );
    assert_eq!(out.errors, 0, "readers saw {} freed nodes", out.errors);
    assert!(out.reads > 0, "no reads: the test proved nothing");
    assert!(
        out.ops.iter().all(|&n| n > 0),
        "every operation ran: {:?}",
        out.ops
    );
    // Every node inserted was removed (or replaced, or drained at the end)
    // and freed by its callback.
    assert_eq!(out.frees, out.ops[..4].iter().sum::<u64>());
}

/// The control: freeing without a grace period must be caught. It stops at
/// the first bad read (after 20,000 to 45,000 reads here at host load 15,
/// about 1,000 with lockdep); a run of 2,000,000 reads without one fails.
#[test]
fn torture_catches_freeing_without_a_grace_period() {
    let out = with_timeout(HANG, || {
        torture(
            false,
            Work {
                time: Duration::ZERO,
                reads: 2_000_000,
                ops: 0,
            },
        )
    });
    eprintln!(
        "control: {} bad reads after {} reads, ops {:?}",
        out.errors, out.reads, out.ops
    );
    assert!(
        out.errors > 0,
        "the torture cannot tell a missing grace period: {} reads, ops {:?}",
        out.reads,
        out.ops
    );
}
