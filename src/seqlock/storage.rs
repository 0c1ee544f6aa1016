//! The storage of a [`SeqLock`](super::SeqLock)'s data: `T` padded to whole,
//! initialised words ([`Padded`]), and [`Storage`], which readers and
//! writers access only as relaxed atomic words, so that a reader racing a
//! writer is never undefined behaviour.

use core::mem::{self, MaybeUninit};

use super::SeqData;
use crate::sync::{AtomicUsize, Ordering};

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
pub(super) struct Padded<T> {
    _align: [usize; 0],
    pub(super) value: T,
    tail: [u8; WORD - 1],
}

impl<T> Padded<T> {
    /// The words that cover `value`.
    const WORDS: usize = mem::size_of::<T>().div_ceil(WORD);

    pub(super) const fn new(value: T) -> Self {
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
#[cfg(not(ksync_loom))]
pub(super) struct Storage<T> {
    cell: crate::sync::UnsafeCell<Padded<T>>,
}

#[cfg(not(ksync_loom))]
impl<T: SeqData> Storage<T> {
    pub(super) const fn new(value: T) -> Self {
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
    pub(super) fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` excludes every other access to the cell.
        self.cell.with_mut(|p| unsafe { &mut (*p).value })
    }
}

// The loom build's storage: loom's atomics are objects of their own that
// cannot be laid over a `Padded<T>`, so each word is a separate loom atomic
// (and `new` cannot be `const`, nor `get_mut` lend a `&mut T`). Everything
// from `load` down is shared by both builds.
#[cfg(ksync_loom)]
pub(super) struct Storage<T> {
    words: std::vec::Vec<AtomicUsize>,
    _data: core::marker::PhantomData<T>,
}

#[cfg(ksync_loom)]
impl<T: SeqData> Storage<T> {
    pub(super) fn new(value: T) -> Self {
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
    pub(super) fn load(&self, dst: &mut MaybeUninit<Padded<T>>) {
        // Every copy checks the layout, not only `new`: a lock made from
        // zeroed memory never ran `new`.
        let () = T::LAYOUT_CHECK;
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
    pub(super) fn store(&self, src: &Padded<T>) {
        // As in `load`.
        let () = T::LAYOUT_CHECK;
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
    pub(super) unsafe fn load_exclusive(&self) -> T {
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
pub(super) unsafe fn value_of<T: SeqData>(buf: &MaybeUninit<Padded<T>>) -> T {
    // SAFETY: `value` is at offset 0 and inside the copied words; its bytes
    // are those of a valid `T` (caller); `T: Copy`, so reading it out
    // duplicates nothing that needs dropping.
    unsafe { (&raw const (*buf.as_ptr()).value).read() }
}
