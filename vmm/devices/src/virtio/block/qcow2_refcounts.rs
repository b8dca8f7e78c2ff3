//! The refcounts of the metadata a qcow2 header names, checked after
//! [`super::qcow2_header::check`] and before imago opens the image: the header cluster, the
//! refcount table and the L1 table must each have a refcount block and a refcount of at least
//! one in it.
//!
//! imago 0.2.6 allocates a cluster wherever the refcounts say it is free. With no refcount
//! block for cluster 0 (an image cut short, or a zeroed refcount table entry) its first
//! allocation placed a refcount block over the header and then recursed until the event-loop
//! thread's stack overflowed, aborting hvprof mid-run; with a refcount of 0 for a metadata
//! cluster it would hand that cluster out for guest data. `qemu-img check` refuses both
//! images ("cluster 0 refcount=0 reference=1"). Reads are bounded: one refcount table entry
//! and one refcount entry per cluster named (at most a few thousand).

use std::io;

use super::qcow2_header::{self, HeaderError};

/// Reads `buf.len()` bytes at an offset of the image, zeroes past its end.
pub type ReadAt<'a> = &'a dyn Fn(u64, &mut [u8]) -> io::Result<()>;

/// The refcount table entry bits that hold a refcount block's offset.
const REFBLOCK_OFFSET_MASK: u64 = 0xffff_ffff_ffff_fe00;

/// The fields of a header that passed [`qcow2_header::check`].
struct Layout {
    cluster_bits: u32,
    refcount_order: u32,
    reftable: u64,
    reftable_entries: u64,
    file_len: u64,
}

fn be32(h: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}

fn be64(h: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_be_bytes(b)
}

/// Checks the header `header` of an image of `file_len` bytes ([`qcow2_header::check`]),
/// then that its header cluster, refcount table and L1 table are refcounted; `read` reads
/// the image. The outer error is a read failing.
pub fn check(
    header: &[u8],
    file_len: u64,
    read: ReadAt<'_>,
) -> io::Result<Result<(), HeaderError>> {
    if let Err(e) = qcow2_header::check(header, file_len) {
        return Ok(Err(e));
    }
    let cluster_bits = be32(header, 20);
    let version = be32(header, 4);
    let refcount_order = if version >= 3 { be32(header, 96) } else { 4 };
    let reftable_clusters = u64::from(be32(header, 56));
    let layout = Layout {
        cluster_bits,
        refcount_order,
        reftable: be64(header, 48),
        reftable_entries: (reftable_clusters << cluster_bits) / 8,
        file_len,
    };
    let cluster_of = |offset: u64| offset >> cluster_bits;
    let mut named: Vec<(&'static str, u64, u64)> = vec![("the header", 0, 1)];
    named.push((
        "the refcount table",
        cluster_of(layout.reftable),
        reftable_clusters,
    ));
    let l1_bytes = u64::from(be32(header, 36)) * 8;
    if l1_bytes > 0 {
        let l1 = be64(header, 40);
        named.push((
            "the L1 table",
            cluster_of(l1),
            l1_bytes.div_ceil(1 << cluster_bits),
        ));
    }
    for (what, first, count) in named {
        for cluster in first..first + count {
            if let Err(e) = layout.refcounted(what, cluster, read)? {
                return Ok(Err(e));
            }
        }
    }
    Ok(Ok(()))
}

impl Layout {
    /// Whether `cluster` (part of `what`) has a refcount block and a refcount above 0.
    fn refcounted(
        &self,
        what: &'static str,
        cluster: u64,
        read: ReadAt<'_>,
    ) -> io::Result<Result<(), HeaderError>> {
        // A refcount block is one cluster of 2^refcount_order-bit entries.
        let block_bits = self.cluster_bits + 3 - self.refcount_order;
        let index = cluster >> block_bits;
        if index >= self.reftable_entries {
            return Ok(Err(HeaderError::RefcountTableShort {
                what,
                cluster,
                entries: self.reftable_entries,
            }));
        }
        let mut entry = [0u8; 8];
        read(self.reftable + index * 8, &mut entry)?;
        let block = u64::from_be_bytes(entry) & REFBLOCK_OFFSET_MASK;
        if block == 0 {
            return Ok(Err(HeaderError::NoRefcountBlock {
                what,
                cluster,
                index,
            }));
        }
        if !block.is_multiple_of(1 << self.cluster_bits) || block >= self.file_len {
            return Ok(Err(HeaderError::RefcountBlockPlace {
                index,
                offset: block,
            }));
        }
        let slot = cluster & ((1 << block_bits) - 1);
        let width = 1u64 << self.refcount_order;
        let bit = slot * width;
        let mut bytes = [0u8; 8];
        let len = usize::try_from(width.div_ceil(8)).unwrap_or(8);
        read(block + bit / 8, &mut bytes[..len])?;
        let count = if width < 8 {
            u64::from(bytes[0] >> (bit % 8)) & ((1 << width) - 1)
        } else {
            bytes[..len]
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        if count == 0 {
            return Ok(Err(HeaderError::Unreferenced { what, cluster }));
        }
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests;
