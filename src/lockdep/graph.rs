//! The shared tables: lock classes, the dependency graph and its search.
//!
//! * `classes`: one slot per class (a key and a subclass), with where it
//!   was first taken and its first uses in and out of interrupt handlers.
//!   Keyed classes are found through `hash` (open addressing, linear
//!   probing, deletion by backward shift); freed per-instance classes go
//!   on a free stack.
//! * `ADJ`: the dependency matrix, one bit per (held class, taken class).
//!   It is read without the graph lock by the acquisition fast path (is
//!   this order already known?); only the graph lock's holder writes it,
//!   with plain loads and stores (no read-modify-write, so targets without
//!   compare-and-swap need nothing special).
//! * `radj`: the same matrix transposed (bit `from` of row `to`), for the
//!   searches that follow dependencies backward; plain words, written and
//!   read only under the graph lock.
//! * `XADJ`: the orders of `ADJ` seen at least once with the held class
//!   held for writing (an rwlock read in a handler leads on only through
//!   those); read and written as `ADJ`.
//! * `edges`: where each dependency was first seen, for reports only.
//! * `USAGE`: per-class bits, read without the lock, written under it.
//!
//! Everything here is reached through [`GraphGuard`], the graph lock: a
//! spin flag that lockdep does not track, taken only with interrupts
//! masked (by the engine), so it can neither recurse nor be interrupted by
//! a handler that takes it.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

use super::{LockClassKey, MAX_CLASSES, MAX_DEPENDENCIES, MAX_SUBCLASSES};
use crate::kernel::lockdep_report::{Class, Loc, Name};
use crate::sync::{AtomicBool, AtomicU32, Ordering, spin_loop};

/// Words of one row of the dependency matrix.
const WORDS: usize = MAX_CLASSES.div_ceil(32);
/// Slots of the class hash table: at most half full.
const HASH: usize = (2 * MAX_CLASSES).next_power_of_two();

// Class indices are `u16` (with one value to spare for "none").
const _: () = assert!(MAX_CLASSES < u16::MAX as usize);

/// No class: what a [`Graph::search`] target is told it came from for the
/// start class.
pub(super) const NO_CLASS: u16 = u16::MAX;

/// Usage bit: taken in an interrupt handler (not by a try-lock).
pub(super) const IN_IRQ: u32 = 1 << 0;
/// Usage bit: taken with interrupts enabled.
pub(super) const IRQS_ON: u32 = 1 << 1;
/// A recursion on this class was reported.
pub(super) const RECURSION_REPORTED: u32 = 1 << 2;
/// An interrupt inversion on this class was reported.
pub(super) const INVERSION_REPORTED: u32 = 1 << 3;
/// An IRQ-safe class leading to this IRQ-unsafe one was reported.
pub(super) const CHAIN_REPORTED: u32 = 1 << 4;
/// Usage bit: a seqlock reader of this (writers' lock's) class spun in an
/// interrupt handler. Not IRQ-safe (`IN_IRQ`): the reader waits only for
/// a publication, which takes no lock, so it conflicts only with this
/// class's own writers publishing with interrupts enabled.
pub(super) const IN_IRQ_READ: u32 = 1 << 5;
/// Usage bit: read-locked (a reader-writer spinlock's read, not a
/// try-lock) in an interrupt handler: Linux's `LOCK_USED_IN_HARDIRQ_READ`.
/// It waits only while a writer *holds* the lock, so it conflicts with
/// writes taken with interrupts enabled (`IRQS_ON`), not with reads
/// (`IRQS_ON_SHARED`: recursive reads). IRQ-safe for the chains across
/// classes only through an order taken with the class held for writing
/// (`XADJ`; Linux's `only_xr`): a CPU that holds it for reading lets the
/// handler's read in.
pub(super) const IN_IRQ_SHARED: u32 = 1 << 6;
/// Usage bit: read-locked with interrupts enabled: Linux's
/// `LOCK_ENABLED_HARDIRQ_READ`. Conflicts with a write in a handler
/// (`IN_IRQ`) only; IRQ-unsafe for the chains across classes, as
/// `IRQS_ON` (a read outside interrupt context queues behind a waiting
/// writer, so it can wait).
pub(super) const IRQS_ON_SHARED: u32 = 1 << 7;

