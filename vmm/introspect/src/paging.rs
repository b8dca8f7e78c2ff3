//! Translating guest-virtual addresses by walking the guest's own page tables, as the CPU
//! would: no paging, 32-bit (with 4 MiB pages), PAE, 4-level and 5-level long mode, with
//! 2 MiB, 4 MiB and 1 GiB pages. Table entries come from guest-physical memory through
//! [`PhysRead`] (the stack walkers' [`Memory`](crate::Memory) is guest-virtual: this is what
//! gives it its pages), so the walk is a pure function of guest bytes (and has a fuzz target).

/// Reads guest-physical memory for the walker.
pub trait PhysRead {
    /// The little-endian u64 at `gpa`, or None if it is not RAM.
    fn read_u64(&self, gpa: u64) -> Option<u64>;
    /// The little-endian u32 at `gpa`, or None if it is not RAM.
    fn read_u32(&self, gpa: u64) -> Option<u32>;
}

/// The paging registers of the vCPU whose address space is walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paging {
    /// CR0.
    pub cr0: u64,
    /// CR3.
    pub cr3: u64,
    /// CR4.
    pub cr4: u64,
    /// EFER.
    pub efer: u64,
}

const CR0_PG: u64 = 1 << 31;
const CR4_PSE: u64 = 1 << 4;
const CR4_PAE: u64 = 1 << 5;
const CR4_LA57: u64 = 1 << 12;
const EFER_LMA: u64 = 1 << 10;
const PTE_PRESENT: u64 = 1;
const PTE_WRITABLE: u64 = 1 << 1;
const PTE_LARGE: u64 = 1 << 7;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
const PAGE_4K: u64 = 0x1000;

/// Why an address does not translate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    /// A non-canonical long-mode address.
    #[error("address {0:#x} is not canonical")]
    NonCanonical(u64),
    /// An entry on the way is not present.
    #[error("{0:#x} is not mapped")]
    NotPresent(u64),
    /// A page table lies outside guest RAM.
    #[error("a page table of {0:#x} is not in guest RAM")]
    TableNotRam(u64),
    /// A large-page bit where the architecture has none.
    #[error("{0:#x} has a malformed page-table entry")]
    Malformed(u64),
}

/// A translated address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// Guest-physical address.
    pub gpa: u64,
    /// Writable at every level.
    pub writable: bool,
    /// The bytes the last entry maps: 4 KiB, or a large page (2 MiB, 4 MiB, 1 GiB).
    pub size: u64,
}

/// Translates `va` in the address space `paging` describes.
pub fn translate(mem: &impl PhysRead, paging: &Paging, va: u64) -> Result<Translation, WalkError> {
    lookup(mem, paging, va).map_err(|m| m.error)
}

/// The unmapped range around `va`: when `va` does not translate because an entry on the way
/// is not present, the naturally aligned range that entry would have mapped (`[start, start +
/// len)`: a 4 KiB page, or 2 MiB, 1 GiB, 512 GiB ... of which no byte is mapped). None when `va`
/// translates or fails for another reason. A search over many pages can step over such a
/// range in one walk instead of one walk a page.
pub fn hole(mem: &impl PhysRead, paging: &Paging, va: u64) -> Option<(u64, u64)> {
    lookup(mem, paging, va).err().and_then(|m| m.hole(va))
}

/// Why a walk stopped: the error, and the size (log2 bytes) of what the entry it stopped at
/// maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Miss {
    /// Why.
    pub error: WalkError,
    shift: u32,
}

impl Miss {
    fn at(error: WalkError, shift: u32) -> Self {
        Miss { error, shift }
    }

    /// The unmapped range around the address the walk was for (see [`hole`]).
    pub fn hole(&self, va: u64) -> Option<(u64, u64)> {
        if !matches!(self.error, WalkError::NotPresent(_)) {
            return None;
        }
        let len = 1u64.checked_shl(self.shift)?;
        Some((va & !(len - 1), len))
    }
}

