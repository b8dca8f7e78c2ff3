//! The guest's view of the whole device model: the port and MMIO buses of a firmware boot
//! (legacy devices, fw_cfg with the real firmware items, pflash VARS, the PCI root with a
//! virtio-blk disk and its MSI-X table) driven by a stream of
//! accesses the fuzz input chooses, as vCPU exits would make them, with guest RAM stores in between (descriptor
//! tables, DMA control blocks) and turns of the event loop that serves the queue eventfds.
//!
//! Must hold: nothing panics; the disk is never touched outside its capacity
//! ([`CheckedDisk`]); the buses never hold overlapping ranges; the device never removes an
//! ioeventfd it did not register, never registers one twice, and every registration it
//! keeps is at the notify address of a BAR that is mapped now.
#![no_main]

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use devices::fw_cfg::FwCfg;
use devices::pci::msix::{MsiError, MsiMessage, MsiSink};
use devices::pci::{devfn, PciRoot};
use devices::virtio::block::disk::DiskImage;
use devices::virtio::block::{attach_image, Interrupts};
use devices::virtio::notify::NotifyRoute;
use devices::virtio::pci::NOTIFY_OFFSET;
use devices::virtio::IrqLine;
use devices::{Bus, Origin};
use event_manager::{EventManager, MutEventSubscriber, SubscriberOps};
use hvprof_fuzz::platform::{Input, Op, RAM, VARS_BASE, VARS_LEN};
use hvprof_fuzz::CheckedDisk;
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm::acpi::PciRoot as TablesPciRoot;
use vmm::firmware::cfg::{fw_cfg_items, FirmwareConfig};
use vmm::firmware::pflash::Pflash;
use vmm::layout::PCI_WINDOWS;
use vmm::outcome::StopSignal;
use vmm::vm::platform::{insert_firmware_devices, insert_port_devices, FirmwareDevices};
use vmm_sys_util::eventfd::EventFd;

const CPUS: usize = 2;
const OPS: usize = 512;

/// KVM's ioeventfd table, as far as the device can see it: a registration per address;
/// `refuse` makes every registration fail, as a KVM without ioeventfds would.
#[derive(Default)]
struct Route {
    refuse: bool,
    fds: Mutex<HashMap<u64, EventFd>>,
}

impl NotifyRoute for Route {
    fn attach(&self, addr: u64, event: &EventFd) -> io::Result<()> {
        if self.refuse {
            return Err(io::ErrorKind::Unsupported.into());
        }
        let mut fds = self.fds.lock().unwrap();
        assert!(
            !fds.contains_key(&addr),
            "ioeventfd at {addr:#x} registered twice"
        );
        fds.insert(addr, event.try_clone()?);
        Ok(())
    }

    fn detach(&self, addr: u64, _event: &EventFd) -> io::Result<()> {
        let removed = self.fds.lock().unwrap().remove(&addr);
        assert!(
            removed.is_some(),
            "ioeventfd at {addr:#x} removed but not registered"
        );
        Ok(())
    }
}

struct NoIrq;
impl IrqLine for NoIrq {
    fn set_level(&self, _high: bool) {}
}

/// MSI-X messages go nowhere (their address and data are the guest's own choice).
struct NoMsi;
impl MsiSink for NoMsi {
    fn send(&self, _msg: MsiMessage) -> Result<bool, MsiError> {
        Ok(true)
    }
}

/// The `device`-th device of `bus` and an address inside it (or just past it).
fn pick(bus: &Bus, device: u8, offset: u32) -> Option<u64> {
    let devices = bus.devices();
    let (_, base, len) = devices.get(usize::from(device) % devices.len().max(1))?;
    Some(base + u64::from(offset) % (len + 8))
}