/// The usage bits that conflict with `bit` (one of `IN_IRQ`,
/// `IN_IRQ_READ`, `IN_IRQ_SHARED`, `IRQS_ON`, `IRQS_ON_SHARED`) in one
/// class, as Linux's `mark_lock_irq`: a use in a handler, in any mode,
/// against a write with interrupts enabled; a write in a handler against
/// a read with interrupts enabled too. A read in a handler and a read
/// with interrupts enabled do not conflict.
pub(super) const fn conflicts(bit: u32) -> u32 {
    match bit {
        IN_IRQ => IRQS_ON | IRQS_ON_SHARED,
        IN_IRQ_READ | IN_IRQ_SHARED => IRQS_ON,
        IRQS_ON => IN_IRQ | IN_IRQ_READ | IN_IRQ_SHARED,
        IRQS_ON_SHARED => IN_IRQ,
        _ => 0,
    }
}

/// Which way a [`Graph::search`] follows the dependencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dir {
    /// From a held class to the classes taken under it.
    Forward,
    /// From a class to the classes held when it was taken.
    Backward,
}

/// A class's identity: its key and subclass.
#[derive(Clone, Copy, Debug)]
pub(super) enum Key {
    /// Built at this location.
    Location(Loc),
    /// An explicit key (by address).
    Named(&'static LockClassKey),
    /// A lock of its own class, at this address when first taken.
    Instance(usize),
}

impl Key {
    /// Whether two keys are the same class. Locations compare by value:
    /// one call site may be materialised more than once (inlining,
    /// codegen units).
    fn same(self, other: Key) -> bool {
        match (self, other) {
            (Key::Location(a), Key::Location(b)) => {
                a.line() == b.line() && a.column() == b.column() && a.file() == b.file()
            }
            (Key::Named(a), Key::Named(b)) => core::ptr::eq(a, b),
            (Key::Instance(a), Key::Instance(b)) => a == b,
            _ => false,
        }
    }

    fn hash(self, subclass: u8) -> usize {
        let h = match self {
            Key::Location(l) => {
                (l.line() as usize).wrapping_mul(0x9e37_79b9)
                    ^ (l.column() as usize) << 7
                    ^ l.file().len()
            }
            Key::Named(k) => core::ptr::from_ref(k) as usize >> 3,
            Key::Instance(a) => a >> 3,
        };
        (h ^ (subclass as usize).wrapping_mul(0x85eb_ca6b)).wrapping_mul(0x2545_f491) >> 5
    }

