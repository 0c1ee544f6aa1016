//! A small preemptive scheduler: kernel threads on per-CPU run queues.
//!
//! # Threads
//!
//! A thread is a slot of the static pool [`THREADS`]: slots `0..MAX_CPUS`
//! are the CPUs' *boot threads* (each CPU's flow of control since boot, on
//! its boot stack; the harness runner runs on them), the others are
//! workers with stacks of their own ([`STACKS`]), started by [`spawn_on`]
//! and ended by returning from their entry. No allocator: a worker slot is
//! reused once its thread has ended and been switched away from for the
//! last time (its state goes back to `FREE`).
//!
//! # Run queues and the hand-over of their lock
//!
//! Each CPU has a FIFO run queue of runnable threads that are not running,
//! under a ksync [`RawTicketLock`] taken with interrupts off (the scheduler
//! uses the raw lock, not a guard, because the lock changes hands). As in
//! Linux, the thread that switches out takes its CPU's lock in
//! [`switch_out`] and the thread switched in releases it in
//! [`finish_switch`] (Linux's `finish_task_switch`): the lock covers the
//! whole switch, so no other CPU can take the outgoing thread off this
//! queue before its registers are saved. Both ends run on the same CPU, so
//! ksync's lockdep, which keeps held locks per CPU, sees one CPU take the
//! lock and the same CPU release it. The interrupt state does not travel
//! with the lock: each thread records whether interrupts were on when it
//! switched out, and sets that again when it is switched back in (a new
//! thread turns them on), so the lock's holder never needs the other
//! thread's saved flags. A thread that moves to another CPU
//! ([`migrate_to`]) is put on that CPU's queue by the thread switched in
//! after it, once its registers are saved and after the own queue's lock
//! is released: no CPU ever holds two run-queue locks.
//!
//! Each CPU's boot thread never ends, never blocks and never migrates, so
//! a CPU always has something to run.
//!
//! # Preemption
//!
//! The preempt count is per CPU ([`preempt_disable`], [`preempt_enable`],
//! ksync's `Kernel` hooks in `kernel::hooks`) and saved and restored per
//! thread at every switch, as Linux does on x86: the outgoing thread's
//! count is kept with it, the incoming thread's is put back, and what the
//! switch itself added (the scheduler's own increment, and the run-queue
//! lock's once ksync's spinlocks disable preemption) goes over to the
//! incoming thread, which drops it in [`finish_switch`].
//!
//! Every timer tick on a CPU whose queue is not empty sets its
//! `need_resched` (a time slice of one tick). The switch happens at the
//! first of:
//!
//! * the end of the timer interrupt ([`irq_exit`], called by the arch code
//!   after the interrupt controller's end of interrupt), if the count is
//!   0 and the interrupted context had interrupts on: the handler calls
//!   [`switch_out`] on the interrupted thread's own stack, where its trap
//!   frame lies. On every architecture the kernel takes interrupts on the
//!   interrupted stack, so this is the same scheme on all three; the
//!   thread returns from the interrupt when it is switched back in, maybe
//!   on another CPU (the trap frames keep no per-CPU register: see
//!   `arch::*::switch`);
//! * [`preempt_enable`] that brings the count to 0 with interrupts on
//!   (Linux's `preempt_schedule`);
//! * a voluntary [`yield_now`].
//!
//! So a thread is never switched out by the timer while its preempt count
//! is above 0: a lock holder whose lock disables preemption (or who
//! disables it) keeps its CPU until it releases the lock.
//!
//! # What reads the CPU index
//!
//! [`cpu::current`] reads the CPU's own register (GS base, `TPIDR_EL1`,
//! `tp`), which the switch does not touch: a thread that migrated reads
//! its new CPU. A thread moves only when it switches out voluntarily: by
//! its own [`migrate_to`], or by blocking ([`block`]) and being woken
//! onto another CPU ([`wake`]); a thread switched out by preemption is put
//! back on the queue of the CPU it ran on. That is what lets the preempt
//! count be a plain per-CPU word updated by load and store (see
//! [`preempt_disable`]).
//!
//! # Blocking
//!
//! [`block`] takes a worker off every run queue until [`wake`];
//! [`WaitQueue`] (`wait.rs`) builds "wait until a condition holds" on it.
//! [`block_until`] adds a deadline on the counter: every timer tick
//! ([`tick`]) wakes the threads last run on its CPU whose deadline has
//! passed, so a timed block lasts at most its deadline plus one tick.
//! ksync's scheduler hooks (`kernel::hooks`: `block`, `wake`,
//! `current_task`, `task_running`) are these.

