//! PE images mapped in guest memory: finding the image that holds an address, reading its
//! headers, and looking up the RUNTIME_FUNCTION that covers an address in its exception
//! directory. Everything is read through [`Memory`] and checked against the image's own size.
//!
//! x86-64 images (PE32+) are read whole. A WOW64 process also maps x86 images (PE32, its
//! DLLs under SysWOW64): their size, build, exports and CodeView record are read the same way,
//! so they are named and symbolized like the others; they have no exception directory (x86
//! code keeps no unwind tables there).

use crate::mem::{Memory, Unreadable};

mod exports;
mod meta;
pub use meta::{guid_hex, CodeView, MAX_NAME};

/// Images are mapped on page boundaries; the header scan steps a page at a time.
pub const PAGE: u64 = 0x1000;
/// The NT headers must start within the first page, after the DOS header.
const MAX_LFANEW: u32 = 0x1000 - 264;
/// Signature, file header, PE32+ optional header with all 16 data directories: 264 bytes
/// (PE32's is 16 bytes shorter).
const NT_HEADERS_LEN: usize = 4 + 20 + 112 + 16 * 8;
/// No real image is larger; a header that says so is lying.
const MAX_IMAGE_SIZE: u32 = 1 << 30;
const MACHINE_AMD64: u16 = 0x8664;
const MACHINE_I386: u16 = 0x14c;
const PE32_PLUS: u16 = 0x20b;
const PE32: u16 = 0x10b;
/// RUNTIME_FUNCTION: BeginAddress, EndAddress, UnwindData (RVAs).
const RUNTIME_FUNCTION_LEN: u32 = 12;

/// A data directory: an RVA range inside the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    /// Start, relative to the image base.
    pub rva: u32,
    /// Length in bytes.
    pub size: u32,
}

/// The code an image holds, from its file header's Machine and its optional header's magic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Machine {
    /// x86-64 (PE32+).
    #[default]
    Amd64,
    /// x86 (PE32): a WOW64 process's images.
    I386,
}

/// The headers of a PE image mapped at `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Image {
    /// Where the image is mapped (its `MZ`).
    pub base: u64,
    /// x86-64 or x86.
    pub machine: Machine,
    /// SizeOfImage: the image spans `base..base + size`.
    pub size: u32,
    /// The file header's TimeDateStamp (with `size`, the image's identity for symbol servers).
    pub timestamp: u32,
    /// The export directory (empty if absent or out of bounds).
    pub exports: Directory,
    /// The exception directory: the image's RUNTIME_FUNCTIONs.
    pub exceptions: Directory,
    /// The debug directory (CodeView records name the PDB).
    pub debug: Directory,
}

/// Why there is no usable image at an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeError {
    /// A header byte is not readable.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The bytes are not the header of an x86-64 (PE32+) or x86 (PE32) image.
    #[error("no PE32+ x86-64 or PE32 x86 image header at {0:#x}")]
    NotPe(u64),
}

/// A RUNTIME_FUNCTION, as RVAs into its image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// First byte of the function.
    pub begin: u32,
    /// One past its last byte.
    pub end: u32,
    /// Its UNWIND_INFO.
    pub unwind: u32,
}

