//! hvprof's own check of a qcow2 header, before imago opens the image: the fields that size
//! or place anything (cluster size, virtual size, tables, backing file name) must be within
//! qcow2's and QEMU's limits and inside the file. imago 0.2.6 checks some of them and trusts
//! the rest: it accepted a 16 EiB virtual size, an L1 table too small for the disk and tables
//! past the end of the file, each of which QEMU refuses (`qemu-img info` or `qemu-img
//! check`).
//!
//! [`check`] is pure over the header's bytes and the file's length, so it is unit-tested and
//! fuzzed (fuzz/fuzz_targets/qcow2_header.rs). The limits are QEMU's (block/qcow2.h,
//! `qcow2_do_open`), so an image QEMU opens is not refused here for a limit of hvprof's own;
//! the incompatible feature bits are imago's (it refuses every one but the external data file,
//! which hvprof then refuses by name).

use thiserror::Error;

/// The first bytes of a qcow2 image ("QFI\xfb").
pub const QCOW2_MAGIC: [u8; 4] = *b"QFI\xfb";
/// The header bytes [`check`] reads: the version 3 header and its compression type byte.
pub const HEADER_BYTES: usize = 112;
/// A version 2 header's length.
const V2_LEN: u32 = 72;
/// The shortest version 3 header.
const V3_MIN_LEN: u32 = 104;
/// Smallest and largest cluster_bits (512 B and 2 MiB clusters).
pub const CLUSTER_BITS: std::ops::RangeInclusive<u32> = 9..=21;
/// Largest refcount_order (64-bit refcounts).
const MAX_REFCOUNT_ORDER: u32 = 6;
/// QEMU's QCOW_MAX_L1_SIZE (32 MiB) in 8-byte entries.
pub const MAX_L1_ENTRIES: u64 = (32 << 20) / 8;
/// QEMU's QCOW_MAX_REFTABLE_SIZE (8 MiB).
const MAX_REFTABLE_BYTES: u64 = 8 << 20;
/// QEMU's QCOW_MAX_SNAPSHOTS.
const MAX_SNAPSHOTS: u32 = 65536;
/// A snapshot table entry's fixed part (QCowSnapshotHeader).
const SNAPSHOT_ENTRY: u64 = 40;
/// The longest backing file name (QEMU's and imago's limit).
const MAX_BACKING_NAME: u32 = 1023;
/// crypt_method values: none, AES, LUKS.
const MAX_CRYPT_METHOD: u32 = 2;
/// The incompatible feature bit of an external data file: passed here, refused by name
/// when imago asks to open the file (`DiskError::ExternalData`).
const INCOMPAT_DATA_FILE: u64 = 1 << 2;
/// Names of the incompatible feature bits qcow2 defines.
const INCOMPAT_NAMES: [&str; 5] = [
    "dirty",
    "corrupt",
    "external data file",
    "compression type",
    "extended L2 entries",
];

