//! The agent's memory model: virtual-to-physical translation of kernel buffers, the aligned
//! scratch block, and the page list START takes.

use profile_core::abi::{pages_spanned, MAX_PAGE_COUNT, PAGE_SHIFT, PAGE_SIZE};

use crate::Error;

/// Translates the agent's (kernel) virtual addresses to guest-physical addresses.
///
/// # Safety
///
/// The VMM writes guest memory at the addresses this returns, so an implementation must return
/// the guest-physical address that `va` is mapped to at the time of the call, or `None`. The
/// caller of the client keeps the memory resident (locked) while the VMM may write it.
pub unsafe trait PhysicalMemory {
    /// The guest-physical address of the byte at virtual address `va`, if it is mapped.
    fn physical_address(&self, va: u64) -> Option<u64>;
}

/// A kernel whose virtual addresses equal guest-physical addresses (the reference guest maps
/// its first 4 GiB that way).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdentityMapped;

// SAFETY: only sound for kernels that really are identity mapped; using it is the caller's
// statement that they are (see the type's docs).
unsafe impl PhysicalMemory for IdentityMapped {
    fn physical_address(&self, va: u64) -> Option<u64> {
        Some(va)
    }
}

// SAFETY: forwards to an implementation that upholds the contract.
unsafe impl<M: PhysicalMemory + ?Sized> PhysicalMemory for &M {
    fn physical_address(&self, va: u64) -> Option<u64> {
        (**self).physical_address(va)
    }
}

/// An 8-byte aligned block of `N` bytes for request blocks. Keep `N` within a page (or make
/// sure the memory is physically contiguous): [`crate::Client::new`] checks.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Scratch<const N: usize>([u8; N]);

