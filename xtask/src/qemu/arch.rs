//! The architectures the test kernel runs on, one row of [`ARCHES`] each,
//! and the configurations (one way of booting one kernel image) made from
//! them.
//!
//! Adding an architecture is one row here plus the kernel's own code in
//! `qemu/`: the builds, the QEMU command line, the exit-status check, the
//! tool installation and the demo table all read the row.

/// One architecture: how to build its kernel and boot it under QEMU.
pub struct Arch {
    /// Short name, e.g. `x86_64`.
    pub name: &'static str,
    /// The rustc target of the kernel.
    pub target: &'static str,
    /// The QEMU system emulator.
    pub qemu: &'static str,
    /// The Debian package that provides [`Arch::qemu`].
    pub apt_package: &'static str,
    /// QEMU's `-M`.
    pub machine: &'static str,
    /// Further QEMU arguments: firmware, and the device or interface through
    /// which the kernel ends QEMU with a status.
    pub qemu_args: &'static [&'static str],
    /// How the kernel gets its arguments (the suites to run).
    pub plan: PlanVia,
    /// What QEMU's exit status says about the kernel's verdict.
    pub exit: ExitCodes,
    /// The counter the in-guest benchmark reads, for the demo table.
    pub counter: &'static str,
    /// The kernel images, each with the TCG configuration that boots it.
    pub variants: &'static [Variant],
    /// A KVM configuration of the first variant, where the host can run
    /// this architecture under KVM.
    pub kvm: Option<Kvm>,
    /// The host test suite on this architecture's Linux under qemu-user
    /// (`cargo xtask test`), where the host is another architecture.
    pub user: Option<UserTests>,
}

/// The host suite under qemu-user: a Linux target whose runner
/// (`.cargo/config.toml`) is `qemu-<arch>-static`, what it needs from apt,
/// and the runs.
pub struct UserTests {
    /// The rustc target, e.g. `aarch64-unknown-linux-gnu`.
    pub target: &'static str,
    /// `(Debian package, a file it installs)`: the emulator, the cross
    /// linker and its sysroot.
    pub packages: &'static [(&'static str, &'static str)],
    /// The runs of the whole release suite.
    pub runs: &'static [UserRun],
}

/// One run of the host suite under qemu-user.
pub struct UserRun {
    /// What the check is called (after the architecture's name).
    pub label: &'static str,
    /// `QEMU_CPU` (`None`: the emulator's default).
    pub cpu: Option<&'static str>,
    /// `RUSTFLAGS` for this build.
    pub rustflags: &'static str,
    /// Its target directory, relative to the workspace (one per set of
    /// rustflags, or the builds would rebuild each other's artefacts).
    pub dir: &'static str,
    /// The integration tests it runs (`--test NAME` each); empty: every
    /// test of the host suite.
    pub tests: &'static [&'static str],
}

/// Every package the qemu-user runs need, from the table's rows.
pub fn user_packages() -> Vec<(&'static str, &'static str)> {
    ARCHES
        .iter()
        .filter_map(|a| a.user.as_ref())
        .flat_map(|u| u.packages.iter().copied())
        .collect()
}

/// How the runner hands the kernel its arguments (`qemu/README.md`, "By
/// hand").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PlanVia {
    /// The fw_cfg file `opt/ksync/run`:
    /// `-fw_cfg name=opt/ksync/run,string=WORDS`.
    FwCfg,
    /// The kernel command line, `-append WORDS` (the device tree's
    /// `/chosen/bootargs`): QEMU 7.2's riscv64 `virt` creates its fw_cfg
    /// device too late for `-fw_cfg` on the command line.
    Append,
}

