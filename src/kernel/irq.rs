//! Local interrupt masking: a kernel service, never a machine-wide lock.
//!
//! A spinlock that an interrupt handler may take must be held with local
//! interrupts disabled, and ksync's own per-CPU machinery (the per-CPU
//! counter's fold, the RCU callback lists, the grace-period engine) masks
//! them the same way. What "disable interrupts on this CPU" means is the
//! kernel's business, so it is a hook of [`Kernel`](super::Kernel):
//! [`Kernel::irq_save`](super::Kernel::irq_save) and
//! [`Kernel::irq_restore`](super::Kernel::irq_restore), whose defaults are
//! the architecture's own instructions:
//!
//! | target | default | shared between CPUs? |
//! |---|---|---|
//! | x86_64 bare metal | `pushfq; cli`, conditional `sti` | no |
//! | aarch64 bare metal | `DAIF` (`mrs`, `msr daifset`) | no |
//! | riscv64 bare metal | `sstatus.SIE` (`csrrci`, `csrsi`) | no |
//! | anything else | the binary's `critical-section` implementation | on multi-core, yes: implement the hooks |
//! | host tests (`test-hooks`) | a per-thread "interrupts off" flag | no |
//!
//! `critical-section` stays where it is the right tool: single-core MCUs
//! (where masking interrupts *is* mutual exclusion) and `portable-atomic`'s
//! small atomics on targets without compare-and-swap. On a multi-core
//! target without a native path, its contract (exclusion across all cores)
//! would serialise the machine; such a kernel overrides the two hooks.
//!
//! # Two ways to mask: [`KernelIrq`] and [`ArchIrq`]
//!
//! [`IrqState`] and the IRQ-saving locks are generic over an
//! [`IrqControl`]: the default, [`KernelIrq`], calls the kernel's hooks
//! (so it needs [`set_kernel!`](crate::set_kernel), like every per-CPU
//! type); [`ArchIrq`] uses the architecture default directly and needs no
//! hooks at all. A binary that never calls `set_kernel!` (firmware whose
//! spinlocks, lockrefs and seqlocks all have the `NoGuard` policy) names
//! it, or uses the `ArchIrq*` lock aliases:
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! use ksync::spinlock::ArchIrqTicketMutex;
//!
//! // Masks interrupts with the CPU's instructions (here, on the host, the
//! // critical-section implementation): no `set_kernel!` needed.
//! static TICKS: ArchIrqTicketMutex<u64> = ArchIrqTicketMutex::new(0);
//! *TICKS.lock() += 1;
//! assert_eq!(*TICKS.lock(), 1);
//! ```

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;

use super::MAX_CPUS;
use crate::arch::{self, IrqWord};

/// A way to save and disable local interrupts, and restore them.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::irq::IrqControl;
/// use ksync::spinlock::{RawIrqSave, RawTicketLock};
/// # mod gic { pub fn pmr() -> u8 { 0xff } pub fn set_pmr(_: u8) {} }
///
/// /// aarch64 with GIC priority masking: lower the priority mask instead of
/// /// setting `DAIF.I`, so that pseudo-NMIs still come in.
/// struct GicPmr;
///
/// // SAFETY: a PMR of 0x80 masks every interrupt a lock's handler can
/// // run in, on this CPU only; restore writes back the saved mask.
/// unsafe impl IrqControl for GicPmr {
///     type Flags = u8;
///     fn save() -> u8 { let old = gic::pmr(); gic::set_pmr(0x80); old }
///     unsafe fn restore(flags: u8) { gic::set_pmr(flags) }
/// }
///
/// // A lock its handlers take, masking through the PMR.
/// let raw = RawIrqSave::<_, GicPmr>::with_irq(RawTicketLock::new());
/// let lock = ksync::lock_api::Mutex::from_raw(raw, 0u32);
/// *lock.lock() += 1;
/// ```
///
/// # Safety
/// Between [`save`](IrqControl::save) and the matching
/// [`restore`](IrqControl::restore), interrupt handlers that take
/// IRQ-saving locks do not run on this CPU, and the calling context stays
/// on it. `restore` re-establishes the state before the matching `save`.
pub unsafe trait IrqControl {
    /// The saved state.
    type Flags: Copy;

