//! The host hooks on OS threads: ids from a process-wide table, freed when
//! a thread exits; a preemption count per thread, and the migration model
//! (see [`super`]).

use std::boxed::Box;
use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

use crate::kernel::MAX_CPUS;

/// Ids in use (index = id). A fixed array: nothing allocates while it is
/// locked (an allocator that wakes a queue asks for a CPU id, re-entering).
static IN_USE: Mutex<[bool; MAX_CPUS]> = Mutex::new([false; MAX_CPUS]);

struct ThreadCpu(Cell<Option<usize>>);

impl Drop for ThreadCpu {
    fn drop(&mut self) {
        #[cfg(feature = "hostile")]
        super::hostile::thread_exiting();
        if let Some(id) = self.0.get() {
            release(id);
        }
    }
}

/// The CPU id of a thread whose [`THIS_CPU`] is gone: a thread-local
/// destructor that runs after it (registered before the thread's first
/// ksync call) and calls into ksync. Claimed then (a CPU coming online for
/// the rest of the exit), and freed by its own destructor, which runs
/// after the destructor that claimed it (registered while the thread's
/// locals are torn down, it is run in that same pass).
struct ExitCpu(Cell<Option<usize>>);

impl Drop for ExitCpu {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            release(id);
        }
    }
}

/// An exiting thread's CPU goes offline and its id is free again.
fn release(id: usize) {
    // An exiting thread is an offline CPU: it must not hold up
    // grace periods, and the next thread with this id starts
    // offline. A thread that panicked inside a read section exits
    // with the section open: the report of that (a panic) must not
    // abort the process from a thread-local destructor, which
    // would hide the first panic's test failure.
    let offline = std::panic::catch_unwind(|| crate::rcu::offline_cpu(id));
    if offline.is_err() {
        std::eprintln!(
            "ksync test hooks: CPU {id} went offline with a read section open (see the panic above)"
        );
    }
    #[cfg(feature = "lockdep")]
    crate::lockdep::cpu_offline(id);
    // (lockdep's `cpu_offline` does this too.)
    #[cfg(all(debug_assertions, not(feature = "lockdep"), not(ksync_loom)))]
    crate::kernel::irq::forget_masking(id);
    let _ = CPU_ID.try_with(|c| c.set(usize::MAX));
    let mut used = lock_in_use();
    used[id] = false;
}

// The id sits in a destructor-less thread-local (a plain TLS load on the
// hot path, `usize::MAX` until claimed); the one with the destructor that
// frees the id is touched only when the id is claimed.
std::thread_local! {
    /// This thread's "interrupts off" flag: what a CPU has. Masking
    /// interrupts on one thread never excludes another.
    pub(super) static IRQS_OFF: Cell<bool> = const { Cell::new(false) };
    /// Nesting of `enter_interrupt`, and the "interrupts off" flag it
    /// found on the way in.
    pub(super) static IN_IRQ: Cell<(u32, bool)> = const { Cell::new((0, false)) };
    static CPU_ID: Cell<usize> = const { Cell::new(usize::MAX) };
    static THIS_CPU: ThreadCpu = const { ThreadCpu(Cell::new(None)) };
    static EXIT_CPU: ExitCpu = const { ExitCpu(Cell::new(None)) };
    /// See [`late_cpu`]: no destructor, so readable to the thread's end.
    static LATE_CPU: Cell<usize> = const { Cell::new(usize::MAX) };
    /// This thread's preemption count, plus [`NOT_ARMED`] while no
    /// preemption is armed ([`preempt_at_next_point`]).
    static PREEMPT: Cell<u32> = const { Cell::new(NOT_ARMED) };
    /// The armed preemption: what the "scheduler" does when it preempts
    /// this thread.
    static PREEMPTION: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
}

