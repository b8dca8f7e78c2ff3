//! hvprof.sys: the Windows guest agent's kernel driver (docs/windows.md, "Agent").
//!
//! A WDM driver in `no_std` Rust. It finds the hvprof doorbell (the I/O resource of the ACPI
//! device `HVPR0001` when PnP starts it; else CPUID leaf 0x40000101; else the documented default
//! port 0x6A0, each checked against the doorbell's magic), creates `\Device\HvProf` with the
//! link `\\.\HvProf`, and forwards the IOCTLs of `hvprof_ioctl::codes` to the VMM through
//! guest-agent's `Client`, adding what only the kernel can: the caller's rights, the profiled
//! process's address space, the locking of the caller's buffer (IoAllocateMdl +
//! MmProbeAndLockPages) and its page list (MmGetMdlPfnArray), and the bookkeeping that unlocks
//! it on STOP, CLOSE, IRP_MJ_CLEANUP and process exit.
//!
//! Built by guest-agent/windows/build.sh with Debian's rustc 1.63 for x86_64-pc-windows-gnu as a
//! staticlib, linked by mingw-w64's gcc as a native-subsystem PE32+ whose entry is
//! `DriverEntry` and whose only import is ntoskrnl.exe.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc)]

mod dispatch;
mod entry;
mod mdl;
mod nt;
mod pnp;
mod state;
mod vmm;

use core::ffi::c_void;

use nt::{DriverObject, NtStatusRaw, UnicodeString};

/// `STATUS_REVISION_MISMATCH`: refuse to load if this build's structure layouts are wrong.
const STATUS_REVISION_MISMATCH: NtStatusRaw = 0xC000_0059_u32 as i32;

/// The driver's entry point.
///
/// # Safety
///
/// Called once by the I/O manager with a valid driver object, at PASSIVE_LEVEL.
#[no_mangle]
pub unsafe extern "system" fn DriverEntry(driver: *mut DriverObject, _registry: *mut UnicodeString) -> NtStatusRaw {
    if !nt::layout_ok() {
        return STATUS_REVISION_MISMATCH;
    }
    // SAFETY: DriverEntry's contract; `init` runs once, before any dispatch routine.
    unsafe { entry::init(driver) }
}

/// A panic in the kernel is a driver bug: stop the machine with a recognisable code
/// (0x48565052, "HVPR") rather than run on in an unknown state.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: KeBugCheckEx may be called at any IRQL and does not return.
    unsafe { nt::KeBugCheckEx(0x4856_5052, 0, 0, 0, 0) }
}

/// Debian's libcore references this symbol even with panic=abort; nothing calls it.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

/// Keeps `c_void` in scope for the modules' FFI signatures.
#[allow(dead_code)]
type Opaque = c_void;
