//! The checks: per-task held-lock stacks, and what an acquisition and a
//! release look at (the module docs of [`lockdep`](super) walk through
//! them). The shared tables are in `graph`.
//!
//! Held locks belong to the task that took them (Linux's
//! `current->held_locks`), found by the kernel's
//! [`Kernel::current_task`](crate::kernel::Kernel::current_task): a task
//! that sleeps holding a sleeping lock keeps it on its own stack while
//! other tasks run on its CPU, and takes it along when it migrates. An
//! interrupt handler runs as the task it interrupted, as in Linux. With
//! the default token (the CPU's id + 1: no scheduler), a stack per CPU.
//!
//! A task has a slot in a fixed table ([`TASK_SLOTS`]) only while it holds
//! locks. A slot's stack is touched only by its task, with interrupts
//! masked through the kernel's raw hooks (not counted as "masked by
//! ksync", and never through a tracked lock), and a `busy` flag turns away
//! a nested call into lockdep (a kernel hook that takes a ksync lock)
//! instead of corrupting the stack.

use core::cell::UnsafeCell;

use super::graph::{
    self, CHAIN_REPORTED, Dir, Full, GraphGuard, IN_IRQ, IN_IRQ_READ, IN_IRQ_SHARED,
    INVERSION_REPORTED, IRQS_ON, IRQS_ON_SHARED, Key, NO_CLASS, RECURSION_REPORTED, conflicts,
};
use super::{MAX_CLASSES, MAX_DEPENDENCIES, MAX_LOCK_DEPTH, MAX_SUBCLASSES, Map, MapKey};
use crate::kernel::lockdep_report::{
    Class, Link, Loc, Name, REPORT_CHAIN, Report, ReportKind, Site,
};
use crate::kernel::{self, MAX_CPUS};
use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// Checking is on until a table fills (it never comes back on).
/// Written only under the graph lock.
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Held-entry flag: taken by a successful try-lock.
const TRY: u8 = 1 << 0;
/// Held-entry flag: taken in an interrupt handler.
const IN_HANDLER: u8 = 1 << 1;
/// Held-entry flag: a sleeping lock (a mutex): its holder may sleep, so
/// it does not count for "locks held where one may not sleep".
const SLEEPING: u8 = 1 << 2;
/// Held-entry flag: held shared (a reader-writer lock's read).
const SHARED: u8 = 1 << 3;
/// Held-entry flag: a recursive read (Linux's `read == 2`): it never
/// waits for a waiting writer, so, as a try-lock, it adds no lock order
/// and is no recursion; unlike one, it does wait for a writer that holds
/// the lock, so it counts as interrupt usage.
const RECURSIVE: u8 = 1 << 4;

/// How an acquisition holds its lock (Linux's `read` argument of
/// `lock_acquire`: 0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// For writing (every lock that is not a reader-writer one).
    Exclusive,
    /// For reading, waiting behind a waiting writer (a fair rwlock's
    /// read outside interrupt context).
    Shared,
    /// For reading, never behind a waiting writer (a queued rwlock's read
    /// in interrupt context, or one its upgradeable holder takes).
    SharedRecursive,
}

/// One held lock.
#[derive(Clone, Copy)]
struct Held {
    /// The `Map`'s address: which lock.
    map: usize,
    class: u16,
    subclass: u8,
    flags: u8,
    at: Option<Loc>,
}

impl Held {
    const EMPTY: Self = Self {
        map: 0,
        class: 0,
        subclass: 0,
        flags: 0,
        at: None,
    };
}

struct CpuState {
    held: [Held; MAX_LOCK_DEPTH],
    depth: usize,
    /// Inside lockdep in this task.
    busy: bool,
}

/// The number of tasks that can hold locks at once: two per possible CPU
/// (each CPU's running task and one sleeping holder of a sleeping lock,
/// on average); `KSYNC_LOCKDEP_TASKS` at build time. A task past it is a
/// [`TableFull`](ReportKind::TableFull) report, after which checking is
/// off.
pub(crate) const TASK_SLOTS: usize = match option_env!("KSYNC_LOCKDEP_TASKS") {
    Some(text) => match crate::kernel::parse_setting(text, 1 << 16) {
        Some(value) if value >= 1 => value,
        _ => panic!("KSYNC_LOCKDEP_TASKS must be a decimal number from 1 to 65536"),
    },
    None => 2 * MAX_CPUS,
};

struct Slots {
    /// The task token of each slot's owner, 0 when free.
    owners: [AtomicUsize; TASK_SLOTS],
    stacks: UnsafeCell<[CpuState; TASK_SLOTS]>,
}

