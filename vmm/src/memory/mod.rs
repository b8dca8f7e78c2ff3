//! Guest RAM: regions split around the PCI hole, and the memory map the guest sees.

mod phys;
mod ram;

pub use phys::GuestPhys;
pub use ram::GuestRam;

use vm_memory::{GuestAddress, GuestMemoryMmap};

use crate::layout::{
    ACPI_SIZE, ACPI_START, EBDA_START, HIGH_MEMORY_START, MMIO_HOLE_START, RAM_ABOVE_4G_START,
};
use crate::outcome::{Blame, Fault};

/// Errors creating guest memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The requested size is too small to hold the boot structures and a kernel.
    #[error("guest memory of {0} MiB is too small (at least 8 MiB is needed)")]
    TooSmall(u64),
    /// The host refused the mapping.
    #[error("cannot map {0} MiB of guest memory")]
    Mmap(u64, #[source] vm_memory::mmap::FromRangesError),
}

impl Blame for MemoryError {
    fn fault(&self) -> Fault {
        match self {
            MemoryError::TooSmall(_) => Fault::User,
            MemoryError::Mmap(..) => Fault::Host,
        }
    }
}

/// Smallest guest we agree to build.
pub const MIN_MEMORY_MIB: u64 = 8;

/// The kind of a memory-map entry (e820 numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeKind {
    /// Usable RAM.
    Ram = 1,
    /// Reserved.
    Reserved = 2,
    /// ACPI tables (reclaimable).
    Acpi = 3,
}

/// One entry of the guest's memory map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// Guest-physical start.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// What the range holds.
    pub kind: RangeKind,
}

/// The RAM regions of a guest of `mem_size` bytes: one below the PCI hole, and the
/// remainder above 4 GiB.
pub fn ram_regions(mem_size: u64) -> Vec<(GuestAddress, usize)> {
    let low = mem_size.min(MMIO_HOLE_START);
    let mut regions = vec![(GuestAddress(0), to_usize(low))];
    if mem_size > MMIO_HOLE_START {
        regions.push((
            GuestAddress(RAM_ABOVE_4G_START),
            to_usize(mem_size - MMIO_HOLE_START),
        ));
    }
    regions
}

/// Creates the guest RAM mapping for `mem_mib` MiB.
pub fn create_guest_memory(mem_mib: u64) -> Result<GuestMemoryMmap, MemoryError> {
    if mem_mib < MIN_MEMORY_MIB {
        return Err(MemoryError::TooSmall(mem_mib));
    }
    GuestMemoryMmap::from_ranges(&ram_regions(mem_mib << 20))
        .map_err(|e| MemoryError::Mmap(mem_mib, e))
}

/// The memory map reported to the guest (e820 / PVH memmap / multiboot mmap).
pub fn memory_map(mem_size: u64) -> Vec<MapEntry> {
    let low_end = mem_size.min(MMIO_HOLE_START);
    let mut map = vec![
        MapEntry {
            addr: 0,
            size: EBDA_START,
            kind: RangeKind::Ram,
        },
        MapEntry {
            addr: ACPI_START,
            size: ACPI_SIZE,
            kind: RangeKind::Acpi,
        },
        MapEntry {
            addr: HIGH_MEMORY_START,
            size: low_end - HIGH_MEMORY_START,
            kind: RangeKind::Ram,
        },
    ];
    if mem_size > MMIO_HOLE_START {
        map.push(MapEntry {
            addr: RAM_ABOVE_4G_START,
            size: mem_size - MMIO_HOLE_START,
            kind: RangeKind::Ram,
        });
    }
    map
}

/// End (exclusive) of the RAM below the PCI hole.
pub fn low_ram_end(mem_size: u64) -> u64 {
    mem_size.min(MMIO_HOLE_START)
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).expect("guest memory size fits the host address space")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_guest_has_one_region() {
        let r = ram_regions(256 << 20);
        assert_eq!(r, vec![(GuestAddress(0), 256 << 20)]);
    }

    #[test]
    fn large_guest_is_split_around_the_pci_hole() {
        let r = ram_regions(4 << 30);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], (GuestAddress(0), 0xc000_0000));
        assert_eq!(r[1], (GuestAddress(0x1_0000_0000), 0x4000_0000));
        let map = memory_map(4 << 30);
        let ram: u64 = map
            .iter()
            .filter(|e| e.kind == RangeKind::Ram)
            .map(|e| e.size)
            .sum();
        // Everything but the BIOS area below 1 MiB is reported as RAM.
        assert_eq!(ram, (4 << 30) - (HIGH_MEMORY_START - EBDA_START));
    }

    #[test]
    fn too_small_guest_is_refused() {
        assert!(matches!(
            create_guest_memory(4),
            Err(MemoryError::TooSmall(4))
        ));
    }
}
