//! What identifies an image mapped in guest memory: its name (the export directory's) and the
//! PDB its CodeView record names (name, GUID, age: what a symbol server files it under). Read
//! through [`Memory`], every field checked against the image and every string length-limited.

use super::{le32, Image};
use crate::mem::Memory;

/// Longest name read (an export name or a PDB path).
pub const MAX_NAME: usize = 256;
/// Debug directory entries looked at.
const MAX_DEBUG_ENTRIES: u32 = 16;
const DEBUG_ENTRY_LEN: u32 = 28;
const DEBUG_TYPE_CODEVIEW: u32 = 2;
/// 'RSDS', GUID, age, then the path.
const RSDS_HEADER_LEN: u32 = 24;

/// The PDB a CodeView (RSDS) record names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeView {
    /// The PDB's file name, directories dropped.
    pub pdb: String,
    /// The GUID as 32 upper-case hex digits in symbol-server order.
    pub guid: String,
    /// The age.
    pub age: u32,
}

/// A NUL-terminated ASCII string of at most [`MAX_NAME`] bytes at `rva`, cut at the image's end
/// and at the first byte that is not printable ASCII.
fn ascii_at(mem: &mut dyn Memory, image: &Image, rva: u32) -> Option<String> {
    let room = image.size.checked_sub(rva)?;
    let len = (room as usize).min(MAX_NAME);
    let mut buf = [0u8; MAX_NAME];
    // The string may end before an unmapped page: read up to the page end first.
    let addr = image.base + u64::from(rva);
    let first = len.min(usize::try_from(super::PAGE - addr % super::PAGE).unwrap_or(len));
    mem.read(addr, &mut buf[..first]).ok()?;
    let mut n = first;
    if !buf[..first].contains(&0)
        && first < len
        && mem.read(addr + first as u64, &mut buf[first..len]).is_ok()
    {
        n = len;
    }
    let s: String = buf[..n]
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    (!s.is_empty() && s.chars().all(|c| c.is_ascii_graphic() || c == ' ')).then_some(s)
}

/// The last path component (either separator).
fn file_name(path: &str) -> &str {
    path.rsplit(['\\', '/']).next().unwrap_or(path)
}

/// A PDB GUID as symbol servers write it (32 upper-case hex digits): Data1, Data2, Data3 as
/// little-endian numbers, then the last eight bytes as they are.
pub fn guid_hex(raw: &[u8; 16]) -> String {
    let d1 = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let d2 = u16::from_le_bytes([raw[4], raw[5]]);
    let d3 = u16::from_le_bytes([raw[6], raw[7]]);
    let mut s = format!("{d1:08X}{d2:04X}{d3:04X}");
    for b in &raw[8..] {
        s.push_str(&format!("{b:02X}"));
    }
    s
}

impl Image {
    /// The name its export directory gives it (`ntoskrnl.exe`, `hal.dll`), if it has one.
    pub fn export_name(&self, mem: &mut dyn Memory) -> Option<String> {
        if self.exports.size < 40 {
            return None;
        }
        // IMAGE_EXPORT_DIRECTORY.Name is the RVA at offset 12.
        let name_rva = mem
            .read_u32(self.base + u64::from(self.exports.rva) + 12)
            .ok()?;
        ascii_at(mem, self, name_rva)
    }

