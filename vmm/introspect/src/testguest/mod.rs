//! Synthetic guests for tests (feature `test-support`): guest-physical memory with real
//! 4-level page tables, and Windows and Linux kernels' process and thread structures laid
//! out in it at the offsets of a layout given by the test ([`windows::WindowsGuest`],
//! [`linux::LinuxGuest`]), with their ground truth.
//!
//! Physical memory is one byte vector from address 0 ([`PhysMem::bytes`], which a VMM test can
//! copy into its guest memory); virtual memory is read through [`Space`], which walks the page
//! tables with [`paging::translate`] as the VMM does.

use crate::mem::{Memory, Unreadable};
use crate::paging::{self, Paging, PhysRead};

pub mod linux;
pub mod linux_maps;
pub mod windows;

const PAGE: u64 = 0x1000;
const PRESENT_WRITABLE: u64 = 0b11;
const ADDR: u64 = 0x000f_ffff_ffff_f000;

/// Guest-physical memory from address 0, with a bump allocator of page frames.
#[derive(Debug, Clone)]
pub struct PhysMem {
    bytes: Vec<u8>,
    next: u64,
}

impl PhysMem {
    /// `size` bytes of zeroed memory; frames are handed out from 64 KiB up.
    pub fn new(size: usize) -> Self {
        PhysMem {
            bytes: vec![0; size],
            next: 0x1_0000,
        }
    }

    /// The whole of physical memory.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes of physical memory in use: frames are handed out below this address.
    pub fn used(&self) -> u64 {
        self.next
    }

    /// Physical memory, writable (a test may corrupt what it likes).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// A fresh zeroed page frame.
    pub fn alloc(&mut self) -> u64 {
        let pa = self.next;
        assert!(
            usize::try_from(pa + PAGE).unwrap() <= self.bytes.len(),
            "test guest out of memory"
        );
        self.next += PAGE;
        pa
    }

    /// Writes `data` at physical `pa`.
    pub fn write_phys(&mut self, pa: u64, data: &[u8]) {
        let at = usize::try_from(pa).unwrap();
        self.bytes[at..at + data.len()].copy_from_slice(data);
    }

    fn entry(&self, pa: u64) -> u64 {
        self.read_u64(pa).unwrap()
    }

    /// The page-table entry that maps `va` at the last level under `root`, made present
    /// (tables and the frame allocated as needed); returns the frame.
    fn frame(&mut self, root: u64, va: u64) -> u64 {
        self.entry_at(root, va, 1) & ADDR
    }

    /// Maps `va` to the frame `pa` under `root` (replacing any mapping).
    pub fn map(&mut self, root: u64, va: u64, pa: u64) {
        let table = self.entry_at(root, va, 2) & ADDR;
        let slot = table + ((va >> 12) & 0x1ff) * 8;
        self.write_phys(slot, &((pa & ADDR) | PRESENT_WRITABLE).to_le_bytes());
    }

    /// The present entry for `va` at paging level `last` (1: the page itself, 2: its page
    /// table) under `root`, walking down from level 4 and allocating what is missing on the way.
    fn entry_at(&mut self, root: u64, va: u64, last: u64) -> u64 {
        let mut table = root;
        let mut e = 0;
        for level in (last..=4).rev() {
            let slot = table + ((va >> (12 + 9 * (level - 1))) & 0x1ff) * 8;
            e = self.entry(slot);
            if e & 1 == 0 {
                e = self.alloc() | PRESENT_WRITABLE;
                self.write_phys(slot, &e.to_le_bytes());
            }
            table = e & ADDR;
        }
        e
    }

    /// Unmaps the page at `va` under `root` (if mapped).
    pub fn unmap(&mut self, root: u64, va: u64) {
        let mut table = root;
        for level in (2..=4).rev() {
            let e = self.entry(table + ((va >> (12 + 9 * (level - 1))) & 0x1ff) * 8);
            if e & 1 == 0 {
                return;
            }
            table = e & ADDR;
        }
        self.write_phys(table + ((va >> 12) & 0x1ff) * 8, &0u64.to_le_bytes());
    }