    fn name(self) -> Name {
        match self {
            Key::Location(l) => Name::Location(l),
            Key::Named(k) => Name::Named(k.name()),
            Key::Instance(a) => Name::Instance(a),
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct ClassSlot {
    /// `None`: free.
    pub(super) key: Option<Key>,
    pub(super) subclass: u8,
    /// First taken (for writing) in an interrupt handler, here (`IN_IRQ`).
    pub(super) irq_at: Option<Loc>,
    /// First taken (for writing) with interrupts enabled, here (`IRQS_ON`).
    pub(super) irqs_on_at: Option<Loc>,
    /// First read in an interrupt handler, here (`IN_IRQ_SHARED`, or a
    /// seqlock reader's `IN_IRQ_READ`).
    pub(super) irq_read_at: Option<Loc>,
    /// First read with interrupts enabled, here (`IRQS_ON_SHARED`).
    pub(super) irqs_on_read_at: Option<Loc>,
}

impl ClassSlot {
    const FREE: Self = Self {
        key: None,
        subclass: 0,
        irq_at: None,
        irqs_on_at: None,
        irq_read_at: None,
        irqs_on_read_at: None,
    };

    /// Where the class was first used as usage `bit` says.
    pub(super) fn use_at(&self, bit: u32) -> Option<Loc> {
        match bit {
            IN_IRQ => self.irq_at,
            IRQS_ON => self.irqs_on_at,
            IN_IRQ_READ | IN_IRQ_SHARED => self.irq_read_at,
            IRQS_ON_SHARED => self.irqs_on_read_at,
            _ => None,
        }
    }

    /// Records `at` as the class's first use as usage `bit` says.
    pub(super) fn set_use_at(&mut self, bit: u32, at: Option<Loc>) {
        match bit {
            IN_IRQ => self.irq_at = at,
            IRQS_ON => self.irqs_on_at = at,
            IN_IRQ_READ | IN_IRQ_SHARED => self.irq_read_at = at,
            IRQS_ON_SHARED => self.irqs_on_read_at = at,
            _ => {}
        }
    }

    /// The first recorded use among the usage bits `bits`, tried in the
    /// order write in a handler, write with interrupts enabled, read in a
    /// handler, read with interrupts enabled.
    pub(super) fn first_use_at(&self, bits: u32) -> Option<Loc> {
        [IN_IRQ, IRQS_ON, IN_IRQ_SHARED, IN_IRQ_READ, IRQS_ON_SHARED]
            .into_iter()
            .filter(|&bit| bits & bit != 0)
            .find_map(|bit| self.use_at(bit))
    }
}

/// Where a dependency was first seen.
#[derive(Clone, Copy)]
pub(super) struct Edge {
    pub(super) from: u16,
    pub(super) to: u16,
    pub(super) used: bool,
    pub(super) from_at: Option<Loc>,
    pub(super) to_at: Option<Loc>,
}

impl Edge {
    const FREE: Self = Self {
        from: 0,
        to: 0,
        used: false,
        from_at: None,
        to_at: None,
    };
}

/// Why a table refused an entry.
#[derive(Clone, Copy, Debug)]
pub(super) enum Full {
    Classes,
    Dependencies,
}

pub(super) struct Graph {
    classes: [ClassSlot; MAX_CLASSES],
    /// Class index + 1, 0 = empty.
    hash: [u16; HASH],
    /// Classes never used are `next_unused..`; freed ones are on `free`.
    next_unused: usize,
    free: [u16; MAX_CLASSES],
    free_len: usize,
    /// `ADJ` transposed: bit `from` of row `to`.
    radj: [[u32; WORDS]; MAX_CLASSES],
    edges: [Edge; MAX_DEPENDENCIES],
    /// Edges `..edge_high` have been used at least once.
    edge_high: usize,
    edge_live: usize,
    // Search scratch space (breadth-first; each class is queued at most
    // once, so a search never runs out of it).
    visited: [u32; WORDS],
    parent: [u16; MAX_CLASSES],
    queue: [u16; MAX_CLASSES],
}

struct Shared {
    locked: AtomicBool,
    graph: UnsafeCell<Graph>,
}

// SAFETY: `graph` is only reached through a `GraphGuard`, which holds
// `locked`: one context at a time.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared {
    locked: AtomicBool::new(false),
    graph: UnsafeCell::new(Graph {
        classes: [ClassSlot::FREE; MAX_CLASSES],
        hash: [0; HASH],
        next_unused: 0,
        free: [0; MAX_CLASSES],
        free_len: 0,
        radj: [[0; WORDS]; MAX_CLASSES],
        edges: [Edge::FREE; MAX_DEPENDENCIES],
        edge_high: 0,
        edge_live: 0,
        visited: [0; WORDS],
        parent: [0; MAX_CLASSES],
        queue: [0; MAX_CLASSES],
    }),
};

/// The dependency matrix: bit `to` of row `from` is set once class `to`
/// has been taken while `from` was held.
static ADJ: [[AtomicU32; WORDS]; MAX_CLASSES] =
    [const { [const { AtomicU32::new(0) }; WORDS] }; MAX_CLASSES];

/// `ADJ`'s orders seen at least once with the held class held
/// exclusively (not for reading): bit `to` of row `from`. Read and
/// written as `ADJ`.
static XADJ: [[AtomicU32; WORDS]; MAX_CLASSES] =
    [const { [const { AtomicU32::new(0) }; WORDS] }; MAX_CLASSES];

/// Per-class usage bits (`IN_IRQ`, ...).
static USAGE: [AtomicU32; MAX_CLASSES] = [const { AtomicU32::new(0) }; MAX_CLASSES];

/// Whether the order `from -> to` is already recorded. Lock-free: a stale
/// `false` only sends the caller to the graph lock, which looks again.
#[inline]
pub(super) fn edge_known(from: u16, to: u16) -> bool {
    let (word, bit) = (to as usize / 32, to as usize % 32);
    // Relaxed: the bit is only a hint here (see above); everything that
    // acts on it runs under the graph lock, whose Acquire orders it.
    ADJ[from as usize][word].load(Ordering::Relaxed) & (1 << bit) != 0
}

/// Whether the order `from -> to` was seen with `from` held exclusively.
/// Lock-free, as [`edge_known`].
#[inline]
pub(super) fn edge_known_exclusive(from: u16, to: u16) -> bool {
    let (word, bit) = (to as usize / 32, to as usize % 32);
    // Relaxed: as in `edge_known`.
    XADJ[from as usize][word].load(Ordering::Relaxed) & (1 << bit) != 0
}

/// The first class after `after` (from the first class if `None`) that
/// `class` leads to by an order seen with it held exclusively.
pub(super) fn next_exclusive_successor(class: u16, after: Option<u16>) -> Option<u16> {
    let from = after.map_or(0, |a| a as usize + 1);
    let row = &XADJ[class as usize];
    (from / 32..WORDS).find_map(|w| {
        // Relaxed: as in `edge_known` (callers hold the graph lock).
        let mut bits = row[w].load(Ordering::Relaxed);
        if w == from / 32 {
            bits &= !0u32 << (from % 32);
        }
        (bits != 0).then(|| (w * 32 + bits.trailing_zeros() as usize) as u16)
    })
}

/// A class's usage bits. Lock-free, as [`edge_known`].
#[inline]
pub(super) fn usage(class: u16) -> u32 {
    // Relaxed: a hint, re-read under the graph lock before acting.
    USAGE[class as usize].load(Ordering::Relaxed)
}

/// The graph lock, held.
pub(super) struct GraphGuard(());

impl GraphGuard {
    /// Takes the graph lock. The caller has interrupts masked.
    pub(super) fn lock() -> Self {
        // Acquire pairs with the Release store in `drop`: the previous
        // holder's table updates are visible.
        while SHARED
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while SHARED.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
        }
        GraphGuard(())
    }
}

impl Drop for GraphGuard {
    fn drop(&mut self) {
        // Release pairs with the Acquire in `lock`.
        SHARED.locked.store(false, Ordering::Release);
    }
}

impl Deref for GraphGuard {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        // SAFETY: the guard holds the graph lock (see `Shared`).
        unsafe { &*SHARED.graph.get() }
    }
}

impl DerefMut for GraphGuard {
    fn deref_mut(&mut self) -> &mut Graph {
        // SAFETY: the guard holds the graph lock and is borrowed mutably.
        unsafe { &mut *SHARED.graph.get() }
    }
}

impl Graph {
    fn find(&self, key: Key, subclass: u8) -> Result<u16, usize> {
        let mut i = key.hash(subclass) & (HASH - 1);
        loop {
            match self.hash[i] {
                0 => return Err(i),
                c => {
                    let slot = &self.classes[c as usize - 1];
                    if slot.subclass == subclass && slot.key.is_some_and(|k| k.same(key)) {
                        return Ok(c - 1);
                    }
                }
            }
            i = (i + 1) & (HASH - 1);
        }
    }

