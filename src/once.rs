//! One-time initialisation: [`Once<T>`] runs one initialiser, once, and
//! hands every caller the value it made; [`Lazy<T, F>`] is a `Once` that
//! carries its initialiser, for `static` singletons (`spin::Once`,
//! `spin::Lazy`, `std::sync::OnceLock`, Linux's `DO_ONCE`).
//!
//! # The state word
//!
//! One word holds everything, so [`Once::get`] on an initialised `Once` is
//! a single `Acquire` load and a compare:
//!
//! | word | meaning |
//! |---|---|
//! | `0` | not initialised, nobody initialising |
//! | `1` | initialised: the value is readable |
//! | `2` | poisoned: an initialiser panicked |
//! | anything else | being initialised by the task whose token is `!word` |
//!
//! The initialiser's token ([`Kernel::current_task`](crate::kernel::Kernel::current_task),
//! Linux's `current`) is what lets misuse be reported instead of hanging:
//!
//! * **Recursion.** The initialiser (directly or through what it calls)
//!   calls `call_once` on the same `Once`: the caller's token is the
//!   initialiser's, so waiting would wait for itself. It panics.
//! * **An interrupt on the initialiser.** An interrupt handler that
//!   interrupted the initialiser and calls `call_once` on the same `Once`
//!   would spin on a CPU whose only other work is the initialiser it
//!   interrupted. In interrupt context `current` is the interrupted task
//!   (Linux, and `current_task`'s default, `cpu_id() + 1`), so the same
//!   token check catches it, wherever the initialiser was preempted to
//!   and migrated from before. It panics too. (A kernel whose
//!   `current_task` gives handlers tokens of their own loses this check:
//!   the handler then spins.)
//! * **A panicking initialiser.** The `Once` is poisoned: every later
//!   caller, and every caller already waiting, panics naming it (its type
//!   and address) instead of waiting for a value that will never come.
//!   (Only with unwinding; under `panic = "abort"` there is nobody left to
//!   wait.)
//!
//! The token is read only on the slow path (the first calls), so a
//! `Once` needs [`set_kernel!`](crate::set_kernel) (or the default
//! `current_task`, `cpu_id() + 1`, which needs `cpu_id`) only for its
//! initialisation: [`get`](Once::get) and an initialised `call_once` call
//! no hook.
//!
//! # Waiting
//!
//! A caller that finds another task initialising waits with ksync's wait
//! strategy (the spin hint, then, every
//! [`SPIN_LIMIT`](crate::kernel::SPIN_LIMIT) rounds, the kernel's
//! [`SpinWait`](crate::kernel::SpinWait) policy: a yield on the host, a
//! halt with a kick if the kernel registered one): the initialiser is an
//! ordinary task that may be preempted, so a waiter that only spun could
//! keep it from running. The initialiser kicks halted waiters when it
//! finishes or panics.

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::Deref;

use crate::kernel::Waiter;
use crate::sync::{AtomicUsize, Ordering, UnsafeCell, const_fn};

const INCOMPLETE: usize = 0;
const COMPLETE: usize = 1;
const POISONED: usize = 2;

/// The word that says "`task` is initialising".
#[inline]
fn running(task: usize) -> usize {
    let word = !task;
    assert!(
        word > POISONED,
        "ksync::Once: Kernel::current_task returned {task:#x}; tokens above usize::MAX - 3 are reserved"
    );
    word
}

