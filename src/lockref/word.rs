//! The lockref word: where its fields sit, the rule of a lockless update,
//! and the check every lockless step makes before it writes.
//!
//! The layout is the table in the [module docs](super#layout); the
//! constants and functions here are its only definition in code. `LockRef`
//! builds and takes words apart through them, the steps in `arch/` check a
//! word with [`Rule::check`], and the aarch64 LL/SC block, which must check
//! inside its exclusive pair, takes the shifts below as `const` operands.
//!
//! A leaf: it imports nothing from the crate, so `arch/` can use it while
//! `LockRef` uses `arch/`, without a cycle.

// Without 64-bit atomics the lock and the count are separate words and the
// layout goes unused; `Rule` and `Attempt` are used on every target.
#![cfg_attr(not(target_has_atomic = "64"), allow(dead_code))]

/// Width of each ticket of the lock half (tickets are `u16`).
pub(crate) const TICKET_BITS: u32 = u16::BITS;
/// Mask of one ticket, shifted down to bit 0.
pub(crate) const TICKET_MASK: u64 = (1 << TICKET_BITS) - 1;
/// Position of the ticket being served (`owner`).
pub(crate) const OWNER_SHIFT: u32 = 0;
/// Position of the next ticket to hand out (`next`).
pub(crate) const NEXT_SHIFT: u32 = OWNER_SHIFT + TICKET_BITS;
/// Position of the count (`i32`), the high half.
pub(crate) const COUNT_SHIFT: u32 = NEXT_SHIFT + TICKET_BITS;

/// Adding this serves the next ticket (`owner + 1`).
pub(crate) const OWNER_ONE: u64 = 1 << OWNER_SHIFT;
/// Subtracting this takes `owner` from `u16::MAX` back to 0 without
/// borrowing from the fields above it.
pub(crate) const OWNER_WRAP: u64 = TICKET_MASK << OWNER_SHIFT;
/// The `next` field in place.
const NEXT_MASK: u64 = TICKET_MASK << NEXT_SHIFT;

/// Index of the count when the word is viewed in memory as `[i32; 2]`.
#[cfg_attr(
    ksync_loom,
    allow(dead_code, reason = "read by `get_mut`, which loom lacks")
)]
pub(crate) const COUNT_INDEX: usize = if cfg!(target_endian = "little") {
    (COUNT_SHIFT / i32::BITS) as usize
} else {
    1 - (COUNT_SHIFT / i32::BITS) as usize
};

// The count is exactly the high half (what `count_of`, `count_delta` and
// `COUNT_INDEX` rely on), and the tickets fill the low half.
const _: () = assert!(COUNT_SHIFT + i32::BITS == u64::BITS);
const _: () = assert!(COUNT_SHIFT == 2 * TICKET_BITS);

/// The ticket being served.
#[inline(always)]
pub(crate) const fn owner(word: u64) -> u16 {
    (word >> OWNER_SHIFT) as u16
}

/// The next ticket to hand out.
#[inline(always)]
pub(crate) const fn next(word: u64) -> u16 {
    (word >> NEXT_SHIFT) as u16
}

/// Whether the lock half is free: every ticket handed out has been served.
#[inline(always)]
pub(crate) const fn lock_is_free(word: u64) -> bool {
    owner(word) == next(word)
}

/// The count (signed).
#[inline(always)]
pub(crate) const fn count_of(word: u64) -> i32 {
    (word >> COUNT_SHIFT) as u32 as i32
}

/// A word holding `count`, with the lock free.
#[inline(always)]
pub(crate) const fn with_count(count: i32) -> u64 {
    (count as u32 as u64) << COUNT_SHIFT
}

/// The value to add to a word (wrapping) to add `delta` to its count: the
/// lock half is untouched and a carry out of the count is discarded.
#[inline(always)]
pub(crate) const fn count_delta(delta: i32) -> u64 {
    ((delta as i64) << COUNT_SHIFT) as u64
}

/// `word` with one more ticket handed out (`next + 1`, wrapping within its
/// field, so it never carries into the count).
#[inline(always)]
pub(crate) const fn take_ticket(word: u64) -> u64 {
    (word & !NEXT_MASK) | ((next(word).wrapping_add(1) as u64) << NEXT_SHIFT)
}

/// A word from its fields (tests build words they then take apart).
#[cfg(all(test, feature = "test-hooks"))]
pub(crate) const fn compose(count: i32, owner: u16, next: u16) -> u64 {
    with_count(count) | ((next as u64) << NEXT_SHIFT) | ((owner as u64) << OWNER_SHIFT)
}

