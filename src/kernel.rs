//! Kernel hooks: what ksync needs to be told by the kernel it runs in.
//!
//! Per-CPU data needs the current CPU's id, the number of possible CPUs, and
//! a way to stay on this CPU while using its slot (preemption off). The
//! kernel provides them once, in the final binary, by implementing
//! [`Kernel`] and naming the type in [`set_kernel!`](crate::set_kernel):
//!
#![cfg_attr(feature = "test-hooks", doc = " ```")]
#![cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
//! # mod my_kernel {
//! #     pub fn this_cpu_index() -> usize { 0 }
//! #     pub fn possible_cpus() -> usize { 4 }
//! #     pub fn preempt_count_inc() {}
//! #     pub fn preempt_count_dec() {}
//! # }
//! struct MyKernel;
//!
//! // SAFETY: `cpu_id` reads this CPU's index from a per-CPU register set at
//! // boot; it is below `nr_cpus`, and this kernel never migrates a context
//! // while preemption is disabled.
//! unsafe impl ksync::kernel::Kernel for MyKernel {
//!     fn cpu_id() -> usize { my_kernel::this_cpu_index() }
//!     fn nr_cpus() -> usize { my_kernel::possible_cpus() }
//!     fn preempt_disable() { my_kernel::preempt_count_inc() }
//!     fn preempt_enable() { my_kernel::preempt_count_dec() }
//! }
//!
//! ksync::set_kernel!(MyKernel);
//! ```
//!
//! The QEMU test kernels under `qemu/` are the worked example.
//!
//! # Why link-time hooks
//!
//! The hooks are `extern "Rust"` functions that [`set_kernel!`](crate::set_kernel) defines, as
//! the `critical-section` crate does for its implementation:
//!
//! * the per-CPU types stay plain `static`s with `const fn new`, with no type
//!   parameter naming the kernel threaded through every lock and counter
//!   (a `PerCpuCounter<MyKernel>` would leak the kernel's name into every
//!   library that uses one);
//! * a call is a direct call, which link-time optimisation can inline;
//! * a kernel that forgets the hooks gets a link error whose symbol names
//!   the fix (`undefined symbol:
//!   ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1`), and one that
//!   provides them twice gets a duplicate-symbol error on the same names.
//!
//! # Interrupts are a hook too
//!
//! Local interrupt save/restore ([`Kernel::irq_save`],
//! [`Kernel::irq_restore`]) defaults to the architecture's instructions on
//! x86_64, aarch64 and riscv64 bare metal, so most kernels never write it;
//! see [`irq`] for the other targets and for the IRQ-saving locks in
//! binaries that never call `set_kernel!`.
//!
//! # Lock-order checking
//!
//! With the `lockdep` feature, [`lockdep`](crate::lockdep) reports through
//! [`Kernel::lockdep_report`] (default: panic with the report) and asks
//! [`Kernel::in_interrupt`] and [`Kernel::irqs_disabled`] to classify each
//! acquisition (defaults: never in a handler, interrupts masked only by
//! ksync). The hooks exist in every build, so `set_kernel!` is the same
//! with and without the feature.
//!
//! # Oversubscribed CPUs
//!
//! [`set_vcpu_preemptible`] and [`set_spin_wait`] tell the locks that a CPU
//! may be descheduled while it spins (a guest with more vCPUs than host
//! cores) and what a waiter may do about it. They are settings, not hooks,
//! so plain spinlocks keep working without `set_kernel!`. A kernel that
//! says nothing is still covered: on x86_64 CPUID's hypervisor bit
//! decides, elsewhere the FIFO locks' waiters watch for a stall (no
//! hand-off for [`STALL_BOUND_MS`]) and switch to test-and-set hand-off
//! once ([`vcpu_stall`] reports it, [`set_vcpu_stall_hook`] is told).
//!
//! # Early boot: which paths call the hooks
//!
//! A kernel takes its first locks long before every hook works: on the
//! boot CPU before its per-CPU area (and so `cpu_id`) is set up, before
//! interrupts are configured, before it knows how many CPUs there are.
//! What each primitive calls, on which path, says when it may first be
//! used. "None" means no hook at all, so the primitive also works in a
//! binary that never calls [`set_kernel!`](crate::set_kernel).
//!
//! | primitive | hooks, and on which paths | may first be used |
//! |---|---|---|
//! | [`TicketLock`](crate::spinlock::TicketLock), [`TtasLock`](crate::spinlock::TtasLock) (the algorithms), and any lock with the [`NoGuard`](crate::spinlock::NoGuard) policy | none | any time |
//! | [`RawTicketLock`](crate::spinlock::RawTicketLock), [`RawTtasLock`](crate::spinlock::RawTtasLock) and their mutexes (policy [`PreemptDisabled`](crate::spinlock::PreemptDisabled)) | `preempt_disable` on taking, `preempt_enable` after releasing; in debug builds `preempt_disable_cpu_id` instead (the owner record; by default `preempt_disable` then `cpu_id`) | release builds: once the preemption hooks work (no-ops: any time); debug builds: once `cpu_id` works |
//! | [`LockRef`](crate::LockRef) | lockless get and put: none; its lock (`lock`, and the fallbacks of every operation): the policy's, `preempt_disable`/`preempt_enable` by default, none with [`NoGuard`](crate::spinlock::NoGuard) | release builds: once the preemption hooks work (no-ops: any time); `LockRef<NoGuard>`: any time |
//! | [`SeqCount`](crate::seqlock::SeqCount), [`SeqLock`](crate::seqlock::SeqLock) (`write`, `read`) | none | any time |
//! | [`QueuedLock`](crate::spinlock::QueuedLock), [`RawQueuedLock`](crate::spinlock::RawQueuedLock) | as the row above for `RawQueuedLock`; then none uncontended, nor for the first waiter (the pending bit); a later waiter queues on its CPU's node: `preempt_disable`, `cpu_id`, `preempt_enable`. None at all in the single-CPU build | uncontended: any time; once a second CPU can contend, `cpu_id` must work on every CPU that takes it |
//! | IRQ-saving locks with [`KernelIrq`](irq::KernelIrq) ([`IrqTicketMutex`](crate::spinlock::IrqTicketMutex), ...), [`IrqState::save`](irq::IrqState::save), `SeqLock::write_irqsave`, `BrLock::*_irqsave` | `irq_save`, `irq_restore` (the default is the CPU's own instructions on x86_64, aarch64 and riscv64 bare metal; elsewhere `critical-section` and, for its per-CPU save stack, `cpu_id`) | once the kernel's masking works: with the default on those three targets, any time |
//! | IRQ-saving locks with [`ArchIrq`](irq::ArchIrq) ([`ArchIrqTicketMutex`](crate::spinlock::ArchIrqTicketMutex), ...) | none | any time |
//! | [`PerCpu::get`](crate::percpu::PerCpu::get), `PerCpuCounter::{add, inc, dec}`, `BrLock::local_lock`, the per-CPU rw locks' readers | `preempt_disable_cpu_id` (by default `preempt_disable` then `cpu_id`), `preempt_enable` (with the default batch, the counter's first `add` also reads `nr_cpus` once) | when `cpu_id` is right on the calling CPU |
//! | `PerCpu::{iter, cpu}`, `PerCpuCounter::{sum, set, compare, error_bound}`, `BrLock::global_lock`, the per-CPU rw locks' writers, `Srcu::synchronize` | `nr_cpus`, plus the above (the counter's fold lock masks interrupts: `irq_save`) | when `nr_cpus` returns its final value |
//! | [`rcu`](crate::rcu) (read sections, quiescent states, grace periods, `call_rcu`, `barrier`, [`RcuSync`](crate::rcu::RcuSync)), [`Srcu`](crate::rcu::srcu::Srcu), [`GatedPerCpuRwLock`](crate::percpu_rwlock::GatedPerCpuRwLock) | `preempt_*`, `cpu_id`, `nr_cpus`, `irq_*`; `rcu_stall` from `check_stall` | once `cpu_id` and `nr_cpus` work; each CPU calls `rcu::cpu_online` before its first read section |
//! | [`RcuPtr`](crate::rcu::RcuPtr), [`RcuList`](crate::rcu::RcuList), [`Hlist`](crate::rcu::Hlist) writers (`publish`, insertion, removal under the writers' lock) | none (readers need an RCU read section, above) | any time |
//! | [`WaitQueue`](crate::wait::WaitQueue), [`Completion`](crate::completion::Completion), [`Semaphore`](crate::semaphore::Semaphore), [`Mutex`](crate::mutex::Mutex) (the sleeping primitives) | uncontended: the queue lock's (`irq_save`, `preempt_*`, as the IRQ-saving locks) and, for `Mutex`, `current_task`; a wait: `may_sleep`, `cpu_id` and `preempt_*` (its RCU read-section check), `current_task`, `block`, and `wake` from the waker; `clock_ns` for timed waits; `task_running` and `yield_now` while a `Mutex` locker spins | uncontended: once the IRQ-saving locks may be used; a wait: once the scheduler hooks work (with the defaults it busy-waits) |
//! | every lock, with the `lockdep` feature | each lock operation: `cpu_id`, `in_interrupt`, `irqs_disabled`, `irq_save`/`irq_restore`, and `lockdep_report` on a report | only once `cpu_id` works: a `lockdep` build must not take any ksync lock earlier |
//!
//! Debug builds count every preemption disable made through ksync per CPU
//! (for [`might_sleep`](crate::wait::might_sleep), as Linux's preemption
//! count): a spinlock takes preemption off through `preempt_disable_cpu_id`
//! (by default `preempt_disable` then `cpu_id`) and keeps the id in its
//! owner record for the release; other disables read `cpu_id` at each
//! `preempt_disable` and `preempt_enable`. There, every row that calls the
//! preemption hooks needs `cpu_id` too (an id at or past `MAX_CPUS`
//! panics naming it), and `might_sleep` itself calls `preempt_disable`,
//! `cpu_id` and `preempt_enable` to read this CPU's counts.
//!
//! The FIFO locks (ticket, queued, the lock in `LockRef`) also read two
//! settings, not hooks ([`set_vcpu_preemptible`], [`set_spin_wait`]): the
//! first acquisition detects the first one (on x86_64 with one `cpuid`),
//! which works at any time too.
//!
//! [`Kernel::nr_cpus`] is a constant upper bound: the number of *possible*
//! CPUs (Linux's `nr_cpu_ids`), not of the online ones, and the same from
//! the first call on; the configured maximum (up to [`MAX_CPUS`]) is a
//! fine answer. The per-CPU sums (`PerCpu::iter`, the counters' `sum`, the
//! rw lock's writers, SRCU's and RCU's grace periods) read slots
//! `0..nr_cpus()`: a CPU whose id is not below it would keep counts that no
//! sum sees (a writer that misses a reader frees memory under it), and a
//! value that grew between two sums would make them disagree. CPUs that
//! come and go stay below the bound; RCU learns who is online from
//! `rcu::cpu_online`/`cpu_offline`, not from `nr_cpus`.
//!
//! # One CPU
//!
//! Built with `KSYNC_MAX_CPUS=1` (see [`MAX_CPUS`]), every per-CPU type
//! has one slot, `cpu_id` must always be 0, and the ticket, TTAS and
//! queued locks take and release themselves with a plain load and store:
//! no atomic read-modify-write, no barrier (see
//! [`spinlock`'s "One CPU"](crate::spinlock#one-cpu), which also says
//! what such a build promises).
//!
//! # Host tests
//!
//! The `test-hooks` feature (for tests only: it pulls in `std`) provides an
//! implementation in which every thread is a CPU: see `ksync::host`. It is
//! a kernel like any other, above the library (it reports offline CPUs to
//! RCU when threads exit), so it lives at the crate's top, not in here.

