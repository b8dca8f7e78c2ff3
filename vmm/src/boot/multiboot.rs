//! Multiboot (v1) kernels, booted the way QEMU's `-kernel` boots them: the kernel's own load
//! addresses (ELF program headers, or the header's a.out kludge), EAX = 0x2BADB002 and EBX =
//! the multiboot information block with the memory map, command line and modules.

use super::bytes::le_u32;

/// The header magic a multiboot kernel carries in its first 8 KiB.
pub const HEADER_MAGIC: u32 = 0x1bad_b002;
/// The value in EAX at entry.
pub const BOOTLOADER_MAGIC: u32 = 0x2bad_b002;
/// How far into the file the header may start.
pub const SEARCH_LIMIT: usize = 8192;

const FLAG_PAGE_ALIGN: u32 = 1 << 0;
const FLAG_MEMORY_INFO: u32 = 1 << 1;
const FLAG_VIDEO_MODE: u32 = 1 << 2;
const FLAG_AOUT_KLUDGE: u32 = 1 << 16;

/// Problems with a multiboot header.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MultibootError {
    /// The header asks for a feature hvprof does not provide.
    #[error("multiboot header requires unsupported features (flags {0:#x})")]
    UnsupportedFlags(u32),
    /// The a.out kludge fields do not describe a valid load.
    #[error("multiboot a.out kludge addresses are inconsistent")]
    BadAddresses,
}

/// The a.out kludge: where to load what, straight from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AoutLoad {
    /// File offset of the first byte to load.
    pub file_offset: usize,
    /// Guest-physical load address.
    pub load_addr: u32,
    /// Number of file bytes to load.
    pub load_size: usize,
    /// Zero-filled bytes after them (bss).
    pub bss_size: u32,
    /// Entry point.
    pub entry: u32,
}

/// A parsed multiboot header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Offset of the header in the file.
    pub offset: usize,
    /// The header's flags.
    pub flags: u32,
    /// Present when flag 16 is set.
    pub aout: Option<AoutLoad>,
}

/// Looks for a valid multiboot header in the first 8 KiB of `bytes`.
pub fn find_header(bytes: &[u8]) -> Result<Option<Header>, MultibootError> {
    let limit = bytes.len().min(SEARCH_LIMIT);
    let mut off = 0;
    while off + 12 <= limit {
        let (Some(magic), Some(flags), Some(sum)) = (
            le_u32(bytes, off),
            le_u32(bytes, off + 4),
            le_u32(bytes, off + 8),
        ) else {
            break;
        };
        if magic == HEADER_MAGIC && magic.wrapping_add(flags).wrapping_add(sum) == 0 {
            return parse_header(bytes, off, flags).map(Some);
        }
        off += 4;
    }
    Ok(None)
}

fn parse_header(bytes: &[u8], offset: usize, flags: u32) -> Result<Header, MultibootError> {
    // Bits 0-15 are requirements; we honour 0 and 1, and accept 2 (video) as QEMU does by
    // leaving the text console in place.
    let required = flags & 0xffff;
    let known = FLAG_PAGE_ALIGN | FLAG_MEMORY_INFO | FLAG_VIDEO_MODE;
    if required & !known != 0 {
        return Err(MultibootError::UnsupportedFlags(flags));
    }
    if flags & FLAG_AOUT_KLUDGE == 0 {
        return Ok(Header {
            offset,
            flags,
            aout: None,
        });
    }
    let field = |i: usize| le_u32(bytes, offset + 12 + 4 * i).ok_or(MultibootError::BadAddresses);
    let (header_addr, load_addr, load_end, bss_end, entry) =
        (field(0)?, field(1)?, field(2)?, field(3)?, field(4)?);
    if load_addr > header_addr {
        return Err(MultibootError::BadAddresses);
    }
    let file_offset = offset
        .checked_sub(
            usize::try_from(header_addr - load_addr).map_err(|_| MultibootError::BadAddresses)?,
        )
        .ok_or(MultibootError::BadAddresses)?;
    let available = bytes.len() - file_offset;
    let load_size = if load_end == 0 {
        available
    } else {
        let size = load_end
            .checked_sub(load_addr)
            .ok_or(MultibootError::BadAddresses)?;
        let size = usize::try_from(size).map_err(|_| MultibootError::BadAddresses)?;
        if size > available {
            return Err(MultibootError::BadAddresses);
        }
        size
    };
    let load_end_addr = u64::from(load_addr) + load_size as u64;
    let bss_size = if bss_end == 0 {
        0
    } else {
        u64::from(bss_end)
            .checked_sub(load_end_addr)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(MultibootError::BadAddresses)?
    };
    Ok(Header {
        offset,
        flags,
        aout: Some(AoutLoad {
            file_offset,
            load_addr,
            load_size,
            bss_size,
            entry,
        }),
    })
}