/// The rule of one lockless lockref update: if the lock is free and
/// `lo <= count <= hi`, the count becomes `count + delta`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    pub(crate) lo: i32,
    pub(crate) hi: i32,
    pub(crate) delta: i32,
}

/// What a step writes when the rule admits the word it saw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Update {
    /// The word to store in place of the one seen.
    pub(crate) word: u64,
    /// The count `word` holds.
    pub(crate) count: i32,
}

impl Rule {
    /// Whether `count` is in `lo..=hi`, as one unsigned comparison.
    #[inline(always)]
    pub(crate) const fn admits(self, count: i32) -> bool {
        (count.wrapping_sub(self.lo) as u32) <= (self.hi.wrapping_sub(self.lo) as u32)
    }

    /// The check every step makes on the word it saw (`seen`) before it
    /// writes: the lock first, then the count's range. `Ok` gives what to
    /// write in its place; `Err` is [`Attempt::Locked`] or
    /// [`Attempt::Refused`], the step's outcome without writing.
    #[inline(always)]
    pub(crate) const fn check(self, seen: u64) -> Result<Update, Attempt> {
        let count = count_of(seen);
        // Both conditions at once (`&`, not `&&`), so that the compiler may
        // test them in either order: the count's range is one compare on
        // the loaded word, the lock two, and the lock-prefixed write that
        // follows waits for both branches.
        if lock_is_free(seen) & self.admits(count) {
            return Ok(Update {
                word: seen.wrapping_add(count_delta(self.delta)),
                count: count + self.delta,
            });
        }
        // Which one failed: a held lock first, as the count is not final
        // while someone holds it.
        if !lock_is_free(seen) {
            Err(Attempt::Locked)
        } else {
            Err(Attempt::Refused(count))
        }
    }
}

/// The outcome of one lockless attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The update was made; the new count.
    Done(i32),
    /// The lock is free but the count (given) is outside the rule's range.
    Refused(i32),
    /// The lock half is held.
    Locked,
    /// Another CPU changed the word first (or an exclusive store failed).
    Lost,
}

#[cfg(all(test, feature = "test-hooks"))]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_stay_apart() {
        for (count, owner_, next_) in [
            (0, 0, 0),
            (-1, 0xffff, 0),
            (i32::MIN, 0, 0xffff),
            (i32::MAX, 0x8000, 0x7fff),
        ] {
            let w = compose(count, owner_, next_);
            assert_eq!((count_of(w), owner(w), next(w)), (count, owner_, next_));
            assert_eq!(lock_is_free(w), owner_ == next_);
        }
        assert_eq!(compose(5, 0, 0), with_count(5));
        // Taking a ticket at the wrap stays in `next`.
        let w = take_ticket(compose(-1, 3, 0xffff));
        assert_eq!((count_of(w), owner(w), next(w)), (-1, 3, 0));
        // Serving the last ticket of the wrap stays in `owner`.
        let w = compose(-1, 0xffff, 0).wrapping_sub(OWNER_WRAP);
        assert_eq!((count_of(w), owner(w), next(w)), (-1, 0, 0));
        assert_eq!(compose(7, 1, 2).wrapping_add(OWNER_ONE), compose(7, 2, 2));
    }

    #[test]
    fn check_reports_a_held_lock_before_the_count() {
        let rule = Rule {
            lo: 1,
            hi: 10,
            delta: -1,
        };
        // Free and in range: the update.
        let update = rule.check(compose(5, 2, 2)).unwrap();
        assert_eq!((update.word, update.count), (compose(4, 2, 2), 4));
        // Free, out of range on either side: refused with the count seen.
        assert_eq!(
            rule.check(compose(0, 2, 2)).unwrap_err(),
            Attempt::Refused(0)
        );
        assert_eq!(
            rule.check(compose(11, 0, 0)).unwrap_err(),
            Attempt::Refused(11)
        );
        // Held: `Locked` whether or not the count is in range (a holder may
        // be changing it).
        for count in [0, 5, 11, -128] {
            assert_eq!(
                rule.check(compose(count, 2, 3)).unwrap_err(),
                Attempt::Locked
            );
        }
    }

    #[test]
    fn count_index_is_the_count_in_memory() {
        let bytes = compose(-5, 0x1234, 0x5678).to_ne_bytes();
        let half = &bytes[COUNT_INDEX * 4..][..4];
        assert_eq!(i32::from_ne_bytes(half.try_into().unwrap()), -5);
    }
}