/// How QEMU's exit status reflects the kernel's verdict. Only a
/// cross-check: the verdict itself comes from the marker lines.
pub struct ExitCodes {
    /// The status when the kernel reports `PASS`.
    pub pass: i32,
    /// The status when the kernel reports `FAIL`.
    pub fail: i32,
    /// The status QEMU gives when the machine stops without the kernel
    /// choosing one, and what that means; `None` when no status tells.
    pub silent_stop: Option<(i32, &'static str)>,
}

impl ExitCodes {
    /// The status QEMU gives when the kernel reports `pass` (or not).
    pub fn verdict(&self, pass: bool) -> i32 {
        if pass { self.pass } else { self.fail }
    }
}

/// One kernel image of an architecture.
pub struct Variant {
    /// The name of the TCG configuration that boots it, e.g. `aarch64-lse`.
    pub config: &'static str,
    /// How the image is called in messages, e.g. `aarch64 (+lse)`.
    pub label: &'static str,
    /// `CARGO_TARGET_<TARGET>_RUSTFLAGS` for the build; empty for none.
    /// It replaces the target's `rustflags` in `qemu/.cargo/config.toml`.
    pub rustflags: &'static str,
    /// The target directory under `qemu/target` (empty: `qemu/target`
    /// itself). Images with different rustflags need their own, or each
    /// build would undo the other's.
    pub target_subdir: &'static str,
    /// QEMU's `-cpu` in the TCG configuration.
    pub cpu: &'static str,
    /// Whether `cargo xtask run` boots this image.
    pub demo: bool,
    /// The suites `cargo xtask test` runs on it, by family: a suite runs
    /// when its name is one of these or one of these followed by `-`
    /// (`lockref` takes the control `lockref-nolock` too). Empty: every
    /// suite the kernel lists.
    pub suites: &'static [&'static str],
    /// The kinds of suite (`test`, `control`, `bench`) `cargo xtask test`
    /// runs on it; empty: every kind. An image that repeats another's
    /// suites for one property (lock-order checking, the LL/SC atomics)
    /// leaves out what the other image already proves: the controls (they
    /// show that a suite's checks can fail, and the checks are the same
    /// code in every image) and the benchmarks (measurements; their
    /// result checks run on the demo images).
    pub kinds: &'static [&'static str],
    /// The kernel's cargo features (comma-separated; empty for none).
    /// `lockdep`: every ksync lock checks lock order; the runner then
    /// expects the `lockdep` suite's report and no report anywhere else.
    pub features: &'static str,
}

impl Variant {
    /// Whether the image is built with lock-order checking.
    pub fn lockdep(&self) -> bool {
        self.features.split(',').any(|f| f == "lockdep")
    }
}

impl Variant {
    /// Whether this image runs the suite called `name` of kind `kind`.
    pub fn runs(&self, name: &str, kind: &str) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&kind))
            && (self.suites.is_empty() || self.suites.iter().any(|family| in_family(family, name)))
    }
}

