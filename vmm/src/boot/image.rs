//! Placing kernel segments, modules and strings in guest memory, with the checks that keep
//! them inside RAM and clear of the VMM's own boot structures.

use std::path::Path;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::elf::{ElfImage, Segment};
use super::BootError;
use crate::layout::{BOOT_GDT_SIZE, BOOT_GDT_START, CMDLINE_START, HIGH_MEMORY_START};
use crate::memory::{low_ram_end, memory_map, GuestRam, RangeKind};

/// Something does not fit in guest memory.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// A kernel segment lies outside the guest's RAM.
    #[error(
        "segment at {addr:#x} ({size:#x} bytes) is not inside one RAM range of the guest's \
         memory map (RAM: {ram})"
    )]
    Segment {
        /// Load address.
        addr: u64,
        /// Size in memory.
        size: u64,
        /// The RAM ranges, as text.
        ram: String,
    },
    /// A kernel segment overlaps a structure hvprof writes for the boot.
    #[error(
        "segment at {addr:#x} ({size:#x} bytes) overlaps {what}, which hvprof writes at \
         {start:#x}-{end:#x} for this boot protocol",
        end = start + len - 1
    )]
    Collides {
        /// Load address.
        addr: u64,
        /// Size in memory.
        size: u64,
        /// The structure.
        what: &'static str,
        /// Its start.
        start: u64,
        /// Its length.
        len: u64,
    },
    /// The multiboot information fits neither at its usual place nor after the kernel.
    #[error(
        "the multiboot information ({size:#x} bytes) fits neither at {usual:#x} (the kernel is \
         there) nor in RAM after the kernel's end {kernel_end:#x}"
    )]
    BootInfo {
        /// Its size.
        size: u64,
        /// Where it goes when the kernel leaves room.
        usual: u64,
        /// End of the kernel image.
        kernel_end: u64,
    },
    /// The initrd does not fit between the kernel and the top of low RAM.
    #[error(
        "initrd of {size} bytes does not fit between the kernel end {kernel_end:#x} and {limit:#x}"
    )]
    Initrd {
        /// Initrd size.
        size: u64,
        /// End of the kernel image.
        kernel_end: u64,
        /// Highest address the initrd may end at.
        limit: u64,
    },
    /// Writing to guest memory failed.
    #[error("cannot write {0} bytes at {1:#x} in guest memory")]
    Write(usize, u64),
}

/// Whether the byte ranges `a` and `b` (start, length) share a byte.
pub fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    let end = |(s, l): (u64, u64)| s.saturating_add(l);
    a.1 > 0 && b.1 > 0 && a.0 < end(b) && b.0 < end(a)
}

/// The ranges (address, size in memory) an ELF image's segments occupy.
pub fn segment_ranges(img: &ElfImage) -> Vec<(u64, u64)> {
    img.segments.iter().map(|s| (s.paddr, s.mem_size)).collect()
}

/// What every loader needs.
pub struct LoadContext<'a> {
    /// Guest RAM.
    pub mem: &'a GuestMemoryMmap,
    /// Guest RAM size in bytes.
    pub mem_size: u64,
    /// The kernel's path, for messages.
    pub path: &'a Path,
}

