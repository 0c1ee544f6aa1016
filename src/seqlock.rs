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
//! ```
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
//! # Interrupts
//!
//! A reader spins while the sequence is odd. If a reader can run in an
//! interrupt handler on the CPU whose writer it interrupted, it spins
//! forever: writers must then disable local interrupts, with
//! [`SeqLock::write_irqsave`] (`write_seqlock_irqsave`), or the handler
//! must use [`SeqLock::try_read`], which never spins. Readers never make a
//! writer wait: they take no lock.
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
//! | `write_seqlock_irqsave` | [`SeqLock::write_irqsave`] |

use core::fmt;
use core::mem::{self, MaybeUninit};
use core::num;
use core::ops::{Deref, DerefMut};

use crate::spinlock::{IrqState, RawTicketLock};
use crate::sync::{AtomicU32, AtomicUsize, Ordering, const_fn, fence, spin_loop};

// ---- SeqData ---------------------------------------------------------------

/// Types a [`SeqLock`] may hold: every byte of every value is initialised,
/// and the bytes mean the same after a copy through integers.
///
/// Readers copy the data word by word with atomic integer loads (see the
/// [module docs](self#reading-without-undefined-behaviour)), so a padding
/// byte — uninitialised memory — would be loaded as an integer, which is
/// undefined behaviour.
///
/// Implemented for the integer and float primitives, `bool`, `()`, `char`
/// and the `NonZero*` integers no wider than a word (see the third rule
/// below), `Option`s of all `NonZero*` integers, [`Wrapping`],
/// [`Saturating`], [`PhantomData`], arrays of `SeqData` types, and tuples
/// of up to six `SeqData` types **without padding** — `(u64, u64)` or
/// `(u32, u16, u16)`, checked at compile time when a `SeqLock` of the
/// tuple is built (`(u64, u32)` has four padding bytes and fails the
/// build). Other structs: a `#[repr(C)]` struct with the impl below.
///
/// ```compile_fail
/// // (u64, u32) has padding: the build fails with an explanation.
/// let lock = ksync::seqlock::SeqLock::new((0u64, 0u32));
/// ```
///
/// # Safety
///
/// Implement it only for a `Copy` type `T` such that:
///
/// * **No value of `T` has an uninitialised byte**: no padding between
///   fields or after the last one, no `union` or `MaybeUninit` field. For
///   a `#[repr(C)]` struct that holds when every field is `SeqData` and the
///   fields' sizes add up to `size_of::<T>()`; assert that at compile time
///   next to the impl (see the example), so that a later change of fields
///   cannot break it silently.
/// * **`T` holds no pointers or references** (`&U`, `*const U`,
///   `NonNull<U>`, `fn()`, `Option<&U>`, ...): their bytes travel through
///   integer loads, which strip a pointer's provenance, so a pointer read
///   back could not be dereferenced.
/// * **Validity survives mixing aligned chunks**: cutting valid values of
///   `T` into chunks of `min(align_of::<T>(), size_of::<usize>())` bytes
///   and taking each chunk from any one of them gives a valid `T`. Fields
///   that accept every bit pattern never matter; fields that do not must
///   be no wider than their own alignment and a word (`bool`, `char`,
///   `NonZeroU32`, fieldless `#[repr(u8)]` enums), with no validity rule
///   tying two fields together (no enums with fields). A `NonZeroU128`,
///   or a `NonZeroU64` on a 32-bit target, fails it.
///
/// # Why `T` need not accept every bit pattern
///
/// A torn copy (words from two different writes) is never treated as a
/// `T`: the words are gathered in a `MaybeUninit<T>`, and `assume_init`
/// runs only after the sequence check has proven that no write overlapped
/// the copy, when the bytes are exactly those of one value a writer stored
/// whole. So `bool`, `char` and enums are fine. The third rule covers the
/// one gap that no 32-bit sequence counter closes (Linux's neither): a
/// reader stalled between its start and its check for exactly a multiple of
/// 2³¹ writes sees the counter back at its start value. Its words can then
/// come from different writes, each word whole (a word is loaded by one
/// atomic load), and the third rule keeps even that mix a valid `T` —
/// inconsistent, but never undefined behaviour.
///
/// # Example
///
/// ```
/// use ksync::seqlock::{SeqData, SeqLock};
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// #[repr(C)]
/// struct Position {
///     x: i32,
///     y: i32,
///     tick: u64,
/// }
///
/// // No padding: the fields' sizes add up to the struct's size.
/// const _: () = assert!(core::mem::size_of::<Position>() == 4 + 4 + 8);
///
/// // SAFETY: `#[repr(C)]`, every field is `SeqData`, and the sizes add up
/// // (asserted above), so every byte is a field byte; no pointers; every
/// // bit pattern of every field is valid.
/// unsafe impl SeqData for Position {}
///
/// static SHIP: SeqLock<Position> = SeqLock::new(Position { x: 0, y: 0, tick: 0 });
///
/// SHIP.write().x = 3;
/// assert_eq!(SHIP.read(), Position { x: 3, y: 0, tick: 0 });
/// ```
///
/// [`Wrapping`]: core::num::Wrapping
/// [`Saturating`]: core::num::Saturating
/// [`PhantomData`]: core::marker::PhantomData
#[doc(alias("NoUninit", "IntoBytes"))]
pub unsafe trait SeqData: Copy {
    /// Evaluated when a [`SeqLock`] of the type is built: a compile-time
    /// check for impls whose rules depend on the layout (tuples must have
    /// no padding). Leave it out.
    #[doc(hidden)]
    const LAYOUT_CHECK: () = ();
}

