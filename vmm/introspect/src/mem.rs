//! Reading guest-virtual memory for the walkers.
//!
//! Every byte a walker looks at comes through [`Memory`]: stack slots, PE headers, the
//! exception directory, unwind codes and the instructions of an epilogue. The guest controls
//! all of it, so callers bound every read and treat a failed one as the end of the walk.

/// A guest-virtual address that does not translate to readable guest RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("guest address {0:#x} is not readable")]
pub struct Unreadable(pub u64);

/// Guest-virtual memory of one address space, read-only.
pub trait Memory {
    /// Fills `buf` from guest-virtual `addr`, or fails if any byte is unreadable. Reads may
    /// cross page boundaries.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable>;

    /// The little-endian u64 at `addr`.
    fn read_u64(&mut self, addr: u64) -> Result<u64, Unreadable> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The little-endian u32 at `addr`.
    fn read_u32(&mut self, addr: u64) -> Result<u32, Unreadable> {
        let mut b = [0; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The little-endian u16 at `addr`.
    fn read_u16(&mut self, addr: u64) -> Result<u16, Unreadable> {
        let mut b = [0; 2];
        self.read(addr, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// The guest-physical address behind guest-virtual `addr`, for memory that translates
    /// through page tables (None by default: memory that does not know, such as [`Regions`]).
    /// Linux's `mm->pgd` is a direct-map address whose physical address is the process's CR3.
    fn physical(&mut self, addr: u64) -> Option<u64> {
        let _ = addr;
        None
    }

    /// When `addr` is unreadable together with a whole range around it, that range (`(start,
    /// len)`), so a search can step over it at once: a page-table entry above it is not
    /// present ([`crate::paging::hole`]), or it lies in a large page with no guest RAM behind
    /// it. None when `addr` is readable, or by default (memory that does not know).
    fn hole(&mut self, addr: u64) -> Option<(u64, u64)> {
        let _ = addr;
        None
    }
}

/// A borrowed memory is memory: a walk generic over its memory (monomorphized, its stack
/// reads inlined) hands `&mut &mut M` to the paths that take `&mut dyn Memory`.
impl<M: Memory + ?Sized> Memory for &mut M {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable> {
        (**self).read(addr, buf)
    }

    fn read_u64(&mut self, addr: u64) -> Result<u64, Unreadable> {
        (**self).read_u64(addr)
    }

    fn read_u32(&mut self, addr: u64) -> Result<u32, Unreadable> {
        (**self).read_u32(addr)
    }

    fn read_u16(&mut self, addr: u64) -> Result<u16, Unreadable> {
        (**self).read_u16(addr)
    }

    fn physical(&mut self, addr: u64) -> Option<u64> {
        (**self).physical(addr)
    }

    fn hole(&mut self, addr: u64) -> Option<(u64, u64)> {
        (**self).hole(addr)
    }
}

/// True for a canonical 48-bit x86-64 address (bits 63..47 all equal).
pub fn canonical(addr: u64) -> bool {
    let top = addr >> 47;
    top == 0 || top == 0x1_ffff
}

/// Memory made of a few byte regions at fixed addresses, for tests and fuzzing: everything
/// outside the regions is unreadable.
#[derive(Debug, Default, Clone)]
pub struct Regions {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Regions {
    /// No readable memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` at `addr` (later regions win where they overlap earlier ones).
    pub fn with(mut self, addr: u64, bytes: Vec<u8>) -> Self {
        self.regions.push((addr, bytes));
        self
    }

    fn byte(&self, addr: u64) -> Option<u8> {
        self.regions.iter().rev().find_map(|(base, bytes)| {
            let off = usize::try_from(addr.checked_sub(*base)?).ok()?;
            bytes.get(off).copied()
        })
    }
}

impl Memory for Regions {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable> {
        for (i, b) in buf.iter_mut().enumerate() {
            let a = addr.checked_add(i as u64).ok_or(Unreadable(addr))?;
            *b = self.byte(a).ok_or(Unreadable(a))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_read_across_and_refuse_outside() {
        let mut m = Regions::new()
            .with(0x1000, vec![1, 2])
            .with(0x1002, vec![3, 4]);
        assert_eq!(m.read_u32(0x1000), Ok(0x0403_0201));
        assert_eq!(m.read_u16(0x1003), Err(Unreadable(0x1004)));
        assert_eq!(m.read_u64(u64::MAX - 3), Err(Unreadable(u64::MAX - 3)));
    }

    #[test]
    fn canonical_addresses() {
        assert!(canonical(0x7fff_ffff_ffff));
        assert!(canonical(0xffff_8000_0000_0000));
        assert!(!canonical(0x8000_0000_0000));
        assert!(!canonical(0xfff0_0000_0000_0000));
    }
}
