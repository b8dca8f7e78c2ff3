//! Mapping one KVM exit to what the vCPU does next. Kept free of the vCPU fd so it can be
//! tested with made-up exits. Port accesses that lie wholly inside the hypercall doorbell's
//! ports go to the vCPU's own doorbell (a ring becomes [`ExitAction::Hypercall`]); every other
//! access goes to its bus.

use kvm_ioctls::VcpuExit;

use super::doorbell::Doorbell;
use super::exit_counters::{ExitCounters, ExitKind};
use crate::outcome::RunOutcome;
use devices::bus::{Access, Bus, Origin};

/// KVM_SYSTEM_EVENT_SHUTDOWN.
const SYSTEM_EVENT_SHUTDOWN: u32 = 1;
/// KVM_SYSTEM_EVENT_RESET.
const SYSTEM_EVENT_RESET: u32 = 2;

/// What the vCPU loop does after an exit.
#[derive(Debug, PartialEq, Eq)]
pub enum ExitAction {
    /// Re-enter the guest.
    Continue,
    /// The guest rang the hypercall doorbell: run the call whose request block is at this
    /// guest-physical address, record its status in the vCPU's doorbell, then re-enter.
    Hypercall(u64),
    /// KVM_RUN was interrupted by a kick: look at pending requests.
    Kicked,
    /// The run ends with this outcome.
    Stop(RunOutcome),
    /// KVM reported an internal error; the caller adds the details it can read.
    InternalError,
    /// The vCPU hit a shutdown (triple fault).
    Shutdown,
}

/// The buses a vCPU dispatches to.
pub struct Buses<'a> {
    /// Port I/O.
    pub pio: &'a Bus,
    /// MMIO.
    pub mmio: &'a Bus,
}

