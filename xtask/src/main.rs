//! The project driver: `cargo xtask run | test | bench`.
//!
//! * `run`: the main job — boots the SMP demo kernels under QEMU on x86_64,
//!   aarch64 and riscv64 with 4 CPUs and prints their tables.
//! * `test`: every check the project has, installing what it needs; ends
//!   with the line `N passed, N failed` (tests and checks counted together).
//! * `bench`: the host benchmarks (`cargo bench`), side by side with peers;
//! * `torture`: soak runs of the QEMU kernels with CPU hotplug churn and
//!   fresh random seeds.
//!
//! Two small crates (`lexopt`, `toml`) and otherwise `std`: cargo fetches
//! them, so the driver builds on a fresh machine before anything is
//! installed from apt.
//!
//! The parts: this file is the command line ([`COMMANDS`], [`parse`]);
//! `tools` finds the workspace and installs what is missing; `checks` is the
//! test command; `qemu` builds and boots the test kernels.

mod api;
mod checks;
mod layers;
mod mcu;
mod qemu;
mod tools;

use std::ffi::OsString;
use std::process::ExitCode;

use lexopt::prelude::*;

/// One subcommand, as the usage shows it.
struct Sub {
    name: &'static str,
    /// Its flags in one line, e.g. `[--quick]`.
    synopsis: &'static str,
    about: &'static str,
    /// Each flag and what it does.
    flags: &'static [(&'static str, &'static str)],
    /// The task with no flags given.
    default: fn() -> Task,
}

/// The subcommands. Adding one: a row here, a [`Task`] variant, its flags
/// in [`parse_flags`] and its action in [`execute`].
const COMMANDS: &[Sub] = &[
    Sub {
        name: "run",
        synopsis: "",
        about: "boot the SMP demo on QEMU (every architecture of the table) and print its tables",
        flags: &[],
        default: || Task::Run,
    },
    Sub {
        name: "test",
        synopsis: "[--kvm] [--host-only]",
        about: "every test and check; ends with `N passed, N failed`",
        flags: &[
            (
                "--kvm",
                "add the QEMU runs under KVM where /dev/kvm works (or KSYNC_QEMU_KVM=1)",
            ),
            ("--host-only", "skip the QEMU system runs"),
        ],
        default: || {
            Task::Test(checks::Options {
                kvm: false,
                host_only: false,
            })
        },
    },
    Sub {
        name: "check",
        synopsis: "[NAME...]",
        about: "run `test`'s checks of the published crate alone: package, msrv, api, portable-atomic (all when none is named); cortex-m boots the firmware; qemu-sched boots the QEMU scheduler configurations, qemu-tcg the TCG ones at -smp 4 (KSYNC_QEMU_ONLY=a,b limits the suites)",
        flags: &[],
        default: || Task::Check(Vec::new()),
    },
    Sub {
        name: "api",
        synopsis: "[--bless]",
        about: "compare the public API with api/public-api.txt",
        flags: &[(
            "--bless",
            "write the current list to api/public-api.txt (after an intended API change)",
        )],
        default: || Task::Api { bless: false },
    },
    Sub {
        name: "bench",
        synopsis: "[--quick] [--guest [--arch A] [--smp N] [--boots N] [--icount]] [--seeds [--update-plots]]",
        about: "host benchmarks with peers, then the in-guest locks against xv6's under QEMU (5 boots per architecture)",
        flags: &[
            (
                "--quick",
                "50 ms x 3 per measurement instead of 200 ms x 7 (a smoke run)",
            ),
            (
                "--seeds",
                "the five seed workloads against the designs they replaced, and the writer's cost at MAX_CPUS 8, 64, 256; plots to target/seeds-plots/",
            ),
            (
                "--guest",
                "only the in-guest table (the host benchmarks left out)",
            ),
            (
                "--update-plots",
                "with --seeds: write the plots to seeds/plots/ (the committed ones) instead",
            ),
            (
                "--arch A", // Filled in from the architecture table by `usage`.
                ARCH_FLAG,
            ),
            (
                "--smp N",
                "in-guest table: only this CPU count (1, 2, 4 or 8; default all four)",
            ),
            (
                "--boots N",
                "in-guest table: boots per cell (default 5; --quick: 1)",
            ),
            (
                "--icount",
                "in-guest table under -icount shift=0, -smp 1 only: instructions per operation instead of time",
            ),
        ],
        default: || Task::Bench {
            quick: false,
            seeds: false,
            update_plots: false,
            guest: false,
            filter: qemu::GuestFilter::default(),
        },
    },
    Sub {
        name: "torture",
        synopsis: "[--minutes N] [--smp N] [--arch A] [--seed S] [--boots N]",
        about: "soak: boot the QEMU suites again and again with CPU hotplug churn and fresh seeds",
        flags: &[
            ("--minutes N", "how long to keep booting (default 10)"),
            ("--smp N", "CPUs per QEMU machine (default 4)"),
            (
                "--arch A", // Filled in from the architecture table by `usage`.
                ARCH_FLAG,
            ),
            ("--seed S", "every boot with seed S (replays a failure)"),
            ("--boots N", "stop after N boots"),
        ],
        default: || Task::Torture(qemu::TortureOptions::default()),
    },
];

