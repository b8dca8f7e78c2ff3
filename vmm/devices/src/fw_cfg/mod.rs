//! QEMU's firmware configuration device (fw_cfg), as SeaBIOS and OVMF read it: a selector
//! port, a byte-wide data port and the DMA interface (QEMU docs/specs/fw_cfg.rst).
//!
//! ```text
//! FW_CFG_PORT + 0   selector (16-bit write; resets the read offset)
//! FW_CFG_PORT + 1   data (reads the selected item byte by byte; past the end reads 0)
//! FW_CFG_PORT + 4   DMA address, big-endian: writing the high half stores it, writing the
//!                   low half (+8) runs the transfer; reading returns "QEMU CFG"
//! ```
//!
//! The items are fixed when the VM is built ([`FwCfgBuilder`]). A DMA transfer reads its
//! control block from guest RAM, copies between the selected item and guest RAM, and writes
//! the control word back (0, or the error bit). Every guest address is checked through
//! vm-memory; a bad one sets the error bit, never panics.

pub mod items;
pub mod loader;

use std::collections::BTreeMap;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::bus::Origin;
use super::BusDevice;
pub use items::{FwCfgBuilder, FwCfgError};

/// Item keys (QEMU's `FW_CFG_*`).
pub mod keys {
    /// "QEMU".
    pub const SIGNATURE: u16 = 0x00;
    /// Interface features: bit 0 traditional, bit 1 DMA.
    pub const ID: u16 = 0x01;
    /// The VM's UUID (16 bytes).
    pub const UUID: u16 = 0x02;
    /// RAM size in bytes (u64).
    pub const RAM_SIZE: u16 = 0x03;
    /// No graphics (u16): SeaBIOS then sends its screen to COM1.
    pub const NOGRAPHIC: u16 = 0x04;
    /// vCPUs at boot (u16).
    pub const NB_CPUS: u16 = 0x05;
    /// NUMA: node count (u64) then per-CPU and per-node u64s.
    pub const NUMA: u16 = 0x0d;
    /// Show the boot menu (u16).
    pub const BOOT_MENU: u16 = 0x0e;
    /// Most vCPUs (u16).
    pub const MAX_CPUS: u16 = 0x0f;
    /// The file directory.
    pub const FILE_DIR: u16 = 0x19;
    /// The first file's key.
    pub const FILE_FIRST: u16 = 0x20;
    /// Legacy ACPI table list (u16 count).
    pub const ACPI_TABLES: u16 = 0x8000;
    /// Legacy SMBIOS entries (u16 count).
    pub const SMBIOS_ENTRIES: u16 = 0x8001;
    /// The PIT's IRQ 0 is overridden to GSI 2 (u32 boolean).
    pub const IRQ0_OVERRIDE: u16 = 0x8002;
    /// Legacy e820 reservations (u32 count).
    pub const E820_TABLE: u16 = 0x8003;
}

/// FW_CFG_ID bits.
pub const ID_TRADITIONAL: u32 = 1 << 0;
/// The DMA interface is present.
pub const ID_DMA: u32 = 1 << 1;
/// What a read of the DMA address register returns ("QEMU CFG", big-endian).
pub const DMA_SIGNATURE: u64 = 0x5145_4d55_2043_4647;

const DMA_CTL_ERROR: u32 = 1 << 0;
const DMA_CTL_READ: u32 = 1 << 1;
const DMA_CTL_SKIP: u32 = 1 << 2;
const DMA_CTL_SELECT: u32 = 1 << 3;
const DMA_CTL_WRITE: u32 = 1 << 4;
/// Offsets of the ports within the device.
const OFF_SELECTOR: u64 = 0;
const OFF_DATA: u64 = 1;
const OFF_DMA: u64 = 4;

/// One item: its bytes and whether DMA writes may change them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Item {
    /// The contents.
    pub data: Vec<u8>,
    /// The guest may write it through DMA (QEMU's writable files).
    pub writable: bool,
}

/// A DMA control block as the guest wrote it (all fields big-endian in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaAccess {
    /// Control bits, and the selector in bits 31:16.
    pub control: u32,
    /// Bytes to transfer.
    pub length: u32,
    /// Guest-physical address of the buffer.
    pub address: u64,
}