/// Why a qcow2 header is refused. Each message names the header field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    /// The file ends inside the header.
    #[error("qcow2 header truncated: the file has {len} bytes, the header needs {need}")]
    Truncated {
        /// The file's length.
        len: u64,
        /// The header's length.
        need: u64,
    },
    /// Not the qcow2 magic.
    #[error("qcow2 magic {0:02x?} is not QFI\\xfb")]
    Magic([u8; 4]),
    /// A version other than 2 or 3.
    #[error("qcow2 version {0} is not 2 or 3")]
    Version(u32),
    /// cluster_bits outside 9..=21.
    #[error("qcow2 cluster_bits {0} outside 9..=21")]
    ClusterBits(u32),
    /// A version 3 header_length shorter than 104 or longer than a cluster.
    #[error("qcow2 header_length {len} outside 104..={cluster}")]
    HeaderLength {
        /// The field.
        len: u32,
        /// The cluster size.
        cluster: u64,
    },
    /// refcount_order above 6.
    #[error("qcow2 refcount_order {0} outside 0..=6")]
    RefcountOrder(u32),
    /// An unknown crypt_method.
    #[error("qcow2 crypt_method {0} is not 0 (none), 1 (AES) or 2 (LUKS)")]
    CryptMethod(u32),
    /// Incompatible feature bits hvprof cannot honour.
    #[error("qcow2 incompatible_features {bits:#x}: {names} not supported")]
    Incompatible {
        /// The bits refused.
        bits: u64,
        /// What they are.
        names: String,
    },
    /// A compression type without the compression type feature bit.
    #[error("qcow2 compression_type {0} without the compression type feature bit")]
    CompressionType(u8),
    /// A virtual size beyond what an L1 table of the largest size QEMU accepts maps.
    #[error("qcow2 size {size} bytes exceeds {max}, the limit for {cluster}-byte clusters")]
    Size {
        /// The field.
        size: u64,
        /// The limit.
        max: u64,
        /// The cluster size.
        cluster: u64,
    },
    /// An L1 table longer than QEMU's 32 MiB.
    #[error("qcow2 l1_size {0} exceeds {MAX_L1_ENTRIES} entries")]
    L1TooLarge(u32),
    /// An L1 table that does not cover the virtual size.
    #[error(
        "qcow2 l1_size {l1_size} too small: a size of {size} bytes with cluster_bits \
         {cluster_bits} needs {need} L1 entries"
    )]
    L1TooSmall {
        /// The field.
        l1_size: u32,
        /// The virtual size.
        size: u64,
        /// The cluster_bits field.
        cluster_bits: u32,
        /// Entries the virtual size needs.
        need: u64,
    },
    /// No refcount table.
    #[error("qcow2 refcount_table_clusters 0: the image has no refcount table")]
    NoRefcountTable,
    /// A refcount table longer than QEMU's 8 MiB.
    #[error("qcow2 refcount_table_clusters {clusters} exceeds {max}")]
    RefcountTableTooLarge {
        /// The field.
        clusters: u32,
        /// The limit for this cluster size.
        max: u64,
    },
    /// More snapshots than QEMU accepts.
    #[error("qcow2 nb_snapshots {0} exceeds {MAX_SNAPSHOTS}")]
    Snapshots(u32),
    /// A table not aligned to a cluster.
    #[error("qcow2 {field} {offset:#x} is not aligned to the {cluster}-byte cluster")]
    Unaligned {
        /// The header field.
        field: &'static str,
        /// Its value.
        offset: u64,
        /// The cluster size.
        cluster: u64,
    },
    /// A table (or the backing file name) that lies past the end of the file.
    #[error(
        "qcow2 {field} {offset:#x}: {what} (bytes {offset:#x}..{end:#x}) lies past the end of the file ({len:#x} bytes)"
    )]
    PastEnd {
        /// The header field.
        field: &'static str,
        /// What it places.
        what: &'static str,
        /// Its value.
        offset: u64,
        /// Where what it places ends (saturated at u64::MAX).
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// The refcount table has no entry for a metadata cluster ([`super::qcow2_refcounts`]).
    #[error(
        "qcow2 refcount table ({entries} entries) does not cover {what} (cluster {cluster:#x})"
    )]
    RefcountTableShort {
        /// What the cluster holds.
        what: &'static str,
        /// The cluster.
        cluster: u64,
        /// The table's entries.
        entries: u64,
    },
    /// A metadata cluster without a refcount block.
    #[error("qcow2 refcount table entry {index} is 0: {what} (cluster {cluster:#x}) has no refcount block")]
    NoRefcountBlock {
        /// What the cluster holds.
        what: &'static str,
        /// The cluster.
        cluster: u64,
        /// The refcount table entry.
        index: u64,
    },
    /// A refcount block that is not aligned or not in the file.
    #[error("qcow2 refcount table entry {index}: refcount block {offset:#x} is unaligned or past the end of the file")]
    RefcountBlockPlace {
        /// The refcount table entry.
        index: u64,
        /// The block's offset.
        offset: u64,
    },
    /// A metadata cluster whose refcount is 0: imago would allocate it for data.
    #[error("qcow2 refcount of {what} (cluster {cluster:#x}) is 0")]
    Unreferenced {
        /// What the cluster holds.
        what: &'static str,
        /// The cluster.
        cluster: u64,
    },
    /// A backing file name longer than 1023 bytes.
    #[error("qcow2 backing_file_size {0} exceeds {MAX_BACKING_NAME}")]
    BackingNameLength(u32),
    /// A backing file name outside the first cluster.
    #[error(
        "qcow2 backing_file_offset {offset:#x} with backing_file_size {size}: the name is not inside the first cluster ({cluster} bytes)"
    )]
    BackingNamePlace {
        /// The field.
        offset: u64,
        /// The name's length.
        size: u32,
        /// The cluster size.
        cluster: u64,
    },
}