macro_rules! seq_data {
    (#[$cfg:meta] $($ty:ty),* $(,)?) => {
        $(
            #[$cfg]
            seq_data!($ty);
        )*
    };
    ($($ty:ty),* $(,)?) => {
        $(
            // SAFETY: a primitive (or an `Option` of a `NonZero*`, whose
            // `None` is the zero value of the same size) without padding or
            // pointers, whose invalid bit patterns, if any, lie within one
            // word and one alignment unit (see the `cfg`s at the call sites).
            unsafe impl SeqData for $ty {}
        )*
    };
}

// Every bit pattern valid (or, `bool`, one byte).
seq_data!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    bool,
    (),
);
seq_data!(
    Option<num::NonZeroU8>,
    Option<num::NonZeroU16>,
    Option<num::NonZeroU32>,
    Option<num::NonZeroU64>,
    Option<num::NonZeroU128>,
    Option<num::NonZeroUsize>,
    Option<num::NonZeroI8>,
    Option<num::NonZeroI16>,
    Option<num::NonZeroI32>,
    Option<num::NonZeroI64>,
    Option<num::NonZeroI128>,
    Option<num::NonZeroIsize>,
);
// Invalid bit patterns: only where the type fits in one word.
seq_data!(
    num::NonZeroU8,
    num::NonZeroU16,
    num::NonZeroUsize,
    num::NonZeroI8,
    num::NonZeroI16,
    num::NonZeroIsize,
);
seq_data!(
    #[cfg(any(target_pointer_width = "32", target_pointer_width = "64"))]
    char,
    num::NonZeroU32,
    num::NonZeroI32,
);
seq_data!(
    #[cfg(target_pointer_width = "64")]
    num::NonZeroU64,
    num::NonZeroI64,
);

// SAFETY: array elements are laid out back to back (stride == size), so an
// array of padding-free, pointer-free elements has neither; the array has
// the element's alignment and every element starts at a multiple of it, so
// the array's chunks are the elements' chunks and validity survives mixing.
unsafe impl<T: SeqData, const N: usize> SeqData for [T; N] {
    const LAYOUT_CHECK: () = T::LAYOUT_CHECK;
}
// SAFETY: `#[repr(transparent)]` over `T`.
unsafe impl<T: SeqData> SeqData for num::Wrapping<T> {
    const LAYOUT_CHECK: () = T::LAYOUT_CHECK;
}
// SAFETY: `#[repr(transparent)]` over `T`.
unsafe impl<T: SeqData> SeqData for num::Saturating<T> {
    const LAYOUT_CHECK: () = T::LAYOUT_CHECK;
}

macro_rules! seq_data_tuple {
    ($($name:ident),+) => {
        // SAFETY: every field is `SeqData`, and `LAYOUT_CHECK` (evaluated
        // when a `SeqLock` of the tuple is built, failing the build
        // otherwise) proves that the fields' sizes add up to the tuple's,
        // so there is no padding. Each field sits at a multiple of its own
        // alignment, so, as for a `#[repr(C)]` struct, a word holds whole
        // fields or chunks of fields that accept any bit pattern.
        unsafe impl<$($name: SeqData),+> SeqData for ($($name,)+) {
            const LAYOUT_CHECK: () = {
                $(let () = $name::LAYOUT_CHECK;)+
                assert!(
                    mem::size_of::<Self>() == 0 $(+ mem::size_of::<$name>())+,
                    "this tuple has padding, which a SeqLock cannot copy without undefined \
                     behaviour: reorder or widen its fields (e.g. (u64, u32) -> (u64, u32, u32))"
                );
            };
        }
    };
}
seq_data_tuple!(A, B);
seq_data_tuple!(A, B, C);
seq_data_tuple!(A, B, C, D);
seq_data_tuple!(A, B, C, D, E);
seq_data_tuple!(A, B, C, D, E, F);
// SAFETY: zero-sized: no bytes, no validity.
unsafe impl<T: ?Sized> SeqData for core::marker::PhantomData<T> {}

// ---- SeqCount --------------------------------------------------------------

