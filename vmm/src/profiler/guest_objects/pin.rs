//! A started object's buffer, held by the VMM: the host address of every guest frame the agent
//! locked, and a VMM-side copy of the counters. Counts go to both: the guest sees them in its
//! own pages, as Windows writes through its locked MDL mapping, and the VMM's copy survives a
//! guest that scribbles on its buffer.
//!
//! A counter never straddles two pages: the buffer is 4-byte aligned (create checks it) and
//! every counter offset is a multiple of 4, so a counter's 4 bytes lie in one 4 KiB page
//! (4096 is a multiple of 4). `pin_never_splits_a_counter_across_pages` checks this for every
//! offset and alignment.

use std::sync::atomic::{AtomicU32, Ordering};

use vm_memory::{
    GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
};

const PAGE_SIZE: u64 = 4096;

/// Why a buffer cannot be pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// A frame is not guest RAM (MMIO, a hole, or beyond memory).
    #[error("frame {0:#x} is not guest RAM")]
    NotRam(u64),
    /// The frame list does not cover the buffer.
    #[error("{got} frames cannot hold {size} bytes at page offset {offset}")]
    TooFewFrames {
        /// Frames given.
        got: usize,
        /// Buffer size.
        size: u32,
        /// Offset in the first page.
        offset: u32,
    },
    /// The buffer or the counter area is not 4-byte aligned or does not fit the buffer.
    #[error("counters of {counters} bytes do not fit a {size}-byte buffer at offset {offset}")]
    Layout {
        /// Offset in the first page.
        offset: u32,
        /// Buffer size.
        size: u32,
        /// Bytes of counters.
        counters: u64,
    },
}

/// A pinned buffer.
pub struct PinnedBuffer {
    /// Host address of each page of the buffer, in order.
    pages: Vec<*mut u8>,
    offset: u32,
    size: u32,
    shadow: Box<[AtomicU32]>,
    /// Keeps the guest memory mapping (and so every address in `pages`) alive.
    _mem: GuestMemoryMmap,
}

// SAFETY: the raw page pointers point into guest memory mappings owned by `_mem`, which this
// struct keeps alive; they are only used for atomic 32-bit accesses, which any thread may make.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above; `&PinnedBuffer` only permits atomic increments and reads.
unsafe impl Sync for PinnedBuffer {}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("pages", &self.pages.len())
            .field("offset", &self.offset)
            .field("size", &self.size)
            .finish()
    }
}

/// The host address of guest frame `frame` if the whole page is RAM in one region.
fn host_page(mem: &GuestMemoryMmap, frame: u64) -> Option<*mut u8> {
    let gpa = frame.checked_mul(PAGE_SIZE)?;
    let region = mem.find_region(GuestAddress(gpa))?;
    let start = region.start_addr().0;
    if gpa.checked_add(PAGE_SIZE)? > start.checked_add(region.len())? {
        return None;
    }
    region
        .get_host_address(MemoryRegionAddress(gpa - start))
        .ok()
}

impl PinnedBuffer {
    /// Pins the buffer of `size` bytes starting `offset` bytes into the first of `frames`,
    /// whose first `counters_len` bytes are counters.
    pub fn pin(
        mem: &GuestMemoryMmap,
        frames: impl IntoIterator<Item = u64>,
        offset: u32,
        size: u32,
        counters_len: u64,
    ) -> Result<Self, PinError> {
        if !offset.is_multiple_of(4)
            || u64::from(offset) >= PAGE_SIZE
            || counters_len > u64::from(size)
            || !counters_len.is_multiple_of(4)
        {
            return Err(PinError::Layout {
                offset,
                size,
                counters: counters_len,
            });
        }
        let mut pages = Vec::new();
        for frame in frames {
            pages.push(host_page(mem, frame).ok_or(PinError::NotRam(frame))?);
        }
        let needed = (u64::from(offset) + u64::from(size)).div_ceil(PAGE_SIZE);
        if (pages.len() as u64) < needed {
            return Err(PinError::TooFewFrames {
                got: pages.len(),
                size,
                offset,
            });
        }
        let counters = usize::try_from(counters_len / 4).unwrap_or(0);
        let shadow = (0..counters).map(|_| AtomicU32::new(0)).collect();
        Ok(PinnedBuffer {
            pages,
            offset,
            size,
            shadow,
            _mem: mem.clone(),
        })
    }