// SAFETY: a slot's stack is touched only by the task that claimed it (its
// owner's compare-exchange), with its CPU's interrupts masked
// (`with_cpu`), and `busy` turns away nested calls; `task_exit` frees the
// slot of a task that is gone. So no two contexts use one stack at once.
unsafe impl Sync for Slots {}

static SLOTS: Slots = Slots {
    owners: [const { AtomicUsize::new(0) }; TASK_SLOTS],
    stacks: UnsafeCell::new(
        [const {
            CpuState {
                held: [Held::EMPTY; MAX_LOCK_DEPTH],
                depth: 0,
                busy: false,
            }
        }; TASK_SLOTS],
    ),
};

/// This task's slot: the one it owns, or a free one it claims
/// (`None` if every slot is taken).
fn slot_of(task: usize) -> Option<usize> {
    let start = task.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) % TASK_SLOTS;
    let mut free = None;
    for i in 0..TASK_SLOTS {
        let slot = (start + i) % TASK_SLOTS;
        // Relaxed: only this task stores its own token, so it finds it
        // (program order); other values only say "not mine".
        match SLOTS.owners[slot].load(Ordering::Relaxed) {
            t if t == task => return Some(slot),
            0 if free.is_none() => free = Some(slot),
            _ => {}
        }
    }
    let mut slot = free?;
    loop {
        // Acquire: pairs with the Release that freed the slot, so the
        // previous owner's last writes to the stack are seen.
        if SLOTS.owners[slot]
            .compare_exchange(0, task, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Some(slot);
        }
        slot = (slot + 1..slot + TASK_SLOTS)
            .map(|s| s % TASK_SLOTS)
            .find(|&s| SLOTS.owners[s].load(Ordering::Relaxed) == 0)?;
    }
}

/// Runs `f` on this task's held-lock stack, with interrupts masked;
/// `None` if lockdep is already running in this task (a nested call from
/// a hook). `f` also gets this CPU's id, for reports. A task left holding
/// nothing gives its slot back.
#[inline]
fn with_cpu<R>(f: impl FnOnce(&mut CpuState, usize) -> R) -> Option<R> {
    with_cpu_of(kernel::irq::cpu_id_unchecked, f)
}

/// [`with_cpu`] with the CPU id read by `cpu_id` (the kernel's, or a
/// test's bad one), unchecked: it is read inside the masked section (so
/// it is this task's CPU while it runs) and checked after leaving the
/// section on a bad id, since a panic with interrupts masked (with the
/// default hooks of a target without native masking: the
/// critical-section lock held) would stop every CPU that masks next.
#[inline(always)]
fn with_cpu_of<R>(cpu_id: fn() -> usize, f: impl FnOnce(&mut CpuState, usize) -> R) -> Option<R> {
    let flags = kernel::irq_save_raw();
    let id = cpu_id();
    if id >= MAX_CPUS {
        // SAFETY: the matching save, just above.
        unsafe { kernel::irq_restore_raw(flags) };
        kernel::cpu_out_of_range(id, MAX_CPUS, "MAX_CPUS");
    }
    let task = kernel::current_task();
    let result = match slot_of(task) {
        None => {
            // SAFETY: the matching save, just above.
            unsafe { kernel::irq_restore_raw(flags) };
            out_of_slots(id);
            return None;
        }
        Some(slot) => {
            // SAFETY: see `Slots`: this task's slot, interrupts masked,
            // and `busy` keeps a nested call from taking a second `&mut`.
            let cpu = unsafe { &mut (*SLOTS.stacks.get())[slot] };
            let result = if cpu.busy {
                None
            } else {
                cpu.busy = true;
                let result = f(&mut *cpu, id);
                cpu.busy = false;
                Some(result)
            };
            if cpu.depth == 0 && !cpu.busy {
                // Release: the next owner's claim (Acquire) sees this
                // task's last writes to the stack.
                SLOTS.owners[slot].store(0, Ordering::Release);
            }
            result
        }
    };
    // SAFETY: the matching save, just above.
    unsafe { kernel::irq_restore_raw(flags) };
    result
}

/// Every slot is taken: report once and stop checking.
#[cold]
fn out_of_slots(id: usize) {
    let flags = kernel::irq_save_raw();
    let report = {
        let mut g = GraphGuard::lock();
        if disable(&mut g) {
            let mut r = Report::new(ReportKind::TableFull, id);
            (r.what, r.limit) = ("task", TASK_SLOTS);
            Some(r)
        } else {
            None
        }
    };
    // SAFETY: the matching save, just above.
    unsafe { kernel::irq_restore_raw(flags) };
    if let Some(report) = report {
        kernel::lockdep_report(&report);
    }
}