    /// Saves the local interrupt state and disables interrupts.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::{ArchIrq, IrqControl};
    ///
    /// let flags = ArchIrq::save(); // `local_irq_save`
    /// // ... nothing on this CPU interrupts this ...
    /// // SAFETY: `flags` is this CPU's latest save.
    /// unsafe { ArchIrq::restore(flags) };
    /// ```
    fn save() -> Self::Flags;

    /// Restores a state saved by [`save`](IrqControl::save).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::{IrqControl, KernelIrq};
    ///
    /// let outer = KernelIrq::save();
    /// let inner = KernelIrq::save(); // nests: already off
    /// // SAFETY: restored on this CPU, innermost first.
    /// unsafe { KernelIrq::restore(inner) };
    /// assert!(ksync::host::irqs_disabled()); // `outer` still holds them off
    /// // SAFETY: as above.
    /// unsafe { KernelIrq::restore(outer) };
    /// assert!(!ksync::host::irqs_disabled());
    /// ```
    ///
    /// # Safety
    /// `flags` comes from the matching `save` on this CPU; saves are
    /// restored in reverse order.
    unsafe fn restore(flags: Self::Flags);

    /// Whether this masking goes through the kernel's hooks, so that the
    /// [`RawIrqSave`](crate::spinlock::RawIrqSave) adapter may call the
    /// kernel's preemption hooks too (to restore interrupts before the
    /// inner lock's `preempt_enable` runs; see its `unlock`). `false`
    /// unless said: a masking that needs no hooks must not start calling
    /// them.
    #[doc(hidden)]
    const KERNEL_HOOKS: bool = false;
}

/// Interrupt masking through the kernel's hooks
/// ([`Kernel::irq_save`](super::Kernel::irq_save)): the default of
/// [`IrqState`] and the IRQ-saving locks. Needs
/// [`set_kernel!`](crate::set_kernel).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::irq::{IrqState, KernelIrq};
///
/// // The default: the kernel's `irq_save`/`irq_restore` hooks, so lockdep
/// // and the kernel's own bookkeeping see the masking.
/// let state: IrqState<KernelIrq> = IrqState::save();
/// assert!(ksync::host::irqs_disabled());
/// drop(state);
/// assert!(!ksync::host::irqs_disabled());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelIrq;

// SAFETY: forwarded to the kernel's hooks, whose contract (`Kernel`'s
// `# Safety`) is this trait's.
unsafe impl IrqControl for KernelIrq {
    type Flags = usize;
    const KERNEL_HOOKS: bool = true;

    #[inline]
    fn save() -> usize {
        super::irq_save_hook()
    }

    #[inline]
    unsafe fn restore(flags: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { super::irq_restore_hook(flags) }
    }
}

/// Interrupt masking with the architecture's default (the table in the
/// module docs), without the kernel's hooks: for binaries that never call
/// [`set_kernel!`](crate::set_kernel).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::irq::{ArchIrq, IrqState};
///
/// // Firmware without `set_kernel!`: mask with the CPU's own instructions.
/// fn timer_tick_bookkeeping() {
///     let _irqs_off = IrqState::<ArchIrq>::save_with();
///     // ... update what the timer interrupt handler also touches ...
/// }
/// timer_tick_bookkeeping();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchIrq;

// SAFETY: the native instructions mask this CPU's interrupts (and the
// caller's privilege level allows them: bare metal only); the
// `critical-section` fallback masks them or excludes all CPUs, as its
// implementation's contract says.
unsafe impl IrqControl for ArchIrq {
    type Flags = arch::IrqFlags;