/// The `--arch` flag's text; [`usage`] replaces it with the names from
/// the architecture table, so a new row needs no edit here.
const ARCH_FLAG: &str = "only one architecture, or one configuration";

/// What the command line asks for.
enum Task {
    Run,
    Test(checks::Options),
    Check(Vec<String>),
    Api {
        bless: bool,
    },
    Bench {
        quick: bool,
        seeds: bool,
        update_plots: bool,
        guest: bool,
        /// The in-guest table's architecture, CPU count and boots.
        filter: qemu::GuestFilter,
    },
    Torture(qemu::TortureOptions),
}

/// The outcome of parsing.
enum Parsed {
    Task(Task),
    /// `--help` or `help`: the usage of one subcommand, or of all.
    Help(Option<&'static Sub>),
}

/// A command line that cannot be run: the message, and the subcommand
/// whose usage to show (`None`: the top-level usage).
struct Misuse(Option<&'static Sub>, lexopt::Error);

fn main() -> ExitCode {
    match parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Task(task)) => execute(task),
        Ok(Parsed::Help(sub)) => {
            print!("{}", usage(sub));
            ExitCode::SUCCESS
        }
        Err(Misuse(sub, e)) => {
            eprintln!("xtask: {e}\n");
            eprint!("{}", usage(sub));
            ExitCode::from(2)
        }
    }
}

fn execute(task: Task) -> ExitCode {
    let result = match task {
        Task::Run => run(),
        Task::Test(options) => return checks::test(&options),
        Task::Check(names) => return checks::run_named(&names),
        Task::Api { bless } => match api::check(bless) {
            Ok(true) => Ok(()),
            Ok(false) => Err("the public API changed".into()),
            Err(e) => Err(e),
        },
        Task::Bench {
            quick,
            seeds,
            update_plots,
            guest,
            filter,
        } => bench(quick, seeds, update_plots, guest, &filter),
        Task::Torture(options) => torture(&options),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---- the command line ---------------------------------------------------------

/// Parses the arguments after `cargo xtask`: a subcommand, then its flags.
/// Anything unknown is an error.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Misuse> {
    let mut parser = lexopt::Parser::from_args(args);
    let top = |e| Misuse(None, e);
    let name = match parser.next().map_err(top)? {
        None => return Err(top("no command given".into())),
        Some(Short('h') | Long("help")) => return Ok(Parsed::Help(None)),
        Some(Value(name)) => name.string().map_err(top)?,
        Some(arg) => return Err(top(arg.unexpected())),
    };
    if name == "help" {
        // `help [command]`
        let sub = match parser.next().map_err(top)? {
            None => None,
            Some(Value(name)) => Some(find(&name.string().map_err(top)?).map_err(top)?),
            Some(arg) => return Err(top(arg.unexpected())),
        };
        if let Some(arg) = parser.next().map_err(top)? {
            return Err(top(arg.unexpected()));
        }
        return Ok(Parsed::Help(sub));
    }
    let sub = find(&name).map_err(top)?;
    parse_flags(sub, &mut parser).map_err(|e| Misuse(Some(sub), e))
}

fn find(name: &str) -> Result<&'static Sub, lexopt::Error> {
    COMMANDS
        .iter()
        .find(|sub| sub.name == name)
        .ok_or_else(|| format!("unknown command '{name}'").into())
}

