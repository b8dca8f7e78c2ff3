//! IRP_MJ_CREATE, CLOSE, CLEANUP and DEVICE_CONTROL on `\Device\HvProf`, and process exit.

use core::ffi::c_void;
use core::mem::size_of;
use core::ptr;

use guest_agent::{GroupAffinity, ProfileSource};
use hvprof_ioctl::checks::{self, Range};
use hvprof_ioctl::codes::*;
use hvprof_ioctl::messages::{
    DriverInfo, HandleRequest, QueryIntervalRequest, SetIntervalIn, Wire, INTERFACE_VERSION,
};
use hvprof_ioctl::abi::{CALLER_SYSTEM_PROFILE_PRIVILEGE, HEADER_SIZE};
use hvprof_ioctl::{status, NtStatus};

use crate::mdl;
use crate::nt::{self, DeviceObject, Irp, NtStatusRaw};
use crate::state::{self, state, DeviceExtension, FileContext, KIND_CONTROL, TAG};
use crate::vmm;

/// The largest IOCTL input: CREATE_EX with 32 groups.
const MAX_INPUT: usize = 56 + 32 * 16;

fn is_control(device: *mut DeviceObject) -> bool {
    // SAFETY: every device of this driver has a DeviceExtension.
    unsafe { (*(*device).device_extension.cast::<DeviceExtension>()).kind == KIND_CONTROL }
}

fn file_context(irp: *mut Irp) -> *mut FileContext {
    // SAFETY: a request on the control device carries the file object `create` set up.
    unsafe {
        let file = (*nt::current_stack(irp)).file_object;
        if file.is_null() {
            ptr::null_mut()
        } else {
            (*file).fs_context.cast()
        }
    }
}

/// IRP_MJ_CREATE: a new caller gets an empty handle table.
pub unsafe extern "system" fn create(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    if !is_control(device) {
        // SAFETY: completing the IRP we were given.
        return unsafe { nt::complete(irp, status::INVALID_DEVICE_REQUEST.0 as i32, 0) };
    }
    // SAFETY: nonpaged allocation for the caller's context, zeroed below.
    let ctx = unsafe { nt::ExAllocatePoolWithTag(nt::NON_PAGED_POOL_NX, size_of::<FileContext>(), TAG) }
        .cast::<FileContext>();
    if ctx.is_null() {
        // SAFETY: as above.
        return unsafe { nt::complete(irp, vmm::STATUS_INSUFFICIENT_RESOURCES, 0) };
    }
    state::lock();
    // SAFETY: `ctx` is ours; the list is changed under the mutex; the file object is valid
    // for IRP_MJ_CREATE.
    unsafe {
        ptr::write(
            ctx,
            FileContext {
                next: (*state()).files,
                prev: ptr::null_mut(),
                table: hvprof_ioctl::table::HandleTable::new(),
            },
        );
        if !(*ctx).next.is_null() {
            (*(*ctx).next).prev = ctx;
        }
        (*state()).files = ctx;
        (*(*nt::current_stack(irp)).file_object).fs_context = ctx.cast();
    }
    state::unlock();
    // SAFETY: completing the IRP we were given.
    unsafe { nt::complete(irp, nt::STATUS_SUCCESS, 0) }
}

/// Closes every object of `ctx` that `pick` yields in the VMM and unlocks its buffer.
fn release<F: FnMut(&mut FileContext) -> Option<hvprof_ioctl::table::Entry<*mut nt::Mdl>>>(
    ctx: *mut FileContext,
    mut pick: F,
) {
    // SAFETY: the caller holds the mutex and `ctx` is on the list.
    while let Some(e) = pick(unsafe { &mut *ctx }) {
        // CLOSE stops the object; after it returns the VMM writes nothing more to the pages.
        // If the VMM cannot be reached there is no one left to write them: unlock either way,
        // rather than leave the process with locked pages (bug check 0x76 at its exit).
        let _ = vmm::call(|c| c.close(e.handle));
        if let Some(m) = e.locked {
            // SAFETY: `m` is the entry's locked MDL; the object is closed.
            unsafe { mdl::unlock(m) };
        }
    }
}

