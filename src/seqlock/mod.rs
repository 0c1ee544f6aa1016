//! Sequence counters and seqlocks: readers that never write shared memory
//! and never block writers, for small, frequently read, rarely written data
//! (clocks, statistics snapshots, a pair of coordinates).
//!
//! Linux's `include/linux/seqlock.h`. A writer makes a sequence number odd,
//! updates the data and makes it even again; a reader notes the (even)
//! number, copies the data, and retries if the number changed meanwhile.
//! Readers write nothing shared, so any number of them run in parallel
//! without moving a cache line, and a writer never waits for them.
//!
//! * [`SeqCount`]: the bare counter (`seqcount_t`). Writers are serialised
//!   by something else (a lock the caller holds); the protected data lives
//!   elsewhere and is read and written with atomics.
//! * [`SeqLock<T>`]: a counter, a writers' ticket lock and the data
//!   (`seqlock_t` plus the data it protects). Readers get a copy of `T`
//!   that is guaranteed consistent; writers get a guard that derefs to `T`.
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::seqlock::SeqLock;
//!
//! // Wall-clock time: (seconds, nanoseconds), updated by the timer tick.
//! static WALL: SeqLock<[u64; 2]> = SeqLock::new([0, 0]);
//!
//! {
//!     let mut now = WALL.write();
//!     now[1] += 999_999_999;
//!     if now[1] >= 1_000_000_000 {
//!         now[0] += 1;
//!         now[1] -= 1_000_000_000;
//!     }
//! } // published here
//! assert_eq!(WALL.read(), [0, 999_999_999]);
//! ```
//!
//! # Reading without undefined behaviour
//!
//! In C a seqlock reader copies the data with plain loads while a writer
//! may be storing to it, and throws the copy away if the sequence changed.
//! In Rust that is a data race, and a data race is undefined behaviour even
//! if the racy value is never used: a plain or `read_volatile` copy of
//! memory that another CPU writes concurrently is UB, full stop (the
//! compiler may, for instance, reload a value it assumes nobody changes).
//!
//! So every access to the protected bytes is atomic: readers copy the data
//! with **relaxed atomic word loads** and writers store it with **relaxed
//! atomic word stores**, word by word over the same, word-aligned
//! partition of the storage (the memory model forbids racing atomic
//! accesses of different sizes to the same bytes, so both sides use the
//! same words). Relaxed atomic loads and stores of a word compile to plain
//! `mov`/`ldr`/`str` instructions: the copy costs what C's does.
//!
//! Two more rules make the copy sound:
//!
//! * **Only initialised bytes may be loaded as integers.** Loading a
//!   padding byte (uninitialised memory) into a `usize` is UB, so `T` must
//!   have none: that is the [`SeqData`] contract. The storage is laid out
//!   as `T` followed by `size_of::<usize>() - 1` zero bytes, aligned for
//!   `usize`, so the words that cover `T` also cover only initialised bytes
//!   when `size_of::<T>()` is not a multiple of the word size (a
//!   `SeqLock<[u8; 3]>` copies one word, three bytes of which are `T`).
//! * **A torn copy is never a `T`.** The words are copied into a
//!   [`MaybeUninit<T>`](core::mem::MaybeUninit), which may hold any bytes.
//!   Only once the sequence check has proven that no writer overlapped the
//!   copy are the bytes declared a `T` (`assume_init`); by then they are
//!   exactly the bytes of a value some writer stored as a whole. That is
//!   why `T` may have invalid bit patterns (`bool`, `char`, `NonZeroU32`,
//!   fieldless enums): a copy that mixes the words of two writes is never
//!   materialised as a `T`, it is thrown away as bytes. (The one mix the
//!   check cannot see, after the 32-bit counter wraps around, is covered
//!   by [`SeqData`]'s third rule.)
//!
//! # Memory ordering
//!
//! ```text
//!   writer (serialised)                 reader
//!   -------------------                 ------
//!   seq := seq + 1 (odd), Relaxed       s := seq (Acquire)     /* R1 */
//!   fence(Release)           /* W1 */   if s is odd: spin, retry
//!   data words := ... (Relaxed)         copy := data words (Relaxed)
//!   seq := seq + 1 (even), Release      fence(Acquire)         /* R2 */
//!                            /* W2 */   retry if seq (Relaxed) != s
//! ```
//!
//! * **W2 pairs with R1.** A reader whose first load reads the even value
//!   stored by a writer's W2 sees all of that writer's data stores (and by
//!   the lock's ordering, all earlier writers'): its copy cannot return
//!   older words.
//! * **W1 pairs with R2.** If any word the reader copied was stored by a
//!   writer after that writer's W1, then W1 synchronizes with R2 (a release
//!   fence, a store, a load reading it, an acquire fence), so the writer's
//!   odd increment happens-before the reader's second load of `seq`, which
//!   therefore reads the odd value or a later one: not `s`, and the reader
//!   retries. If no word came from a later writer, the copy is exactly the
//!   value published at `s`.
//!
//! Together: a reader that gets through the check holds a copy of the
//! value published by one writer, whole. (This is the seqlock of Hans
//! Boehm's "Can seqlocks get along with programming language memory
//! models?", 2012.)
//!
//! # Writers
//!
//! [`SeqLock::write`] takes the ticket lock and returns a guard that
//! derefs to a private copy of the data; dropping the guard publishes the
//! copy (odd, stores, even) and unlocks. Linux makes the sequence odd in
//! `write_seqlock` and even in `write_sequnlock` and writes in place
//! between them; here the data cannot be handed out as `&mut T` (readers
//! load it concurrently, and a plain store racing with their atomic loads
//! is UB), so the odd window shrinks to the copy-back. Readers see the same
//! thing either way — the value before or after the whole write section —
//! and they spin or retry for a few stores instead of the whole section.
//! The guard copies the old value out when it is taken;
//! [`SeqLock::store`] replaces the value without that copy.
//!
//! Writers hold a spinning lock and make the sequence odd, so they must
//! not be preempted meanwhile (other writers would spin on the lock, and
//! readers on the sequence, for a task that cannot run): as Linux's
//! `write_seqlock` (`spin_lock`), every write disables preemption from
//! before it spins until after it has published and unlocked. What it
//! disables is the lock's guard policy, a type parameter as for
//! [`SpinLock`](crate::spinlock::SpinLock): `SeqLock<T>` is
//! `SeqLock<T, PreemptDisabled>`; `SeqLock<T, IrqDisabled>` masks
//! interrupts for every write; `SeqLock<T, NoGuard>` disables nothing
//! (the kernel's own code, which keeps preemption off itself).
//! [`SeqCount`] leaves this to its caller (see
//! [`write_begin`](SeqCount::write_begin)).
//!
//! # Interrupts
//!
//! A reader spins while the sequence is odd. If a reader can run in an
//! interrupt handler on the CPU whose writer it interrupted, it spins
//! forever: writers must then disable local interrupts, with
//! [`SeqLock::write_irqsave`] (`write_seqlock_irqsave`), or the handler
//! must use [`SeqLock::try_read`], which never spins. Readers never make a
//! writer wait: they take no lock.
//!
//! With [`lockdep`](crate::lockdep), a spinning reader (`read`,
//! `read_with`, `read_begin`) in an interrupt handler is checked against
//! the writers' lock's class (Linux's `seqcount_lockdep_reader_access`):
//! if writers also take the lock with interrupts enabled, that is reported
//! as an interrupt inversion, whichever comes first. `try_read` and
//! `read_at` never spin and are not recorded. A reader records nothing
//! else (no lock order): ksync's sequence is odd only while a guard
//! publishes, which waits for nothing.
//!
//! # Compared with Linux
//!
//! | Linux | here |
//! |---|---|
//! | `seqcount_t`, `seqcount_init` | [`SeqCount`], [`SeqCount::new`] |
//! | `read_seqcount_begin`, `read_seqcount_retry` | [`SeqCount::read_begin`], [`SeqCount::read_retry`] |
//! | `raw_read_seqcount` (no wait) | [`SeqCount::try_read_begin`] |
//! | `write_seqcount_begin`, `write_seqcount_end` | [`SeqCount::write_begin`], [`SeqCount::write_end`] (unsafe: the caller serialises writers) |
//! | `seqlock_t`, `DEFINE_SEQLOCK` | [`SeqLock<T>`], [`SeqLock::new`] (the data is inside) |
//! | `read_seqbegin`, `read_seqretry` | [`SeqLock::read_begin`], [`SeqLock::read_retry`], [`SeqLock::read_at`] |
//! | the `do { } while (read_seqretry())` loop | [`SeqLock::read`], [`SeqLock::read_with`], [`SeqCount::read`] |
//! | `write_seqlock`, `write_sequnlock` | [`SeqLock::write`] and its guard's drop |
//! | `write_seqlock_irqsave` | [`SeqLock::write_irqsave`] (or every write: `SeqLock<T, IrqDisabled>`) |
//! | `seqcount_mutex_t` | none: a [`SeqCount`] whose writers hold a mutex and [`kernel::preempt_disable`](crate::kernel::preempt_disable) (see [`write_begin`](SeqCount::write_begin)) |

// The code, one concern a file, in the order a reader meets them:
//
// * `data`: the `SeqData` trait (what may be copied word by word) and its
//   impls for primitives, arrays, wrappers and tuples.
// * `count`: `SeqCount`, the bare counter and its orderings (R1/R2, W1/W2
//   above), and its write guard.
// * `storage`: `T` laid out in whole, initialised words, and the relaxed
//   word-by-word copies in and out of it (the only `unsafe` that touches
//   the shared bytes).
// * `lock`: `SeqLock<T>`, built from the three above, and its write guard.

mod count;
mod data;
mod lock;
mod storage;

pub use count::{SeqCount, SeqCountWriteGuard};
pub use data::SeqData;
pub use lock::{SeqLock, SeqLockWriteGuard};