/// In [`PREEMPT`]: no preemption is armed. One bit, inverted as Linux's
/// `PREEMPT_NEED_RESCHED` is, so that "count zero and armed" is a word of
/// zero: `preempt_enable` is one decrement that sets the flags (`decl`
/// and a branch on x86_64, as Linux's `preempt_count_dec_and_test`), a
/// read-modify-write like `preempt_disable`'s increment.
const NOT_ARMED: u32 = 1 << 31;

fn lock_in_use() -> MutexGuard<'static, [bool; MAX_CPUS]> {
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

fn claim() -> usize {
    let mut used = lock_in_use();
    let Some(id) = used.iter().position(|u| !u) else {
        drop(used);
        panic!(
            "ksync test hooks: more than {MAX_CPUS} threads use per-CPU data at once \
             (MAX_CPUS = {MAX_CPUS}; raise KSYNC_MAX_CPUS)"
        );
    };
    used[id] = true;
    id
}

#[inline]
pub(super) fn cpu_id() -> usize {
    let id = CPU_ID.with(Cell::get);
    if id != usize::MAX {
        return id;
    }
    cpu_id_slow()
}

/// The id of a thread that has none yet, or one with an armed preemption
/// (whose fast-path id is cleared, so that every `cpu_id` comes here).
#[cold]
#[inline(never)]
fn cpu_id_slow() -> usize {
    let get_or_claim = |cpu: &Cell<Option<usize>>| match cpu.get() {
        Some(id) => id,
        None => {
            let id = claim();
            cpu.set(Some(id));
            id
        }
    };
    // Never `with`: it panics once the local is destroyed, and a panic in
    // a thread-local destructor (a wait at thread exit) aborts.
    let id = THIS_CPU
        .try_with(|cpu| get_or_claim(&cpu.0))
        .or_else(|_| EXIT_CPU.try_with(|cpu| get_or_claim(&cpu.0)))
        .unwrap_or_else(|_| late_cpu());
    if PREEMPT.with(Cell::get) & NOT_ARMED != 0 {
        CPU_ID.with(|c| c.set(id));
    } else if PREEMPT.with(Cell::get) == 0
        && !super::interrupts::irqs_disabled()
        && !masked_by_ksync()
    {
        // Preemption enabled and interrupts on: the id was read, and the
        // task may be preempted (and migrate) before the caller uses it.
        // With interrupts masked the armed preemption waits for a later
        // point, as a timer interrupt waits for the unmask.
        preempt_now();
    }
    id
}

/// The id of a thread whose [`THIS_CPU`] and [`EXIT_CPU`] are both gone: a
/// thread-local destructor that runs after `EXIT_CPU`'s (registered before
/// the thread's first ksync call, when an earlier such destructor claimed
/// `EXIT_CPU`). Kept in [`LATE_CPU`], which has no destructor (readable to
/// the end), and freed by a destructor registered with the C runtime for
/// it: registered during the teardown, that runs right after the
/// destructor that claimed the id, and the next late destructor claims
/// again. Where that registration is not available, the id stays claimed
/// for the process (one per such thread, not per call).
fn late_cpu() -> usize {
    let id = LATE_CPU.with(Cell::get);
    if id != usize::MAX {
        return id;
    }
    let id = claim();
    LATE_CPU.with(|c| c.set(id));
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            // glibc's registration of a thread-local destructor (what
            // std's `thread_local!` uses on this target).
            fn __cxa_thread_atexit_impl(
                dtor: unsafe extern "C" fn(*mut core::ffi::c_void),
                obj: *mut core::ffi::c_void,
                dso_symbol: *mut core::ffi::c_void,
            ) -> i32;
        }
        unsafe extern "C" fn free_late(_: *mut core::ffi::c_void) {
            let id = LATE_CPU.with(Cell::get);
            if id != usize::MAX {
                // Still this thread's id while it goes offline (RCU's
                // offline path takes locks, which ask for the CPU id: a
                // cleared cell would claim, and register, another).
                release(id);
                LATE_CPU.with(|c| c.set(usize::MAX));
            }
        }
        // SAFETY: `free_late` may run at any point of the thread's exit
        // (it touches only the destructor-less `LATE_CPU` and the id
        // table); the object pointer is unused; the DSO symbol is an
        // address inside this binary, as glibc asks (it keeps that object
        // loaded until the destructor has run).
        let registered = unsafe {
            __cxa_thread_atexit_impl(
                free_late,
                core::ptr::null_mut(),
                late_cpu as *const () as *mut core::ffi::c_void,
            )
        };
        if registered != 0 {
            std::eprintln!("ksync test hooks: CPU {id}, claimed at thread exit, stays claimed");
        }
    }
    id
}

