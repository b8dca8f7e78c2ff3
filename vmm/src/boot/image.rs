//! Placing kernel segments, modules and strings in guest memory, with the checks that keep
//! them inside RAM and clear of the VMM's own boot structures.

use std::path::Path;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::elf::{ElfImage, Segment};
use super::BootError;
use crate::layout::{CMDLINE_START, HIGH_MEMORY_START, RAM_ABOVE_4G_START};
use crate::memory::low_ram_end;

/// Something does not fit in guest memory.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// A kernel segment lies outside the RAM kernels may use.
    #[error(
        "segment at {addr:#x} ({size:#x} bytes) is outside the RAM a kernel may use \
         ({start:#x}-{end:#x})"
    )]
    Segment {
        /// Load address.
        addr: u64,
        /// Size in memory.
        size: u64,
        /// Lowest usable address.
        start: u64,
        /// End of usable RAM.
        end: u64,
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

    /// Checks that `[addr, addr + size)` is RAM a kernel may occupy: above 1 MiB and inside
    /// one RAM region.
    pub fn check_kernel_range(&self, addr: u64, size: u64) -> Result<(), BootError> {
        let low_end = low_ram_end(self.mem_size);
        let high_end = RAM_ABOVE_4G_START + self.mem_size.saturating_sub(low_end);
        let end = addr.checked_add(size);
        let fits = |start: u64, stop: u64| addr >= start && end.is_some_and(|e| e <= stop);
        if fits(HIGH_MEMORY_START, low_end)
            || (self.mem_size > low_end && fits(RAM_ABOVE_4G_START, high_end))
        {
            Ok(())
        } else {
            Err(self.err(PlacementError::Segment {
                addr,
                size,
                start: HIGH_MEMORY_START,
                end: low_end,
            }))
        }
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
        let mut bytes = cmdline.as_bytes().to_vec();
        bytes.push(0);
        self.write(CMDLINE_START, &bytes)?;
        Ok(CMDLINE_START)
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
