//! Executing a parsed virtio-blk request against a disk image: reads and writes through a
//! bounded bounce buffer, flushes, the device id; DISCARD and WRITE_ZEROES are discard.rs's.
//! Every access was checked against the capacity when the request was parsed.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::discard;
use super::disk::{DiskImage, ID_LEN};
use super::request::{disk_range, io, Request, RequestError, RequestKind, BOUNCE};

/// Executes `req`. Returns the number of bytes written to guest buffers, without the
/// status byte (which the caller writes).
pub fn execute(
    req: &Request,
    disk: &mut DiskImage,
    mem: &GuestMemoryMmap,
) -> Result<u64, RequestError> {
    let mut bounce = Vec::new();
    match req.kind {
        RequestKind::In | RequestKind::Out => {
            if req.kind == RequestKind::Out && disk.readonly {
                return Err(RequestError::ReadOnly);
            }
            let mut offset = disk_range(req, disk.sectors)?;
            for seg in &req.data {
                let mut done = 0u64;
                while done < seg.len {
                    let n = usize::try_from((seg.len - done).min(BOUNCE as u64)).map_err(io)?;
                    bounce.resize(n, 0);
                    let addr = GuestAddress(seg.addr.0 + done);
                    if req.kind == RequestKind::In {
                        disk.backend.read_at(offset, &mut bounce).map_err(io)?;
                        mem.write_slice(&bounce, addr).map_err(io)?;
                    } else {
                        mem.read_slice(&mut bounce, addr).map_err(io)?;
                        disk.backend.write_at(offset, &bounce).map_err(io)?;
                    }
                    done += n as u64;
                    offset += n as u64;
                }
            }
            Ok(if req.kind == RequestKind::In {
                req.data_len()
            } else {
                0
            })
        }
        RequestKind::Flush => {
            if !disk.readonly {
                disk.backend.flush().map_err(io)?;
            }
            Ok(0)
        }
        RequestKind::GetId => {
            let mut written = 0u64;
            for seg in &req.data {
                let start = usize::try_from(written).map_err(io)?;
                if start >= ID_LEN {
                    break;
                }
                let n = (ID_LEN - start).min(usize::try_from(seg.len).unwrap_or(ID_LEN));
                mem.write_slice(&disk.id[start..start + n], seg.addr)
                    .map_err(io)?;
                written += n as u64;
            }
            Ok(written)
        }
        RequestKind::Discard | RequestKind::WriteZeroes => discard::execute(req, disk, mem),
        RequestKind::Unsupported(t) => Err(RequestError::Type(t)),
    }
}