    /// The class of `(key, subclass)`, registered if new.
    pub(super) fn class(&mut self, key: Key, subclass: u8) -> Result<u16, Full> {
        let hole = match self.find(key, subclass) {
            Ok(class) => return Ok(class),
            Err(hole) => hole,
        };
        let class = if self.free_len > 0 {
            self.free_len -= 1;
            self.free[self.free_len]
        } else if self.next_unused < MAX_CLASSES {
            self.next_unused += 1;
            (self.next_unused - 1) as u16
        } else {
            return Err(Full::Classes);
        };
        self.classes[class as usize] = ClassSlot {
            key: Some(key),
            subclass,
            ..ClassSlot::FREE
        };
        self.hash[hole] = class + 1;
        Ok(class)
    }

    /// The key a class was registered with.
    pub(super) fn key_of(&self, class: u16) -> Option<Key> {
        self.classes[class as usize].key
    }

    /// How a report names `class`.
    pub(super) fn describe(&self, class: u16) -> Class {
        let slot = &self.classes[class as usize];
        Class {
            name: slot.key.map_or(Name::Named("?"), Key::name),
            subclass: slot.subclass,
        }
    }

    pub(super) fn slot(&self, class: u16) -> &ClassSlot {
        &self.classes[class as usize]
    }

    pub(super) fn slot_mut(&mut self, class: u16) -> &mut ClassSlot {
        &mut self.classes[class as usize]
    }

