//! The interrupt wiring both boot paths share: QEMU's PC routing on the KVM irqchip (the
//! PIT's IRQ 0 on IOAPIC pin 2, as the MADT's override says), so a kernel booted directly and
//! one booted by firmware see one platform.

use kvm_bindings::{
    kvm_irq_routing_entry, KvmIrqRouting, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP,
};
use kvm_ioctls::VmFd;

use super::VmError;

/// QEMU's PC routing on the KVM irqchip: GSIs 0-15 on the PICs (except 2, the cascade),
/// GSI 0 on IOAPIC pin 2 (the MADT's IRQ 0 override) and GSIs 1-23 on their own pins.
pub fn qemu_gsi_routes() -> Vec<(u32, u32, u32)> {
    let mut routes = Vec::new();
    for gsi in 0..16u32 {
        if gsi == 2 {
            continue;
        }
        let (chip, pin) = if gsi < 8 {
            (KVM_IRQCHIP_PIC_MASTER, gsi)
        } else {
            (KVM_IRQCHIP_PIC_SLAVE, gsi - 8)
        };
        routes.push((gsi, chip, pin));
    }
    for gsi in 0..24u32 {
        match gsi {
            0 => routes.push((0, KVM_IRQCHIP_IOAPIC, 2)),
            2 => {}
            g => routes.push((g, KVM_IRQCHIP_IOAPIC, g)),
        }
    }
    routes
}

/// Installs [`qemu_gsi_routes`] on the VM's irqchip.
pub fn set_qemu_gsi_routing(vm_fd: &VmFd) -> Result<(), VmError> {
    let entries: Vec<kvm_irq_routing_entry> = qemu_gsi_routes()
        .into_iter()
        .map(|(gsi, irqchip, pin)| {
            let mut e = kvm_irq_routing_entry {
                gsi,
                type_: KVM_IRQ_ROUTING_IRQCHIP,
                ..Default::default()
            };
            e.u.irqchip.irqchip = irqchip;
            e.u.irqchip.pin = pin;
            e
        })
        .collect();
    let routing = KvmIrqRouting::from_entries(&entries)
        .map_err(|_| VmError::Kvm("KVM_SET_GSI_ROUTING", kvm_ioctls::Error::new(libc::E2BIG)))?;
    vm_fd
        .set_gsi_routing(&routing)
        .map_err(|e| VmError::Kvm("KVM_SET_GSI_ROUTING", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pit_goes_to_ioapic_pin_2_and_gsi_2_is_unrouted() {
        let r = qemu_gsi_routes();
        assert!(r.contains(&(0, KVM_IRQCHIP_IOAPIC, 2)));
        assert!(r.contains(&(0, KVM_IRQCHIP_PIC_MASTER, 0)));
        assert!(!r.iter().any(|&(g, _, _)| g == 2));
        assert!(r.contains(&(9, KVM_IRQCHIP_PIC_SLAVE, 1)));
        assert!(r.contains(&(23, KVM_IRQCHIP_IOAPIC, 23)));
    }
}
