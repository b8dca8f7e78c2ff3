//! DISCARD and WRITE_ZEROES requests (virtio 1.2, 5.2.6): their data is a list of 16-byte
//! ranges `{le64 sector, le32 num_sectors, le32 flags}`, flag bit 0 being "unmap".
//!
//! Every range is checked before any is carried out, so a request with one bad range changes
//! nothing: unknown flags, or unmap on a DISCARD, make it VIRTIO_BLK_S_UNSUPP (as the spec
//! requires); more ranges or sectors than the configuration allows, a range past the end,
//! or data that is not whole ranges make it VIRTIO_BLK_S_IOERR, as does a read-only disk.

use vm_memory::GuestMemoryMmap;

use super::disk::{DiskImage, SECTOR_SIZE};
use super::request::{gather, io, Request, RequestError, RequestKind};
use crate::bytes::{le_u32, le_u64};

/// Largest number of ranges in one request (the configuration's max_discard_seg and
/// max_write_zeroes_seg).
pub const MAX_RANGES: u32 = 32;
/// Largest number of sectors in one range (max_discard_sectors, max_write_zeroes_sectors):
/// 2 GiB.
pub const MAX_RANGE_SECTORS: u32 = 1 << 22;
/// Discard granularity the driver should align to (discard_sector_alignment): 4 KiB, a
/// host page, the smallest hole a file system punches.
pub const DISCARD_ALIGNMENT_SECTORS: u32 = 8;
/// Flag: the device may deallocate the zeroed range.
pub const FLAG_UNMAP: u32 = 1;
/// Size of one range.
const RANGE_LEN: u64 = 16;

/// One range, checked against the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    offset: u64,
    len: u64,
    unmap: bool,
}

/// Reads and checks every range of `req` (a DISCARD or WRITE_ZEROES) against a disk of
/// `sectors`.
fn ranges(req: &Request, mem: &GuestMemoryMmap, sectors: u64) -> Result<Vec<Range>, RequestError> {
    let len = req.data_len();
    if len == 0 || !len.is_multiple_of(RANGE_LEN) || len / RANGE_LEN > u64::from(MAX_RANGES) {
        return Err(RequestError::Length(len));
    }
    let mut bytes = vec![0u8; usize::try_from(len).map_err(io)?];
    gather(&req.data, mem, &mut bytes)?;
    let mut out = Vec::new();
    for raw in bytes.chunks_exact(16) {
        // chunks_exact: each of the three fields is there.
        let sector = le_u64(raw, 0).unwrap_or(u64::MAX);
        let count = u64::from(le_u32(raw, 8).unwrap_or(u32::MAX));
        let flags = le_u32(raw, 12).unwrap_or(u32::MAX);
        let allowed = if req.kind == RequestKind::WriteZeroes {
            FLAG_UNMAP
        } else {
            0
        };
        if flags & !allowed != 0 {
            return Err(RequestError::Flags(flags));
        }
        if count > u64::from(MAX_RANGE_SECTORS) {
            return Err(RequestError::Length(count * SECTOR_SIZE));
        }
        match sector.checked_add(count) {
            Some(end) if end <= sectors => out.push(Range {
                offset: sector * SECTOR_SIZE,
                len: count * SECTOR_SIZE,
                unmap: flags & FLAG_UNMAP != 0,
            }),
            _ => return Err(RequestError::OutOfRange { sector, count }),
        }
    }
    Ok(out)
}

/// Carries out a DISCARD or WRITE_ZEROES request once all its ranges are checked.
pub(super) fn execute(
    req: &Request,
    disk: &mut DiskImage,
    mem: &GuestMemoryMmap,
) -> Result<u64, RequestError> {
    if disk.readonly {
        return Err(RequestError::ReadOnly);
    }
    for r in ranges(req, mem, disk.sectors)? {
        let done = if req.kind == RequestKind::Discard {
            disk.backend.discard(r.offset, r.len)
        } else {
            disk.backend.write_zeroes(r.offset, r.len, r.unmap)
        };
        done.map_err(io)?;
    }
    Ok(0)
}