    /// Sets usage bits of `class`.
    pub(super) fn mark(&mut self, class: u16, bits: u32) {
        let old = USAGE[class as usize].load(Ordering::Relaxed);
        // Relaxed: readers use the bits as hints (see `usage`); the graph
        // lock orders every decision taken on them.
        USAGE[class as usize].store(old | bits, Ordering::Relaxed);
    }

    /// Frees the classes of a per-instance key (every subclass) when its
    /// lock is dropped: its edges, usage and hash entries go.
    pub(super) fn free_instance(&mut self, key: Key) {
        for subclass in 0..MAX_SUBCLASSES {
            if let Ok(class) = self.find(key, subclass) {
                self.free_class(class);
            }
        }
    }

    fn free_class(&mut self, class: u16) {
        // Unhash (backward-shift deletion keeps every probe chain whole).
        let slot = self.classes[class as usize];
        let Some(key) = slot.key else { return };
        let mut hole = key.hash(slot.subclass) & (HASH - 1);
        while self.hash[hole] != class + 1 {
            if self.hash[hole] == 0 {
                return;
            }
            hole = (hole + 1) & (HASH - 1);
        }
        self.hash[hole] = 0;
        let mut i = (hole + 1) & (HASH - 1);
        while self.hash[i] != 0 {
            let c = self.hash[i] - 1;
            let slot = &self.classes[c as usize];
            let home = slot.key.expect("a hashed class").hash(slot.subclass) & (HASH - 1);
            // Move the entry into the hole unless its home lies
            // (cyclically) after the hole and at or before `i`.
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.hash[hole] = self.hash[i];
                self.hash[i] = 0;
                hole = i;
            }
            i = (i + 1) & (HASH - 1);
        }
        // Forget its dependencies, both ways, in every matrix.
        let (word, bit) = (class as usize / 32, class as usize % 32);
        for (from, row) in ADJ.iter().chain(XADJ.iter()).enumerate() {
            let from = from % MAX_CLASSES;
            if from == class as usize {
                for w in row {
                    w.store(0, Ordering::Relaxed);
                }
            } else {
                let old = row[word].load(Ordering::Relaxed);
                if old & (1 << bit) != 0 {
                    row[word].store(old & !(1 << bit), Ordering::Relaxed);
                }
            }
        }
        for (to, row) in self.radj.iter_mut().enumerate() {
            if to == class as usize {
                *row = [0; WORDS];
            } else {
                row[word] &= !(1 << bit);
            }
        }
        for edge in &mut self.edges[..self.edge_high] {
            if edge.used && (edge.from == class || edge.to == class) {
                edge.used = false;
                self.edge_live -= 1;
            }
        }
        USAGE[class as usize].store(0, Ordering::Relaxed);
        self.classes[class as usize] = ClassSlot::FREE;
        self.free[self.free_len] = class;
        self.free_len += 1;
    }

    /// Records `from -> to`, first seen with `from` taken at `from_at` and
    /// `to` at `to_at`.
    pub(super) fn add_edge(
        &mut self,
        from: u16,
        to: u16,
        from_at: Option<Loc>,
        to_at: Option<Loc>,
    ) -> Result<(), Full> {
        if self.edge_live == MAX_DEPENDENCIES {
            return Err(Full::Dependencies);
        }
        let index = if self.edge_high < MAX_DEPENDENCIES {
            self.edge_high += 1;
            self.edge_high - 1
        } else {
            self.edges
                .iter()
                .position(|e| !e.used)
                .expect("edge_live < MAX_DEPENDENCIES")
        };
        self.edges[index] = Edge {
            from,
            to,
            used: true,
            from_at,
            to_at,
        };
        self.edge_live += 1;
        let (word, bit) = (to as usize / 32, to as usize % 32);
        let cell = &ADJ[from as usize][word];
        // Relaxed: see `edge_known`; the matrix is written only here and in
        // `free_class`, under the graph lock.
        cell.store(cell.load(Ordering::Relaxed) | 1 << bit, Ordering::Relaxed);
        self.radj[to as usize][from as usize / 32] |= 1 << (from % 32);
        Ok(())
    }