impl LoadContext<'_> {
    /// Wraps a placement error with the kernel's path.
    pub fn err(&self, e: PlacementError) -> BootError {
        BootError::Placement(self.path.to_owned(), e)
    }

    /// Writes `data` at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), BootError> {
        self.mem
            .write_slice(data, GuestAddress(addr))
            .map_err(|_| self.err(PlacementError::Write(data.len(), addr)))
    }

    /// Checks that `[addr, addr + size)` lies inside one RAM range of the guest's memory map
    /// and clear of the boot GDT (which every protocol's entry uses).
    pub fn check_kernel_range(&self, addr: u64, size: u64) -> Result<(), BootError> {
        let map = memory_map(self.mem_size);
        if !GuestRam::from_map(&map).contains(addr, size) {
            let ram: Vec<String> = map
                .iter()
                .filter(|e| e.kind == RangeKind::Ram)
                .map(|e| format!("{:#x}-{:#x}", e.addr, e.addr + e.size - 1))
                .collect();
            return Err(self.err(PlacementError::Segment {
                addr,
                size,
                ram: ram.join(", "),
            }));
        }
        self.check_clear(
            &[(addr, size)],
            &[(BOOT_GDT_START, BOOT_GDT_SIZE, "the boot GDT")],
        )
    }

    /// Checks that none of the kernel's `segments` (address, size) overlaps one of the
    /// `structures` (address, size, name) hvprof writes for the boot.
    pub fn check_clear(
        &self,
        segments: &[(u64, u64)],
        structures: &[(u64, u64, &'static str)],
    ) -> Result<(), BootError> {
        for &(addr, size) in segments {
            for &(start, len, what) in structures {
                if overlaps((addr, size), (start, len)) {
                    return Err(self.err(PlacementError::Collides {
                        addr,
                        size,
                        what,
                        start,
                        len,
                    }));
                }
            }
        }
        Ok(())
    }

    /// Loads one segment: file bytes, then zeroes up to its memory size.
    pub fn load_segment(&self, file: &[u8], seg: &Segment) -> Result<(), BootError> {
        self.check_kernel_range(seg.paddr, seg.mem_size)?;
        self.write(
            seg.paddr,
            &file[seg.file_offset..seg.file_offset + seg.file_size],
        )?;
        let bss = seg.mem_size - seg.file_size as u64;
        self.zero(seg.paddr + seg.file_size as u64, bss)
    }

    /// Zero-fills a range (already checked by the caller).
    pub fn zero(&self, mut addr: u64, mut len: u64) -> Result<(), BootError> {
        const CHUNK: [u8; 4096] = [0; 4096];
        while len > 0 {
            let n = len.min(CHUNK.len() as u64);
            self.write(addr, &CHUNK[..usize::try_from(n).unwrap_or(CHUNK.len())])?;
            addr += n;
            len -= n;
        }
        Ok(())
    }

    /// Loads every PT_LOAD segment of an ELF image; returns the highest end address.
    pub fn load_elf(&self, file: &[u8], img: &ElfImage) -> Result<u64, BootError> {
        let mut end = HIGH_MEMORY_START;
        for seg in &img.segments {
            self.load_segment(file, seg)?;
            end = end.max(seg.paddr + seg.mem_size);
        }
        Ok(end)
    }

    /// Writes the NUL-terminated command line at its fixed address and returns that address.
    pub fn write_cmdline(&self, cmdline: &str) -> Result<u64, BootError> {
        self.write_cmdline_at(CMDLINE_START, cmdline)?;
        Ok(CMDLINE_START)
    }

    /// Writes the NUL-terminated command line at `addr`.
    pub fn write_cmdline_at(&self, addr: u64, cmdline: &str) -> Result<(), BootError> {
        let mut bytes = cmdline.as_bytes().to_vec();
        bytes.push(0);
        self.write(addr, &bytes)
    }

    /// Places an initrd page-aligned at the top of low RAM (below `limit` if given), above
    /// `kernel_end`. Returns its address.
    pub fn place_initrd(
        &self,
        data: &[u8],
        kernel_end: u64,
        limit: Option<u64>,
    ) -> Result<u64, BootError> {
        let size = data.len() as u64;
        let top = limit.map_or(low_ram_end(self.mem_size), |l| {
            l.min(low_ram_end(self.mem_size))
        });
        let addr = top.checked_sub(size).map(|a| a & !0xfff);
        match addr {
            Some(a) if a >= kernel_end.next_multiple_of(0x1000) => {
                self.write(a, data)?;
                Ok(a)
            }
            _ => Err(self.err(PlacementError::Initrd {
                size,
                kernel_end,
                limit: top,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The placement error's own message.
    fn why(r: Result<(), BootError>) -> String {
        match r {
            Err(BootError::Placement(_, e)) => e.to_string(),
            other => panic!("expected a placement error, got {other:?}"),
        }
    }

    fn with_ctx(f: impl FnOnce(&LoadContext<'_>)) {
        let size = 64 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        f(&LoadContext {
            mem: &mem,
            mem_size: size as u64,
            path: Path::new("k"),
        });
    }

    #[test]
    fn kernels_may_use_any_ram_of_the_memory_map() {
        with_ctx(|ctx| {
            ctx.check_kernel_range(0x8000, 0x1_0000).unwrap();
            ctx.check_kernel_range(0x10_0000, 0x10_0000).unwrap();
            // Not RAM: the EBDA, the VGA hole and BIOS area, past the end, straddling.
            for (addr, size) in [(0x9_fc00, 0x10), (0xa_0000, 0x1000), (0xf_0000, 0x1000)] {
                let e = why(ctx.check_kernel_range(addr, size));
                assert!(e.contains("not inside one RAM range"), "{e}");
            }
            assert!(ctx.check_kernel_range(0x9_f000, 0x2000).is_err());
            assert!(ctx.check_kernel_range(64 << 20, 0x1000).is_err());
            assert!(ctx.check_kernel_range(u64::MAX - 1, 0x10).is_err());
        });
    }

    #[test]
    fn a_segment_over_the_boot_gdt_or_a_boot_structure_is_named() {
        with_ctx(|ctx| {
            let e = why(ctx.check_kernel_range(0x400, 0x200));
            assert!(e.contains("overlaps the boot GDT"), "{e}");
            let e = why(ctx.check_clear(
                &[(0x5000, 0x1001)],
                &[(0x6000, 0x1000, "the PVH start info")],
            ));
            assert!(
                e.contains("the PVH start info") && e.contains("0x6000-0x6fff"),
                "{e}"
            );
            ctx.check_clear(&[(0x5000, 0x1000)], &[(0x6000, 0x1000, "x")])
                .unwrap();
        });
    }

    #[test]
    fn overlap_is_exact_at_the_edges() {
        assert!(overlaps((0, 2), (1, 1)));
        assert!(!overlaps((0, 1), (1, 1)));
        assert!(!overlaps((5, 0), (0, 10)), "empty ranges overlap nothing");
        assert!(overlaps((u64::MAX - 1, 10), (u64::MAX - 1, 1)));
    }
}
