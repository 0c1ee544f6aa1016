//! RCU fd lookup (Linux 2.6.14, 2004-2005: Dipankar Sarma's lock-free
//! `fget`, tiobench +13-15% on a 4-way Xeon).
//!
//! A process's file table ([`Files`], `struct files_struct`): an fd array
//! published through an [`RcuPtr`] and grown by publishing a larger copy,
//! files from a fixed pool, each with a [`LockRef`] count and an
//! [`RcuHead`].
//!
//! * After: `fget` is an RCU lookup plus [`LockRef::get_not_zero`] (a file
//!   being closed has count 0 and is skipped); the last `fput` frees the
//!   file through [`call_rcu`](rcu::call_rcu), so a reader that found it before the close
//!   still reads a file, not a reused one.
//! * After, on a plain reference count (the `kref_lf` idiom: Linux's
//!   `struct file` count became an `atomic_long_t`, later a
//!   `file_ref_t`): the same RCU lookup taking its reference with
//!   [`RefCount::inc_not_zero`] and dropping it with
//!   [`RefCount::dec_and_test`], the last put freeing through
//!   [`call_rcu`](rcu::call_rcu). No lock at all, where the lockref falls
//!   back to its spinlock when the count is low.
//! * Before: the same table read under the table's spinlock
//!   (`files->file_lock`), or under a reader-writer lock; files are freed at
//!   once (a lookup under the lock cannot find a file whose count is 0).
//! * Control: the RCU lookup, but the last `fput` frees (and the pool
//!   reuses) the file at once, without a grace period. A reader that loaded
//!   the pointer before the close then takes a reference on a file reopened
//!   for another fd, which [`check`](crate::Workload::check) reports.
//!
//! Writers (open, close, growth) hold the table's spinlock (the rwlock, for
//! the rwlock variant). CPU 0 opens and closes; every CPU looks up fds: its
//! own long-lived fd most of the time (tiobench's threads each read their
//! own file), a random one otherwise (always, in torture runs).

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize};
use core::{mem::offset_of, ptr};

use ksync::percpu::CachePadded;
use ksync::rcu::{self, RcuHead, RcuPtr, ReadGuard};
use ksync::spinlock::{IrqTicketMutex, TicketMutex};
use ksync::{LockRef, RefCount};

use crate::{Config, Counts, Faults, Rng, Settings, Violation, Workload, violation};

/// The largest table.
pub const MAX_FDS: usize = 64;
/// The table sizes, in order of growth.
const SIZES: [usize; 3] = [16, 32, 64];
/// Files in a table's pool.
pub const FILES: usize = 128;
/// Fds below this are opened at setup and never closed by the writer.
pub const LONG_LIVED: usize = 8;
/// The writer opens below `LOW` open files, closes above `HIGH`, and picks
/// at random in between: the table grows from 16 to 64 during a run.
const LOW: usize = 16;
const HIGH: usize = 48;

/// What steps record, by index.
pub(crate) const MESSAGES: [&str; 4] = [
    "fget returned a file opened for another fd (freed and reused under a reader)",
    "a file was reopened inside a read section that held it (freed without a grace period)",
    "a lookup used a file whose count was 0 (closed under a reference-free user)",
    "a file was freed twice",
];

/// The reference count every variant but [`Protect::RcuRefCount`] uses.
const fn uses_lockref(protect: Protect) -> bool {
    !matches!(protect, Protect::RcuRefCount)
}

/// An open file (`struct file`): on cache lines of its own (128 bytes, the
/// adjacent-line prefetch pair), as a separately allocated `struct file`
/// is, so CPUs using different files do not share a line.
#[derive(Debug)]
#[repr(align(128))]
pub struct File {
    refs: LockRef,
    /// The count of [`Protect::RcuRefCount`] (the other variants leave it
    /// at 0).
    kref: RefCount,
    /// The fd this incarnation was opened for.
    fd: AtomicU32,
    /// Incarnation: incremented at every open.
    generation: AtomicU32,
    /// Open (installed or still referenced) rather than in the pool.
    live: AtomicBool,
    head: RcuHead,
    owner: AtomicPtr<Files>,
    index: AtomicUsize,
}