/// IRP_MJ_CLEANUP: the caller's last handle is closing (also at process exit): close exactly
/// the caller's objects and unlock their buffers.
pub unsafe extern "system" fn cleanup(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    if is_control(device) {
        let ctx = file_context(irp);
        if !ctx.is_null() {
            state::lock();
            release(ctx, |c| c.table.take_any());
            state::unlock();
        }
    }
    // SAFETY: completing the IRP we were given.
    unsafe { nt::complete(irp, nt::STATUS_SUCCESS, 0) }
}

/// IRP_MJ_CLOSE: frees the caller's context (its objects are gone since cleanup).
pub unsafe extern "system" fn close(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    if is_control(device) {
        let ctx = file_context(irp);
        if !ctx.is_null() {
            state::lock();
            release(ctx, |c| c.table.take_any());
            // SAFETY: unlinking under the mutex; `ctx` came from `create`'s allocation.
            unsafe {
                if (*ctx).prev.is_null() {
                    (*state()).files = (*ctx).next;
                } else {
                    (*(*ctx).prev).next = (*ctx).next;
                }
                if !(*ctx).next.is_null() {
                    (*(*ctx).next).prev = (*ctx).prev;
                }
                (*(*nt::current_stack(irp)).file_object).fs_context = ptr::null_mut();
            }
            state::unlock();
            // SAFETY: no list or file object refers to `ctx` any more.
            unsafe { nt::ExFreePoolWithTag(ctx.cast(), TAG) };
        }
    }
    // SAFETY: completing the IRP we were given.
    unsafe { nt::complete(irp, nt::STATUS_SUCCESS, 0) }
}

/// Process exit: release the objects that process created, whichever file object holds them (a
/// handle duplicated into another process keeps the file object alive after its creator exits).
pub unsafe extern "system" fn process_notify(_parent: *mut c_void, pid: *mut c_void, created: u8) {
    if created != 0 {
        return;
    }
    let owner = pid as u64;
    state::lock();
    // SAFETY: the list is walked under the mutex.
    let mut ctx = unsafe { (*state()).files };
    while !ctx.is_null() {
        release(ctx, |c| c.table.take_owned_by(owner));
        // SAFETY: as above.
        ctx = unsafe { (*ctx).next };
    }
    state::unlock();
}

fn caller_pid() -> u64 {
    // SAFETY: no arguments; returns the current process id.
    unsafe { nt::PsGetCurrentProcessId() as u64 }
}

fn privileged() -> bool {
    // SAFETY: checks the current thread's token for SeSystemProfilePrivilege.
    unsafe { nt::SeSinglePrivilegeCheck(nt::SE_SYSTEM_PROFILE_PRIVILEGE, nt::USER_MODE) != 0 }
}

fn user_limit() -> u64 {
    // SAFETY: the import slot of ntoskrnl's exported variable, set by the loader.
    unsafe { *nt::__imp_MmUserProbeAddress as u64 }
}

fn supported_sources() -> Result<u64, NtStatus> {
    // SAFETY: under the mutex (every IOCTL holds it).
    let cached = unsafe { (*state()).supported_sources };
    if cached != 0 {
        return Ok(cached);
    }
    let info = vmm::call(|c| c.query_info())?;
    // SAFETY: as above.
    unsafe { (*state()).supported_sources = info.supported_sources };
    Ok(info.supported_sources)
}

fn put<W: Wire>(out: &mut [u8], w: &W) -> Result<usize, NtStatus> {
    checks::check_output(out.len(), W::SIZE)?;
    w.encode(out).ok_or(NtStatus::BUFFER_TOO_SMALL)
}

fn cr3_for(pid: u64, privileged: bool) -> Result<Option<u64>, NtStatus> {
    checks::check_process_access(pid, caller_pid(), privileged)?;
    if pid == 0 {
        Ok(None)
    } else {
        vmm::process_cr3(pid).map(Some)
    }
}