/// Whether the suite `name` is of `family`: `family` itself or
/// `family-...` ([`Variant::suites`]).
pub fn in_family(family: &str, name: &str) -> bool {
    name.strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// What a `--cfg ksync_generic` image is for: the suites of the services
/// that flag switches to their portable paths (lockref's step, the per-CPU
/// local add under the counter and the per-CPU rw lock), with their
/// controls.
const GENERIC_SUITES: &[&str] = &["lockref", "percpu-counter", "rwlock"];

/// A KVM configuration.
pub struct Kvm {
    /// Its name, e.g. `x86_64-kvm`.
    pub config: &'static str,
    /// QEMU's `-cpu`.
    pub cpu: &'static str,
}

/// Every architecture, in the order the configurations run.
pub const ARCHES: &[Arch] = &[
    Arch {
        name: "x86_64",
        target: "x86_64-unknown-none",
        qemu: "qemu-system-x86_64",
        apt_package: "qemu-system-x86",
        machine: "q35",
        // A triple fault must end QEMU (status 0), not reboot forever; the
        // kernel writes its verdict to the debug-exit port.
        qemu_args: &[
            "-no-reboot",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
        ],
        plan: PlanVia::FwCfg,
        // isa-debug-exit turns the value v written into status 2v+1.
        exit: ExitCodes {
            pass: 33,
            fail: 1,
            silent_stop: Some((0, "triple fault or shutdown")),
        },
        counter: "TSC (rdtsc)",
        variants: &[
            Variant {
                config: "x86_64-tcg",
                label: "x86_64",
                rustflags: "",
                target_subdir: "",
                cpu: "qemu64",
                demo: true,
                suites: &[],
                kinds: &[],
                features: "",
            },
            // The portable lockref step and local add (`lock cmpxchg`,
            // `lock add`) instead of the native ones; the relocation model
            // of qemu/.cargo/config.toml, which these flags replace.
            Variant {
                config: "x86_64-generic",
                label: "x86_64 (ksync_generic)",
                rustflags: "-C relocation-model=static --cfg ksync_generic",
                target_subdir: "generic",
                cpu: "qemu64",
                demo: false,
                suites: GENERIC_SUITES,
                kinds: &[],
                features: "",
            },
            // Every suite again with lock-order checking (ksync's
            // `lockdep`): correct code must give no report, the `lockdep`
            // suite its cycle. One architecture is enough for what it
            // checks (the lock code is the same on both).
            Variant {
                config: "x86_64-lockdep",
                label: "x86_64 (lockdep)",
                rustflags: "",
                target_subdir: "lockdep",
                cpu: "qemu64",
                demo: false,
                suites: &[],
                kinds: &["test"],
                features: "lockdep",
            },
        ],
        kvm: Some(Kvm {
            config: "x86_64-kvm",
            cpu: "qemu64",
        }),
        // The host.
        user: None,
    },
    Arch {
        name: "aarch64",
        target: "aarch64-unknown-none",
        qemu: "qemu-system-aarch64",
        apt_package: "qemu-system-arm",
        machine: "virt",
        // The kernel ends QEMU through semihosting's exit call.
        qemu_args: &["-semihosting-config", "enable=on,target=native"],
        plan: PlanVia::FwCfg,
        exit: ExitCodes {
            pass: 0,
            fail: 1,
            silent_stop: None,
        },
        counter: "CNTVCT_EL0",
        variants: &[
            // ARMv8.1 atomics (CAS, LDADD...): needs a CPU that has them.
            Variant {
                config: "aarch64-lse",
                label: "aarch64 (+lse)",
                rustflags: "-C target-feature=+lse",
                target_subdir: "lse",
                cpu: "max",
                demo: true,
                suites: &[],
                kinds: &[],
                features: "",
            },
            // LL/SC atomics (LDXR/STXR), on a CPU without LSE: runs on
            // every ARMv8 CPU.
            Variant {
                config: "aarch64-llsc",
                label: "aarch64 (LL/SC)",
                rustflags: "",
                target_subdir: "",
                cpu: "cortex-a57",
                demo: false,
                suites: &[],
                kinds: &["test", "control"],
                features: "",
            },
            // The portable paths on LL/SC: the compiler's LDAXR/STLXR loops
            // for `compare_exchange` and `fetch_add`, as a riscv64 or any
            // other LL/SC target gets them (with LSE they would be `casal`
            // and `stadd`, the native paths' own instructions).
            Variant {
                config: "aarch64-generic",
                label: "aarch64 (LL/SC, ksync_generic)",
                rustflags: "--cfg ksync_generic",
                target_subdir: "generic",
                cpu: "cortex-a57",
                demo: false,
                suites: GENERIC_SUITES,
                kinds: &[],
                features: "",
            },
        ],
        kvm: None,
        user: Some(UserTests {
            target: "aarch64-unknown-linux-gnu",
            packages: &[
                ("qemu-user-static", "/usr/bin/qemu-aarch64-static"),
                ("gcc-aarch64-linux-gnu", "/usr/bin/aarch64-linux-gnu-gcc"),
                (
                    "libc6-dev-arm64-cross",
                    "/usr/aarch64-linux-gnu/lib/libc.so",
                ),
            ],
            // The LL/SC build on a CPU without LSE (so the standard
            // library's outline atomics take LL/SC too) and the LSE build.
            // The LL/SC build on `-cpu max` is left out: ksync's own
            // choice is made at build time, so that run differed only in
            // the standard library's atomics taking LSE at run time, a mix
            // the bare-metal targets (no outline atomics) never see, and
            // it cost about 30 s of every test run.
            runs: &[
                UserRun {
                    label: "LL/SC build, -cpu cortex-a57",
                    cpu: Some("cortex-a57"),
                    rustflags: "",
                    dir: "target",
                    tests: &[],
                },
                // The LSE build changes the code of every atomic, and
                // ksync's own `asm!` for the lockref step and the per-CPU
                // local add: the suites of those, the locks and RCU, not
                // the whole host suite a second time (the LL/SC run above
                // has it).
                UserRun {
                    label: "+lse build, -cpu max",
                    cpu: Some("max"),
                    rustflags: "-C target-feature=+lse",
                    dir: "target/lse",
                    tests: &[
                        "lockref",
                        "prop_lockref",
                        "percpu",
                        "prop_percpu_counter",
                        "spinlock",
                        "queued_lock",
                        "rwspinlock",
                        "refcount",
                        "seqlock",
                        "rcu",
                    ],
                },
            ],
        }),
    },
    Arch {
        name: "riscv64",
        target: "riscv64gc-unknown-none-elf",
        qemu: "qemu-system-riscv64",
        apt_package: "qemu-system-misc",
        machine: "virt",
        // OpenSBI (QEMU's own build) boots the kernel in S-mode; the kernel
        // ends QEMU through the board's `sifive_test` device.
        qemu_args: &["-bios", "default"],
        plan: PlanVia::Append,
        exit: ExitCodes {
            pass: 0,
            fail: 1,
            silent_stop: None,
        },
        counter: "time CSR (rdtime)",
        // The generic paths: lockref by core's LR/SC compare-exchange, the
        // per-CPU add by `amoadd`, interrupts by `sstatus.SIE`.
        variants: &[Variant {
            config: "riscv64-tcg",
            label: "riscv64",
            rustflags: "",
            target_subdir: "",
            cpu: "rv64",
            demo: true,
            suites: &[],
            kinds: &[],
            features: "",
        }],
        kvm: None,
        // RVWMO: the library's portable paths (core atomics as LR/SC and
        // AMOs).
        user: Some(UserTests {
            target: "riscv64gc-unknown-linux-gnu",
            packages: &[
                // Also in qemu-user-static, which an older install may lack.
                ("qemu-user-static", "/usr/bin/qemu-riscv64-static"),
                ("gcc-riscv64-linux-gnu", "/usr/bin/riscv64-linux-gnu-gcc"),
                (
                    "libc6-dev-riscv64-cross",
                    "/usr/riscv64-linux-gnu/lib/libc.so",
                ),
            ],
            runs: &[UserRun {
                label: "release build",
                cpu: None,
                rustflags: "",
                dir: "target",
                tests: &[],
            }],
        }),
    },
];

/// The lock suites and their controls: what the oversubscribed
/// configurations run.
pub const LOCK_SUITES: &[&str] = &[
    "lockref",
    "lockref-nolock",
    "spinlock-ticket",
    "spinlock-ttas",
    "spinlock-queued",
    // Hung in scheduler mode while spinlocks left preemption on (a
    // preempted waiter's CPU reused its queue node); passes now that they
    // disable it.
    "spinlock-queued-fifo",
    "spinlock-noexcl",
    "spinlock-queued-split",
    "spinlock-halt",
    "spinlock-halt-nokick",
];

/// Suites that the configurations booting one suite per boot run
/// together in one boot instead (`cargo xtask test`): short ones (about
/// 1 s each; a control ends as soon as its broken variant is caught), for
/// which a boot of their own would cost more than the suite. Each is still
/// judged by its own lines; a control not caught there gets boots of its
/// own, as any control. Not in [`SCHED_SUITES`] (time; the scheduler boots
/// are the longest of the test run).
pub const SHARED_BOOT: &[&str] = &[
    "rwspinlock",
    "rwspinlock-irqbarge",
    "once",
    "once-checkfirst",
    "refcount",
    "refcount-wrap",
];

/// An image booted with more vCPUs than a small host has cores, for the
/// lock suites only: the guest says its CPUs may be descheduled while they
/// spin (`qemu/src/kernel/spin.rs`), and its locks must keep progressing.
pub struct Oversubscribed {
    /// The configuration's name.
    pub config: &'static str,
    /// The TCG configuration ([`Variant::config`]) whose image it boots.
    pub image: &'static str,
    /// QEMU's `-smp`.
    pub cpus: usize,
    /// The suites it runs (exact names).
    pub suites: &'static [&'static str],
}