/// A sequence counter whose writers are serialised by the caller (Linux's
/// `seqcount_t`).
///
/// The data it protects lives elsewhere and must be read and written with
/// atomics (relaxed is enough: the counter orders them), or readers race
/// with writers; [`SeqLock`] packages the counter with its data and lock
/// and does that for you.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::seqlock::SeqCount;
/// use ksync::spinlock::TicketMutex;
///
/// struct Stats {
///     writers: TicketMutex<()>, // serialises the writers
///     seq: SeqCount,
///     packets: AtomicU64,
///     bytes: AtomicU64,
/// }
///
/// static STATS: Stats = Stats {
///     writers: TicketMutex::new(()),
///     seq: SeqCount::new(),
///     packets: AtomicU64::new(0),
///     bytes: AtomicU64::new(0),
/// };
///
/// fn account(len: u64) {
///     let _writer = STATS.writers.lock();
///     // SAFETY: `STATS.writers` is held: no other writer of `STATS.seq`.
///     let _write = unsafe { STATS.seq.write() };
///     STATS.packets.fetch_add(1, Relaxed);
///     STATS.bytes.fetch_add(len, Relaxed);
/// }
///
/// account(1500);
/// account(40);
/// let (packets, bytes) = STATS
///     .seq
///     .read(|| (STATS.packets.load(Relaxed), STATS.bytes.load(Relaxed)));
/// assert_eq!((packets, bytes), (2, 1540));
/// ```
#[doc(alias = "seqcount_t")]
pub struct SeqCount {
    /// Even: no write in progress. Odd: a writer is between
    /// `write_begin` and `write_end`.
    seq: AtomicU32,
}

impl SeqCount {
    const_fn! {
        /// A counter at zero (no write in progress).
        #[doc(alias("seqcount_init", "SEQCNT_ZERO"))]
        pub fn new() -> Self {
            Self { seq: AtomicU32::new(0) }
        }
    }

    /// Starts a read: waits (spins) while a write is in progress and
    /// returns the even sequence number to pass to
    /// [`read_retry`](Self::read_retry).
    ///
    /// Spins forever if it interrupted the writer on this CPU; see the
    /// [module docs](self#interrupts) and
    /// [`try_read_begin`](Self::try_read_begin).
    ///
    /// ```
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// let start = seq.read_begin();
    /// assert!(!seq.read_retry(start));
    /// ```
    #[doc(alias = "read_seqcount_begin")]
    #[inline]
    pub fn read_begin(&self) -> u32 {
        loop {
            if let Some(start) = self.try_read_begin() {
                return start;
            }
            spin_loop();
        }
    }

    /// Starts a read without waiting: the even sequence number, or `None`
    /// while a write is in progress. Never spins, so it is the one to use
    /// in an interrupt handler that may have interrupted the writer.
    ///
    /// ```
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// // SAFETY: this is the only writer.
    /// let write = unsafe { seq.write() };
    /// assert_eq!(seq.try_read_begin(), None);
    /// drop(write);
    /// assert_eq!(seq.try_read_begin(), Some(2));
    /// ```
    #[doc(alias = "raw_read_seqcount")]
    #[inline]
    pub fn try_read_begin(&self) -> Option<u32> {
        // R1: Acquire pairs with the Release store in `write_end` (W2): if
        // we read the even value a writer stored there, its data stores are
        // visible to our data loads.
        let start = self.seq.load(Ordering::Acquire);
        (start & 1 == 0).then_some(start)
    }

    /// Ends a read: `true` if a write began since
    /// [`read_begin`](Self::read_begin) returned `start`, so that what
    /// was read in between may be inconsistent and the read must be
    /// retried.
    ///
    /// ```
    /// # use ksync::seqlock::SeqCount;
    /// let seq = SeqCount::new();
    /// let start = seq.read_begin();
    /// // SAFETY: this is the only writer.
    /// drop(unsafe { seq.write() });
    /// assert!(seq.read_retry(start));
    /// ```
    #[doc(alias = "read_seqcount_retry")]
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        // R2: the Acquire fence pairs with the Release fence in
        // `write_begin` (W1): if one of our data loads read a store made
        // after a writer's W1, that writer's odd increment happens-before
        // the load below, which then cannot return `start`. It also keeps
        // our data loads from moving below this load.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// Runs `f` until it ran without a write overlapping it, and returns
    /// that run's result.
    ///
    /// `f` may run several times, and runs that overlap a write may see
    /// the data half updated (their results are discarded): it should only
    /// load the protected atomics and compute from them, and must not
    /// panic on an inconsistent combination.
    ///
    /// ```
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqCount;
    /// let (seq, lo, hi) = (SeqCount::new(), AtomicU32::new(1), AtomicU32::new(2));
    /// assert_eq!(seq.read(|| (lo.load(Relaxed), hi.load(Relaxed))), (1, 2));
    /// ```
    #[inline]
    pub fn read<R>(&self, mut f: impl FnMut() -> R) -> R {
        loop {
            let start = self.read_begin();
            let result = f();
            if !self.read_retry(start) {
                return result;
            }
        }
    }