    #[inline]
    fn save() -> Self::Flags {
        let flags = arch::irq_save();
        // lockdep counts masking through ksync, whichever way it is done;
        // so do the host kernel's debug builds, for `might_sleep` (the
        // host's `irqs_disabled` does not see `critical-section` masking).
        // Not other debug builds: counting per CPU needs the kernel's
        // `cpu_id` hook, and `ArchIrq` needs no hooks at all (a kernel's
        // `Kernel::irqs_disabled` reading the CPU's flag sees it instead).
        #[cfg(any(
            feature = "lockdep",
            all(debug_assertions, feature = "test-hooks", not(ksync_loom))
        ))]
        count_masked();
        flags
    }

    #[inline]
    unsafe fn restore(flags: Self::Flags) {
        #[cfg(any(
            feature = "lockdep",
            all(debug_assertions, feature = "test-hooks", not(ksync_loom))
        ))]
        count_unmasking();
        // SAFETY: forwarded caller contract.
        unsafe { arch::irq_restore(flags) }
    }
}

/// Saved local interrupt state, restored when dropped.
///
/// `!Send`: interrupt state belongs to the CPU that saved it.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use ksync::kernel::irq::IrqState;
///
/// // This CPU's timer interrupt handler reads both: it must never run
/// // between the two updates.
/// static TICKS: AtomicU64 = AtomicU64::new(0);
/// static CLOCK_NS: AtomicU64 = AtomicU64::new(0);
///
/// let _irqs = IrqState::save(); // `local_irq_save(flags)`
/// TICKS.fetch_add(1, Relaxed);
/// CLOCK_NS.fetch_add(1_000_000, Relaxed);
/// // `local_irq_restore(flags)` when `_irqs` drops
/// ```
#[must_use = "dropping the state restores interrupts at once"]
pub struct IrqState<I: IrqControl = KernelIrq> {
    flags: I::Flags,
    not_send: PhantomData<*mut ()>,
}

impl IrqState {
    /// Saves the local interrupt state and disables interrupts on this CPU,
    /// through the kernel's hook ([`KernelIrq`]).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let flags = ksync::kernel::irq::IrqState::save();
    /// assert!(ksync::host::irqs_disabled());
    /// drop(flags); // interrupts back as they were
    /// assert!(!ksync::host::irqs_disabled());
    /// ```
    #[doc(alias = "local_irq_save")]
    #[inline]
    pub fn save() -> Self {
        Self::save_with()
    }
}

impl<I: IrqControl> IrqState<I> {
    /// Saves and disables local interrupts with `I` (for example
    /// `IrqState::<ArchIrq>::save_with()`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::{ArchIrq, IrqState};
    ///
    /// let _off = IrqState::<ArchIrq>::save_with();
    /// // ... interrupts masked with the CPU's own instructions ...
    /// ```
    #[inline]
    pub fn save_with() -> Self {
        Self {
            flags: I::save(),
            not_send: PhantomData,
        }
    }
}

impl<I: IrqControl> IrqState<I> {
    /// The saved state, without restoring it: the caller now owes the
    /// restore ([`from_flags`](Self::from_flags), or `I::restore`), on
    /// this CPU, in nesting order. For a state handed to another context
    /// (a lock released by the next task after a context switch).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::IrqState;
    ///
    /// // A context switch with interrupts off: the outgoing task gives its saved
    /// // state to the scheduler, the next task restores it.
    /// let flags: usize = IrqState::save().into_flags();
    /// // ... switch_to(next) ...
    /// // SAFETY: saved on this CPU above, not restored since, owned only here.
    /// let restored: IrqState = unsafe { IrqState::from_flags(flags) };
    /// drop(restored);
    /// assert!(!ksync::host::irqs_disabled());
    /// ```
    #[inline]
    #[must_use = "the state must be restored: pass it to `IrqState::from_flags`"]
    pub fn into_flags(self) -> I::Flags {
        let flags = self.flags;
        core::mem::forget(self);
        flags
    }

