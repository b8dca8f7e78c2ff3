/* Compile-only check (build.sh): the structure sizes and offsets that src/nt.rs declares by
 * hand, against mingw-w64's DDK headers, an independent transcription of the x64 WDK. */
#include <ntifs.h>
#include <stddef.h>
#define CHECK(e) _Static_assert(e, #e)
CHECK(sizeof(void *) == 8);
CHECK(sizeof(UNICODE_STRING) == 0x10);
CHECK(sizeof(DRIVER_OBJECT) == 0x150);
CHECK(offsetof(DRIVER_OBJECT, DeviceObject) == 0x08);
CHECK(offsetof(DRIVER_OBJECT, DriverExtension) == 0x30);
CHECK(offsetof(DRIVER_OBJECT, DriverName) == 0x38);
CHECK(offsetof(DRIVER_OBJECT, DriverUnload) == 0x68);
CHECK(offsetof(DRIVER_OBJECT, MajorFunction) == 0x70);
CHECK(offsetof(DRIVER_EXTENSION, AddDevice) == 0x08);
CHECK(offsetof(DEVICE_OBJECT, Flags) == 0x30);
CHECK(offsetof(DEVICE_OBJECT, DeviceExtension) == 0x40);
CHECK(offsetof(DEVICE_OBJECT, DeviceType) == 0x48);
CHECK(offsetof(DEVICE_OBJECT, StackSize) == 0x4C);
CHECK(offsetof(FILE_OBJECT, FsContext) == 0x18);
CHECK(sizeof(IO_STATUS_BLOCK) == 0x10);
CHECK(sizeof(IRP) == 0xD0);
CHECK(offsetof(IRP, MdlAddress) == 0x08);
CHECK(offsetof(IRP, AssociatedIrp.SystemBuffer) == 0x18);
CHECK(offsetof(IRP, IoStatus) == 0x30);
CHECK(offsetof(IRP, RequestorMode) == 0x40);
CHECK(offsetof(IRP, CurrentLocation) == 0x43);
CHECK(offsetof(IRP, UserBuffer) == 0x70);
CHECK(offsetof(IRP, Tail.Overlay.CurrentStackLocation) == 0xB8);
CHECK(offsetof(IRP, Tail.Overlay.OriginalFileObject) == 0xC0);
CHECK(sizeof(IO_STACK_LOCATION) == 0x48);
CHECK(offsetof(IO_STACK_LOCATION, Parameters.DeviceIoControl.OutputBufferLength) == 0x08);
CHECK(offsetof(IO_STACK_LOCATION, Parameters.DeviceIoControl.InputBufferLength) == 0x10);
CHECK(offsetof(IO_STACK_LOCATION, Parameters.DeviceIoControl.IoControlCode) == 0x18);
CHECK(offsetof(IO_STACK_LOCATION, Parameters.StartDevice.AllocatedResourcesTranslated) == 0x10);
CHECK(offsetof(IO_STACK_LOCATION, DeviceObject) == 0x28);
CHECK(offsetof(IO_STACK_LOCATION, FileObject) == 0x30);
CHECK(offsetof(IO_STACK_LOCATION, Context) == 0x40);
CHECK(sizeof(MDL) == 0x30);
CHECK(offsetof(MDL, Process) == 0x10);
CHECK(offsetof(MDL, StartVa) == 0x20);
CHECK(offsetof(MDL, ByteCount) == 0x28);
CHECK(offsetof(MDL, ByteOffset) == 0x2C);
CHECK(sizeof(KMUTEX) == 0x38);
CHECK(sizeof(KAPC_STATE) == 0x30);
CHECK(sizeof(CM_PARTIAL_RESOURCE_DESCRIPTOR) == 20);
CHECK(offsetof(CM_RESOURCE_LIST, List) == 4);
CHECK(offsetof(CM_FULL_RESOURCE_DESCRIPTOR, PartialResourceList.PartialDescriptors) == 16);
CHECK(offsetof(CM_PARTIAL_RESOURCE_DESCRIPTOR, u.Port.Start) == 4);
CHECK(offsetof(CM_PARTIAL_RESOURCE_DESCRIPTOR, u.Port.Length) == 12);
CHECK(IRP_MJ_CLEANUP == 0x12 && IRP_MJ_PNP == 0x1B && IRP_MJ_MAXIMUM_FUNCTION + 1 == 28);
CHECK(NonPagedPoolNx == 512);
CHECK(SE_SYSTEM_PROFILE_PRIVILEGE == 11);