/// What the oversubscribed configurations of x86_64 and aarch64 run: the
/// lock suites ([`LOCK_SUITES`], a boot each) and the short suites of
/// [`SHARED_BOOT`] (one boot together): `RwSpinLock` must keep its
/// readers and writers moving with vCPUs the host does not run, and
/// `Once`'s and `RefCount`'s races are wider there. The shared boot costs
/// about 5 s at `-smp 8` (x86_64 5.7 s, aarch64 4.5 s, riscv64 4.7 s of
/// wall time, measured at a host load of 3.4-4.5); a control not caught
/// in it gets boots of its own, as everywhere.
pub const OVERSUBSCRIBED_SUITES: &[&str] =
    &concat::<{ LOCK_SUITES.len() + SHARED_BOOT.len() }>(LOCK_SUITES, SHARED_BOOT);

/// `a` then `b`, as one array of `N` names (`N` must be their total).
const fn concat<const N: usize>(a: &[&'static str], b: &[&'static str]) -> [&'static str; N] {
    assert!(a.len() + b.len() == N);
    let mut out = [""; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[i + j] = b[j];
        j += 1;
    }
    out
}

/// The oversubscribed TCG configurations `cargo xtask test` adds. riscv64's
/// runs only [`SHARED_BOOT`] (one boot): its lock suites at `-smp 8` run in
/// its scheduler configuration ([`SCHEDULED`]).
pub const OVERSUBSCRIBED: &[Oversubscribed] = &[
    Oversubscribed {
        config: "x86_64-tcg-smp8",
        image: "x86_64-tcg",
        cpus: 8,
        suites: OVERSUBSCRIBED_SUITES,
    },
    Oversubscribed {
        config: "aarch64-lse-smp8",
        image: "aarch64-lse",
        cpus: 8,
        suites: OVERSUBSCRIBED_SUITES,
    },
    Oversubscribed {
        config: "riscv64-tcg-smp8",
        image: "riscv64-tcg",
        cpus: 8,
        suites: SHARED_BOOT,
    },
];

