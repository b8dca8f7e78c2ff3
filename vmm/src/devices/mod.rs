//! The hypercall doorbell, the one device left in the VMM crate: it hands the ring to the
//! profiler. The emulated devices and their buses are the `devices` crate (vmm/devices).

pub mod doorbell;
