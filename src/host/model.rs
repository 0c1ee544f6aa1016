//! The host hooks under loom: model threads are coroutines on one OS
//! thread, so each one's CPU lives in loom's thread locals.

use std::cell::Cell;

use crate::kernel::MAX_CPUS;

// Ids are never reused within one execution (a model has a handful of
// threads): handing an id from an exiting thread to a new one would need a
// modelled synchronization, or loom lets the new thread read the old one's
// slot stale. The counter is per execution.
loom::lazy_static! {
    static ref NEXT_ID: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
}

loom::thread_local! {
    static THIS_CPU: Cell<Option<usize>> = Cell::new(None);
    pub(super) static IRQS_OFF: Cell<bool> = Cell::new(false);
    pub(super) static IN_IRQ: Cell<(u32, bool)> = Cell::new((0, false));
}

fn claim() -> usize {
    let id = NEXT_ID.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
    assert!(
        id < MAX_CPUS,
        "ksync test hooks: more than {MAX_CPUS} loom threads use per-CPU data"
    );
    id
}

pub(super) fn cpu_id() -> usize {
    THIS_CPU.with(|cpu| match cpu.get() {
        Some(id) => id,
        None => {
            let id = claim();
            cpu.set(Some(id));
            id
        }
    })
}

// Loom models neither preempt nor migrate their threads.
pub(super) fn preempt_disable() {}

pub(super) fn preempt_enable() {}

// Tasks under loom: the model's threads, parked and unparked through
// loom (which explores the wake-before-park orders), and whether each has
// exited (a `wake` for it then fails the model: the `Kernel::wake`
// contract); the clock is a counter that every reading advances, so timed
// waits end.
loom::lazy_static! {
    static ref TASKS: loom::sync::Mutex<std::vec::Vec<loom::thread::Thread>> =
        loom::sync::Mutex::new(std::vec::Vec::new());
    static ref CLOCK: loom::sync::atomic::AtomicU64 = loom::sync::atomic::AtomicU64::new(0);
}

std::thread_local! {
    /// Per task of the current execution: whether its thread has ended.
    /// Not a loom object: a model thread's locals are dropped outside the
    /// execution, where loom objects cannot be used. A plain thread local
    /// of the OS thread that runs the model (its threads are coroutines on
    /// it, one at a time), so it sees the execution's real order.
    static EXITED: core::cell::RefCell<std::vec::Vec<bool>> =
        const { core::cell::RefCell::new(std::vec::Vec::new()) };
}

/// A model thread's task token (0 until it asks for one); its drop, when
/// the thread ends, marks the task exited.
struct Token(Cell<usize>);

impl Drop for Token {
    fn drop(&mut self) {
        let token = self.0.get();
        if token != 0 {
            let _ = EXITED.try_with(|exited| {
                if let Some(slot) = exited.borrow_mut().get_mut(token - 1) {
                    *slot = true;
                }
            });
        }
    }
}

loom::thread_local! {
    static TOKEN: Token = Token(Cell::new(0));
}

pub(super) fn current_task() -> usize {
    TOKEN.with(|token| {
        if token.0.get() == 0 {
            let mut tasks = TASKS.lock().unwrap();
            EXITED.with(|exited| {
                let mut exited = exited.borrow_mut();
                if tasks.is_empty() {
                    // A new execution: a new task table.
                    exited.clear();
                }
                exited.push(false);
            });
            tasks.push(loom::thread::current());
            token.0.set(tasks.len());
        }
        token.0.get()
    })
}

pub(super) fn block(deadline_ns: Option<u64>) {
    match deadline_ns {
        None => loom::thread::park(),
        // A timed block is a spurious return: the clock moves on.
        Some(_) => loom::thread::yield_now(),
    }
}

pub(super) fn wake(token: usize) {
    let thread = TASKS.lock().unwrap().get(token - 1).cloned();
    let exited = EXITED.with(|exited| exited.borrow().get(token - 1) == Some(&true));
    assert!(
        !exited,
        "ksync test hooks: Kernel::wake for task {token}, which has exited"
    );
    if let Some(thread) = thread {
        thread.unpark();
    }
}

pub(super) fn task_running(_token: usize) -> bool {
    false
}

/// A loom yield point: the model may switch to another thread.
pub(super) fn yield_now() {
    loom::thread::yield_now();
}

pub(super) fn clock_ns() -> u64 {
    CLOCK.fetch_add(1, loom::sync::atomic::Ordering::Relaxed) + 1
}