/// What the scheduler configurations run, in one boot each with the
/// kernel's `sched` word (every suite's per-CPU body as 3 kernel threads
/// per CPU, preempted by the timer; `qemu/src/harness/runner.rs`): the
/// lock suites (halting waits included), per-CPU
/// counter, brlock, the per-CPU rw locks and their writer flood, RCU and
/// its stall detection, interrupt masking, with their controls, the
/// scheduler's own suites (lock holders, wait queue), ksync's sleeping
/// primitives on the scheduler hooks (`sleep-*`), `lockdep` (in these
/// images without lockdep: its control) and the fd, `fget_light` and
/// `mmap_sem`, stat-storm and path-walk seed workloads. Not here
/// (`qemu/README.md`, "The scheduler"): `spinlock-queued-fifo` (time),
/// the benchmarks.
pub const SCHED_SUITES: &[&str] = &[
    "lockref",
    "lockref-nolock",
    "spinlock-ticket",
    "spinlock-ttas",
    "spinlock-queued",
    "spinlock-noexcl",
    "spinlock-queued-split",
    "spinlock-halt",
    "spinlock-halt-nokick",
    "percpu-counter",
    "percpu-counter-shared",
    "brlock",
    "brlock-skipone",
    "rwlock",
    "rwlock-gated",
    "rwlock-noblock",
    "rwlock-flood",
    "rwlock-flood-readpref",
    "rcu",
    "rcu-nowait",
    "rcu-callnow",
    "rcu-flood",
    "rcu-flood-stuck",
    "irq-mask",
    "irq-mask-global",
    "sched-lock-holder",
    "sched-lock-holder-preemptible",
    "sched-waitqueue",
    "sched-waitqueue-fifo",
    "sched-wake-oncpu-fifo",
    "sched-waitqueue-checkfirst",
    "sleep-waitqueue",
    "sleep-waitqueue-checkfirst",
    "sleep-completion",
    "sleep-completion-checkfirst",
    "sleep-semaphore",
    "sleep-semaphore-racydown",
    "sleep-mutex",
    "sleep-mutex-nohandoff",
    "sleep-rwsem",
    "sleep-rwsem-readerpref",
    "sleep-percpu-rwsem",
    "sleep-percpu-rwsem-nodrain",
    "seed-mmap-sleep",
    "seed-mmap-sleep-rwsem",
    "seed-mmap-sleep-control",
    "rcu-stall",
    "lockdep",
    "seed-fd",
    "seed-fd-control",
    "seed-fget-light",
    "seed-fget-light-control",
    "seed-mmap",
    "seed-mmap-control",
    "seed-stat",
    "seed-stat-control",
    "seed-walk",
    "seed-walk-control",
];