    /// Starts a write: the sequence becomes odd, so readers wait or retry.
    ///
    /// # Safety
    ///
    /// Writers are serialised: until the matching
    /// [`write_end`](Self::write_end), no other `write_begin` on this
    /// counter runs, and the previous writer's `write_end` happens-before
    /// this call (holding a lock that every writer of this counter holds
    /// across its write section guarantees both).
    ///
    /// Violating it does not corrupt memory by itself, but readers would
    /// accept torn data, and unsafe code (such as [`SeqLock`]'s) relies on
    /// [`read_retry`](Self::read_retry) returning `false` only for
    /// consistent data.
    ///
    /// ```
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqCount;
    /// let (seq, data) = (SeqCount::new(), AtomicU32::new(0));
    /// // SAFETY: single-threaded: the only writer.
    /// unsafe { seq.write_begin() };
    /// data.store(5, Relaxed);
    /// // SAFETY: ends the write begun above.
    /// unsafe { seq.write_end() };
    /// assert_eq!(seq.read(|| data.load(Relaxed)), 5);
    /// ```
    #[doc(alias = "write_seqcount_begin")]
    #[inline]
    pub unsafe fn write_begin(&self) {
        // Relaxed: writers are serialised (the caller's contract), so only
        // this writer changes `seq` now, and the previous writer's stores
        // are visible to it.
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(
            seq & 1 == 0,
            "seqcount: write_begin while a write is in progress (writers not serialised?)"
        );
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // W1: orders the odd store before the data stores that follow;
        // pairs with R2 in `read_retry`.
        fence(Ordering::Release);
    }

    /// Ends a write: the sequence becomes even again.
    ///
    /// # Safety
    ///
    /// The caller began this write with [`write_begin`](Self::write_begin)
    /// and still serialises writers.
    #[doc(alias = "write_seqcount_end")]
    #[inline]
    pub unsafe fn write_end(&self) {
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(seq & 1 == 1, "seqcount: write_end without write_begin");
        // W2: Release orders the data stores before the even value; pairs
        // with R1 in `try_read_begin`.
        self.seq.store(seq.wrapping_add(1), Ordering::Release);
    }

    /// [`write_begin`](Self::write_begin) now and
    /// [`write_end`](Self::write_end) when the guard drops.
    ///
    /// # Safety
    ///
    /// As for [`write_begin`](Self::write_begin), for the guard's whole
    /// life. (Leaking the guard leaves the sequence odd: readers spin
    /// forever.)
    ///
    /// See [`SeqCount`] for an example.
    #[inline]
    pub unsafe fn write(&self) -> SeqCountWriteGuard<'_> {
        // SAFETY: forwarded caller contract.
        unsafe { self.write_begin() };
        SeqCountWriteGuard { seq: self }
    }

    /// The raw sequence number: a snapshot, stale at once, for statistics
    /// and debugging (use [`read_begin`](Self::read_begin) to read).
    #[inline]
    pub fn sequence(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }
}

impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SeqCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeqCount")
            .field("seq", &self.sequence())
            .finish()
    }
}

/// A write section of a [`SeqCount`]; ends it on drop (see
/// [`SeqCount::write`]).
///
/// ```
/// # use ksync::seqlock::SeqCount;
/// let seq = SeqCount::new();
/// {
///     // SAFETY: single-threaded: the only writer.
///     let _write = unsafe { seq.write() };
///     assert_eq!(seq.sequence(), 1); // odd: readers wait
/// }
/// assert_eq!(seq.sequence(), 2);
/// ```
#[must_use = "the write section ends when the guard drops"]
pub struct SeqCountWriteGuard<'a> {
    seq: &'a SeqCount,
}

impl Drop for SeqCountWriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `SeqCount::write` began this write, under the caller's
        // promise to serialise writers for the guard's life.
        unsafe { self.seq.write_end() }
    }
}

impl fmt::Debug for SeqCountWriteGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeqCountWriteGuard")
            .field("seq", &self.seq.sequence())
            .finish()
    }
}

// ---- storage ---------------------------------------------------------------

const WORD: usize = mem::size_of::<usize>();

/// `T` followed by `WORD - 1` zero bytes, aligned for `usize`.
///
/// # Invariants
/// `value` starts at offset 0 (`repr(C)`, the zero-sized `_align` takes no
/// room), `tail` at `size_of::<T>()`. For `T: SeqData` the first
/// `Self::WORDS * WORD` bytes are therefore all initialised: the bytes
/// of `T` (no padding) and then bytes of `tail`, since
/// `WORDS * WORD < size_of::<T>() + WORD`.
#[repr(C)]
struct Padded<T> {
    _align: [usize; 0],
    value: T,
    tail: [u8; WORD - 1],
}

impl<T> Padded<T> {
    /// The words that cover `value`.
    const WORDS: usize = mem::size_of::<T>().div_ceil(WORD);

    const fn new(value: T) -> Self {
        // INVARIANT: `tail` is initialised (zeros).
        Self {
            _align: [],
            value,
            tail: [0; WORD - 1],
        }
    }
}

/// The data of a [`SeqLock`], accessed only as `Padded::<T>::WORDS` atomic
/// words (and exclusively through `&mut`).
///
/// Normal builds keep a `Padded<T>` in a cell and view its words as
/// `AtomicUsize`s; loom cannot overlay its atomics on memory, so loom
/// builds keep one loom `AtomicUsize` per word instead.
#[cfg(not(loom))]
struct Storage<T> {
    cell: crate::sync::UnsafeCell<Padded<T>>,
}