fn check_no_overlap(bus: &Bus) {
    let devices = bus.devices();
    for w in devices.windows(2) {
        let ((a, base, len), (b, next, _)) = (w[0], w[1]);
        assert!(
            base + len <= next,
            "{a} at {base:#x}+{len:#x} overlaps {b} at {next:#x}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let flags = input.u8();
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), RAM)]).unwrap();
    let stop = Arc::new(StopSignal::new().unwrap());
    let mut pio = Bus::new("port");
    let mut mmio = Bus::new("MMIO");
    let mem_size = 256 << 20;
    // The firmware is told of more RAM than is mapped: DMA beyond the 1 MiB fails cleanly.
    insert_port_devices(&mut pio, &stop, Box::new(|_| {}), mem_size, CPUS, None).unwrap();
    let fw = FirmwareConfig {
        cpus: CPUS,
        mem_size,
        pci: TablesPciRoot::platform(),
        boot_fail_wait: None,
        bootorder: Vec::new(),
    };
    let fw_cfg = FwCfg::new(fw_cfg_items(&fw).unwrap(), mem.clone());
    let vars = Pflash::new(vec![0xff; VARS_LEN], 4096, None);
    let firmware = FirmwareDevices {
        fw_cfg,
        vars: Some((VARS_BASE, vars)),
    };
    insert_firmware_devices(&mut pio, &mut mmio, firmware).unwrap();
    let (pio, mmio) = (Arc::new(pio), Arc::new(mmio));
    let root = PciRoot::new(&pio, &mmio, PCI_WINDOWS, Some(stop.clone())).unwrap();
    let route = Arc::new(Route {
        refuse: flags & 1 != 0,
        ..Route::default()
    });
    // 64 sectors and a tail of 100 bytes that must stay unreachable.
    let image = DiskImage::new(
        Box::new(CheckedDisk::new(64 * 512 + 100)),
        64 * 512 + 100,
        flags & 2 != 0,
        "fuzz",
    );
    let interrupts = Interrupts {
        intx: Box::new(|_| Box::new(NoIrq)),
        msi: Box::new(NoMsi),
    };
    let disk = attach_image(&root, &mem, image, route.clone(), interrupts).unwrap();
    let mut em = EventManager::<Box<dyn MutEventSubscriber>>::new().unwrap();
    if let Some(w) = disk.watch {
        if flags & 4 == 0 {
            em.add_subscriber(Box::new(w));
        }
    }
    let virtio = devfn(disk.at.slot, 0);

    for _ in 0..OPS {
        let Some(access) = input.access() else { break };
        let width = access.width;
        let origin = Origin {
            vcpu: usize::from(access.vcpu) % CPUS,
        };
        let (on_mmio, addr, value) = match access.op {
            Op::PickedPort {
                device,
                offset,
                value,
            } => (false, pick(&pio, device, offset), u64::from(value)),
            Op::Port { port, value } => (false, Some(u64::from(port)), u64::from(value)),
            Op::PickedMmio {
                device,
                offset,
                value,
            } => (true, pick(&mmio, device, offset), value),
            Op::Mmio { addr, value } => (true, Some(addr), value),
            Op::Store { addr, value } => {
                // A guest store: descriptor tables, rings, DMA control blocks, requests.
                let at = (u64::from(addr) % (RAM as u64 - 8)) & !7;
                mem.write_obj(value, GuestAddress(at)).unwrap();
                continue;
            }
            Op::Loop if access.read => {
                disk.device.lock().unwrap().serve_pending();
                continue;
            }
            Op::Loop => {
                em.run_with_timeout(0).unwrap();
                continue;
            }
        };
        let Some(addr) = addr else { continue };
        let bytes = value.to_le_bytes();
        let mut out = [0u8; 8];
        match (on_mmio, access.read) {
            (false, true) => _ = pio.read(addr, &mut out[..width.min(4)], &origin),
            (false, false) => _ = pio.write(addr, &bytes[..width.min(4)], &origin),
            (true, true) => _ = mmio.read(addr, &mut out[..width], &origin),
            (true, false) => {
                // A write KVM completes itself: the notify address of a registered eventfd.
                let fds = route.fds.lock().unwrap();
                let signalled = fds.get(&addr).map(|fd| fd.write(1).unwrap()).is_some();
                drop(fds);
                if !signalled {
                    mmio.write(addr, &bytes[..width], &origin);
                }
            }
        }
    }

    check_no_overlap(&pio);
    check_no_overlap(&mmio);
    let notify = root
        .mapped_bars(virtio)
        .iter()
        .find(|r| r.index == 0)
        .map(|r| r.base + NOTIFY_OFFSET);
    for &addr in route.fds.lock().unwrap().keys() {
        assert_eq!(
            Some(addr),
            notify,
            "ioeventfd at {addr:#x} outlived its BAR mapping"
        );
    }
});