    /// Marks the known order `from -> to` as seen with `from` held
    /// exclusively.
    pub(super) fn mark_exclusive(&mut self, from: u16, to: u16) {
        let (word, bit) = (to as usize / 32, to as usize % 32);
        let cell = &XADJ[from as usize][word];
        // Relaxed: as in `add_edge`.
        cell.store(cell.load(Ordering::Relaxed) | 1 << bit, Ordering::Relaxed);
    }

    /// Where `from -> to` was first seen.
    pub(super) fn edge_info(&self, from: u16, to: u16) -> (Option<Loc>, Option<Loc>) {
        self.edges[..self.edge_high]
            .iter()
            .find(|e| e.used && e.from == from && e.to == to)
            .map_or((None, None), |e| (e.from_at, e.to_at))
    }

    /// Breadth-first search for a path `from -> ... -> to`. On success,
    /// `path` gets its classes in order (`from` first, `to` last; at most
    /// `path.len()` of them, the length is returned).
    pub(super) fn path(&mut self, from: u16, to: u16, path: &mut [u16]) -> Option<usize> {
        let found = self.search(from, Dir::Forward, true, |c, _| c == to)?;
        Some(self.chain(from, found, Dir::Forward, path))
    }

    /// Breadth-first search from `start` along the dependencies (`dir`)
    /// for the nearest class for which `target(class, via)` holds, `via`
    /// the class it was reached from ([`NO_CLASS`] for `start` itself,
    /// tried if `with_start`). Bounded: each class is visited at most once,
    /// and a visit reads one row of a matrix. [`chain`](Self::chain) then
    /// gives the path.
    pub(super) fn search(
        &mut self,
        start: u16,
        dir: Dir,
        with_start: bool,
        target: impl Fn(u16, u16) -> bool,
    ) -> Option<u16> {
        if with_start && target(start, NO_CLASS) {
            self.parent[start as usize] = start;
            return Some(start);
        }
        self.visited = [0; WORDS];
        self.visited[start as usize / 32] |= 1 << (start % 32);
        self.queue[0] = start;
        let (mut head, mut tail) = (0, 1);
        while head < tail {
            let node = self.queue[head];
            head += 1;
            for (w, cell) in ADJ[node as usize].iter().enumerate() {
                let row = match dir {
                    // Relaxed: see `edge_known`; the graph lock, held here,
                    // orders every write of the matrix before this read.
                    Dir::Forward => cell.load(Ordering::Relaxed),
                    Dir::Backward => self.radj[node as usize][w],
                };
                let mut bits = row & !self.visited[w];
                while bits != 0 {
                    let next = (w * 32 + bits.trailing_zeros() as usize) as u16;
                    bits &= bits - 1;
                    self.visited[w] |= 1 << (next % 32);
                    self.parent[next as usize] = node;
                    if target(next, node) {
                        return Some(next);
                    }
                    self.queue[tail] = next;
                    tail += 1;
                }
            }
        }
        None
    }

    /// The path the last [`search`](Self::search) from `start` took to
    /// `found`, in the direction of the dependencies: `start` first for
    /// [`Dir::Forward`], `found` first for [`Dir::Backward`]. `path` gets
    /// the first `path.len()` classes; the length is returned.
    pub(super) fn chain(&self, start: u16, found: u16, dir: Dir, path: &mut [u16]) -> usize {
        let mut len = 1;
        let mut node = found;
        while node != start {
            node = self.parent[node as usize];
            len += 1;
        }
        // Walk back from `found` again, keeping what fits: the walk's k-th
        // class is the path's `len - 1 - k`-th forward, its k-th backward.
        let keep = len.min(path.len());
        let mut node = found;
        for k in 0..len {
            let i = match dir {
                Dir::Forward => len - 1 - k,
                Dir::Backward => k,
            };
            if i < keep {
                path[i] = node;
            }
            node = self.parent[node as usize];
        }
        len
    }
}
