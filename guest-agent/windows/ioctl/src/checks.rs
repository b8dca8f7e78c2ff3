//! What the driver checks before it forwards a caller's request to the VMM.
//!
//! The VMM runs Windows' own checks (docs/abi.md 6.2), but it sees only the driver's request:
//! it cannot tell a user buffer from a kernel one, nor whose process id a caller passed. So the
//! driver adds three rules of its own, placed where Windows would fail the same call:
//!
//! 1. The counters buffer must lie in user space (below `MmUserProbeAddress`): else
//!    `STATUS_ACCESS_VIOLATION`, at Windows' step 6 (after the steps 1-5 that come first in
//!    Windows, which [`precheck_create`] repeats so that the first failing status is Windows').
//!    Without this rule a caller could have the VMM count into kernel memory.
//! 2. The caller's rights: holding `SeSystemProfilePrivilege` gives
//!    `CALLER_SYSTEM_PROFILE_PRIVILEGE`; a caller without it is `CALLER_RESTRICTED` (may not
//!    profile kernel space, a KASLR leak), see [`caller_flags`].
//! 3. A per-process profile of another process needs the privilege ([`check_process_access`]),
//!    standing for the process-handle access check of NtCreateProfile.

use profile_core::abi::{
    CreateExRequest, CreateFields, CreateRequest, CALLER_RESTRICTED,
    CALLER_SYSTEM_PROFILE_PRIVILEGE, CREATE_PER_PROCESS,
};
use profile_core::affinity::{GroupAffinity, MAX_GROUPS};
use profile_core::NtStatus;

use crate::messages::{CreateExIn, CreateIn, Wire};

/// `PROFILE_CONTROL`: the access every handle the driver creates carries.
pub const PROFILE_CONTROL: u32 = 1;

/// `MmUserProbeAddress` on x64 Windows (the driver reads the kernel's variable; this is its
/// value on every x64 release, for tests and documentation).
pub const X64_USER_PROBE_ADDRESS: u64 = 0x7FFF_FFFF_0000;

/// The `CALLER_*` flags for a caller that holds `SeSystemProfilePrivilege` or not.
pub const fn caller_flags(privileged: bool) -> u32 {
    if privileged {
        CALLER_SYSTEM_PROFILE_PRIVILEGE
    } else {
        CALLER_RESTRICTED
    }
}

/// An input buffer of exactly `T::SIZE` bytes, decoded.
pub fn parse_exact<T: Wire>(input: &[u8]) -> Result<T, NtStatus> {
    if input.len() != T::SIZE {
        return Err(NtStatus::INFO_LENGTH_MISMATCH);
    }
    T::decode(input).ok_or(NtStatus::INFO_LENGTH_MISMATCH)
}

/// An output buffer of at least `needed` bytes, else `STATUS_BUFFER_TOO_SMALL`.
pub fn check_output(len: usize, needed: usize) -> Result<(), NtStatus> {
    if len < needed {
        Err(NtStatus::BUFFER_TOO_SMALL)
    } else {
        Ok(())
    }
}

/// CREATE's input: 64 bytes, reserved fields zero.
pub fn parse_create(input: &[u8]) -> Result<CreateIn, NtStatus> {
    let c: CreateIn = parse_exact(input)?;
    if c.flags != 0 || c.reserved0 != 0 || c.reserved1 != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(c)
}

/// CREATE_EX's input: 56 bytes, reserved fields zero, then exactly `group_count` (at most 32)
/// `GROUP_AFFINITY` elements, decoded into `groups`. Returns the request and the used part of
/// `groups`.
pub fn parse_create_ex<'g>(
    input: &[u8],
    groups: &'g mut [GroupAffinity; MAX_GROUPS as usize],
) -> Result<(CreateExIn, &'g [GroupAffinity]), NtStatus> {
    let head = input
        .get(..CreateExIn::SIZE)
        .ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    let c = CreateExIn::decode(head).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    if c.flags != 0 || c.reserved0 != 0 || c.reserved1 != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    // NtCreateProfileEx refuses more than 32 groups before any other check.
    if c.group_count > MAX_GROUPS {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let count = usize::from(c.group_count);
    let tail = &input[CreateExIn::SIZE..];
    if tail.len() != count * GroupAffinity::SIZE {
        return Err(NtStatus::INFO_LENGTH_MISMATCH);
    }
    for (slot, bytes) in groups
        .iter_mut()
        .zip(tail.chunks_exact(GroupAffinity::SIZE))
    {
        *slot = GroupAffinity::decode(bytes).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    }
    Ok((c, &groups[..count]))
}

/// The parts of a create request that [`precheck_create`] looks at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Range {
    /// `ProfileBase`.
    pub base: u64,
    /// `ProfileSize`.
    pub size: u64,
    /// `Buffer`.
    pub buffer: u64,
    /// `BufferSize`.
    pub buffer_size: u32,
    /// `BucketSize`.
    pub bucket_size: u32,
    /// `ProfileSource`.
    pub source: u32,
}

