//! DriverEntry's work and DriverUnload: the request block, the doorbell port, the dispatch
//! routines, the control device and its link, and the process-exit callback.

use core::ffi::c_void;
use core::ptr;

use hvprof_ioctl::codes;
use hvprof_ioctl::messages::port_source;

use crate::nt::{self, DriverObject, NtStatusRaw};
use crate::state::{set_port, state, DeviceExtension, KIND_CONTROL};
use crate::{dispatch, pnp, vmm};

static DEVICE_NAME: [u16; codes::DEVICE_NAME.len()] = nt::utf16(codes::DEVICE_NAME);
static LINK_NAME: [u16; codes::DOS_DEVICE_NAME.len()] = nt::utf16(codes::DOS_DEVICE_NAME);

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