#[cfg(loom)]
struct Storage<T> {
    words: std::vec::Vec<AtomicUsize>,
    _data: core::marker::PhantomData<T>,
}

#[cfg(not(loom))]
impl<T: SeqData> Storage<T> {
    const fn new(value: T) -> Self {
        const {
            assert!(mem::align_of::<AtomicUsize>() == mem::align_of::<usize>());
            assert!(mem::size_of::<AtomicUsize>() == WORD);
        }
        let () = T::LAYOUT_CHECK;
        Self {
            cell: crate::sync::UnsafeCell::new(Padded::new(value)),
        }
    }

    /// Word `i` of the storage, as an atomic.
    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicUsize {
        debug_assert!(i < Padded::<T>::WORDS);
        // SAFETY: `i < WORDS`, so the word lies inside the cell (`Padded`
        // invariant) and is aligned for `usize` (`_align`), which is the
        // alignment `AtomicUsize` needs (asserted in `new`). The memory lives
        // as long as `&self`. All concurrent accesses to it are atomic, of
        // this same size and partition: readers and writers go through this
        // method only, and non-atomic access needs `&mut self` or `self`.
        // The bytes are initialised (`Padded` invariant), as an integer
        // atomic requires.
        self.cell
            .with_mut(|p| unsafe { AtomicUsize::from_ptr(p.cast::<usize>().add(i)) })
    }

    /// Exclusive access: no atomics needed.
    #[inline]
    fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` excludes every other access to the cell.
        self.cell.with_mut(|p| unsafe { &mut (*p).value })
    }
}

#[cfg(loom)]
impl<T: SeqData> Storage<T> {
    fn new(value: T) -> Self {
        let () = T::LAYOUT_CHECK;
        let padded = Padded::new(value);
        let src = (&raw const padded).cast::<usize>();
        let words = (0..Padded::<T>::WORDS)
            // SAFETY: `i < WORDS` words of an initialised `Padded` (see its
            // invariants), aligned for `usize`.
            .map(|i| AtomicUsize::new(unsafe { src.add(i).read() }))
            .collect();
        Self {
            words,
            _data: core::marker::PhantomData,
        }
    }

    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicUsize {
        &self.words[i]
    }
}

impl<T: SeqData> Storage<T> {
    /// Copies every word into `dst` with relaxed atomic loads. The copy may
    /// be torn (a mix of several writers' words) unless writers are
    /// excluded or the caller validates it with the sequence.
    #[inline]
    fn load(&self, dst: &mut MaybeUninit<Padded<T>>) {
        let dst = dst.as_mut_ptr().cast::<usize>();
        for i in 0..Padded::<T>::WORDS {
            // Relaxed: ordered by the sequence count's R1/R2 (module docs).
            let word = self.word(i).load(Ordering::Relaxed);
            // SAFETY: word `i < WORDS` of a `Padded<T>`-sized, aligned
            // local buffer (`Padded` invariants).
            unsafe { dst.add(i).write(word) };
        }
    }

    /// Stores every word of `src` with relaxed atomic stores. The caller
    /// serialises writers and brackets this with the sequence count.
    #[inline]
    fn store(&self, src: &Padded<T>) {
        let src = (src as *const Padded<T>).cast::<usize>();
        for i in 0..Padded::<T>::WORDS {
            // SAFETY: word `i < WORDS` of a live `Padded<T>`: aligned, and
            // initialised (`Padded` invariants with `T: SeqData`), holding no
            // pointer bytes (`SeqData`).
            let word = unsafe { src.add(i).read() };
            // Relaxed: ordered by the sequence count's W1/W2 (module docs).
            self.word(i).store(word, Ordering::Relaxed);
        }
    }

    /// A copy of the data, without a sequence check.
    ///
    /// # Safety
    /// No writer stores to the data during the call, and the last one's
    /// stores happen-before it (the writers' lock is held, or `&mut` or
    /// ownership of the lock).
    #[inline]
    unsafe fn load_exclusive(&self) -> T {
        let mut buf = MaybeUninit::uninit();
        self.load(&mut buf);
        // SAFETY: no writer ran during the copy and the last one's stores
        // are visible (caller), so the words are those of the last
        // `Padded<T>` stored (or the initial one): `value`'s bytes are those
        // of a valid `T`.
        unsafe { value_of(&buf) }
    }
}

/// The `T` inside a copied `Padded<T>`.
///
/// # Safety
/// The first `WORDS` words of `buf` are a faithful copy of those of a
/// `Padded<T>` holding a valid `T` (its `tail` beyond them may be
/// uninitialised, so `buf` as a whole must not be assumed initialised).
#[inline(always)]
unsafe fn value_of<T: SeqData>(buf: &MaybeUninit<Padded<T>>) -> T {
    // SAFETY: `value` is at offset 0 and inside the copied words; its bytes
    // are those of a valid `T` (caller); `T: Copy`, so reading it out
    // duplicates nothing that needs dropping.
    unsafe { (&raw const (*buf.as_ptr()).value).read() }
}

// ---- SeqLock ---------------------------------------------------------------

/// Data of type `T`, a sequence counter and a writers' lock (Linux's
/// `seqlock_t` with the data it protects): readers copy the data out and
/// retry if a writer got in the way; writers serialise on a ticket lock
/// and never wait for readers.
///
/// Good for small `T` read far more often than written, where readers must
/// not slow writers down (timekeeping) or each other (statistics). Each
/// read copies the whole `T`: for large data, or data behind pointers,
/// use RCU.
///
/// See the [module docs](self) for how reads avoid undefined behaviour and
/// [`SeqData`] for what `T` may be.
///
/// ```
/// use ksync::seqlock::SeqLock;
///
/// let pair = SeqLock::new([1u32, 2]);
/// pair.write().swap(0, 1);
/// assert_eq!(pair.read(), [2, 1]);
/// assert_eq!(pair.read_with(|p| p[0] + p[1]), 3);
/// ```
#[doc(alias("seqlock_t", "DEFINE_SEQLOCK", "seqlock_init"))]
pub struct SeqLock<T> {
    seq: SeqCount,
    /// Serialises writers (the `SeqCount` contract).
    lock: RawTicketLock,
    data: Storage<T>,
}

// SAFETY: the data is only accessed through atomic words (concurrently) or
// exclusively (`&mut`, ownership), readers get copies that the sequence
// check proved whole, and writers are serialised by `lock`. Copies of `T`
// move between threads, hence `T: Send`; no `&T` into the shared storage is
// ever handed out, so `T: Sync` is not needed.
unsafe impl<T: SeqData + Send> Sync for SeqLock<T> {}
// SAFETY: owning a `SeqLock<T>` is owning a `T`.
unsafe impl<T: Send> Send for SeqLock<T> {}

impl<T: SeqData> SeqLock<T> {
    const_fn! {
        /// A seqlock holding `value`. `const`, for `static`s.
        ///
        /// ```
        /// # use ksync::seqlock::SeqLock;
        /// static JIFFIES: SeqLock<u64> = SeqLock::new(0);
        /// assert_eq!(JIFFIES.read(), 0);
        /// ```
        #[doc(alias = "seqlock_init")]
        pub fn new(value: T) -> Self {
            Self { seq: SeqCount::new(), lock: RawTicketLock::new(), data: Storage::new(value) }
        }
    }