/// A value initialised once, by the first caller of
/// [`call_once`](Self::call_once) (Linux's `DO_ONCE`, `spin::Once`,
/// `std::sync::OnceLock`). Usable in a `static` (`const fn new`).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::Once;
///
/// static PAGE_SIZE: Once<usize> = Once::new();
///
/// fn page_size() -> usize {
///     *PAGE_SIZE.call_once(|| 4096) // probe the hardware once
/// }
/// assert_eq!(page_size(), 4096);
/// assert_eq!(PAGE_SIZE.get(), Some(&4096));
/// ```
///
/// See the [module docs](self) for how misuse (recursion, an interrupt on
/// the initialising CPU, a panicking initialiser) is reported.
///
/// # Zeroed memory
///
/// All-zero bytes are an uninitialised `Once` (`bytemuck::Zeroable` with
/// the `bytemuck` feature), for any `T`.
#[doc(alias = "DO_ONCE")]
pub struct Once<T = ()> {
    /// The state word: see the [module docs](self#the-state-word).
    state: AtomicUsize,
    /// Written once by the initialiser, before the Release store of
    /// `COMPLETE`; read only after an Acquire load saw `COMPLETE`.
    data: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is written by one initialiser and only read (`&T`)
// after its Release store of COMPLETE is seen with Acquire, so sharing a
// `Once<T>` shares `&T` (T: Sync) and lets any thread run the initialiser
// that makes the `T` every other thread will read (T: Send).
unsafe impl<T: Send + Sync> Sync for Once<T> {}
// SAFETY: moving the `Once` moves the `T` it may hold.
unsafe impl<T: Send> Send for Once<T> {}

// A panicking initialiser poisons the `Once` (nobody ever sees a
// half-built value), so sharing it across `catch_unwind` is sound.
impl<T: core::panic::RefUnwindSafe + core::panic::UnwindSafe> core::panic::RefUnwindSafe
    for Once<T>
{
}
impl<T: core::panic::UnwindSafe> core::panic::UnwindSafe for Once<T> {}

impl<T> Once<T> {
    /// An uninitialised `Once`, as a constant (`spin::Once::INIT`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// static READY: ksync::Once = ksync::Once::INIT;
    /// READY.call_once(|| ());
    /// assert!(READY.is_completed());
    /// ```
    #[cfg(not(ksync_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    pub const INIT: Self = Self::new();

    const_fn! {
        /// An uninitialised `Once`.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// static CONFIG: ksync::Once<u32> = ksync::Once::new();
        /// assert!(!CONFIG.is_completed());
        /// ```
        #[must_use]
        pub fn new() -> Self {
            Self {
                state: AtomicUsize::new(INCOMPLETE),
                data: UnsafeCell::new(MaybeUninit::uninit()),
            }
        }
    }

    const_fn! {
        /// A `Once` that is initialised already (`spin::Once::initialized`).
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// let once = ksync::Once::initialized(7);
        /// assert_eq!(once.get(), Some(&7));
        /// ```
        #[must_use]
        pub fn initialized(value: T) -> Self {
            Self {
                state: AtomicUsize::new(COMPLETE),
                data: UnsafeCell::new(MaybeUninit::new(value)),
            }
        }
    }

    /// The value, if the `Once` is initialised: one `Acquire` load.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::new();
    /// assert_eq!(once.get(), None);
    /// once.call_once(|| 3);
    /// assert_eq!(once.get(), Some(&3));
    /// ```
    #[inline]
    #[must_use]
    pub fn get(&self) -> Option<&T> {
        // Acquire pairs with the Release store of COMPLETE in `finish`:
        // the initialiser's writes to `data` are visible.
        if self.state.load(Ordering::Acquire) == COMPLETE {
            // SAFETY: COMPLETE was stored after `data` was written, and
            // `data` is never written again while shared.
            Some(unsafe { self.value() })
        } else {
            None
        }
    }

    /// The value, without checking that the `Once` is initialised.
    ///
    /// # Safety
    /// The caller saw the `Once` initialised (a `get` that returned
    /// `Some`, a `call_once` that returned, [`is_completed`](Self::is_completed)
    /// true), or knows it is by other means.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::initialized(1);
    /// // SAFETY: built initialised.
    /// assert_eq!(unsafe { *once.get_unchecked() }, 1);
    /// ```
    #[inline]
    #[must_use]
    pub unsafe fn get_unchecked(&self) -> &T {
        // SAFETY: caller contract.
        unsafe { self.value() }
    }

    /// The value, mutably, if initialised (no atomic operation: `&mut`
    /// proves nobody else looks).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let mut once = ksync::Once::initialized(1);
    /// *once.get_mut().unwrap() += 1;
    /// assert_eq!(once.get(), Some(&2));
    /// ```
    #[inline]
    #[must_use]
    pub fn get_mut(&mut self) -> Option<&mut T> {
        if self.state_mut() == COMPLETE {
            // SAFETY: initialised, and `&mut self` is exclusive.
            Some(
                self.data
                    .with_mut(|data| unsafe { (*data).assume_init_mut() }),
            )
        } else {
            None
        }
    }

