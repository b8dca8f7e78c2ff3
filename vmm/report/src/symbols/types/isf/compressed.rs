//! ISF files as they are shipped: plain JSON, xz (Volatility's packs, JPCERTCC's tables) or
//! gzip, told apart by their first bytes and decompressed to a bounded size.
//!
//! Decompression streams into a buffer that stops one byte past [`MAX_JSON_BYTES`]: a file
//! that expands further (a decompression bomb) is refused having used at most that much
//! memory, whatever size its headers claim. An xz stream's dictionary is allocated by the
//! decoder from the size its block header asks for: one above [`XZ_MEMORY_LIMIT_KIB`] is
//! refused before it is allocated.

use std::io::Read;

use super::IsfError;

/// The most bytes an ISF file may decompress to. The largest real tables are Linux kernels'
/// from dwarf2json, tens of MiB; Windows kernels' are about 6 MiB.
pub const MAX_JSON_BYTES: u64 = 256 << 20;

/// The most memory an xz block's decoder may ask for, in KiB (xz -9 uses a 64 MiB dictionary).
pub const XZ_MEMORY_LIMIT_KIB: u32 = 128 << 10;

/// xz's stream header magic.
pub const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];

/// gzip's magic.
pub const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

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
        if head.starts_with(XZ_MAGIC) {
            return Some(Packing::Xz);
        }
        if head.starts_with(GZIP_MAGIC) {
            return Some(Packing::Gzip);
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
        Some(Packing::Xz) => {
            let reader = lzma_rust2::XzReader::new_mem_limit(bytes, true, XZ_MEMORY_LIMIT_KIB);
            read_bounded(reader, limit).map_err(|e| IsfError::Xz(e.to_string()))?
        }
        Some(Packing::Gzip) => {
            let reader = flate2::read::MultiGzDecoder::new(bytes);
            read_bounded(reader, limit).map_err(|e| IsfError::Gzip(e.to_string()))?
        }
        None => return Err(IsfError::NotJson),
    };
    let json = json.ok_or(IsfError::TooLarge { limit })?;
    if Packing::sniff(&json) != Some(Packing::Json) {
        return Err(IsfError::NotJson);
    }
    Ok(Cow::Owned(json))
}

/// All of `reader`, or None if it holds more than `limit` bytes (having read one more).
fn read_bounded(reader: impl Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    reader.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > limit {
        return Ok(None);
    }
    Ok(Some(out))
}
