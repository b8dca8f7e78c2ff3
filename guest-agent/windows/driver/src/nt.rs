//! The kernel's structures and functions this driver uses, declared by hand for x64 Windows
//! (no WDK bindings exist for this toolchain). Every structure the driver indexes into has its
//! size and field offsets asserted at compile time against the x64 WDK layouts (wdm.h); the
//! build also compiles `layout_check.c` against mingw-w64's DDK headers with the same numbers.
//!
//! Structures the I/O manager allocates and the driver only reads through a pointer
//! (`DRIVER_OBJECT`'s tail, `DEVICE_OBJECT`, `FILE_OBJECT`) are declared as the prefix that
//! holds the fields used, with those offsets asserted.

use core::ffi::c_void;
use core::mem::size_of;

/// `NTSTATUS`.
pub type NtStatusRaw = i32;

/// `UNICODE_STRING`.
#[repr(C)]
pub struct UnicodeString {
    pub length: u16,
    pub maximum_length: u16,
    pub buffer: *const u16,
}

/// `PDRIVER_DISPATCH`.
pub type DispatchFn = unsafe extern "system" fn(*mut DeviceObject, *mut Irp) -> NtStatusRaw;
/// `PDRIVER_UNLOAD`.
pub type UnloadFn = unsafe extern "system" fn(*mut DriverObject);
/// `PDRIVER_ADD_DEVICE`.
pub type AddDeviceFn = unsafe extern "system" fn(*mut DriverObject, *mut DeviceObject) -> NtStatusRaw;
/// `PCREATE_PROCESS_NOTIFY_ROUTINE`.
pub type ProcessNotifyFn = unsafe extern "system" fn(*mut c_void, *mut c_void, u8);

/// `IRP_MJ_MAXIMUM_FUNCTION + 1`.
pub const IRP_MJ_COUNT: usize = 28;

/// `DRIVER_OBJECT` (x64: 0x150 bytes).
#[repr(C)]
pub struct DriverObject {
    pub type_: i16,
    pub size: i16,
    pub device_object: *mut DeviceObject,
    pub flags: u32,
    pub driver_start: *mut c_void,
    pub driver_size: u32,
    pub driver_section: *mut c_void,
    pub driver_extension: *mut DriverExtension,
    pub driver_name: UnicodeString,
    pub hardware_database: *mut UnicodeString,
    pub fast_io_dispatch: *mut c_void,
    pub driver_init: *mut c_void,
    pub driver_start_io: *mut c_void,
    pub driver_unload: Option<UnloadFn>,
    pub major_function: [Option<DispatchFn>; IRP_MJ_COUNT],
}

/// `DRIVER_EXTENSION` (prefix).
#[repr(C)]
pub struct DriverExtension {
    pub driver_object: *mut DriverObject,
    pub add_device: Option<AddDeviceFn>,
}

/// `DEVICE_OBJECT` (prefix up to `StackSize`; the whole object is 0x150 bytes).
#[repr(C)]
pub struct DeviceObject {
    pub type_: i16,
    pub size: u16,
    pub reference_count: i32,
    pub driver_object: *mut DriverObject,
    pub next_device: *mut DeviceObject,
    pub attached_device: *mut DeviceObject,
    pub current_irp: *mut Irp,
    pub timer: *mut c_void,
    pub flags: u32,
    pub characteristics: u32,
    pub vpb: *mut c_void,
    pub device_extension: *mut c_void,
    pub device_type: u32,
    pub stack_size: i8,
}

/// `FILE_OBJECT` (prefix up to `FsContext2`).
#[repr(C)]
pub struct FileObject {
    pub type_: i16,
    pub size: i16,
    pub device_object: *mut DeviceObject,
    pub vpb: *mut c_void,
    pub fs_context: *mut c_void,
    pub fs_context2: *mut c_void,
}

/// `IO_STATUS_BLOCK`.
#[repr(C)]
pub struct IoStatusBlock {
    /// `Status` (the union with `Pointer` is 8 bytes wide).
    pub status: NtStatusRaw,
    pub _pad: u32,
    pub information: usize,
}