impl From<&CreateIn> for Range {
    fn from(c: &CreateIn) -> Range {
        Range {
            base: c.base,
            size: c.size,
            buffer: c.buffer,
            buffer_size: c.buffer_size,
            bucket_size: c.bucket_size,
            source: c.source,
        }
    }
}

impl From<&CreateExIn> for Range {
    fn from(c: &CreateExIn) -> Range {
        Range {
            base: c.base,
            size: c.size,
            buffer: c.buffer,
            buffer_size: c.buffer_size,
            bucket_size: c.bucket_size,
            source: c.source,
        }
    }
}

/// Windows' create checks 1-6 (docs/abi.md 6.2) with the driver's user-buffer rule in step 6:
/// the first failing status, in Windows' order. `supported_sources` is the VMM's QUERY_INFO
/// mask (bit `i`: source `i`); `user_limit` is `MmUserProbeAddress`. The VMM repeats checks
/// 1-6 and runs the rest.
pub fn precheck_create(r: &Range, supported_sources: u64, user_limit: u64) -> Result<(), NtStatus> {
    if r.buffer_size == 0 {
        return Err(NtStatus::INVALID_PARAMETER_7);
    }
    if !(2..=31).contains(&r.bucket_size) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let buckets = if r.size == 0 {
        0
    } else {
        ((r.size - 1) >> r.bucket_size) + 1
    };
    if buckets > u64::from(r.buffer_size / 4) {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    if r.base.checked_add(r.size).is_none() {
        return Err(NtStatus::BUFFER_OVERFLOW);
    }
    let supported = r.source < 64 && supported_sources & (1u64 << r.source) != 0;
    if !supported {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    if r.buffer & 3 != 0 {
        return Err(NtStatus::DATATYPE_MISALIGNMENT);
    }
    match r.buffer.checked_add(u64::from(r.buffer_size)) {
        Some(end) if end <= user_limit => Ok(()),
        _ => Err(NtStatus::ACCESS_VIOLATION),
    }
}

/// A per-process profile (`target_pid != 0`) of a process other than the caller's needs the
/// privilege: `STATUS_ACCESS_DENIED` otherwise (what opening the process would answer).
pub fn check_process_access(
    target_pid: u64,
    caller_pid: u64,
    privileged: bool,
) -> Result<(), NtStatus> {
    if target_pid == 0 || target_pid == caller_pid || privileged {
        Ok(())
    } else {
        Err(NtStatus::ACCESS_DENIED)
    }
}

/// The fields CREATE and CREATE_EX share, for a request of `r` in the address space `cr3`
/// (`None` for a global profile).
fn fields(r: Range, cr3: Option<u64>, privileged: bool) -> CreateFields {
    CreateFields {
        process_cr3: cr3.unwrap_or(0),
        base: r.base,
        size: r.size,
        buffer: r.buffer,
        buffer_size: r.buffer_size,
        bucket_size: r.bucket_size,
        source: r.source,
        flags: caller_flags(privileged) | if cr3.is_some() { CREATE_PER_PROCESS } else { 0 },
        desired_access: PROFILE_CONTROL,
    }
}

/// The VMM's CREATE request for a checked [`CreateIn`]: `cr3` is the profiled process's
/// address space (`None` for a global profile).
pub fn create_request(c: &CreateIn, cr3: Option<u64>, privileged: bool) -> CreateRequest {
    fields(c.into(), cr3, privileged).create(c.group, c.affinity)
}

/// The VMM's CREATE_EX request body for a checked [`CreateExIn`].
pub fn create_ex_request(c: &CreateExIn, cr3: Option<u64>, privileged: bool) -> CreateExRequest {
    fields(c.into(), cr3, privileged).create_ex(c.group_count)
}

#[cfg(test)]
mod tests;
