//! A wait queue: threads block until a condition holds, and whoever makes
//! it hold wakes them (Linux's `wait_queue_head_t` with `prepare_to_wait`,
//! `finish_wait` and `wake_up`, much reduced).
//!
//! The waiter's protocol is "prepare, re-check, block" ([`WaitQueue::wait_until`]):
//! it puts itself on the queue first, then checks the condition, and blocks
//! only if it still fails. A waker makes the condition true first, then
//! takes waiters off the queue and wakes them. So a waker that comes
//! between the waiter's check and its block finds the waiter queued, and
//! its wake-up is not lost: `sched::block` returns at once for a thread
//! woken since its last block. Checking before queueing (the `sched-waitqueue`
//! suite's control) loses wake-ups.
//!
//! The queue is a list of thread ids under an `IrqTicketMutex` (wakers may
//! run in interrupt handlers). Wake-ups may be spurious (a waiter woken
//! twice returns from its next `block` at once): waiters re-check.

use ksync::spinlock::IrqTicketMutex;

use super::{NR_THREADS, block, current, last_cpu, wake};

/// Waiting threads, in arrival order.
struct Waiters {
    ids: [u8; NR_THREADS],
    len: usize,
}

impl Waiters {
    fn position(&self, id: usize) -> Option<usize> {
        self.ids[..self.len]
            .iter()
            .position(|&w| usize::from(w) == id)
    }

    fn remove_at(&mut self, i: usize) -> usize {
        let id = self.ids[i];
        self.ids.copy_within(i + 1..self.len, i);
        self.len -= 1;
        usize::from(id)
    }
}

/// Threads waiting for a condition.
pub struct WaitQueue {
    waiters: IrqTicketMutex<Waiters>,
}

impl WaitQueue {
    /// An empty queue.
    pub const fn new() -> Self {
        Self {
            waiters: IrqTicketMutex::new(Waiters {
                ids: [0; NR_THREADS],
                len: 0,
            }),
        }
    }

    /// Puts the calling thread on the queue unless it is there already
    /// (Linux's `prepare_to_wait`).
    pub fn prepare(&self) {
        let me = current();
        let mut waiters = self.waiters.lock();
        if waiters.position(me).is_none() {
            let len = waiters.len;
            waiters.ids[len] = me as u8;
            waiters.len += 1;
        }
    }

    /// Takes the calling thread off the queue if it is still there
    /// (Linux's `finish_wait`).
    pub fn finish(&self) {
        let me = current();
        let mut waiters = self.waiters.lock();
        if let Some(i) = waiters.position(me) {
            waiters.remove_at(i);
        }
    }

    /// Blocks the calling worker thread until `condition()` holds, which a
    /// waker makes true before it calls [`wake_one`](Self::wake_one) or
    /// [`wake_all`](Self::wake_all).
    pub fn wait_until(&self, mut condition: impl FnMut() -> bool) {
        loop {
            self.prepare();
            if condition() {
                break;
            }
            block();
        }
        self.finish();
    }

    /// Wakes the longest waiter, if any, onto the CPU it last ran on.
    /// Returns whether there was one.
    pub fn wake_one(&self) -> bool {
        let id = {
            let mut waiters = self.waiters.lock();
            (waiters.len > 0).then(|| waiters.remove_at(0))
        };
        if let Some(id) = id {
            wake(id, last_cpu(id));
        }
        id.is_some()
    }

    /// Wakes every waiter.
    pub fn wake_all(&self) {
        while self.wake_one() {}
    }
}