/// The little-endian u16 at `at` in `b` (the caller keeps `at` in bounds).
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The little-endian u32 at `at` in `b`.
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Image {
    /// Reads and checks the headers of an image mapped at `base`.
    pub fn read(mem: &mut dyn Memory, base: u64) -> Result<Image, PeError> {
        if mem.read_u16(base)? != u16::from_le_bytes(*b"MZ") {
            return Err(PeError::NotPe(base));
        }
        let lfanew = mem.read_u32(base + 0x3c)?;
        if !(0x40..=MAX_LFANEW).contains(&lfanew) {
            return Err(PeError::NotPe(base));
        }
        let mut nt = [0u8; NT_HEADERS_LEN];
        mem.read(base + u64::from(lfanew), &mut nt)?;
        let opt = 24;
        let optional_len = usize::from(le16(&nt, 20));
        // Where the data directories start in the optional header: PE32 has BaseOfData and
        // 32-bit fields where PE32+ has 64-bit ones.
        let (machine, dirs) = match (le16(&nt, 4), le16(&nt, opt)) {
            (MACHINE_AMD64, PE32_PLUS) => (Machine::Amd64, 112),
            (MACHINE_I386, PE32) => (Machine::I386, 96),
            _ => return Err(PeError::NotPe(base)),
        };
        if &nt[..4] != b"PE\0\0" || optional_len < dirs {
            return Err(PeError::NotPe(base));
        }
        let size = le32(&nt, opt + 56);
        if size == 0 || size > MAX_IMAGE_SIZE {
            return Err(PeError::NotPe(base));
        }
        // Only the directories both the header and the optional header's length count.
        let count = (le32(&nt, opt + dirs - 4) as usize)
            .min((optional_len - dirs) / 8)
            .min(16);
        let dir = |i: usize| {
            if i >= count {
                return Directory::default();
            }
            let d = Directory {
                rva: le32(&nt, opt + dirs + 8 * i),
                size: le32(&nt, opt + dirs + 4 + 8 * i),
            };
            match d.rva.checked_add(d.size) {
                Some(end) if end <= size && d.size > 0 => d,
                _ => Directory::default(),
            }
        };
        Ok(Image {
            base,
            machine,
            size,
            timestamp: le32(&nt, 8),
            exports: dir(0),
            // x86's directory 3 holds no RUNTIME_FUNCTIONs.
            exceptions: match machine {
                Machine::Amd64 => dir(3),
                Machine::I386 => Directory::default(),
            },
            debug: dir(6),
        })
    }

    /// True if `addr` lies inside the image.
    pub fn contains(&self, addr: u64) -> bool {
        self.rva(addr).is_some()
    }

    /// `addr` relative to the base, if it lies inside the image.
    pub fn rva(&self, addr: u64) -> Option<u32> {
        u32::try_from(addr.wrapping_sub(self.base))
            .ok()
            .filter(|rva| *rva < self.size)
    }

    /// The RUNTIME_FUNCTION covering `addr`, by binary search of the exception directory
    /// (which the PE format keeps sorted). An entry whose UnwindData has bit 0 set points at
    /// the entry that holds the unwind data; one such hop is followed.
    pub fn function(
        &self,
        mem: &mut dyn Memory,
        addr: u64,
    ) -> Result<Option<RuntimeFunction>, Unreadable> {
        let Some(rva) = self.rva(addr) else {
            return Ok(None);
        };
        let (mut lo, mut hi) = (0u32, self.exceptions.size / RUNTIME_FUNCTION_LEN);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let f = self.entry(mem, self.exceptions.rva + mid * RUNTIME_FUNCTION_LEN)?;
            if rva < f.begin {
                hi = mid;
            } else if rva >= f.end {
                lo = mid + 1;
            } else {
                return self.resolve(mem, f);
            }
        }
        Ok(None)
    }

    fn resolve(
        &self,
        mem: &mut dyn Memory,
        f: RuntimeFunction,
    ) -> Result<Option<RuntimeFunction>, Unreadable> {
        if f.unwind & 1 == 0 {
            return Ok(self.checked(f));
        }
        // The entry keeps its own range, which must be checked like any other.
        let target = self.entry(mem, f.unwind & !1)?;
        Ok(self.checked(target).and_then(|t| {
            self.checked(RuntimeFunction {
                unwind: t.unwind,
                ..f
            })
        }))
    }

    pub(crate) fn checked(&self, f: RuntimeFunction) -> Option<RuntimeFunction> {
        (f.begin < f.end && f.end <= self.size && f.unwind < self.size && f.unwind & 1 == 0)
            .then_some(f)
    }

    /// The RUNTIME_FUNCTION at `rva`.
    pub(crate) fn entry(
        &self,
        mem: &mut dyn Memory,
        rva: u32,
    ) -> Result<RuntimeFunction, Unreadable> {
        let mut b = [0u8; RUNTIME_FUNCTION_LEN as usize];
        mem.read(self.base + u64::from(rva), &mut b)?;
        Ok(RuntimeFunction {
            begin: le32(&b, 0),
            end: le32(&b, 4),
            unwind: le32(&b, 8),
        })
    }
}

#[cfg(test)]
mod tests;
