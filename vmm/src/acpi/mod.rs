//! ACPI tables: one description of the machine for both boot paths. [`tables`] builds the
//! tables (FACS, DSDT, full FADT, MADT, MCFG, RSDT, XSDT, RSDP) and QEMU's linker/loader
//! script that places and links them. A firmware boot hands both to the firmware through
//! fw_cfg; a direct kernel boot ([`create_acpi_tables`]) runs the same script here, into the
//! BIOS area, where both the PVH start info and legacy scanners find the RSDP.

pub mod dsdt;
pub mod tables;

pub use dsdt::PciRoot;

use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::Aml;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{Immutable, IntoBytes};

use crate::layout::{ACPI_SIZE, ACPI_START, IOAPIC_START, LAPIC_START};
use crate::outcome::{Blame, Fault};
use devices::fw_cfg::loader::execute;

pub(crate) const OEM_ID: [u8; 6] = *b"HVPROF";
pub(crate) const OEM_TABLE_ID: [u8; 8] = *b"HVPROF  ";
pub(crate) const OEM_REVISION: u32 = 1;
/// MADT flags: PCAT_COMPAT (dual 8259s present).
const MADT_PCAT_COMPAT: u32 = 1;

/// Errors building the tables.
#[derive(Debug, thiserror::Error)]
pub enum AcpiError {
    /// The tables do not fit the area reserved for them.
    #[error("ACPI tables need {0} bytes; the reserved area holds {ACPI_SIZE}")]
    TooLarge(usize),
    /// Guest memory refused the write.
    #[error("cannot write the ACPI tables into guest memory")]
    Write,
    /// More vCPUs than the MADT's 8-bit APIC ids can name.
    #[error("{0} vCPUs cannot be described with xAPIC ids")]
    TooManyCpus(usize),
    /// The tables' loader script does not link (a bug in the tables' builder).
    #[error("the ACPI loader script does not run: {0}")]
    Link(String),
}

impl Blame for AcpiError {
    fn fault(&self) -> Fault {
        match self {
            AcpiError::TooManyCpus(_) => Fault::User,
            AcpiError::TooLarge(_) | AcpiError::Write | AcpiError::Link(_) => Fault::Host,
        }
    }
}

/// MADT Interrupt Source Override (type 2).
#[repr(C, packed)]
#[derive(Clone, Copy, Default, IntoBytes, Immutable)]
pub struct InterruptSourceOverride {
    kind: u8,
    length: u8,
    bus: u8,
    source: u8,
    gsi: u32,
    flags: u16,
}

impl Aml for InterruptSourceOverride {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        sink.vec(self.as_bytes());
    }
}

impl InterruptSourceOverride {
    /// ISA IRQ `source` is GSI `gsi` with MPS INTI `flags`.
    pub fn new(source: u8, gsi: u32, flags: u16) -> Self {
        InterruptSourceOverride {
            kind: 2,
            length: 10,
            bus: 0,
            source,
            gsi,
            flags,
        }
    }
}