impl DmaAccess {
    /// Decodes the 16-byte block.
    pub fn parse(b: &[u8; 16]) -> Self {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[8..16]);
        DmaAccess {
            control: u32_at(0),
            length: u32_at(4),
            address: u64::from_be_bytes(a),
        }
    }
}

/// The fw_cfg device.
pub struct FwCfg {
    items: BTreeMap<u16, Item>,
    selector: u16,
    offset: usize,
    dma_high: u32,
    mem: GuestMemoryMmap,
}

impl FwCfg {
    /// A device serving `items`; DMA reaches guest RAM through `mem`.
    pub fn new(items: BTreeMap<u16, Item>, mem: GuestMemoryMmap) -> Self {
        FwCfg {
            items,
            selector: 0,
            offset: 0,
            dma_high: 0,
            mem,
        }
    }

    fn select(&mut self, key: u16) {
        self.selector = key;
        self.offset = 0;
    }

    /// The bytes of the selected item from the current offset (empty past its end or for
    /// an unknown key, which reads as zeros).
    fn remaining(&self) -> &[u8] {
        self.items
            .get(&self.selector)
            .and_then(|i| i.data.get(self.offset..))
            .unwrap_or(&[])
    }

    fn read_data(&mut self) -> u8 {
        let b = self.remaining().first().copied().unwrap_or(0);
        if !self.remaining().is_empty() {
            self.offset += 1;
        }
        b
    }

    /// Runs the DMA transfer whose control block is at `addr`.
    fn dma(&mut self, addr: u64) {
        let mut raw = [0u8; 16];
        if self.mem.read_slice(&mut raw, GuestAddress(addr)).is_err() {
            log::warn!("fw_cfg: DMA control block at {addr:#x} is not in guest RAM");
            return;
        }
        let access = DmaAccess::parse(&raw);
        let ok = self.transfer(&access);
        let control: u32 = if ok { 0 } else { DMA_CTL_ERROR };
        if self
            .mem
            .write_slice(&control.to_be_bytes(), GuestAddress(addr))
            .is_err()
        {
            log::warn!("fw_cfg: cannot complete the DMA control block at {addr:#x}");
        }
    }

    /// Performs one access; false sets the error bit.
    pub fn transfer(&mut self, a: &DmaAccess) -> bool {
        if a.control & DMA_CTL_SELECT != 0 {
            self.select(u16::try_from(a.control >> 16).unwrap_or(0));
        }
        let len = usize::try_from(a.length).unwrap_or(usize::MAX);
        if a.control & DMA_CTL_READ != 0 {
            // Past the item's end the guest reads zeros. Nothing is allocated by the guest's
            // length: the item's bytes are written from the item, the zeros in fixed chunks.
            let src = self.remaining();
            let n = src.len().min(len);
            let Some(zeros_at) = a.address.checked_add(n as u64) else {
                return false;
            };
            if self
                .mem
                .write_slice(&src[..n], GuestAddress(a.address))
                .is_err()
            {
                return false;
            }
            self.offset += n;
            zero_fill(&self.mem, zeros_at, len - n)
        } else if a.control & DMA_CTL_WRITE != 0 {
            // Check the target before touching guest memory; then read straight into it.
            let offset = self.offset;
            let Some(item) = self.items.get_mut(&self.selector) else {
                return false;
            };
            let end = match offset.checked_add(len) {
                Some(end) if item.writable && end <= item.data.len() => end,
                _ => return false,
            };
            if self
                .mem
                .read_slice(&mut item.data[offset..end], GuestAddress(a.address))
                .is_err()
            {
                return false;
            }
            self.offset = end;
            true
        } else if a.control & DMA_CTL_SKIP != 0 {
            self.offset = self.offset.saturating_add(len);
            true
        } else {
            true
        }
    }
}

/// Writes `len` zero bytes at `addr` in fixed-size chunks; false if any is outside RAM.
fn zero_fill(mem: &GuestMemoryMmap, mut addr: u64, mut len: usize) -> bool {
    const ZEROS: [u8; 4096] = [0; 4096];
    while len > 0 {
        let n = len.min(ZEROS.len());
        if mem.write_slice(&ZEROS[..n], GuestAddress(addr)).is_err() {
            return false;
        }
        addr = addr.wrapping_add(n as u64);
        len -= n;
    }
    true
}