impl File {
    const fn new() -> Self {
        File {
            refs: LockRef::new(0),
            kref: RefCount::new(0),
            fd: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            live: AtomicBool::new(false),
            head: RcuHead::new(),
            owner: AtomicPtr::new(ptr::null_mut()),
            index: AtomicUsize::new(0),
        }
    }

    /// The fd this file was opened for (what a `read` on it would use).
    #[inline]
    pub fn fd(&self) -> u32 {
        self.fd.load(Relaxed)
    }

    /// The current reference count (a racy snapshot) of the lockref
    /// variants.
    #[inline]
    pub fn count(&self) -> i32 {
        self.refs.count()
    }

    /// The count the table's variant uses (`refcounted`: the
    /// [`RefCount`]), a racy snapshot.
    #[inline]
    fn count_of(&self, refcounted: bool) -> i32 {
        if refcounted {
            self.kref.read()
        } else {
            self.refs.count()
        }
    }
}

/// An fd array (`struct fdtable`).
#[derive(Debug)]
struct FdArray {
    max: AtomicUsize,
    slots: [AtomicPtr<File>; MAX_FDS],
}

impl FdArray {
    const fn new() -> Self {
        FdArray {
            max: AtomicUsize::new(0),
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; MAX_FDS],
        }
    }
}

/// How a [`Files`] table is read and how its files are freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protect {
    /// RCU lookup, `get_not_zero`, freed by `call_rcu`.
    Rcu,
    /// Lookups under the table's spinlock, freed at once.
    Spinlock,
    /// Lookups under a reader-writer lock, freed at once.
    RwLock,
    /// RCU lookup, freed at once (the broken control).
    RcuNoGrace,
    /// RCU lookup, a [`RefCount`] (`inc_not_zero`, `dec_and_test`), freed
    /// by `call_rcu`.
    RcuRefCount,
}

/// The free files.
#[derive(Debug)]
struct Pool {
    free: [usize; FILES],
    len: usize,
}

/// A process's file table (`struct files_struct`) and its files.
#[derive(Debug)]
pub struct Files {
    table: RcuPtr<FdArray>,
    arrays: [FdArray; SIZES.len()],
    /// Index in `arrays` of the published one (writers only).
    size: AtomicUsize,
    /// `files->file_lock`: serialises writers; readers too, before RCU.
    /// (Each lock and the writers' counters on lines of their own, away
    /// from the read-mostly `table`.)
    file_lock: CachePadded<TicketMutex<()>>,
    /// The reader-writer variant's lock.
    rw: CachePadded<spin::RwLock<()>>,
    files: [File; FILES],
    /// Taken from RCU callbacks, which a kernel may run in interrupts.
    pool: CachePadded<IrqTicketMutex<Pool>>,
    /// Installed files (writers only).
    open: CachePadded<AtomicUsize>,
    /// Whether the files count in `kref` ([`Protect::RcuRefCount`]) rather
    /// than the lockref (set by `setup`).
    refcounted: AtomicBool,
    pub(crate) faults: Faults,
}

impl Default for Files {
    fn default() -> Self {
        Self::new()
    }
}

impl Files {
    /// An empty table; [`setup`](Self::setup) before use.
    pub const fn new() -> Self {
        Files {
            table: RcuPtr::null(),
            arrays: [const { FdArray::new() }; SIZES.len()],
            size: AtomicUsize::new(0),
            file_lock: CachePadded::new(TicketMutex::new(())),
            rw: CachePadded::new(spin::RwLock::new(())),
            files: [const { File::new() }; FILES],
            pool: CachePadded::new(IrqTicketMutex::new(Pool {
                free: [0; FILES],
                len: 0,
            })),
            open: CachePadded::new(AtomicUsize::new(0)),
            refcounted: AtomicBool::new(false),
            faults: Faults::new(),
        }
    }

