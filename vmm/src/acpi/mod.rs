//! ACPI tables. For direct kernel boot (this file): RSDP, XSDT, FADT, MADT (one local APIC per vCPU, the
//! IOAPIC and the ISA interrupt overrides) and a DSDT describing the platform's devices.
//! They are written into the BIOS area, where both the PVH start info and legacy scanners
//! find the RSDP. For firmware boot, `firmware.rs` builds QEMU-style tables that the
//! firmware loads from fw_cfg.

pub mod dsdt;
pub mod firmware;

pub use dsdt::PciRoot;

use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{Immutable, IntoBytes};

use crate::layout::{ACPI_SIZE, ACPI_START, IOAPIC_START, LAPIC_START};
use crate::outcome::{Blame, Fault};

pub(crate) const OEM_ID: [u8; 6] = *b"HVPROF";
pub(crate) const OEM_TABLE_ID: [u8; 8] = *b"HVPROF  ";
pub(crate) const OEM_REVISION: u32 = 1;
/// I/O port of the i8042 command register, used as the ACPI reset register.
const RESET_PORT: u64 = 0x64;
const RESET_VALUE: u8 = 0xfe;
/// IAPC_BOOT_ARCH: legacy devices and an 8042 are present.
const IAPC_LEGACY_AND_8042: u16 = 0x3;
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
}

impl Blame for AcpiError {
    fn fault(&self) -> Fault {
        match self {
            AcpiError::TooManyCpus(_) => Fault::User,
            AcpiError::TooLarge(_) | AcpiError::Write => Fault::Host,
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

/// Appends `table` to `blob` at a 16-byte boundary and returns its guest address.
fn place(blob: &mut Vec<u8>, table: &[u8]) -> u64 {
    blob.resize(blob.len().next_multiple_of(16), 0);
    let addr = ACPI_START + blob.len() as u64;
    blob.extend_from_slice(table);
    addr
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

/// Direct kernel boot keeps KVM's default routing, which wires ISA IRQ n to IOAPIC pin n (the
/// PIT on pin 0), so only the SCI needs an override: level-triggered, active high.
fn direct_overrides() -> [InterruptSourceOverride; 1] {
    [InterruptSourceOverride::new(9, 9, 0x000d)]
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

/// Writes the tables into guest memory; returns the RSDP's address.
pub fn create_acpi_tables(mem: &GuestMemoryMmap, cpus: usize) -> Result<u64, AcpiError> {
    // The RSDP goes first, at the start of the area; its XSDT pointer is filled in last.
    let mut blob = vec![0u8; Rsdp::len()];

    let mut dsdt = Sdt::new(*b"DSDT", 36, 6, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    dsdt.append_slice(&dsdt::body());
    let dsdt_addr = place(&mut blob, dsdt.as_slice());

    let reset = GAS::new(
        AddressSpace::SystemIo,
        8,
        0,
        AccessSize::ByteAccess,
        RESET_PORT,
    );
    let mut fadt = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::ResetRegSup)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    fadt.reset_reg = reset;
    fadt.reset_value = RESET_VALUE;
    fadt.iapc_boot_arch = IAPC_LEGACY_AND_8042.into();
    let fadt_addr = place(&mut blob, &to_bytes(&fadt.finalize()));

    let madt_addr = place(&mut blob, &madt_bytes(cpus, &direct_overrides())?);

    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    xsdt.add_entry(fadt_addr);
    xsdt.add_entry(madt_addr);
    let xsdt_addr = place(&mut blob, &to_bytes(&xsdt));

    let rsdp = to_bytes(&Rsdp::new(OEM_ID, xsdt_addr));
    blob[..rsdp.len()].copy_from_slice(&rsdp);

    if blob.len() as u64 > ACPI_SIZE {
        return Err(AcpiError::TooLarge(blob.len()));
    }
    mem.write_slice(&blob, GuestAddress(ACPI_START))
        .map_err(|_| AcpiError::Write)?;
    Ok(ACPI_START)
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
        let rsdp_addr = create_acpi_tables(&mem, 2).unwrap();
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
            }
        }
        assert_eq!(sigs, vec![b"FACP".to_vec(), b"APIC".to_vec()]);
    }

    #[test]
    fn too_many_cpus_is_an_error() {
        assert!(matches!(
            madt(300, &direct_overrides()),
            Err(AcpiError::TooManyCpus(300))
        ));
    }
}