    /// Its CodeView (RSDS) record, from the first CODEVIEW entry of its debug directory.
    pub fn codeview(&self, mem: &mut dyn Memory) -> Option<CodeView> {
        let entries = (self.debug.size / DEBUG_ENTRY_LEN).min(MAX_DEBUG_ENTRIES);
        for i in 0..entries {
            let mut e = [0u8; DEBUG_ENTRY_LEN as usize];
            let at = self.base + u64::from(self.debug.rva + i * DEBUG_ENTRY_LEN);
            mem.read(at, &mut e).ok()?;
            let field = |o: usize| le32(&e, o);
            // Type at 12, SizeOfData at 16, AddressOfRawData (an RVA) at 20.
            let (kind, size, rva) = (field(12), field(16), field(20));
            if kind != DEBUG_TYPE_CODEVIEW {
                continue;
            }
            if size < RSDS_HEADER_LEN + 1 || rva.checked_add(size)? > self.size {
                return None;
            }
            let mut head = [0u8; RSDS_HEADER_LEN as usize];
            mem.read(self.base + u64::from(rva), &mut head).ok()?;
            if &head[..4] != b"RSDS" {
                return None;
            }
            let guid: [u8; 16] = head[4..20].try_into().ok()?;
            let age = le32(&head, 20);
            let path = ascii_at(mem, self, rva + RSDS_HEADER_LEN)?;
            return Some(CodeView {
                pdb: file_name(&path).to_string(),
                guid: guid_hex(&guid),
                age,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testimage::ImageBuilder;
    use crate::Regions;

    const BASE: u64 = 0xffff_f800_0000_0000;

    /// An image with an export directory naming `name` and a CodeView record for `pdb_path`.
    fn image(name: &[u8], pdb_path: &[u8]) -> Regions {
        image_built(ImageBuilder::new(0x2000), name, pdb_path)
    }

    /// The same, from `builder` (an x86-64 or an x86 image).
    fn image_built(builder: ImageBuilder, name: &[u8], pdb_path: &[u8]) -> Regions {
        let mut export = vec![0u8; 40];
        export[12..16].copy_from_slice(&0x1100u32.to_le_bytes());
        let mut debug = vec![0u8; 2 * 28];
        // A first entry of another type, then CODEVIEW.
        debug[12..16].copy_from_slice(&13u32.to_le_bytes());
        debug[28 + 12..28 + 16].copy_from_slice(&2u32.to_le_bytes());
        let rsds_len = u32::try_from(24 + pdb_path.len() + 1).unwrap();
        debug[28 + 16..28 + 20].copy_from_slice(&rsds_len.to_le_bytes());
        debug[28 + 20..28 + 24].copy_from_slice(&0x1300u32.to_le_bytes());
        let mut rsds = b"RSDS".to_vec();
        rsds.extend([
            0x78, 0x56, 0x34, 0x12, 0xbc, 0x9a, 0xf0, 0xde, 1, 2, 3, 4, 5, 6, 7, 8,
        ]);
        rsds.extend(3u32.to_le_bytes());
        rsds.extend(pdb_path);
        rsds.push(0);
        let mut bytes = builder
            .directory(0, 0x1000, 40)
            .directory(6, 0x1200, 56)
            .bytes(0x1000, &export)
            .bytes(0x1100, name)
            .bytes(0x1200, &debug)
            .bytes(0x1300, &rsds)
            .build();
        bytes[0x1100 + name.len()] = 0;
        Regions::new().with(BASE, bytes)
    }

    #[test]
    fn reads_the_export_name_and_the_codeview_record() {
        let mut mem = image(b"ntoskrnl.exe", b"d:\\build\\ntkrnlmp.pdb");
        let im = Image::read(&mut mem, BASE).unwrap();
        assert_eq!(im.export_name(&mut mem).as_deref(), Some("ntoskrnl.exe"));
        assert_eq!(
            im.codeview(&mut mem),
            Some(CodeView {
                pdb: "ntkrnlmp.pdb".into(),
                guid: "123456789ABCDEF00102030405060708".into(),
                age: 3,
            })
        );
    }

    /// A WOW64 process's x86 DLL (PE32) is named and identified like an x86-64 one.
    #[test]
    fn an_x86_image_has_its_export_name_and_codeview_record_read_the_same_way() {
        let builder = ImageBuilder::new(0x2000).pe32();
        let mut mem = image_built(builder, b"KERNEL32.dll", b"wkernel32.pdb");
        let im = Image::read(&mut mem, BASE).unwrap();
        assert_eq!(im.machine, crate::pe::Machine::I386);
        assert_eq!(im.export_name(&mut mem).as_deref(), Some("KERNEL32.dll"));
        assert_eq!(
            im.codeview(&mut mem).map(|c| (c.pdb, c.age)),
            Some(("wkernel32.pdb".into(), 3))
        );
    }

    #[test]
    fn names_that_are_not_printable_or_run_long_are_cut_or_refused() {
        let mut mem = image(b"bad\x01name", b"x.pdb");
        let im = Image::read(&mut mem, BASE).unwrap();
        assert_eq!(im.export_name(&mut mem), None);
        let long = vec![b'a'; 600];
        let mut mem = image(&long, b"x.pdb");
        let im = Image::read(&mut mem, BASE).unwrap();
        assert_eq!(im.export_name(&mut mem).map(|n| n.len()), Some(MAX_NAME));
    }

    #[test]
    fn an_image_without_directories_has_neither() {
        let mut mem = Regions::new().with(BASE, ImageBuilder::new(0x2000).build());
        let im = Image::read(&mut mem, BASE).unwrap();
        assert_eq!(
            (im.export_name(&mut mem), im.codeview(&mut mem)),
            (None, None)
        );
    }
}