    /// Resets the table to the smallest array with fds `0..initial` open.
    /// Nobody may use the table meanwhile, and no callback of an earlier
    /// run may be pending (`rcu::barrier`).
    pub fn setup(&'static self, initial: usize) {
        self.setup_for(initial, Protect::Rcu);
    }

    /// [`setup`](Self::setup) for the variant `protect` (which count the
    /// files use).
    pub fn setup_for(&'static self, initial: usize, protect: Protect) {
        self.refcounted.store(!uses_lockref(protect), Relaxed);
        // Relaxed throughout: nobody runs; the run's start orders it.
        for (a, &max) in self.arrays.iter().zip(&SIZES) {
            a.max.store(max, Relaxed);
            for s in &a.slots {
                s.store(ptr::null_mut(), Relaxed);
            }
        }
        // SAFETY: the arrays live as long as `self` (`'static`) and are
        // only ever reached through `&` (they are all atomics).
        unsafe {
            self.table
                .publish(&self.arrays[0] as *const FdArray as *mut FdArray)
        };
        self.size.store(0, Relaxed);
        for (i, f) in self.files.iter().enumerate() {
            f.owner.store(self as *const Files as *mut Files, Relaxed);
            f.index.store(i, Relaxed);
            f.live.store(false, Relaxed);
            f.refs.lock().set_count(0);
            f.kref.set(0);
        }
        // Not under the pool lock: the pool is IRQ-safe (RCU callbacks
        // release files into it), a file's lockref lock is taken with
        // interrupts on, so taking the second under the first is the
        // IRQ-safe -> IRQ-unsafe order lockdep reports.
        let mut pool = self.pool.lock();
        for i in 0..FILES {
            pool.free[i] = FILES - 1 - i;
        }
        pool.len = FILES;
        drop(pool);
        self.open.store(0, Relaxed);
        self.faults.reset();
        let _writer = self.file_lock.lock();
        for _ in 0..initial {
            self.open_file();
        }
    }

    /// The published array, for writers (who hold the writers' lock).
    fn current(&self) -> &FdArray {
        // SAFETY: only arrays of `self.arrays` are ever published
        // (`setup`, `expand`), and they live as long as `self`.
        unsafe { &*self.table.load() }
    }

    /// The file installed at `fd`, for the read section of `guard`.
    #[inline]
    fn lookup_rcu<'g>(&'g self, fd: usize, guard: &'g ReadGuard) -> Option<&'g File> {
        let table = self.table.read(guard)?;
        // Relaxed: `max` is set before the array is published (Release,
        // read with Acquire just above).
        if fd >= table.max.load(Relaxed) {
            return None;
        }
        // Acquire pairs with the Release that installed the file: its
        // fields are as the opener set them.
        let f = table.slots[fd].load(Acquire);
        // SAFETY: slots only hold pointers into `self.files`, which live as
        // long as `self` (freeing a file returns it to the pool).
        unsafe { f.as_ref() }
    }

    /// The file installed at `fd`, for a caller that holds a lock writers
    /// take (or the owner of an unshared table).
    #[inline]
    fn lookup_locked(&self, fd: usize) -> Option<&File> {
        let table = self.current();
        if fd >= table.max.load(Relaxed) {
            return None;
        }
        // Relaxed: writers install under the lock the caller holds.
        let f = table.slots[fd].load(Relaxed);
        // SAFETY: as in `lookup_rcu`.
        unsafe { f.as_ref() }
    }

