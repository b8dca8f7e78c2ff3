//! The profile-object manager: NtCreateProfile(Ex), NtStartProfile, NtStopProfile, closing a
//! handle, NtSetIntervalProfile and NtQueryIntervalProfile with Windows 10's checks and statuses.
//!
//! # The start/stop protocol and the guarantee the VMM builds on
//!
//! * [`ObjectManager::start`] checks the handle, its access, "already started" and the limit,
//!   then calls the VMM's `pin` closure with a [`PinRequest`] naming the **whole** buffer
//!   (as Windows locks the whole buffer). If `pin` fails the object stays stopped and its error
//!   (normally `STATUS_INSUFFICIENT_RESOURCES`) is returned. If it succeeds the manager keeps
//!   the returned pin token `P` and the object becomes visible to [`ObjectManager::record`].
//! * [`ObjectManager::stop`] hands the token back; [`ObjectManager::close`] hands it back if the
//!   object was started; [`ObjectManager::close_all`] hands back every token of an owner.
//! * `record` takes `&self`; `start`, `stop`, `close` and `close_all` take `&mut self`. The borrow
//!   rules (in the VMM: a read lock for `record`, the write lock for the rest) mean no `record`
//!   runs while they do. **Once `stop` or `close` has returned, no sample is ever counted for that
//!   object again**: it has left the index, and the token handed back is no longer referenced by
//!   the manager, so the VMM may unpin the pages at once.

mod checks;
mod from_wire;
mod index;
mod intervals;
mod manager;
#[cfg(test)]
mod tests;

pub use from_wire::caller_rights;
pub use manager::{ObjectManager, ProfileObject};

use alloc::vec::Vec;

use crate::affinity::{GroupAffinity, KAffinity, ProcessorSet};
use crate::handle::{AccessMask, ObjectId, Owner};
use crate::source::{ProfileSource, SourceInfo};

/// Windows' started-object limit per processor: `STATUS_PROFILING_AT_LIMIT` once
/// 8192 x processors objects are started.
pub const STARTED_LIMIT_PER_PROCESSOR: u32 = 8192;

/// The lowest kernel-space address on x64 Windows (`MmSystemRangeStart`). Ranges that start
/// below it are "user ranges"; ranges that end above it reach kernel space.
pub const SYSTEM_RANGE_START: u64 = 0xFFFF_8000_0000_0000;

/// What the platform (the VMM and its host) offers. Input to [`ObjectManager::new`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PlatformInfo {
    /// Number of active vCPUs: 1..=2048.
    pub active_processors: u32,
    /// Supported sources with their clamps. [`ProfileSource::TIME`] must be present; PMU sources
    /// only where the host has a PMU. A source listed twice: the first entry counts.
    pub sources: Vec<SourceInfo>,
    /// Started objects allowed per processor; [`STARTED_LIMIT_PER_PROCESSOR`] as in Windows.
    pub started_limit_per_processor: u32,
}

impl PlatformInfo {
    /// A platform with only the timer source, [`SourceInfo::profile_time`].
    pub fn timer_only(active_processors: u32) -> PlatformInfo {
        PlatformInfo {
            active_processors,
            sources: alloc::vec![SourceInfo::profile_time()],
            started_limit_per_processor: STARTED_LIMIT_PER_PROCESSOR,
        }
    }
}

/// What the caller can prove about itself, for NtCreateProfileEx's steps 9-11.
///
/// Every hvprof caller is a CPL0 guest agent, which Windows would treat as a kernel-mode caller
/// holding every privilege ([`CallerRights::KERNEL`]). An agent that forwards a request for a
/// user-mode client sets these from that client's token (`SeSinglePrivilegeCheck` for
/// `SeSystemProfilePrivilege`, a restricted or low-integrity token for `restricted`); it resolves
/// the client's process handle itself and fails with that status before calling the VMM.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CallerRights {
    /// The caller holds `SeSystemProfilePrivilege`.
    pub system_profile_privilege: bool,
    /// The caller is restricted (may not profile kernel space).
    pub restricted: bool,
}