    /// Takes over a state saved by [`save_with`](Self::save_with) and
    /// given up by [`into_flags`](Self::into_flags): dropping it restores
    /// the state.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::irq::IrqState;
    ///
    /// let flags = IrqState::save().into_flags();
    /// assert!(ksync::host::irqs_disabled());
    /// // SAFETY: `flags` came from `into_flags` on this CPU, not restored since.
    /// let state: IrqState = unsafe { IrqState::from_flags(flags) };
    /// drop(state); // restores
    /// assert!(!ksync::host::irqs_disabled());
    /// ```
    ///
    /// # Safety
    /// `flags` came from `into_flags` of a state saved on this CPU, not
    /// restored since, and this is its only owner; the nesting order of
    /// restores is kept.
    #[inline]
    pub unsafe fn from_flags(flags: I::Flags) -> Self {
        Self {
            flags,
            not_send: PhantomData,
        }
    }
}

impl<I: IrqControl> Drop for IrqState<I> {
    #[doc(alias = "local_irq_restore")]
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `flags` came from `I::save` on this CPU (the type is not
        // `Send`); nesting order is the documented duty of the user, as
        // for `local_irq_restore`.
        unsafe { I::restore(self.flags) }
    }
}

impl<I: IrqControl> fmt::Debug for IrqState<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IrqState")
    }
}

// ---- the default of the kernel's hooks ---------------------------------------

/// How deep local interrupt saves may nest on one CPU when the saved state
/// is not a word ([`default_save`]).
const STACK_DEPTH: usize = 8;

/// Per-CPU stacks of saved states for the default hooks on targets whose
/// saved state is not a machine word (`critical-section`'s opaque state),
/// since the hook interface passes a `usize`. The word handed back names
/// the CPU and the nesting depth ([`nesting_word`]), so a restore out of
/// order is caught, and a restore finds the state it must put back even if
/// the kernel's CPU id has gone bad meanwhile. On targets with a native
/// path this is never referenced and the linker drops it.
struct Stacks(UnsafeCell<[(usize, [arch::IrqFlags; STACK_DEPTH]); MAX_CPUS]>);

// SAFETY: a CPU's entry is touched only by that CPU, inside the critical
// section it entered first (interrupts off on this CPU, or the
// implementation's lock), so no two contexts access one entry at once.
unsafe impl Sync for Stacks {}

static STACKS: Stacks = Stacks(UnsafeCell::new(
    [(0, [arch::IrqFlags::EMPTY; STACK_DEPTH]); MAX_CPUS],
));

/// The word [`default_save`] hands back for level `depth` of CPU `cpu`'s
/// stack.
const fn nesting_word(cpu: usize, depth: usize) -> usize {
    cpu * STACK_DEPTH + depth
}

/// The default [`Kernel::irq_save`](super::Kernel::irq_save): the native
/// instructions' state as a word, or the `critical-section` state pushed on
/// this CPU's stack (entered first, so the caller can no longer migrate
/// when it reads its CPU id).
///
/// Every check that fails leaves the section before it panics: a panic
/// with interrupts masked (on the host, with the critical-section lock
/// held) would stop every other CPU that masks next.
#[inline(always)]
pub(crate) fn default_save(cpu_id: fn() -> usize) -> usize {
    if arch::IrqFlags::IS_WORD {
        return arch::irq_save().into_word();
    }
    let state = arch::irq_save();
    let cpu = cpu_id();
    if cpu >= MAX_CPUS {
        // SAFETY: the state this call saved, restored at once.
        unsafe { arch::irq_restore(state) };
        super::cpu_out_of_range(cpu, MAX_CPUS, "MAX_CPUS");
    }
    // SAFETY: see `Stacks`: this CPU's entry (in range, checked), inside
    // its critical section.
    let entry = unsafe { &mut (*STACKS.0.get())[cpu] };
    let depth = entry.0;
    if depth >= STACK_DEPTH {
        // SAFETY: the state this call saved, restored at once.
        unsafe { arch::irq_restore(state) };
        panic!("ksync: local interrupt saves nested deeper than {STACK_DEPTH} on CPU {cpu}");
    }
    entry.1[depth] = state;
    entry.0 = depth + 1;
    nesting_word(cpu, depth)
}

