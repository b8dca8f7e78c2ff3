//! MSI-X: the capability's layout and write mask, masking and pending bits, table accesses of
//! any width, and what happens to vectors the table does not have.

use super::testing::Recorder;
use super::*;
use crate::pci::config::PciIds;

const LAYOUT: MsixLayout = MsixLayout {
    vectors: 3,
    bar: 2,
    table: 0x4000,
    pba: 0x5000,
};

fn setup() -> (ConfigSpace, Msix, Recorder) {
    let mut config = ConfigSpace::new(PciIds::default());
    let rec = Recorder::default();
    let msix = Msix::add(&mut config, LAYOUT, Box::new(rec.clone())).unwrap();
    (config, msix, rec)
}

fn control(config: &mut ConfigSpace, msix: &mut Msix, v: u16) {
    config.write(msix.capability() + 2, &v.to_le_bytes());
    msix.config_written(config);
}

/// Programs entry `v` with address 0xFEE0_0000 and data 0x40 + v, leaving its mask bit.
fn program(config: &ConfigSpace, msix: &mut Msix, v: u64) {
    let e = v * ENTRY_SIZE as u64;
    msix.write_table(config, e, &0xfee0_0000u32.to_le_bytes());
    msix.write_table(config, e + 4, &0u32.to_le_bytes());
    msix.write_table(
        config,
        e + 8,
        &(0x40 + u32::try_from(v).unwrap()).to_le_bytes(),
    );
}

fn unmask(config: &ConfigSpace, msix: &mut Msix, v: u64) {
    msix.write_table(config, v * ENTRY_SIZE as u64 + 12, &0u32.to_le_bytes());
}

fn msg(v: u32) -> MsiMessage {
    MsiMessage {
        address: 0xfee0_0000,
        data: 0x40 + v,
    }
}

fn pba(msix: &Msix) -> u64 {
    let mut b = [0u8; 8];
    msix.read_pba(0, &mut b);
    u64::from_le_bytes(b)
}

#[test]
fn capability_describes_table_and_pba_and_only_enable_and_mask_are_writable() {
    let (mut config, msix, _) = setup();
    let cap = msix.capability();
    let mut body = [0u8; 12];
    config.read(cap, &mut body);
    assert_eq!(body[0], CAP_ID_MSIX);
    assert_eq!(u16::from_le_bytes([body[2], body[3]]), 2, "table size - 1");
    assert_eq!(u32::from_le_bytes(body[4..8].try_into().unwrap()), 0x4002);
    assert_eq!(u32::from_le_bytes(body[8..12].try_into().unwrap()), 0x5002);
    config.write(cap + 2, &0xffffu16.to_le_bytes());
    assert_eq!(config.u16_at(cap + 2), 0xc002, "table size is read-only");
    config.write(cap + 4, &0u32.to_le_bytes());
    assert_eq!(config.u32_at(cap + 4), 0x4002, "table offset is read-only");
}

#[test]
fn entries_start_masked_and_a_masked_vector_stays_pending_until_unmasked() {
    let (mut config, mut msix, rec) = setup();
    control(&mut config, &mut msix, CONTROL_ENABLE);
    let mut vc = [0u8; 4];
    msix.read_table(12, &mut vc);
    assert_eq!(u32::from_le_bytes(vc), ENTRY_MASKED);
    program(&config, &mut msix, 1);
    assert_eq!(msix.trigger(&config, 1), Delivery::Pending);
    assert_eq!(pba(&msix), 0b010);
    assert!(rec.sent().is_empty());
    unmask(&config, &mut msix, 1);
    assert_eq!(
        rec.sent(),
        vec![msg(1)],
        "unmasking sends the pending message"
    );
    assert_eq!(pba(&msix), 0);
    assert_eq!(msix.trigger(&config, 1), Delivery::Sent);
    assert_eq!(rec.sent(), vec![msg(1), msg(1)]);
    assert_eq!(
        msix.stats(),
        MsixStats {
            sent: 2,
            blocked: 0,
            held: 1,
            failed: 0
        }
    );
}

