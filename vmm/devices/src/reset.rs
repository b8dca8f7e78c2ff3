//! System control port A (0x92: bit 0 pulses the reset line, bit 1 is the A20 gate, always on
//! under KVM). The reset control register at 0xCF9, which the firmware's FADT names as the ACPI
//! reset register, sits inside the PCI configuration ports and is served by the PCI root.

use std::sync::Arc;

use super::bus::Origin;
use super::BusDevice;
use crate::stop::{GuestStop, StopRequest};

/// The value the FADT tells the OS to write to the reset register.
pub const RESET_CONTROL_VALUE: u8 = 0x06;
const PORT92_RESET: u8 = 1 << 0;
const PORT92_A20: u8 = 1 << 1;

/// System control port A.
pub struct Port92 {
    value: u8,
    stop: Arc<dyn StopRequest>,
}

impl Port92 {
    /// Port 0x92 with A20 enabled; a reset request goes to `stop`.
    pub fn new(stop: Arc<dyn StopRequest>) -> Self {
        Port92 {
            value: PORT92_A20,
            stop,
        }
    }
}

impl BusDevice for Port92 {
    fn read(&mut self, _offset: u64, data: &mut [u8], _origin: &Origin) {
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = self.value;
        }
    }

    fn write(&mut self, _offset: u64, data: &[u8], _origin: &Origin) {
        let Some(&v) = data.first() else { return };
        if v & PORT92_A20 == 0 {
            log::debug!("port 0x92: A20 cannot be disabled under KVM; ignored");
        }
        // Bit 0 resets on its 0 -> 1 edge.
        if v & PORT92_RESET != 0 && self.value & PORT92_RESET == 0 {
            self.stop.request_stop(GuestStop::Reset);
        }
        self.value = (v & PORT92_RESET) | PORT92_A20;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopLog;

    #[test]
    fn port92_bit0_resets_and_a20_stays_on() {
        let stop = Arc::new(StopLog::default());
        let mut p = Port92::new(stop.clone());
        let mut b = [0u8];
        p.read(0, &mut b, &Origin::default());
        assert_eq!(b[0], PORT92_A20);
        p.write(0, &[0], &Origin::default());
        p.read(0, &mut b, &Origin::default());
        assert_eq!(b[0], PORT92_A20);
        assert!(!stop.is_requested());
        p.write(0, &[PORT92_RESET | PORT92_A20], &Origin::default());
        assert_eq!(stop.outcome(), Some(GuestStop::Reset));
    }
}
