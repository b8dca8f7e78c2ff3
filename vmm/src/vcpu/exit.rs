//! Mapping one KVM exit to what the vCPU does next. Kept free of the vCPU fd so it can be
//! tested with made-up exits.

use kvm_ioctls::VcpuExit;

use super::stats::{ExitCounters, ExitKind};
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

/// Handles one exit of the vCPU `origin` names.
pub fn handle_exit(
    exit: VcpuExit<'_>,
    buses: &Buses<'_>,
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
            access(buses.pio.read(u64::from(port), data, origin))
        }
        VcpuExit::IoOut(port, data) => {
            stats.count(ExitKind::IoOut);
            access(buses.pio.write(u64::from(port), data, origin))
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
    use devices::BusDevice;
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

    /// A port bus with a latch at 0x3f8, an empty MMIO bus and exit counters.
    struct Rig {
        pio: Bus,
        mmio: Bus,
        latch: Arc<Mutex<Latch>>,
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
                stats: ExitCounters::default(),
            }
        }

        /// Handles `exit` from a default origin.
        fn exit(&self, exit: VcpuExit<'_>) -> ExitAction {
            let b = Buses {
                pio: &self.pio,
                mmio: &self.mmio,
            };
            handle_exit(exit, &b, &Origin::default(), &self.stats)
        }
    }

    #[test]
    fn port_write_reaches_the_device_and_continues() {
        let rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::IoOut(0x3f8, b"x")), ExitAction::Continue);
        assert_eq!(rig.latch.lock().unwrap().0, b"x");
        assert_eq!(rig.stats.get(ExitKind::IoOut), 1);
    }

    #[test]
    fn unclaimed_port_reads_all_ones_and_is_counted() {
        let rig = Rig::new();
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
        let rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::Shutdown), ExitAction::Shutdown);
        assert_eq!(rig.exit(VcpuExit::InternalError), ExitAction::InternalError);
        assert_eq!(rig.stats.get(ExitKind::Other), 2);
    }

    #[test]
    fn system_events_end_the_run() {
        let rig = Rig::new();
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
        let rig = Rig::new();
        assert_eq!(rig.exit(VcpuExit::Intr), ExitAction::Kicked);
        assert_eq!(rig.stats.get(ExitKind::Kick), 1);
    }
}