/// The default [`Kernel::irq_restore`](super::Kernel::irq_restore).
///
/// The word names the CPU whose stack holds the state, so the restore
/// happens even when the kernel's CPU id no longer names that CPU; that
/// (an id out of range, or another CPU's: the task moved with interrupts
/// masked) is reported after the restore.
///
/// # Safety
/// `flags` comes from the matching [`default_save`] on this CPU, in reverse
/// nesting order.
#[inline(always)]
pub(crate) unsafe fn default_restore(cpu_id: fn() -> usize, flags: usize) {
    if arch::IrqFlags::IS_WORD {
        // SAFETY: forwarded caller contract; the word is the saved state.
        return unsafe { arch::irq_restore(arch::IrqFlags::from_word(flags)) };
    }
    let (cpu, level) = (flags / STACK_DEPTH, flags % STACK_DEPTH);
    if cpu >= MAX_CPUS {
        // Not a word `default_save` returned: there is no state to restore.
        panic!("ksync: local interrupt state {flags} restored that no save returned");
    }
    // SAFETY: see `Stacks`: the entry of the CPU that saved (in range,
    // checked), still inside its critical section (caller contract).
    let entry = unsafe { &mut (*STACKS.0.get())[cpu] };
    let depth = entry.0;
    if depth != level + 1 {
        // Restore first, then panic (see `default_save`): back to the
        // state saved at the level named (the outermost one if the word
        // names none), so the panic runs with interrupts as they were.
        if depth > 0 {
            let level = level.min(depth - 1);
            entry.0 = level;
            // SAFETY: the state saved at `level` on this CPU; the levels
            // above it are dropped with it.
            unsafe { arch::irq_restore(entry.1[level]) };
        }
        panic!(
            "ksync: local interrupt state restored out of order on CPU {cpu} (depth {depth}, restoring {level})"
        );
    }
    entry.0 = level;
    let state = entry.1[level];
    // Read inside the section, as in `default_save`; checked after it.
    let now = cpu_id();
    // SAFETY: the state of the matching save, in nesting order (checked).
    unsafe { arch::irq_restore(state) };
    if now >= MAX_CPUS {
        super::cpu_out_of_range(now, MAX_CPUS, "MAX_CPUS");
    }
    assert!(
        now == cpu,
        "ksync: local interrupt state saved on CPU {cpu} restored on CPU {now} \
         (the task moved with interrupts masked)"
    );
}

// ---- how deeply ksync masked interrupts (for lockdep) ------------------------

/// How deeply each CPU has masked interrupts through ksync's hooks and
/// [`ArchIrq`]: lockdep asks it whether a lock is taken with interrupts
/// on, and `might_sleep` whether a sleep comes with interrupts masked
/// (the host kernel's debug builds count [`ArchIrq`] masking for that,
/// which the host's `irqs_disabled` does not see; other builds without
/// lockdep count nothing: counting needs the kernel's hooks, which
/// [`ArchIrq`] must not). Kept here, beside the masking, so that lockdep reads it from below.
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
static MASKED_DEPTH: [crate::sync::AtomicU32; MAX_CPUS] =
    [const { crate::sync::AtomicU32::new(0) }; MAX_CPUS];

/// The kernel's CPU id without [`cpu_id`](super::cpu_id)'s range check,
/// for code that reads it with interrupts masked: it must leave the
/// section before it panics on a bad id (see [`default_save`]).
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn cpu_id_unchecked() -> usize {
    super::ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1()
}

/// This CPU's masking counter: `None` for a CPU id out of range, which
/// is not counted (a check that can leave the masked section reports
/// it: a panic here would run with interrupts masked).
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
fn masked_depth() -> Option<&'static crate::sync::AtomicU32> {
    MASKED_DEPTH.get(cpu_id_unchecked())
}

