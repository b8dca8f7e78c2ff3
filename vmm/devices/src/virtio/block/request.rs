//! virtio-blk requests (virtio 1.2, 5.2.6): parsing a checked descriptor chain into a
//! request (executing it is execute.rs's).
//!
//! Layout is free (VIRTIO_F_VERSION_1 implies ANY_LAYOUT): the 16-byte header is the first
//! 16 device-readable bytes, the status is the last device-writable byte, and the data is
//! what lies between (readable bytes after the header for OUT, writable bytes before the
//! status for IN and GET_ID). Every buffer was checked to be in guest RAM when the chain was
//! collected; data moves through a bounded bounce buffer, and every disk access is checked
//! against the capacity first.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::disk::SECTOR_SIZE;

/// Read sectors.
pub const VIRTIO_BLK_T_IN: u32 = 0;
/// Write sectors.
pub const VIRTIO_BLK_T_OUT: u32 = 1;
/// Flush.
pub const VIRTIO_BLK_T_FLUSH: u32 = 4;
/// Device ID string.
pub const VIRTIO_BLK_T_GET_ID: u32 = 8;
/// Discard sector ranges.
pub const VIRTIO_BLK_T_DISCARD: u32 = 11;
/// Zero sector ranges.
pub const VIRTIO_BLK_T_WRITE_ZEROES: u32 = 13;
/// Success.
pub const VIRTIO_BLK_S_OK: u8 = 0;
/// Failure.
pub const VIRTIO_BLK_S_IOERR: u8 = 1;
/// Unsupported request type.
pub const VIRTIO_BLK_S_UNSUPP: u8 = 2;
/// Size of the request header.
pub const HEADER_LEN: u64 = 16;
pub(super) const BOUNCE: usize = 64 * 1024;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// Read into the data buffers.
    In,
    /// Write from the data buffers.
    Out,
    /// Flush the image.
    Flush,
    /// The ID string.
    GetId,
    /// Discard the ranges in the data.
    Discard,
    /// Zero the ranges in the data.
    WriteZeroes,
    /// Anything else.
    Unsupported(u32),
}

/// A guest buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Guest address.
    pub addr: GuestAddress,
    /// Length in bytes.
    pub len: u64,
}

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its type.
    pub kind: RequestKind,
    /// First sector.
    pub sector: u64,
    /// Data buffers, in order.
    pub data: Vec<Segment>,
    /// Where the status byte goes.
    pub status: GuestAddress,
}

impl Request {
    /// Total data length.
    pub fn data_len(&self) -> u64 {
        self.data.iter().map(|s| s.len).sum()
    }
}

/// Why a request fails (the guest sees VIRTIO_BLK_S_IOERR).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// Fewer than 16 readable bytes.
    #[error("header shorter than 16 bytes")]
    ShortHeader,
    /// The header could not be read.
    #[error("header unreadable")]
    Header,
    /// A read or write with no data, or data that is not whole sectors.
    #[error("data length {0} is not a positive multiple of 512")]
    Length(u64),
    /// Past the end of the image.
    #[error("sectors {sector}+{count} beyond the capacity")]
    OutOfRange {
        /// First sector.
        sector: u64,
        /// Number of sectors.
        count: u64,
    },
    /// A write to a read-only image.
    #[error("write to a read-only image")]
    ReadOnly,
    /// A request type the device does not know (the guest sees VIRTIO_BLK_S_UNSUPP).
    #[error("request type {0} not supported")]
    Type(u32),
    /// A DISCARD or WRITE_ZEROES range with flags the device does not support (the guest
    /// sees VIRTIO_BLK_S_UNSUPP).
    #[error("range flags {0:#x} not supported")]
    Flags(u32),
    /// The image or guest memory failed.
    #[error("I/O error: {0}")]
    Io(String),
}

fn segments<'a>(
    descs: impl Iterator<Item = &'a Descriptor>,
    skip: u64,
    total: u64,
) -> Vec<Segment> {
    let mut out = Vec::new();
    let (mut skip, mut left) = (skip, total);
    for d in descs {
        let len = u64::from(d.len());
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = (len - skip).min(left);
        if take > 0 {
            out.push(Segment {
                addr: GuestAddress(d.addr().0 + skip),
                len: take,
            });
        }
        skip = 0;
        left -= take;
        if left == 0 {
            break;
        }
    }
    out
}

