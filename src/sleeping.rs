//! The sleeping primitives: locks and waits that put a task to sleep
//! instead of spinning, through the kernel's scheduler hooks
//! ([`Kernel::block`](crate::kernel::Kernel::block) and
//! [`Kernel::wake`](crate::kernel::Kernel::wake)).
//!
//! | module | Linux | what it is |
//! |---|---|---|
//! | [`wait`] | `wait_queue_head_t`, `wait_event`, `wake_up` | the wait queue every other primitive here sleeps on |
//! | [`semaphore`] | `struct semaphore` | a counting semaphore |
//! | [`completion`] | `struct completion` | "this has happened": one or all waiters released |
//! | [`mutex`] | `struct mutex` | a sleeping mutex with optimistic spinning and hand-off |
//! | [`rwsem`] | `struct rw_semaphore` | a sleeping reader-writer lock |
//! | [`percpu_rwsem`] | `struct percpu_rw_semaphore` | a reader-writer semaphore whose readers touch only their own CPU's count |
//!
//! Each module is also reachable at the crate root (`ksync::mutex`,
//! `ksync::wait`, ...), the paths earlier versions used.
//!
//! ```
//! # #[cfg(feature = "test-hooks")] {
//! use ksync::sleeping::completion::Completion;
//!
//! static READY: Completion = Completion::new();
//!
//! let waiter = std::thread::spawn(|| READY.wait_for_completion());
//! READY.complete();
//! waiter.join().unwrap();
//! # }
//! ```

pub mod completion;
pub mod mutex;
pub mod percpu_rwsem;
pub mod rwsem;
pub mod semaphore;
pub mod wait;
