//! Emulated devices and the address-range buses they sit on.

pub mod acpi_pm;
pub mod bus;
pub mod cmos;
pub mod debug_exit;
pub mod debugcon;
pub mod doorbell;
pub mod fw_cfg;
pub mod i8042;
pub mod pci;
pub mod reset;
pub mod serial;
pub mod virtio;

pub use bus::{Bus, BusDevice, BusError, Origin};