/// Handles one exit of the vCPU `origin` names, whose doorbell is `doorbell`.
pub fn handle_exit(
    exit: VcpuExit<'_>,
    buses: &Buses<'_>,
    doorbell: &mut Doorbell,
    origin: &Origin,
    stats: &ExitCounters,
) -> ExitAction {
    let access = |a: Access| {
        if a == Access::Unclaimed {
            stats.count_unclaimed();
        }
        ExitAction::Continue
    };
    match exit {
        VcpuExit::IoIn(port, data) => {
            stats.count(ExitKind::IoIn);
            match doorbell.ports().offset(port, data.len()) {
                Some(offset) => {
                    doorbell.read(offset, data);
                    ExitAction::Continue
                }
                None => access(buses.pio.read(u64::from(port), data, origin)),
            }
        }
        VcpuExit::IoOut(port, data) => {
            stats.count(ExitKind::IoOut);
            match doorbell.ports().offset(port, data.len()) {
                Some(offset) => match doorbell.write(offset, data) {
                    Some(gpa) => ExitAction::Hypercall(gpa),
                    None => ExitAction::Continue,
                },
                None => access(buses.pio.write(u64::from(port), data, origin)),
            }
        }
        VcpuExit::MmioRead(addr, data) => {
            stats.count(ExitKind::MmioRead);
            access(buses.mmio.read(addr, data, origin))
        }
        VcpuExit::MmioWrite(addr, data) => {
            stats.count(ExitKind::MmioWrite);
            access(buses.mmio.write(addr, data, origin))
        }
        VcpuExit::Intr => {
            stats.count(ExitKind::Kick);
            ExitAction::Kicked
        }
        VcpuExit::Hlt => {
            stats.count(ExitKind::Hlt);
            ExitAction::Continue
        }
        other => {
            stats.count(ExitKind::Other);
            match other {
                VcpuExit::Shutdown => ExitAction::Shutdown,
                VcpuExit::InternalError => ExitAction::InternalError,
                VcpuExit::SystemEvent(SYSTEM_EVENT_SHUTDOWN, _) => {
                    ExitAction::Stop(RunOutcome::PowerOff)
                }
                VcpuExit::SystemEvent(SYSTEM_EVENT_RESET, _) => ExitAction::Stop(RunOutcome::Reset),
                VcpuExit::FailEntry(reason, cpu) => ExitAction::Stop(RunOutcome::HostError(
                    format!("KVM could not enter the guest (reason {reason:#x}, host cpu {cpu})"),
                )),
                e => ExitAction::Stop(RunOutcome::HostError(format!("unexpected KVM exit {e:?}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcpu::doorbell::DoorbellPorts;
    use devices::BusDevice;
    use profile_core::abi::{DOORBELL_MAGIC, DOORBELL_PORT_BASE};
    use std::sync::{Arc, Mutex};

    struct Latch(Vec<u8>);
    impl BusDevice for Latch {
        fn read(&mut self, _: u64, data: &mut [u8], _: &Origin) {
            data.fill(0x5a);
        }
        fn write(&mut self, _: u64, data: &[u8], _: &Origin) {
            self.0.extend_from_slice(data);
        }
    }

    /// A port bus with a latch at 0x3f8, an empty MMIO bus, a vCPU's doorbell at the ABI's
    /// ports and exit counters.
    struct Rig {
        pio: Bus,
        mmio: Bus,
        latch: Arc<Mutex<Latch>>,
        doorbell: Doorbell,
        stats: ExitCounters,
    }

    impl Rig {
        fn new() -> Rig {
            let latch = Arc::new(Mutex::new(Latch(Vec::new())));
            let mut pio = Bus::new("port");
            pio.insert("latch", latch.clone(), 0x3f8, 8).unwrap();
            Rig {
                pio,
                mmio: Bus::new("MMIO"),
                latch,
                doorbell: Doorbell::new(DoorbellPorts::ABI),
                stats: ExitCounters::default(),
            }
        }

        /// Handles `exit` from a default origin.
        fn exit(&mut self, exit: VcpuExit<'_>) -> ExitAction {
            let b = Buses {
                pio: &self.pio,
                mmio: &self.mmio,
            };
            handle_exit(
                exit,
                &b,
                &mut self.doorbell,
                &Origin::default(),
                &self.stats,
            )
        }
    }

    #[test]
    fn port_write_reaches_the_device_and_continues() {
        let mut rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::IoOut(0x3f8, b"x")), ExitAction::Continue);
        assert_eq!(rig.latch.lock().unwrap().0, b"x");
        assert_eq!(rig.stats.get(ExitKind::IoOut), 1);
    }

    #[test]
    fn unclaimed_port_reads_all_ones_and_is_counted() {
        let mut rig = Rig::new();
        let mut data = [0u8; 2];
        assert_eq!(
            rig.exit(VcpuExit::IoIn(0x80, &mut data)),
            ExitAction::Continue
        );
        assert_eq!(data, [0xff, 0xff]);
        assert_eq!(rig.stats.unclaimed(), 1);
    }

    #[test]
    fn shutdown_and_internal_error_are_reported() {
        let mut rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::Shutdown), ExitAction::Shutdown);
        assert_eq!(rig.exit(VcpuExit::InternalError), ExitAction::InternalError);
        assert_eq!(rig.stats.get(ExitKind::Other), 2);
    }

    #[test]
    fn system_events_end_the_run() {
        let mut rig = Rig::new();
        assert_eq!(
            rig.exit(VcpuExit::SystemEvent(SYSTEM_EVENT_RESET, &[])),
            ExitAction::Stop(RunOutcome::Reset)
        );
        assert_eq!(
            rig.exit(VcpuExit::SystemEvent(SYSTEM_EVENT_SHUTDOWN, &[])),
            ExitAction::Stop(RunOutcome::PowerOff)
        );
    }

    #[test]
    fn kick_is_counted() {
        let mut rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::Intr), ExitAction::Kicked);
        assert_eq!(rig.stats.get(ExitKind::Kick), 1);
    }

    #[test]
    fn a_ring_is_a_hypercall_at_the_latched_address() {
        let mut rig = Rig::new();
        let (ring, high) = (DOORBELL_PORT_BASE, DOORBELL_PORT_BASE + 4);
        assert_eq!(
            rig.exit(VcpuExit::IoOut(high, &2u32.to_le_bytes())),
            ExitAction::Continue
        );
        assert_eq!(
            rig.exit(VcpuExit::IoOut(ring, &0x8000u32.to_le_bytes())),
            ExitAction::Hypercall(0x2_0000_8000)
        );
        // The latch reset: a block below 4 GiB needs one write.
        assert_eq!(
            rig.exit(VcpuExit::IoOut(ring, &0x9000u32.to_le_bytes())),
            ExitAction::Hypercall(0x9000)
        );
        assert_eq!(rig.stats.get(ExitKind::IoOut), 3);
        assert_eq!(rig.stats.unclaimed(), 0);
        // A 16-bit OUT to the ring port does not ring.
        assert_eq!(
            rig.exit(VcpuExit::IoOut(ring, &[1, 2])),
            ExitAction::Continue
        );
    }

    #[test]
    fn doorbell_reads_answer_magic_and_the_vcpu_s_last_status() {
        let mut rig = Rig::new();
        let mut data = [0u8; 4];
        rig.exit(VcpuExit::IoIn(DOORBELL_PORT_BASE, &mut data));
        assert_eq!(u32::from_le_bytes(data), DOORBELL_MAGIC);
        rig.doorbell.set_status(0xc000_0022);
        rig.exit(VcpuExit::IoIn(DOORBELL_PORT_BASE + 4, &mut data));
        assert_eq!(u32::from_le_bytes(data), 0xc000_0022);
        let mut byte = [0u8; 1];
        rig.exit(VcpuExit::IoIn(DOORBELL_PORT_BASE + 5, &mut byte));
        assert_eq!(byte, [0xff]);
        assert_eq!(rig.stats.get(ExitKind::IoIn), 3);
        assert_eq!(rig.stats.unclaimed(), 0);
    }

    /// An access that runs past the doorbell's last port was never the doorbell's: the port
    /// bus answers it (all ones, counted as unclaimed), as it did when the doorbell sat there.
    #[test]
    fn accesses_straddling_the_doorbell_s_ports_go_to_the_bus() {
        let mut rig = Rig::new();
        let mut data = [0u8; 4];
        let action = rig.exit(VcpuExit::IoIn(DOORBELL_PORT_BASE + 6, &mut data));
        assert_eq!((action, data), (ExitAction::Continue, [0xff; 4]));
        let action = rig.exit(VcpuExit::IoOut(DOORBELL_PORT_BASE - 2, &[0; 4]));
        assert_eq!(action, ExitAction::Continue);
        assert_eq!(rig.stats.unclaimed(), 2);
    }
}