/// Whether this CPU has interrupts masked, as far as lockdep can tell.
fn irqs_masked_now() -> bool {
    // Relaxed: this CPU's own counter (a stale read after a migration can
    // only hide a use with interrupts on, never invent one).
    kernel::irq::masked_by_ksync() || kernel::irqs_disabled()
}

/// CPU `id` went offline (a host test thread exited): its count of
/// ksync's interrupt masking restarts.
#[cfg(feature = "test-hooks")]
pub(crate) fn cpu_offline(id: usize) {
    kernel::check_cpu(id);
    kernel::irq::forget_masking(id);
}

/// The task `task` is gone (a host test thread exited): whatever it held
/// is forgotten and its slot freed.
#[cfg(feature = "test-hooks")]
pub(crate) fn task_exit(task: usize) {
    for (slot, owner) in SLOTS.owners.iter().enumerate() {
        // Relaxed: only the task itself stores its token.
        if owner.load(Ordering::Relaxed) == task {
            // SAFETY: see `Slots`: the task is gone, so nothing else uses
            // its stack; the slot is freed (Release) only after this.
            unsafe { (*SLOTS.stacks.get())[slot].depth = 0 };
            owner.store(0, Ordering::Release);
        }
    }
}

fn addr(map: &Map) -> usize {
    core::ptr::from_ref(map) as usize
}

fn lock(graph: &mut Option<GraphGuard>) -> &mut GraphGuard {
    graph.get_or_insert_with(GraphGuard::lock)
}

/// Turns checking off; `true` for the caller that did it (and reports).
fn disable(_graph: &mut GraphGuard) -> bool {
    // Relaxed: written under the graph lock; readers only skip work.
    let was = ENABLED.load(Ordering::Relaxed);
    ENABLED.store(false, Ordering::Relaxed);
    was
}

/// How a report names a lock's class without the graph.
fn describe_map(map: &Map, subclass: u8) -> Class {
    let name = match map.key() {
        MapKey::Location(l) => Name::Location(l),
        MapKey::Named(k) => Name::Named(k.name()),
        MapKey::Instance => Name::Instance(addr(map)),
    };
    Class { name, subclass }
}

/// The class of `map` with `subclass`, registered if new.
fn class_of(map: &Map, subclass: u8, graph: &mut Option<GraphGuard>) -> Result<u16, Full> {
    let cache = map.class_cache();
    // Acquire pairs with the Release store below: the class's slot was
    // reset before its index was published.
    let cached = cache.load(Ordering::Acquire);
    if subclass == 0 && cached != 0 {
        return Ok((cached - 1) as u16);
    }
    let g = lock(graph);
    let key = match map.key() {
        MapKey::Location(l) => Key::Location(l),
        MapKey::Named(k) => Key::Named(k),
        // A lock that moved since it was first taken keeps its class.
        MapKey::Instance => match cached {
            0 => Key::Instance(addr(map)),
            c => g.key_of((c - 1) as u16).unwrap_or(Key::Instance(addr(map))),
        },
    };
    let class = g.class(key, subclass)?;
    if subclass == 0 {
        // Release pairs with the Acquire load above.
        cache.store(u32::from(class) + 1, Ordering::Release);
    }
    Ok(class)
}

/// Records an acquisition (see [`Map::acquire`]).
pub(super) fn acquire(
    map: &Map,
    at: Loc,
    subclass: u8,
    try_lock: bool,
    irqs_off: bool,
    sleeping: bool,
    access: Access,
) {
    assert!(
        subclass < MAX_SUBCLASSES,
        "lockdep: subclass {subclass} is not below MAX_SUBCLASSES ({MAX_SUBCLASSES})"
    );
    // Relaxed: a stale `true` only does checks that are thrown away.
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let in_irq = kernel::in_interrupt();
    // Asked before lockdep masks interrupts itself.
    let irqs_on = !in_irq && !irqs_off && !irqs_masked_now();
    let mut flags = 0;
    if try_lock {
        flags |= TRY;
    }
    if in_irq {
        flags |= IN_HANDLER;
    }
    if sleeping {
        flags |= SLEEPING;
    }
    match access {
        Access::Exclusive => {}
        Access::Shared => flags |= SHARED,
        Access::SharedRecursive => flags |= SHARED | RECURSIVE,
    }
    let mut entry = Held {
        map: addr(map),
        class: 0,
        subclass,
        flags,
        at: Some(at),
    };
    let Some(Some(report)) = with_cpu(|cpu, id| check(cpu, id, map, &mut entry, irqs_on)) else {
        return;
    };
    // Outside lockdep, with interrupts as the caller had them: the hook may
    // print at length, or panic.
    kernel::lockdep_report(&report);
    // The lock is taken after all: record it (unless checking stopped).
    with_cpu(|cpu, _| {
        // Relaxed: as above.
        if ENABLED.load(Ordering::Relaxed) && cpu.depth < MAX_LOCK_DEPTH {
            cpu.held[cpu.depth] = entry;
            cpu.depth += 1;
        }
    });
}