/// `IRP` (x64: 0xD0 bytes).
#[repr(C)]
pub struct Irp {
    pub type_: i16,
    pub size: u16,
    pub allocation_processor_number: u16,
    pub reserved: u16,
    pub mdl_address: *mut Mdl,
    pub flags: u32,
    /// `AssociatedIrp.SystemBuffer`.
    pub system_buffer: *mut c_void,
    pub thread_list_entry: [usize; 2],
    pub io_status: IoStatusBlock,
    pub requestor_mode: i8,
    pub pending_returned: u8,
    pub stack_count: i8,
    pub current_location: i8,
    pub cancel: u8,
    pub cancel_irql: u8,
    pub apc_environment: i8,
    pub allocation_flags: u8,
    pub user_iosb: *mut IoStatusBlock,
    pub user_event: *mut c_void,
    pub overlay: [usize; 2],
    pub cancel_routine: *mut c_void,
    pub user_buffer: *mut c_void,
    /// `Tail.Overlay.DriverContext[4]`.
    pub driver_context: [usize; 4],
    pub thread: *mut c_void,
    pub auxiliary_buffer: *mut c_void,
    pub list_entry: [usize; 2],
    /// `Tail.Overlay.CurrentStackLocation`.
    pub current_stack_location: *mut IoStackLocation,
    pub original_file_object: *mut FileObject,
    pub irp_extension: *mut c_void,
}

/// `IO_STACK_LOCATION` (x64: 0x48 bytes; the driver steps through the array).
#[repr(C)]
pub struct IoStackLocation {
    pub major_function: u8,
    pub minor_function: u8,
    pub flags: u8,
    pub control: u8,
    /// `Parameters`: a 32-byte union; see the accessors.
    pub parameters: [usize; 4],
    pub device_object: *mut DeviceObject,
    pub file_object: *mut FileObject,
    pub completion_routine: *mut c_void,
    pub context: *mut c_void,
}

impl IoStackLocation {
    /// `Parameters.DeviceIoControl.OutputBufferLength` (ULONG, pointer-aligned).
    pub fn output_buffer_length(&self) -> u32 {
        self.parameters[0] as u32
    }
    /// `Parameters.DeviceIoControl.InputBufferLength`.
    pub fn input_buffer_length(&self) -> u32 {
        self.parameters[1] as u32
    }
    /// `Parameters.DeviceIoControl.IoControlCode`.
    pub fn io_control_code(&self) -> u32 {
        self.parameters[2] as u32
    }
    /// `Parameters.StartDevice.AllocatedResourcesTranslated`.
    pub fn allocated_resources_translated(&self) -> *const u8 {
        self.parameters[1] as *const u8
    }
}

/// `MDL` (x64: 0x30 bytes, the PFN array follows).
#[repr(C)]
pub struct Mdl {
    pub next: *mut Mdl,
    pub size: i16,
    pub mdl_flags: i16,
    pub allocation_processor_number: u16,
    pub reserved: u16,
    pub process: *mut c_void,
    pub mapped_system_va: *mut c_void,
    pub start_va: *mut c_void,
    pub byte_count: u32,
    pub byte_offset: u32,
}

/// `KMUTEX` (x64: 0x38 bytes), opaque.
#[repr(C, align(8))]
pub struct KMutex(pub [u64; 7]);

/// `KAPC_STATE` (x64: 0x30 bytes), opaque.
#[repr(C, align(8))]
pub struct KApcState(pub [u64; 6]);

/// `LUID`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Luid {
    pub low_part: u32,
    pub high_part: i32,
}

macro_rules! offset_of {
    ($ty:ty, $field:ident) => {{
        let u = core::mem::MaybeUninit::<$ty>::uninit();
        let base = u.as_ptr();
        // SAFETY: addr_of! computes the field's address without reading or creating a
        // reference to the uninitialised value (const-evaluated).
        let field = unsafe { core::ptr::addr_of!((*base).$field) };
        (field as *const u8 as usize) - (base as *const u8 as usize)
    }};
}

// x64 WDK layouts (wdm.h). A mismatch here would make the driver read the wrong fields.
const _: () = assert!(size_of::<UnicodeString>() == 0x10);
const _: () = assert!(size_of::<DriverObject>() == 0x150);
const _: () = assert!(size_of::<IoStatusBlock>() == 0x10);
const _: () = assert!(size_of::<Irp>() == 0xD0);
const _: () = assert!(size_of::<IoStackLocation>() == 0x48);
const _: () = assert!(size_of::<Mdl>() == 0x30);
const _: () = assert!(size_of::<KMutex>() == 0x38);
const _: () = assert!(size_of::<KApcState>() == 0x30);
const _: () = assert!(size_of::<Luid>() == 8);

