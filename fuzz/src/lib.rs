//! What several fuzz targets share: a disk backend that panics on any access outside the
//! capacity the device was given, so that a target fails if guest bytes can move the
//! virtio-blk device past the end of its image.

use std::ops::Range;

use devices::virtio::block::disk::{DiskBackend, SECTOR_SIZE};

/// An in-memory image of `len` bytes whose last partial sector (if any) must stay
/// unreachable: the device's capacity is `len / SECTOR_SIZE` sectors.
pub struct CheckedDisk(Vec<u8>);

impl CheckedDisk {
    /// An image of `len` bytes of 0x5a.
    pub fn new(len: usize) -> Self {
        CheckedDisk(vec![0x5a; len])
    }

    fn check(&self, offset: u64, len: usize) -> Range<usize> {
        let end = offset
            .checked_add(len as u64)
            .expect("disk offset overflows");
        let capacity = self.0.len() as u64 / SECTOR_SIZE * SECTOR_SIZE;
        assert!(end <= capacity, "access beyond the capacity");
        usize::try_from(offset).unwrap()..usize::try_from(end).unwrap()
    }
}

impl DiskBackend for CheckedDisk {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let r = self.check(offset, buf.len());
        buf.copy_from_slice(&self.0[r]);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let r = self.check(offset, buf.len());
        self.0[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub mod platform;