/// The header fields [`check`] looks at.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.0[at..at + 4]);
        u32::from_be_bytes(b)
    }

    fn u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        u64::from_be_bytes(b)
    }
}

/// Checks the qcow2 header `bytes` (the file's first bytes: all of them or at least
/// [`HEADER_BYTES`]) of a file of `file_len` bytes. Field offsets: docs/interop/qcow2.txt.
pub fn check(bytes: &[u8], file_len: u64) -> Result<(), HeaderError> {
    let avail = u64::try_from(bytes.len()).unwrap_or(u64::MAX).min(file_len);
    let truncated = |need: u32| HeaderError::Truncated {
        len: file_len,
        need: u64::from(need),
    };
    if avail < u64::from(V2_LEN) {
        return Err(truncated(V2_LEN));
    }
    let h = Fields(bytes);
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != QCOW2_MAGIC {
        return Err(HeaderError::Magic(magic));
    }
    let version = h.u32(4);
    if version != 2 && version != 3 {
        return Err(HeaderError::Version(version));
    }
    let cluster_bits = h.u32(20);
    if !CLUSTER_BITS.contains(&cluster_bits) {
        return Err(HeaderError::ClusterBits(cluster_bits));
    }
    let cluster = 1u64 << cluster_bits;
    if version == 3 {
        check_v3(&h, avail, file_len, cluster)?;
    }
    let crypt = h.u32(32);
    if crypt > MAX_CRYPT_METHOD {
        return Err(HeaderError::CryptMethod(crypt));
    }
    check_l1(&h, file_len, cluster_bits)?;
    check_refcount_table(&h, file_len, cluster_bits)?;
    check_snapshots(&h, file_len, cluster)?;
    check_backing_name(&h, file_len, cluster)
}

/// The version 3 fields: header_length, refcount_order, incompatible features and the
/// compression type.
fn check_v3(h: &Fields<'_>, avail: u64, file_len: u64, cluster: u64) -> Result<(), HeaderError> {
    if avail < u64::from(V3_MIN_LEN) {
        return Err(HeaderError::Truncated {
            len: file_len,
            need: u64::from(V3_MIN_LEN),
        });
    }
    let len = h.u32(100);
    if len < V3_MIN_LEN || u64::from(len) > cluster {
        return Err(HeaderError::HeaderLength { len, cluster });
    }
    if u64::from(len) > file_len {
        return Err(HeaderError::Truncated {
            len: file_len,
            need: u64::from(len),
        });
    }
    let order = h.u32(96);
    if order > MAX_REFCOUNT_ORDER {
        return Err(HeaderError::RefcountOrder(order));
    }
    let refused = h.u64(72) & !INCOMPAT_DATA_FILE;
    if refused != 0 {
        let names: Vec<String> = (0..64)
            .filter(|bit| refused & (1u64 << bit) != 0)
            .map(|bit| match INCOMPAT_NAMES.get(bit) {
                Some(name) => format!("bit {bit} ({name})"),
                None => format!("bit {bit} (unknown)"),
            })
            .collect();
        return Err(HeaderError::Incompatible {
            bits: refused,
            names: names.join(", "),
        });
    }
    // The compression type byte exists when the header is longer than 104 bytes; with the
    // feature bit refused above, only 0 (zlib) is valid.
    if len > V3_MIN_LEN && avail > u64::from(V3_MIN_LEN) {
        let ty = h.0[V3_MIN_LEN as usize];
        if ty != 0 {
            return Err(HeaderError::CompressionType(ty));
        }
    }
    Ok(())
}