/// With preemption enabled, runs the armed preemption (the "scheduler"
/// switching this task out and back in), if any.
fn preempt_now() {
    // `try_with`: both have destructors, and this may run in a later one.
    let switch = PREEMPTION.try_with(Cell::take).ok().flatten();
    // Disarmed whatever was found: once `PREEMPTION` is destroyed (the
    // thread is exiting) nothing can run or arm a switch again, and an
    // armed flag left set would keep every `cpu_id` on the slow path.
    PREEMPT.with(|c| c.set(c.get() | NOT_ARMED));
    let Some(switch) = switch else {
        return;
    };
    let id = THIS_CPU.try_with(|cpu| cpu.0.get()).ok().flatten();
    CPU_ID.with(|c| c.set(id.unwrap_or(usize::MAX)));
    switch();
}

/// Runs `f` with the preemption count raised and no preemption point at
/// its end: no armed preemption fires inside it (see `host::without_points`).
pub(super) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    PREEMPT.with(|c| c.set(c.get() + 1));
    let out = f();
    PREEMPT.with(|c| c.set(c.get() - 1));
    out
}

#[inline]
pub(super) fn preempt_disable() {
    #[cfg(feature = "hostile")]
    if PREEMPT.with(Cell::get) & !NOT_ARMED == 0 {
        // The masked sections open where this preemption section opens:
        // the strict check asks whether the one open here is still open
        // when the count returns to zero.
        OPEN_DEPTH.with(|d| d.set(super::interrupts::mask_depth()));
    }
    PREEMPT.with(|c| c.set(c.get() + 1));
}