    /// A consistent copy of the data: copies it, and copies again while a
    /// writer got in the way. Spins while a write is being published.
    ///
    /// In an interrupt handler that may have interrupted this lock's writer
    /// (without [`write_irqsave`](Self::write_irqsave)), use
    /// [`try_read`](Self::try_read) instead.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(7u16);
    /// assert_eq!(lock.read(), 7);
    /// ```
    #[doc(alias = "read_seqbegin")]
    #[inline]
    pub fn read(&self) -> T {
        loop {
            let start = self.seq.read_begin();
            // SAFETY: `start` is what `read_begin` (R1) just returned.
            if let Some(value) = unsafe { self.copy_since(start) } {
                return value;
            }
        }
    }

    /// Calls `f` once, with a consistent copy of the data (made as by
    /// [`read`](Self::read)), and returns its result. The copy lives in
    /// this call's frame, so `f` can look at part of a large `T` without
    /// moving all of it again.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new([3u64; 8]);
    /// assert_eq!(lock.read_with(|a| a.iter().sum::<u64>()), 24);
    /// ```
    #[inline]
    pub fn read_with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let mut buf = MaybeUninit::uninit();
        loop {
            let start = self.seq.read_begin();
            self.data.load(&mut buf);
            if !self.seq.read_retry(start) {
                break;
            }
        }
        // SAFETY: the sequence check passed: no writer overlapped the copy
        // (R1/R2 with W1/W2, module docs), so the words are those of one
        // published `Padded<T>`.
        let value = unsafe { &(*buf.as_ptr()).value };
        f(value)
    }

    /// One attempt at [`read`](Self::read) that never spins: `None` if a
    /// write was being published before or during the copy.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(1i8);
    /// assert_eq!(lock.try_read(), Some(1));
    /// ```
    #[inline]
    pub fn try_read(&self) -> Option<T> {
        let start = self.seq.try_read_begin()?;
        // SAFETY: `start` is what `try_read_begin` (R1) just returned.
        unsafe { self.copy_since(start) }
    }

