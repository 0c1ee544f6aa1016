//! The architecture layer: everything that differs between x86_64 and
//! aarch64. Both modules provide the same items (checked by the build of
//! each target):
//!
//! * `NAME`, `TIMER_HZ`; `Uart` (`fmt::Write`, `unsafe fn steal()`);
//! * bring-up: `init_cpu(cpu)` (every CPU, first), `init_platform()` (boot
//!   CPU), `init_local_interrupts()` (every CPU), `start_secondaries()`,
//!   `timer_start()`;
//! * `cpu_index()`, `counter()`, `counter_hz()`, `irq_enable()`,
//!   `irq_disable()`;
//! * `fw_cfg_select(key)`, `fw_cfg_read_u8()`;
//! * `exit(success)`, `park()`.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64::*;

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64::*;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("ksync-qemu runs on x86_64 and aarch64 only");