/// Field offsets, checked in `layout_asserts` (offset computation is not const on 1.63; the
/// checks run once at DriverEntry and fail the load if any is wrong).
pub fn layout_ok() -> bool {
    offset_of!(DriverObject, device_object) == 0x08
        && offset_of!(DriverObject, driver_extension) == 0x30
        && offset_of!(DriverObject, driver_name) == 0x38
        && offset_of!(DriverObject, driver_unload) == 0x68
        && offset_of!(DriverObject, major_function) == 0x70
        && offset_of!(DriverExtension, add_device) == 0x08
        && offset_of!(DeviceObject, flags) == 0x30
        && offset_of!(DeviceObject, device_extension) == 0x40
        && offset_of!(DeviceObject, device_type) == 0x48
        && offset_of!(DeviceObject, stack_size) == 0x4C
        && offset_of!(FileObject, fs_context) == 0x18
        && offset_of!(Irp, mdl_address) == 0x08
        && offset_of!(Irp, system_buffer) == 0x18
        && offset_of!(Irp, io_status) == 0x30
        && offset_of!(Irp, requestor_mode) == 0x40
        && offset_of!(Irp, current_location) == 0x43
        && offset_of!(Irp, user_buffer) == 0x70
        && offset_of!(Irp, current_stack_location) == 0xB8
        && offset_of!(Irp, original_file_object) == 0xC0
        && offset_of!(IoStackLocation, parameters) == 0x08
        && offset_of!(IoStackLocation, device_object) == 0x28
        && offset_of!(IoStackLocation, file_object) == 0x30
        && offset_of!(IoStackLocation, context) == 0x40
        && offset_of!(Mdl, process) == 0x10
        && offset_of!(Mdl, start_va) == 0x20
        && offset_of!(Mdl, byte_count) == 0x28
        && offset_of!(Mdl, byte_offset) == 0x2C
}

pub const STATUS_SUCCESS: NtStatusRaw = 0;
pub const IO_NO_INCREMENT: i8 = 0;
pub const IRP_MJ_CREATE: usize = 0x00;
pub const IRP_MJ_CLOSE: usize = 0x02;
pub const IRP_MJ_DEVICE_CONTROL: usize = 0x0E;
pub const IRP_MJ_CLEANUP: usize = 0x12;
pub const IRP_MJ_POWER: usize = 0x16;
pub const IRP_MJ_SYSTEM_CONTROL: usize = 0x17;
pub const IRP_MJ_PNP: usize = 0x1B;
pub const IRP_MN_START_DEVICE: u8 = 0x00;
pub const IRP_MN_QUERY_REMOVE_DEVICE: u8 = 0x01;
pub const IRP_MN_REMOVE_DEVICE: u8 = 0x02;
pub const IRP_MN_CANCEL_REMOVE_DEVICE: u8 = 0x03;
pub const IRP_MN_STOP_DEVICE: u8 = 0x04;
pub const IRP_MN_QUERY_STOP_DEVICE: u8 = 0x05;
pub const IRP_MN_CANCEL_STOP_DEVICE: u8 = 0x06;
pub const IRP_MN_SURPRISE_REMOVAL: u8 = 0x17;
pub const FILE_DEVICE_UNKNOWN: u32 = 0x22;
pub const FILE_DEVICE_SECURE_OPEN: u32 = 0x100;
pub const DO_POWER_PAGABLE: u32 = 0x2000;
pub const DO_DEVICE_INITIALIZING: u32 = 0x80;
/// `NonPagedPoolNx` (Windows 8 and later).
pub const NON_PAGED_POOL_NX: i32 = 512;
pub const USER_MODE: i8 = 1;
pub const KERNEL_MODE: i8 = 0;
pub const IO_WRITE_ACCESS: i32 = 1;
/// `Executive` (KWAIT_REASON).
pub const EXECUTIVE: i32 = 0;
/// `SE_SYSTEM_PROFILE_PRIVILEGE`.
pub const SE_SYSTEM_PROFILE_PRIVILEGE: Luid = Luid {
    low_part: 11,
    high_part: 0,
};

