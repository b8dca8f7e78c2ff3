//! A small ELF reader for kernels: ELF32 and ELF64 little-endian x86 images, their loadable
//! segments and the Xen PVH entry note. It is a pure function of the file's bytes.

use super::bytes::{le_u16, le_u32, le_u64};

/// ELF note type of XEN_ELFNOTE_PHYS32_ENTRY.
pub const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const EM_386: u16 = 3;
const EM_X86_64: u16 = 62;

/// Problems with an ELF file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    /// The file ends before the ELF header does.
    #[error("ELF header is truncated")]
    TruncatedHeader,
    /// Not 32- or 64-bit little-endian.
    #[error("unsupported ELF class or byte order (need little-endian ELF32 or ELF64)")]
    UnsupportedClass,
    /// Not an x86 executable.
    #[error("ELF machine {0} is not x86 or x86-64")]
    UnsupportedMachine(u16),
    /// The program header table lies outside the file.
    #[error("program header table lies outside the file")]
    BadProgramHeaders,
    /// A segment's file bytes lie outside the file.
    #[error("segment {0} lies outside the file")]
    SegmentOutsideFile(usize),
    /// A segment's memory size is smaller than its file size.
    #[error("segment {0} has a memory size smaller than its file size")]
    SegmentSizes(usize),
    /// The PVH note's descriptor is not a 4- or 8-byte address below 4 GiB.
    #[error("malformed XEN_ELFNOTE_PHYS32_ENTRY note")]
    BadPvhNote,
}

/// A loadable segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Offset of its bytes in the file.
    pub file_offset: usize,
    /// Bytes present in the file.
    pub file_size: usize,
    /// Guest-physical load address.
    pub paddr: u64,
    /// Size in memory (the rest is zero-filled).
    pub mem_size: u64,
}

/// What an ELF kernel contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfImage {
    /// True for ELF64.
    pub is_64: bool,
    /// The header's entry point.
    pub entry: u64,
    /// The PT_LOAD segments.
    pub segments: Vec<Segment>,
    /// The 32-bit PVH entry, when the image has the note.
    pub pvh_entry: Option<u32>,
}

/// True when `bytes` starts with the ELF magic.
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Parses an ELF kernel image.
pub fn parse(bytes: &[u8]) -> Result<ElfImage, ElfError> {
    if bytes.len() < 52 || !is_elf(bytes) {
        return Err(ElfError::TruncatedHeader);
    }
    let is_64 = match (bytes[4], bytes[5]) {
        (1, 1) => false,
        (2, 1) => true,
        _ => return Err(ElfError::UnsupportedClass),
    };
    if is_64 && bytes.len() < 64 {
        return Err(ElfError::TruncatedHeader);
    }
    let machine = le_u16(bytes, 18).ok_or(ElfError::TruncatedHeader)?;
    if machine != EM_386 && machine != EM_X86_64 {
        return Err(ElfError::UnsupportedMachine(machine));
    }
    let (entry, phoff, phentsize, phnum) = if is_64 {
        (
            le_u64(bytes, 24),
            le_u64(bytes, 32),
            le_u16(bytes, 54),
            le_u16(bytes, 56),
        )
    } else {
        (
            le_u32(bytes, 24).map(u64::from),
            le_u32(bytes, 28).map(u64::from),
            le_u16(bytes, 42),
            le_u16(bytes, 44),
        )
    };
    let (entry, phoff, phentsize, phnum) = match (entry, phoff, phentsize, phnum) {
        (Some(e), Some(o), Some(s), Some(n)) => (e, o, usize::from(s), usize::from(n)),
        _ => return Err(ElfError::TruncatedHeader),
    };
    let min_entsize = if is_64 { 56 } else { 32 };
    if phnum > 0 && phentsize < min_entsize {
        return Err(ElfError::BadProgramHeaders);
    }
    let table_end = usize::try_from(phoff)
        .ok()
        .and_then(|o| phentsize.checked_mul(phnum)?.checked_add(o));
    let phoff = match table_end {
        Some(end) if end <= bytes.len() => usize::try_from(phoff).unwrap_or(usize::MAX),
        _ => return Err(ElfError::BadProgramHeaders),
    };

    let mut image = ElfImage {
        is_64,
        entry,
        segments: Vec::new(),
        pvh_entry: None,
    };
    for i in 0..phnum {
        let ph = &bytes[phoff + i * phentsize..phoff + (i + 1) * phentsize];
        let seg = program_header(ph, is_64).ok_or(ElfError::BadProgramHeaders)?;
        let in_file = seg
            .file_offset
            .checked_add(seg.file_size)
            .is_some_and(|end| end <= bytes.len());
        if !in_file {
            return Err(ElfError::SegmentOutsideFile(i));
        }
        match seg.kind {
            PT_LOAD => {
                if seg.mem_size < seg.file_size as u64 {
                    return Err(ElfError::SegmentSizes(i));
                }
                image.segments.push(Segment {
                    file_offset: seg.file_offset,
                    file_size: seg.file_size,
                    paddr: seg.paddr,
                    mem_size: seg.mem_size,
                });
            }
            PT_NOTE => {
                let notes = &bytes[seg.file_offset..seg.file_offset + seg.file_size];
                if let Some(entry) = find_pvh_note(notes)? {
                    image.pvh_entry = Some(entry);
                }
            }
            _ => {}
        }
    }
    Ok(image)
}