mod wait;

pub use wait::WaitQueue;

// # Orderings
//
// Most words here are Relaxed, for one of two reasons, said once here:
// a run queue's words and the fields of a thread that is not running are
// read and written with that run-queue lock held (the lock's Acquire and
// Release order them, including across a switch, where the lock is held
// from the outgoing thread's `switch_out` to the incoming thread's
// `finish_switch`); and a CPU's `preempt`, `current`, `prev` and
// `need_resched` are touched only by that CPU (thread context and its
// interrupt handlers, which leave them as they found them) or read as
// hints. The exceptions say what they pair with where they are: a slot
// freed (Release) and claimed (Acquire), and the SeqCst pairs of `wake`
// and `finish_switch`.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use ksync::spinlock::RawTicketLock;

use crate::arch;
use crate::kernel::cpu::{self, Counters, MAX_CPUS};
use crate::kernel::irq;

/// Worker threads per CPU in the pool (the harness's `sched` mode uses a
/// few, the `sched-*` suites more).
pub const WORKERS_PER_CPU: usize = 5;
/// Worker slots in all.
const WORKERS: usize = MAX_CPUS * WORKERS_PER_CPU;
/// Threads in all: the boot threads, then the workers.
pub const NR_THREADS: usize = MAX_CPUS + WORKERS;
/// Stack bytes per worker (as much as a CPU's boot stack).
const STACK_SIZE: usize = 64 * 1024;

const _: () = assert!(NR_THREADS <= u8::MAX as usize);

/// Thread states.
const FREE: u8 = 0;
/// On a run queue, or running.
const RUNNABLE: u8 = 1;
/// Returned from its entry; its stack is in use until the next thread on
/// its CPU has switched in (which sets it `FREE`).
const EXITED: u8 = 2;
/// Switching out to move to the CPU in `target`.
const MIGRATING: u8 = 3;
/// Waiting for [`wake`] (off every run queue, its registers saved).
const BLOCKED: u8 = 4;
/// Switching out to block; becomes `BLOCKED` once its registers are saved
/// (in [`finish_switch`]), so that no waker queues it before.
const BLOCKING: u8 = 5;

/// One thread.
struct Thread {
    /// Its stack pointer while it is not running (written by the switch).
    sp: AtomicUsize,
    state: AtomicU8,
    /// Whether interrupts were on when it switched out.
    irqs_on: AtomicBool,
    /// Its preempt count while it is not running.
    preempt: AtomicU32,
    /// The CPU it moves to (`MIGRATING`).
    target: AtomicUsize,
    /// The CPU it last ran on.
    cpu: AtomicUsize,
    /// What it runs, written before it is first queued.
    entry: UnsafeCell<fn(usize)>,
    arg: AtomicUsize,
    /// Times it was switched out by preemption.
    preempted: AtomicU64,
    /// Times it blocked ([`block`]; counted by the thread itself).
    blocks: AtomicU64,
    /// Wake-ups sent to it ([`wake`] counts before it looks at the state).
    wakes: AtomicU64,
    /// `wakes` as the thread last returned from [`block`]: a `wakes` past
    /// it is a wake-up the thread has not consumed, and its next `block`
    /// returns at once.
    wakes_seen: AtomicU64,
    /// The counter value at which its [`block_until`] ends, or
    /// [`NO_DEADLINE`]: set by the thread before it blocks, cleared by it
    /// after, claimed (compare-exchanged back to `NO_DEADLINE`) by the
    /// tick that wakes it.
    deadline: AtomicU64,
}

/// In [`Thread::deadline`]: not in a timed block.
const NO_DEADLINE: u64 = u64::MAX;

/// Threads in a [`block_until`] with a deadline now, everywhere: a hint
/// that lets the tick skip its scan when there are none.
static TIMED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: `entry` is written only by `spawn_on` while the slot is claimed
// (state moved from FREE by its compare-exchange) and not yet queued, and
// read only by the thread itself after the run-queue lock's Release
// (enqueue) / Acquire (the switch that starts it) ordered the write before;
// every other field is atomic.
unsafe impl Sync for Thread {}

fn nothing(_: usize) {}

impl Thread {
    const fn new() -> Self {
        Self {
            sp: AtomicUsize::new(0),
            state: AtomicU8::new(FREE),
            irqs_on: AtomicBool::new(false),
            preempt: AtomicU32::new(0),
            target: AtomicUsize::new(0),
            cpu: AtomicUsize::new(0),
            entry: UnsafeCell::new(nothing),
            arg: AtomicUsize::new(0),
            preempted: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            wakes_seen: AtomicU64::new(0),
            deadline: AtomicU64::new(NO_DEADLINE),
        }
    }
}

