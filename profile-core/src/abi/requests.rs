//! The request block header and the `repr(C)` request and reply bodies of every call.
//!
//! Every field is little-endian. Reserved fields must be zero (the VMM rejects a request with
//! nonzero reserved fields with `STATUS_INVALID_PARAMETER`, so later versions can use them).

use super::wire::Wire;
use crate::affinity::GroupAffinity;
use crate::source::SourceInfo;
use crate::wire_struct;

wire_struct! {
    /// The 16-byte header at offset 0 of every request block.
    pub struct Header(16) {
        /// [`super::ABI_VERSION`].
        pub version: u32,
        /// A `CALL_*` number.
        pub call: u32,
        /// Total bytes of the block: header, body and any trailing array; at least
        /// 16 + max(request body, reply body).
        pub length: u32,
        /// Out: the NTSTATUS of the call, written by the VMM. The guest may leave anything here.
        pub status: u32,
    }
}

wire_struct! {
    /// `CALL_CREATE` (NtCreateProfile). 64 bytes.
    pub struct CreateRequest(64) {
        /// The profiled process's CR3 if `flags` has [`super::CREATE_PER_PROCESS`], else 0.
        pub process_cr3: u64,
        /// `ProfileBase`.
        pub base: u64,
        /// `ProfileSize`.
        pub size: u64,
        /// `Buffer`: guest virtual address in the calling vCPU's current address space.
        pub buffer: u64,
        /// `BufferSize` in bytes.
        pub buffer_size: u32,
        /// `BucketSize` (log2 of the bucket size in bytes).
        pub bucket_size: u32,
        /// `ProfileSource`.
        pub source: u32,
        /// `CREATE_*` and `CALLER_*` flags.
        pub flags: u32,
        /// Access for the new handle (normally `PROFILE_CONTROL` = 1).
        pub desired_access: u32,
        /// The caller's current processor group (the group `affinity` refers to).
        pub group: u16,
        /// Reserved, 0.
        pub reserved0: u16,
        /// `KAFFINITY`; `0xFFFF_FFFF_FFFF_FFFF` = all active processors of `group`.
        pub affinity: u64,
    }
}

wire_struct! {
    /// `CALL_CREATE_EX` (NtCreateProfileEx). 64 bytes, followed by `group_count` 16-byte
    /// `GROUP_AFFINITY` elements.
    pub struct CreateExRequest(64) {
        /// As in [`CreateRequest`].
        pub process_cr3: u64,
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
        /// `CREATE_*` and `CALLER_*` flags.
        pub flags: u32,
        /// Access for the new handle.
        pub desired_access: u32,
        /// Elements following the body: 0 (all active processors) ..= `MAX_GROUPS`.
        pub group_count: u16,
        /// Reserved, 0.
        pub reserved0: u16,
        /// Reserved, 0.
        pub reserved1: u64,
    }
}

/// The fields [`CreateRequest`] and [`CreateExRequest`] share, so that an agent fills them
/// in one place and then builds either call's body.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CreateFields {
    /// The profiled process's CR3 with [`super::CREATE_PER_PROCESS`] in `flags`, else 0.
    pub process_cr3: u64,
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
    /// `CREATE_*` and `CALLER_*` flags.
    pub flags: u32,
    /// Access for the new handle.
    pub desired_access: u32,
}

impl CreateFields {
    /// The `CALL_CREATE` body for `affinity` in processor group `group`.
    pub const fn create(self, group: u16, affinity: u64) -> CreateRequest {
        CreateRequest {
            process_cr3: self.process_cr3,
            base: self.base,
            size: self.size,
            buffer: self.buffer,
            buffer_size: self.buffer_size,
            bucket_size: self.bucket_size,
            source: self.source,
            flags: self.flags,
            desired_access: self.desired_access,
            group,
            reserved0: 0,
            affinity,
        }
    }

    /// The `CALL_CREATE_EX` body, followed by `group_count` `GROUP_AFFINITY` elements.
    pub const fn create_ex(self, group_count: u16) -> CreateExRequest {
        CreateExRequest {
            process_cr3: self.process_cr3,
            base: self.base,
            size: self.size,
            buffer: self.buffer,
            buffer_size: self.buffer_size,
            bucket_size: self.bucket_size,
            source: self.source,
            flags: self.flags,
            desired_access: self.desired_access,
            group_count,
            reserved0: 0,
            reserved1: 0,
        }
    }
}

wire_struct! {
    /// Reply to `CALL_CREATE` and `CALL_CREATE_EX`. 16 bytes.
    pub struct CreateReply(16) {
        /// The new handle (a nonzero multiple of 4).
        pub handle: u32,
        /// Reserved, 0.
        pub reserved: u32,
        /// The object's identity (diagnostics).
        pub object_id: u64,
    }
}

wire_struct! {
    /// `CALL_START` (NtStartProfile). 24 bytes; with `START_MODE_PAGE_LIST` a page list
    /// follows.
    pub struct StartRequest(24) {
        /// The handle from create.
        pub handle: u32,
        /// `START_MODE_PAGE_LIST` or `START_MODE_GUEST_VIRTUAL`.
        pub mode: u32,
        /// `START_MODE_GUEST_VIRTUAL`: must equal the object's `Buffer`; else 0.
        pub buffer_va: u64,
        /// `START_MODE_GUEST_VIRTUAL`: the CR3 whose page tables map the buffer; else 0.
        pub cr3: u64,
    }
}