/// The flags of `sub`. A flag that takes a value reads it with
/// `parser.value()?` (`--minutes 5` and `--minutes=5` both work).
fn parse_flags(sub: &'static Sub, parser: &mut lexopt::Parser) -> Result<Parsed, lexopt::Error> {
    let mut task = (sub.default)();
    while let Some(arg) = parser.next()? {
        match (&mut task, arg) {
            (_, Short('h') | Long("help")) => return Ok(Parsed::Help(Some(sub))),
            (Task::Test(options), Long("kvm")) => options.kvm = true,
            (Task::Test(options), Long("host-only")) => options.host_only = true,
            (Task::Check(names), Value(name)) => names.push(name.string()?),
            (Task::Api { bless }, Long("bless")) => *bless = true,
            (Task::Bench { quick, .. }, Long("quick")) => *quick = true,
            (Task::Bench { seeds, .. }, Long("seeds")) => *seeds = true,
            (Task::Bench { update_plots, .. }, Long("update-plots")) => *update_plots = true,
            (Task::Bench { guest, .. }, Long("guest")) => *guest = true,
            (Task::Bench { filter, .. }, Long("arch")) => {
                filter.arch = Some(parser.value()?.string()?)
            }
            (Task::Bench { filter, .. }, Long("smp")) => filter.smp = Some(number(parser)?),
            (Task::Bench { filter, .. }, Long("boots")) => filter.boots = Some(number(parser)?),
            (Task::Bench { filter, .. }, Long("icount")) => filter.icount = true,
            (Task::Torture(o), Long("minutes")) => o.minutes = number(parser)?,
            (Task::Torture(o), Long("smp")) => o.smp = number(parser)?,
            (Task::Torture(o), Long("arch")) => o.arch = Some(parser.value()?.string()?),
            (Task::Torture(o), Long("seed")) => o.seed = Some(number(parser)?),
            (Task::Torture(o), Long("boots")) => o.boots = Some(number(parser)?),
            (_, arg) => return Err(arg.unexpected()),
        }
    }
    Ok(Parsed::Task(task))
}

/// A flag's value as a number.
fn number<T: std::str::FromStr>(parser: &mut lexopt::Parser) -> Result<T, lexopt::Error>
where
    T::Err: std::fmt::Display,
{
    let text = parser.value()?.string()?;
    text.parse()
        .map_err(|e| format!("invalid number '{text}': {e}").into())
}

/// The usage of one subcommand, or of all.
fn usage(sub: Option<&Sub>) -> String {
    let synopsis = |sub: &Sub| {
        format!("{} {}", sub.name, sub.synopsis)
            .trim_end()
            .to_string()
    };
    let Some(sub) = sub else {
        let mut out = String::from("usage: cargo xtask <command> [flags]\n\ncommands:\n");
        let line = |synopsis: &str, about: &str| format!("  {synopsis:<30} {about}\n");
        for sub in COMMANDS {
            out += &line(&synopsis(sub), sub.about);
        }
        out += &line("help [command]", "this text, or a command's flags");
        out += "\n`cargo xtask <command> --help` describes a command's flags.\n";
        return out;
    };
    let mut out = format!("usage: cargo xtask {}\n\n{}\n", synopsis(sub), sub.about);
    if sub.name == "test" {
        // From the table, so that a new group needs no edit here.
        out += "\nhost checks, in order (each also runs alone: `cargo xtask check NAME`):\n";
        for check in checks::HOST_CHECKS {
            out += &format!("  {:<14} {}\n", check.name, check.about);
        }
        out += "  then the QEMU system runs of every architecture and the Cortex-M firmware\n";
    }
    out += "\nflags:\n";
    for (flag, about) in sub.flags.iter().chain(&[("-h, --help", "print this help")]) {
        let about = if *about == ARCH_FLAG {
            let (arches, configs) = qemu::soak_names();
            format!(
                "only one architecture ({}) or one configuration ({})",
                arches.join(", "),
                configs.join(", ")
            )
        } else {
            (*about).to_string()
        };
        out += &format!("  {flag:<14} {about}\n");
    }
    out
}