static THREADS: [Thread; NR_THREADS] = [const { Thread::new() }; NR_THREADS];

#[repr(C, align(16))]
struct Stacks(UnsafeCell<[[u8; STACK_SIZE]; WORKERS]>);

// SAFETY: the Rust code never reads or writes the stacks as data except
// `spawn_on`'s first frame, written while the slot is claimed and its
// thread not started; each running worker uses its own stack only through
// its stack pointer.
unsafe impl Sync for Stacks {}

static STACKS: Stacks = Stacks(UnsafeCell::new([[0; STACK_SIZE]; WORKERS]));

/// A FIFO of thread ids.
struct Ring {
    ids: [u8; NR_THREADS],
    head: usize,
    len: usize,
}

impl Ring {
    const fn new() -> Self {
        Self {
            ids: [0; NR_THREADS],
            head: 0,
            len: 0,
        }
    }

    fn push(&mut self, id: usize) {
        assert!(self.len < NR_THREADS, "run queue overflow");
        self.ids[(self.head + self.len) % NR_THREADS] = id as u8;
        self.len += 1;
    }

    fn pop(&mut self) -> Option<usize> {
        (self.len > 0).then(|| {
            let id = self.ids[self.head];
            self.head = (self.head + 1) % NR_THREADS;
            self.len -= 1;
            usize::from(id)
        })
    }
}

/// One CPU's scheduler state.
struct Rq {
    /// Guards `queue`; held across a switch (see the module docs).
    lock: RawTicketLock,
    queue: UnsafeCell<Ring>,
    /// `queue.len`, for the tick's lock-free look.
    len: AtomicUsize,
    /// The running thread.
    current: AtomicUsize,
    /// The thread that switched out last (read by [`finish_switch`]).
    prev: AtomicUsize,
    need_resched: AtomicBool,
    /// The preempt count of the running thread.
    preempt: AtomicU32,
}

// SAFETY: `queue` is only touched with `lock` held.
unsafe impl Sync for Rq {}

impl Rq {
    const fn new() -> Self {
        Self {
            lock: RawTicketLock::new(),
            queue: UnsafeCell::new(Ring::new()),
            len: AtomicUsize::new(0),
            current: AtomicUsize::new(usize::MAX),
            prev: AtomicUsize::new(usize::MAX),
            need_resched: AtomicBool::new(false),
            preempt: AtomicU32::new(0),
        }
    }

    /// The queue.
    ///
    /// # Safety
    /// `lock` is held by the caller's context, and the reference does not
    /// outlive that.
    #[allow(clippy::mut_from_ref)]
    unsafe fn queue(&self) -> &mut Ring {
        // SAFETY: the lock gives exclusive access (caller's contract).
        unsafe { &mut *self.queue.get() }
    }
}

static RQ: [CachePadded<Rq>; MAX_CPUS] = [const { CachePadded::new(Rq::new()) }; MAX_CPUS];

/// Per CPU: switches out (the run-queue lock taken by the outgoing thread)
/// and switches in (released by the incoming one): equal whenever no
/// switch is under way.
pub static SWITCH_OUT: Counters = Counters::new();
/// See [`SWITCH_OUT`].
pub static SWITCH_IN: Counters = Counters::new();
/// Per CPU: switches made by preemption (timer or `preempt_enable`).
pub static PREEMPTIONS: Counters = Counters::new();
/// Per CPU: threads that arrived by migration.
pub static MIGRATIONS: Counters = Counters::new();

/// Every CPU, at boot, before its interrupts come on: its flow of control
/// becomes its boot thread.
pub fn init_cpu(cpu: usize) {
    THREADS[cpu].state.store(RUNNABLE, Ordering::Relaxed);
    THREADS[cpu].cpu.store(cpu, Ordering::Relaxed);
    // Relaxed: only this CPU reads its `current` (or a diagnostic).
    RQ[cpu].current.store(cpu, Ordering::Relaxed);
}

/// The running thread's id.
pub fn current() -> usize {
    // Relaxed: this CPU's own word. A preemption between the two loads
    // puts the thread back on the same CPU (see the module docs), where
    // `current` is this thread again.
    RQ[cpu::current()].current.load(Ordering::Relaxed)
}

/// Times thread `id` was switched out by preemption.
pub fn preemptions_of(id: usize) -> u64 {
    THREADS[id].preempted.load(Ordering::Relaxed)
}

