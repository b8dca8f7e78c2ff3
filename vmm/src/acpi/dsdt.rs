//! The DSDT's AML: the system bus with COM1, and the S5 sleep state.

use acpi_tables::aml::{
    Device, EISAName, Interrupt, Name, Package, Path, ResourceTemplate, Scope, IO,
};
use acpi_tables::Aml;

/// The DSDT body (everything after the table header).
pub fn body() -> Vec<u8> {
    let mut out = Vec::new();
    let com1_io = IO::new(0x3f8, 0x3f8, 0, 8);
    let com1_irq = Interrupt::new(true, true, false, false, 4);
    let com1_crs = ResourceTemplate::new(vec![&com1_io, &com1_irq]);
    let com1_hid = EISAName::new("PNP0501");
    let hid = Name::new("_HID".into(), &com1_hid);
    let uid = Name::new("_UID".into(), &0u8);
    let crs = Name::new("_CRS".into(), &com1_crs);
    let com1 = Device::new("COM1".into(), vec![&hid, &uid, &crs]);
    Scope::new(Path::new("\\_SB_"), vec![&com1]).to_aml_bytes(&mut out);
    let s5 = Package::new(vec![&5u8, &0u8]);
    Name::new("_S5_".into(), &s5).to_aml_bytes(&mut out);
    out
}