    /// The value, if initialised, consuming the `Once`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::initialized(String::from("x"));
    /// assert_eq!(once.into_inner().as_deref(), Some("x"));
    /// ```
    #[must_use]
    pub fn into_inner(mut self) -> Option<T> {
        let state = self.state_mut();
        // Forget the state so that `Drop` does not drop the value too.
        self.set_state_mut(INCOMPLETE);
        if state == COMPLETE {
            // SAFETY: initialised; the state now says it is not, so the
            // value is moved out exactly once.
            Some(self.data.with(|data| unsafe { (*data).assume_init_read() }))
        } else {
            None
        }
    }

    /// Whether the `Once` is initialised (a snapshot: `false` may be
    /// stale the moment it returns; `true` stays true).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::new();
    /// assert!(!once.is_completed());
    /// once.call_once(|| ());
    /// assert!(once.is_completed());
    /// ```
    #[inline]
    #[must_use]
    pub fn is_completed(&self) -> bool {
        // Acquire: as `get`, so that a caller that sees `true` may read
        // the value through `get_unchecked`.
        self.state.load(Ordering::Acquire) == COMPLETE
    }

    /// Whether an initialiser panicked and poisoned the `Once`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::<u8>::new();
    /// assert!(!once.is_poisoned());
    /// ```
    #[inline]
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.state.load(Ordering::Relaxed) == POISONED
    }

    /// The value, initialising it with `f` if nobody has: the first caller
    /// runs `f`, every other caller waits for it and gets its value.
    ///
    /// # Panics
    /// If the `Once` is poisoned (an initialiser panicked, now or while
    /// this caller waited); if called from the context that is running
    /// this `Once`'s initialiser (recursion, or an interrupt handler that
    /// interrupted it): it would wait for itself for ever. See the
    /// [module docs](self).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::Once;
    /// static ROOT: Once<&str> = Once::new();
    ///
    /// assert_eq!(*ROOT.call_once(|| "/"), "/");
    /// assert_eq!(*ROOT.call_once(|| unreachable!()), "/");
    /// ```
    #[inline]
    #[track_caller]
    pub fn call_once(&self, f: impl FnOnce() -> T) -> &T {
        match self.get() {
            Some(value) => value,
            None => match self.slow::<core::convert::Infallible>(|| Ok(f())) {
                Ok(value) => value,
                Err(never) => match never {},
            },
        }
    }

