//! The host bridge at 00:00.0, identified as QEMU's i440FX (8086:1237).
//!
//! Firmware keys its platform setup on this ID: SeaBIOS's `pci_platform_tbl` accepts only
//! the i440FX (8086:1237) and Q35 (8086:29c0) bridges. With the i440FX it uses the PIIX
//! interrupt rotation (so it writes the interrupt line registers; with an unknown bridge
//! they get 0xff, "unknown routing"), and it finds the PAM registers it writes to make the
//! BIOS area writable. OVMF's PlatformPei likewise stops on an unknown host bridge ID. Q35
//! would make SeaBIOS move ECAM to its own PCIEXBAR address (0xb000_0000, inside RAM here)
//! and expect an ICH9 LPC bridge; the i440FX asks for neither.
//!
//! The chipset registers from 0x40 (PAM at 0x59-0x5f, SMRAM at 0x72) are plain storage:
//! firmware reads back what it wrote, but no shadowing is emulated (the BIOS area below
//! 1 MiB must be RAM).

use super::config::{ConfigSpace, PciIds, CAPABILITIES_START, CONFIG_SIZE};
use super::PciDevice;

/// Intel's vendor ID.
pub const INTEL_VENDOR_ID: u16 = 0x8086;
/// 82441FX (i440FX) PCI and memory controller.
pub const I440FX_DEVICE_ID: u16 = 0x1237;

/// The host bridge.
pub struct HostBridge {
    config: ConfigSpace,
}

impl HostBridge {
    /// An i440FX host bridge, revision 2, class 06.00.00, subsystem as QEMU's.
    pub fn new() -> Self {
        let mut config = ConfigSpace::new(PciIds {
            vendor: INTEL_VENDOR_ID,
            device: I440FX_DEVICE_ID,
            revision: 2,
            class: 0x06_00_00,
            subsystem_vendor: 0x1af4,
            subsystem: 0x1100,
        });
        config.set_writable(CAPABILITIES_START, CONFIG_SIZE - CAPABILITIES_START);
        HostBridge { config }
    }
}

impl Default for HostBridge {
    fn default() -> Self {
        Self::new()
    }
}

impl PciDevice for HostBridge {
    fn config_space(&self) -> &ConfigSpace {
        &self.config
    }
    fn config_space_mut(&mut self) -> &mut ConfigSpace {
        &mut self.config
    }
    fn read_bar(&mut self, _bar: u8, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn write_bar(&mut self, _bar: u8, _offset: u64, _data: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifies_as_i440fx_and_keeps_pam_writes() {
        let mut h = HostBridge::new();
        let mut id = [0; 4];
        h.read_config(0, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x1237_8086);
        let mut class = [0; 4];
        h.read_config(8, &mut class);
        assert_eq!(u32::from_le_bytes(class), 0x0600_0002);
        // SeaBIOS writes PAM0-6 as two dwords at 0x58 and reads them back.
        h.write_config(0x58, &0x3333_3000u32.to_le_bytes());
        let mut pam = [0; 4];
        h.read_config(0x58, &mut pam);
        assert_eq!(u32::from_le_bytes(pam), 0x3333_3000);
        assert_eq!(h.config_space().bars().count(), 0);
    }
}