/// [`translate`], saying on failure how much around `va` is unmapped with it ([`Miss::hole`]).
pub fn lookup(mem: &impl PhysRead, paging: &Paging, va: u64) -> Result<Translation, Miss> {
    if paging.cr0 & CR0_PG == 0 {
        return Ok(Translation {
            gpa: va & 0xffff_ffff,
            writable: true,
            size: PAGE_4K,
        });
    }
    if paging.efer & EFER_LMA != 0 {
        let levels = if paging.cr4 & CR4_LA57 != 0 { 5 } else { 4 };
        let bits = 12 + 9 * levels;
        let shift = 64 - bits;
        // Canonical: the bits above the top bit are copies of it.
        let sign_extended = i64::from_ne_bytes((va << shift).to_ne_bytes()) >> shift;
        if u64::from_ne_bytes(sign_extended.to_ne_bytes()) != va {
            return Err(Miss::at(WalkError::NonCanonical(va), 12));
        }
        return walk_64(mem, va, paging.cr3 & ADDR_MASK, levels);
    }
    if paging.cr4 & CR4_PAE != 0 {
        let va = va & 0xffff_ffff;
        let pdpte_at = (paging.cr3 & 0xffff_ffe0) + ((va >> 30) & 3) * 8;
        let pdpte = mem
            .read_u64(pdpte_at)
            .ok_or(Miss::at(WalkError::TableNotRam(va), 30))?;
        if pdpte & PTE_PRESENT == 0 {
            return Err(Miss::at(WalkError::NotPresent(va), 30));
        }
        // PDPTEs have no R/W bit in PAE mode: writability comes from the lower levels.
        return walk_64(mem, va, pdpte & ADDR_MASK, 2);
    }
    walk_32(mem, va & 0xffff_ffff, paging)
}

/// Walks `levels` levels of 8-byte entries from `table`.
fn walk_64(mem: &impl PhysRead, va: u64, mut table: u64, levels: u32) -> Result<Translation, Miss> {
    let mut writable = true;
    for level in (1..=levels).rev() {
        let shift = 12 + 9 * (level - 1);
        let entry_at = table + ((va >> shift) & 0x1ff) * 8;
        let entry = mem
            .read_u64(entry_at)
            .ok_or(Miss::at(WalkError::TableNotRam(va), shift))?;
        if entry & PTE_PRESENT == 0 {
            return Err(Miss::at(WalkError::NotPresent(va), shift));
        }
        writable &= entry & PTE_WRITABLE != 0;
        let large = entry & PTE_LARGE != 0;
        if large && level > 3 {
            return Err(Miss::at(WalkError::Malformed(va), shift));
        }
        if level == 1 || large {
            let page_mask = (1u64 << shift) - 1;
            let gpa = (entry & ADDR_MASK & !page_mask) | (va & page_mask);
            return Ok(Translation {
                gpa,
                writable,
                size: 1 << shift,
            });
        }
        table = entry & ADDR_MASK;
    }
    Err(Miss::at(WalkError::Malformed(va), 12))
}

/// Legacy 32-bit paging: two levels of 4-byte entries, 4 MiB pages with CR4.PSE.
fn walk_32(mem: &impl PhysRead, va: u64, paging: &Paging) -> Result<Translation, Miss> {
    let pde_at = (paging.cr3 & 0xffff_f000) + ((va >> 22) & 0x3ff) * 4;
    let pde = mem
        .read_u32(pde_at)
        .ok_or(Miss::at(WalkError::TableNotRam(va), 22))?;
    let pde = u64::from(pde);
    if pde & PTE_PRESENT == 0 {
        return Err(Miss::at(WalkError::NotPresent(va), 22));
    }
    if pde & PTE_LARGE != 0 && paging.cr4 & CR4_PSE != 0 {
        // PSE-36: bits 13..20 of the entry are physical bits 32..39.
        let gpa = (pde & 0xffc0_0000) | ((pde & 0x001f_e000) << 19) | (va & 0x003f_ffff);
        return Ok(Translation {
            gpa,
            writable: pde & PTE_WRITABLE != 0,
            size: 4 << 20,
        });
    }
    let pte_at = (pde & 0xffff_f000) + ((va >> 12) & 0x3ff) * 4;
    let pte = mem
        .read_u32(pte_at)
        .ok_or(Miss::at(WalkError::TableNotRam(va), 12))?;
    let pte = u64::from(pte);
    if pte & PTE_PRESENT == 0 {
        return Err(Miss::at(WalkError::NotPresent(va), 12));
    }
    Ok(Translation {
        gpa: (pte & 0xffff_f000) | (va & 0xfff),
        writable: pde & pte & PTE_WRITABLE != 0,
        size: PAGE_4K,
    })
}

