//! The run's arguments, from the fw_cfg file `opt/ksync/run` (QEMU option
//! `-fw_cfg name=opt/ksync/run,string=WORDS`) or, where QEMU cannot add
//! fw_cfg files (riscv64 `virt` on QEMU 7.2), the kernel command line
//! (`-append WORDS`, `arch::boot_args`): a space-separated list of
//!
//! * suite names (see `list`), run in that order;
//! * `tests`: every test suite; `controls`: every control; `benches`:
//!   every benchmark (`bench`, `cost`, `seed-bench`); `demo`: the tests,
//!   then the benchmarks (the default without arguments). `bench` is the
//!   suite of that name alone (it was the kind word once, so a boot meant
//!   to run that suite ran every benchmark);
//! * `list`: print the registered suites and stop without starting the
//!   secondary CPUs;
//! * `hotplug`: CPU hotplug churn during the suites that allow it
//!   (`kernel::hotplug`, `Suite::hotplug`);
//! * `seed=N`: the seed of the churn and of the suites' generators
//!   (default 0), so that a failing run can be replayed.
//! * `sched`, `sched=N`: scheduler mode: every suite's per-CPU `run` as N
//!   kernel threads per CPU (3 for `sched`), preempted by the timer
//!   (`runner`, "Scheduler mode").
//! * `fifo`: strict FIFO hand-off in the ticket and queued locks and
//!   lockref's lock for the whole boot, never switched; `preempt`: their
//!   test-and-set hand-off from the start; `watch`: FIFO until a stall
//!   switches it (ksync's default without a hypervisor bit, so on x86_64
//!   only this word gives it). Without any of them the mode is ksync's
//!   default (`kernel::spin`).

use ksync::kernel::VcpuMode;

use super::{Kind, Registry, runner};
use crate::arch;
use crate::kernel::{fw_cfg, spin};
use crate::println;

/// What the boot CPU should do.
pub enum Command {
    /// Print the registry and stop.
    List,
    /// Run the plan (already pushed to the runner).
    Run,
}

/// Reads the arguments and fills the runner's plan with suites of
/// `registry`.
pub fn parse(registry: &Registry) -> Result<Command, &'static str> {
    // Room for every suite's name (a full buffer may have cut the words).
    let mut buf = [0u8; 1024];
    let len = fw_cfg::read_file("opt/ksync/run", &mut buf)
        .or_else(|| arch::boot_args(&mut buf))
        .unwrap_or(0);
    if len == buf.len() {
        return Err("the run words are longer than 1023 bytes");
    }
    let text = core::str::from_utf8(&buf[..len]).map_err(|_| "opt/ksync/run is not UTF-8")?;
    let text = text.trim_end_matches('\0').trim();
    let text = if text.is_empty() { "demo" } else { text };
    println!("KSYNC-ARGS run=\"{text}\"");
    for word in text.split_ascii_whitespace() {
        match word {
            "list" => return Ok(Command::List),
            "hotplug" => runner::set_hotplug(true),
            seed if seed.starts_with("seed=") => {
                let seed = seed["seed=".len()..]
                    .parse()
                    .map_err(|_| "seed=N wants a decimal number")?;
                runner::set_seed(seed);
            }
            "fifo" => spin::force(VcpuMode::Fifo),
            "preempt" => spin::force(VcpuMode::Preemptible),
            "watch" => spin::force(VcpuMode::FifoWatching),
            "sched" => runner::set_threads(3)?,
            threads if threads.starts_with("sched=") => {
                let n = threads["sched=".len()..]
                    .parse()
                    .map_err(|_| "sched=N wants a decimal number")?;
                runner::set_threads(n)?;
            }
            "tests" => push_kind(registry, Kind::Test)?,
            "controls" => push_kind(registry, Kind::Control)?,
            "benches" => push_kind(registry, Kind::Bench)?,
            "demo" => {
                push_kind(registry, Kind::Test)?;
                push_kind(registry, Kind::Bench)?;
            }
            name => {
                let index = registry
                    .all()
                    .position(|s| s.name() == name)
                    .ok_or("unknown suite name in opt/ksync/run (try `list`)")?;
                runner::plan_push(index)?;
            }
        }
    }
    spin::report();
    Ok(Command::Run)
}

fn push_kind(registry: &Registry, kind: Kind) -> Result<(), &'static str> {
    for (index, suite) in registry.all().enumerate() {
        if suite.kind() == kind {
            runner::plan_push(index)?;
        }
    }
    Ok(())
}

/// Prints `registry`, one `KSYNC-SUITE` line per suite.
pub fn list(registry: &Registry) {
    for suite in registry.all() {
        println!(
            "KSYNC-SUITE name={} kind={} budget_ms={}",
            suite.name(),
            suite.kind().word(),
            suite.budget_ms()
        );
    }
}