/// A seqlock reader that may spin on the sequence (Linux's
/// `seqcount_lockdep_reader_access`), checked against the class of the
/// writers' lock `map`. Only its use in an interrupt handler matters: the
/// handler may have interrupted a writer of its own CPU in the middle of a
/// publication and then spins for ever, so it is an inversion of the
/// class if writers take the lock with interrupts enabled (either order).
///
/// Nothing else is recorded, unlike Linux's read acquisition: ksync's
/// sequence is odd only while a write guard publishes (a copy that takes
/// no lock and cannot be preempted), so a reader waits for no held lock:
/// a reader under a lock that a write section also takes, or inside its
/// own CPU's write section, cannot deadlock, and adds no dependency.
pub(super) fn read_access(map: &Map, at: Loc) {
    // Relaxed: as in `acquire`.
    if !ENABLED.load(Ordering::Relaxed) || !kernel::in_interrupt() {
        return;
    }
    let Some(Some(report)) = with_cpu(|_, id| {
        let mut graph: Option<GraphGuard> = None;
        let class = match class_of(map, 0, &mut graph) {
            Ok(class) => class,
            Err(full) => {
                let class = describe_map(map, 0);
                return table_full(full, lock(&mut graph), class, Some(at), id);
            }
        };
        // Used in a handler before (by a reader or a writer): an inversion
        // was reported then if there is one.
        if graph::usage(class) & (IN_IRQ | IN_IRQ_READ) != 0 {
            return None;
        }
        let g = lock(&mut graph);
        let usage = graph::usage(class);
        if usage & (IN_IRQ | IN_IRQ_READ) != 0 {
            return None;
        }
        let slot = g.slot_mut(class);
        slot.set_use_at(IN_IRQ_READ, Some(at));
        let irqs_on_at = slot.use_at(IRQS_ON);
        let mut bits = IN_IRQ_READ;
        let mut report = None;
        if usage & IRQS_ON != 0 && usage & INVERSION_REPORTED == 0 {
            bits |= INVERSION_REPORTED;
            let c = g.describe(class);
            let mut r = Report::new(ReportKind::IrqInversion, id);
            r.lock = Some(Site {
                class: c,
                at: Some(at),
            });
            r.other = Some(Site {
                class: c,
                at: irqs_on_at,
            });
            // `lock` is the use in a handler.
            r.flag = false;
            report = Some(r);
        }
        g.mark(class, bits);
        report
    }) else {
        return;
    };
    kernel::lockdep_report(&report);
}