impl BusDevice for FwCfg {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        match offset {
            OFF_DATA => {
                for b in data.iter_mut() {
                    *b = self.read_data();
                }
            }
            OFF_DMA..=11 => {
                crate::bytes::read_padded(&DMA_SIGNATURE.to_be_bytes(), offset - OFF_DMA, data);
            }
            _ => data.fill(0),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        match (offset, data.len()) {
            (OFF_SELECTOR, 2) => self.select(u16::from_le_bytes([data[0], data[1]])),
            (OFF_SELECTOR, 1) => self.select(u16::from(data[0])),
            (OFF_DMA, 4) => {
                self.dma_high = u32::from_be_bytes([data[0], data[1], data[2], data[3]])
            }
            (8, 4) => {
                let low = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                let addr = (u64::from(self.dma_high) << 32) | u64::from(low);
                self.dma_high = 0;
                self.dma(addr);
            }
            _ => log::debug!("fw_cfg: ignoring a {}-byte write at +{offset}", data.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> (FwCfg, GuestMemoryMmap) {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let mut b = FwCfgBuilder::new();
        b.add_item(keys::RAM_SIZE, 0x1234_5678u64.to_le_bytes().to_vec());
        b.add_file("etc/zzz", b"last".to_vec()).unwrap();
        b.add_file("etc/aaa", b"first".to_vec()).unwrap();
        b.add_writable_file("etc/rw", vec![0; 8]).unwrap();
        (FwCfg::new(b.build(), mem.clone()), mem)
    }

    fn read_item(d: &mut FwCfg, key: u16, n: usize) -> Vec<u8> {
        d.write(0, &key.to_le_bytes(), &Origin::default());
        let mut out = vec![0u8; n];
        for b in &mut out {
            let mut x = [0u8];
            d.read(1, &mut x, &Origin::default());
            *b = x[0];
        }
        out
    }

    #[test]
    fn signature_and_id_through_the_data_port() {
        let (mut d, _) = device();
        assert_eq!(read_item(&mut d, keys::SIGNATURE, 4), b"QEMU");
        let id = read_item(&mut d, keys::ID, 4);
        assert_eq!(
            u32::from_le_bytes(id.try_into().unwrap()),
            ID_TRADITIONAL | ID_DMA
        );
        // Reads past the end and of unknown keys give zeros.
        assert_eq!(read_item(&mut d, keys::SIGNATURE, 6)[4..], [0, 0]);
        assert_eq!(read_item(&mut d, 0x7777, 2), [0, 0]);
    }

    #[test]
    fn file_directory_is_sorted_and_big_endian() {
        let (mut d, _) = device();
        let count = read_item(&mut d, keys::FILE_DIR, 4);
        assert_eq!(u32::from_be_bytes(count.try_into().unwrap()), 3);
        let dir = read_item(&mut d, keys::FILE_DIR, 4 + 3 * 64);
        let entry = |i: usize| &dir[4 + i * 64..4 + (i + 1) * 64];
        let name = |e: &[u8]| {
            String::from_utf8(e[8..].iter().take_while(|&&c| c != 0).copied().collect()).unwrap()
        };
        assert_eq!(name(entry(0)), "etc/aaa");
        assert_eq!(name(entry(2)), "etc/zzz");
        let e = entry(0);
        assert_eq!(u32::from_be_bytes(e[0..4].try_into().unwrap()), 5);
        let select = u16::from_be_bytes(e[4..6].try_into().unwrap());
        assert!(select >= keys::FILE_FIRST);
        assert_eq!(read_item(&mut d, select, 5), b"first");
    }

    #[test]
    fn dma_signature_is_readable() {
        let (mut d, _) = device();
        let mut b = [0u8; 4];
        d.read(OFF_DMA, &mut b, &Origin::default());
        assert_eq!(&b, b"QEMU");
        d.read(8, &mut b, &Origin::default());
        assert_eq!(&b, b" CFG");
    }

    fn dma(d: &mut FwCfg, mem: &GuestMemoryMmap, control: u32, len: u32, buf: u64) -> u32 {
        let block = 0x1000u64;
        let mut raw = Vec::new();
        raw.extend_from_slice(&control.to_be_bytes());
        raw.extend_from_slice(&len.to_be_bytes());
        raw.extend_from_slice(&buf.to_be_bytes());
        mem.write_slice(&raw, GuestAddress(block)).unwrap();
        d.write(OFF_DMA, &0u32.to_be_bytes(), &Origin::default());
        d.write(
            8,
            &u32::try_from(block).unwrap().to_be_bytes(),
            &Origin::default(),
        );
        let mut c = [0u8; 4];
        mem.read_slice(&mut c, GuestAddress(block)).unwrap();
        u32::from_be_bytes(c)
    }

    /// Regression: a DMA length of 4 GiB used to allocate a host buffer of that size before
    /// any check. Now a read writes the item and then zeros until RAM ends (an error), and a
    /// write is refused before guest memory is read.
    #[test]
    fn dma_with_a_huge_length_allocates_nothing_and_fails_cleanly() {
        let (mut d, mem) = device();
        let ctl = (u32::from(keys::RAM_SIZE) << 16) | DMA_CTL_SELECT | DMA_CTL_READ;
        assert_eq!(dma(&mut d, &mem, ctl, u32::MAX, 0x2000), DMA_CTL_ERROR);
        let mut first = [0u8; 8];
        mem.read_slice(&mut first, GuestAddress(0x2000)).unwrap();
        assert_eq!(
            u64::from_le_bytes(first),
            0x1234_5678,
            "the item was still delivered"
        );
        // Files take keys in name order from FILE_FIRST: etc/aaa, etc/rw, etc/zzz.
        let key = keys::FILE_FIRST + 1;
        let ctl = (u32::from(key) << 16) | DMA_CTL_SELECT | DMA_CTL_WRITE;
        assert_eq!(dma(&mut d, &mem, ctl, u32::MAX, 0x2000), DMA_CTL_ERROR);
        assert_eq!(
            dma(&mut d, &mem, ctl, 8, 0x2000),
            0,
            "an in-bounds write still works"
        );
    }

    #[test]
    fn dma_select_skip_and_read() {
        let (mut d, mem) = device();
        let ctl = (u32::from(keys::RAM_SIZE) << 16) | DMA_CTL_SELECT | DMA_CTL_SKIP;
        assert_eq!(dma(&mut d, &mem, ctl, 2, 0), 0);
        assert_eq!(dma(&mut d, &mem, DMA_CTL_READ, 8, 0x2000), 0);
        let mut got = [0u8; 8];
        mem.read_slice(&mut got, GuestAddress(0x2000)).unwrap();
        // Bytes 2..8 of the item, then zeros past its end.
        assert_eq!(got, [0x34, 0x12, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn dma_errors_for_bad_addresses_and_read_only_items() {
        let (mut d, mem) = device();
        let read = (u32::from(keys::SIGNATURE) << 16) | DMA_CTL_SELECT | DMA_CTL_READ;
        assert_eq!(dma(&mut d, &mem, read, 4, 1 << 40), DMA_CTL_ERROR);
        let write = (u32::from(keys::SIGNATURE) << 16) | DMA_CTL_SELECT | DMA_CTL_WRITE;
        assert_eq!(dma(&mut d, &mem, write, 4, 0x2000), DMA_CTL_ERROR);
        // A control block outside RAM is ignored without a panic.
        d.write(OFF_DMA, &0xffff_ffffu32.to_be_bytes(), &Origin::default());
        d.write(8, &0xffff_fff0u32.to_be_bytes(), &Origin::default());
    }

    #[test]
    fn dma_write_to_a_writable_file() {
        let (mut d, mem) = device();
        let key = d
            .items
            .iter()
            .find(|(_, i)| i.writable)
            .map(|(k, _)| *k)
            .unwrap();
        mem.write_slice(&[1, 2, 3, 4], GuestAddress(0x3000))
            .unwrap();
        let ctl = (u32::from(key) << 16) | DMA_CTL_SELECT | DMA_CTL_WRITE;
        assert_eq!(dma(&mut d, &mem, ctl, 4, 0x3000), 0);
        assert_eq!(d.items[&key].data[..4], [1, 2, 3, 4]);
        // Past the end is an error.
        assert_eq!(dma(&mut d, &mem, DMA_CTL_WRITE, 8, 0x3000), DMA_CTL_ERROR);
    }
}
