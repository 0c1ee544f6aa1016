//! The serial console and `println!`.
//!
//! The UART (a 16550 on x86_64, a PL011 on aarch64, see `arch`) sits behind
//! ksync's [`IrqTicketMutex`]: one `println!` is one critical section, so
//! lines from different CPUs never interleave, and interrupt handlers may
//! print too (interrupts are off while a CPU holds the console).

use core::fmt::{self, Write};

use ksync::spinlock::IrqTicketMutex;

use crate::arch;

static CONSOLE: IrqTicketMutex<Option<arch::Uart>> = IrqTicketMutex::new(None);

/// Installs the UART. Output before this is dropped.
pub fn init(uart: arch::Uart) {
    *CONSOLE.lock() = Some(uart);
}

/// Prints formatted text; used by `println!`.
pub fn print(args: fmt::Arguments<'_>) {
    if let Some(uart) = CONSOLE.lock().as_mut() {
        // A UART write cannot fail; nothing to report it to anyway.
        let _ = uart.write_fmt(args);
    }
}

/// Prints `args` and a newline (`println!`, for code that cannot use the
/// macro: the arch layer's upcall).
pub fn print_line(args: fmt::Arguments<'_>) {
    print(format_args!("{args}\n"));
}

/// Prints from a panic or a fault: waits a little for the console (another
/// CPU may be in the middle of a line), then takes the UART over regardless,
/// since the holder may be this very CPU or a CPU that will never let go.
pub fn emergency_print(args: fmt::Arguments<'_>) {
    for _ in 0..1_000_000 {
        if let Some(mut console) = CONSOLE.try_lock() {
            if let Some(uart) = console.as_mut() {
                let _ = uart.write_fmt(args);
                return;
            }
            break;
        }
        core::hint::spin_loop();
    }
    // SAFETY: we are on the way to stopping the machine: at worst this output
    // interleaves with a line another CPU is printing.
    let mut uart = unsafe { arch::Uart::steal() };
    let _ = uart.write_fmt(args);
}

/// Prints a line to the serial console.
#[macro_export]
macro_rules! println {
    () => { $crate::kernel::console::print(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::kernel::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
