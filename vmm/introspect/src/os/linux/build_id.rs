//! The GNU build id of an ELF file, read from the first page a process has mapped of it:
//! the ELF header, its program headers and the `PT_NOTE` segments that lie in that page
//! (linkers put them right after the program headers, in the first page, which the loader
//! and ld.so read through the mapping). What the guest mapped there is hostile: only
//! 64-bit little-endian ELF is read, every offset and size is checked against the bytes
//! given, and a build id longer than [`MAX_BUILD_ID`] bytes is refused.

use crate::bytes::{u16_at, u32_at, u64_at};

/// The longest build id taken (GNU ld writes 20 bytes for sha1, 16 for md5; `--build-id=0x..`
/// any length).
pub const MAX_BUILD_ID: usize = 64;
/// Most program headers looked at.
const MAX_PHDRS: usize = 64;
/// `PT_NOTE`.
const PT_NOTE: u32 = 4;
/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;

/// The build id in `head`, the first bytes of an ELF file (as mapped at file offset 0), or
/// None: not ELF64 little-endian, no `PT_NOTE` within `head`, or no `NT_GNU_BUILD_ID` note.
pub fn build_id(head: &[u8]) -> Option<Vec<u8>> {
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(head, 0x20)?).ok()?;
    let phentsize = usize::from(u16_at(head, 0x36)?);
    let phnum = usize::from(u16_at(head, 0x38)?);
    if phentsize < 0x38 {
        return None;
    }
    for i in 0..phnum.min(MAX_PHDRS) {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(head, ph)? != PT_NOTE {
            continue;
        }
        let offset = usize::try_from(u64_at(head, ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(head, ph + 0x20)?).ok()?;
        let Some(notes) = offset
            .checked_add(size)
            .and_then(|end| head.get(offset..end))
        else {
            continue;
        };
        // A PT_NOTE's alignment is 4 or 8 (p_align); notes are padded to it.
        let align = match u64_at(head, ph + 0x30)? {
            8 => 8,
            _ => 4,
        };
        if let Some(id) = gnu_build_id(notes, align) {
            return Some(id);
        }
    }
    None
}

/// The `NT_GNU_BUILD_ID` note among `notes` (name size, descriptor size, type, the name and
/// the descriptor, each starting at a multiple of `align` from the notes' start).
fn gnu_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    let pad = |n: usize| n.checked_add(align - 1).map(|n| n & !(align - 1));
    let mut at = 0usize;
    while at < notes.len() {
        let namesz = usize::try_from(u32_at(notes, at)?).ok()?;
        let descsz = usize::try_from(u32_at(notes, at + 4)?).ok()?;
        let kind = u32_at(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = pad(name_at.checked_add(namesz)?)?;
        let next = pad(desc_at.checked_add(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            if descsz == 0 || descsz > MAX_BUILD_ID {
                return None;
            }
            return Some(notes.get(desc_at..desc_at + descsz)?.to_vec());
        }
        at = next;
    }
    None
}

/// `id` as lowercase hexadecimal, as `readelf -n` and debuginfod name it.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 header with one PT_NOTE at 0x40 + 0x38 holding `notes`.
    fn elf(notes: &[u8], align: u64) -> Vec<u8> {
        let mut b = vec![0u8; 0x78];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let ph = 0x40;
        b[ph..ph + 4].copy_from_slice(&PT_NOTE.to_le_bytes());
        b[ph + 8..ph + 16].copy_from_slice(&0x78u64.to_le_bytes());
        b[ph + 0x20..ph + 0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        b[ph + 0x30..ph + 0x38].copy_from_slice(&align.to_le_bytes());
        b.extend_from_slice(notes);
        b
    }

    fn note(name: &[u8], kind: u32, desc: &[u8], align: usize) -> Vec<u8> {
        let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(align), 0);
        let mut n = Vec::new();
        n.extend_from_slice(&u32::try_from(name.len()).unwrap().to_le_bytes());
        n.extend_from_slice(&u32::try_from(desc.len()).unwrap().to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        n.extend_from_slice(name);
        pad(&mut n);
        n.extend_from_slice(desc);
        pad(&mut n);
        n
    }

    #[test]
    fn the_gnu_note_after_another_gives_the_id() {
        let id: Vec<u8> = (1..=20).collect();
        for align in [4, 8] {
            let mut notes = note(b"GNU\0", 1, &[0; 16], align); // NT_GNU_ABI_TAG
            notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &id, align));
            assert_eq!(build_id(&elf(&notes, align as u64)), Some(id.clone()));
        }
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }

    #[test]
    fn other_notes_truncation_and_other_files_give_none() {
        let id = [7u8; 20];
        let other = note(b"XYZ\0", NT_GNU_BUILD_ID, &id, 4);
        assert_eq!(build_id(&elf(&other, 4)), None, "another vendor's note");
        let good = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &id, 4), 4);
        for cut in 0..good.len() {
            assert_eq!(build_id(&good[..cut]), None, "cut at {cut}");
        }
        let mut elf32 = good.clone();
        elf32[4] = 1;
        assert_eq!(build_id(&elf32), None);
        let long = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 65], 4), 4);
        assert_eq!(build_id(&long), None, "longer than MAX_BUILD_ID");
        let mut huge = good;
        huge[0x40 + 0x20..0x40 + 0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(build_id(&huge), None, "a size past the bytes");
    }
}