    /// [`call_once`](Self::call_once) with a fallible initialiser: on
    /// `Err` the `Once` stays uninitialised (the next caller tries again,
    /// and a waiter takes over) and the error is returned.
    ///
    /// # Panics
    /// As `call_once`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::new();
    /// assert_eq!(once.try_call_once(|| Err::<u32, _>("not yet")), Err("not yet"));
    /// assert_eq!(once.try_call_once(|| Ok::<_, &str>(5)), Ok(&5));
    /// assert_eq!(once.try_call_once(|| Err::<u32, _>("late")), Ok(&5));
    /// ```
    #[inline]
    #[track_caller]
    pub fn try_call_once<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        match self.get() {
            Some(value) => Ok(value),
            None => self.slow(f),
        }
    }

    /// Waits until the `Once` is initialised by someone else and returns
    /// its value (`spin::Once::wait`).
    ///
    /// # Panics
    /// As `call_once`, and when the caller is the initialiser.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::initialized(9);
    /// assert_eq!(*once.wait(), 9);
    /// ```
    #[track_caller]
    pub fn wait(&self) -> &T {
        let mut waiter = Waiter::new();
        loop {
            match self.state.load(Ordering::Acquire) {
                // SAFETY: COMPLETE seen with Acquire, as in `get`.
                COMPLETE => return unsafe { self.value() },
                POISONED => self.poisoned(),
                INCOMPLETE => {}
                word => self.check_not_initialiser(word),
            }
            waiter.wait::<spin::relax::Spin>(true);
        }
    }

    /// Returns the value if initialised, `None` if nobody initialises it,
    /// and otherwise waits for the running initialiser (`spin::Once::poll`
    /// that waits only for a started initialisation).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let once = ksync::Once::<u8>::new();
    /// assert_eq!(once.poll(), None);
    /// ```
    #[track_caller]
    pub fn poll(&self) -> Option<&T> {
        let mut waiter = Waiter::new();
        loop {
            match self.state.load(Ordering::Acquire) {
                // SAFETY: COMPLETE seen with Acquire, as in `get`.
                COMPLETE => return Some(unsafe { self.value() }),
                POISONED => self.poisoned(),
                INCOMPLETE => return None,
                word => self.check_not_initialiser(word),
            }
            waiter.wait::<spin::relax::Spin>(true);
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn slow<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let me = running(crate::kernel::current_task());
        let mut waiter = Waiter::new();
        loop {
            // Acquire on success: pairs with the Release store of a failed
            // initialiser (INCOMPLETE), so that nothing it did is ordered
            // after our initialiser; on failure, with the Release store of
            // COMPLETE or POISONED.
            match self
                .state
                .compare_exchange(INCOMPLETE, me, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return self.initialise(f),
                // SAFETY: COMPLETE seen with Acquire, as in `get`.
                Err(COMPLETE) => return Ok(unsafe { self.value() }),
                Err(POISONED) => self.poisoned(),
                Err(word) => {
                    if word == me {
                        self.initialiser_waits_for_itself();
                    }
                }
            }
            // Someone else is initialising: wait for the word to change.
            // `give_away`: the initialiser is a task that may have been
            // preempted (it holds nothing that keeps it on its CPU).
            loop {
                waiter.wait::<spin::relax::Spin>(true);
                // Relaxed: only a hint to try again; the compare-exchange
                // above orders what matters.
                if self.state.load(Ordering::Relaxed) <= POISONED {
                    break;
                }
            }
        }
    }

    /// Runs the initialiser; the caller has stored its token in the word.
    #[track_caller]
    fn initialise<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        /// Poisons the `Once` if the initialiser unwinds.
        struct Poison<'a>(&'a AtomicUsize);
        impl Drop for Poison<'_> {
            fn drop(&mut self) {
                // Release: pairs with the waiters' Acquire loads, which then
                // panic (nothing of ours is read, but order it anyway).
                self.0.store(POISONED, Ordering::Release);
                crate::kernel::kick_waiters();
            }
        }
        let poison = Poison(&self.state);
        let result = f();
        core::mem::forget(poison);
        match result {
            Ok(value) => {
                // SAFETY: this context owns the initialisation (its token
                // is in the word), so nobody else touches `data`.
                self.data.with_mut(|data| unsafe { (*data).write(value) });
                // Release pairs with the Acquire loads in `get`, `slow`,
                // `wait` and `poll`: whoever sees COMPLETE sees the value.
                self.state.store(COMPLETE, Ordering::Release);
                crate::kernel::kick_waiters();
                // SAFETY: just written, and never written again.
                Ok(unsafe { self.value() })
            }
            Err(error) => {
                // Back to "nobody initialising": a waiter takes over.
                // Release pairs with the Acquire of the next initialiser's
                // compare-exchange.
                self.state.store(INCOMPLETE, Ordering::Release);
                crate::kernel::kick_waiters();
                Err(error)
            }
        }
    }

    /// # Safety
    /// The `Once` is initialised and the caller saw it (Acquire).
    #[inline]
    unsafe fn value(&self) -> &T {
        // SAFETY: caller contract: written once, never again while shared.
        self.data.with(|data| unsafe { (*data).assume_init_ref() })
    }

    #[track_caller]
    fn check_not_initialiser(&self, word: usize) {
        if word == running(crate::kernel::current_task()) {
            self.initialiser_waits_for_itself();
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn initialiser_waits_for_itself(&self) -> ! {
        let context = if crate::kernel::in_interrupt() {
            "an interrupt handler that interrupted"
        } else {
            "inside (recursion)"
        };
        panic!(
            "ksync::Once<{}> at {:p}: call_once from {context} its own initialiser would wait for ever",
            core::any::type_name::<T>(),
            self,
        );
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn poisoned(&self) -> ! {
        panic!(
            "ksync::Once<{}> at {:p} is poisoned: its initialiser panicked",
            core::any::type_name::<T>(),
            self,
        );
    }

    fn state_mut(&mut self) -> usize {
        #[cfg(not(ksync_loom))]
        return *self.state.get_mut();
        #[cfg(ksync_loom)]
        return self.state.load(Ordering::Relaxed);
    }

    fn set_state_mut(&mut self, state: usize) {
        #[cfg(not(ksync_loom))]
        {
            *self.state.get_mut() = state;
        }
        #[cfg(ksync_loom)]
        self.state.store(state, Ordering::Relaxed);
    }
}

impl<T> Drop for Once<T> {
    fn drop(&mut self) {
        if self.state_mut() == COMPLETE {
            // SAFETY: initialised, and dropped once (`into_inner` resets
            // the state before it moves the value out).
            self.data
                .with_mut(|data| unsafe { (*data).assume_init_drop() });
        }
    }
}

impl<T> Default for Once<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> From<T> for Once<T> {
    fn from(value: T) -> Self {
        Self::initialized(value)
    }
}

impl<T: fmt::Debug> fmt::Debug for Once<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_tuple("Once");
        match self.get() {
            Some(value) => d.field(value),
            None if self.is_poisoned() => d.field(&format_args!("<poisoned>")),
            None => d.field(&format_args!("<uninit>")),
        };
        d.finish()
    }
}

