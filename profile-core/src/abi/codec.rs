//! Parsing and building request blocks: pure functions of bytes that trust no length.

use core::ops::Range;

use super::page_list::PageList;
use super::requests::*;
use super::wire::Wire;
use super::*;
use crate::affinity::{GroupAffinity, MAX_GROUPS};
use crate::NtStatus;

/// Bytes of a call's fixed request body; `None` for an unknown call.
pub const fn request_size(call: u32) -> Option<usize> {
    Some(match call {
        CALL_QUERY_INFO | CALL_READ_STATS => 0,
        CALL_CREATE => CreateRequest::SIZE,
        CALL_CREATE_EX => CreateExRequest::SIZE,
        CALL_START => StartRequest::SIZE,
        CALL_STOP | CALL_CLOSE => HandleRequest::SIZE,
        CALL_SET_INTERVAL => SetIntervalRequest::SIZE,
        CALL_QUERY_INTERVAL => QueryIntervalRequest::SIZE,
        CALL_SET_INTERRUPT => SetInterruptRequest::SIZE,
        _ => return None,
    })
}

/// Bytes of a call's reply body; `None` for an unknown call.
pub const fn reply_size(call: u32) -> Option<usize> {
    Some(match call {
        CALL_QUERY_INFO => InfoReply::SIZE,
        CALL_CREATE | CALL_CREATE_EX => CreateReply::SIZE,
        CALL_START => StartReply::SIZE,
        CALL_SET_INTERVAL | CALL_QUERY_INTERVAL => IntervalReply::SIZE,
        CALL_STOP | CALL_CLOSE | CALL_SET_INTERRUPT => 0,
        CALL_READ_STATS => StatsReply::SIZE,
        _ => return None,
    })
}

/// The smallest `length` a block for `call` may declare: 16 + max(request, reply) (trailing
/// arrays come on top).
pub const fn min_length(call: u32) -> Option<usize> {
    match (request_size(call), reply_size(call)) {
        (Some(req), Some(rep)) => Some(HEADER_SIZE + if req > rep { req } else { rep }),
        _ => None,
    }
}

/// The `GROUP_AFFINITY` array after a create-ex body, read on demand.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GroupList<'a> {
    bytes: &'a [u8],
}

impl<'a> GroupList<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / GroupAffinity::SIZE
    }
    /// True if there are none (all active processors).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i`.
    pub fn get(&self, i: usize) -> Option<GroupAffinity> {
        GroupAffinity::decode(self.bytes.get(i * GroupAffinity::SIZE..)?)
    }
    /// The elements in order.
    pub fn iter(&self) -> impl Iterator<Item = GroupAffinity> + 'a {
        let bytes = self.bytes;
        bytes
            .chunks_exact(GroupAffinity::SIZE)
            .filter_map(GroupAffinity::decode)
    }
}

/// Where a start request's buffer frames come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StartBuffer<'a> {
    /// The page list that followed the request.
    PageList(PageList<'a>),
    /// Translate `va` through the page tables at `cr3`.
    GuestVirtual {
        /// The buffer's virtual address (must equal the object's `Buffer`).
        va: u64,
        /// The CR3 to walk (the VMM masks PCID bits).
        cr3: u64,
    },
}

