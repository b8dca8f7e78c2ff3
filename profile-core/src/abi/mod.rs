//! The hvprof hypercall ABI, version 1: one definition for the VMM and every guest agent.
//!
//! This module needs neither `alloc` nor `std` and compiles with Rust 1.63 (the Windows driver
//! toolchain). docs/abi.md specifies it byte by byte; in short:
//!
//! 1. **Discovery** ([`cpuid`]): CPUID 0x40000100 returns the signature "hvprofhvprof";
//!    0x40000101 returns the ABI version, the doorbell port base and feature flags.
//! 2. **Request block**: guest-physically contiguous, 8-byte aligned, at most
//!    [`MAX_REQUEST_LEN`] bytes: a 16-byte [`Header`], a call's request body and any trailing
//!    array. The VMM reads the whole block, then writes the status into the header and the reply
//!    body over offset 16.
//! 3. **Doorbell**: from CPL0 only, `OUT` the high dword of the block's guest-physical address to
//!    port `base + 4`, then the low dword to `base + 0`; the second write rings and the call
//!    completes before the `OUT` retires.
//!
//! Parsing ([`decode_header`], [`decode_request`]) is a pure function of bytes that trusts no
//! length: it is what the VMM runs on guest memory and what the fuzz targets exercise.

mod codec;
pub mod cpuid;
mod page_list;
mod requests;
pub mod wire;

pub use codec::{
    decode_header, decode_reply, decode_request, encode_create_ex, encode_reply, encode_request,
    encode_start_page_list, min_length, reply_size, request_size, GroupList, Request, StartBuffer,
};
pub use page_list::{pages_spanned, PageList, PAGE_SHIFT, PAGE_SIZE};
pub use requests::{
    supported_sources_mask, CreateExRequest, CreateFields, CreateReply, CreateRequest, Empty,
    HandleRequest, Header, InfoReply, IntervalReply, PageListHeader, QueryIntervalRequest,
    SetInterruptRequest, SetIntervalRequest, StartReply, StartRequest, StatsReply,
};
pub use wire::Wire;

/// The ABI version this crate defines (CPUID 0x40000101 EAX, [`Header::version`]).
pub const ABI_VERSION: u32 = 1;

/// Default first port of the doorbell (8 ports: 0x6A0..=0x6A7).
pub const DOORBELL_PORT_BASE: u16 = 0x6A0;
/// Ports the doorbell decodes.
pub const DOORBELL_PORT_COUNT: u16 = 8;
/// Offset of the ring port: a 32-bit `OUT` writes the low dword of the block's GPA and rings;
/// a 32-bit `IN` reads [`DOORBELL_MAGIC`].
pub const DOORBELL_RING: u16 = 0;
/// Offset of the high port: a 32-bit `OUT` latches the high dword of the GPA for this vCPU's
/// next ring (the latch resets to 0 after each ring); a 32-bit `IN` reads the status of this
/// vCPU's last ring (also when the VMM could not write the block, e.g. a CPL3 caller).
pub const DOORBELL_HIGH: u16 = 4;
/// What a 32-bit `IN` from the ring port returns: "hvpf" little-endian.
pub const DOORBELL_MAGIC: u32 = u32::from_le_bytes(*b"hvpf");

/// Bytes of the request header.
pub const HEADER_SIZE: usize = 16;
/// Frames a page list may carry: a 256 MiB buffer at any page offset. Larger buffers use
/// [`START_MODE_GUEST_VIRTUAL`].
pub const MAX_PAGE_COUNT: u32 = 65_537;
/// The largest request block: a start request with a full page list.
pub const MAX_REQUEST_LEN: u32 = 16 + 24 + 8 + 8 * MAX_PAGE_COUNT;

/// Reply: ABI version, processors, sources, limits.
pub const CALL_QUERY_INFO: u32 = 1;
/// NtCreateProfile.
pub const CALL_CREATE: u32 = 2;
/// NtCreateProfileEx.
pub const CALL_CREATE_EX: u32 = 3;
/// NtStartProfile.
pub const CALL_START: u32 = 4;
/// NtStopProfile.
pub const CALL_STOP: u32 = 5;
/// Close the handle (stops the object if started).
pub const CALL_CLOSE: u32 = 6;
/// NtSetIntervalProfile.
pub const CALL_SET_INTERVAL: u32 = 7;
/// NtQueryIntervalProfile.
pub const CALL_QUERY_INTERVAL: u32 = 8;
/// Enable or disable profile-interrupt injection on a vCPU.
pub const CALL_SET_INTERRUPT: u32 = 9;
/// Read the VMM's sampling statistics.
pub const CALL_READ_STATS: u32 = 10;

/// Create flag: per-process profile of the process whose CR3 is `process_cr3`.
pub const CREATE_PER_PROCESS: u32 = 1 << 0;
/// Caller flag: the caller holds `SeSystemProfilePrivilege`.
pub const CALLER_SYSTEM_PROFILE_PRIVILEGE: u32 = 1 << 1;
/// Caller flag: the caller is restricted (may not profile kernel space).
pub const CALLER_RESTRICTED: u32 = 1 << 2;
/// Flags a create request may carry.
pub const CREATE_FLAGS_VALID: u32 =
    CREATE_PER_PROCESS | CALLER_SYSTEM_PROFILE_PRIVILEGE | CALLER_RESTRICTED;
/// Flags a set-interval request may carry.
pub const SET_INTERVAL_FLAGS_VALID: u32 = CALLER_SYSTEM_PROFILE_PRIVILEGE;

/// Start mode: a page list follows the start request.
pub const START_MODE_PAGE_LIST: u32 = 0;
/// Start mode: the VMM translates `buffer_va` by walking the page tables at `cr3`.
pub const START_MODE_GUEST_VIRTUAL: u32 = 1;

/// Set-interrupt flag: enable injection (else disable).
pub const INTERRUPT_ENABLE: u32 = 1 << 0;
/// `vcpu` value naming every vCPU.
pub const ALL_VCPUS: u32 = u32::MAX;

/// The CR3 bits that identify an address space: bits 12..=51. PCID (bits 0..=11) and bit 63
/// (no-flush) are masked off.
pub const CR3_KEY_MASK: u64 = 0x000F_FFFF_FFFF_F000;

/// The process key of a CR3 value: `cr3 & CR3_KEY_MASK`.
pub const fn process_key(cr3: u64) -> u64 {
    cr3 & CR3_KEY_MASK
}

#[cfg(test)]
mod tests;