impl<const N: usize> Scratch<N> {
    /// A zeroed block.
    pub const fn new() -> Self {
        Scratch([0; N])
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl<const N: usize> Default for Scratch<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The header of a page list: what START's mode 0 sends before the frames.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageListInfo {
    /// `buffer & 0xFFF`, the MDL's `ByteOffset`.
    pub offset_in_first_page: u32,
    /// Frames written: the pages `[buffer, buffer + size)` spans.
    pub page_count: usize,
}

/// Builds the page list of a locked buffer: the frame number (guest-physical address >> 12) of
/// each page that `[buffer, buffer + size)` touches, in order, into `frames`.
///
/// `Error::InvalidArgument` for an empty buffer, an address range that wraps, more pages than
/// the ABI carries or than `frames` holds; `Error::NotMapped` with the first page that has no
/// translation.
pub fn page_list<M: PhysicalMemory + ?Sized>(
    memory: &M,
    buffer: u64,
    size: u32,
    frames: &mut [u64],
) -> Result<PageListInfo, Error> {
    if size == 0 || buffer.checked_add(u64::from(size)).is_none() {
        return Err(Error::InvalidArgument);
    }
    let pages = pages_spanned(buffer, u64::from(size));
    if pages > u64::from(MAX_PAGE_COUNT) || pages > frames.len() as u64 {
        return Err(Error::InvalidArgument);
    }
    let first = buffer & !(PAGE_SIZE - 1);
    for (i, frame) in (0..pages).zip(frames.iter_mut()) {
        let va = first + (i << PAGE_SHIFT);
        let pa = memory.physical_address(va).ok_or(Error::NotMapped(va))?;
        *frame = pa >> PAGE_SHIFT;
    }
    Ok(PageListInfo {
        #[allow(clippy::cast_possible_truncation)] // below 4096
        offset_in_first_page: (buffer & (PAGE_SIZE - 1)) as u32,
        #[allow(clippy::cast_possible_truncation)] // at most MAX_PAGE_COUNT
        page_count: pages as usize,
    })
}

/// Checks that `len` bytes at `va` are one guest-physically contiguous range; returns its
/// guest-physical address.
pub(crate) fn contiguous<M: PhysicalMemory + ?Sized>(
    memory: &M,
    va: u64,
    len: usize,
) -> Result<u64, Error> {
    let pa = memory.physical_address(va).ok_or(Error::NotMapped(va))?;
    let end = va
        .checked_add(len as u64)
        .ok_or(Error::ScratchNotContiguous)?;
    let mut page = (va & !(PAGE_SIZE - 1)) + PAGE_SIZE;
    while page < end {
        let expected = pa + (page - va);
        if memory.physical_address(page) != Some(expected) {
            return Err(Error::ScratchNotContiguous);
        }
        page += PAGE_SIZE;
    }
    Ok(pa)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Maps virtual page `v` of a window at 0x7000_0000 to the frames in `frames[v]`.
    pub struct Scattered {
        pub frames: [u64; 4],
    }

    pub const WINDOW: u64 = 0x7000_0000;

    // SAFETY: a test model, never used to ring a real doorbell.
    unsafe impl PhysicalMemory for Scattered {
        fn physical_address(&self, va: u64) -> Option<u64> {
            let page = va.checked_sub(WINDOW)? >> PAGE_SHIFT;
            let frame = *self.frames.get(usize::try_from(page).ok()?)?;
            if frame == 0 {
                return None;
            }
            Some((frame << PAGE_SHIFT) | (va & (PAGE_SIZE - 1)))
        }
    }

    #[test]
    fn one_page_buffer_at_an_offset() {
        let mut frames = [0u64; 4];
        let info = page_list(&IdentityMapped, 0x1F_0010, 0x100, &mut frames).unwrap();
        assert_eq!(
            info,
            PageListInfo {
                offset_in_first_page: 0x10,
                page_count: 1
            }
        );
        assert_eq!(frames[0], 0x1F0);
    }

    #[test]
    fn the_abi_md_start_example_frames() {
        // docs/abi.md 6.4: a 16 KiB buffer on frames 0x1234, 0x1235, 0x2000, 0x2001.
        let memory = Scattered {
            frames: [0x1234, 0x1235, 0x2000, 0x2001],
        };
        let mut frames = [0u64; 4];
        let info = page_list(&memory, WINDOW, 0x4000, &mut frames).unwrap();
        assert_eq!(info.page_count, 4);
        assert_eq!(info.offset_in_first_page, 0);
        assert_eq!(frames, [0x1234, 0x1235, 0x2000, 0x2001]);
    }

    #[test]
    fn an_unaligned_buffer_spans_one_more_page() {
        let memory = Scattered {
            frames: [5, 9, 7, 0],
        };
        let mut frames = [0u64; 4];
        let info = page_list(&memory, WINDOW + 0xFFC, 0x1008, &mut frames).unwrap();
        assert_eq!(info.offset_in_first_page, 0xFFC);
        assert_eq!(info.page_count, 3);
        assert_eq!(&frames[..3], &[5, 9, 7]);
    }

    #[test]
    fn a_hole_is_reported_with_its_address() {
        let memory = Scattered {
            frames: [5, 9, 0, 0],
        };
        let mut frames = [0u64; 4];
        assert_eq!(
            page_list(&memory, WINDOW, 0x3000, &mut frames),
            Err(Error::NotMapped(WINDOW + 0x2000))
        );
    }

    #[test]
    fn empty_wrapping_and_oversized_lists_are_refused() {
        let mut frames = [0u64; 2];
        assert_eq!(
            page_list(&IdentityMapped, 0x1000, 0, &mut frames),
            Err(Error::InvalidArgument)
        );
        assert_eq!(
            page_list(&IdentityMapped, u64::MAX - 8, 0x100, &mut frames),
            Err(Error::InvalidArgument)
        );
        assert_eq!(
            page_list(&IdentityMapped, 0x1000, 0x2001, &mut frames),
            Err(Error::InvalidArgument)
        );
    }

    #[test]
    fn contiguity_check() {
        let memory = Scattered {
            frames: [5, 6, 8, 0],
        };
        assert_eq!(contiguous(&memory, WINDOW + 8, 0x1000), Ok(0x5008));
        assert_eq!(
            contiguous(&memory, WINDOW + 0x1800, 0x1000),
            Err(Error::ScratchNotContiguous)
        );
        assert_eq!(contiguous(&IdentityMapped, 0x1000, 0x10_0000), Ok(0x1000));
    }

    #[test]
    fn scratch_is_aligned() {
        let mut s = Scratch::<24>::new();
        assert_eq!(s.bytes_mut().as_ptr() as usize % 8, 0);
        assert_eq!(s.bytes_mut().len(), 24);
    }
}
