//! Compressed inputs told apart by their first bytes (xz, gzip, zstd) and decompressed to a
//! bounded size: ISF symbol tables and initramfs archives.
//!
//! Decompression streams into a buffer that stops one byte past the caller's limit, so a
//! stream that expands further (a decompression bomb) is refused having used at most that
//! much memory, whatever size its headers claim. An xz block's dictionary is allocated from
//! the size its header asks for: one above [`XZ_MEMORY_LIMIT_KIB`] is refused before it is
//! allocated, and a zstd frame's window above [`ZSTD_WINDOW_LIMIT`] likewise.

use std::io::Read;

/// The most memory an xz block's decoder may ask for, in KiB (xz -9 uses a 64 MiB dictionary).
pub const XZ_MEMORY_LIMIT_KIB: u32 = 128 << 10;

/// The largest zstd window accepted (zstd -19 uses 8 MiB; --long=27 uses 128 MiB).
pub const ZSTD_WINDOW_LIMIT: u64 = 128 << 20;

/// xz's stream header magic.
pub const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];

/// gzip's magic.
pub const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// zstd's frame magic (0xFD2FB528, little-endian).
pub const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// A compression format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// xz (LZMA2).
    Xz,
    /// gzip (one member or several).
    Gzip,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The format whose magic `head` starts with.
    pub fn sniff(head: &[u8]) -> Option<Compression> {
        [
            (XZ_MAGIC, Compression::Xz),
            (GZIP_MAGIC, Compression::Gzip),
            (ZSTD_MAGIC, Compression::Zstd),
        ]
        .into_iter()
        .find_map(|(magic, c)| head.starts_with(magic).then_some(c))
    }

    /// Its usual name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Xz => "xz",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

/// Why a stream could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The stream is corrupt, truncated or asks for too much memory.
    #[error("its {} data cannot be decompressed: {reason}", .format.name())]
    Corrupt {
        /// The format.
        format: Compression,
        /// The decoder's complaint.
        reason: String,
    },
    /// It decompresses to more than the limit.
    #[error("it is larger than {limit} bytes once decompressed")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
}

/// `bytes` (a `format` stream; concatenated streams or members of it too) decompressed, at
/// most `limit` bytes of it.
pub fn decompress(format: Compression, bytes: &[u8], limit: u64) -> Result<Vec<u8>, UnpackError> {
    let corrupt = |e: &dyn std::fmt::Display| UnpackError::Corrupt {
        format,
        reason: e.to_string(),
    };
    let out = match format {
        Compression::Xz => {
            let reader = lzma_rust2::XzReader::new_mem_limit(bytes, true, XZ_MEMORY_LIMIT_KIB);
            read_bounded(reader, limit)
        }
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(bytes), limit),
        Compression::Zstd => {
            let reader = ruzstd::decoding::StreamingDecoder::new_with_max_window_size(
                bytes,
                ZSTD_WINDOW_LIMIT,
            )
            .map_err(|e| corrupt(&e))?;
            read_bounded(reader, limit)
        }
    };
    out.map_err(|e| corrupt(&e))?
        .ok_or(UnpackError::TooLarge { limit })
}

/// All of `reader`, or None if it holds more than `limit` bytes (having read one more).
pub fn read_bounded(reader: impl Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    reader.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > limit {
        return Ok(None);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn formats_are_told_by_their_magic() {
        assert_eq!(Compression::sniff(&gzip(b"x")), Some(Compression::Gzip));
        assert_eq!(Compression::sniff(XZ_MAGIC), Some(Compression::Xz));
        assert_eq!(
            Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Some(Compression::Zstd)
        );
        assert_eq!(Compression::sniff(b"070701"), None);
        assert_eq!(Compression::sniff(&[]), None);
    }

    #[test]
    fn a_stream_is_decompressed_up_to_the_limit_and_refused_past_it() {
        let data = vec![7u8; 10_000];
        let z = gzip(&data);
        assert_eq!(decompress(Compression::Gzip, &z, 10_000).unwrap(), data);
        let e = decompress(Compression::Gzip, &z, 9_999).unwrap_err();
        assert!(matches!(e, UnpackError::TooLarge { limit: 9_999 }), "{e}");
        let e = decompress(Compression::Gzip, &z[..z.len() / 2], 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("its gzip data"), "{e}");
        let mut zst = Vec::new();
        ruzstd::encoding::compress(
            &data[..],
            &mut zst,
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(Compression::sniff(&zst), Some(Compression::Zstd));
        assert_eq!(decompress(Compression::Zstd, &zst, 10_000).unwrap(), data);
        let e = decompress(Compression::Zstd, &zst, 100).unwrap_err();
        assert!(matches!(e, UnpackError::TooLarge { limit: 100 }), "{e}");
        let e = decompress(Compression::Zstd, ZSTD_MAGIC, 1 << 20).unwrap_err();
        assert!(matches!(e, UnpackError::Corrupt { .. }), "{e}");
    }
}
