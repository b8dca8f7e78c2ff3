//! The boot GDT and the segment registers that match it.

use kvm_bindings::kvm_segment;

/// Selector of the code segment.
pub const CODE_SELECTOR: u16 = 0x08;
/// Selector of the data segments.
pub const DATA_SELECTOR: u16 = 0x10;
/// Selector of the TSS.
pub const TSS_SELECTOR: u16 = 0x18;

/// Builds a GDT entry from flags (the access byte and the granularity nibble), base and limit.
pub const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << (56 - 24))
        | ((flags as u64 & 0x0000_f0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << (48 - 16))
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

/// The four entries of a boot GDT: null, code, data, TSS. `long` selects a 64-bit code
/// segment, otherwise a 32-bit one.
pub fn boot_gdt(long: bool) -> [u64; 4] {
    let code = if long { 0xa09b } else { 0xc09b };
    [
        0,
        gdt_entry(code, 0, 0xfffff),
        gdt_entry(0xc093, 0, 0xfffff),
        gdt_entry(0x808b, 0, 0xfffff),
    ]
}

/// The hidden-state form of a GDT entry, to load straight into a segment register.
pub fn segment_from_entry(entry: u64, selector: u16) -> kvm_segment {
    // Every field is masked to at most 4 bits, so it fits a u8.
    let bits = |shift: u32, mask: u64| u8::try_from((entry >> shift) & mask).unwrap_or(0);
    kvm_segment {
        base: ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000),
        limit: limit_of(entry),
        selector,
        type_: bits(40, 0xf),
        present: bits(47, 1),
        dpl: bits(45, 3),
        db: bits(54, 1),
        s: bits(44, 1),
        l: bits(53, 1),
        g: bits(55, 1),
        avl: bits(52, 1),
        padding: 0,
        unusable: u8::from(bits(47, 1) == 0),
    }
}

fn limit_of(entry: u64) -> u32 {
    // 20 bits of limit always fit a u32.
    let raw = u32::try_from((entry & 0xffff) | ((entry >> 32) & 0x000f_0000)).unwrap_or(0);
    if (entry >> 55) & 1 == 1 {
        (raw << 12) | 0xfff
    } else {
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_code_segment_round_trips() {
        let seg = segment_from_entry(gdt_entry(0xa09b, 0, 0xfffff), CODE_SELECTOR);
        assert_eq!(seg.base, 0);
        assert_eq!(seg.limit, 0xffff_ffff);
        assert_eq!(
            (seg.type_, seg.present, seg.s, seg.l, seg.db, seg.g),
            (0xb, 1, 1, 1, 0, 1)
        );
    }

    #[test]
    fn entry_encodes_base_and_limit() {
        let e = gdt_entry(0x008b, 0x1234_5678, 0x67);
        let seg = segment_from_entry(e, TSS_SELECTOR);
        assert_eq!(seg.base, 0x1234_5678);
        assert_eq!(seg.limit, 0x67);
        assert_eq!(seg.type_, 0xb);
    }
}
