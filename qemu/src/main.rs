//! ksync's SMP test kernel for QEMU (x86_64 `-M q35`, aarch64 `-M virt`), and
//! the worked example of embedding ksync in a kernel (see README.md).
//!
//! One image per architecture (and per aarch64 atomics flavour) holds every
//! suite; the host runner chooses what runs with
//! `-fw_cfg name=opt/ksync/run,string=...` (see `harness::args`).
//!
//! Layers, from the bottom up; a module uses only the layers below it:
//!
//! * `arch/`: boot code and linker script, traps, interrupt controller and
//!   timer, UART, fw_cfg access, the way out of QEMU;
//! * `kernel/`: the kernel services: console, time, fw_cfg, CPUs, interrupt
//!   accounting, ksync's kernel hooks (`kernel::hooks`), the RCU policy
//!   (`kernel::rcu`), a barrier, the panic handler;
//! * `sched/`: kernel threads, per-CPU run queues, preemption (a kernel
//!   service between `kernel::irq` and `kernel::hooks`, which implements
//!   ksync's preempt hooks with it; it uses only `arch` and
//!   `kernel::{cpu, irq}`);
//! * `harness/`: what a suite is (`Suite`, `Ctx`, `Info`, `Summary`), the
//!   run's arguments and the runner;
//! * `suites/`: the torture suites, their controls and the benchmark, and
//!   their registry;
//! * this file: the entry point, which ties them together: it hands the
//!   suite registry to the harness and puts the timer tick together.
//!
//! The boot CPU brings the platform up, reads the arguments, starts the other
//! CPUs and waits until every one has reported in; then all of them run the
//! plan together (`harness::runner`).

#![no_std]
#![no_main]

mod arch;
mod harness;
mod kernel;
mod sched;
mod suites;

use harness::{args, runner};
use kernel::{console, cpu, irq, rcu, time};

/// How long the boot CPU waits for the others to report in.
const CPU_ARRIVAL_TIMEOUT_MS: u64 = 5_000;

/// The first Rust code on every CPU, called by the arch boot code on the
/// CPU's own stack with its index (0 for the boot CPU). `rcu::cpu_up` is
/// where each CPU tells RCU it is up.
extern "C" fn kernel_entry(cpu: usize) -> ! {
    arch::init_cpu(cpu);
    sched::init_cpu(cpu);
    if cpu == 0 {
        boot_cpu()
    } else {
        arch::init_local_interrupts();
        rcu::cpu_up();
        runner::run(cpu)
    }
}

fn boot_cpu() -> ! {
    // A guest that does not tell ksync so: ksync's default mode (the
    // run's `fifo`, `preempt` and `watch` words force one), with a hook
    // that records a detected stall.
    kernel::spin::init();
    arch::upcalls::set(arch::Upcalls {
        timer_tick: irq::timer_tick,
        irq_exit: sched::irq_exit,
        print_line: console::print_line,
        fatal: kernel::fatal,
    });
    console::init(arch::init_console());
    arch::init_platform();
    // The counter's rate is known now (device tree, PIT calibration,
    // CNTFRQ_EL0): ksync's FIFO stall watch measures real time with it.
    kernel::spin::init_clock();
    cpu::init_possible();
    rcu::init();
    irq::set_tick_handler(timer_tick);
    arch::init_local_interrupts();
    rcu::cpu_up();
    println!(
        "KSYNC-BOOT arch={} counter_hz={} timer_hz={} max_cpus={}",
        arch::NAME,
        time::hz(),
        arch::TIMER_HZ,
        cpu::MAX_CPUS
    );
    match args::parse(&suites::REGISTRY) {
        Ok(args::Command::List) => {
            args::list(&suites::REGISTRY);
            println!("KSYNC-DONE status=PASS passed=0 failed=0");
            arch::exit(true)
        }
        Ok(args::Command::Run) => {}
        Err(reason) => kernel::fatal(format_args!("KSYNC-ARGS error=\"{reason}\"")),
    }

    let expected = arch::start_secondaries(cpu::possible());
    let deadline = time::now() + time::ms_to_ticks(CPU_ARRIVAL_TIMEOUT_MS);
    rcu::idle_wait(|| cpu::online() >= expected || time::now() >= deadline);
    let online = cpu::online();
    println!("KSYNC-CPUS online={online} expected={expected}");
    if online < expected {
        kernel::fatal(format_args!(
            "KSYNC-RESULT suite=boot kind=test status=FAIL cpus={online} reason=\"only {online} of {expected} CPUs reported in\""
        ));
    }
    // Interrupts come on in `runner::run`, on every CPU.
    irq::disable();
    runner::release(&suites::REGISTRY, online);
    runner::run(0)
}

/// Every timer interrupt, after `irq::timer_tick`'s accounting (interrupts
/// off; `now` is the counter at the interrupt): the harness's work
/// (watchdog, the active suite's handler), then RCU's (stall check, ready
/// callbacks). If the CPU was idle, RCU watches it while they run. Last,
/// the scheduler's timed blocks and time slice (the switch itself comes at
/// the end of the interrupt, `sched::irq_exit`).
fn timer_tick(cpu: usize, now: u64) {
    rcu::interrupt(|| {
        runner::on_tick(cpu, now);
        rcu::tick(now);
    });
    sched::tick(cpu, now);
}