    /// The file at `fd` with a reference for the caller (`fget`).
    #[inline]
    pub fn fget(&self, fd: usize, protect: Protect, delay: u32) -> Option<&File> {
        match protect {
            Protect::Rcu | Protect::RcuNoGrace | Protect::RcuRefCount => {
                let guard = rcu::read_lock();
                let f = self.lookup_rcu(fd, &guard)?;
                // Relaxed: the Acquire slot load ordered the opener's stores.
                let generation = f.generation.load(Relaxed);
                crate::delay(delay);
                let got = if protect == Protect::RcuRefCount {
                    f.kref.inc_not_zero()
                } else {
                    f.refs.get_not_zero()
                };
                if !got {
                    return None; // being closed
                }
                // With a grace period before reuse, the file we found is
                // still the incarnation opened for `fd`.
                if f.fd.load(Relaxed) as usize != fd {
                    self.faults.record(0, fd as u64);
                } else if f.generation.load(Relaxed) != generation {
                    self.faults.record(1, fd as u64);
                }
                // Referenced: usable past the read section.
                Some(&self.files[f.index.load(Relaxed)])
            }
            Protect::Spinlock => {
                let _lock = self.file_lock.lock();
                let f = self.lookup_locked(fd)?;
                f.refs.get(); // the table holds one
                crate::delay(delay);
                Some(f)
            }
            Protect::RwLock => {
                let _lock = self.rw.read();
                let f = self.lookup_locked(fd)?;
                f.refs.get();
                crate::delay(delay);
                Some(f)
            }
        }
    }

    /// The file at `fd`, without a reference: only for the owner of a
    /// table nobody else uses (`fget_light`'s shortcut: plain loads, no
    /// read-modify-write). Whoever last wrote the table handed it over
    /// with a release the owner acquired (see [`crate::fget_light`]).
    #[inline]
    pub fn fget_unshared(&self, fd: usize) -> Option<&File> {
        self.lookup_locked(fd)
    }

    /// Drops a reference from [`fget`](Self::fget) (`fput`).
    #[inline]
    pub fn fput(&self, f: &File, protect: Protect) {
        let last = if uses_lockref(protect) {
            crate::put_last(&f.refs)
        } else {
            f.kref.dec_and_test()
        };
        if last {
            self.free(f, protect);
        }
    }

    #[cold]
    fn free(&self, f: &File, protect: Protect) {
        // Relaxed: the pool lock (or the callback hand-over) orders it.
        f.live.store(false, Relaxed);
        if matches!(protect, Protect::Rcu | Protect::RcuRefCount) {
            // SAFETY: the count reached 0 once for this incarnation, so the
            // head is not queued (the file is reused only after its
            // callback ran); the file lives as long as `self`; the callback
            // only returns it to its owner's pool.
            unsafe { rcu::call_rcu(&f.head as *const RcuHead as *mut RcuHead, file_free_rcu) };
        } else {
            self.release(f);
        }
    }

    /// Returns `f` to the pool.
    fn release(&self, f: &File) {
        let mut pool = self.pool.lock();
        if pool.len == FILES {
            drop(pool);
            self.faults.record(3, f.index.load(Relaxed) as u64);
            return;
        }
        let len = pool.len;
        pool.free[len] = f.index.load(Relaxed);
        pool.len += 1;
    }

    /// Opens a file at the lowest free fd, growing the table if needed;
    /// the caller holds the writers' lock. `false` if the pool or the
    /// largest table is full.
    fn open_file(&self) -> bool {
        let Some(i) = ({
            let mut pool = self.pool.lock();
            pool.len.checked_sub(1).map(|len| {
                pool.len = len;
                pool.free[len]
            })
        }) else {
            return false;
        };
        let table = self.current();
        let max = table.max.load(Relaxed);
        let Some(fd) =
            (0..MAX_FDS).find(|&fd| fd >= max || table.slots[fd].load(Relaxed).is_null())
        else {
            self.release(&self.files[i]);
            return false;
        };
        let table = if fd >= max { self.expand(fd) } else { table };
        let f = &self.files[i];
        // Relaxed: published by the Release below (and the lock's unlock).
        f.fd.store(fd as u32, Relaxed);
        f.generation.fetch_add(1, Relaxed);
        f.live.store(true, Relaxed);
        // The table's reference.
        if !self.refcounted.load(Relaxed) {
            f.refs.lock().set_count(1);
        } else {
            f.kref.set(1);
        }
        // Release pairs with the Acquire in `lookup_rcu`.
        table.slots[fd].store(f as *const File as *mut File, Release);
        self.open.fetch_add(1, Relaxed);
        true
    }