fn table<'a>(ctx: *mut FileContext) -> &'a mut hvprof_ioctl::table::HandleTable<*mut nt::Mdl> {
    // SAFETY: the caller holds the mutex; `ctx` is the request's live file context.
    unsafe { &mut (*ctx).table }
}

fn handle_in(input: &[u8]) -> Result<u32, NtStatus> {
    let h: HandleRequest = checks::parse_exact(input)?;
    if h.reserved != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(h.handle)
}

/// One IOCTL, under the mutex. Returns the bytes of output.
fn ioctl(ctx: *mut FileContext, code: u32, input: &[u8], out: &mut [u8]) -> Result<usize, NtStatus> {
    match code {
        IOCTL_HVPROF_QUERY_INFO => {
            checks::check_output(out.len(), hvprof_ioctl::messages::QUERY_INFO_OUT_SIZE)?;
            let info = vmm::call(|c| c.query_info())?;
            let (port, source) = state::port();
            let d = DriverInfo { port, port_source: source, interface_version: INTERFACE_VERSION };
            let n = put(out, &d)?;
            Ok(n + put(&mut out[n..], &info)?)
        }
        IOCTL_HVPROF_CREATE => {
            let c = checks::parse_create(input)?;
            table(ctx).check_room()?;
            checks::precheck_create(&Range::from(&c), supported_sources()?, user_limit())?;
            let privileged = privileged();
            let cr3 = cr3_for(c.process_id, privileged)?;
            checks::check_output(out.len(), 16)?;
            let request = checks::create_request(&c, cr3, privileged);
            let reply = vmm::call(|cl| cl.create(&request))?;
            created(ctx, reply.handle, c.buffer, c.buffer_size)?;
            put(out, &reply)
        }
        IOCTL_HVPROF_CREATE_EX => {
            let mut groups = [GroupAffinity::default(); 32];
            let (c, groups) = checks::parse_create_ex(input, &mut groups)?;
            table(ctx).check_room()?;
            checks::precheck_create(&Range::from(&c), supported_sources()?, user_limit())?;
            let privileged = privileged();
            let cr3 = cr3_for(c.process_id, privileged)?;
            checks::check_output(out.len(), 16)?;
            let request = checks::create_ex_request(&c, cr3, privileged);
            let reply = vmm::call(|cl| cl.create_ex(&request, groups))?;
            created(ctx, reply.handle, c.buffer, c.buffer_size)?;
            put(out, &reply)
        }
        IOCTL_HVPROF_START => {
            let handle = handle_in(input)?;
            checks::check_output(out.len(), 8)?;
            let owner = caller_pid();
            let entry = table(ctx).check_start(handle, owner)?;
            let locked = mdl::lock_user_buffer(entry.buffer, entry.buffer_size)?;
            let frames = locked.frames();
            let len = HEADER_SIZE + 24 + 8 + frames.len() * 8;
            let offset = locked.offset_in_first_page();
            // SAFETY: the frames are the object's buffer, locked until STOP/CLOSE/cleanup
            // unlock them after the VMM stopped writing.
            let started = vmm::call_sized(len, |cl| unsafe { cl.start_page_list(handle, offset, frames) });
            match started {
                Ok(reply) => {
                    table(ctx).set_started(handle, owner, locked.mdl)?;
                    put(out, &reply)
                }
                Err(e) => {
                    // SAFETY: START failed, so the VMM never wrote these pages.
                    unsafe { mdl::unlock(locked.mdl) };
                    Err(e)
                }
            }
        }
        IOCTL_HVPROF_STOP => {
            let handle = handle_in(input)?;
            let owner = caller_pid();
            table(ctx).check_stop(handle, owner)?;
            vmm::call(|c| c.stop(handle))?;
            let m = table(ctx).set_stopped(handle, owner)?;
            // SAFETY: STOP returned: the VMM writes nothing more to the buffer.
            unsafe { mdl::unlock(m) };
            Ok(0)
        }
        IOCTL_HVPROF_CLOSE => {
            let handle = handle_in(input)?;
            table(ctx).check_close(handle, caller_pid())?;
            match vmm::call(|c| c.close(handle)) {
                // INVALID_HANDLE: the VMM no longer has the object either; forget it too.
                Ok(()) | Err(NtStatus::INVALID_HANDLE) => {}
                Err(e) => return Err(e),
            }
            if let Some(m) = table(ctx).remove(handle).and_then(|e| e.locked) {
                // SAFETY: CLOSE returned: the object is gone, nothing writes the buffer.
                unsafe { mdl::unlock(m) };
            }
            Ok(0)
        }
        IOCTL_HVPROF_SET_INTERVAL => {
            let s: SetIntervalIn = checks::parse_exact(input)?;
            checks::check_output(out.len(), 8)?;
            let flags = if privileged() { CALLER_SYSTEM_PROFILE_PRIVILEGE } else { 0 };
            let interval = vmm::call(|c| c.set_interval_as(ProfileSource(s.source), s.interval, flags))?;
            put(out, &hvprof_ioctl::messages::IntervalReply { interval, reserved: 0 })
        }
        IOCTL_HVPROF_QUERY_INTERVAL => {
            let q: QueryIntervalRequest = checks::parse_exact(input)?;
            if q.reserved != 0 {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            checks::check_output(out.len(), 8)?;
            let interval = vmm::call(|c| c.query_interval(ProfileSource(q.source)))?;
            put(out, &hvprof_ioctl::messages::IntervalReply { interval, reserved: 0 })
        }
        IOCTL_HVPROF_READ_STATS => {
            checks::check_output(out.len(), 48)?;
            let stats = vmm::call(|c| c.read_stats())?;
            put(out, &stats)
        }
        _ => Err(status::INVALID_DEVICE_REQUEST),
    }
}

/// Records a created object; if the caller's table cannot take it, closes it again.
fn created(ctx: *mut FileContext, handle: u32, buffer: u64, size: u32) -> Result<(), NtStatus> {
    let r = table(ctx).insert(handle, caller_pid(), buffer, size);
    if r.is_err() {
        let _ = vmm::call(|c| c.close(handle));
    }
    r
}

/// IRP_MJ_DEVICE_CONTROL (METHOD_BUFFERED).
pub unsafe extern "system" fn device_control(device: *mut DeviceObject, irp: *mut Irp) -> NtStatusRaw {
    let ctx = file_context(irp);
    if !is_control(device) || ctx.is_null() {
        // SAFETY: completing the IRP we were given.
        return unsafe { nt::complete(irp, status::INVALID_DEVICE_REQUEST.0 as i32, 0) };
    }
    // SAFETY: a METHOD_BUFFERED request: SystemBuffer holds max(in, out) bytes (or is null when
    // both are 0); the input is copied out before the output is written over it.
    unsafe {
        let stack = nt::current_stack(irp);
        let code = (*stack).io_control_code();
        let in_len = (*stack).input_buffer_length() as usize;
        let out_len = (*stack).output_buffer_length() as usize;
        let sysbuf = (*irp).system_buffer.cast::<u8>();
        if in_len > MAX_INPUT || ((in_len != 0 || out_len != 0) && sysbuf.is_null()) {
            return nt::complete(irp, NtStatus::INFO_LENGTH_MISMATCH.0 as i32, 0);
        }
        let mut input = [0u8; MAX_INPUT];
        if in_len != 0 {
            ptr::copy_nonoverlapping(sysbuf, input.as_mut_ptr(), in_len);
        }
        let out: &mut [u8] = if out_len == 0 {
            &mut []
        } else {
            core::slice::from_raw_parts_mut(sysbuf, out_len)
        };
        state::lock();
        let result = ioctl(ctx, code, &input[..in_len], out);
        state::unlock();
        match result {
            Ok(n) => nt::complete(irp, nt::STATUS_SUCCESS, n),
            Err(s) => nt::complete(irp, s.0 as i32, 0),
        }
    }
}