// ---- run and bench ------------------------------------------------------------

fn run() -> Result<(), String> {
    tools::ensure_toolchain()?;
    qemu::ensure_tools()?;
    qemu::demo()?;
    println!("\nCortex-M (one core, SysTick on the same objects; TCG):");
    for line in mcu::demo_lines() {
        println!("  {line}");
    }
    Ok(())
}

fn torture(options: &qemu::TortureOptions) -> Result<(), String> {
    if options.smp == 0 || options.smp > 8 {
        return Err("--smp must be 1..=8 (the kernel's MAX_CPUS)".into());
    }
    tools::ensure_toolchain()?;
    qemu::ensure_tools()?;
    let totals = qemu::torture(options)?;
    if totals.failures.is_empty() && totals.stalls == 0 && totals.cb_queued == totals.cb_invoked {
        Ok(())
    } else {
        Err(format!("{} failed boots", totals.failures.len()))
    }
}

fn bench(
    quick: bool,
    seeds: bool,
    update_plots: bool,
    guest: bool,
    filter: &qemu::GuestFilter,
) -> Result<(), String> {
    if update_plots && !seeds {
        return Err("--update-plots goes with --seeds (the seed workloads' plots)".into());
    }
    if seeds {
        return bench_seeds(quick, update_plots);
    }
    if !guest {
        let mut cmd = tools::cargo(&[
            "bench", "--bench", "lockref", "--bench", "percpu", "--bench", "rcu", "--bench",
            "locks", "--bench", "sleeping", "--bench", "spin", "--",
        ]);
        if quick {
            cmd.arg("--quick");
        }
        if !tools::status_ok(&mut cmd) {
            return Err("cargo bench failed".into());
        }
    }
    // The in-guest table: ksync's IRQ-saving locks against a hobby
    // kernel's own (xv6's) under QEMU, every architecture.
    tools::ensure_toolchain()?;
    qemu::ensure_tools()?;
    let boots = filter
        .boots
        .unwrap_or(if quick { 1 } else { qemu::GUEST_BENCH_BOOTS });
    print!("{}", qemu::guest_bench(boots, filter)?);
    Ok(())
}

/// Where `bench --seeds` writes its plots unless asked to update the
/// committed ones (`--update-plots`: `seeds/plots/`).
const SEEDS_PLOTS: &str = "target/seeds-plots";