/// Times thread `id` called [`block`] (since it started).
pub fn blocks_of(id: usize) -> u64 {
    // Relaxed: a statistic of the calling thread itself, or read after
    // the harness's barriers.
    THREADS[id].blocks.load(Ordering::Relaxed)
}

/// This CPU's preempt count.
pub fn preempt_count() -> u32 {
    RQ[cpu::current()].preempt.load(Ordering::Relaxed)
}

/// ksync's `preempt_disable` hook: +1 on this CPU's count.
///
/// A load and a store, not a read-modify-write: only this CPU's thread
/// context and its interrupt handlers change the word, handlers leave it as
/// they found it, and a thread preempted between the load and the store
/// resumes on this CPU with the word back at its own value (saved and
/// restored by the switch), so the store is right whenever it happens
/// (preempted threads never change CPU: see the module docs).
#[inline]
pub fn preempt_disable() {
    preempt_disable_cpu_id();
}

/// ksync's `preempt_disable_cpu_id` hook (Linux's `get_cpu`):
/// [`preempt_disable`], returning the CPU id it read for it (the CPU the
/// caller now stays on).
pub fn preempt_disable_cpu_id() -> usize {
    let cpu = cpu::current();
    let count = &RQ[cpu].preempt;
    // Relaxed: this CPU's own word (see `preempt_disable`). A preemption
    // before the store puts the thread back on this CPU (preempted threads
    // never change CPU), so `cpu` is still the caller's CPU after it.
    count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    cpu
}

/// ksync's `preempt_enable` hook: -1 on this CPU's count; at 0, with a
/// switch pending and interrupts on outside an interrupt handler, switches
/// now (Linux's `preempt_schedule`).
///
/// Inline, as `preempt_disable` is: every spinlock release calls it, and
/// the common case (a count above 1, or nothing pending) is a load, a
/// store and a flag test, like xv6's `pop_off`; the switch is out of line.
///
/// # Panics
/// At count 0 (an enable without its disable).
#[inline]
pub fn preempt_enable() {
    let rq = &RQ[cpu::current()];
    // Relaxed: as in `preempt_disable`.
    let count = rq.preempt.load(Ordering::Relaxed);
    if count == 0 {
        enable_without_disable();
    }
    rq.preempt.store(count - 1, Ordering::Relaxed);
    if count == 1 && rq.need_resched.load(Ordering::Relaxed) {
        preempt_now();
    }
}

#[cold]
#[inline(never)]
fn enable_without_disable() -> ! {
    panic!("preempt_enable without preempt_disable")
}

/// `preempt_enable` brought the count to 0 with a switch pending: switches
/// now if interrupts are on outside an interrupt handler (otherwise the
/// interrupt's own return, or the next tick, does it).
#[cold]
#[inline(never)]
fn preempt_now() {
    if arch::irq_enabled() && !irq::in_handler() {
        switch_out(How::Preempt);
    }
}

/// From every timer interrupt on `cpu`, `now` the counter: wakes the
/// threads last run on this CPU whose [`block_until`] deadline has passed
/// (each blocked thread is looked at by one CPU's tick only, the one it
/// will be woken onto); then, a time slice being one tick, asks for a
/// switch whenever some other thread waits for this CPU.
pub fn tick(cpu: usize, now: u64) {
    // Relaxed: a hint. A timed block that this load misses is seen by a
    // later tick: it only makes that wake-up one tick late.
    if TIMED.load(Ordering::Relaxed) > 0 {
        for (id, thread) in THREADS.iter().enumerate().skip(MAX_CPUS) {
            // Relaxed: the deadline is a plain value (no data hangs on it),
            // and `wake` has its own ordering with the thread's block.
            let deadline = thread.deadline.load(Ordering::Relaxed);
            if deadline <= now
                && thread.cpu.load(Ordering::Relaxed) == cpu
                && thread
                    .deadline
                    .compare_exchange(deadline, NO_DEADLINE, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                wake(id, cpu);
            }
        }
    }
    // Relaxed: a hint; the switch reads the queue under its lock.
    if RQ[cpu].len.load(Ordering::Relaxed) > 0 {
        RQ[cpu].need_resched.store(true, Ordering::Relaxed);
    }
}

/// The end of a timer interrupt (`arch::Upcalls::irq_exit`), interrupts
/// off: preempts the interrupted thread if a switch is pending, its
/// preempt count is 0 and it had interrupts on.
pub fn irq_exit(interrupted_irqs_on: bool) {
    let rq = &RQ[cpu::current()];
    if interrupted_irqs_on
        && rq.need_resched.load(Ordering::Relaxed)
        && rq.preempt.load(Ordering::Relaxed) == 0
    {
        switch_out(How::Preempt);
    }
}