/// The largest number of CPUs ksync's per-CPU data supports: every
/// [`PerCpu`](crate::percpu::PerCpu) has this many slots.
///
/// Set it at build time with the `KSYNC_MAX_CPUS` environment variable
/// (for example in the final binary's `.cargo/config.toml`:
/// `[env] KSYNC_MAX_CPUS = "256"`); the default is 64. Each slot is a cache
/// line (128 bytes on x86_64 and aarch64), so a `PerCpu<AtomicU64>` takes
/// 8 KiB at the default.
///
/// At most [`MAX_CPUS_LIMIT`] (16 383): the ticket lock and
/// [`LockRef`](crate::LockRef)'s lock count outstanding tickets in 16 bits,
/// and every CPU has four contexts that can wait at once (thread, softirq,
/// hardirq, NMI); 4 x 16 383 tickets stay below the 65 536 at which a held
/// lock would look free. A larger value fails the build.
///
/// `KSYNC_MAX_CPUS=1` is the single-CPU build: the spinlocks then cost no
/// atomic read-modify-write (see [`spinlock`'s "One
/// CPU"](crate::spinlock#one-cpu) for what that build promises).
pub const MAX_CPUS: usize = match option_env!("KSYNC_MAX_CPUS") {
    Some(text) => parse_max_cpus(text),
    None => 64,
};

/// The largest value `KSYNC_MAX_CPUS` may take (see [`MAX_CPUS`]).
pub const MAX_CPUS_LIMIT: usize = (1 << 14) - 1;

const fn parse_max_cpus(text: &str) -> usize {
    match parse_setting(text, MAX_CPUS_LIMIT) {
        Some(value) if value > 0 => value,
        _ => panic!(
            "KSYNC_MAX_CPUS must be a decimal number from 1 to 16383 (16-bit lock tickets must outnumber the 4 waiting contexts of every CPU)"
        ),
    }
}

/// A decimal build-time setting (`KSYNC_*` environment variables read with
/// `option_env!`): `None` when `text` is empty, holds anything but digits,
/// or is above `max`. Each caller panics with its own variable's name and
/// range (a `const` panic cannot format).
pub(crate) const fn parse_setting(text: &str, max: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    let mut value = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let digit = bytes[i];
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + (digit - b'0') as usize;
        if value > max {
            return None;
        }
        i += 1;
    }
    Some(value)
}

