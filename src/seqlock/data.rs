//! [`SeqData`]: the types whose values a [`SeqLock`] may copy word by word
//! with atomic loads, and its impls for the primitives, arrays, wrappers
//! and padding-free tuples.

use core::mem;
use core::num;

#[cfg(doc)]
use super::SeqLock;

/// Types a [`SeqLock`] may hold: every byte of every value is initialised,
/// and the bytes mean the same after a copy through integers.
///
/// Readers copy the data word by word with atomic integer loads (see the
/// [module docs](super#reading-without-undefined-behaviour)), so a padding
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
#[cfg_attr(feature = "test-hooks", doc = " ```compile_fail")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
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
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
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
    /// Evaluated wherever a [`SeqLock`] of the type is built, read or
    /// written (a lock made from zeroed memory is never built): a
    /// compile-time check for impls whose rules depend on the layout
    /// (tuples must have no padding). Leave it out.
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
