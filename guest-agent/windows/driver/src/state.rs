//! The driver's global state: the control device, the doorbell port, the request block and the
//! list of open callers (set up and torn down by `entry`).

use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use hvprof_ioctl::table::HandleTable;

use crate::nt::{self, DeviceObject, KMutex, Mdl};

/// Pool tag "HvPr".
pub const TAG: u32 = u32::from_le_bytes(*b"HvPr");

/// What a device object is (its extension's first field).
pub const KIND_CONTROL: u32 = 1;
/// The PnP function device on the ACPI `HVPR0001` device.
pub const KIND_FDO: u32 = 2;

/// Every device's extension.
#[repr(C)]
pub struct DeviceExtension {
    pub kind: u32,
    /// FDO: the device below (the ACPI PDO's stack).
    pub lower: *mut DeviceObject,
}

/// One open handle on `\\.\HvProf` (its file object's `FsContext`), on the callers' list.
#[repr(C)]
pub struct FileContext {
    pub next: *mut FileContext,
    pub prev: *mut FileContext,
    pub table: HandleTable<*mut Mdl>,
}

/// The state every dispatch routine shares. Fields other than the atomics are written in
/// DriverEntry/Unload only, or under `mutex`.
pub struct State {
    /// Serialises every IOCTL, cleanup and process-exit walk (PASSIVE_LEVEL, so locking user
    /// pages and calling the VMM may happen under it).
    pub mutex: KMutex,
    /// Held (at DISPATCH_LEVEL) around each doorbell ring: the thread cannot migrate between
    /// the two port writes, and the shared request block is used by one call at a time.
    pub ring_lock: usize,
    /// One page of physically contiguous memory below 4 GiB: the request block.
    pub scratch: *mut u8,
    /// `port | source << 16` (see `hvprof_ioctl::messages::port_source`).
    pub port: AtomicU32,
    /// The VMM's supported-sources mask, cached at the first QUERY_INFO (0: not yet known).
    pub supported_sources: u64,
    pub control: *mut DeviceObject,
    /// The callers' list (doubly linked through `FileContext::next/prev`).
    pub files: *mut FileContext,
}

pub struct Global(UnsafeCell<State>);

// SAFETY: access follows `State`'s rules: init/unload are single-threaded by the I/O manager,
// everything else is under `mutex` or atomic.
unsafe impl Sync for Global {}

pub static GLOBAL: Global = Global(UnsafeCell::new(State {
    mutex: KMutex([0; 7]),
    ring_lock: 0,
    scratch: ptr::null_mut(),
    port: AtomicU32::new(0),
    supported_sources: 0,
    control: ptr::null_mut(),
    files: ptr::null_mut(),
}));

/// The shared state.
pub fn state() -> *mut State {
    GLOBAL.0.get()
}

/// The doorbell port and how it was found; port 0 = none.
pub fn port() -> (u16, u16) {
    // SAFETY: `state()` is valid for the driver's lifetime; `port` is atomic.
    let v = unsafe { (*state()).port.load(Ordering::Acquire) };
    ((v & 0xFFFF) as u16, (v >> 16) as u16)
}

/// Sets the doorbell port.
pub fn set_port(port: u16, source: u16) {
    // SAFETY: as in `port`.
    unsafe { (*state()).port.store(u32::from(port) | u32::from(source) << 16, Ordering::Release) };
}

/// Takes the global mutex.
pub fn lock() {
    // SAFETY: the mutex was initialised in `init`; waiting at PASSIVE_LEVEL in the caller's
    // thread with no timeout.
    unsafe {
        let s = state();
        nt::KeWaitForSingleObject(
            ptr::addr_of_mut!((*s).mutex).cast(),
            nt::EXECUTIVE,
            nt::KERNEL_MODE,
            0,
            ptr::null(),
        );
    }
}

/// Releases the global mutex.
pub fn unlock() {
    // SAFETY: called by the thread that took it in `lock`.
    unsafe {
        nt::KeReleaseMutex(ptr::addr_of_mut!((*state()).mutex), 0);
    }
}