/// The checks of one acquisition; pushes the entry unless there is a
/// report (then the caller pushes it once the report is out).
fn check(
    cpu: &mut CpuState,
    id: usize,
    map: &Map,
    entry: &mut Held,
    irqs_on: bool,
) -> Option<Report> {
    let mut graph: Option<GraphGuard> = None;
    if cpu.depth == MAX_LOCK_DEPTH {
        let g = lock(&mut graph);
        if !disable(g) {
            return None;
        }
        let mut report = Report::new(ReportKind::TooDeep, id);
        report.lock = Some(Site {
            class: describe_map(map, entry.subclass),
            at: entry.at,
        });
        fill_held(&mut report, cpu, g);
        return Some(report);
    }
    let class = match class_of(map, entry.subclass, &mut graph) {
        Ok(class) => class,
        Err(full) => {
            let class = describe_map(map, entry.subclass);
            return table_full(full, lock(&mut graph), class, entry.at, id);
        }
    };
    entry.class = class;
    let held = &cpu.held[..cpu.depth];
    let try_lock = entry.flags & TRY != 0;
    // Adds no lock order and is no recursion: a try-lock, or a recursive
    // read.
    let no_wait = entry.flags & (TRY | RECURSIVE) != 0;
    let shared = entry.flags & SHARED != 0;
    let in_irq = entry.flags & IN_HANDLER != 0;
    let mut report = None;

    // 1. Recursion: this class already held (in any context: a handler
    // spinning on a lock its interrupted code holds is a deadlock too).
    let mut recursion = false;
    let prev = if no_wait {
        None
    } else {
        held.iter().rev().find(|h| h.class == class)
    };
    if let Some(prev) = prev {
        recursion = true;
        let same = prev.map == entry.map;
        if same || graph::usage(class) & RECURSION_REPORTED == 0 {
            let g = lock(&mut graph);
            if same || graph::usage(class) & RECURSION_REPORTED == 0 {
                g.mark(class, RECURSION_REPORTED);
                let mut r = Report::new(ReportKind::Recursion, id);
                r.lock = Some(Site {
                    class: g.describe(class),
                    at: entry.at,
                });
                r.other = Some(Site {
                    class: g.describe(prev.class),
                    at: prev.at,
                });
                r.flag = same;
                report = Some(r);
            }
        }
    }

    // 2. Interrupt usage: in a handler (try-locks never wait, so they do
    // not count) or with interrupts enabled, for writing or for reading;
    // a conflicting pair (`graph::conflicts`: a read in a handler and a
    // read with interrupts enabled are not one) is an inversion.
    let need = match (in_irq, shared) {
        (true, _) if try_lock => 0,
        (true, false) => IN_IRQ,
        (true, true) => IN_IRQ_SHARED,
        (false, false) if irqs_on => IRQS_ON,
        (false, true) if irqs_on => IRQS_ON_SHARED,
        (false, _) => 0,
    };
    if need != 0 && graph::usage(class) & need == 0 {
        let g = lock(&mut graph);
        let usage = graph::usage(class);
        if usage & need == 0 {
            let other = conflicts(need);
            let slot = g.slot_mut(class);
            slot.set_use_at(need, entry.at);
            let other_at = slot.first_use_at(usage & other);
            let mut bits = need;
            let both = usage & other != 0;
            if both && usage & INVERSION_REPORTED == 0 {
                bits |= INVERSION_REPORTED;
                if report.is_none() {
                    let c = g.describe(class);
                    let mut r = Report::new(ReportKind::IrqInversion, id);
                    r.lock = Some(Site {
                        class: c,
                        at: entry.at,
                    });
                    r.other = Some(Site {
                        class: c,
                        at: other_at,
                    });
                    // `other` is the use in a handler.
                    r.flag = !in_irq;
                    report = Some(r);
                }
            }
            g.mark(class, bits);
            // A class that just became IRQ-safe may lead to an IRQ-unsafe
            // one, or one that just became IRQ-unsafe be led to from an
            // IRQ-safe one (a class that is both is the inversion above;
            // one that was IRQ-unsafe already was searched then; a read
            // in a handler makes a class IRQ-safe only through the orders
            // taken holding it for writing, see `IN_IRQ_SHARED`).
            let searched =
                need & (IRQS_ON | IRQS_ON_SHARED) != 0 && usage & (IRQS_ON | IRQS_ON_SHARED) != 0;
            if report.is_none() && !both && !searched {
                report = usage_chain(g, class, need, entry, id);
            }
        }
    }

    // 3. Dependencies: held class -> this class, for the lock on top of
    // the stack and those under it down to the first that was not a
    // try-lock (the earlier ones already lead to it), in this context
    // only. A try-lock adds none: it cannot wait.
    if !no_wait && !recursion {
        for prev in held.iter().rev() {
            if prev.flags & IN_HANDLER != entry.flags & IN_HANDLER {
                break;
            }
            // Held for writing: the order is also recorded as such (an
            // IRQ-safe read of `prev` leads on only through those).
            let exclusive = prev.flags & SHARED == 0;
            let known = |from, to| {
                graph::edge_known(from, to) && (!exclusive || graph::edge_known_exclusive(from, to))
            };
            if !known(prev.class, class) {
                let g = lock(&mut graph);
                if !graph::edge_known(prev.class, class) {
                    if report.is_none() {
                        report = cycle(g, prev, entry, id);
                    }
                    if let Err(full) = g.add_edge(prev.class, class, prev.at, entry.at) {
                        let c = g.describe(class);
                        return table_full(full, g, c, entry.at, id);
                    }
                    if exclusive {
                        g.mark_exclusive(prev.class, class);
                    }
                    if report.is_none() {
                        report = edge_chain(g, prev, entry, id);
                    }
                } else if !known(prev.class, class) {
                    // Known, first held for writing now: `prev` may just
                    // have become IRQ-safe along it.
                    g.mark_exclusive(prev.class, class);
                    if report.is_none() {
                        report = edge_chain(g, prev, entry, id);
                    }
                }
            }
            if prev.flags & (TRY | RECURSIVE) == 0 {
                break;
            }
        }
    }

    if report.is_none() {
        cpu.held[cpu.depth] = *entry;
        cpu.depth += 1;
    }
    report
}

