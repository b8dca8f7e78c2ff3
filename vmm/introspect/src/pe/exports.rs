//! Looking up an export by name in an image mapped in guest memory: how a debugger finds
//! `PsLoadedModuleList` in ntoskrnl. The name table is searched by bisection, as the PE format
//! keeps it sorted; a guest that does not sort it only makes the lookup miss. Every index and
//! RVA is checked against the tables' counts and the image's size.

use std::cmp::Ordering;

use super::{le32, Image};
use crate::mem::Memory;

/// Longest export name compared.
const MAX_EXPORT_NAME: usize = 128;
/// IMAGE_EXPORT_DIRECTORY's length.
const EXPORT_DIRECTORY_LEN: u32 = 40;

impl Image {
    /// The address of the export called `name`, or None if the image has no such export, if
    /// it is a forwarder (its code is another image's), or if the tables are malformed.
    pub fn export(&self, mem: &mut dyn Memory, name: &str) -> Option<u64> {
        if self.exports.size < EXPORT_DIRECTORY_LEN || name.len() > MAX_EXPORT_NAME {
            return None;
        }
        let mut dir = [0u8; EXPORT_DIRECTORY_LEN as usize];
        mem.read(self.base + u64::from(self.exports.rva), &mut dir)
            .ok()?;
        let (functions, names) = (le32(&dir, 20), le32(&dir, 24));
        let (function_rvas, name_rvas, ordinals) = (le32(&dir, 28), le32(&dir, 32), le32(&dir, 36));
        // Each table must lie inside the image; then no index below its count leaves it.
        let fits = |rva: u32, count: u32, width: u32| {
            count
                .checked_mul(width)
                .and_then(|len| rva.checked_add(len))
                .is_some_and(|end| end <= self.size)
        };
        if !fits(function_rvas, functions, 4)
            || !fits(name_rvas, names, 4)
            || !fits(ordinals, names, 2)
        {
            return None;
        }
        let at = |rva: u32, index: u32, width: u32| self.base + u64::from(rva + index * width);
        let (mut lo, mut hi) = (0u32, names);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let name_rva = mem.read_u32(at(name_rvas, mid, 4)).ok()?;
            match self.compare_name(mem, name_rva, name.as_bytes())? {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    let ordinal = u32::from(mem.read_u16(at(ordinals, mid, 2)).ok()?);
                    if ordinal >= functions {
                        return None;
                    }
                    let rva = mem.read_u32(at(function_rvas, ordinal, 4)).ok()?;
                    let forwarder =
                        (self.exports.rva..self.exports.rva + self.exports.size).contains(&rva);
                    return (rva < self.size && !forwarder).then(|| self.base + u64::from(rva));
                }
            }
        }
        None
    }

    /// How the NUL-terminated name at `rva` orders against `want`, or None if it cannot be
    /// read.
    fn compare_name(&self, mem: &mut dyn Memory, rva: u32, want: &[u8]) -> Option<Ordering> {
        // One byte past `want` tells a longer name from an equal one.
        let len = u32::try_from(want.len() + 1).ok()?;
        if rva.checked_add(len)? > self.size {
            // Too near the end to hold `want`: compare what there is.
            let room = usize::try_from(self.size.checked_sub(rva)?).ok()?;
            let mut buf = vec![0u8; room];
            mem.read(self.base + u64::from(rva), &mut buf).ok()?;
            return Some(cstr(&buf).cmp(want));
        }
        let mut buf = [0u8; MAX_EXPORT_NAME + 1];
        let buf = &mut buf[..want.len() + 1];
        mem.read(self.base + u64::from(rva), buf).ok()?;
        Some(cstr(buf).cmp(want))
    }
}

/// The bytes before the first NUL.
fn cstr(b: &[u8]) -> &[u8] {
    b.iter().position(|c| *c == 0).map_or(b, |n| &b[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testimage::ImageBuilder;
    use crate::Regions;

    const BASE: u64 = 0xffff_f800_0040_0000;

    /// An image exporting `names` at RVAs 0x1000, 0x1010...; with `forward`, the first
    /// export's RVA points inside the export directory.
    fn image(names: &[&str], forward: bool) -> (Regions, Image) {
        let exports: Vec<(&str, u32)> = (0u32..)
            .zip(names)
            .map(|(i, n)| {
                (
                    *n,
                    if forward && i == 0 {
                        0x3400
                    } else {
                        0x1000 + 16 * i
                    },
                )
            })
            .collect();
        let bytes = ImageBuilder::new(0x4000).exports(0x3000, &exports).build();
        let mut mem = Regions::new().with(BASE, bytes);
        let im = Image::read(&mut mem, BASE).unwrap();
        (mem, im)
    }

    #[test]
    fn finds_each_export_by_name() {
        let names = [
            "KeBugCheck",
            "PsLoadedModuleList",
            "PsLoadedModuleListX",
            "ZwClose",
        ];
        let (mut mem, im) = image(&names, false);
        for (i, name) in names.iter().enumerate() {
            let want = BASE + 0x1000 + 16 * i as u64;
            assert_eq!(im.export(&mut mem, name), Some(want), "{name}");
        }
        for missing in ["", "A", "PsLoadedModule", "Zz", "PsLoadedModuleListY"] {
            assert_eq!(im.export(&mut mem, missing), None, "{missing}");
        }
    }

    #[test]
    fn forwarders_and_broken_tables_give_nothing() {
        let (mut mem, im) = image(&["AFwd", "B"], true);
        assert_eq!(im.export(&mut mem, "AFwd"), None);
        assert_eq!(im.export(&mut mem, "B"), Some(BASE + 0x1010));
        // A name count that runs past the image.
        let (mut mem, im) = image(&["B"], false);
        let mut bad = Regions::new();
        let mut bytes = vec![0u8; 0x4000];
        mem.read(BASE, &mut bytes).unwrap();
        bytes[0x3000 + 24..0x3000 + 28].copy_from_slice(&0x4000_0000u32.to_le_bytes());
        bad = bad.with(BASE, bytes);
        assert_eq!(im.export(&mut bad, "B"), None);
    }

    #[test]
    fn a_name_at_the_image_end_is_compared_safely() {
        let (mut mem, im) = image(&["B"], false);
        let mut bytes = vec![0u8; 0x4000];
        mem.read(BASE, &mut bytes).unwrap();
        // The name pointer points at the image's last byte.
        bytes[0x3200..0x3204].copy_from_slice(&0x3fffu32.to_le_bytes());
        bytes[0x3fff] = b'B';
        let mut mem = Regions::new().with(BASE, bytes);
        assert_eq!(im.export(&mut mem, "B"), Some(BASE + 0x1000));
        assert_eq!(im.export(&mut mem, "BB"), None);
    }
}