    /// Starts a hand-rolled read section (Linux's `read_seqbegin`): spins
    /// while a write is being published and returns the even sequence
    /// number for [`read_at`](Self::read_at) and
    /// [`read_retry`](Self::read_retry).
    ///
    /// Useful to read several things consistently with this lock's data
    /// (other atomics, or several reads of the data), or as a version
    /// number: `read_retry(start)` tells whether anything was published
    /// since.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(10u32);
    /// let extra = AtomicU32::new(1); // also only changed inside write sections
    /// let (value, extra) = loop {
    ///     let start = lock.read_begin();
    ///     let Some(value) = lock.read_at(start) else { continue };
    ///     let e = extra.load(Relaxed);
    ///     if !lock.read_retry(start) {
    ///         break (value, e);
    ///     }
    /// };
    /// assert_eq!((value, extra), (10, 1));
    /// ```
    #[doc(alias = "read_seqbegin")]
    #[inline]
    pub fn read_begin(&self) -> u32 {
        self.seq.read_begin()
    }

    /// Ends a hand-rolled read section: `true` if a write was published
    /// (or began) since [`read_begin`](Self::read_begin) returned `start`,
    /// so the section must be retried.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(0u8);
    /// let start = lock.read_begin();
    /// assert!(!lock.read_retry(start));
    /// *lock.write() = 1;
    /// assert!(lock.read_retry(start));
    /// ```
    #[doc(alias = "read_seqretry")]
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        self.seq.read_retry(start)
    }

    /// The data as of sequence number `start` (from
    /// [`read_begin`](Self::read_begin)): a copy, or `None` if the sequence
    /// is no longer `start` (something was published since), before or
    /// after the copy. The copy is then discarded unseen.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new('a');
    /// let start = lock.read_begin();
    /// assert_eq!(lock.read_at(start), Some('a'));
    /// *lock.write() = 'b';
    /// assert_eq!(lock.read_at(start), None);
    /// ```
    #[inline]
    pub fn read_at(&self, start: u32) -> Option<T> {
        // `start` is any number the caller likes: check it against the
        // counter with an Acquire load of our own (R1), so the copy is
        // ordered after the publication of `start` even if the caller's
        // `read_begin` was long ago (or never happened).
        if self.seq.try_read_begin()? != start {
            return None;
        }
        // SAFETY: `start` was just returned by `try_read_begin` (R1).
        unsafe { self.copy_since(start) }
    }

    /// Copies the data and returns it if the sequence still is `start`
    /// after the copy (R2 fence, then a reload).
    ///
    /// # Safety
    /// `start` is the even value returned by [`SeqCount::try_read_begin`]
    /// or [`SeqCount::read_begin`] (their Acquire load, R1) on `self.seq`,
    /// before this call.
    #[inline]
    unsafe fn copy_since(&self, start: u32) -> Option<T> {
        debug_assert!(start & 1 == 0);
        let mut buf = MaybeUninit::uninit();
        self.data.load(&mut buf);
        if self.seq.read_retry(start) {
            return None;
        }
        // SAFETY: R1 read the even `start` (caller), and after the copy the
        // sequence still is `start` (R2 fence, then the reload): no writer
        // overlapped the copy (R1/R2 pair with W2/W1, module docs), so the
        // words are exactly those of the `Padded<T>` published at `start`,
        // a valid `T`. (Were the counter to wrap around to `start` during
        // the copy, each word would still be whole, and `SeqData`'s third
        // rule keeps the mix a valid `T`.)
        Some(unsafe { value_of(&buf) })
    }

    /// Takes the writers' lock (spinning) and returns a guard that derefs
    /// to a copy of the data; dropping the guard publishes the copy and
    /// unlocks.
    ///
    /// Readers keep seeing the old value until the drop; they spin or
    /// retry only while it is being stored. If readers run in interrupt
    /// handlers, use [`write_irqsave`](Self::write_irqsave).
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new([0u32; 2]);
    /// {
    ///     let mut w = lock.write();
    ///     w[0] = 1;
    ///     assert_eq!(lock.read(), [0, 0]); // not published yet
    ///     w[1] = 1;
    /// }
    /// assert_eq!(lock.read(), [1, 1]);
    /// ```
    #[doc(alias("write_seqlock", "write_sequnlock"))]
    #[inline]
    pub fn write(&self) -> SeqLockWriteGuard<'_, T> {
        self.lock.lock();
        // SAFETY: locked just above; the guard unlocks.
        unsafe { self.guard(None) }
    }

    /// [`write`](Self::write) with local interrupts saved and disabled
    /// *before* spinning on the lock, and restored after the guard has
    /// published and unlocked: a reader in an interrupt handler on this
    /// CPU can then never spin on this CPU's half-published write.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// static TIMEKEEPER: SeqLock<u64> = SeqLock::new(0);
    /// *TIMEKEEPER.write_irqsave() += 1; // interrupts off until published
    /// assert_eq!(TIMEKEEPER.read(), 1);
    /// ```
    #[doc(alias("write_seqlock_irqsave", "write_sequnlock_irqrestore"))]
    #[inline]
    pub fn write_irqsave(&self) -> SeqLockWriteGuard<'_, T> {
        // Interrupts off before spinning: a handler on this CPU must not
        // find the lock held (or the sequence odd) by the code it
        // interrupted.
        let irq = IrqState::save();
        self.lock.lock();
        // SAFETY: locked just above; the guard unlocks.
        unsafe { self.guard(Some(irq)) }
    }

    /// [`write`](Self::write) if the writers' lock is free, without
    /// spinning.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(0u32);
    /// let w = lock.try_write().unwrap();
    /// assert!(lock.try_write().is_none());
    /// drop(w);
    /// ```
    #[doc(alias = "write_tryseqlock")]
    #[inline]
    pub fn try_write(&self) -> Option<SeqLockWriteGuard<'_, T>> {
        // SAFETY: `try_lock` succeeded, so the lock is ours; the guard
        // unlocks.
        self.lock.try_lock().then(|| unsafe { self.guard(None) })
    }

    /// Replaces the data with `value` (lock, publish, unlock), without
    /// copying the old value out first.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let lock = SeqLock::new(1.5f64);
    /// lock.store(2.5);
    /// assert_eq!(lock.read(), 2.5);
    /// ```
    #[inline]
    pub fn store(&self, value: T) {
        self.lock.lock();
        // SAFETY: the lock is held (locked just above).
        unsafe {
            self.publish_locked(&Padded::new(value));
            self.lock.unlock();
        }
    }

    /// The data, through exclusive access: no atomics, no lock.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// let mut lock = SeqLock::new(1u32);
    /// *lock.get_mut() += 1;
    /// assert_eq!(lock.read(), 2);
    /// ```
    #[cfg(not(loom))]
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// The data, consuming the lock.
    ///
    /// ```
    /// # use ksync::seqlock::SeqLock;
    /// assert_eq!(SeqLock::new(5u8).into_inner(), 5);
    /// ```
    #[inline]
    pub fn into_inner(self) -> T {
        // SAFETY: ownership excludes writers, and whatever moved the lock
        // to us ordered the last writer's stores before this call.
        unsafe { self.data.load_exclusive() }
    }

    /// A guard holding a copy of the data; it publishes and unlocks on
    /// drop.
    ///
    /// # Safety
    /// `self.lock` is held by the caller, and its ownership passes to the
    /// guard.
    #[inline]
    unsafe fn guard(&self, irq: Option<IrqState>) -> SeqLockWriteGuard<'_, T> {
        // SAFETY: the lock is held (caller), so only we write the data, and
        // the lock's Acquire made the previous writer's stores visible.
        let value = Padded::new(unsafe { self.data.load_exclusive() });
        SeqLockWriteGuard {
            lock: self,
            value,
            _irq: irq,
        }
    }

    /// Publishes `value`: odd, stores, even.
    ///
    /// # Safety
    /// `self.lock` is held by the caller.
    #[inline]
    unsafe fn publish_locked(&self, value: &Padded<T>) {
        // SAFETY: the lock serialises writers, and its Acquire/Release
        // ordering makes the previous writer's `write_end` happen-before
        // this `write_begin`.
        unsafe { self.seq.write_begin() };
        self.data.store(value);
        // SAFETY: ends the write begun above, lock still held.
        unsafe { self.seq.write_end() };
    }
}

