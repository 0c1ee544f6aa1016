//! ksync's SMP test kernel for QEMU (x86_64 `-M q35`, aarch64 `-M virt`), and
//! the worked example of embedding ksync in a kernel (see README.md).
//!
//! One image per architecture (and per aarch64 atomics flavour) holds every
//! suite; the host runner chooses what runs with
//! `-fw_cfg name=opt/ksync/run,string=...` (see `kernel::args`).
//!
//! * `arch/`: boot code and linker script, traps, interrupt controller and
//!   timer, UART, fw_cfg access, the way out of QEMU;
//! * `kernel/`: the small test-kernel library: console, CPUs, barrier, time,
//!   interrupt accounting, the suite runner, the panic handler, and ksync's
//!   kernel hooks with the RCU quiescent-state points (`kernel::hooks`);
//! * `suites/`: the torture suites, their controls and the benchmark.
//!
//! The boot CPU brings the platform up, reads the arguments, starts the other
//! CPUs and waits until every one has reported in; then all of them run the
//! plan together (`kernel::runner`).

#![no_std]
#![no_main]

mod arch;
mod kernel;
mod suites;

use kernel::{args, cpu, hooks, irq, runner, time};

/// How long the boot CPU waits for the others to report in.
const CPU_ARRIVAL_TIMEOUT_MS: u64 = 5_000;

/// The first Rust code on every CPU, called by the arch boot code on the
/// CPU's own stack with its index (0 for the boot CPU). `cpu::mark_online`
/// is where each CPU tells RCU it is up.
extern "C" fn kernel_entry(cpu: usize) -> ! {
    arch::init_cpu(cpu);
    if cpu == 0 {
        boot_cpu()
    } else {
        arch::init_local_interrupts();
        cpu::mark_online();
        runner::run(cpu)
    }
}

fn boot_cpu() -> ! {
    arch::init_platform();
    cpu::init_possible();
    hooks::rcu_init();
    arch::init_local_interrupts();
    cpu::mark_online();
    println!(
        "KSYNC-BOOT arch={} counter_hz={} timer_hz={} max_cpus={}",
        arch::NAME,
        time::hz(),
        arch::TIMER_HZ,
        cpu::MAX_CPUS
    );
    match args::parse() {
        Ok(args::Command::List) => {
            args::list();
            println!("KSYNC-DONE status=PASS passed=0 failed=0");
            arch::exit(true)
        }
        Ok(args::Command::Run) => {}
        Err(reason) => kernel::fatal(format_args!("KSYNC-ARGS error=\"{reason}\"")),
    }

    let expected = arch::start_secondaries();
    let deadline = time::now() + time::ms_to_ticks(CPU_ARRIVAL_TIMEOUT_MS);
    hooks::idle_wait(|| cpu::online() >= expected || time::now() >= deadline);
    let online = cpu::online();
    println!("KSYNC-CPUS online={online} expected={expected}");
    if online < expected {
        kernel::fatal(format_args!(
            "KSYNC-RESULT suite=boot kind=test status=FAIL cpus={online} reason=\"only {online} of {expected} CPUs reported in\""
        ));
    }
    // Interrupts come on in `runner::run`, on every CPU.
    irq::disable();
    runner::release(online);
    runner::run(0)
}