/// What a kernel tells ksync. Implement it once and name the type in
/// [`set_kernel!`](crate::set_kernel).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::Kernel;
/// # mod arch { pub fn this_cpu_index() -> usize { 0 } }
///
/// /// One CPU per core, kernel code never preempted: the two required hooks.
/// # struct MyKernel;
///
/// // SAFETY: `this_cpu_index` is this CPU's boot-time index, below 4, and
/// // nothing moves a context to another CPU while it runs kernel code.
/// unsafe impl Kernel for MyKernel {
///     fn cpu_id() -> usize { arch::this_cpu_index() }
///     fn nr_cpus() -> usize { 4 }
/// }
///
/// ksync::set_kernel!(MyKernel);
/// ```
///
/// # Safety
///
/// * [`cpu_id`](Kernel::cpu_id) returns the id of the CPU the caller runs
///   on, below [`nr_cpus`](Kernel::nr_cpus); no two contexts that can run
///   at the same time on different CPUs get the same id.
/// * Between [`preempt_disable`](Kernel::preempt_disable) and the matching
///   [`preempt_enable`](Kernel::preempt_enable), the calling context stays
///   on its CPU and no other thread context runs on that CPU (interrupt
///   handlers may). Calls nest.
/// * [`preempt_disable_cpu_id`](Kernel::preempt_disable_cpu_id), if
///   overridden, does what `preempt_disable` does and then returns what
///   `cpu_id` would.
/// * [`nr_cpus`](Kernel::nr_cpus) returns the same value every time, at
///   most [`MAX_CPUS`]: a constant upper bound on the CPU ids, counting
///   the possible CPUs, not the online ones (the configured maximum is
///   fine). Per-CPU sums read slots `0..nr_cpus()` only; see the
///   [module docs](self#early-boot-which-paths-call-the-hooks).
///
/// ksync's per-CPU data relies on these for memory safety.
pub unsafe trait Kernel {
    /// The current CPU's id, in `0..nr_cpus()`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod arch { pub fn read_tpidr_el1() -> usize { 1 } }
    /// # struct MyKernel;
    ///
    /// // SAFETY: boot code writes each CPU's index to its TPIDR_EL1, once.
    /// unsafe impl Kernel for MyKernel {
    ///     fn cpu_id() -> usize { arch::read_tpidr_el1() }
    ///     fn nr_cpus() -> usize { 8 }
    /// }
    ///
    /// ksync::set_kernel!(MyKernel);
    /// assert!(MyKernel::cpu_id() < MyKernel::nr_cpus());
    /// ```
    #[doc(alias = "smp_processor_id")]
    fn cpu_id() -> usize;

    /// The number of possible CPUs (every id is below it), at most
    /// [`MAX_CPUS`]: a constant, the same from the first call on, never
    /// the number of CPUs online now (CPUs that are offline, or not
    /// started yet, still count). Returning the configured maximum is
    /// always correct; a smaller exact value only makes the per-CPU sums
    /// shorter.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # fn smp_processor_id() -> usize { 0 }
    /// /// `CONFIG_NR_CPUS`: the configured maximum is always a valid answer,
    /// /// even before the other CPUs are started.
    /// const NR_CPUS: usize = 16;
    ///
    /// # struct MyKernel;
    /// // SAFETY: CPU ids are assigned at bring-up, 0..NR_CPUS.
    /// unsafe impl Kernel for MyKernel {
    ///     fn cpu_id() -> usize { smp_processor_id() }
    ///     fn nr_cpus() -> usize { NR_CPUS }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[doc(alias = "nr_cpu_ids")]
    fn nr_cpus() -> usize;

    /// Keeps the caller on this CPU until the matching
    /// [`preempt_enable`](Kernel::preempt_enable). Calls nest. The default
    /// does nothing, which is right for kernels that never preempt kernel
    /// code.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use ksync::kernel::Kernel;
    ///
    /// // The scheduler's per-CPU preempt count (one CPU here, for brevity).
    /// static PREEMPT_COUNT: AtomicU32 = AtomicU32::new(0);
    ///
    /// # struct MyKernel;
    /// // SAFETY: the scheduler switches tasks only while PREEMPT_COUNT is 0.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn preempt_disable() { PREEMPT_COUNT.fetch_add(1, Relaxed); }
    ///     fn preempt_enable() { PREEMPT_COUNT.fetch_sub(1, Relaxed); }
    /// }
    /// ksync::set_kernel!(MyKernel);
    ///
    /// MyKernel::preempt_disable();
    /// MyKernel::preempt_disable(); // nests
    /// MyKernel::preempt_enable();
    /// assert_eq!(PREEMPT_COUNT.load(Relaxed), 1);
    /// # MyKernel::preempt_enable();
    /// ```
    fn preempt_disable() {}

    /// Ends one [`preempt_disable`](Kernel::preempt_disable).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use ksync::kernel::Kernel;
    /// # fn schedule_if_needed() {}
    /// static PREEMPT_COUNT: AtomicU32 = AtomicU32::new(0);
    ///
    /// # struct MyKernel;
    /// // SAFETY: tasks switch only while PREEMPT_COUNT is 0 (one CPU).
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn preempt_disable() { PREEMPT_COUNT.fetch_add(1, Relaxed); }
    ///     fn preempt_enable() {
    ///         // The last enable runs a reschedule that was held back, as
    ///         // Linux's `preempt_enable` does.
    ///         if PREEMPT_COUNT.fetch_sub(1, Relaxed) == 1 {
    ///             schedule_if_needed();
    ///         }
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    fn preempt_enable() {}

    /// [`preempt_disable`](Kernel::preempt_disable), then the id of the
    /// CPU the caller now stays on (Linux's `get_cpu`): what every per-CPU
    /// access and RCU read section starts with, so a kernel can do both in
    /// one hook call (its preempt count and CPU id are usually in one
    /// per-CPU block). Must equal the two calls in that order. The default
    /// makes them.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
    /// use ksync::kernel::Kernel;
    ///
    /// /// The per-CPU block a kernel keeps behind `gs` or `TPIDR_EL1`.
    /// struct PerCpuBlock { cpu: AtomicUsize, preempt_count: AtomicU32 }
    /// # static BOOT_CPU: PerCpuBlock =
    /// #     PerCpuBlock { cpu: AtomicUsize::new(0), preempt_count: AtomicU32::new(0) };
    /// fn this_cpu() -> &'static PerCpuBlock {
    ///     // ... read `gs:` / `TPIDR_EL1` ...
    /// #   &BOOT_CPU
    /// }
    ///
    /// # struct MyKernel;
    /// // SAFETY: each CPU's block names that CPU; no switch while the count is set.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { this_cpu().cpu.load(Relaxed) }
    /// #     fn nr_cpus() -> usize { 1 }
    /// #     fn preempt_disable() { this_cpu().preempt_count.fetch_add(1, Relaxed); }
    /// #     fn preempt_enable() { this_cpu().preempt_count.fetch_sub(1, Relaxed); }
    ///     // `get_cpu()`: one per-CPU block lookup for both.
    ///     fn preempt_disable_cpu_id() -> usize {
    ///         let block = this_cpu();
    ///         block.preempt_count.fetch_add(1, Relaxed);
    ///         block.cpu.load(Relaxed)
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert_eq!(MyKernel::preempt_disable_cpu_id(), 0);
    /// # MyKernel::preempt_enable();
    /// ```
    #[doc(alias = "get_cpu")]
    #[inline]
    fn preempt_disable_cpu_id() -> usize {
        Self::preempt_disable();
        Self::cpu_id()
    }

    /// Saves the local interrupt state and disables interrupts on this
    /// CPU; the returned word goes back to
    /// [`irq_restore`](Kernel::irq_restore). Calls nest. The default is the
    /// architecture's (see [`irq`]): `pushfq; cli` on x86_64, `DAIF` on
    /// aarch64, `sstatus.SIE` on riscv64 (all bare metal), the binary's
    /// `critical-section` implementation elsewhere.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod plic {
    /// #     pub fn threshold() -> usize { 0 }
    /// #     pub fn set_threshold(_: usize) {}
    /// #     pub const MASK_ALL: usize = 7;
    /// # }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU; raising the interrupt controller's priority threshold
    /// // to its maximum masks every interrupt on this CPU, restoring it unmasks.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn irq_save() -> usize {
    ///         let old = plic::threshold();
    ///         plic::set_threshold(plic::MASK_ALL);
    ///         old
    ///     }
    ///     unsafe fn irq_restore(flags: usize) { plic::set_threshold(flags) }
    /// }
    /// ksync::set_kernel!(MyKernel);
    ///
    /// let flags = MyKernel::irq_save();
    /// // ... this CPU's interrupt handlers cannot run here ...
    /// // SAFETY: restores the matching save, on this CPU.
    /// unsafe { MyKernel::irq_restore(flags) };
    /// ```
    #[doc(alias = "local_irq_save")]
    #[inline]
    fn irq_save() -> usize {
        irq::default_save(Self::cpu_id)
    }

