//! The driver's global state: the control device, the doorbell port, the request block, the
//! list of open callers, and DriverEntry/Unload.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use hvprof_ioctl::codes;
use hvprof_ioctl::messages::port_source;
use hvprof_ioctl::table::HandleTable;

use crate::nt::{self, DeviceObject, DriverObject, KMutex, Mdl, NtStatusRaw};
use crate::{dispatch, pnp, vmm};

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

static DEVICE_NAME: [u16; codes::DEVICE_NAME.len()] = nt::utf16(codes::DEVICE_NAME);
static LINK_NAME: [u16; codes::DOS_DEVICE_NAME.len()] = nt::utf16(codes::DOS_DEVICE_NAME);

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

/// DriverEntry's work.
///
/// # Safety
///
/// Called once from DriverEntry with the driver object.
pub unsafe fn init(driver: *mut DriverObject) -> NtStatusRaw {
    let s = state();
    // SAFETY: single-threaded initialisation of the global state and of the driver object
    // before the I/O manager sends any request.
    unsafe {
        nt::KeInitializeMutex(ptr::addr_of_mut!((*s).mutex), 0);
        (*s).ring_lock = 0;
        let scratch = nt::MmAllocateContiguousMemory(vmm::SCRATCH_SIZE, 0xFFFF_FFFF);
        if scratch.is_null() {
            return vmm::STATUS_INSUFFICIENT_RESOURCES;
        }
        (*s).scratch = scratch.cast();

        let (found, source) = vmm::discover_port();
        set_port(found, source);

        let mf = &mut (*driver).major_function;
        mf[nt::IRP_MJ_CREATE] = Some(dispatch::create);
        mf[nt::IRP_MJ_CLOSE] = Some(dispatch::close);
        mf[nt::IRP_MJ_CLEANUP] = Some(dispatch::cleanup);
        mf[nt::IRP_MJ_DEVICE_CONTROL] = Some(dispatch::device_control);
        mf[nt::IRP_MJ_PNP] = Some(pnp::pnp);
        mf[nt::IRP_MJ_POWER] = Some(pnp::power);
        mf[nt::IRP_MJ_SYSTEM_CONTROL] = Some(pnp::system_control);
        (*driver).driver_unload = Some(unload);
        (*(*driver).driver_extension).add_device = Some(pnp::add_device);

        let name = nt::unicode(&DEVICE_NAME);
        let mut control = ptr::null_mut();
        let status = nt::IoCreateDevice(
            driver,
            core::mem::size_of::<DeviceExtension>() as u32,
            &name,
            codes::FILE_DEVICE_HVPROF,
            nt::FILE_DEVICE_SECURE_OPEN,
            0,
            &mut control,
        );
        if status < 0 {
            nt::MmFreeContiguousMemory(scratch);
            return status;
        }
        let ext = (*control).device_extension.cast::<DeviceExtension>();
        (*ext).kind = KIND_CONTROL;
        (*ext).lower = ptr::null_mut();
        (*control).flags &= !nt::DO_DEVICE_INITIALIZING;
        (*s).control = control;

        let link = nt::unicode(&LINK_NAME);
        let status = nt::IoCreateSymbolicLink(&link, &name);
        if status < 0 {
            nt::IoDeleteDevice(control);
            nt::MmFreeContiguousMemory(scratch);
            return status;
        }
        let status = nt::PsSetCreateProcessNotifyRoutine(dispatch::process_notify, 0);
        if status < 0 {
            nt::IoDeleteSymbolicLink(&link);
            nt::IoDeleteDevice(control);
            nt::MmFreeContiguousMemory(scratch);
            return status;
        }
    }
    nt::STATUS_SUCCESS
}

/// DriverUnload: the I/O manager calls it only when no file object is open on any device.
unsafe extern "system" fn unload(_driver: *mut DriverObject) {
    let s = state();
    // SAFETY: no request is in flight at unload; these undo `init`.
    unsafe {
        nt::PsSetCreateProcessNotifyRoutine(dispatch::process_notify, 1);
        let link = nt::unicode(&LINK_NAME);
        nt::IoDeleteSymbolicLink(&link);
        if !(*s).control.is_null() {
            nt::IoDeleteDevice((*s).control);
            (*s).control = ptr::null_mut();
        }
        if !(*s).scratch.is_null() {
            nt::MmFreeContiguousMemory((*s).scratch.cast::<c_void>());
            (*s).scratch = ptr::null_mut();
        }
    }
    set_port(0, port_source::NONE);
}