    /// Pages held.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Adds 1 (wrapping) to the counter at `byte_offset`, in the guest's page and in the
    /// VMM's copy. Offsets outside the counters are ignored (profile-core never produces one).
    pub fn increment(&self, byte_offset: u64) {
        let Some(slot) = usize::try_from(byte_offset / 4)
            .ok()
            .and_then(|i| self.shadow.get(i))
        else {
            debug_assert!(false, "counter offset {byte_offset} outside the buffer");
            return;
        };
        if !byte_offset.is_multiple_of(4) {
            return;
        }
        slot.fetch_add(1, Ordering::Relaxed);
        let pos = u64::from(self.offset) + byte_offset;
        let (page, within) = (pos / PAGE_SIZE, pos % PAGE_SIZE);
        let Some(&base) = usize::try_from(page).ok().and_then(|p| self.pages.get(p)) else {
            return;
        };
        let within = usize::try_from(within).unwrap_or(0);
        // SAFETY: `base` is the host address of a whole guest RAM page kept mapped by `_mem`;
        // `within` is a multiple of 4 below 4096 (offset and byte_offset are multiples of 4),
        // so the 4 bytes lie inside that page and are 4-byte aligned (pages are page-aligned).
        // Guest memory is shared with the guest, so only atomic accesses are made to it.
        let counter = unsafe { AtomicU32::from_ptr(base.add(within).cast::<u32>()) };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The VMM's copy of the counters.
    pub fn counts(&self) -> Vec<u32> {
        self.shadow
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
    }

    #[test]
    fn counts_land_in_the_given_frames_in_order() {
        let m = mem();
        // Buffer of 8 KiB starting 0xff0 into frame 0x20, continuing in frame 0x10.
        let pin = PinnedBuffer::pin(&m, [0x20, 0x10, 0x30], 0xff0, 0x2000, 0x2000).unwrap();
        pin.increment(0);
        pin.increment(0xc);
        pin.increment(0x10);
        pin.increment(0x10);
        assert_eq!(m.read_obj::<u32>(GuestAddress(0x20ff0)).unwrap(), 1);
        assert_eq!(m.read_obj::<u32>(GuestAddress(0x20ffc)).unwrap(), 1);
        assert_eq!(m.read_obj::<u32>(GuestAddress(0x10000)).unwrap(), 2);
        assert_eq!(pin.counts()[4], 2);
    }

    #[test]
    fn counters_wrap_like_ulongs() {
        let m = mem();
        m.write_obj(u32::MAX, GuestAddress(0x5000)).unwrap();
        let pin = PinnedBuffer::pin(&m, [5], 0, 4, 4).unwrap();
        pin.increment(0);
        assert_eq!(m.read_obj::<u32>(GuestAddress(0x5000)).unwrap(), 0);
    }

    #[test]
    fn pin_never_splits_a_counter_across_pages() {
        // For every 4-byte-aligned start offset and every counter, the counter's 4 bytes lie in
        // one page: (offset + 4k) % 4096 <= 4092.
        for offset in (0..4096u64).step_by(4) {
            for counter in 0..2048u64 {
                let pos = offset + counter * 4;
                assert!(
                    pos % PAGE_SIZE <= PAGE_SIZE - 4,
                    "offset {offset} counter {counter}"
                );
            }
        }
        assert!(matches!(
            PinnedBuffer::pin(&mem(), [1], 2, 8, 4),
            Err(PinError::Layout { .. })
        ));
    }

    #[test]
    fn frames_outside_ram_are_refused() {
        let m = mem();
        assert_eq!(
            PinnedBuffer::pin(&m, [0x100], 0, 4, 4).unwrap_err(),
            PinError::NotRam(0x100)
        );
        assert_eq!(
            PinnedBuffer::pin(&m, [u64::MAX], 0, 4, 4).unwrap_err(),
            PinError::NotRam(u64::MAX)
        );
    }

    #[test]
    fn too_few_frames_are_refused() {
        let m = mem();
        assert!(matches!(
            PinnedBuffer::pin(&m, [1], 8, 4096, 4096),
            Err(PinError::TooFewFrames { got: 1, .. })
        ));
    }

    #[test]
    fn writes_outside_the_counters_never_happen() {
        let m = mem();
        let pin = PinnedBuffer::pin(&m, [7], 0, 4096, 8).unwrap();
        // In release builds an out-of-range offset is ignored; in debug it asserts.
        if !cfg!(debug_assertions) {
            pin.increment(8);
            pin.increment(4096);
        }
        pin.increment(4);
        let mut page = [0u8; 4096];
        m.read_slice(&mut page, GuestAddress(0x7000)).unwrap();
        assert_eq!(page.iter().map(|b| u32::from(*b)).sum::<u32>(), 1);
    }

    /// docs/abi.md 6.4: mode 0's frames are not compared with the buffer's mapping, and a
    /// list naming one frame twice is pinned as given (both pages' counters land in it).
    #[test]
    fn duplicate_frames_are_pinned_as_given() {
        let m = mem();
        let pin = PinnedBuffer::pin(&m, [9, 9], 0, 0x2000, 0x2000).unwrap();
        pin.increment(0);
        pin.increment(0x1000);
        assert_eq!(m.read_obj::<u32>(GuestAddress(0x9000)).unwrap(), 2);
    }
}
