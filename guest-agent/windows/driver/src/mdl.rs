//! Locking a caller's buffer for START, and unlocking it.
//!
//! `MmProbeAndLockPages(UserMode, IoWriteAccess)` checks that the range is user space and
//! writable and locks its pages, raising an exception if it cannot. The exception is caught by
//! `hvprof_probe_and_lock` (seh.S), a hand-written __try/__except around the call that uses
//! ntoskrnl's `__C_specific_handler`: the failure comes back as a status, as in a C driver.

use core::ffi::c_void;
use core::ptr;

use hvprof_ioctl::abi::pages_spanned;
use hvprof_ioctl::NtStatus;

use crate::nt::{self, Mdl};

/// A locked buffer: its MDL (locked), page offset and frames.
pub struct Locked {
    pub mdl: *mut Mdl,
}

impl Locked {
    /// `MmGetMdlByteOffset`.
    pub fn offset_in_first_page(&self) -> u32 {
        // SAFETY: `mdl` is a valid locked MDL (constructor's guarantee).
        unsafe { (*self.mdl).byte_offset }
    }

    /// `MmGetMdlPfnArray`, one PFN_NUMBER (64-bit on x64) per page the buffer spans.
    pub fn frames(&self) -> &[u64] {
        // SAFETY: a locked MDL is followed by its PFN array, one entry per page spanned by
        // [StartVa + ByteOffset, + ByteCount).
        unsafe {
            let m = &*self.mdl;
            let va = m.start_va as u64 + u64::from(m.byte_offset);
            let pages = pages_spanned(va, u64::from(m.byte_count)) as usize;
            core::slice::from_raw_parts(self.mdl.add(1).cast::<u64>(), pages)
        }
    }
}

/// Locks `size` bytes at user address `buffer` of the current process for writing.
pub fn lock_user_buffer(buffer: u64, size: u32) -> Result<Locked, NtStatus> {
    // SAFETY: IoAllocateMdl only describes the range; nothing is touched until the probe.
    let mdl = unsafe { nt::IoAllocateMdl(buffer as *mut c_void, size, 0, 0, ptr::null_mut()) };
    if mdl.is_null() {
        return Err(NtStatus::INSUFFICIENT_RESOURCES);
    }
    // SAFETY: `mdl` is a fresh MDL for the caller's range; the shim catches the exception a bad
    // range raises. We run in the caller's process context at PASSIVE_LEVEL.
    let status = unsafe { nt::hvprof_probe_and_lock(mdl, nt::USER_MODE, nt::IO_WRITE_ACCESS) };
    if status != 0 {
        // SAFETY: the MDL was not locked (the probe failed); free it.
        unsafe { nt::IoFreeMdl(mdl) };
        let status = status as u32;
        // Any failure is reported as an error status, even a strange exception code.
        return Err(if status & 0xC000_0000 == 0xC000_0000 {
            NtStatus(status)
        } else {
            NtStatus::ACCESS_VIOLATION
        });
    }
    Ok(Locked { mdl })
}

/// Unlocks and frees an MDL locked by [`lock_user_buffer`].
///
/// # Safety
///
/// `mdl` must be locked, and the VMM must no longer write to its pages (STOP or CLOSE returned).
pub unsafe fn unlock(mdl: *mut Mdl) {
    // SAFETY: the caller's contract.
    unsafe {
        nt::MmUnlockPages(mdl);
        nt::IoFreeMdl(mdl);
    }
}
