//! PCI: a host bridge with configuration space through ports 0xCF8/0xCFC and ECAM, the
//! `PciDevice` trait, and the mapping of the BARs guests program onto the buses.
//!
//! | file | role |
//! | --- | --- |
//! | `config.rs` | a type-0 configuration space: write masks, BAR sizing, capabilities |
//! | `root.rs` | `PciRoot`: bus 0's functions, the 0xCF8/0xCFC and ECAM access devices, BAR mapping |
//! | `host_bridge.rs` | the i440FX host bridge at 00:00.0 |
//! | `msix.rs` | MSI-X: capability, vector table, pending bits, delivery by `KVM_SIGNAL_MSI` |
//!
//! Interrupts: INTx of a device in slot `s` using pin `p` (1 = INTA#) is GSI
//! [`intx_gsi`]`(s, p)`: the PIIX rotation SeaBIOS computes for QEMU's i440FX machine
//! (PIRQ index `(s + p - 2) & 3`, PIRQA..D = 10, 10, 11, 11), so the interrupt line
//! SeaBIOS writes matches the GSI the VMM raises. The DSDT's `_PRT` must give the same map.

pub mod config;
pub mod host_bridge;
pub mod msix;
pub mod root;

pub use config::{BarKind, BarRegion, ConfigSpace, ConfigSpaceError, PciIds};
pub use root::{PciError, PciRoot, PciWindows};

/// GSIs of PIRQA..PIRQD (as SeaBIOS programs the PIIX router on QEMU).
pub const PIRQ_GSIS: [u8; 4] = [10, 10, 11, 11];

/// The GSI that INTx pin `pin` (1 = INTA# .. 4 = INTD#) of a device in `slot` on bus 0 is
/// routed to.
pub fn intx_gsi(slot: u8, pin: u8) -> u8 {
    let index = (usize::from(slot) + usize::from(pin.clamp(1, 4)) + 2) & 3;
    PIRQ_GSIS[index]
}

/// Device and function number packed as in CONFIG_ADDRESS (`slot << 3 | function`).
pub fn devfn(slot: u8, function: u8) -> u8 {
    ((slot & 0x1f) << 3) | (function & 7)
}

/// A PCI function: its configuration space and the accesses to its BARs.
pub trait PciDevice: Send {
    /// The configuration space.
    fn config_space(&self) -> &ConfigSpace;
    /// The configuration space, for writes.
    fn config_space_mut(&mut self) -> &mut ConfigSpace;
    /// A configuration read at `offset` (0..4096; past 256 reads as zero by default).
    fn read_config(&mut self, offset: usize, data: &mut [u8]) {
        self.config_space().read(offset, data);
    }
    /// A configuration write at `offset`.
    fn write_config(&mut self, offset: usize, data: &[u8]) {
        self.config_space_mut().write(offset, data);
    }
    /// A read at `offset` inside BAR `bar`.
    fn read_bar(&mut self, bar: u8, offset: u64, data: &mut [u8]);
    /// A write at `offset` inside BAR `bar`.
    fn write_bar(&mut self, bar: u8, offset: u64, data: &[u8]);
    /// `region` is now mapped on its bus (decoding on, at `region.base`).
    fn bar_mapped(&mut self, _region: &BarRegion) {}
    /// `region`, mapped before, no longer is (moved, decoding turned off).
    fn bar_unmapped(&mut self, _region: &BarRegion) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intx_routing_matches_seabios_piix() {
        // SeaBIOS: pci_irqs[(pin - 1 + slot - 1) & 3] with pci_irqs = 10, 10, 11, 11.
        for slot in 1..32u8 {
            for pin in 1..=4u8 {
                let seabios = PIRQ_GSIS[usize::from((pin - 1 + slot - 1) & 3)];
                assert_eq!(intx_gsi(slot, pin), seabios, "slot {slot} pin {pin}");
            }
        }
        assert_eq!(intx_gsi(2, 1), 10);
        assert_eq!(intx_gsi(3, 1), 11);
    }

    #[test]
    fn devfn_packs_slot_and_function() {
        assert_eq!(devfn(1, 3), 0x0b);
        assert_eq!(devfn(31, 7), 0xff);
    }
}