/// A scheduler configuration: an image booted once with the kernel's
/// `sched` word and every suite of [`SCHED_SUITES`] in that boot.
pub struct Scheduled {
    /// The configuration's name.
    pub config: &'static str,
    /// The TCG configuration ([`Variant::config`]) whose image it boots.
    pub image: &'static str,
    /// QEMU's `-smp`.
    pub cpus: usize,
}

/// The scheduler configurations `cargo xtask test` adds: -smp 8 on every
/// architecture (oversubscribed on a small host, as users run them), and
/// -smp 4 for aarch64's LL/SC image (the LSE image boots at 8). Each boot
/// runs every suite for about a minute, so the -smp 4 boots of x86_64 and
/// riscv64, which repeated the -smp 8 boots' suites with fewer threads,
/// were trimmed for the test command's time.
pub const SCHEDULED: &[Scheduled] = &[
    Scheduled {
        config: "x86_64-sched-smp8",
        image: "x86_64-tcg",
        cpus: 8,
    },
    Scheduled {
        config: "aarch64-sched-smp4",
        image: "aarch64-llsc",
        cpus: 4,
    },
    Scheduled {
        config: "aarch64-sched-smp8",
        image: "aarch64-lse",
        cpus: 8,
    },
    Scheduled {
        config: "riscv64-sched-smp8",
        image: "riscv64-tcg",
        cpus: 8,
    },
];

/// How QEMU executes the guest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Accel {
    Tcg,
    /// TCG on one host thread with the virtual clock driven by the guest's
    /// instruction count (`-icount shift=0`: one tick of 1 ns per
    /// instruction), so that the guest's counter counts its instructions,
    /// whatever the host's load (`cargo xtask bench --guest --icount`).
    TcgIcount,
    Kvm,
}

/// One way of running a kernel image.
pub struct Config {
    pub name: &'static str,
    pub arch: &'static Arch,
    pub variant: &'static Variant,
    pub accel: Accel,
    /// QEMU's `-cpu`.
    pub cpu: &'static str,
    pub cpus: usize,
    /// The suites `cargo xtask test` runs in it (exact names); empty:
    /// every suite the kernel lists.
    pub suites: &'static [&'static str],
    /// Words put before every plan given to the kernel (`sched` for the
    /// scheduler configurations, [`SCHEDULED`]); empty for none.
    pub words: &'static str,
}

impl Config {
    /// The TCG configurations of every architecture, in table order.
    pub fn all_tcg(cpus: usize) -> Vec<Config> {
        ARCHES
            .iter()
            .flat_map(|arch| {
                arch.variants.iter().map(move |variant| Config {
                    name: variant.config,
                    arch,
                    variant,
                    accel: Accel::Tcg,
                    cpu: variant.cpu,
                    cpus,
                    suites: &[],
                    words: "",
                })
            })
            .collect()
    }