/// A value built on first use by the function it carries (`spin::Lazy`,
/// `std::sync::LazyLock`): a [`Once<T>`] and its initialiser. Usable in a
/// `static`; dereferencing it initialises it.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::Lazy;
///
/// static PRIMES: Lazy<[u32; 4]> = Lazy::new(|| [2, 3, 5, 7]);
///
/// assert_eq!(PRIMES[3], 7);
/// assert_eq!(PRIMES.len(), 4);
/// ```
///
/// Misuse is reported as for [`Once`]: an initialiser that panics poisons
/// it (later dereferences panic naming it), and one that dereferences its
/// own `Lazy` panics instead of hanging.
pub struct Lazy<T, F = fn() -> T> {
    once: Once<T>,
    /// The initialiser: taken by the one caller that runs it.
    init: Cell<Option<F>>,
    marker: PhantomData<T>,
}

// SAFETY: `init` is taken only by the context that won the `Once`'s
// initialisation (one at a time), so sharing a `Lazy` moves `F` to that
// context (F: Send) and shares `&T` as `Once<T>` does.
unsafe impl<T: Send + Sync, F: Send> Sync for Lazy<T, F> {}

impl<T, F> Lazy<T, F> {
    /// The value if it was built, without building it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lazy = ksync::Lazy::new(|| 1);
    /// assert_eq!(ksync::Lazy::get(&lazy), None);
    /// assert_eq!(*lazy, 1);
    /// assert_eq!(ksync::Lazy::get(&lazy), Some(&1));
    /// ```
    #[inline]
    #[must_use]
    pub fn get(this: &Self) -> Option<&T> {
        this.once.get()
    }

    /// The `Once` inside.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let lazy = ksync::Lazy::new(|| 1u8);
    /// assert!(!ksync::Lazy::as_once(&lazy).is_completed());
    /// ```
    #[inline]
    #[must_use]
    pub fn as_once(this: &Self) -> &Once<T> {
        &this.once
    }
}

impl<T, F: FnOnce() -> T> Lazy<T, F> {
    const_fn! {
        /// A `Lazy` that builds its value with `f` on first use.
        ///
        #[cfg_attr(feature = "test-hooks", doc = " ```")]
        #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
        /// static GREETING: ksync::Lazy<&str> = ksync::Lazy::new(|| "hello");
        /// assert_eq!(*GREETING, "hello");
        /// ```
        #[must_use]
        pub fn new(f: F) -> Self {
            Self {
                once: Once::new(),
                init: Cell::new(Some(f)),
                marker: PhantomData,
            }
        }
    }

    /// Builds the value if nobody has and returns it (what `Deref` does).
    ///
    /// # Panics
    /// As [`Once::call_once`]; also if the initialiser is gone without a
    /// value (it can only be, after a panic poisoned the `Once`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// static N: ksync::Lazy<u64> = ksync::Lazy::new(|| 40 + 2);
    /// assert_eq!(*ksync::Lazy::force(&N), 42);
    /// ```
    #[inline]
    #[track_caller]
    pub fn force(this: &Self) -> &T {
        this.once.call_once(|| match this.init.take() {
            Some(f) => f(),
            None => panic!(
                "ksync::Lazy<{}> at {:p}: its initialiser is gone (it panicked before)",
                core::any::type_name::<T>(),
                this,
            ),
        })
    }
}

impl<T, F: FnOnce() -> T> Deref for Lazy<T, F> {
    type Target = T;

    #[inline]
    #[track_caller]
    fn deref(&self) -> &T {
        Self::force(self)
    }
}

impl<T: Default> Default for Lazy<T> {
    fn default() -> Self {
        Self::new(T::default)
    }
}

impl<T: fmt::Debug, F> fmt::Debug for Lazy<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Lazy").field(&self.once).finish()
    }
}