/// `bench --seeds`: the seed workloads' table and plots, then the
/// per-CPU rw lock writer's cost at three `MAX_CPUS` builds (a build-time
/// constant, so one build each, in its own target directory). The plots go
/// to [`SEEDS_PLOTS`]; a run on a busy machine must not rewrite the
/// committed ones by accident.
fn bench_seeds(quick: bool, update_plots: bool) -> Result<(), String> {
    let mut cmd = tools::cargo(&["bench", "-p", "seeds", "--bench", "seeds", "--"]);
    if quick {
        cmd.arg("--quick");
    }
    let plots = if update_plots {
        tools::root().join("seeds/plots")
    } else {
        tools::root().join(SEEDS_PLOTS)
    };
    cmd.env("KSYNC_SEEDS_PLOTS", &plots);
    if !tools::status_ok(&mut cmd) {
        return Err("the seeds bench failed".into());
    }
    for n in [8, 64, 256] {
        let mut cmd = tools::cargo(&["bench", "-p", "seeds", "--bench", "seeds", "--", "--writer"]);
        cmd.env("KSYNC_MAX_CPUS", n.to_string()).env(
            "CARGO_TARGET_DIR",
            tools::root().join(format!("target/maxcpus-{n}")),
        );
        if quick {
            cmd.arg("--quick");
        }
        if !tools::status_ok(&mut cmd) {
            return Err(format!("the seeds writer bench failed at MAX_CPUS {n}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Parsed, Misuse> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn known_commands_and_flags() {
        assert!(matches!(parsed(&["run"]), Ok(Parsed::Task(Task::Run))));
        assert!(matches!(
            parsed(&["test", "--host-only"]),
            Ok(Parsed::Task(Task::Test(checks::Options {
                kvm: false,
                host_only: true
            })))
        ));
        assert!(matches!(
            parsed(&["test", "--kvm", "--host-only"]),
            Ok(Parsed::Task(Task::Test(checks::Options {
                kvm: true,
                host_only: true
            })))
        ));
        assert!(matches!(
            parsed(&["bench", "--quick"]),
            Ok(Parsed::Task(Task::Bench {
                quick: true,
                seeds: false,
                update_plots: false,
                guest: false,
                ..
            }))
        ));
        assert!(matches!(
            parsed(&["bench", "--seeds", "--update-plots"]),
            Ok(Parsed::Task(Task::Bench {
                quick: false,
                seeds: true,
                update_plots: true,
                guest: false,
                ..
            }))
        ));
        match parsed(&[
            "bench", "--guest", "--arch", "riscv64", "--smp", "8", "--boots", "3",
        ]) {
            Ok(Parsed::Task(Task::Bench {
                guest: true,
                filter,
                ..
            })) => {
                assert_eq!(filter.arch.as_deref(), Some("riscv64"));
                assert_eq!((filter.smp, filter.boots), (Some(8), Some(3)));
            }
            _ => panic!("bench --guest --arch --smp --boots"),
        }
        match parsed(&[
            "torture",
            "--minutes",
            "2.5",
            "--smp=2",
            "--arch",
            "aarch64",
            "--seed",
            "7",
        ]) {
            Ok(Parsed::Task(Task::Torture(o))) => assert_eq!(
                o,
                qemu::TortureOptions {
                    minutes: 2.5,
                    smp: 2,
                    arch: Some("aarch64".into()),
                    seed: Some(7),
                    boots: None,
                }
            ),
            _ => panic!("torture flags"),
        }
        assert!(matches!(
            parsed(&["torture", "--minutes", "soon"]),
            Err(Misuse(Some(_), _))
        ));
    }

    #[test]
    fn help() {
        assert!(matches!(parsed(&["--help"]), Ok(Parsed::Help(None))));
        assert!(matches!(parsed(&["-h"]), Ok(Parsed::Help(None))));
        assert!(matches!(parsed(&["help"]), Ok(Parsed::Help(None))));
        assert!(matches!(
            parsed(&["test", "-h"]),
            Ok(Parsed::Help(Some(Sub { name: "test", .. })))
        ));
        assert!(matches!(
            parsed(&["help", "bench"]),
            Ok(Parsed::Help(Some(Sub { name: "bench", .. })))
        ));
    }

    #[test]
    fn misuse() {
        for args in [
            &[][..],
            &["frobnicate"],
            &["--nonsense"],
            &["help", "frobnicate"],
            &["help", "run", "extra"],
        ] {
            assert!(matches!(parsed(args), Err(Misuse(None, _))), "{args:?}");
        }
        for args in [
            &["test", "--nonsense"][..],
            &["test", "extra"],
            &["run", "--quick"],
            &["bench", "--quick=yes"],
        ] {
            assert!(matches!(parsed(args), Err(Misuse(Some(_), _))), "{args:?}");
        }
    }
}