/// A cycle report if `entry`'s class already leads to `prev`'s.
fn cycle(g: &mut GraphGuard, prev: &Held, entry: &Held, id: usize) -> Option<Report> {
    let mut path = [0u16; REPORT_CHAIN];
    let len = g.path(entry.class, prev.class, &mut path)?;
    let mut r = Report::new(ReportKind::Cycle, id);
    r.lock = Some(Site {
        class: g.describe(entry.class),
        at: entry.at,
    });
    r.other = Some(Site {
        class: g.describe(prev.class),
        at: prev.at,
    });
    // The edge being added, then the path back.
    r.chain[0] = Some(Link {
        from: g.describe(prev.class),
        to: g.describe(entry.class),
        from_at: prev.at,
        to_at: entry.at,
    });
    let kept = len.min(REPORT_CHAIN);
    for i in 1..kept {
        let (from, to) = (path[i - 1], path[i]);
        let (from_at, to_at) = g.edge_info(from, to);
        r.chain[i] = Some(Link {
            from: g.describe(from),
            to: g.describe(to),
            from_at,
            to_at,
        });
    }
    r.chain_len = len;
    Some(r)
}

/// Whether `class` is IRQ-unsafe and not yet in a report: the target of
/// the forward searches (each IRQ-unsafe class is reported once, and one
/// that is IRQ-safe as well has had its inversion report).
fn unreported_irq_unsafe(class: u16, _via: u16) -> bool {
    let usage = graph::usage(class);
    usage & (IRQS_ON | IRQS_ON_SHARED) != 0 && usage & (CHAIN_REPORTED | INVERSION_REPORTED) == 0
}

/// Whether `class` is IRQ-safe where it leads to `via`: the target of the
/// backward searches. Taken in a handler for writing, or read there and
/// held for writing when `via` was taken (held for reading, it lets the
/// handler's read in: Linux's `only_xr`).
fn irq_safe(class: u16, via: u16) -> bool {
    let usage = graph::usage(class);
    usage & IN_IRQ != 0 || usage & IN_IRQ_SHARED != 0 && graph::edge_known_exclusive(class, via)
}

/// The classes of an IRQ-safe -> IRQ-unsafe chain, the IRQ-safe one first:
/// the first `REPORT_CHAIN + 1` of them, and how many there are.
struct Chain {
    classes: [u16; REPORT_CHAIN + 1],
    len: usize,
}

impl Chain {
    const fn new() -> Self {
        Self {
            classes: [0; REPORT_CHAIN + 1],
            len: 0,
        }
    }

    /// Appends the `part_len` classes of which `part` holds the first.
    fn extend(&mut self, part: &[u16], part_len: usize) {
        for (i, &class) in part.iter().take(part_len).enumerate() {
            if let Some(slot) = self.classes.get_mut(self.len + i) {
                *slot = class;
            }
        }
        self.len += part_len;
    }
}

/// The search that `class`'s first use in a handler (`need` is `IN_IRQ`,
/// or `IN_IRQ_SHARED`) or with interrupts enabled (`IRQS_ON`,
/// `IRQS_ON_SHARED`) calls for: forward from a new IRQ-safe class for an
/// IRQ-unsafe one (from a read in a handler, only through the orders taken
/// holding it for writing), backward from a new IRQ-unsafe class for an
/// IRQ-safe one.
fn usage_chain(
    g: &mut GraphGuard,
    class: u16,
    need: u32,
    entry: &Held,
    id: usize,
) -> Option<Report> {
    let mut part = [0u16; REPORT_CHAIN + 1];
    let mut chain = Chain::new();
    let (safe, unsafe_, what) = if need == IN_IRQ {
        let found = g.search(class, Dir::Forward, false, unreported_irq_unsafe)?;
        let len = g.chain(class, found, Dir::Forward, &mut part);
        chain.extend(&part, len);
        (class, found, " in an interrupt handler")
    } else if need == IN_IRQ_SHARED {
        // Not `class` itself: its reads with interrupts enabled let a
        // handler's read in.
        let target = |c, via| c != class && unreported_irq_unsafe(c, via);
        let mut next = graph::next_exclusive_successor(class, None);
        let (first, found) = loop {
            let first = next?;
            if let Some(found) = g.search(first, Dir::Forward, true, target) {
                break (first, found);
            }
            next = graph::next_exclusive_successor(class, Some(first));
        };
        let len = g.chain(first, found, Dir::Forward, &mut part);
        chain.extend(&[class], 1);
        chain.extend(&part, len);
        (class, found, " in an interrupt handler")
    } else {
        let found = g.search(class, Dir::Backward, false, irq_safe)?;
        let len = g.chain(class, found, Dir::Backward, &mut part);
        chain.extend(&part, len);
        (found, class, " with interrupts enabled")
    };
    let mut r = chain_report(g, safe, unsafe_, &chain, entry, id);
    r.what = what;
    Some(r)
}