#[test]
fn function_mask_and_disable_hold_messages_until_lifted() {
    let (mut config, mut msix, rec) = setup();
    for v in 0..3 {
        program(&config, &mut msix, v);
        unmask(&config, &mut msix, v);
    }
    // Disabled: held.
    assert_eq!(msix.trigger(&config, 0), Delivery::Pending);
    control(
        &mut config,
        &mut msix,
        CONTROL_ENABLE | CONTROL_FUNCTION_MASK,
    );
    assert_eq!(msix.trigger(&config, 2), Delivery::Pending);
    assert_eq!(pba(&msix), 0b101);
    assert!(rec.sent().is_empty());
    control(&mut config, &mut msix, CONTROL_ENABLE);
    assert_eq!(rec.sent(), vec![msg(0), msg(2)]);
    assert_eq!(pba(&msix), 0);
}

#[test]
fn table_accepts_any_width_and_keeps_only_the_mask_bit_of_vector_control() {
    let (config, mut msix, _) = setup();
    // One 64-bit write of the address, then single bytes of the data.
    msix.write_table(&config, 16, &0x0000_0001_fee0_1000u64.to_le_bytes());
    msix.write_table(&config, 24, &[0x41]);
    msix.write_table(&config, 25, &[0x80]);
    msix.write_table(&config, 28, &0xffff_fffeu32.to_le_bytes());
    let mut e = [0u8; 16];
    msix.read_table(16, &mut e);
    assert_eq!(
        u64::from_le_bytes(e[..8].try_into().unwrap()),
        0x1_fee0_1000
    );
    assert_eq!(u32::from_le_bytes(e[8..12].try_into().unwrap()), 0x8041);
    assert_eq!(
        u32::from_le_bytes(e[12..].try_into().unwrap()),
        0,
        "reserved bits"
    );
    // Past the table: reads zero, writes dropped, no panic at the largest offsets.
    let mut past = [0xffu8; 8];
    msix.read_table(3 * 16, &mut past);
    assert_eq!(past, [0; 8]);
    msix.write_table(&config, 3 * 16 - 2, &[1, 1, 1, 1]);
    msix.write_table(&config, u64::MAX, &[1, 2, 3]);
    msix.read_pba(u64::MAX, &mut past);
    assert_eq!(past, [0; 8]);
}

#[test]
fn a_vector_beyond_the_table_is_dropped_and_a_refused_message_is_counted() {
    let (mut config, mut msix, rec) = setup();
    control(&mut config, &mut msix, CONTROL_ENABLE);
    assert_eq!(msix.trigger(&config, 3), Delivery::NoVector);
    assert_eq!(msix.trigger(&config, u16::MAX), Delivery::NoVector);
    program(&config, &mut msix, 0);
    unmask(&config, &mut msix, 0);
    rec.refuse();
    assert_eq!(msix.trigger(&config, 0), Delivery::Failed);
    assert_eq!(msix.stats().failed, 1);
    assert_eq!(pba(&msix), 0, "a refused message is not left pending");
}

#[test]
fn pba_writes_are_ignored_and_clear_pending_forgets_held_messages() {
    let (mut config, mut msix, rec) = setup();
    control(&mut config, &mut msix, CONTROL_ENABLE);
    program(&config, &mut msix, 0);
    msix.trigger(&config, 0);
    assert_eq!(pba(&msix), 1);
    // The PBA has no write path: a device reset is what clears it.
    msix.clear_pending();
    assert_eq!(pba(&msix), 0);
    unmask(&config, &mut msix, 0);
    assert!(
        rec.sent().is_empty(),
        "a cleared message is not sent on unmask"
    );
}

/// A real VM's irqchip: a message for vector 0x41 on APIC 0 (`KVM_SIGNAL_MSI`) is taken once
/// the vCPU's local APIC is software-enabled, and blocked before.
#[test]
fn kvm_msi_reaches_the_in_kernel_irqchip() {
    let kvm = kvm_ioctls::Kvm::new().expect("/dev/kvm");
    let vm = Arc::new(kvm.create_vm().unwrap());
    vm.create_irq_chip().unwrap();
    let vcpu = vm.create_vcpu(0).unwrap();
    let sink = KvmMsi(vm.clone());
    let msg = MsiMessage {
        address: 0xfee0_0000,
        data: 0x41,
    };
    assert!(!sink.send(msg).expect("KVM_SIGNAL_MSI"), "APIC disabled");
    let mut lapic = vcpu.get_lapic().unwrap();
    // Spurious-interrupt vector register (0xF0): APIC software enable (bit 8).
    let svr = &mut lapic.regs[0xf0..0xf4];
    svr[1] |= 1;
    vcpu.set_lapic(&lapic).unwrap();
    assert!(sink.send(msg).expect("KVM_SIGNAL_MSI"), "APIC enabled");
}