wire_struct! {
    /// Reply to `CALL_START`. 8 bytes.
    pub struct StartReply(8) {
        /// Guest pages the VMM pinned.
        pub pinned_pages: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// The page list header following a `START_MODE_PAGE_LIST` start request, itself followed
    /// by `page_count` u64 frame numbers (guest-physical address >> 12), as a Windows driver
    /// reads them with `MmGetMdlPfnArray` after `MmProbeAndLockPages`.
    pub struct PageListHeader(8) {
        /// `Buffer & 0xFFF` (the MDL's `ByteOffset`).
        pub offset_in_first_page: u32,
        /// Pages the buffer spans: `(offset_in_first_page + BufferSize + 4095) / 4096`.
        pub page_count: u32,
    }
}

wire_struct! {
    /// `CALL_STOP` and `CALL_CLOSE`. 8 bytes; no reply body.
    pub struct HandleRequest(8) {
        /// The handle.
        pub handle: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// `CALL_SET_INTERVAL` (NtSetIntervalProfile). 16 bytes.
    pub struct SetIntervalRequest(16) {
        /// `ProfileSource`.
        pub source: u32,
        /// `Interval` in the source's unit (100 ns for ProfileTime).
        pub interval: u32,
        /// `CALLER_*` flags (only `CALLER_SYSTEM_PROFILE_PRIVILEGE` is meaningful).
        pub flags: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// `CALL_QUERY_INTERVAL` (NtQueryIntervalProfile). 8 bytes.
    pub struct QueryIntervalRequest(8) {
        /// `ProfileSource`.
        pub source: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// Reply to `CALL_SET_INTERVAL` and `CALL_QUERY_INTERVAL`. 8 bytes.
    pub struct IntervalReply(8) {
        /// The interval in force (set: after clamping; 0 for unsupported sources).
        pub interval: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// `CALL_SET_INTERRUPT`: enable or disable injecting a profile interrupt. 16 bytes; no
    /// reply body.
    pub struct SetInterruptRequest(16) {
        /// vCPU index, or `ALL_VCPUS` (0xFFFF_FFFF).
        pub vcpu: u32,
        /// Interrupt vector 0x20..=0xFF when enabling; 0 when disabling.
        pub vector: u32,
        /// `INTERRUPT_ENABLE` or 0.
        pub flags: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

wire_struct! {
    /// Reply to `CALL_QUERY_INFO` (no request body). 40 bytes.
    pub struct InfoReply(40) {
        /// [`super::ABI_VERSION`].
        pub abi_version: u32,
        /// Active vCPUs.
        pub processor_count: u32,
        /// Feature flags, as in CPUID leaf 0x40000101 ECX.
        pub features: u32,
        /// [`super::MAX_PAGE_COUNT`].
        pub max_page_count: u32,
        /// Bit `i` set: KPROFILE_SOURCE `i` is supported (sources 0..64).
        pub supported_sources: u64,
        /// Started objects allowed (8192 x processors).
        pub started_limit: u32,
        /// [`crate::affinity::MAX_GROUPS`].
        pub max_groups: u32,
        /// [`super::MAX_REQUEST_LEN`].
        pub max_request_len: u32,
        /// Reserved, 0.
        pub reserved: u32,
    }
}

/// Bit `i` set for each supported source `i < 64`: [`InfoReply::supported_sources`].
pub fn supported_sources_mask(sources: &[SourceInfo]) -> u64 {
    sources
        .iter()
        .filter(|s| s.source.0 < 64)
        .fold(0, |m, s| m | 1u64 << s.source.0)
}

wire_struct! {
    /// Reply to `CALL_READ_STATS` (no request body). 48 bytes. Counters since VM start.
    pub struct StatsReply(48) {
        /// Samples taken.
        pub samples: u64,
        /// Samples that counted into at least one object.
        pub counted_samples: u64,
        /// Counter increments (a sample counts once per matching object).
        pub counts: u64,
        /// Samples lost (for example a vCPU could not be sampled in time).
        pub dropped_samples: u64,
        /// Profile interrupts injected.
        pub injected_interrupts: u64,
        /// Objects open now.
        pub objects_open: u32,
        /// Objects started now.
        pub objects_started: u32,
    }
}

/// The empty body (calls without a request or reply body).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Empty;

impl Wire for Empty {
    const SIZE: usize = 0;
    fn decode(_: &[u8]) -> Option<Self> {
        Some(Empty)
    }
    fn encode(&self, _: &mut [u8]) -> Option<usize> {
        Some(0)
    }
}

impl Wire for GroupAffinity {
    const SIZE: usize = 16;
    fn decode(bytes: &[u8]) -> Option<Self> {
        use super::wire::Field;
        let bytes = bytes.get(..16)?;
        let mut at = 0;
        let mask = u64::get(bytes, &mut at);
        let group = u16::get(bytes, &mut at);
        let reserved = [
            u16::get(bytes, &mut at),
            u16::get(bytes, &mut at),
            u16::get(bytes, &mut at),
        ];
        Some(GroupAffinity {
            mask,
            group,
            reserved,
        })
    }
    fn encode(&self, out: &mut [u8]) -> Option<usize> {
        use super::wire::Field;
        let out = out.get_mut(..16)?;
        let mut at = 0;
        self.mask.put(out, &mut at);
        self.group.put(out, &mut at);
        for r in &self.reserved {
            r.put(out, &mut at);
        }
        Some(16)
    }
}
