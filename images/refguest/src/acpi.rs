//! ACPI: RSDP -> XSDT (or RSDT for revision 0) -> MADT local APIC entries.

const MAX_APICS: usize = crate::percpu::MAX_CPUS;

/// APIC ids of the usable CPUs listed in the MADT, in MADT order.
pub struct CpuList {
    pub ids: [u32; MAX_APICS],
    pub count: usize,
    /// CPUs listed beyond MAX_APICS.
    pub dropped: usize,
}

fn read<T: Copy>(paddr: u64) -> T {
    // SAFETY: ACPI tables live in guest RAM below 4 GiB, which is identity
    // mapped; unaligned reads because ACPI structures are packed.
    unsafe { (paddr as *const T).read_unaligned() }
}

fn checksum_ok(paddr: u64, len: u64) -> bool {
    (0..len).fold(0u8, |sum, i| sum.wrapping_add(read::<u8>(paddr + i))) == 0
}

/// Scans the BIOS area for "RSD PTR " when start_info gives no RSDP.
fn scan_rsdp() -> Option<u64> {
    (0xE_0000u64..0x10_0000).step_by(16).find(|&a| read::<[u8; 8]>(a) == *b"RSD PTR " && checksum_ok(a, 20))
}

fn find_table(rsdp: u64, signature: &[u8; 4]) -> Result<u64, &'static str> {
    if read::<[u8; 8]>(rsdp) != *b"RSD PTR " || !checksum_ok(rsdp, 20) {
        return Err("bad RSDP");
    }
    let revision: u8 = read(rsdp + 15);
    let xsdt: u64 = read(rsdp + 24);
    let (root, entry_size) = if revision >= 2 && xsdt != 0 { (xsdt, 8) } else { (u64::from(read::<u32>(rsdp + 16)), 4) };
    let len = u64::from(read::<u32>(root + 4));
    let mut at = root + 36;
    while at + entry_size <= root + len {
        let table = if entry_size == 8 { read::<u64>(at) } else { u64::from(read::<u32>(at)) };
        if read::<[u8; 4]>(table) == *signature {
            return Ok(table);
        }
        at += entry_size;
    }
    Err("no MADT")
}

/// Lists the enabled (or online-capable) local APICs in the MADT.
pub fn cpus(rsdp_paddr: u64) -> Result<CpuList, &'static str> {
    let rsdp = if rsdp_paddr != 0 { rsdp_paddr } else { scan_rsdp().ok_or("no RSDP")? };
    let madt = find_table(rsdp, b"APIC")?;
    let len = u64::from(read::<u32>(madt + 4));
    let mut list = CpuList { ids: [0; MAX_APICS], count: 0, dropped: 0 };
    let mut at = madt + 44;
    while at + 2 <= madt + len {
        let (kind, entry_len) = (read::<u8>(at), u64::from(read::<u8>(at + 1)));
        if entry_len < 2 {
            return Err("malformed MADT");
        }
        let cpu = match kind {
            0 => Some((u32::from(read::<u8>(at + 3)), read::<u32>(at + 4))),
            9 => Some((read::<u32>(at + 4), read::<u32>(at + 8))),
            _ => None,
        };
        if let Some((id, flags)) = cpu {
            if flags & 0b11 != 0 {
                if list.count < MAX_APICS {
                    list.ids[list.count] = id;
                    list.count += 1;
                } else {
                    list.dropped += 1;
                }
            }
        }
        at += entry_len;
    }
    if list.count == 0 {
        return Err("MADT lists no CPUs");
    }
    Ok(list)
}
