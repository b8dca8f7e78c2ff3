//! NtCreateProfileEx's parameter checks, in Windows 10's order.

use super::{AffinityArg, CreateParams, ObjectConfig, PlatformInfo, SYSTEM_RANGE_START};
use crate::affinity::ProcessorSet;
use crate::NtStatus;

/// Smallest valid `BucketSize` (4-byte buckets).
pub const MIN_BUCKET_SIZE: u32 = 2;
/// Largest valid `BucketSize` (2 GiB buckets).
pub const MAX_BUCKET_SIZE: u32 = 31;

/// Buckets a range of `size` bytes spans with buckets of `1 << bucket_size` bytes.
pub(crate) fn bucket_count(size: u64, bucket_size: u32) -> u64 {
    if size == 0 {
        0
    } else {
        ((size - 1) >> bucket_size) + 1
    }
}

/// Runs the checks in Windows' order and resolves the affinity.
///
/// 1. `BufferSize == 0` -> `STATUS_INVALID_PARAMETER_7`.
/// 2. (`BucketSize == 0` with a segment base exists on 32-bit builds only; here it falls into 3.)
/// 3. `BucketSize` outside 2..=31 -> `STATUS_INVALID_PARAMETER`.
/// 4. More buckets than `BufferSize / 4` counters -> `STATUS_BUFFER_TOO_SMALL` (the corrected
///    rule of 1703 and later; the older rule let a count land past the buffer).
/// 5. `ProfileBase + ProfileSize` overflows -> `STATUS_BUFFER_OVERFLOW`.
/// 6. Source not supported by the platform -> `STATUS_NOT_SUPPORTED`.
/// 7. Buffer not 4-byte aligned -> `STATUS_DATATYPE_MISALIGNMENT`; buffer range wrapping or not
///    writable (the VMM's verdict) -> `STATUS_ACCESS_VIOLATION`.
/// 8. Affinity invalid -> `STATUS_INVALID_PARAMETER`.
/// 9. (Process handle: resolved by the agent before calling.)
/// 10. Global profile of a user range without `SeSystemProfilePrivilege` ->
///     `STATUS_PRIVILEGE_NOT_HELD`.
/// 11. Range reaching kernel space from a restricted caller -> `STATUS_ACCESS_DENIED`.
pub(crate) fn validate_create(
    params: &CreateParams,
    affinity: AffinityArg<'_>,
    platform: &PlatformInfo,
) -> Result<ObjectConfig, NtStatus> {
    if params.buffer_size == 0 {
        return Err(NtStatus::INVALID_PARAMETER_7);
    }
    if !(MIN_BUCKET_SIZE..=MAX_BUCKET_SIZE).contains(&params.bucket_size) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if bucket_count(params.size, params.bucket_size) > u64::from(params.buffer_size / 4) {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    let end = params
        .base
        .checked_add(params.size)
        .ok_or(NtStatus::BUFFER_OVERFLOW)?;
    if !platform.sources.iter().any(|s| s.source == params.source) {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    if params.buffer & 3 != 0 {
        return Err(NtStatus::DATATYPE_MISALIGNMENT);
    }
    if params
        .buffer
        .checked_add(u64::from(params.buffer_size))
        .is_none()
        || !params.buffer_writable
    {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    let n = platform.active_processors;
    let affinity = match affinity {
        AffinityArg::KAffinity { group, mask } => ProcessorSet::from_kaffinity(group, mask, n)?,
        AffinityArg::Groups(groups) => ProcessorSet::from_groups(groups, n)?,
    };
    if params.process.is_none()
        && params.base < SYSTEM_RANGE_START
        && !params.caller.system_profile_privilege
    {
        return Err(NtStatus::PRIVILEGE_NOT_HELD);
    }
    if end > SYSTEM_RANGE_START && params.caller.restricted {
        return Err(NtStatus::ACCESS_DENIED);
    }
    Ok(ObjectConfig {
        process: params.process,
        base: params.base,
        size: params.size,
        bucket_size: params.bucket_size,
        buffer: params.buffer,
        buffer_size: params.buffer_size,
        source: params.source,
        affinity,
    })
}