    /// The scheduler configurations ([`SCHEDULED`]).
    pub fn all_scheduled() -> Vec<Config> {
        let images = Self::all_tcg(0);
        SCHEDULED
            .iter()
            .filter_map(|s| {
                let image = images.iter().find(|c| c.name == s.image)?;
                Some(Config {
                    name: s.config,
                    cpus: s.cpus,
                    suites: SCHED_SUITES,
                    words: "sched",
                    ..*image
                })
            })
            .collect()
    }

    /// Whether every suite of this configuration runs in one boot (the
    /// scheduler configurations).
    pub fn one_boot(&self) -> bool {
        !self.words.is_empty()
    }

    /// The oversubscribed TCG configurations ([`OVERSUBSCRIBED`]).
    pub fn all_oversubscribed() -> Vec<Config> {
        let images = Self::all_tcg(0);
        OVERSUBSCRIBED
            .iter()
            .filter_map(|o| {
                let image = images.iter().find(|c| c.name == o.image)?;
                Some(Config {
                    name: o.config,
                    cpus: o.cpus,
                    suites: o.suites,
                    ..*image
                })
            })
            .collect()
    }

    /// The same image and QEMU settings with `cpus` CPUs (for the demo's
    /// scaling table).
    pub fn with_cpus(&self, cpus: usize) -> Config {
        Config { cpus, ..*self }
    }

    /// Whether `cargo xtask test` runs the suite `name` here.
    pub fn runs(&self, name: &str) -> bool {
        self.suites.is_empty() || self.suites.contains(&name)
    }

    /// The KVM configurations, for the architectures that have one.
    pub fn all_kvm(cpus: usize) -> Vec<Config> {
        ARCHES
            .iter()
            .filter_map(|arch| {
                let kvm = arch.kvm.as_ref()?;
                Some(Config {
                    name: kvm.config,
                    arch,
                    variant: arch.variants.first()?,
                    accel: Accel::Kvm,
                    cpu: kvm.cpu,
                    cpus,
                    suites: &[],
                    words: "",
                })
            })
            .collect()
    }