#[cfg(feature = "hostile")]
std::thread_local! {
    /// The interrupt-masking depth when the outermost preemption section
    /// opened (hostile kernel, strict mode).
    static OPEN_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[inline]
pub(super) fn preempt_enable() {
    let count = PREEMPT.with(|c| {
        let count = c.get().wrapping_sub(1);
        c.set(count);
        count
    });
    debug_assert!(
        count & !NOT_ARMED != !NOT_ARMED,
        "ksync test hooks: preempt_enable without preempt_disable"
    );
    if count == 0 {
        // The count dropped to zero: a preemption point.
        preempt_now();
    }
    #[cfg(feature = "hostile")]
    if count & !NOT_ARMED == 0 {
        // The hostile kernel's preemption point (and its contract check:
        // not with interrupts masked).
        super::hostile::check_enable_point(OPEN_DEPTH.with(Cell::get));
        super::hostile::point();
    }
}

/// This thread's preemption count: the number of
/// [`preempt_disable`](crate::kernel::Kernel::preempt_disable) calls not
/// yet matched by a `preempt_enable`.
///
/// ```
/// use ksync::{host, kernel};
/// use ksync::spinlock::TicketMutex;
///
/// let lock = TicketMutex::new(());
/// let guard = lock.lock(); // a spinlock's guard keeps preemption off
/// let inner = kernel::preempt_disable(); // nests
/// assert_eq!(host::preempt_count(), 2);
/// drop((inner, guard));
/// assert_eq!(host::preempt_count(), 0);
/// ```
pub fn preempt_count() -> u32 {
    PREEMPT.with(Cell::get) & !NOT_ARMED
}

/// Arms a preemption of this thread: at its next *preemption point* with a
/// preemption count of zero, the model runs `switch` on this thread, as
/// the scheduler would run other tasks (and maybe move this one) before
/// resuming it. The points are where a kernel may preempt a task whose
/// count is zero: right after a `cpu_id` hook call returned the id (so the
/// caller goes on with the id of a CPU it may have left), at the
/// `preempt_enable` that brings the count to zero, and at
/// [`preemption_point`] (a timer interrupt). `switch` typically reports the
/// context switch to RCU ([`rcu::quiescent_state`](crate::rcu::quiescent_state)),
/// calls [`migrate_to`] and waits for the test's other threads. It runs
/// once; arming again replaces it.
///
/// ```
/// use ksync::{host, kernel};
/// # #[cfg(feature = "hostile")]
/// # ksync::host::hostile::set_enabled(false);
///
/// // Move the task to another CPU right after it read its CPU id, as a
/// // preemptible kernel may: the id it holds is stale from then on.
/// let other = kernel::nr_cpus() - 1;
/// host::preempt_at_next_point(move || host::migrate_to(other));
/// let stale = kernel::cpu_id();
/// assert_eq!(kernel::cpu_id(), other);
/// assert_ne!(stale, other);
/// ```
pub fn preempt_at_next_point(switch: impl FnOnce() + 'static) {
    if super::NOOP_PREEMPT {
        panic!("ksync test hooks: built with KSYNC_HOST_NOOP_PREEMPT, the hooks do not count");
    }
    PREEMPTION.with(|p| p.set(Some(Box::new(switch))));
    PREEMPT.with(|c| c.set(c.get() & !NOT_ARMED));
    // Every `cpu_id` now takes the slow path, which checks for the point.
    CPU_ID.with(|c| c.set(usize::MAX));
}

/// A preemption point (a timer interrupt arriving here): runs the armed
/// preemption if this thread's preemption count is zero.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
/// use ksync::{host, kernel};
///
/// static SWITCHED: AtomicBool = AtomicBool::new(false);
/// host::preempt_at_next_point(|| SWITCHED.store(true, Relaxed));
///
/// let guard = kernel::preempt_disable();
/// host::preemption_point(); // a tick with preemption off: no switch
/// assert!(!SWITCHED.load(Relaxed));
/// drop(guard); // the enable to zero is a point: the switch runs
/// assert!(SWITCHED.load(Relaxed));
/// ```
pub fn preemption_point() {
    if PREEMPT.with(Cell::get) == 0 {
        preempt_now();
    }
}

/// Moves this thread to CPU `cpu`, as a scheduler migrates a task: from
/// now on `cpu_id` returns `cpu`. RCU's per-CPU state stays with the CPUs
/// (the CPU left keeps its state; the new one has its own).
///
/// ```
/// use ksync::{host, kernel};
/// use ksync::percpu_counter::PerCpuCounter;
/// # #[cfg(feature = "hostile")]
/// # ksync::host::hostile::set_enabled(false);
///
/// static FORKS: PerCpuCounter = PerCpuCounter::new();
/// FORKS.add(1); // on this CPU's slot
/// host::migrate_to(kernel::nr_cpus() - 1); // the scheduler moves the task
/// FORKS.add(1); // on the new CPU's slot
/// assert_eq!(FORKS.sum(), 2);
/// ```
///
/// # Panics
/// With preemption disabled or interrupts masked (the `Kernel` contract
/// keeps the task on its CPU then), or if another live thread has the id `cpu`, or if `cpu` is
/// at or past `MAX_CPUS`.
pub fn migrate_to(cpu: usize) {
    assert_eq!(
        preempt_count(),
        0,
        "ksync test hooks: migrate_to with preemption disabled"
    );
    assert!(
        !super::interrupts::irqs_disabled() && !masked_by_ksync(),
        "ksync test hooks: migrate_to with interrupts masked (a CPU with \
         interrupts off is not preempted, so its task is not moved)"
    );
    assert!(
        cpu < MAX_CPUS,
        "ksync test hooks: CPU {cpu} is past MAX_CPUS"
    );
    // Not through `cpu_id`, which may be a preemption point.
    let old = THIS_CPU.with(|c| c.0.get()).unwrap_or_else(cpu_id);
    if old == cpu {
        return;
    }
    let mut used = lock_in_use();
    assert!(
        !used[cpu],
        "ksync test hooks: migrate_to({cpu}): another thread runs on CPU {cpu}"
    );
    used[old] = false;
    used[cpu] = true;
    drop(used);
    THIS_CPU.with(|c| c.0.set(Some(cpu)));
    if PREEMPT.with(Cell::get) & NOT_ARMED != 0 {
        CPU_ID.with(|c| c.set(cpu));
    }
}

/// Whether this thread plays a CPU (it has read its id, and its
/// thread-locals are not torn down).
pub(super) fn is_cpu() -> bool {
    THIS_CPU.try_with(|c| c.0.get().is_some()).unwrap_or(false)
}

/// Reserves a free CPU id other than this thread's, starting the search at
/// `r` (random bits): `(this thread's id, the reserved one)`, or `None`
/// when every id is in use. [`move_to_reserved`] completes the move.
#[cfg(feature = "hostile")]
pub(super) fn reserve_free_cpu(r: u64) -> Option<(usize, usize)> {
    let old = THIS_CPU.try_with(|c| c.0.get()).ok()??;
    let mut used = lock_in_use();
    let n = used.len();
    let start = usize::try_from(r % n as u64).unwrap_or(0);
    let new = (0..n).map(|i| (start + i) % n).find(|&i| !used[i])?;
    used[new] = true;
    Some((old, new))
}

/// This thread moves from `old` to `new` (reserved by
/// [`reserve_free_cpu`]), and `old` is free again.
#[cfg(feature = "hostile")]
pub(super) fn move_to_reserved(old: usize, new: usize) {
    THIS_CPU.with(|c| c.0.set(Some(new)));
    if PREEMPT.with(Cell::get) & NOT_ARMED != 0 {
        CPU_ID.with(|c| c.set(new));
    }
    lock_in_use()[old] = false;
}

/// Runs `f` on a free CPU id (searched from `r`, random bits) with the id
/// table locked, so that no thread claims or moves to it meanwhile.
#[cfg(feature = "hostile")]
pub(super) fn with_free_cpu(r: u64, f: impl FnOnce(usize)) {
    let used = lock_in_use();
    let n = used.len();
    if n == 0 {
        return;
    }
    let start = usize::try_from(r % n as u64).unwrap_or(0);
    if let Some(cpu) = (0..n).map(|i| (start + i) % n).find(|&i| !used[i]) {
        f(cpu);
    }
}

/// Runs `f` on every free CPU id, with the id table locked, so that no
/// thread claims or moves to one meanwhile.
#[cfg(feature = "hostile")]
pub(super) fn for_free_cpus(mut f: impl FnMut(usize)) {
    let used = lock_in_use();
    for (cpu, _) in used.iter().enumerate().filter(|(_, u)| !**u) {
        f(cpu);
    }
}

/// Whether this CPU masked interrupts through ksync where the host's own
/// flag does not show it (`ArchIrq`, counted in debug builds and with
/// lockdep): no preemption and no migration then.
/// (The id is read here, not through the `cpu_id` hook: that may be a
/// point of the hostile schedule, which asks this.)
pub(super) fn masked_by_ksync() -> bool {
    #[cfg(any(feature = "lockdep", all(debug_assertions, not(ksync_loom))))]
    {
        let read = || {
            let id = THIS_CPU.try_with(|c| c.0.get()).ok().flatten();
            id.is_some_and(crate::kernel::irq::masked_on)
        };
        // The count is a shim atomic: under the hostile kernel its load
        // would be a point of the schedule, which asks this.
        #[cfg(feature = "hostile")]
        return super::hostile::paused(read);
        #[cfg(not(feature = "hostile"))]
        return read();
    }
    #[cfg(not(any(feature = "lockdep", all(debug_assertions, not(ksync_loom)))))]
    false
}
