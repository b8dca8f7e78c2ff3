//! hvprof's emulated devices and the address-range buses they sit on: the legacy PC ports,
//! fw_cfg, the PCI root with MSI-X, and virtio-blk over raw and qcow2 images.
//!
//! The crate knows nothing of the VMM that uses it. What it needs from the machine comes in as
//! values: the PCI windows of the memory map ([`pci::PciWindows`]), the VM's file descriptor,
//! the guest's memory. What the guest asks of the run through a device (power off, reset, a
//! debug-exit value) goes out through [`stop::StopRequest`]; the VMM turns it into the run's
//! outcome, and decides whose fault each error of this crate is.
#![warn(missing_docs)]

pub mod acpi_pm;
pub mod bus;
pub mod bytes;
pub mod calendar;
pub mod cmos;
pub mod debug_exit;
pub mod debugcon;
pub mod fw_cfg;
pub mod i8042;
pub mod pci;
pub mod reset;
pub mod serial;
pub mod stop;
pub mod virtio;

pub use bus::{Bus, BusDevice, BusError, Origin};

pub use bytes::read_padded;