    /// Restores the state saved by the matching
    /// [`irq_save`](Kernel::irq_save) (interrupts enabled again only if
    /// they were enabled then).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    ///
    /// // Callers nest saves and restore them in reverse order, like
    /// // `local_irq_save` / `local_irq_restore`:
    /// fn nested<K: Kernel>() {
    ///     let outer = K::irq_save();
    ///     let inner = K::irq_save();
    ///     // SAFETY: both come from `irq_save` on this CPU, restored innermost first.
    ///     unsafe {
    ///         K::irq_restore(inner); // still off: `inner` saved them off
    ///         K::irq_restore(outer); // back to what they were before
    ///     }
    /// }
    /// # nested::<ksync::host::HostKernel>();
    /// ```
    ///
    /// # Safety
    /// `flags` comes from the matching `irq_save` on this CPU; saves are
    /// restored in reverse order.
    #[doc(alias = "local_irq_restore")]
    #[inline]
    unsafe fn irq_restore(flags: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { irq::default_restore(Self::cpu_id, flags) }
    }

    /// An RCU grace period has been running for longer than the stall
    /// timeout ([`rcu::check_stall`](crate::rcu::check_stall)): print the
    /// report (it implements `Display`), dump the stalled CPUs' stacks, or
    /// panic. The default logs it with `defmt` when that feature is on and
    /// does nothing otherwise (the report is also `check_stall`'s return
    /// value, and [`rcu::stall_count`](crate::rcu::stall_count) counts it).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::{Kernel, StallReport};
    /// # macro_rules! pr_err { ($($t:tt)*) => { eprintln!($($t)*) } }
    /// # fn dump_stack_of(_cpu: usize) {}
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn rcu_stall(report: &StallReport) {
    ///         pr_err!("{report}"); // "rcu: grace period 0x.. stalled for ..."
    ///         for cpu in report.cpus() {
    ///             dump_stack_of(cpu);
    ///         }
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[doc(alias = "print_cpu_stall")]
    fn rcu_stall(report: &StallReport) {
        #[cfg(feature = "defmt")]
        defmt::warn!("{}", report);
        let _ = report;
    }

    /// Whether the caller runs in an interrupt handler (Linux's
    /// `in_hardirq()`). Only [`lockdep`](crate::lockdep) asks, to find lock
    /// classes taken both in handlers and elsewhere with interrupts
    /// enabled. The default, `false`, is right for kernels whose handlers
    /// take no ksync locks; lockdep then never reports such an inversion.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use ksync::kernel::Kernel;
    ///
    /// // Bumped by the trap entry code around each handler (`irq_enter`).
    /// static HARDIRQ_COUNT: AtomicU32 = AtomicU32::new(0);
    ///
    /// # struct MyKernel;
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn in_interrupt() -> bool { HARDIRQ_COUNT.load(Relaxed) != 0 }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert!(!MyKernel::in_interrupt());
    /// ```
    #[doc(alias = "in_hardirq")]
    #[inline]
    #[must_use]
    fn in_interrupt() -> bool {
        false
    }

    /// Whether local interrupts are disabled on this CPU (Linux's
    /// `irqs_disabled()`). [`lockdep`](crate::lockdep) asks, to tell
    /// whether a lock is taken with interrupts enabled, and
    /// [`might_sleep`](crate::wait::might_sleep) in debug builds, to
    /// refuse a sleep with interrupts masked. lockdep already knows about
    /// masking done through ksync (the IRQ-saving locks,
    /// [`IrqState`](irq::IrqState), [`Kernel::irq_save`] through ksync), so
    /// with it the default, `false`, only misses masking the kernel did by
    /// other means; without lockdep, `might_sleep` also misses masking
    /// through [`ArchIrq`](irq::ArchIrq) (the `ArchIrq*` locks), which
    /// needs no hooks and so is not counted per CPU, unless this reads the
    /// CPU's interrupt flag. A kernel that implements
    /// [`in_interrupt`](Kernel::in_interrupt) should implement this too.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod arch { pub fn read_rflags() -> u64 { 0x202 } }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // x86_64: interrupts are off when RFLAGS.IF (bit 9) is clear.
    ///     fn irqs_disabled() -> bool { arch::read_rflags() & (1 << 9) == 0 }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert!(!MyKernel::irqs_disabled());
    /// ```
    #[inline]
    #[must_use]
    fn irqs_disabled() -> bool {
        false
    }

    /// The current task's token (Linux's `current`), for the sleeping
    /// primitives ([`wait`](crate::wait) and the locks on it): nonzero, the
    /// same for the task's whole life wherever it runs, and different from
    /// every other live task's. [`wake`](Kernel::wake) gets it back. The
    /// default, `cpu_id() + 1`, is right for a kernel without a scheduler
    /// (one flow of control per CPU).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # pub struct Task { pub pid: u32 }
    /// # static INIT_TASK: Task = Task { pid: 1 };
    /// # fn current() -> &'static Task { &INIT_TASK }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // The address of the task struct: nonzero, unique while it lives.
    ///     fn current_task() -> usize { current() as *const Task as usize }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert_ne!(MyKernel::current_task(), 0);
    /// ```
    #[doc(alias = "current")]
    #[inline]
    #[must_use]
    fn current_task() -> usize {
        Self::cpu_id() + 1
    }

    /// Parks the current task until [`wake`](Kernel::wake) is called with
    /// its token, or until [`clock_ns`](Kernel::clock_ns) reaches
    /// `deadline_ns` (Linux's `schedule()` / `schedule_timeout()` after
    /// `set_current_state(TASK_UNINTERRUPTIBLE)`). Called with preemption
    /// and interrupts enabled, never inside an RCU read section.
    ///
    /// It may return early for no reason (callers re-check what they wait
    /// for), but a `wake` that arrives after the caller published its token
    /// and *before* `block` is called must make `block` return at once:
    /// keep a "wake pending" flag per task, as `std::thread::park` does
    /// with its token. The default returns at once (one `spin_loop` hint):
    /// a kernel without a scheduler busy-waits in the sleeping
    /// primitives, which is correct but does not yield the CPU.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod sched {
    /// #     pub fn set_current_state_uninterruptible() {}
    /// #     pub fn schedule_until(_deadline_ns: Option<u64>) {}
    /// #     pub fn wake_up_process(_task: usize) {}
    /// # }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU; the scheduler switches only with preemption enabled.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn block(deadline_ns: Option<u64>) {
    ///         // A `wake_up_process` since the waiter queued itself sets the task
    ///         // back to running, so this `schedule` returns at once.
    ///         sched::set_current_state_uninterruptible();
    ///         sched::schedule_until(deadline_ns);
    ///     }
    ///     fn wake(task: usize) { sched::wake_up_process(task) }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[doc(alias = "schedule")]
    #[inline]
    fn block(deadline_ns: Option<u64>) {
        let _ = deadline_ns;
        core::hint::spin_loop();
    }

    /// Makes the task with token `task` runnable again (Linux's
    /// `wake_up_process`): its [`block`](Kernel::block), current or next,
    /// returns. Callable from any CPU, with interrupts off and from
    /// interrupt handlers; the sleeping primitives call it with preemption
    /// disabled, right after they dropped a wait queue's lock (and, when
    /// one unlock wakes more than a few tasks, with it held), so it must
    /// not sleep or take a lock a task holds while calling into ksync's
    /// wait queues. A wake for a task that is not blocked must be harmless
    /// (it only makes its next `block` return at once). ksync never calls
    /// it for a task that has exited: the waiter does not return from its
    /// wait before the waker's `wake` returned. The default does nothing
    /// (see `block`).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod sched { pub fn wake_up_process(_task: usize) -> bool { false } }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // Sets the task running and queues it on its CPU's run queue; a task
    ///     // that is not asleep only gets its next `block` to return at once.
    ///     fn wake(task: usize) { sched::wake_up_process(task); }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[doc(alias = "wake_up_process")]
    #[inline]
    fn wake(task: usize) {
        let _ = task;
    }

    /// Whether the current context may sleep (block): false in interrupt
    /// handlers and wherever the kernel cannot switch tasks. The sleeping
    /// primitives check it, and the other contexts ksync knows of (a read
    /// section of [`rcu`](crate::rcu), spinlocks held with `lockdep`),
    /// before they block ([`might_sleep`](crate::wait::might_sleep)). The
    /// default is `!in_interrupt()`.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod sched { pub fn preempt_count() -> u32 { 0 } pub fn in_hardirq() -> bool { false } }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU; no switch while the preempt count is nonzero.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     fn in_interrupt() -> bool { sched::in_hardirq() }
    ///     // Linux's `might_sleep` test: no handler, no preemption disabled.
    ///     fn may_sleep() -> bool { !sched::in_hardirq() && sched::preempt_count() == 0 }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert!(MyKernel::may_sleep());
    /// ```
    #[inline]
    #[must_use]
    fn may_sleep() -> bool {
        !Self::in_interrupt()
    }

    /// A monotonic clock in nanoseconds, for the timed waits
    /// (`wait_event_timeout`, `down_timeout`, ...) and their deadlines to
    /// [`block`](Kernel::block). Any epoch. The default panics with a
    /// message naming this hook: only the timed waits call it.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod arch { pub fn read_cntvct() -> u64 { 1_000 } pub const CNTFRQ_HZ: u64 = 62_500_000; }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // aarch64's virtual counter, scaled to nanoseconds (`ktime_get_ns`).
    ///     fn clock_ns() -> u64 {
    ///         (arch::read_cntvct() as u128 * 1_000_000_000 / arch::CNTFRQ_HZ as u128) as u64
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// assert_eq!(MyKernel::clock_ns(), 16_000);
    /// ```
    #[doc(alias = "ktime_get_ns")]
    #[inline]
    fn clock_ns() -> u64 {
        panic!("ksync: a timed wait needs a clock: implement Kernel::clock_ns")
    }

    /// Whether the task `task` is running on a CPU now (Linux's
    /// `owner_on_cpu`): a sleeping [`Mutex`](crate::mutex::Mutex) waiter
    /// spins while its owner runs and sleeps once it does not. The
    /// default, `true`, makes waiters spin a bounded while
    /// ([`SPIN_LIMIT`] rounds) before they sleep.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # pub struct Task { pub on_cpu: core::sync::atomic::AtomicBool }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // Linux's `owner_on_cpu`: the token is the task struct's address.
    ///     fn task_running(task: usize) -> bool {
    ///         // SAFETY: ksync passes only tokens of live tasks.
    ///         let task = unsafe { &*(task as *const Task) };
    ///         task.on_cpu.load(core::sync::atomic::Ordering::Relaxed)
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[inline]
    #[must_use]
    fn task_running(task: usize) -> bool {
        let _ = task;
        true
    }

    /// Gives this CPU to another runnable task, if there is one, and
    /// returns when the current task runs again (Linux's `yield()`). A
    /// [`Mutex`](crate::mutex::Mutex) locker whose holder runs calls it a
    /// few times after a short spin, before it sleeps: with more tasks
    /// than CPUs the holder may be waiting for this very CPU, and a
    /// spinner that keeps it only delays the unlock it waits for. Called
    /// with preemption and interrupts enabled, where the task may sleep
    /// ([`may_sleep`](Kernel::may_sleep)), never inside an RCU read
    /// section; a context switch here is a quiescent state as in `block`.
    /// The default is one `spin_loop` hint (no scheduler, no one to yield
    /// to).
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::Kernel;
    /// # mod sched { pub fn yield_current() {} }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // Puts the task at the back of its run queue and switches.
    ///     fn yield_now() { sched::yield_current() }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// MyKernel::yield_now();
    /// ```
    #[doc(alias = "yield")]
    #[inline]
    fn yield_now() {
        core::hint::spin_loop();
    }

    /// [`lockdep`](crate::lockdep) found a locking bug (feature `lockdep`):
    /// print the report (it implements `Display`). The default logs it with
    /// `defmt` (when that feature is on) and panics with it, as a kernel
    /// built for debugging usually wants. A kernel may print and carry on
    /// instead: lockdep's tables stay consistent after every report.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// use ksync::kernel::{Kernel, LockdepReport};
    /// # macro_rules! pr_warn { ($($t:tt)*) => { eprintln!($($t)*) } }
    /// # struct MyKernel;
    ///
    /// // SAFETY: one CPU, never preempted.
    /// unsafe impl Kernel for MyKernel {
    /// #     fn cpu_id() -> usize { 0 }
    /// #     fn nr_cpus() -> usize { 1 }
    ///     // Print and carry on, as Linux does after its first splat.
    ///     fn lockdep_report(report: &LockdepReport) {
    ///         pr_warn!("{report}");
    ///     }
    /// }
    /// ksync::set_kernel!(MyKernel);
    /// ```
    #[doc(alias = "print_circular_bug")]
    fn lockdep_report(report: &LockdepReport) {
        #[cfg(feature = "defmt")]
        defmt::error!("{}", report);
        panic!("{report}")
    }
}

/// Provides ksync's kernel hooks from a type implementing
/// [`kernel::Kernel`](crate::kernel::Kernel). Call it once, in the final
/// binary (the kernel).
///
/// Missing, the link fails on undefined symbols named
/// `ksync_hook_<hook>_defined_by_ksync_set_kernel_v1` (e.g.
/// `ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1`); called twice, on
/// duplicate symbols of the same names.
///
/// With ksync's `test-hooks` feature on (host tests, where the host kernel,
/// `ksync::host`, already provides every hook, each thread a CPU) the call
/// only checks that its argument implements `Kernel` and defines nothing.
/// So a kernel crate whose tests enable `test-hooks` through
/// `[dev-dependencies]` keeps its `set_kernel!` as it is, and its tests run
/// on the host kernel, not on the type named here.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// # mod arch { pub fn this_cpu_index() -> usize { 0 } }
/// # struct MyKernel;
///
/// // SAFETY: each CPU's index is set at boot, below 4, and kernel code
/// // is never preempted.
/// unsafe impl ksync::kernel::Kernel for MyKernel {
///     fn cpu_id() -> usize { arch::this_cpu_index() }
///     fn nr_cpus() -> usize { 4 }
/// }
///
/// // Once, in the kernel binary; libraries using ksync leave it to it.
/// ksync::set_kernel!(MyKernel);
/// ```
#[macro_export]
macro_rules! set_kernel {
    ($kernel:ty) => {
        $crate::__set_kernel_in_this_build!($kernel);
    };
}

/// [`set_kernel!`] without `test-hooks`: the hooks.
#[cfg(not(feature = "test-hooks"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __set_kernel_in_this_build {
    ($kernel:ty) => {
        $crate::__set_kernel_hooks!($kernel);
    };
}