/// The searches a new edge `prev -> entry` calls for: backward from
/// `prev` (itself included) for an IRQ-safe class, forward from `entry`
/// (itself included) for an IRQ-unsafe one. Called once the edge is in the
/// graph.
fn edge_chain(g: &mut GraphGuard, prev: &Held, entry: &Held, id: usize) -> Option<Report> {
    let mut part = [0u16; REPORT_CHAIN + 1];
    let mut chain = Chain::new();
    // `prev` itself leads on by the new order.
    let safe = g.search(prev.class, Dir::Backward, true, |c, via| {
        irq_safe(c, if via == NO_CLASS { entry.class } else { via })
    })?;
    // Kept before the second search reuses the scratch space.
    let len = g.chain(prev.class, safe, Dir::Backward, &mut part);
    chain.extend(&part, len);
    // Not `safe` itself: that would need a cycle through the new edge,
    // reported as one.
    let unsafe_ = g.search(entry.class, Dir::Forward, true, |c, via| {
        c != safe && unreported_irq_unsafe(c, via)
    })?;
    let len = g.chain(entry.class, unsafe_, Dir::Forward, &mut part);
    chain.extend(&part, len);
    let mut r = chain_report(g, safe, unsafe_, &chain, entry, id);
    r.other = Some(Site {
        class: g.describe(prev.class),
        at: prev.at,
    });
    Some(r)
}

/// An [`IrqSafeToUnsafe`](ReportKind::IrqSafeToUnsafe) report, found by
/// `entry`'s acquisition; marks `unsafe_` reported.
fn chain_report(
    g: &mut GraphGuard,
    safe: u16,
    unsafe_: u16,
    chain: &Chain,
    entry: &Held,
    id: usize,
) -> Report {
    g.mark(unsafe_, CHAIN_REPORTED);
    let mut r = Report::new(ReportKind::IrqSafeToUnsafe, id);
    r.lock = Some(Site {
        class: g.describe(entry.class),
        at: entry.at,
    });
    r.irq_safe = Some(Site {
        class: g.describe(safe),
        at: g.slot(safe).first_use_at(IN_IRQ | IN_IRQ_SHARED),
    });
    r.irq_unsafe = Some(Site {
        class: g.describe(unsafe_),
        at: g.slot(unsafe_).first_use_at(IRQS_ON | IRQS_ON_SHARED),
    });
    let kept = chain.len.min(chain.classes.len());
    for i in 1..kept {
        let (from, to) = (chain.classes[i - 1], chain.classes[i]);
        let (from_at, to_at) = g.edge_info(from, to);
        r.chain[i - 1] = Some(Link {
            from: g.describe(from),
            to: g.describe(to),
            from_at,
            to_at,
        });
    }
    r.chain_len = chain.len - 1;
    r
}

fn table_full(
    full: Full,
    g: &mut GraphGuard,
    class: Class,
    at: Option<Loc>,
    id: usize,
) -> Option<Report> {
    if !disable(g) {
        return None;
    }
    let mut r = Report::new(ReportKind::TableFull, id);
    r.lock = Some(Site { class, at });
    (r.what, r.limit) = match full {
        Full::Classes => ("class", MAX_CLASSES),
        Full::Dependencies => ("dependency", MAX_DEPENDENCIES),
    };
    Some(r)
}

fn fill_held(report: &mut Report, cpu: &CpuState, g: &GraphGuard) {
    for (slot, held) in report.held.iter_mut().zip(&cpu.held[..cpu.depth]) {
        *slot = Some(Site {
            class: g.describe(held.class),
            at: held.at,
        });
    }
    report.held_len = cpu.depth;
}

/// Records a release (see [`Map::release`]).
pub(super) fn release(map: &Map, at: Loc) {
    let addr = addr(map);
    let report = with_cpu(|cpu, id| {
        let depth = cpu.depth;
        match cpu.held[..depth].iter().rposition(|h| h.map == addr) {
            Some(i) => {
                cpu.held.copy_within(i + 1..depth, i);
                cpu.depth -= 1;
                None
            }
            // Relaxed: once checking stopped, locks taken since are not on
            // the stack.
            None if ENABLED.load(Ordering::Relaxed) => {
                let mut r = Report::new(ReportKind::BadUnlock, id);
                r.lock = Some(Site {
                    class: describe_map(map, 0),
                    at: Some(at),
                });
                Some(r)
            }
            None => None,
        }
    });
    if let Some(Some(report)) = report {
        kernel::lockdep_report(&report);
    }
}