/// Gives the CPU to the next runnable thread on it, if any; returns when
/// this thread runs again.
///
/// # Panics
/// With preemption disabled ("scheduling while atomic").
pub fn yield_now() {
    switch_out(How::Yield);
}

/// Waits a little without blocking (for a boot thread, which never
/// blocks, or any thread polling for something): gives the CPU to the
/// next runnable thread if there is one, and otherwise sleeps until the
/// next interrupt (a timer tick, at most a period away), so that an idle
/// vCPU gives its host CPU to the others. A thread woken onto this CPU
/// meanwhile runs from that tick's end (`irq_exit`), as it would after a
/// busy CPU's time slice.
///
/// # Panics
/// With preemption disabled ("scheduling while atomic").
pub fn relax() {
    let rq = &RQ[cpu::current()];
    // Relaxed: a hint; the switch reads the queue under its lock.
    if rq.len.load(Ordering::Relaxed) > 0 {
        yield_now();
        return;
    }
    assert!(
        rq.preempt.load(Ordering::Relaxed) == 0,
        "relax with preemption disabled"
    );
    let was_on = arch::irq_enabled();
    arch::irq_disable();
    // Checked again with interrupts off: a thread queued here from now on
    // waits for the tick that ends the sleep.
    if rq.len.load(Ordering::Relaxed) == 0 {
        arch::wait_for_interrupt();
    }
    if was_on {
        arch::irq_enable();
    }
}

/// Moves the calling worker to `cpu`'s run queue; returns running there.
///
/// # Panics
/// On a boot thread (they stay on their CPUs), with preemption disabled,
/// or for a CPU that has not come up.
pub fn migrate_to(target: usize) {
    assert!(current() >= MAX_CPUS, "a boot thread never migrates");
    assert!(
        target < cpu::online(),
        "migrate_to CPU {target}, not online"
    );
    switch_out(How::Migrate(target));
}