    /// Publishes the next larger array, a copy of the current one, that
    /// holds `fd` (`expand_fdtable`). The old one stays readable: arrays
    /// are only reused by `setup`, when nobody runs.
    fn expand(&self, fd: usize) -> &FdArray {
        let old = self.current();
        let mut size = self.size.load(Relaxed);
        while SIZES[size] <= fd {
            size += 1;
        }
        let new = &self.arrays[size];
        for (n, o) in new.slots.iter().zip(&old.slots[..old.max.load(Relaxed)]) {
            // Relaxed: the publication below releases them.
            n.store(o.load(Relaxed), Relaxed);
        }
        self.size.store(size, Relaxed);
        // SAFETY: as in `setup`.
        unsafe { self.table.publish(new as *const FdArray as *mut FdArray) };
        new
    }

    /// Closes the open fd at or after `start` (wrapping, skipping the
    /// long-lived ones); the caller holds the writers' lock.
    fn close_some(&self, start: usize, protect: Protect) -> bool {
        let table = self.current();
        let max = table.max.load(Relaxed);
        for k in 0..max - LONG_LIVED {
            let fd = LONG_LIVED + (start + k) % (max - LONG_LIVED);
            // Relaxed: readers that still see the file are covered by RCU
            // (or by the lock the caller holds).
            let f = table.slots[fd].swap(ptr::null_mut(), Relaxed);
            // SAFETY: as in `lookup_rcu`.
            if let Some(f) = unsafe { f.as_ref() } {
                self.open.fetch_sub(1, Relaxed);
                self.fput(f, protect); // the table's reference
                return true;
            }
        }
        false
    }

    /// One open or close, taking the writers' lock.
    pub fn write_op(&self, protect: Protect, rng: &mut Rng, delay: u32) {
        let _rw = (protect == Protect::RwLock).then(|| self.rw.write());
        let _lock = self.file_lock.lock();
        let open = self.open.load(Relaxed);
        let r = rng.next_u64();
        if open < LOW || (open < HIGH && r & 1 == 0) {
            self.open_file();
        } else {
            self.close_some((r >> 8) as usize, protect);
        }
        crate::delay(delay);
    }

    /// The final check: recorded faults, then every file is either
    /// installed once with count 1 or free with count 0.
    pub fn check(&self, name: &'static str) -> Result<(), Violation> {
        rcu::barrier();
        self.faults.result(name, &MESSAGES)?;
        let _lock = self.file_lock.lock();
        let table = self.current();
        let refcounted = self.refcounted.load(Relaxed);
        let mut installed = 0;
        for (fd, slot) in table.slots[..table.max.load(Relaxed)].iter().enumerate() {
            // SAFETY: as in `lookup_rcu`.
            let Some(f) = (unsafe { slot.load(Relaxed).as_ref() }) else {
                continue;
            };
            if !f.live.load(Relaxed) || f.fd() as usize != fd {
                return Err(violation(
                    name,
                    "an installed file is free or has another fd",
                    fd as u64,
                ));
            }
            if f.count_of(refcounted) != 1 {
                return Err(violation(
                    name,
                    "an open file's count is not 1 after the run (leaked or lost reference)",
                    f.count_of(refcounted) as u64,
                ));
            }
            installed += 1;
        }
        if installed != self.open.load(Relaxed) {
            return Err(violation(
                name,
                "the open count disagrees with the table",
                installed as u64,
            ));
        }
        let pool = self.pool.lock();
        if installed + pool.len != FILES {
            return Err(violation(
                name,
                "files leaked or freed twice (installed + free != pool size)",
                (installed + pool.len) as u64,
            ));
        }
        for &i in &pool.free[..pool.len] {
            let f = &self.files[i];
            if f.live.load(Relaxed) || f.count_of(refcounted) != 0 || f.kref.is_saturated() {
                return Err(violation(name, "a free file is still in use", i as u64));
            }
        }
        Ok(())
    }
}