/// A decoded, structurally valid request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Request<'a> {
    /// `CALL_QUERY_INFO`.
    QueryInfo,
    /// `CALL_CREATE`.
    Create(CreateRequest),
    /// `CALL_CREATE_EX` with its group array.
    CreateEx(CreateExRequest, GroupList<'a>),
    /// `CALL_START` with its buffer description.
    Start(StartRequest, StartBuffer<'a>),
    /// `CALL_STOP`.
    Stop(HandleRequest),
    /// `CALL_CLOSE`.
    Close(HandleRequest),
    /// `CALL_SET_INTERVAL`.
    SetInterval(SetIntervalRequest),
    /// `CALL_QUERY_INTERVAL`.
    QueryInterval(QueryIntervalRequest),
    /// `CALL_SET_INTERRUPT`.
    SetInterrupt(SetInterruptRequest),
    /// `CALL_READ_STATS`.
    ReadStats,
}

/// Parses and checks the header from the first 16 bytes of a block.
///
/// In order: fewer than 16 bytes -> `STATUS_INFO_LENGTH_MISMATCH`; `version` not
/// [`ABI_VERSION`] -> `STATUS_REVISION_MISMATCH`; unknown `call` -> `STATUS_NOT_IMPLEMENTED`;
/// `length` below [`min_length`] or above [`MAX_REQUEST_LEN`] -> `STATUS_INFO_LENGTH_MISMATCH`.
/// The VMM reads 16 bytes, calls this, then reads `length` bytes for [`decode_request`].
pub fn decode_header(bytes: &[u8]) -> Result<Header, NtStatus> {
    let header = Header::decode(bytes).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    if header.version != ABI_VERSION {
        return Err(NtStatus::REVISION_MISMATCH);
    }
    let min = min_length(header.call).ok_or(NtStatus::NOT_IMPLEMENTED)?;
    if (header.length as usize) < min || header.length > MAX_REQUEST_LEN {
        return Err(NtStatus::INFO_LENGTH_MISMATCH);
    }
    Ok(header)
}

fn zero(value: u64) -> Result<(), NtStatus> {
    if value == 0 {
        Ok(())
    } else {
        Err(NtStatus::INVALID_PARAMETER)
    }
}

fn body<T: Wire>(body: &[u8]) -> Result<T, NtStatus> {
    T::decode(body).ok_or(NtStatus::INFO_LENGTH_MISMATCH)
}

fn check_create_flags(flags: u32, process_cr3: u64) -> Result<(), NtStatus> {
    zero(u64::from(flags & !CREATE_FLAGS_VALID))?;
    if flags & CREATE_PER_PROCESS == 0 {
        zero(process_cr3)?;
    }
    Ok(())
}

/// Parses a whole request block. `block` must hold at least `header.length` bytes; bytes past
/// it are ignored. Besides [`decode_header`]'s statuses: a body or trailing array past `length`
/// -> `STATUS_INFO_LENGTH_MISMATCH`; nonzero reserved fields, unknown flags or modes, more than
/// `MAX_GROUPS` groups, a bad interrupt vector or a malformed page list ->
/// `STATUS_INVALID_PARAMETER`; more than [`MAX_PAGE_COUNT`] pages ->
/// `STATUS_INSUFFICIENT_RESOURCES`.
pub fn decode_request(block: &[u8]) -> Result<(Header, Request<'_>), NtStatus> {
    let header = decode_header(block)?;
    let block = block
        .get(..header.length as usize)
        .ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    let b = &block[HEADER_SIZE..];
    let request = match header.call {
        CALL_QUERY_INFO => Request::QueryInfo,
        CALL_READ_STATS => Request::ReadStats,
        CALL_CREATE => {
            let r: CreateRequest = body(b)?;
            check_create_flags(r.flags, r.process_cr3)?;
            zero(u64::from(r.reserved0))?;
            Request::Create(r)
        }
        CALL_CREATE_EX => {
            let r: CreateExRequest = body(b)?;
            check_create_flags(r.flags, r.process_cr3)?;
            zero(u64::from(r.reserved0) | r.reserved1)?;
            if r.group_count > MAX_GROUPS {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            let start = CreateExRequest::SIZE;
            let end = start + usize::from(r.group_count) * GroupAffinity::SIZE;
            let bytes = b.get(start..end).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
            Request::CreateEx(r, GroupList { bytes })
        }
        CALL_START => {
            let r: StartRequest = body(b)?;
            let buffer = match r.mode {
                START_MODE_PAGE_LIST => {
                    zero(r.buffer_va | r.cr3)?;
                    StartBuffer::PageList(PageList::parse(
                        b.get(StartRequest::SIZE..).unwrap_or(&[]),
                    )?)
                }
                START_MODE_GUEST_VIRTUAL => StartBuffer::GuestVirtual {
                    va: r.buffer_va,
                    cr3: r.cr3,
                },
                _ => return Err(NtStatus::INVALID_PARAMETER),
            };
            Request::Start(r, buffer)
        }
        CALL_STOP | CALL_CLOSE => {
            let r: HandleRequest = body(b)?;
            zero(u64::from(r.reserved))?;
            if header.call == CALL_STOP {
                Request::Stop(r)
            } else {
                Request::Close(r)
            }
        }
        CALL_SET_INTERVAL => {
            let r: SetIntervalRequest = body(b)?;
            zero(u64::from(
                r.reserved | (r.flags & !SET_INTERVAL_FLAGS_VALID),
            ))?;
            Request::SetInterval(r)
        }
        CALL_QUERY_INTERVAL => {
            let r: QueryIntervalRequest = body(b)?;
            zero(u64::from(r.reserved))?;
            Request::QueryInterval(r)
        }
        CALL_SET_INTERRUPT => {
            let r: SetInterruptRequest = body(b)?;
            zero(u64::from(r.reserved | (r.flags & !INTERRUPT_ENABLE)))?;
            let vector_ok = if r.flags & INTERRUPT_ENABLE != 0 {
                (0x20..=0xFF).contains(&r.vector)
            } else {
                r.vector == 0
            };
            if !vector_ok {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            Request::SetInterrupt(r)
        }
        _ => return Err(NtStatus::NOT_IMPLEMENTED),
    };
    Ok((header, request))
}

fn put_header(out: &mut [u8], call: u32, length: usize) -> Result<(), NtStatus> {
    let length32 = u32::try_from(length).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    if length32 > MAX_REQUEST_LEN {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let out = out.get_mut(..length).ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    out.fill(0);
    let header = Header {
        version: ABI_VERSION,
        call,
        length: length32,
        status: 0,
    };
    header.encode(out).ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    Ok(())
}

/// Builds a block for a call without a trailing array (everything but create-ex and a
/// page-list start) into `out`; returns its length ([`min_length`]). `STATUS_INVALID_PARAMETER`
/// if `T` is not `call`'s request body, `STATUS_BUFFER_TOO_SMALL` if `out` is too short.
pub fn encode_request<T: Wire>(call: u32, body: &T, out: &mut [u8]) -> Result<usize, NtStatus> {
    if request_size(call) != Some(T::SIZE) || call == CALL_CREATE_EX {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let length = min_length(call).ok_or(NtStatus::INVALID_PARAMETER)?;
    put_header(out, call, length)?;
    body.encode(&mut out[HEADER_SIZE..])
        .ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    Ok(length)
}

/// Builds a create-ex block; `group_count` is set from `groups`. Returns its length.
pub fn encode_create_ex(
    body: &CreateExRequest,
    groups: &[GroupAffinity],
    out: &mut [u8],
) -> Result<usize, NtStatus> {
    let count = u16::try_from(groups.len()).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let length = HEADER_SIZE + CreateExRequest::SIZE + groups.len() * GroupAffinity::SIZE;
    put_header(out, CALL_CREATE_EX, length)?;
    let mut b = *body;
    b.group_count = count;
    b.encode(&mut out[HEADER_SIZE..])
        .ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    let mut at = HEADER_SIZE + CreateExRequest::SIZE;
    for g in groups {
        g.encode(&mut out[at..]).ok_or(NtStatus::BUFFER_TOO_SMALL)?;
        at += GroupAffinity::SIZE;
    }
    Ok(length)
}

/// Builds a page-list start block for `handle`. Returns its length.
pub fn encode_start_page_list(
    handle: u32,
    offset_in_first_page: u32,
    frames: &[u64],
    out: &mut [u8],
) -> Result<usize, NtStatus> {
    let count = u32::try_from(frames.len()).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let length = HEADER_SIZE + StartRequest::SIZE + PageListHeader::SIZE + frames.len() * 8;
    put_header(out, CALL_START, length)?;
    let request = StartRequest {
        handle,
        mode: START_MODE_PAGE_LIST,
        buffer_va: 0,
        cr3: 0,
    };
    let mut at = HEADER_SIZE;
    request
        .encode(&mut out[at..])
        .ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    at += StartRequest::SIZE;
    let list = PageListHeader {
        offset_in_first_page,
        page_count: count,
    };
    list.encode(&mut out[at..])
        .ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    at += PageListHeader::SIZE;
    for f in frames {
        out[at..at + 8].copy_from_slice(&f.to_le_bytes());
        at += 8;
    }
    Ok(length)
}

/// Writes a reply into `block` (the VMM's copy of the request): the status at offset 12 and,
/// on success, `reply` at offset 16. Returns the byte range to copy back to guest memory.
/// `STATUS_BUFFER_TOO_SMALL` if `block` cannot hold it.
pub fn encode_reply<T: Wire>(
    block: &mut [u8],
    status: NtStatus,
    reply: &T,
) -> Result<Range<usize>, NtStatus> {
    let status_at = HEADER_SIZE - 4;
    let end = if status.is_success() {
        HEADER_SIZE + T::SIZE
    } else {
        HEADER_SIZE
    };
    let out = block.get_mut(..end).ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    out[status_at..HEADER_SIZE].copy_from_slice(&status.0.to_le_bytes());
    if status.is_success() {
        reply
            .encode(&mut out[HEADER_SIZE..])
            .ok_or(NtStatus::BUFFER_TOO_SMALL)?;
    }
    Ok(status_at..end)
}

/// Reads a reply (the agent's side): the header's status, then on success the body.
pub fn decode_reply<T: Wire>(block: &[u8]) -> Result<T, NtStatus> {
    let header = Header::decode(block).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
    NtStatus(header.status).ok()?;
    T::decode(&block[HEADER_SIZE..]).ok_or(NtStatus::INFO_LENGTH_MISMATCH)
}