/// Blocks the calling worker until [`wake`] — unless a `wake` came since
/// the last `block` returned: then it returns at once. A waker makes its
/// condition true before it wakes, and a woken thread re-checks, so the
/// wake-ups `block` consumes when it returns (all those sent so far) are
/// covered by that re-check. Only wake-ups sent to *this* thread count: a
/// waiter must make itself findable (a wait queue) before it checks.
///
/// # Panics
/// On a boot thread, or with preemption disabled.
pub fn block() {
    let me = current();
    assert!(me >= MAX_CPUS, "a boot thread never blocks");
    // Relaxed: only this thread writes it (see `blocks_of`).
    let blocks = &THREADS[me].blocks;
    blocks.store(blocks.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    switch_out(How::Block);
    let thread = &THREADS[me];
    // SeqCst: pairs with the waker's SeqCst count, so the caller's re-check
    // of its condition sees what every consumed waker published before.
    let wakes = thread.wakes.load(Ordering::SeqCst);
    thread.wakes_seen.store(wakes, Ordering::Relaxed);
}

/// [`block`] that also ends once the counter reaches `deadline` (a
/// [`tick`] after it wakes the thread), when there is one. Like `block` it
/// may return early: callers re-check their condition and the clock.
///
/// # Panics
/// As [`block`].
pub fn block_until(deadline: Option<u64>) {
    let Some(deadline) = deadline else {
        block();
        return;
    };
    let thread = &THREADS[current()];
    // Relaxed: a hint and a plain value (see `tick`); a tick that sees the
    // deadline before the thread has switched out sends a wake-up its
    // `block` counts, so it returns at once.
    TIMED.fetch_add(1, Ordering::Relaxed);
    thread
        .deadline
        .store(deadline.min(NO_DEADLINE - 1), Ordering::Relaxed);
    block();
    // A tick may have claimed it already (then this store is a no-op).
    thread.deadline.store(NO_DEADLINE, Ordering::Relaxed);
    TIMED.fetch_sub(1, Ordering::Relaxed);
}

/// Whether thread `id` is on a CPU now (a snapshot, for ksync's mutex
/// spinners: `Kernel::task_running`). A running thread is the `current`
/// of the CPU it last switched in on.
pub fn is_running(id: usize) -> bool {
    let Some(thread) = THREADS.get(id) else {
        return false;
    };
    // Relaxed: a hint that is stale the moment it is read; a spinner that
    // is wrong spins a little longer or sleeps a little early.
    let cpu = thread.cpu.load(Ordering::Relaxed);
    RQ.get(cpu)
        .is_some_and(|rq| rq.current.load(Ordering::Relaxed) == id)
}

/// Makes thread `id` runnable on `cpu` if it is blocked (or about to
/// block: then its `block` returns at once). Callable from any thread
/// context or interrupt handler.
pub fn wake(id: usize, cpu: usize) {
    let thread = &THREADS[id];
    // SeqCst pairs with the SeqCst store and load in `finish_switch`:
    // either this compare-exchange sees BLOCKED, or the waiter's switch
    // sees the count and queues it itself. The compare-exchange's failure
    // ordering must be SeqCst too: a failed one is a load in this
    // store-then-load pattern, and a Relaxed failure let both sides miss
    // each other on aarch64 (a lost wake-up the `sched-waitqueue` suite
    // caught).
    thread.wakes.fetch_add(1, Ordering::SeqCst);
    // A full fence between the count and the state check, as Linux's
    // `try_to_wake_up` has (`smp_mb__after_spinlock`): the SeqCst
    // accesses alone still lost a wake-up under TCG on an LL/SC aarch64
    // image (`cortex-a57`), where a failed compare-exchange is a plain
    // acquire load. Pairs with the fence in `finish_switch`.
    core::sync::atomic::fence(Ordering::SeqCst);
    if thread
        .state
        .compare_exchange(BLOCKED, RUNNABLE, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        let was_on = arch::irq_enabled();
        arch::irq_disable();
        enqueue(cpu, id);
        if was_on {
            arch::irq_enable();
        }
    }
}

/// Starts `entry(arg)` as a new thread on `cpu`'s run queue; `None` when
/// every worker slot is taken. The thread ends when `entry` returns.
pub fn spawn_on(cpu: usize, entry: fn(usize), arg: usize) -> Option<usize> {
    let id = (MAX_CPUS..NR_THREADS).find(|&id| {
        // Acquire pairs with the Release that set the slot FREE in
        // `finish_switch`: the old thread's last use of its stack and
        // fields happened before.
        THREADS[id]
            .state
            .compare_exchange(FREE, RUNNABLE, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    let thread = &THREADS[id];
    let stack = STACKS
        .0
        .get()
        .cast::<u8>()
        .wrapping_add((id - MAX_CPUS) * STACK_SIZE);
    // SAFETY: the slot is ours (claimed above) and its thread is not
    // started, so nobody uses its stack; it is STACK_SIZE bytes.
    let sp = unsafe { arch::init_context(stack, STACK_SIZE, thread_entry) };
    thread.sp.store(sp, Ordering::Relaxed);
    // SAFETY: the slot is claimed and the thread not queued yet: nobody
    // else reads `entry` (see `Sync for Thread`).
    unsafe { *thread.entry.get() = entry };
    thread.arg.store(arg, Ordering::Relaxed);
    thread.preempt.store(0, Ordering::Relaxed);
    thread.preempted.store(0, Ordering::Relaxed);
    thread.blocks.store(0, Ordering::Relaxed);
    thread
        .wakes_seen
        .store(thread.wakes.load(Ordering::Relaxed), Ordering::Relaxed);
    let was_on = arch::irq_enabled();
    arch::irq_disable();
    // The queue's lock (Release here, Acquire by whoever switches to the
    // thread) orders the writes above before its start.
    enqueue(cpu, id);
    if was_on {
        arch::irq_enable();
    }
    Some(id)
}

/// The CPU thread `id` last ran on (a snapshot: where to wake it).
pub fn last_cpu(id: usize) -> usize {
    // Relaxed: a placement hint.
    THREADS[id].cpu.load(Ordering::Relaxed)
}

/// Whether thread `id` has ended and its slot is free again.
pub fn is_free(id: usize) -> bool {
    // Acquire: pairs with the Release in `finish_switch`, so whatever the
    // thread did happens-before the caller's next step.
    THREADS[id].state.load(Ordering::Acquire) == FREE
}

/// Whether any worker thread exists (on any CPU, in any state but
/// `FREE`). A boot thread that is about to stop switching (interrupts or
/// preemption off for a while) waits until this is false: a worker that
/// migrated to its CPU must not be left on its queue.
pub fn workers_busy() -> bool {
    (MAX_CPUS..NR_THREADS).any(|id| !is_free(id))
}

/// Prints every thread that is not free (state, last CPU, preemptions)
/// and every run queue's length and current thread, one
/// `KSYNC-SCHED-THREAD` / `KSYNC-SCHED-RQ` line each: for the watchdog's
/// report of a hang.
pub fn dump() {
    const NAMES: [&str; 6] = [
        "free",
        "runnable",
        "exited",
        "migrating",
        "blocked",
        "blocking",
    ];
    for (id, thread) in THREADS.iter().enumerate() {
        let state = thread.state.load(Ordering::Relaxed);
        if state != FREE {
            crate::println!(
                "KSYNC-SCHED-THREAD id={id} state={} cpu={} preempted={} blocks={} wakes={} wakes_seen={} timed={}",
                NAMES.get(usize::from(state)).unwrap_or(&"?"),
                thread.cpu.load(Ordering::Relaxed),
                thread.preempted.load(Ordering::Relaxed),
                thread.blocks.load(Ordering::Relaxed),
                thread.wakes.load(Ordering::Relaxed),
                thread.wakes_seen.load(Ordering::Relaxed),
                thread.deadline.load(Ordering::Relaxed) != NO_DEADLINE,
            );
        }
    }
    for (cpu, rq) in RQ.iter().enumerate().take(cpu::online()) {
        crate::println!(
            "KSYNC-SCHED-RQ cpu={cpu} current={} len={} locked={} preempt={} need_resched={}",
            rq.current.load(Ordering::Relaxed),
            rq.len.load(Ordering::Relaxed),
            rq.lock.is_locked(),
            rq.preempt.load(Ordering::Relaxed),
            rq.need_resched.load(Ordering::Relaxed),
        );
    }
}

/// Whether CPU `cpu`'s run-queue lock is held (a snapshot for checks).
pub fn rq_locked(cpu: usize) -> bool {
    RQ[cpu].lock.is_locked()
}

/// Puts `id` on `cpu`'s queue. Interrupts off.
fn enqueue(cpu: usize, id: usize) {
    let rq = &RQ[cpu];
    rq.lock.lock();
    // Relaxed: under the lock (see "Orderings").
    THREADS[id].state.store(RUNNABLE, Ordering::Relaxed);
    // SAFETY: the lock is held, for this block only.
    let queue = unsafe { rq.queue() };
    queue.push(id);
    rq.len.store(queue.len, Ordering::Relaxed);
    // SAFETY: taken above by this context.
    unsafe { rq.lock.unlock() };
}

/// Why a thread switches out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Yield,
    Preempt,
    Exit,
    Migrate(usize),
    Block,
}

/// The switch: takes this CPU's run-queue lock, queues the outgoing thread
/// (unless it ends, blocks or moves), picks the next one and switches to
/// it; the lock is released on the other side ([`finish_switch`]). Returns
/// when this thread is switched back in.
fn switch_out(how: How) {
    let irqs_on = arch::irq_enabled();
    arch::irq_disable();
    let cpu = cpu::current();
    let rq = &RQ[cpu];
    // Relaxed: this CPU's own words, interrupts off.
    let entry_count = rq.preempt.load(Ordering::Relaxed);
    if how != How::Preempt && entry_count != 0 {
        panic!("scheduling while atomic: preempt count {entry_count} on CPU {cpu}");
    }
    rq.preempt.store(entry_count + 1, Ordering::Relaxed);
    rq.lock.lock();
    rq.need_resched.store(false, Ordering::Relaxed);
    let prev = rq.current.load(Ordering::Relaxed);
    let thread = &THREADS[prev];
    // SAFETY: the lock is held, until the switch hands it over.
    let queue = unsafe { rq.queue() };
    match how {
        How::Yield | How::Preempt => queue.push(prev),
        How::Exit => thread.state.store(EXITED, Ordering::Relaxed),
        How::Migrate(target) => {
            thread.target.store(target, Ordering::Relaxed);
            thread.state.store(MIGRATING, Ordering::Relaxed);
        }
        How::Block => thread.state.store(BLOCKING, Ordering::Relaxed),
    }
    let Some(next) = queue.pop() else {
        // Only a worker can leave the queue empty, and its CPU's boot
        // thread is then on it.
        panic!("CPU {cpu}: empty run queue (the boot thread is missing)");
    };
    rq.len.store(queue.len, Ordering::Relaxed);
    if next == prev {
        // SAFETY: taken above by this context.
        unsafe { rq.lock.unlock() };
        rq.preempt.store(entry_count, Ordering::Relaxed);
        if irqs_on {
            arch::irq_enable();
        }
        return;
    }
    if how == How::Preempt {
        thread.preempted.fetch_add(1, Ordering::Relaxed);
        PREEMPTIONS.add(cpu, 1);
    }
    let incoming = &THREADS[next];
    thread.irqs_on.store(irqs_on, Ordering::Relaxed);
    // What the switch added to the count (this function's increment and
    // whatever the lock added) goes over to the incoming thread.
    let in_switch = rq.preempt.load(Ordering::Relaxed) - entry_count;
    thread.preempt.store(entry_count, Ordering::Relaxed);
    rq.preempt.store(
        incoming.preempt.load(Ordering::Relaxed) + in_switch,
        Ordering::Relaxed,
    );
    rq.prev.store(prev, Ordering::Relaxed);
    // The lock goes over to the incoming thread with the switch: lockdep
    // (which keeps held locks per thread) hears it leave this thread
    // before `current` names the next one (Linux's `spin_release` in
    // `prepare_lock_switch`); `finish_switch` takes it back.
    rq.lock.lockdep_release();
    rq.current.store(next, Ordering::Relaxed);
    incoming.cpu.store(cpu, Ordering::Relaxed);
    SWITCH_OUT.add(cpu, 1);
    // SAFETY: interrupts are off; `thread.sp` is this thread's slot;
    // `next` is off every queue (popped under the lock we hold) and not
    // running, so its saved stack pointer is valid and used once here
    // (its owner CPU released it only after the switch that saved it,
    // under a run-queue lock we acquired since).
    unsafe { arch::switch_context(thread.sp.as_ptr(), incoming.sp.load(Ordering::Relaxed)) };
    // Switched back in, maybe on another CPU, that CPU's lock held.
    finish_switch();
    if irqs_on {
        arch::irq_enable();
    }
}

/// The incoming thread's half of a switch (Linux's `finish_task_switch`),
/// interrupts off, its CPU's run-queue lock held by the switch: settles the
/// outgoing thread (frees its slot if it ended, queues it on its new CPU if
/// it moves), releases the lock, and drops the switch's preempt count.
fn finish_switch() {
    let cpu = cpu::current();
    let rq = &RQ[cpu];
    let prev = rq.prev.load(Ordering::Relaxed);
    let outgoing = &THREADS[prev];
    SWITCH_IN.add(cpu, 1);
    let moving = match outgoing.state.load(Ordering::Relaxed) {
        EXITED => {
            // Release pairs with the Acquire in `spawn_on` and `is_free`:
            // its last use of its stack is over.
            outgoing.state.store(FREE, Ordering::Release);
            None
        }
        MIGRATING => Some(outgoing.target.load(Ordering::Relaxed)),
        BLOCKING => {
            // Its registers are saved: from now on a waker may queue it.
            // SeqCst pairs with the SeqCst store and compare-exchange in
            // `wake`: either the waker's compare-exchange sees BLOCKED (and
            // queues it), or this load sees the waker's count.
            outgoing.state.store(BLOCKED, Ordering::SeqCst);
            // Pairs with the fence in `wake` (Linux's `set_current_state`
            // is a store and a full barrier).
            core::sync::atomic::fence(Ordering::SeqCst);
            let woken = outgoing.wakes.load(Ordering::SeqCst)
                != outgoing.wakes_seen.load(Ordering::Relaxed);
            let claimed = woken
                && outgoing
                    .state
                    .compare_exchange(BLOCKED, RUNNABLE, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok();
            claimed.then_some(cpu)
        }
        _ => None,
    };
    // The incoming thread's half of the lockdep hand-over (Linux's
    // `spin_acquire` in `finish_lock_switch`).
    rq.lock.lockdep_acquire();
    // SAFETY: the outgoing thread took this CPU's lock in `switch_out`
    // and handed it over with the switch: this context holds it now.
    unsafe { rq.lock.unlock() };
    if let Some(target) = moving {
        enqueue(target, prev);
        if target != cpu {
            MIGRATIONS.add(target, 1);
        }
    }
    let count = rq.preempt.load(Ordering::Relaxed);
    rq.preempt.store(count - 1, Ordering::Relaxed);
}

/// Where a new thread starts (its first switch frame returns here), with
/// interrupts off and its CPU's run-queue lock held.
extern "C" fn thread_entry() -> ! {
    finish_switch();
    arch::irq_enable();
    let id = current();
    let thread = &THREADS[id];
    // SAFETY: written by `spawn_on` before the thread was queued (see
    // `Sync for Thread`); nobody writes it while the thread lives.
    let entry = unsafe { *thread.entry.get() };
    entry(thread.arg.load(Ordering::Relaxed));
    switch_out(How::Exit);
    unreachable!("an exited thread was switched back in");
}