#[allow(improper_ctypes)]
extern "system" {
    pub fn IoCreateDevice(
        driver: *mut DriverObject,
        extension_size: u32,
        name: *const UnicodeString,
        device_type: u32,
        characteristics: u32,
        exclusive: u8,
        device: *mut *mut DeviceObject,
    ) -> NtStatusRaw;
    pub fn IoDeleteDevice(device: *mut DeviceObject);
    pub fn IoCreateSymbolicLink(link: *const UnicodeString, target: *const UnicodeString) -> NtStatusRaw;
    pub fn IoDeleteSymbolicLink(link: *const UnicodeString) -> NtStatusRaw;
    pub fn IofCompleteRequest(irp: *mut Irp, boost: i8);
    pub fn IofCallDriver(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw;
    pub fn IoForwardIrpSynchronously(device: *mut DeviceObject, irp: *mut Irp) -> u8;
    pub fn IoAttachDeviceToDeviceStack(source: *mut DeviceObject, target: *mut DeviceObject) -> *mut DeviceObject;
    pub fn IoDetachDevice(target: *mut DeviceObject);
    pub fn PoStartNextPowerIrp(irp: *mut Irp);
    pub fn PoCallDriver(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw;
    pub fn IoAllocateMdl(va: *mut c_void, length: u32, secondary: u8, charge_quota: u8, irp: *mut Irp) -> *mut Mdl;
    pub fn IoFreeMdl(mdl: *mut Mdl);
    pub fn MmUnlockPages(mdl: *mut Mdl);
    pub fn MmGetPhysicalAddress(va: *mut c_void) -> i64;
    pub fn MmAllocateContiguousMemory(bytes: usize, highest: i64) -> *mut c_void;
    pub fn MmFreeContiguousMemory(base: *mut c_void);
    pub fn ExAllocatePoolWithTag(pool_type: i32, bytes: usize, tag: u32) -> *mut c_void;
    pub fn ExFreePoolWithTag(p: *mut c_void, tag: u32);
    pub fn KeAcquireSpinLockRaiseToDpc(lock: *mut usize) -> u8;
    pub fn KeReleaseSpinLock(lock: *mut usize, old_irql: u8);
    pub fn KeInitializeMutex(mutex: *mut KMutex, level: u32);
    pub fn KeWaitForSingleObject(object: *mut c_void, reason: i32, mode: i8, alertable: u8, timeout: *const i64) -> NtStatusRaw;
    pub fn KeReleaseMutex(mutex: *mut KMutex, wait: u8) -> i32;
    pub fn SeSinglePrivilegeCheck(privilege: Luid, mode: i8) -> u8;
    pub fn PsLookupProcessByProcessId(pid: *mut c_void, process: *mut *mut c_void) -> NtStatusRaw;
    pub fn ObfDereferenceObject(object: *mut c_void) -> isize;
    pub fn KeStackAttachProcess(process: *mut c_void, state: *mut KApcState);
    pub fn KeUnstackDetachProcess(state: *mut KApcState);
    pub fn PsGetCurrentProcessId() -> *mut c_void;
    pub fn PsSetCreateProcessNotifyRoutine(routine: ProcessNotifyFn, remove: u8) -> NtStatusRaw;
    pub fn KeBugCheckEx(code: u32, p1: usize, p2: usize, p3: usize, p4: usize) -> !;
    /// The import-address-table slot of the data export `MmUserProbeAddress`.
    pub static __imp_MmUserProbeAddress: *const usize;

    /// seh.S: `MmProbeAndLockPages(mdl, mode, operation)` inside an exception handler: returns
    /// STATUS_SUCCESS, or the code of the exception it raised.
    pub fn hvprof_probe_and_lock(mdl: *mut Mdl, mode: i8, operation: i32) -> NtStatusRaw;
}

/// `IoGetCurrentIrpStackLocation`.
///
/// # Safety
///
/// `irp` must be a valid IRP owned by the caller.
pub unsafe fn current_stack(irp: *mut Irp) -> *mut IoStackLocation {
    // SAFETY: the caller's contract.
    unsafe { (*irp).current_stack_location }
}

/// `IoSkipCurrentIrpStackLocation`.
///
/// # Safety
///
/// `irp` must be a valid IRP about to be passed to the next-lower driver.
pub unsafe fn skip_current_stack(irp: *mut Irp) {
    // SAFETY: the caller's contract; the macro's two updates.
    unsafe {
        (*irp).current_location += 1;
        (*irp).current_stack_location = (*irp).current_stack_location.add(1);
    }
}

/// Completes `irp` with `status` and `information` bytes.
///
/// # Safety
///
/// `irp` must be a valid IRP owned by the caller, not yet completed.
pub unsafe fn complete(irp: *mut Irp, status: NtStatusRaw, information: usize) -> NtStatusRaw {
    // SAFETY: the caller's contract.
    unsafe {
        (*irp).io_status.status = status;
        (*irp).io_status.information = information;
        IofCompleteRequest(irp, IO_NO_INCREMENT);
    }
    status
}

/// A UTF-16 copy of an ASCII string, at compile time.
pub const fn utf16<const N: usize>(s: &str) -> [u16; N] {
    let b = s.as_bytes();
    let mut out = [0u16; N];
    let mut i = 0;
    while i < N && i < b.len() {
        out[i] = b[i] as u16;
        i += 1;
    }
    out
}

/// A `UNICODE_STRING` over a static UTF-16 array.
pub fn unicode(s: &'static [u16]) -> UnicodeString {
    let bytes = (s.len() * 2) as u16;
    UnicodeString {
        length: bytes,
        maximum_length: bytes,
        buffer: s.as_ptr(),
    }
}