/// The guest frames backing `[va, va + len)`, one per 4 KiB page in order, all writable.
pub fn writable_frames(
    mem: &impl PhysRead,
    paging: &Paging,
    va: u64,
    len: u64,
) -> Result<Vec<u64>, WalkError> {
    let end = va.checked_add(len).ok_or(WalkError::NotPresent(va))?;
    let first = va & !0xfff;
    let mut frames = Vec::new();
    let mut page = first;
    while page < end {
        let t = translate(mem, paging, page)?;
        if !t.writable {
            return Err(WalkError::NotPresent(page));
        }
        frames.push(t.gpa >> 12);
        page = match page.checked_add(0x1000) {
            Some(p) => p,
            None => break,
        };
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Mem(HashMap<u64, u64>);
    impl PhysRead for Mem {
        fn read_u64(&self, gpa: u64) -> Option<u64> {
            (gpa < 1 << 32).then(|| self.0.get(&gpa).copied().unwrap_or(0))
        }
        fn read_u32(&self, gpa: u64) -> Option<u32> {
            self.read_u64(gpa)
                .map(|v| u32::try_from(v & 0xffff_ffff).unwrap())
        }
    }

    const RW: u64 = PTE_PRESENT | PTE_WRITABLE;

    fn long_mode(cr3: u64, la57: bool) -> Paging {
        Paging {
            cr0: CR0_PG | 1,
            cr3,
            cr4: CR4_PAE | if la57 { CR4_LA57 } else { 0 },
            efer: EFER_LMA,
        }
    }

    #[test]
    fn four_level_4k_page() {
        let mut m = Mem::default();
        let va = 0x0000_7f12_3456_7abcu64;
        m.0.insert(0x1000 + ((va >> 39) & 0x1ff) * 8, 0x2000 | RW);
        m.0.insert(0x2000 + ((va >> 30) & 0x1ff) * 8, 0x3000 | RW);
        m.0.insert(0x3000 + ((va >> 21) & 0x1ff) * 8, 0x4000 | RW);
        m.0.insert(0x4000 + ((va >> 12) & 0x1ff) * 8, 0xabc_d000 | RW);
        let t = translate(&m, &long_mode(0x1000, false), va).unwrap();
        assert_eq!(
            t,
            Translation {
                gpa: 0xabc_dabc,
                writable: true,
                size: 0x1000
            }
        );
    }

    #[test]
    fn two_mib_and_one_gib_pages() {
        let mut m = Mem::default();
        m.0.insert(0x1000, 0x2000 | RW);
        m.0.insert(0x2000, 0x4000_0000 | RW | PTE_LARGE); // 1 GiB page for 0..1 GiB
        m.0.insert(0x2008, 0x3000 | RW);
        m.0.insert(0x3000, 0x0060_0000 | PTE_PRESENT | PTE_LARGE); // 2 MiB, read-only
        let p = long_mode(0x1000, false);
        let t = translate(&m, &p, 0x1234_5678).unwrap();
        assert_eq!((t.gpa, t.size), (0x5234_5678, 1 << 30));
        let t = translate(&m, &p, 0x4012_3456).unwrap();
        assert_eq!(
            t,
            Translation {
                gpa: 0x0072_3456,
                writable: false,
                size: 2 << 20
            }
        );
    }

    #[test]
    fn five_level_walk_uses_bits_48_to_56() {
        let mut m = Mem::default();
        let va = 0x00ab_0000_0000_1000u64;
        m.0.insert(0x1000 + ((va >> 48) & 0x1ff) * 8, 0x2000 | RW);
        m.0.insert(0x2000, 0x3000 | RW);
        m.0.insert(0x3000, 0x4000 | RW);
        m.0.insert(0x4000, 0x5000 | RW);
        m.0.insert(0x5008, 0x9000 | RW);
        assert_eq!(
            translate(&m, &long_mode(0x1000, true), va).unwrap().gpa,
            0x9000
        );
        // The same address is not canonical with 4 levels.
        assert_eq!(
            translate(&m, &long_mode(0x1000, false), va),
            Err(WalkError::NonCanonical(va))
        );
    }

    #[test]
    fn not_present_and_tables_outside_ram_are_errors() {
        let mut m = Mem::default();
        let p = long_mode(0x1000, false);
        assert_eq!(
            translate(&m, &p, 0x1000),
            Err(WalkError::NotPresent(0x1000))
        );
        m.0.insert(0x1000, 0x1_0000_0000 | RW);
        assert_eq!(
            translate(&m, &p, 0x1000),
            Err(WalkError::TableNotRam(0x1000))
        );
    }

    #[test]
    fn a_hole_is_the_range_the_missing_entry_would_map() {
        let mut m = Mem::default();
        let p = long_mode(0x1000, false);
        // Nothing below the PML4: 512 GiB.
        assert_eq!(
            hole(&m, &p, 0x12_3456_7000),
            Some((0, 1 << 39)),
            "the first PML4 entry is not present"
        );
        m.0.insert(0x1000, 0x2000 | RW);
        m.0.insert(0x2000 + 8, 0x3000 | RW); // PDPT entry 1: 1 GiB..2 GiB
        m.0.insert(0x3000 + 8 * 3, 0x4000 | RW); // PD entry 3: 1 GiB + 6 MiB
        m.0.insert(0x4000 + 8 * 5, 0x50_0000 | RW);
        let gib = 1u64 << 30;
        assert_eq!(hole(&m, &p, 0x8000_0000 + 0x1234), Some((2 * gib, gib)));
        assert_eq!(hole(&m, &p, gib + 0x1234), Some((gib, 2 << 20)));
        assert_eq!(
            hole(&m, &p, gib + (6 << 20)),
            Some((gib + (6 << 20), 0x1000))
        );
        assert_eq!(hole(&m, &p, gib + (6 << 20) + 0x5000), None, "mapped");
        // A table outside RAM is not a hole: nothing is known about what it maps.
        m.0.insert(0x3000 + 8 * 4, 0x1_0000_0000 | RW);
        assert_eq!(hole(&m, &p, gib + (8 << 20)), None);
        // Legacy 32-bit paging: a missing page directory entry is 4 MiB.
        let legacy = Paging {
            cr0: CR0_PG | 1,
            cr3: 0x8000,
            cr4: 0,
            efer: 0,
        };
        assert_eq!(hole(&m, &legacy, 0x0123_4567), Some((0x0100_0000, 4 << 20)));
        // No paging: everything is mapped.
        assert_eq!(hole(&m, &Paging::default(), 0x1000), None);
    }

    #[test]
    fn pae_and_legacy_32_bit_paging() {
        let mut m = Mem::default();
        m.0.insert(0x1000, 0x2000 | PTE_PRESENT); // PDPTE 0
        m.0.insert(0x2000, 0x0020_0000 | RW | PTE_LARGE); // 2 MiB page
        let pae = Paging {
            cr0: CR0_PG | 1,
            cr3: 0x1000,
            cr4: CR4_PAE,
            efer: 0,
        };
        assert_eq!(translate(&m, &pae, 0x1234).unwrap().gpa, 0x0020_1234);
        let mut m = Mem::default();
        m.0.insert(0x1000, 0x0040_0000 | RW | PTE_LARGE); // 4 MiB page via PSE
        let legacy = Paging {
            cr0: CR0_PG | 1,
            cr3: 0x1000,
            cr4: CR4_PSE,
            efer: 0,
        };
        assert_eq!(translate(&m, &legacy, 0x12_3456).unwrap().gpa, 0x0052_3456);
    }

    #[test]
    fn paging_off_is_identity() {
        let m = Mem::default();
        let t = translate(&m, &Paging::default(), 0x12_3456).unwrap();
        assert_eq!(
            t,
            Translation {
                gpa: 0x12_3456,
                writable: true,
                size: 0x1000
            }
        );
    }

    #[test]
    fn writable_frames_covers_every_page_and_refuses_read_only() {
        let mut m = Mem::default();
        m.0.insert(0x1000, 0x2000 | RW);
        m.0.insert(0x2000, 0x3000 | RW);
        m.0.insert(0x3000, 0x4000 | RW);
        m.0.insert(0x4000 + 8 * 5, 0x50_0000 | RW);
        m.0.insert(0x4000 + 8 * 6, 0x90_0000 | RW);
        m.0.insert(0x4000 + 8 * 7, 0x70_0000 | PTE_PRESENT);
        let p = long_mode(0x1000, false);
        assert_eq!(
            writable_frames(&m, &p, 0x5ffc, 8).unwrap(),
            vec![0x500, 0x900]
        );
        assert_eq!(
            writable_frames(&m, &p, 0x6ff0, 0x20),
            Err(WalkError::NotPresent(0x7000))
        );
    }

    /// docs/abi.md 6.2 and 6.4: "mapped writable" is Present and R/W at every level of the
    /// walk, whatever the U/S bits and CR0.WP say; CR3's low 12 bits (PCID, PWT, PCD) are
    /// masked as the CPU masks them, so mode 1's `cr3` may carry them.
    #[test]
    fn writable_means_rw_at_every_level_and_cr3_low_bits_are_masked() {
        let mut m = Mem::default();
        m.0.insert(0x1000, 0x2000 | RW); // supervisor-only at every level
        m.0.insert(0x2000, 0x3000 | RW);
        m.0.insert(0x3000, 0x4000 | RW);
        m.0.insert(0x4000 + 8 * 5, 0x50_0000 | RW);
        m.0.insert(0x4000 + 8 * 6, 0x60_0000 | PTE_PRESENT);
        let p = long_mode(0x1000 | 0xfff, false);
        assert_eq!(writable_frames(&m, &p, 0x5000, 8).unwrap(), vec![0x500]);
        let no_wp = Paging {
            cr0: p.cr0 & !(1 << 16),
            ..p
        };
        assert_eq!(
            writable_frames(&m, &no_wp, 0x6000, 8),
            Err(WalkError::NotPresent(0x6000))
        );
    }
}