/// The RCU callback of a file's last `fput`: back to its owner's pool.
unsafe fn file_free_rcu(head: *mut RcuHead) {
    // SAFETY: queued by `Files::free` with the `head` of a `File`.
    let f = unsafe { &*head.byte_sub(offset_of!(File, head)).cast::<File>() };
    // SAFETY: `setup` pointed every file at its table, which outlives it.
    let owner = unsafe { &*f.owner.load(Relaxed) };
    owner.release(f);
}

/// Which design serves lookups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdVariant {
    /// RCU table, `get_not_zero`, `call_rcu` (after).
    Rcu,
    /// One spinlock (before).
    Spinlock,
    /// A reader-writer lock (before).
    RwLock,
    /// Control: freed without a grace period.
    ControlNoGrace,
    /// RCU table, `RefCount::inc_not_zero`, `call_rcu` (after, on a plain
    /// reference count: the `kref_lf` idiom).
    RcuRefCount,
}

impl FdVariant {
    fn protect(self) -> Protect {
        match self {
            FdVariant::Rcu => Protect::Rcu,
            FdVariant::Spinlock => Protect::Spinlock,
            FdVariant::RwLock => Protect::RwLock,
            FdVariant::ControlNoGrace => Protect::RcuNoGrace,
            FdVariant::RcuRefCount => Protect::RcuRefCount,
        }
    }
}

/// The fd-lookup workload: one shared table.
#[derive(Debug)]
pub struct FdLookup {
    files: Files,
    settings: Settings,
}

impl Default for FdLookup {
    fn default() -> Self {
        Self::new()
    }
}

impl FdLookup {
    /// A workload in its initial state; [`setup`](Workload::setup) before use.
    pub const fn new() -> Self {
        FdLookup {
            files: Files::new(),
            settings: Settings::new(),
        }
    }
}

impl Workload for FdLookup {
    const NAME: &'static str = "fd lookup";
    type Variant = FdVariant;
    const VARIANTS: &'static [(FdVariant, &'static str)] = &[
        (FdVariant::Rcu, "RCU + lockref"),
        (FdVariant::Spinlock, "spinlock"),
        (FdVariant::RwLock, "rwlock"),
        (FdVariant::RcuRefCount, "RCU + refcount"),
        (FdVariant::ControlNoGrace, "control: no grace period"),
    ];
    const CONTROL: FdVariant = FdVariant::ControlNoGrace;
    const BENCH: Config = Config {
        write_every: 256,
        delay: 0,
    };

    fn setup(&'static self, variant: FdVariant, config: Config) {
        rcu::barrier();
        self.settings.set(Self::VARIANTS, variant, config);
        self.files.setup_for(LONG_LIVED + 4, variant.protect());
    }

    fn step(&self, cpu: usize, n: u64, rng: &mut Rng) -> Counts {
        let (variant, config) = self.settings.get(Self::VARIANTS);
        let protect = variant.protect();
        let mut c = Counts::default();
        for i in 0..n {
            if crate::writes_now(cpu, config, rng) {
                self.files.write_op(protect, rng, config.delay);
                c.writes += 1;
            }
            let r = rng.next_u64();
            let fd = if config.delay == 0 && r & 7 != 0 {
                cpu % LONG_LIVED
            } else {
                (r >> 32) as usize % HIGH
            };
            match self.files.fget(fd, protect, config.delay) {
                Some(f) => {
                    core::hint::black_box(f.fd());
                    self.files.fput(f, protect);
                }
                None => c.misses += 1,
            }
            c.ops += 1;
            crate::housekeeping(i);
        }
        rcu::quiescent_state();
        c
    }

    fn check(&self) -> Result<(), Violation> {
        self.files.check(Self::NAME)
    }
}