/// A lock's `Map` is going away (or changing class): a per-instance class
/// is freed with everything recorded about it.
pub(super) fn forget(map: &Map) {
    if !matches!(map.key(), MapKey::Instance) {
        return;
    }
    // Relaxed: the caller has the map exclusively (`&mut` or drop).
    let cached = map.class_cache().load(Ordering::Relaxed);
    if cached == 0 {
        return;
    }
    let flags = kernel::irq_save_raw();
    {
        let mut g = GraphGuard::lock();
        if let Some(key) = g.key_of((cached - 1) as u16) {
            g.free_instance(key);
        }
    }
    // SAFETY: the matching save, just above.
    unsafe { kernel::irq_restore_raw(flags) };
}

/// Whether this CPU holds the lock of `map`: `None` once checking stopped
/// (locks taken since are not recorded) or inside lockdep itself.
pub(super) fn is_held(map: &Map) -> Option<bool> {
    // Relaxed: as in `acquire`.
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    let addr = addr(map);
    with_cpu(|cpu, _| cpu.held[..cpu.depth].iter().any(|h| h.map == addr))
}

/// Reports ([`ReportKind::NotHeld`]) unless this CPU holds `map`'s lock.
pub(super) fn assert_held(map: &Map, at: Loc) {
    if is_held(map) != Some(false) {
        return;
    }
    let report = with_cpu(|cpu, id| {
        let g = GraphGuard::lock();
        let mut r = Report::new(ReportKind::NotHeld, id);
        r.lock = Some(Site {
            class: describe_map(map, 0),
            at: None,
        });
        r.at = Some(at);
        fill_held(&mut r, cpu, &g);
        r
    });
    if let Some(report) = report {
        kernel::lockdep_report(&report);
    }
}

/// The number of locks this CPU holds.
pub(super) fn held_lock_count() -> usize {
    with_cpu(|cpu, _| cpu.depth).unwrap_or(0)
}

/// The number of locks other than sleeping ones this CPU holds: those
/// [`assert_no_locks_held`] reports. 0 once lockdep has turned itself off
/// (after a report): that report is no longer made, so the count must
/// not excuse a caller's own check (`might_sleep`'s preemption check).
pub(super) fn held_spinning_lock_count() -> usize {
    // Relaxed: as in `assert_no_locks_held`, which this must agree with.
    if !ENABLED.load(Ordering::Relaxed) {
        return 0;
    }
    with_cpu(|cpu, _| {
        cpu.held[..cpu.depth]
            .iter()
            .filter(|h| h.flags & SLEEPING == 0)
            .count()
    })
    .unwrap_or(0)
}

/// Reports if this CPU holds locks.
pub(super) fn assert_no_locks_held(what: &'static str, at: Loc) {
    // Relaxed: as in `acquire`.
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let report = with_cpu(|cpu, id| {
        if cpu.held[..cpu.depth]
            .iter()
            .all(|h| h.flags & SLEEPING != 0)
        {
            return None;
        }
        let g = GraphGuard::lock();
        let mut r = Report::new(ReportKind::LocksHeld, id);
        r.what = what;
        r.at = Some(at);
        fill_held(&mut r, cpu, &g);
        Some(r)
    });
    if let Some(Some(report)) = report {
        kernel::lockdep_report(&report);
    }
}

#[cfg(all(test, feature = "test-hooks", not(ksync_loom)))]
mod tests {
    use super::with_cpu_of;
    use crate::kernel::MAX_CPUS;

    /// A CPU id out of range gets the documented panic, and lockdep
    /// unmasks the interrupts it masked first: a panic inside the section
    /// would leave them masked (with the default hooks on a target
    /// without native masking, every CPU's next mask would wait for ever).
    #[test]
    fn out_of_range_cpu_unmasks_before_it_panics() {
        fn far() -> usize {
            MAX_CPUS + 3
        }
        let after = std::thread::spawn(|| {
            let err =
                std::panic::catch_unwind(|| with_cpu_of(far, |cpu, _| cpu.depth)).unwrap_err();
            let msg = err
                .downcast_ref::<std::string::String>()
                .cloned()
                .unwrap_or_default();
            (msg, crate::host::irqs_disabled())
        })
        .join()
        .unwrap();
        let want = std::format!(
            "ksync: CPU id {} is out of range: the limit is {MAX_CPUS} (MAX_CPUS)",
            MAX_CPUS + 3
        );
        assert!(after.0.starts_with(&want), "{}", after.0);
        assert!(!after.1, "interrupts stayed masked after the panic");
    }
}