    /// The QEMU settings in one line, for the logs and tables.
    pub fn describe(&self) -> String {
        let accel = match self.accel {
            Accel::Tcg => "TCG",
            Accel::TcgIcount => "TCG icount",
            Accel::Kvm => "KVM",
        };
        format!(
            "-M {} -cpu {} -smp {}, {accel}, {} kernel",
            self.arch.machine, self.cpu, self.cpus, self.variant.label
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most suites the kernel takes in one plan (`MAX_PLAN`,
    /// `qemu/src/harness/runner.rs`): [`SCHED_SUITES`] must fit.
    const KERNEL_MAX_PLAN: usize = 64;
    /// The longest run string the kernel reads, in bytes
    /// (`qemu/src/harness/args.rs`): the `sched` word and
    /// [`SCHED_SUITES`] must fit.
    const KERNEL_MAX_RUN_BYTES: usize = 1023;

    #[test]
    fn suite_filter() {
        let generic = ARCHES[0]
            .variants
            .iter()
            .find(|v| v.config == "x86_64-generic")
            .expect("the x86_64 generic image");
        for name in [
            "lockref",
            "lockref-nolock",
            "percpu-counter",
            "percpu-counter-shared",
            "rwlock",
            "rwlock-gated",
            "rwlock-noblock",
        ] {
            assert!(generic.runs(name, "test"), "{name}");
        }
        for name in [
            "lockrefs",
            "spinlock-ticket",
            "brlock",
            "rcu",
            "bench",
            "percpu",
        ] {
            assert!(!generic.runs(name, "test"), "{name}");
        }
        assert!(ARCHES[0].variants[0].runs("bench", "bench"));
        // Every architecture runs every kind of suite on some image, and
        // every image runs the tests.
        for arch in ARCHES {
            for kind in ["test", "control", "bench"] {
                assert!(
                    arch.variants
                        .iter()
                        .any(|v| v.suites.is_empty() && v.runs("any", kind)),
                    "{} {kind}",
                    arch.name
                );
            }
            assert!(
                arch.variants
                    .iter()
                    .all(|v| v.kinds.is_empty() || v.kinds.contains(&"test"))
            );
        }
        let lockdep = ARCHES[0]
            .variants
            .iter()
            .find(|v| v.lockdep())
            .expect("a lockdep image");
        assert!(lockdep.runs("lockdep", "test") && !lockdep.runs("lockref-nolock", "control"));
    }

    #[test]
    fn table_is_consistent() {
        let configs: Vec<Config> = Config::all_tcg(4)
            .into_iter()
            .chain(Config::all_kvm(2))
            .collect();
        for (i, a) in configs.iter().enumerate() {
            assert!(a.name.starts_with(a.arch.name), "{}", a.name);
            for b in &configs[i + 1..] {
                assert_ne!(a.name, b.name, "configuration names must be unique");
                if a.accel == b.accel {
                    assert_ne!(
                        a.variant.label, b.variant.label,
                        "image labels must be unique"
                    );
                }
                // Two images of one target with different flags or
                // features in one directory would rebuild (and overwrite)
                // each other.
                if a.arch.target == b.arch.target
                    && (a.variant.rustflags != b.variant.rustflags
                        || a.variant.features != b.variant.features)
                {
                    assert_ne!(a.variant.target_subdir, b.variant.target_subdir);
                }
            }
        }
        let over = Config::all_oversubscribed();
        assert_eq!(over.len(), OVERSUBSCRIBED.len(), "every image exists");
        for o in &over {
            assert!(o.name.starts_with(o.arch.name), "{}", o.name);
            assert!(!configs.iter().any(|c| c.name == o.name), "{}", o.name);
            assert!(!o.runs("rcu") && !o.suites.is_empty(), "{}", o.name);
            // Every oversubscribed configuration runs the shared boot's
            // suites (RwSpinLock, Once, RefCount at -smp 8).
            assert!(SHARED_BOOT.iter().all(|s| o.runs(s)), "{}", o.name);
        }
        // Every lock suite where the lock suites run oversubscribed.
        assert!(
            LOCK_SUITES
                .iter()
                .all(|s| OVERSUBSCRIBED_SUITES.contains(s))
        );
        assert_eq!(
            OVERSUBSCRIBED_SUITES.len(),
            LOCK_SUITES.len() + SHARED_BOOT.len()
        );
        for name in SHARED_BOOT {
            assert!(!SCHED_SUITES.contains(name) && !LOCK_SUITES.contains(name));
        }
        let scheduled = Config::all_scheduled();
        assert_eq!(scheduled.len(), SCHEDULED.len(), "every image exists");
        // One boot runs them all: the kernel must take the plan whole.
        assert!(SCHED_SUITES.len() <= KERNEL_MAX_PLAN);
        assert!(format!("sched {}", SCHED_SUITES.join(" ")).len() <= KERNEL_MAX_RUN_BYTES);
        for s in &scheduled {
            assert!(s.name.starts_with(s.arch.name), "{}", s.name);
            assert!(s.one_boot() && s.runs("sched-lock-holder"), "{}", s.name);
            assert!(!configs.iter().chain(&over).any(|c| c.name == s.name));
        }
        // Every architecture oversubscribed (-smp 8) in scheduler mode.
        for arch in ARCHES {
            assert!(
                scheduled
                    .iter()
                    .any(|s| s.arch.name == arch.name && s.cpus == 8),
                "{} at -smp 8 in scheduler mode",
                arch.name
            );
        }
        for arch in ARCHES {
            assert_ne!(arch.exit.pass, arch.exit.fail, "{}", arch.name);
            for variant in arch.variants {
                assert!(
                    variant
                        .suites
                        .iter()
                        .all(|f| !f.is_empty() && !f.ends_with('-')),
                    "{}",
                    variant.config
                );
            }
            if let Some((silent, _)) = arch.exit.silent_stop {
                assert_ne!(silent, arch.exit.pass, "{}", arch.name);
            }
        }
    }
}