impl<T: SeqData + Default> Default for SeqLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T: SeqData + fmt::Debug> fmt::Debug for SeqLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_read`: never spin inside a formatter (it may run on the
        // writer's CPU, or in the write section itself).
        let mut d = f.debug_struct("SeqLock");
        match self.try_read() {
            Some(value) => d.field("data", &value),
            None => d.field("data", &format_args!("<being written>")),
        };
        d.field("seq", &self.seq.sequence()).finish()
    }
}

/// A write section of a [`SeqLock`]: derefs to a private copy of the data,
/// which is published (and the lock released, and interrupts restored for
/// [`write_irqsave`](SeqLock::write_irqsave)) when the guard drops.
///
/// `!Send`: it may hold the interrupt state of the CPU that took it.
///
/// ```
/// # use ksync::seqlock::SeqLock;
/// let lock = SeqLock::new([1u8, 2, 3]);
/// let mut guard = lock.write();
/// guard.reverse(); // a private copy: readers still see [1, 2, 3]
/// assert_eq!(lock.read(), [1, 2, 3]);
/// drop(guard); // published
/// assert_eq!(lock.read(), [3, 2, 1]);
/// ```
#[must_use = "the new value is published when the guard drops"]
pub struct SeqLockWriteGuard<'a, T: SeqData> {
    lock: &'a SeqLock<T>,
    /// The data being written, with the zero tail that the word stores
    /// cover.
    value: Padded<T>,
    /// Dropped after `drop` has published and unlocked.
    _irq: Option<IrqState>,
}

impl<T: SeqData> Deref for SeqLockWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.value.value
    }
}

impl<T: SeqData> DerefMut for SeqLockWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value.value
    }
}

impl<T: SeqData> Drop for SeqLockWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard owns the held lock (`SeqLock::guard`'s
        // contract); it is released here, once.
        unsafe {
            self.lock.publish_locked(&self.value);
            self.lock.lock.unlock();
        }
    }
}

impl<T: SeqData + fmt::Debug> fmt::Debug for SeqLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
