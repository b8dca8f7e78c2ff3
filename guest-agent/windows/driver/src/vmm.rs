//! Calls into the VMM: the doorbell port, the physical-memory model, and running a
//! guest-agent `Client` on a request block.

use core::ffi::c_void;
use core::ptr;

use guest_agent::{Client, Doorbell, Error, PhysicalMemory};
use hvprof_ioctl::abi::DOORBELL_PORT_BASE;
use hvprof_ioctl::messages::port_source;
use hvprof_ioctl::{status, NtStatus};

use crate::nt::{self, KApcState};
use crate::state::{self, state};

/// Bytes of the shared request block: one page (every call but a long page list fits).
pub const SCRATCH_SIZE: usize = 4096;
/// `STATUS_INSUFFICIENT_RESOURCES`.
pub const STATUS_INSUFFICIENT_RESOURCES: i32 = 0xC000_009A_u32 as i32;

/// Guest-physical addresses of nonpaged kernel memory, by `MmGetPhysicalAddress`.
pub struct NtMemory;

// SAFETY: `MmGetPhysicalAddress` returns the physical address a resident kernel virtual address
// maps to now (0 if unmapped, reported as `None`); the driver uses it only for its own nonpaged
// request blocks, which stay resident and mapped while the VMM reads and writes them.
unsafe impl PhysicalMemory for NtMemory {
    fn physical_address(&self, va: u64) -> Option<u64> {
        // SAFETY: the call only translates; it is valid at any IRQL for nonpaged addresses.
        let pa = unsafe { nt::MmGetPhysicalAddress(va as *mut c_void) };
        if pa == 0 {
            None
        } else {
            Some(pa as u64)
        }
    }
}

/// True if hvprof's doorbell answers at `port`.
fn answers(port: u16) -> bool {
    // SAFETY: reading the ring port has no side effect on hvprof; on another device at that
    // port, a 32-bit IN is the least intrusive probe there is (the fallback the ABI documents).
    let mut d = unsafe { Doorbell::new(port) };
    d.is_present()
}

/// CPUID's port if hvprof's leaves are there and its doorbell answers; else the default port if
/// the doorbell answers there; else none.
pub fn discover_port() -> (u16, u16) {
    if let Ok(found) = guest_agent::discover() {
        if answers(found.port_base) {
            return (found.port_base, port_source::CPUID);
        }
    }
    if answers(DOORBELL_PORT_BASE) {
        return (DOORBELL_PORT_BASE, port_source::DEFAULT);
    }
    (0, port_source::NONE)
}

/// Uses the ACPI device's port (from PnP) if the doorbell answers there.
pub fn use_acpi_port(port: u16) -> bool {
    if answers(port) {
        state::set_port(port, port_source::ACPI);
        true
    } else {
        false
    }
}

/// The port to ring, rediscovering once if none was found yet.
fn current_port() -> Result<u16, NtStatus> {
    let (port, _) = state::port();
    if port != 0 {
        return Ok(port);
    }
    let (port, source) = discover_port();
    if port == 0 {
        return Err(status::NO_SUCH_DEVICE);
    }
    state::set_port(port, source);
    Ok(port)
}

/// Runs `f` on a client over `block` (`len` bytes, nonpaged, physically contiguous below 4 GiB)
/// with the ring lock held at DISPATCH_LEVEL.
///
/// # Safety
///
/// `block` must be valid nonpaged memory of `len` bytes used by nothing else during the call;
/// the caller holds the global mutex.
pub unsafe fn call_on<R, F>(block: *mut u8, len: usize, f: F) -> Result<R, NtStatus>
where
    F: FnOnce(&mut Client<'_, Doorbell, NtMemory>) -> Result<R, Error>,
{
    let port = current_port()?;
    let s = state();
    // SAFETY: the ring lock is a valid KSPIN_LOCK; `block` is the caller's exclusive nonpaged
    // memory (contract); `port` answered the doorbell magic, so it is hvprof's.
    unsafe {
        let old = nt::KeAcquireSpinLockRaiseToDpc(ptr::addr_of_mut!((*s).ring_lock));
        let bytes = core::slice::from_raw_parts_mut(block, len);
        let result = Client::new(Doorbell::new(port), NtMemory, bytes).and_then(|mut c| f(&mut c));
        nt::KeReleaseSpinLock(ptr::addr_of_mut!((*s).ring_lock), old);
        result.map_err(|e| e.status())
    }
}

/// Runs `f` on the shared one-page request block.
pub fn call<R, F>(f: F) -> Result<R, NtStatus>
where
    F: FnOnce(&mut Client<'_, Doorbell, NtMemory>) -> Result<R, Error>,
{
    // SAFETY: the scratch page is allocated in DriverEntry and used only here, under the global
    // mutex that every caller of `call` holds.
    unsafe { call_on((*state()).scratch, SCRATCH_SIZE, f) }
}

/// Runs `f` on a request block of `len` bytes: the shared page if it fits, else a temporary
/// contiguous allocation below 4 GiB (a long START page list).
pub fn call_sized<R, F>(len: usize, f: F) -> Result<R, NtStatus>
where
    F: FnOnce(&mut Client<'_, Doorbell, NtMemory>) -> Result<R, Error>,
{
    if len <= SCRATCH_SIZE {
        return call(f);
    }
    // SAFETY: a fresh allocation, freed below; MmAllocateContiguousMemory runs at PASSIVE_LEVEL
    // (the caller holds the mutex, not the spin lock).
    unsafe {
        let block = nt::MmAllocateContiguousMemory(len, 0xFFFF_FFFF);
        if block.is_null() {
            return Err(NtStatus::INSUFFICIENT_RESOURCES);
        }
        let r = call_on(block.cast(), len, f);
        nt::MmFreeContiguousMemory(block);
        r
    }
}

/// The address space (CR3) of process `pid`, read while attached to it.
pub fn process_cr3(pid: u64) -> Result<u64, NtStatus> {
    let mut process = ptr::null_mut();
    // SAFETY: the lookup takes a reference on success, dropped below.
    let st = unsafe { nt::PsLookupProcessByProcessId(pid as usize as *mut c_void, &mut process) };
    if st < 0 || process.is_null() {
        return Err(status::INVALID_CID);
    }
    let mut apc = KApcState([0; 6]);
    let cr3: u64;
    // SAFETY: attaching to a referenced process at PASSIVE_LEVEL and detaching at once; reading
    // CR3 at CPL0 has no side effect.
    unsafe {
        nt::KeStackAttachProcess(process, &mut apc);
        core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack, preserves_flags));
        nt::KeUnstackDetachProcess(&mut apc);
        nt::ObfDereferenceObject(process);
    }
    Ok(cr3)
}