/// Reads `segs` one after another into `out`, which they must fill exactly.
pub(super) fn gather(
    segs: &[Segment],
    mem: &GuestMemoryMmap,
    out: &mut [u8],
) -> Result<(), RequestError> {
    let mut at = 0usize;
    for seg in segs {
        let n = usize::try_from(seg.len).map_err(io)?;
        let dst = at
            .checked_add(n)
            .and_then(|end| out.get_mut(at..end))
            .ok_or(RequestError::Length(seg.len))?;
        mem.read_slice(dst, seg.addr).map_err(io)?;
        at += n;
    }
    if at == out.len() {
        Ok(())
    } else {
        Err(RequestError::Length(at as u64))
    }
}

/// Where the status byte of a checked chain goes: the last byte of the last writable
/// descriptor, or None when no writable byte exists.
pub fn status_address(descs: &[Descriptor]) -> Option<GuestAddress> {
    let last = descs.last().filter(|d| d.is_write_only() && d.len() > 0)?;
    Some(GuestAddress(last.addr().0 + u64::from(last.len()) - 1))
}

/// Parses a checked chain (see `queue::collect_chain`) whose status byte is at `status`.
pub fn parse(
    descs: &[Descriptor],
    mem: &GuestMemoryMmap,
    status: GuestAddress,
) -> Result<Request, RequestError> {
    let readable = || descs.iter().filter(|d| !d.is_write_only());
    let writable = || descs.iter().filter(|d| d.is_write_only());
    let readable_len: u64 = readable().map(|d| u64::from(d.len())).sum();
    let writable_len: u64 = writable().map(|d| u64::from(d.len())).sum();
    if readable_len < HEADER_LEN {
        return Err(RequestError::ShortHeader);
    }
    let mut header = [0u8; 16];
    gather(&segments(readable(), 0, HEADER_LEN), mem, &mut header)
        .map_err(|_| RequestError::Header)?;
    let mut word = [0u8; 4];
    word.copy_from_slice(&header[..4]);
    let kind = match u32::from_le_bytes(word) {
        VIRTIO_BLK_T_IN => RequestKind::In,
        VIRTIO_BLK_T_OUT => RequestKind::Out,
        VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
        VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
        VIRTIO_BLK_T_DISCARD => RequestKind::Discard,
        VIRTIO_BLK_T_WRITE_ZEROES => RequestKind::WriteZeroes,
        other => RequestKind::Unsupported(other),
    };
    let mut sector = [0u8; 8];
    sector.copy_from_slice(&header[8..]);
    let data = match kind {
        RequestKind::Out | RequestKind::Discard | RequestKind::WriteZeroes => {
            segments(readable(), HEADER_LEN, readable_len - HEADER_LEN)
        }
        // The status byte is the last writable byte, so writable_len >= 1.
        RequestKind::In | RequestKind::GetId => {
            segments(writable(), 0, writable_len.saturating_sub(1))
        }
        _ => Vec::new(),
    };
    Ok(Request {
        kind,
        sector: u64::from_le_bytes(sector),
        data,
        status,
    })
}

/// Checks that a read or write of `req` lies within `sectors` and returns its byte offset.
pub(super) fn disk_range(req: &Request, sectors: u64) -> Result<u64, RequestError> {
    let len = req.data_len();
    if len == 0 || !len.is_multiple_of(SECTOR_SIZE) {
        return Err(RequestError::Length(len));
    }
    let count = len / SECTOR_SIZE;
    let out_of_range = RequestError::OutOfRange {
        sector: req.sector,
        count,
    };
    match req.sector.checked_add(count) {
        Some(end) if end <= sectors => Ok(req.sector * SECTOR_SIZE),
        _ => Err(out_of_range),
    }
}

pub(super) fn io(e: impl std::fmt::Display) -> RequestError {
    RequestError::Io(e.to_string())
}

impl RequestError {
    /// The guest gets VIRTIO_BLK_S_UNSUPP for this error, VIRTIO_BLK_S_IOERR otherwise.
    pub fn unsupported(&self) -> bool {
        matches!(self, RequestError::Type(_) | RequestError::Flags(_))
    }
}

#[cfg(test)]
mod tests;