/// [`set_kernel!`] with `test-hooks`: the host kernel has the hooks, so
/// only the type is checked.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
#[macro_export]
macro_rules! __set_kernel_in_this_build {
    ($kernel:ty) => {
        const _: () = {
            const fn is_kernel<K: $crate::kernel::Kernel>() {}
            is_kernel::<$kernel>()
        };
    };
}

/// The hook definitions behind [`set_kernel!`]; the host kernel's too.
#[doc(hidden)]
#[macro_export]
macro_rules! __set_kernel_hooks {
    ($kernel:ty) => {
        const _: () = {
            #[unsafe(no_mangle)]
            fn ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1() -> usize {
                <$kernel as $crate::kernel::Kernel>::cpu_id()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_nr_cpus_defined_by_ksync_set_kernel_v1() -> usize {
                <$kernel as $crate::kernel::Kernel>::nr_cpus()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_preempt_disable_defined_by_ksync_set_kernel_v1() {
                <$kernel as $crate::kernel::Kernel>::preempt_disable()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1() {
                <$kernel as $crate::kernel::Kernel>::preempt_enable()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_preempt_disable_cpu_id_defined_by_ksync_set_kernel_v1() -> usize {
                <$kernel as $crate::kernel::Kernel>::preempt_disable_cpu_id()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_irq_save_defined_by_ksync_set_kernel_v1() -> usize {
                <$kernel as $crate::kernel::Kernel>::irq_save()
            }
            #[unsafe(no_mangle)]
            unsafe fn ksync_hook_irq_restore_defined_by_ksync_set_kernel_v1(flags: usize) {
                // SAFETY: ksync calls it only with the word of the
                // matching save, in nesting order.
                unsafe { <$kernel as $crate::kernel::Kernel>::irq_restore(flags) }
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_rcu_stall_defined_by_ksync_set_kernel_v1(
                report: &$crate::kernel::StallReport,
            ) {
                <$kernel as $crate::kernel::Kernel>::rcu_stall(report)
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_in_interrupt_defined_by_ksync_set_kernel_v1() -> bool {
                <$kernel as $crate::kernel::Kernel>::in_interrupt()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_irqs_disabled_defined_by_ksync_set_kernel_v1() -> bool {
                <$kernel as $crate::kernel::Kernel>::irqs_disabled()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_current_task_defined_by_ksync_set_kernel_v1() -> usize {
                <$kernel as $crate::kernel::Kernel>::current_task()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_block_defined_by_ksync_set_kernel_v1(deadline_ns: Option<u64>) {
                <$kernel as $crate::kernel::Kernel>::block(deadline_ns)
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_wake_defined_by_ksync_set_kernel_v1(task: usize) {
                <$kernel as $crate::kernel::Kernel>::wake(task)
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_may_sleep_defined_by_ksync_set_kernel_v1() -> bool {
                <$kernel as $crate::kernel::Kernel>::may_sleep()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_clock_ns_defined_by_ksync_set_kernel_v1() -> u64 {
                <$kernel as $crate::kernel::Kernel>::clock_ns()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_task_running_defined_by_ksync_set_kernel_v1(task: usize) -> bool {
                <$kernel as $crate::kernel::Kernel>::task_running(task)
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_yield_now_defined_by_ksync_set_kernel_v1() {
                <$kernel as $crate::kernel::Kernel>::yield_now()
            }
            #[unsafe(no_mangle)]
            fn ksync_hook_lockdep_report_defined_by_ksync_set_kernel_v1(
                report: &$crate::kernel::LockdepReport,
            ) {
                <$kernel as $crate::kernel::Kernel>::lockdep_report(report)
            }
        };
    };
}

unsafe extern "Rust" {
    // SAFETY (of declaring them `safe`): `set_kernel!` is the only
    // intended definition, and it defines them with exactly these
    // signatures, forwarding to a `Kernel` impl whose contract makes them
    // safe to call.
    safe fn ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1() -> usize;
    safe fn ksync_hook_nr_cpus_defined_by_ksync_set_kernel_v1() -> usize;
    safe fn ksync_hook_preempt_disable_defined_by_ksync_set_kernel_v1();
    safe fn ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1();
    safe fn ksync_hook_preempt_disable_cpu_id_defined_by_ksync_set_kernel_v1() -> usize;
    safe fn ksync_hook_irq_save_defined_by_ksync_set_kernel_v1() -> usize;
    unsafe fn ksync_hook_irq_restore_defined_by_ksync_set_kernel_v1(flags: usize);
    safe fn ksync_hook_rcu_stall_defined_by_ksync_set_kernel_v1(report: &StallReport);
    safe fn ksync_hook_in_interrupt_defined_by_ksync_set_kernel_v1() -> bool;
    #[cfg_attr(not(feature = "lockdep"), allow(dead_code))] // lockdep's hook
    safe fn ksync_hook_irqs_disabled_defined_by_ksync_set_kernel_v1() -> bool;
    #[cfg_attr(not(feature = "lockdep"), allow(dead_code))] // lockdep's hook
    safe fn ksync_hook_lockdep_report_defined_by_ksync_set_kernel_v1(report: &LockdepReport);
    safe fn ksync_hook_current_task_defined_by_ksync_set_kernel_v1() -> usize;
    safe fn ksync_hook_block_defined_by_ksync_set_kernel_v1(deadline_ns: Option<u64>);
    safe fn ksync_hook_wake_defined_by_ksync_set_kernel_v1(task: usize);
    safe fn ksync_hook_may_sleep_defined_by_ksync_set_kernel_v1() -> bool;
    safe fn ksync_hook_clock_ns_defined_by_ksync_set_kernel_v1() -> u64;
    safe fn ksync_hook_task_running_defined_by_ksync_set_kernel_v1(task: usize) -> bool;
    safe fn ksync_hook_yield_now_defined_by_ksync_set_kernel_v1();
}

/// The kernel's [`Kernel::current_task`] (checked nonzero).
#[inline]
pub(crate) fn current_task() -> usize {
    let task = ksync_hook_current_task_defined_by_ksync_set_kernel_v1();
    assert!(
        task != 0,
        "ksync: Kernel::current_task returned 0 (tokens are nonzero)"
    );
    task
}

/// The kernel's [`Kernel::block`].
#[inline]
pub(crate) fn block(deadline_ns: Option<u64>) {
    ksync_hook_block_defined_by_ksync_set_kernel_v1(deadline_ns)
}

/// The kernel's [`Kernel::wake`].
#[inline]
pub(crate) fn wake(task: usize) {
    ksync_hook_wake_defined_by_ksync_set_kernel_v1(task)
}

/// The kernel's [`Kernel::may_sleep`].
#[inline]
pub(crate) fn may_sleep() -> bool {
    ksync_hook_may_sleep_defined_by_ksync_set_kernel_v1()
}

/// The kernel's [`Kernel::clock_ns`].
#[inline]
pub(crate) fn clock_ns() -> u64 {
    ksync_hook_clock_ns_defined_by_ksync_set_kernel_v1()
}

/// The kernel's [`Kernel::task_running`].
#[inline]
pub(crate) fn task_running(task: usize) -> bool {
    ksync_hook_task_running_defined_by_ksync_set_kernel_v1(task)
}

/// The kernel's [`Kernel::yield_now`].
#[inline]
pub(crate) fn yield_now() {
    ksync_hook_yield_now_defined_by_ksync_set_kernel_v1()
}

/// The kernel's [`Kernel::irq_save`] (with `lockdep`: also counted, so
/// lockdep knows this CPU has interrupts masked).
#[inline]
pub(crate) fn irq_save_hook() -> usize {
    let flags = ksync_hook_irq_save_defined_by_ksync_set_kernel_v1();
    #[cfg(feature = "lockdep")]
    irq::count_masked();
    flags
}

/// The kernel's [`Kernel::irq_restore`].
///
/// # Safety
/// As for [`Kernel::irq_restore`].
#[inline]
pub(crate) unsafe fn irq_restore_hook(flags: usize) {
    #[cfg(feature = "lockdep")]
    irq::count_unmasking();
    // SAFETY: forwarded caller contract.
    unsafe { ksync_hook_irq_restore_defined_by_ksync_set_kernel_v1(flags) }
}

/// The kernel's [`Kernel::irq_save`], uncounted: lockdep's own masking.
#[cfg(feature = "lockdep")]
#[inline]
pub(crate) fn irq_save_raw() -> usize {
    ksync_hook_irq_save_defined_by_ksync_set_kernel_v1()
}

/// The kernel's [`Kernel::irq_restore`], uncounted.
///
/// # Safety
/// As for [`Kernel::irq_restore`].
#[cfg(feature = "lockdep")]
#[inline]
pub(crate) unsafe fn irq_restore_raw(flags: usize) {
    // SAFETY: forwarded caller contract.
    unsafe { ksync_hook_irq_restore_defined_by_ksync_set_kernel_v1(flags) }
}

/// The kernel's [`Kernel::in_interrupt`].
#[inline]
pub(crate) fn in_interrupt() -> bool {
    ksync_hook_in_interrupt_defined_by_ksync_set_kernel_v1()
}

/// The kernel's [`Kernel::irqs_disabled`].
#[cfg(any(feature = "lockdep", debug_assertions))]
#[inline]
pub(crate) fn irqs_disabled() -> bool {
    ksync_hook_irqs_disabled_defined_by_ksync_set_kernel_v1()
}

/// Hands a lockdep report to the kernel's [`Kernel::lockdep_report`].
#[cfg(feature = "lockdep")]
#[cold]
#[inline(never)]
pub(crate) fn lockdep_report(report: &LockdepReport) {
    ksync_hook_lockdep_report_defined_by_ksync_set_kernel_v1(report)
}

/// Hands a stall report to the kernel's [`Kernel::rcu_stall`].
pub(crate) fn rcu_stall(report: &StallReport) {
    ksync_hook_rcu_stall_defined_by_ksync_set_kernel_v1(report)
}

/// The current CPU's id (the kernel's [`Kernel::cpu_id`]). Only stable while
/// preemption is disabled.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// // Stable only while preemption is disabled: read it under the guard.
/// let preempt = kernel::preempt_disable();
/// let cpu = kernel::cpu_id();
/// assert!(cpu < kernel::nr_cpus());
/// assert_eq!(preempt.cpu_id(), cpu);
/// ```
///
/// # Panics
/// If the kernel returns an id at or past [`MAX_CPUS`] (the check that
/// keeps per-CPU slots in bounds; it costs no hook call, unlike one against
/// [`nr_cpus`], which reading another CPU's slot checks): the message names
/// the id and the limit.
#[doc(alias = "raw_smp_processor_id")]
#[inline]
#[must_use]
pub fn cpu_id() -> usize {
    let id = ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1();
    check_cpu(id);
    id
}

/// The kernel's [`Kernel::cpu_id`] without [`cpu_id`]'s range check: for
/// a value that is only compared, never used as an index (the spinlocks'
/// debug owner record, on every acquisition and release).
#[cfg(debug_assertions)]
#[inline]
pub(crate) fn cpu_id_unchecked() -> usize {
    ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1()
}

/// The number of possible CPUs (the kernel's [`Kernel::nr_cpus`], capped
/// at [`MAX_CPUS`]).
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// // Sizing per-CPU state: every id `cpu_id()` can return is below it.
/// let per_cpu_hits = vec![0u64; kernel::nr_cpus()];
/// assert!(per_cpu_hits.len() <= kernel::MAX_CPUS);
/// ```
///
/// # Panics
/// If the kernel reports more than [`MAX_CPUS`] or zero.
#[doc(alias = "nr_cpu_ids")]
#[inline]
#[must_use]
pub fn nr_cpus() -> usize {
    let n = ksync_hook_nr_cpus_defined_by_ksync_set_kernel_v1();
    if n == 0 || n > MAX_CPUS {
        nr_cpus_out_of_range(n);
    }
    n
}

/// Panics unless `id` is a possible CPU id.
#[inline]
#[track_caller]
pub(crate) fn check_cpu(id: usize) {
    if id >= MAX_CPUS {
        cpu_out_of_range(id, MAX_CPUS, "MAX_CPUS");
    }
}

#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn cpu_out_of_range(id: usize, limit: usize, what: &str) -> ! {
    let advice = if what == "MAX_CPUS" {
        "; raise KSYNC_MAX_CPUS"
    } else {
        ""
    };
    panic!("ksync: CPU id {id} is out of range: the limit is {limit} ({what}){advice}")
}

#[cold]
#[inline(never)]
fn nr_cpus_out_of_range(n: usize) -> ! {
    panic!(
        "ksync: the kernel reports {n} possible CPUs; ksync supports 1 to {MAX_CPUS} (KSYNC_MAX_CPUS)"
    )
}

/// Debug builds: per CPU, how many preemption disables made through ksync
/// (its [`preempt_disable`], per-CPU references, the spinlocks' guards,
/// ...) are not yet undone, for [`might_sleep`](crate::wait::might_sleep)
/// (Linux's `preempt_count()` check). A kernel's preemption count may
/// live anywhere (or nowhere: the default hooks do nothing), so ksync
/// keeps its own. Counted after the disable and uncounted before the
/// enable, on the CPU the task stays on in between (the `Kernel`
/// contract); an interrupt handler's own disables balance out before it
/// returns. Relaxed, and a load and a store rather than a
/// read-modify-write (no locked instruction): only this CPU's contexts
/// touch its count, the task cannot move between the two (preemption is
/// disabled there), and an interrupt handler that comes between them
/// leaves the count as it found it.
#[cfg(all(debug_assertions, not(ksync_loom)))]
static PREEMPT_OFF: [crate::sync::AtomicU32; MAX_CPUS] =
    [const { crate::sync::AtomicU32::new(0) }; MAX_CPUS];

/// Counts a preemption disable of CPU `cpu` (debug builds).
#[inline(always)]
fn count_preempt_off(cpu: usize) {
    #[cfg(all(debug_assertions, not(ksync_loom)))]
    if let Some(count) = PREEMPT_OFF.get(cpu) {
        // Wrapping: 2^32 nested disables on one CPU cannot happen (each
        // holds a guard), so an overflow check here would be a branch in
        // every lock's fast path that guards nothing.
        count.store(
            count.load(crate::sync::Ordering::Relaxed).wrapping_add(1),
            crate::sync::Ordering::Relaxed,
        );
    }
    let _ = cpu;
}

/// Uncounts one, before the enable (debug builds), on CPU `cpu` if the
/// caller knows it (a lock's owner record), else on the id the kernel
/// gives now.
#[inline(always)]
fn count_preempt_on(cpu: Option<usize>) {
    #[cfg(all(debug_assertions, not(ksync_loom)))]
    if let Some(count) =
        PREEMPT_OFF.get(cpu.unwrap_or_else(ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1))
    {
        count.store(
            count.load(crate::sync::Ordering::Relaxed).saturating_sub(1),
            crate::sync::Ordering::Relaxed,
        );
    }
    let _ = cpu;
}

/// Debug builds: whether this CPU has preemption disabled through ksync
/// (see `PREEMPT_OFF`; always false under loom).
#[cfg(debug_assertions)]
#[inline]
pub(crate) fn preempt_disabled_by_ksync() -> bool {
    // With preemption disabled through the kernel alone (not counted):
    // the id and the count read are of the CPU this task is on. Read with
    // preemption on, a task moved after its id read would see the count of
    // the CPU it left, where another task may hold a spinlock.
    #[cfg(all(debug_assertions, not(ksync_loom)))]
    return without_preemption(|| {
        PREEMPT_OFF
            .get(ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1())
            .is_some_and(|count| count.load(crate::sync::Ordering::Relaxed) != 0)
    });
    #[cfg(ksync_loom)]
    false
}

/// Runs `f` with preemption disabled through the kernel's hooks only (not
/// counted in the debug count): for the debug checks' reads of this CPU's
/// counts (debug builds and `lockdep`).
#[allow(dead_code)]
pub(crate) fn without_preemption<T>(f: impl FnOnce() -> T) -> T {
    ksync_hook_preempt_disable_defined_by_ksync_set_kernel_v1();
    let out = f();
    ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1();
    out
}

/// Disables preemption until the returned guard drops: the caller stays on
/// this CPU. `!Send`.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel;
///
/// let guard = kernel::preempt_disable();
/// // This task stays on this CPU until `guard` drops: the id stays valid.
/// let cpu = guard.cpu_id();
/// # assert!(cpu < kernel::nr_cpus());
/// drop(guard); // preemption enabled again
/// ```
#[inline]
pub fn preempt_disable() -> PreemptGuard {
    ksync_hook_preempt_disable_defined_by_ksync_set_kernel_v1();
    #[cfg(all(debug_assertions, not(ksync_loom)))]
    count_preempt_off(ksync_hook_cpu_id_defined_by_ksync_set_kernel_v1());
    PreemptGuard {
        not_send: core::marker::PhantomData,
    }
}

/// Disables preemption and returns the guard with the CPU id it keeps
/// stable (Linux's `get_cpu`): one hook call,
/// [`Kernel::preempt_disable_cpu_id`].
///
/// # Panics
/// As [`cpu_id`], on an id at or past [`MAX_CPUS`] (preemption is enabled
/// again first).
#[inline]
pub(crate) fn preempt_disable_cpu() -> (PreemptGuard, usize) {
    let id = ksync_hook_preempt_disable_cpu_id_defined_by_ksync_set_kernel_v1();
    count_preempt_off(id);
    let guard = PreemptGuard {
        not_send: core::marker::PhantomData,
    };
    check_cpu(id);
    (guard, id)
}

/// The kernel's [`Kernel::preempt_disable`], with no guard: for a lock
/// whose guard policy pairs it with [`preempt_enable_hook`] itself.
///
/// Debug builds count the disable on the CPU id the kernel's
/// [`Kernel::preempt_disable_cpu_id`] returns (Linux's `get_cpu`): one
/// hook call where `preempt_disable` and `cpu_id` were two, each reading
/// the CPU's id (a kernel that does not define it gets those two, as
/// before).
#[inline]
pub(crate) fn preempt_disable_hook() {
    let _ = preempt_disable_hook_cpu();
}

/// [`preempt_disable_hook`], returning the CPU id it counted on (debug
/// builds; `None` in release builds, which read none): a spinlock's owner
/// record takes it instead of asking the kernel again.
#[inline]
pub(crate) fn preempt_disable_hook_cpu() -> Option<usize> {
    #[cfg(all(debug_assertions, not(ksync_loom)))]
    {
        let id = ksync_hook_preempt_disable_cpu_id_defined_by_ksync_set_kernel_v1();
        if id >= MAX_CPUS {
            // Before the id is kept anywhere (an owner record keeps it as
            // 32 bits): a bad id would count and uncount other CPUs.
            ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1();
            cpu_out_of_range(id, MAX_CPUS, "MAX_CPUS");
        }
        count_preempt_off(id);
        Some(id)
    }
    #[cfg(not(all(debug_assertions, not(ksync_loom))))]
    {
        ksync_hook_preempt_disable_defined_by_ksync_set_kernel_v1();
        None
    }
}

/// The kernel's [`Kernel::preempt_enable`] (see [`preempt_disable_hook`]).
#[inline]
pub(crate) fn preempt_enable_hook() {
    preempt_enable_hook_on(None);
}

/// [`preempt_enable_hook`] on CPU `cpu` when the caller knows it is this
/// CPU's id (a spinlock's owner record, just checked): the debug count
/// then reads no id.
#[inline]
pub(crate) fn preempt_enable_hook_on(cpu: Option<usize>) {
    count_preempt_on(cpu);
    ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1();
}

/// Preemption disabled (see [`preempt_disable`]); enabled again on drop.
///
#[cfg_attr(feature = "test-hooks", doc = " ```")]
#[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
/// use ksync::kernel::{self, PreemptGuard};
///
/// // Code that must stay on one CPU can ask for the proof:
/// fn touch_this_cpu(guard: &PreemptGuard) -> usize {
///     guard.cpu_id()
/// }
/// let guard = kernel::preempt_disable();
/// let a = touch_this_cpu(&guard);
/// assert_eq!(a, touch_this_cpu(&guard)); // same CPU, same id
/// ```
#[must_use = "dropping the guard enables preemption at once"]
#[derive(Debug)]
pub struct PreemptGuard {
    not_send: core::marker::PhantomData<*mut ()>,
}

impl PreemptGuard {
    /// The current CPU's id, stable for the guard's life.
    ///
    #[cfg_attr(feature = "test-hooks", doc = " ```")]
    #[cfg_attr(not(feature = "test-hooks"), doc = " ```ignore")]
    /// let guard = ksync::kernel::preempt_disable();
    /// let cpu = guard.cpu_id();
    /// // ... index this CPU's data with `cpu` ...
    /// assert_eq!(cpu, guard.cpu_id());
    /// ```
    #[inline]
    #[must_use]
    pub fn cpu_id(&self) -> usize {
        cpu_id()
    }
}

impl Drop for PreemptGuard {
    #[inline]
    fn drop(&mut self) {
        count_preempt_on(None);
        ksync_hook_preempt_enable_defined_by_ksync_set_kernel_v1();
    }
}

pub mod irq;
pub(crate) mod lockdep_report;
mod spin;
mod stall_report;

pub use stall_report::{STALL_REPORT_CPUS, StallReport};

/// The report type of [`Kernel::lockdep_report`]: [`lockdep::Report`](crate::lockdep::Report).
pub use lockdep_report::Report as LockdepReport;

pub(crate) use spin::{BACKOFF_MAX, Backoff, StallSite, StallWatch, Waiter, kick_waiters};
pub use spin::{
    SPIN_LIMIT, STALL_BOUND_MS, STALL_BOUND_ROUNDS, SpinWait, VcpuMode, VcpuStall, set_spin_wait,
    set_stall_clock_rate, set_vcpu_mode, set_vcpu_preemptible, set_vcpu_stall_hook,
    stall_clock_rate, vcpu_mode, vcpu_preemptible, vcpu_stall,
};

#[cfg(all(test, feature = "test-hooks"))]
mod tests {
    use super::{MAX_CPUS_LIMIT, parse_max_cpus};

    #[test]
    fn max_cpus_is_bounded_below_the_ticket_range() {
        assert_eq!(parse_max_cpus("1"), 1);
        assert_eq!(parse_max_cpus("16383"), MAX_CPUS_LIMIT);
        // Four waiting contexts per CPU must not wrap a 16-bit ticket.
        const { assert!(4 * MAX_CPUS_LIMIT < 1 << 16) };
        for bad in ["16384", "65536", "0", "", "12a"] {
            assert!(
                std::panic::catch_unwind(|| parse_max_cpus(bad)).is_err(),
                "KSYNC_MAX_CPUS={bad:?} was accepted"
            );
        }
    }
}