struct RawPh {
    kind: u32,
    file_offset: usize,
    file_size: usize,
    paddr: u64,
    mem_size: u64,
}

fn program_header(ph: &[u8], is_64: bool) -> Option<RawPh> {
    let (kind, off, paddr, filesz, memsz) = if is_64 {
        (
            le_u32(ph, 0)?,
            le_u64(ph, 8)?,
            le_u64(ph, 24)?,
            le_u64(ph, 32)?,
            le_u64(ph, 40)?,
        )
    } else {
        (
            le_u32(ph, 0)?,
            u64::from(le_u32(ph, 4)?),
            u64::from(le_u32(ph, 12)?),
            u64::from(le_u32(ph, 16)?),
            u64::from(le_u32(ph, 20)?),
        )
    };
    Some(RawPh {
        kind,
        file_offset: usize::try_from(off).ok()?,
        file_size: usize::try_from(filesz).ok()?,
        paddr,
        mem_size: memsz,
    })
}

/// Walks a note segment looking for the Xen PVH entry note.
fn find_pvh_note(mut notes: &[u8]) -> Result<Option<u32>, ElfError> {
    let align4 = |n: usize| n.checked_add(3).map(|v| v & !3);
    while notes.len() >= 12 {
        let namesz = usize::try_from(le_u32(notes, 0).unwrap_or(0)).unwrap_or(usize::MAX);
        let descsz = usize::try_from(le_u32(notes, 4).unwrap_or(0)).unwrap_or(usize::MAX);
        let kind = le_u32(notes, 8).unwrap_or(0);
        let name_end = align4(namesz).and_then(|n| n.checked_add(12));
        let desc_end = name_end.and_then(|n| n.checked_add(align4(descsz)?));
        let (Some(name_end), Some(desc_end)) = (name_end, desc_end) else {
            return Ok(None);
        };
        if desc_end > notes.len() {
            return Ok(None);
        }
        let name = &notes[12..12 + namesz];
        if kind == XEN_ELFNOTE_PHYS32_ENTRY && name.strip_suffix(b"\0").unwrap_or(name) == b"Xen" {
            let desc = &notes[name_end..name_end + descsz];
            let entry = match descsz {
                4 => le_u32(desc, 0).map(u64::from),
                8 => le_u64(desc, 0),
                _ => None,
            };
            return entry
                .and_then(|e| u32::try_from(e).ok())
                .map(Some)
                .ok_or(ElfError::BadPvhNote);
        }
        notes = &notes[desc_end..];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an ELF32 with one PT_LOAD and, optionally, a PVH note.
    pub(crate) fn elf32(pvh: Option<u32>) -> Vec<u8> {
        let mut f = vec![0u8; 0x200];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 1;
        f[5] = 1;
        f[6] = 1;
        f[16..18].copy_from_slice(&2u16.to_le_bytes());
        f[18..20].copy_from_slice(&EM_386.to_le_bytes());
        f[24..28].copy_from_slice(&0x10_0000u32.to_le_bytes());
        f[28..32].copy_from_slice(&52u32.to_le_bytes());
        f[42..44].copy_from_slice(&32u16.to_le_bytes());
        f[44..46].copy_from_slice(&2u16.to_le_bytes());
        // PT_LOAD: file 0x100..0x140 at 1 MiB, 0x80 bytes in memory.
        let load = [PT_LOAD, 0x100, 0x10_0000, 0x10_0000, 0x40, 0x80, 5, 0x1000];
        for (i, v) in load.iter().enumerate() {
            f[52 + i * 4..56 + i * 4].copy_from_slice(&v.to_le_bytes());
        }
        // PT_NOTE at 0x180.
        let note = [PT_NOTE, 0x180, 0, 0, 20, 20, 4, 4];
        for (i, v) in note.iter().enumerate() {
            f[84 + i * 4..88 + i * 4].copy_from_slice(&v.to_le_bytes());
        }
        let kind = if pvh.is_some() {
            XEN_ELFNOTE_PHYS32_ENTRY
        } else {
            99
        };
        let n = &mut f[0x180..0x194];
        n[0..4].copy_from_slice(&4u32.to_le_bytes());
        n[4..8].copy_from_slice(&4u32.to_le_bytes());
        n[8..12].copy_from_slice(&kind.to_le_bytes());
        n[12..16].copy_from_slice(b"Xen\0");
        n[16..20].copy_from_slice(&pvh.unwrap_or(0).to_le_bytes());
        f
    }

    #[test]
    fn elf32_with_pvh_note_is_parsed() {
        let img = parse(&elf32(Some(0x10_0010))).unwrap();
        assert!(!img.is_64);
        assert_eq!(img.pvh_entry, Some(0x10_0010));
        assert_eq!(
            img.segments,
            vec![Segment {
                file_offset: 0x100,
                file_size: 0x40,
                paddr: 0x10_0000,
                mem_size: 0x80
            }]
        );
    }

    #[test]
    fn elf_without_the_note_has_no_pvh_entry() {
        assert_eq!(parse(&elf32(None)).unwrap().pvh_entry, None);
    }

    #[test]
    fn truncated_elf_is_rejected() {
        let f = elf32(Some(1));
        assert_eq!(parse(&f[..40]), Err(ElfError::TruncatedHeader));
        assert_eq!(parse(&f[..0x150]), Err(ElfError::SegmentOutsideFile(1)));
    }

    #[test]
    fn segment_outside_file_is_rejected() {
        let mut f = elf32(None);
        f[52 + 16..52 + 20].copy_from_slice(&0x1000u32.to_le_bytes());
        assert_eq!(parse(&f), Err(ElfError::SegmentOutsideFile(0)));
    }

    #[test]
    fn foreign_machine_is_rejected() {
        let mut f = elf32(None);
        f[18..20].copy_from_slice(&40u16.to_le_bytes());
        assert_eq!(parse(&f), Err(ElfError::UnsupportedMachine(40)));
    }

    #[test]
    fn huge_program_header_count_is_rejected() {
        let mut f = elf32(None);
        f[44..46].copy_from_slice(&0xffffu16.to_le_bytes());
        assert_eq!(parse(&f), Err(ElfError::BadProgramHeaders));
    }
}
