//! QEMU's firmware configuration device (fw_cfg): how the kernel learns the
//! CPU count on x86_64 and the runner's arguments on both architectures.
//!
//! The arch code provides the two register accesses (x86_64: I/O ports
//! 0x510/0x511; aarch64 `virt`: MMIO at 0x0902_0000); this module walks the
//! file directory. Reference: QEMU's `docs/specs/fw_cfg.rst`.

use crate::arch;

/// Selector of the number of CPUs QEMU was started with (`-smp`), a
/// little-endian `u16`.
pub const NB_CPUS: u16 = 0x0005;
/// Selector of the file directory (big-endian fields).
const FILE_DIR: u16 = 0x0019;
/// Bytes in a directory entry's name field.
const NAME_LEN: usize = 56;

/// Reads `buf.len()` bytes of item `key`, from its start.
pub fn read(key: u16, buf: &mut [u8]) {
    arch::fw_cfg_select(key);
    for byte in buf {
        *byte = arch::fw_cfg_read_u8();
    }
}

/// Reads the file `name` (for example `opt/ksync/run`, given to QEMU with
/// `-fw_cfg name=opt/ksync/run,string=...`) into `buf`. Returns its length
/// (at most `buf.len()`), or `None` when there is no such file.
pub fn read_file(name: &str, buf: &mut [u8]) -> Option<usize> {
    let mut count = [0; 4];
    read(FILE_DIR, &mut count);
    let count = u32::from_be_bytes(count);
    // The directory continues after the count: read it entry by entry
    // without selecting again.
    for _ in 0..count {
        let mut entry = [0; 8 + NAME_LEN];
        for byte in &mut entry {
            *byte = arch::fw_cfg_read_u8();
        }
        let size = u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
        let key = u16::from_be_bytes([entry[4], entry[5]]);
        let entry_name = &entry[8..];
        let len = entry_name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        if &entry_name[..len] == name.as_bytes() {
            let n = size.min(buf.len());
            read(key, &mut buf[..n]);
            return Some(n);
        }
    }
    None
}