/// This CPU masked interrupts through ksync (called just after masking).
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn count_masked() {
    use crate::sync::Ordering::Relaxed;
    let count = || {
        if let Some(depth) = masked_depth() {
            // Relaxed: only this CPU touches its counter, with interrupts
            // masked.
            depth.store(depth.load(Relaxed) + 1, Relaxed);
        }
    };
    // The host kernel cannot see an `ArchIrq` mask until it is counted:
    // no point of its schedule may move the task between the two.
    #[cfg(feature = "test-hooks")]
    crate::host::without_points(count);
    #[cfg(not(feature = "test-hooks"))]
    count();
}

/// This CPU is about to restore interrupts through ksync.
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn count_unmasking() {
    use crate::sync::Ordering::Relaxed;
    let uncount = || {
        if let Some(depth) = masked_depth() {
            // Relaxed: as in `count_masked`.
            depth.store(depth.load(Relaxed).saturating_sub(1), Relaxed);
        }
    };
    // As in `count_masked`: the task is still masked here.
    #[cfg(feature = "test-hooks")]
    crate::host::without_points(uncount);
    #[cfg(not(feature = "test-hooks"))]
    uncount();
}

/// Whether this CPU has masked interrupts through ksync (`false` for a
/// CPU id out of range, which nothing counts).
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn masked_by_ksync() -> bool {
    masked_on(cpu_id_unchecked())
}

/// [`masked_by_ksync`] read with preemption disabled (through the kernel's
/// hooks, uncounted), so that the id and the count are of the CPU this
/// task is on: for `might_sleep`, which must not report a masking another
/// task made on a CPU this one just left. (Lockdep's read stays plain: a
/// stale `true` there only hides a use with interrupts on.)
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn masked_by_ksync_here() -> bool {
    crate::kernel::without_preemption(masked_by_ksync)
}

/// Whether CPU `cpu` has masked interrupts through ksync (for the host
/// kernel, which knows the id without asking its own hook).
#[cfg(any(
    feature = "lockdep",
    all(debug_assertions, feature = "test-hooks", not(ksync_loom))
))]
#[inline]
pub(crate) fn masked_on(cpu: usize) -> bool {
    // Relaxed: a CPU's own counter. Read with preemption on, the id may
    // be of a CPU the task has left ([`masked_by_ksync_here`] keeps it on).
    MASKED_DEPTH
        .get(cpu)
        .is_some_and(|depth| depth.load(crate::sync::Ordering::Relaxed) != 0)
}

/// CPU `id` went offline (a host test thread exited): its count restarts.
#[cfg(all(
    any(feature = "lockdep", all(debug_assertions, not(ksync_loom))),
    feature = "test-hooks"
))]
pub(crate) fn forget_masking(id: usize) {
    // Relaxed: nobody else uses the id yet.
    MASKED_DEPTH[id].store(0, crate::sync::Ordering::Relaxed);
}

#[cfg(all(test, feature = "test-hooks", not(ksync_loom)))]
mod tests {
    //! The default hooks' per-CPU stack, where the saved state is not a
    //! word (on the host: `critical-section`'s std implementation).

    use super::{default_restore, default_save};
    use crate::arch;

    fn cpu_5() -> usize {
        5
    }

    #[test]
    fn nested_saves_restore_in_order() {
        if <arch::IrqFlags as arch::IrqWord>::IS_WORD {
            return;
        }
        let outer = default_save(cpu_5);
        let inner = default_save(cpu_5);
        assert_eq!(
            (outer, inner),
            (super::nesting_word(5, 0), super::nesting_word(5, 1)),
            "the words name the CPU and the nesting depth"
        );
        // SAFETY: the matching saves, in reverse order.
        unsafe {
            default_restore(cpu_5, inner);
            default_restore(cpu_5, outer);
        }
        let again = default_save(cpu_5);
        assert_eq!(again, outer);
        // SAFETY: the matching save.
        unsafe { default_restore(cpu_5, again) };
    }

