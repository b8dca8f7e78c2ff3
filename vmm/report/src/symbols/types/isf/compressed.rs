//! ISF files as they are shipped: plain JSON, xz (Volatility's packs, JPCERTCC's tables) or
//! gzip, told apart by their first bytes and decompressed to at most [`MAX_JSON_BYTES`] by
//! [`crate::unpack`] (which bounds the memory a bomb or a lying header can take).

use super::IsfError;
use crate::unpack::{decompress, Compression, UnpackError};
pub use crate::unpack::{GZIP_MAGIC, XZ_MAGIC, XZ_MEMORY_LIMIT_KIB};

/// The most bytes an ISF file may decompress to. The largest real tables are Linux kernels'
/// from dwarf2json, tens of MiB; Windows kernels' are about 6 MiB.
pub const MAX_JSON_BYTES: u64 = 256 << 20;

/// How an ISF file is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// Plain JSON.
    Json,
    /// xz.
    Xz,
    /// gzip.
    Gzip,
}

impl Packing {
    /// How `head` (a file's first bytes) is packed: xz or gzip by their magic, JSON when its
    /// first byte other than white space (after an optional UTF-8 byte-order mark) is `{`.
    pub fn sniff(head: &[u8]) -> Option<Packing> {
        match Compression::sniff(head) {
            Some(Compression::Xz) => return Some(Packing::Xz),
            Some(Compression::Gzip) => return Some(Packing::Gzip),
            Some(Compression::Zstd) | None => {}
        }
        let text = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
        match text.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Some(Packing::Json),
            _ => None,
        }
    }
}

/// The JSON in `bytes`, decompressed if it is packed, at most `limit` bytes of it.
pub fn unpack(bytes: &[u8], limit: u64) -> Result<std::borrow::Cow<'_, [u8]>, IsfError> {
    use std::borrow::Cow;
    let json = match Packing::sniff(bytes) {
        Some(Packing::Json) => {
            if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
                return Err(IsfError::TooLarge { limit });
            }
            return Ok(Cow::Borrowed(bytes));
        }
        Some(Packing::Xz) => decompress(Compression::Xz, bytes, limit),
        Some(Packing::Gzip) => decompress(Compression::Gzip, bytes, limit),
        None => return Err(IsfError::NotJson),
    };
    let json = json.map_err(|e| match e {
        UnpackError::TooLarge { limit } => IsfError::TooLarge { limit },
        UnpackError::Corrupt {
            format: Compression::Gzip,
            reason,
        } => IsfError::Gzip(reason),
        UnpackError::Corrupt { reason, .. } => IsfError::Xz(reason),
    })?;
    if Packing::sniff(&json) != Some(Packing::Json) {
        return Err(IsfError::NotJson);
    }
    Ok(Cow::Owned(json))
}
