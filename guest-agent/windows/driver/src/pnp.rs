//! PnP and power for the function device on the ACPI device `HVPR0001`: attach, learn the
//! doorbell's I/O port from IRP_MN_START_DEVICE's resources, pass everything else down.

use core::ptr;

use hvprof_ioctl::resources;

use crate::nt::{self, DeviceObject, DriverObject, Irp, NtStatusRaw};
use crate::state::{self, DeviceExtension, KIND_FDO};
use crate::vmm;

const STATUS_NO_SUCH_DEVICE: NtStatusRaw = 0xC000_000E_u32 as i32;
const STATUS_NOT_SUPPORTED: NtStatusRaw = 0xC000_00BB_u32 as i32;

fn lower(device: *mut DeviceObject) -> Option<*mut DeviceObject> {
    // SAFETY: every device of this driver has a DeviceExtension.
    unsafe {
        let ext = (*device).device_extension.cast::<DeviceExtension>();
        if (*ext).kind == KIND_FDO {
            Some((*ext).lower)
        } else {
            None
        }
    }
}

/// AddDevice: a function device attached over the ACPI PDO.
pub unsafe extern "system" fn add_device(driver: *mut DriverObject, pdo: *mut DeviceObject) -> NtStatusRaw {
    let mut fdo = ptr::null_mut();
    // SAFETY: standard AddDevice sequence at PASSIVE_LEVEL with the PnP manager's objects.
    unsafe {
        let status = nt::IoCreateDevice(
            driver,
            core::mem::size_of::<DeviceExtension>() as u32,
            ptr::null(),
            nt::FILE_DEVICE_UNKNOWN,
            nt::FILE_DEVICE_SECURE_OPEN,
            0,
            &mut fdo,
        );
        if status < 0 {
            return status;
        }
        let lower = nt::IoAttachDeviceToDeviceStack(fdo, pdo);
        if lower.is_null() {
            nt::IoDeleteDevice(fdo);
            return STATUS_NO_SUCH_DEVICE;
        }
        let ext = (*fdo).device_extension.cast::<DeviceExtension>();
        (*ext).kind = KIND_FDO;
        (*ext).lower = lower;
        (*fdo).flags |= nt::DO_POWER_PAGABLE;
        (*fdo).flags &= !nt::DO_DEVICE_INITIALIZING;
    }
    nt::STATUS_SUCCESS
}

/// Reads the doorbell's port from the translated resources and adopts it if it answers.
///
/// # Safety
///
/// `list` is the PnP manager's `CM_RESOURCE_LIST` for this start (or null).
unsafe fn adopt_resources(list: *const u8) {
    if list.is_null() {
        return;
    }
    // SAFETY: the list is the kernel's, valid for this IRP; `list_len` reads only the counts it
    // walks (bounded), then the slice covers exactly the list.
    unsafe {
        let read = |at: usize| ptr::read_unaligned(list.add(at).cast::<u32>());
        if let Ok(len) = resources::list_len(read) {
            let bytes = core::slice::from_raw_parts(list, len);
            if let Ok(Some(range)) = resources::find_doorbell(bytes) {
                vmm::use_acpi_port(range.base);
            }
        }
    }
}

/// IRP_MJ_PNP.
pub unsafe extern "system" fn pnp(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    let lower = match lower(device) {
        Some(l) => l,
        // SAFETY: completing the IRP we were given (the control device is not PnP).
        None => return unsafe { nt::complete(irp, STATUS_NOT_SUPPORTED, 0) },
    };
    // SAFETY: the PnP manager's IRP for our FDO at PASSIVE_LEVEL; forwarding follows the WDM
    // rules (start: forward synchronously, then complete; remove: forward, detach, delete).
    unsafe {
        let stack = nt::current_stack(irp);
        match (*stack).minor_function {
            nt::IRP_MN_START_DEVICE => {
                let mut status = STATUS_NO_SUCH_DEVICE;
                if nt::IoForwardIrpSynchronously(lower, irp) != 0 {
                    status = (*irp).io_status.status;
                    if status >= 0 {
                        adopt_resources((*stack).allocated_resources_translated());
                    }
                }
                let info = (*irp).io_status.information;
                nt::complete(irp, status, info)
            }
            nt::IRP_MN_REMOVE_DEVICE => {
                let (_, source) = state::port();
                if source == hvprof_ioctl::messages::port_source::ACPI {
                    let (port, source) = vmm::discover_port();
                    state::set_port(port, source);
                }
                (*irp).io_status.status = nt::STATUS_SUCCESS;
                nt::skip_current_stack(irp);
                let status = nt::IofCallDriver(lower, irp);
                nt::IoDetachDevice(lower);
                nt::IoDeleteDevice(device);
                status
            }
            nt::IRP_MN_QUERY_REMOVE_DEVICE
            | nt::IRP_MN_CANCEL_REMOVE_DEVICE
            | nt::IRP_MN_STOP_DEVICE
            | nt::IRP_MN_QUERY_STOP_DEVICE
            | nt::IRP_MN_CANCEL_STOP_DEVICE
            | nt::IRP_MN_SURPRISE_REMOVAL => {
                (*irp).io_status.status = nt::STATUS_SUCCESS;
                nt::skip_current_stack(irp);
                nt::IofCallDriver(lower, irp)
            }
            _ => {
                nt::skip_current_stack(irp);
                nt::IofCallDriver(lower, irp)
            }
        }
    }
}

/// IRP_MJ_POWER: the device has no power state of its own; pass down.
pub unsafe extern "system" fn power(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    // SAFETY: standard pass-through of a power IRP (PoStartNextPowerIrp for pre-Vista rules).
    unsafe {
        nt::PoStartNextPowerIrp(irp);
        match lower(device) {
            Some(lower) => {
                nt::skip_current_stack(irp);
                nt::PoCallDriver(lower, irp)
            }
            None => nt::complete(irp, STATUS_NOT_SUPPORTED, 0),
        }
    }
}

/// IRP_MJ_SYSTEM_CONTROL (WMI): pass down.
pub unsafe extern "system" fn system_control(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    // SAFETY: pass-through of an IRP we do not handle.
    unsafe {
        match lower(device) {
            Some(lower) => {
                nt::skip_current_stack(irp);
                nt::IofCallDriver(lower, irp)
            }
            None => {
                let status = (*irp).io_status.status;
                nt::complete(irp, status, 0)
            }
        }
    }
}