    #[test]
    #[should_panic(expected = "restored out of order on CPU 6")]
    fn out_of_order_restore_is_caught() {
        fn cpu_6() -> usize {
            6
        }
        if <arch::IrqFlags as arch::IrqWord>::IS_WORD {
            panic!("restored out of order on CPU 6 (native: nothing to check)");
        }
        let outer = default_save(cpu_6);
        let _inner = default_save(cpu_6);
        // SAFETY: deliberately wrong; the check restores the outer state,
        // then panics.
        unsafe { default_restore(cpu_6, outer) };
    }

    /// A failed check restores before it panics: afterwards another thread
    /// can mask interrupts (on the host: take the critical-section lock),
    /// where it used to wait for ever.
    #[test]
    fn failed_checks_restore_before_they_panic() {
        fn cpu_7() -> usize {
            7
        }
        if <arch::IrqFlags as arch::IrqWord>::IS_WORD {
            return;
        }
        let masks_elsewhere = || {
            let (done, wait) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let flags = arch::irq_save();
                // SAFETY: the matching save.
                unsafe { arch::irq_restore(flags) };
                done.send(()).unwrap();
            });
            let waited = wait.recv_timeout(std::time::Duration::from_secs(30));
            assert!(waited.is_ok(), "interrupts stayed masked after the panic");
        };
        // Out of order.
        let out_of_order = std::panic::catch_unwind(|| {
            let outer = default_save(cpu_7);
            let _inner = default_save(cpu_7);
            // SAFETY: deliberately wrong; restores, then panics.
            unsafe { default_restore(cpu_7, outer) };
        });
        assert!(out_of_order.is_err());
        masks_elsewhere();
        // Nested too deep.
        let too_deep = std::panic::catch_unwind(|| {
            for _ in 0..=super::STACK_DEPTH {
                default_save(cpu_7);
            }
        });
        assert!(too_deep.is_err());
        // The levels saved before the failing one are still masked: give
        // them back in order.
        for level in (0..super::STACK_DEPTH).rev() {
            // SAFETY: the saves of the loop above, in reverse order.
            unsafe { default_restore(cpu_7, super::nesting_word(7, level)) };
        }
        masks_elsewhere();
    }

    /// A CPU id out of range gets the documented panic (naming the id and
    /// the limit) from `default_save` and `default_restore`, and leaves
    /// the critical section first: afterwards a valid CPU can still mask
    /// interrupts (on the host: take the critical-section lock), where it
    /// used to wait for ever. Bounded: a wedged section fails the test
    /// after 30 s instead of hanging it.
    #[test]
    fn out_of_range_cpu_leaves_the_section_before_it_panics() {
        use crate::kernel::MAX_CPUS;
        fn far() -> usize {
            MAX_CPUS + 3
        }
        fn valid() -> usize {
            4 % MAX_CPUS
        }
        if <arch::IrqFlags as arch::IrqWord>::IS_WORD {
            return;
        }
        let valid_cpu_saves = || {
            let (done, wait) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let depth = default_save(valid);
                // SAFETY: the matching save.
                unsafe { default_restore(valid, depth) };
                done.send(()).unwrap();
            });
            let waited = wait.recv_timeout(std::time::Duration::from_secs(30));
            assert!(waited.is_ok(), "interrupts stayed masked after the panic");
        };
        let expect = |err: std::boxed::Box<dyn core::any::Any + Send>| {
            let msg = err
                .downcast_ref::<std::string::String>()
                .cloned()
                .unwrap_or_default();
            let want = std::format!(
                "ksync: CPU id {} is out of range: the limit is {MAX_CPUS} (MAX_CPUS)",
                MAX_CPUS + 3
            );
            assert!(msg.starts_with(&want), "{msg}");
        };
        let save = std::thread::spawn(|| default_save(far)).join();
        expect(save.unwrap_err());
        valid_cpu_saves();
        let restore = std::thread::spawn(|| {
            let word = default_save(valid);
            // SAFETY: the matching save, but the CPU id has gone bad
            // since: the restore happens, then the panic.
            unsafe { default_restore(far, word) }
        })
        .join();
        expect(restore.unwrap_err());
        valid_cpu_saves();
    }
}