/// Multiboot information block layout (offsets into the block).
pub mod info {
    /// `flags` field.
    pub const FLAGS: u64 = 0;
    /// `mem_lower` (KiB below 640 KiB).
    pub const MEM_LOWER: u64 = 4;
    /// `mem_upper` (KiB above 1 MiB).
    pub const MEM_UPPER: u64 = 8;
    /// `cmdline` physical address.
    pub const CMDLINE: u64 = 16;
    /// `mods_count`.
    pub const MODS_COUNT: u64 = 20;
    /// `mods_addr`.
    pub const MODS_ADDR: u64 = 24;
    /// `mmap_length`.
    pub const MMAP_LENGTH: u64 = 44;
    /// `mmap_addr`.
    pub const MMAP_ADDR: u64 = 48;
    /// `boot_loader_name`.
    pub const LOADER_NAME: u64 = 64;
    /// Size of the block we write.
    pub const SIZE: u64 = 88;
    /// flags: mem_lower/mem_upper valid.
    pub const F_MEM: u32 = 1 << 0;
    /// flags: cmdline valid.
    pub const F_CMDLINE: u32 = 1 << 2;
    /// flags: mods valid.
    pub const F_MODS: u32 = 1 << 3;
    /// flags: mmap valid.
    pub const F_MMAP: u32 = 1 << 6;
    /// flags: boot_loader_name valid.
    pub const F_LOADER_NAME: u32 = 1 << 9;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(flags: u32, extra: &[u32]) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        let words = [
            HEADER_MAGIC,
            flags,
            0u32.wrapping_sub(HEADER_MAGIC).wrapping_sub(flags),
        ];
        for (i, w) in words.iter().chain(extra).enumerate() {
            f[16 + 4 * i..20 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        f.resize(0x400, 0x90);
        f
    }

    #[test]
    fn header_is_found_at_a_four_byte_boundary() {
        let h = find_header(&header(FLAG_MEMORY_INFO, &[]))
            .unwrap()
            .unwrap();
        assert_eq!(h.offset, 16);
        assert_eq!(h.aout, None);
    }

    #[test]
    fn bad_checksum_is_not_a_header() {
        let mut f = header(0, &[]);
        f[24] ^= 1;
        assert_eq!(find_header(&f), Ok(None));
    }

    #[test]
    fn unsupported_required_flag_is_an_error() {
        assert_eq!(
            find_header(&header(1 << 3, &[])),
            Err(MultibootError::UnsupportedFlags(1 << 3))
        );
    }

    #[test]
    fn aout_kludge_gives_load_addresses() {
        // header at file 16 = address 0x100010; load from file 0 at 0x100000.
        let f = header(
            FLAG_AOUT_KLUDGE,
            &[0x10_0010, 0x10_0000, 0x10_0200, 0x10_1000, 0x10_0040],
        );
        let h = find_header(&f).unwrap().unwrap();
        assert_eq!(
            h.aout,
            Some(AoutLoad {
                file_offset: 0,
                load_addr: 0x10_0000,
                load_size: 0x200,
                bss_size: 0xe00,
                entry: 0x10_0040
            })
        );
    }

    #[test]
    fn aout_kludge_past_end_of_file_is_rejected() {
        let f = header(
            FLAG_AOUT_KLUDGE,
            &[0x10_0010, 0x10_0000, 0x20_0000, 0, 0x10_0040],
        );
        assert_eq!(find_header(&f), Err(MultibootError::BadAddresses));
    }
}