/// The virtual size and the L1 table that maps it.
fn check_l1(h: &Fields<'_>, file_len: u64, cluster_bits: u32) -> Result<(), HeaderError> {
    let cluster = 1u64 << cluster_bits;
    // One L1 entry maps one L2 table: a cluster of 8-byte entries, each a cluster.
    let per_entry_bits = 2 * cluster_bits - 3;
    let max = MAX_L1_ENTRIES << per_entry_bits;
    let size = h.u64(24);
    if size > max {
        return Err(HeaderError::Size { size, max, cluster });
    }
    let need = size.div_ceil(1u64 << per_entry_bits);
    let l1_size = h.u32(36);
    if u64::from(l1_size) > MAX_L1_ENTRIES {
        return Err(HeaderError::L1TooLarge(l1_size));
    }
    if u64::from(l1_size) < need {
        return Err(HeaderError::L1TooSmall {
            l1_size,
            size,
            cluster_bits,
            need,
        });
    }
    let table = Table {
        field: "l1_table_offset",
        what: "the L1 table",
        offset: h.u64(40),
        len: u64::from(l1_size) * 8,
    };
    table.check(file_len, cluster)
}

/// The refcount table.
fn check_refcount_table(
    h: &Fields<'_>,
    file_len: u64,
    cluster_bits: u32,
) -> Result<(), HeaderError> {
    let clusters = h.u32(56);
    if clusters == 0 {
        return Err(HeaderError::NoRefcountTable);
    }
    let max = MAX_REFTABLE_BYTES >> cluster_bits;
    if u64::from(clusters) > max {
        return Err(HeaderError::RefcountTableTooLarge { clusters, max });
    }
    let table = Table {
        field: "refcount_table_offset",
        what: "the refcount table",
        offset: h.u64(48),
        len: u64::from(clusters) << cluster_bits,
    };
    table.check(file_len, 1u64 << cluster_bits)
}

/// The snapshot table (imago does not read it; QEMU checks its place).
fn check_snapshots(h: &Fields<'_>, file_len: u64, cluster: u64) -> Result<(), HeaderError> {
    let count = h.u32(60);
    if count > MAX_SNAPSHOTS {
        return Err(HeaderError::Snapshots(count));
    }
    let table = Table {
        field: "snapshots_offset",
        what: "the snapshot table",
        offset: h.u64(64),
        len: u64::from(count) * SNAPSHOT_ENTRY,
    };
    table.check(file_len, cluster)
}

/// The backing file name: at most 1023 bytes, inside the first cluster and the file.
fn check_backing_name(h: &Fields<'_>, file_len: u64, cluster: u64) -> Result<(), HeaderError> {
    let offset = h.u64(8);
    if offset == 0 {
        return Ok(());
    }
    let size = h.u32(16);
    if size > MAX_BACKING_NAME {
        return Err(HeaderError::BackingNameLength(size));
    }
    let end = offset.saturating_add(u64::from(size));
    if end > cluster {
        return Err(HeaderError::BackingNamePlace {
            offset,
            size,
            cluster,
        });
    }
    if end > file_len {
        return Err(HeaderError::PastEnd {
            field: "backing_file_offset",
            what: "the backing file name",
            offset,
            end,
            len: file_len,
        });
    }
    Ok(())
}

/// A table the header places.
struct Table {
    field: &'static str,
    what: &'static str,
    offset: u64,
    len: u64,
}

impl Table {
    /// The table must start on a cluster boundary and, if it is not empty, inside the file;
    /// its end may pass the file's end by less than a cluster (QEMU's `qemu-img check` allows
    /// a last cluster written in part: a new image's L1 table is often the file's last
    /// bytes), not more.
    fn check(&self, file_len: u64, cluster: u64) -> Result<(), HeaderError> {
        if !self.offset.is_multiple_of(cluster) {
            return Err(HeaderError::Unaligned {
                field: self.field,
                offset: self.offset,
                cluster,
            });
        }
        if self.len == 0 {
            return Ok(());
        }
        let end = self.offset.checked_add(self.len);
        let fits = end.is_some_and(|end| end <= file_len || end - file_len < cluster);
        if self.offset >= file_len || !fits {
            return Err(HeaderError::PastEnd {
                field: self.field,
                what: self.what,
                offset: self.offset,
                end: end.unwrap_or(u64::MAX),
                len: file_len,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