    /// Writes `data` at `va` under `root`, mapping fresh frames where nothing is mapped.
    pub fn write(&mut self, root: u64, va: u64, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let at = va + done as u64;
            let n = (data.len() - done).min(usize::try_from(PAGE - at % PAGE).unwrap());
            let frame = self.frame(root, at);
            self.write_phys(frame + at % PAGE, &data[done..done + n]);
            done += n;
        }
    }

    /// A new top-level table sharing `kernel`'s kernel half (its PML4 entries 256 to 511).
    pub fn new_root(&mut self, kernel: Option<u64>) -> u64 {
        let root = self.alloc();
        if let Some(k) = kernel {
            for i in 256..512 {
                let e = self.entry(k + i * 8);
                self.write_phys(root + i * 8, &e.to_le_bytes());
            }
        }
        root
    }

    /// The address space rooted at `cr3`.
    pub fn space(&self, cr3: u64) -> Space<'_> {
        Space {
            phys: self,
            paging: long_mode(cr3),
        }
    }
}

impl PhysRead for PhysMem {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        let at = usize::try_from(gpa).ok()?;
        let b = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn read_u32(&self, gpa: u64) -> Option<u32> {
        let at = usize::try_from(gpa).ok()?;
        let b = self.bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }
}

/// The paging registers of 4-level long mode with page tables at `cr3`.
pub fn long_mode(cr3: u64) -> Paging {
    Paging {
        cr0: 0x8000_0011,
        cr3,
        cr4: 0x20,
        efer: 0x500,
    }
}

/// One address space of a [`PhysMem`], read through its page tables.
#[derive(Debug, Clone, Copy)]
pub struct Space<'a> {
    phys: &'a PhysMem,
    paging: Paging,
}

impl Space<'_> {
    fn translate(&self, va: u64) -> Option<u64> {
        paging::translate(self.phys, &self.paging, va)
            .ok()
            .map(|t| t.gpa)
    }
}

impl Memory for Space<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable> {
        let mut done = 0;
        while done < buf.len() {
            let va = addr.wrapping_add(done as u64);
            let pa = self.translate(va).ok_or(Unreadable(va))?;
            let n = (buf.len() - done).min(usize::try_from(PAGE - va % PAGE).unwrap_or(1));
            let at = usize::try_from(pa).map_err(|_| Unreadable(va))?;
            let src = self
                .phys
                .bytes
                .get(at..at.saturating_add(n))
                .ok_or(Unreadable(va))?;
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    fn physical(&mut self, addr: u64) -> Option<u64> {
        self.translate(addr)
    }

    fn hole(&mut self, addr: u64) -> Option<(u64, u64)> {
        paging::hole(self.phys, &self.paging, addr)
    }
}

/// Memory that counts the reads made through it.
#[derive(Debug)]
pub struct Counting<M> {
    /// The memory read.
    pub inner: M,
    /// Reads so far (each `read` call, whatever its size).
    pub reads: usize,
}

impl<M: Memory> Memory for Counting<M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable> {
        self.reads += 1;
        self.inner.read(addr, buf)
    }

    fn physical(&mut self, addr: u64) -> Option<u64> {
        self.inner.physical(addr)
    }

    fn hole(&mut self, addr: u64) -> Option<(u64, u64)> {
        self.inner.hole(addr)
    }
}

/// A bump allocator of virtual addresses in one region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bump {
    pub next: u64,
}

impl Bump {
    /// `size` bytes aligned to 16.
    pub fn take(&mut self, size: u64) -> u64 {
        let at = self.next;
        self.next = (at + size + 15) & !15;
        at
    }
}

/// `s` as UTF-16LE bytes.
pub(crate) fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}
