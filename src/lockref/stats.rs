//! Misuse the lockref caught and survived: counted in every build,
//! panicking in builds with debug assertions (see the
//! [module docs](super#saturation-and-misuse)).

use super::MAX;
use crate::sync::{Ordering, StatCounter};

static SATURATED: StatCounter = StatCounter::new(0);
static GET_ON_DEAD: StatCounter = StatCounter::new(0);

/// Process-wide counts of the lockref misuse this crate caught and
/// survived (see the [module docs](super#saturation-and-misuse)).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockref;
///
/// // A watchdog's periodic health check in a release build, where misuse
/// // is counted instead of panicking.
/// let lockref::Stats { saturated, get_on_dead, .. } = lockref::stats();
/// if saturated + get_on_dead > 0 {
///     eprintln!("lockref: {saturated} saturated, {get_on_dead} gets on dead objects");
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct Stats {
    /// Increments that found the count at `i32::MAX` and left it there.
    pub saturated: usize,
    /// `get` calls on a dead lockref (refused).
    pub get_on_dead: usize,
}

/// Returns how often saturation and `get`-on-dead happened so far, in all
/// lockrefs. Release builds do not panic on either: watch this instead.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::lockref::{self, Stats};
///
/// let before = lockref::stats();
/// let dentry = ksync::LockRef::new(1);
/// dentry.get();
/// # let _ = dentry.put_return();
/// assert_eq!(lockref::stats(), before); // correct use is not counted
/// # let _ = Stats::default();
/// ```
pub fn stats() -> Stats {
    Stats {
        saturated: SATURATED.load(Ordering::Relaxed),
        get_on_dead: GET_ON_DEAD.load(Ordering::Relaxed),
    }
}

#[cold]
#[inline(never)]
#[track_caller]
pub(super) fn saturated() {
    SATURATED.fetch_add(1, Ordering::Relaxed);
    if cfg!(debug_assertions) {
        panic!("lockref: reference count saturated at i32::MAX; the object will leak");
    }
}

#[cold]
#[inline(never)]
#[track_caller]
pub(super) fn refused_get(count: i32) {
    if count == MAX {
        saturated();
    } else {
        GET_ON_DEAD.fetch_add(1, Ordering::Relaxed);
        if cfg!(debug_assertions) {
            panic!("lockref: get() on a dead lockref (count {count}); refused");
        }
    }
}