impl CallerRights {
    /// A kernel-mode caller: every privilege, not restricted.
    pub const KERNEL: CallerRights = CallerRights {
        system_profile_privilege: true,
        restricted: false,
    };
}

/// The arguments of NtCreateProfile(Ex) other than the affinity, plus what only the VMM knows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CreateParams {
    /// The owner the handle is created for.
    pub owner: Owner,
    /// The profiled process as a process key (`CR3 & CR3_KEY_MASK`,
    /// see [`crate::attribution::process_key`]), or `None` for a global profile.
    pub process: Option<u64>,
    /// `ProfileBase`: start of the profiled range (guest virtual).
    pub base: u64,
    /// `ProfileSize`: length of the profiled range in bytes.
    pub size: u64,
    /// `BucketSize`: log2 of the bucket size in bytes, 2..=31.
    pub bucket_size: u32,
    /// `Buffer`: guest virtual address of the counter buffer.
    pub buffer: u64,
    /// `BufferSize`: length of the counter buffer in bytes.
    pub buffer_size: u32,
    /// `ProfileSource`.
    pub source: ProfileSource,
    /// The VMM's verdict on the buffer: mapped and writable for the whole `buffer_size`
    /// (Windows' `ProbeForWrite`). `false` gives `STATUS_ACCESS_VIOLATION` at step 7.
    pub buffer_writable: bool,
    /// Access granted to the new handle; normally [`AccessMask::PROFILE_CONTROL`].
    pub access: AccessMask,
    /// What the caller can prove (steps 10 and 11).
    pub caller: CallerRights,
}

/// The affinity argument of the two create calls.
#[derive(Clone, Copy, Debug)]
pub enum AffinityArg<'a> {
    /// NtCreateProfile: one `KAFFINITY` in the caller's current `group`; -1 = all active.
    KAffinity {
        /// The caller's current group.
        group: u16,
        /// The mask.
        mask: KAffinity,
    },
    /// NtCreateProfileEx: an array of `GROUP_AFFINITY`; empty = all active processors.
    Groups(&'a [GroupAffinity]),
}

/// The validated, immutable configuration of a profile object.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ObjectConfig {
    /// Process key, or `None` for global.
    pub process: Option<u64>,
    /// `ProfileBase`.
    pub base: u64,
    /// `ProfileSize`.
    pub size: u64,
    /// `BucketSize` (log2 bytes).
    pub bucket_size: u32,
    /// `Buffer` (guest virtual).
    pub buffer: u64,
    /// `BufferSize` in bytes.
    pub buffer_size: u32,
    /// `ProfileSource`.
    pub source: ProfileSource,
    /// The processors sampled.
    pub affinity: ProcessorSet,
}

impl ObjectConfig {
    /// End of the profiled range (exclusive). Never overflows: create rejects such ranges.
    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    /// Bytes of the buffer the counters can reach: 4 x the buckets the range spans.
    pub fn counters_len(&self) -> u64 {
        checks::bucket_count(self.size, self.bucket_size) * 4
    }
}

/// What the VMM must pin for [`ObjectManager::start`]: the whole buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PinRequest {
    /// The object being started.
    pub object: ObjectId,
    /// Its owner.
    pub owner: Owner,
    /// The profiled process key (the buffer is a virtual address in the *caller's* space at
    /// create time; the VMM gets its frames from the start request's page list or by walking
    /// the page tables the start request names).
    pub process: Option<u64>,
    /// Guest virtual address of the buffer.
    pub buffer: u64,
    /// Bytes to pin: the whole `BufferSize`.
    pub buffer_size: u32,
    /// Bytes counters can be written to (a prefix of the buffer); informational.
    pub counters_len: u64,
}

/// What a successful start reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Started {
    /// The object started.
    pub object: ObjectId,
    /// Its source: the VMM must be sampling this source on the object's processors.
    pub source: ProfileSource,
}
