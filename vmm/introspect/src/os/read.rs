//! Small checked reads of kernel objects shared by the Windows and Linux readers.

use super::IdentifyError;
use crate::mem::{canonical, Memory};

/// Page-table root bits of a CR3 (PCID and flag bits cleared).
pub const CR3_ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// `addr` as a kernel object's address: canonical, kernel-half, 8-aligned.
pub fn kernel_object(what: &'static str, addr: u64) -> Result<u64, IdentifyError> {
    if addr >> 63 == 1 && canonical(addr) && addr.is_multiple_of(8) {
        Ok(addr)
    } else {
        Err(IdentifyError::Implausible { what, value: addr })
    }
}

/// The u64 at `base + off`.
pub fn u64_at(mem: &mut dyn Memory, base: u64, off: u32) -> Result<u64, IdentifyError> {
    let at = base.wrapping_add(u64::from(off));
    mem.read_u64(at).map_err(|_| IdentifyError::Unreadable(at))
}

/// The u32 at `base + off`.
pub fn u32_at(mem: &mut dyn Memory, base: u64, off: u32) -> Result<u32, IdentifyError> {
    let at = base.wrapping_add(u64::from(off));
    mem.read_u32(at).map_err(|_| IdentifyError::Unreadable(at))
}

/// Fills `buf` from `base + off`.
pub fn bytes_at(
    mem: &mut dyn Memory,
    base: u64,
    off: u32,
    buf: &mut [u8],
) -> Result<(), IdentifyError> {
    let at = base.wrapping_add(u64::from(off));
    mem.read(at, buf).map_err(|_| IdentifyError::Unreadable(at))
}