pub(crate) fn to_bytes(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

/// Builds the MADT for `cpus` vCPUs with APIC ids 0..cpus and the given ISA overrides.
fn madt(cpus: usize, overrides: &[InterruptSourceOverride]) -> Result<MADT, AcpiError> {
    let too_many = || AcpiError::TooManyCpus(cpus);
    let mut madt = MADT::new(
        OEM_ID,
        OEM_TABLE_ID,
        OEM_REVISION,
        LocalInterruptController::Address(u32::try_from(LAPIC_START).map_err(|_| too_many())?),
    );
    for i in 0..cpus {
        let id = u8::try_from(i)
            .ok()
            .filter(|&id| id < 0xff)
            .ok_or_else(too_many)?;
        madt.add_structure(ProcessorLocalApic::new(id, id, EnabledStatus::Enabled));
    }
    let ioapic_id = u8::try_from(cpus).map_err(|_| too_many())?;
    madt.add_structure(IoApic::new(
        ioapic_id,
        u32::try_from(IOAPIC_START).unwrap_or(0),
        0,
    ));
    for o in overrides {
        madt.add_structure(*o);
    }
    Ok(madt)
}

/// The MADT's bytes, with PCAT_COMPAT set (the crate has no setter for the flags field).
pub(crate) fn madt_bytes(
    cpus: usize,
    overrides: &[InterruptSourceOverride],
) -> Result<Vec<u8>, AcpiError> {
    const FLAGS_OFFSET: usize = 40;
    const CHECKSUM_OFFSET: usize = 9;
    let mut t = to_bytes(&madt(cpus, overrides)?);
    t[FLAGS_OFFSET..FLAGS_OFFSET + 4].copy_from_slice(&MADT_PCAT_COMPAT.to_le_bytes());
    t[CHECKSUM_OFFSET] = 0;
    let sum = t.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    t[CHECKSUM_OFFSET] = sum.wrapping_neg();
    Ok(t)
}

/// Writes the platform's tables for `cpus` vCPUs and the PCI root `root` into the BIOS area
/// for a direct kernel boot, running their loader script as firmware would (files placed one
/// after another from `ACPI_START`); returns the RSDP's address.
pub fn create_acpi_tables(
    mem: &GuestMemoryMmap,
    cpus: usize,
    root: &PciRoot,
) -> Result<u64, AcpiError> {
    let t = tables::build_tables(cpus, root)?;
    let mut files = vec![
        (tables::TABLES_FILE.to_string(), t.tables),
        (tables::RSDP_FILE.to_string(), t.rsdp),
    ];
    let mut next = ACPI_START;
    let placed = execute(&t.loader, &mut files, |_, len, align| {
        let at = next.next_multiple_of(u64::from(align.max(1)));
        next = at + len as u64;
        at
    })
    .map_err(AcpiError::Link)?;
    let used = next - ACPI_START;
    if used > ACPI_SIZE {
        return Err(AcpiError::TooLarge(
            usize::try_from(used).unwrap_or(usize::MAX),
        ));
    }
    let mut rsdp = None;
    for (name, at) in &placed {
        if let Some((_, bytes)) = files.iter().find(|(n, _)| n == name) {
            mem.write_slice(bytes, GuestAddress(*at))
                .map_err(|_| AcpiError::Write)?;
        }
        if name == tables::RSDP_FILE {
            rsdp = Some(*at);
        }
    }
    rsdp.ok_or_else(|| AcpiError::Link(format!("{} was not allocated", tables::RSDP_FILE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum_ok(b: &[u8]) -> bool {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
    }

    fn table_at(mem: &GuestMemoryMmap, addr: u64) -> Vec<u8> {
        let len: u32 = mem.read_obj(GuestAddress(addr + 4)).unwrap();
        let mut t = vec![0u8; len as usize];
        mem.read_slice(&mut t, GuestAddress(addr)).unwrap();
        t
    }

    #[test]
    fn tables_chain_from_the_rsdp_with_valid_checksums() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        let rsdp_addr = create_acpi_tables(&mem, 2, &dsdt::PciRoot::platform()).unwrap();
        // Where legacy scanners look: a 16-byte boundary in 0xE0000-0xFFFFF.
        assert!((0xe_0000..0x10_0000).contains(&rsdp_addr) && rsdp_addr.is_multiple_of(16));
        let mut rsdp = [0u8; 36];
        mem.read_slice(&mut rsdp, GuestAddress(rsdp_addr)).unwrap();
        assert_eq!(&rsdp[..8], b"RSD PTR ");
        assert!(checksum_ok(&rsdp[..20]) && checksum_ok(&rsdp));
        let xsdt_addr = u64::from_le_bytes(rsdp[24..32].try_into().unwrap());
        let xsdt = table_at(&mem, xsdt_addr);
        assert_eq!(&xsdt[..4], b"XSDT");
        assert!(checksum_ok(&xsdt));
        let mut sigs = Vec::new();
        for entry in xsdt[36..].chunks(8) {
            let t = table_at(&mem, u64::from_le_bytes(entry.try_into().unwrap()));
            assert!(checksum_ok(&t), "bad checksum in {:?}", &t[..4]);
            sigs.push(t[..4].to_vec());
            if &t[..4] == b"APIC" {
                // Two local APIC entries (type 0) with ids 0 and 1.
                let mut ids = Vec::new();
                let mut off = 44;
                while off < t.len() {
                    if t[off] == 0 {
                        ids.push(t[off + 3]);
                    }
                    off += t[off + 1] as usize;
                }
                assert_eq!(ids, vec![0, 1]);
                assert_eq!(t[40] & 1, 1, "PCAT_COMPAT");
            }
            if &t[..4] == b"FACP" {
                let dsdt = table_at(&mem, u64::from_le_bytes(t[140..148].try_into().unwrap()));
                assert_eq!(&dsdt[..4], b"DSDT");
                assert!(checksum_ok(&dsdt));
                for name in [&b"PCI0"[..], b"_PRT", b"_CRS", b"RTC_", b"_S5_"] {
                    assert!(dsdt.windows(4).any(|w| w == name), "{name:?}");
                }
                // A FACS (no checksum, 64-byte aligned), and not hardware-reduced.
                let facs = u64::from(u32::from_le_bytes(t[36..40].try_into().unwrap()));
                assert!(facs.is_multiple_of(64));
                let mut sig = [0u8; 4];
                mem.read_slice(&mut sig, GuestAddress(facs)).unwrap();
                assert_eq!(&sig, b"FACS");
                let flags = u32::from_le_bytes(t[112..116].try_into().unwrap());
                assert_eq!(flags & (1 << 20), 0, "HW_REDUCED_ACPI");
            }
        }
        assert_eq!(
            sigs,
            vec![b"FACP".to_vec(), b"APIC".to_vec(), b"MCFG".to_vec()]
        );
    }

    #[test]
    fn too_many_cpus_is_an_error() {
        assert!(matches!(
            madt(300, &tables::isa_overrides()),
            Err(AcpiError::TooManyCpus(300))
        ));
    }
}
