//! The i8042 keyboard controller, as far as guests use it on a VM: the status port reads as
//! "no data", and command 0xFE (pulse the reset line) resets the machine.

use std::sync::Arc;

use super::bus::Origin;
use super::BusDevice;
use crate::stop::{GuestStop, StopRequest};

/// Data port.
pub const I8042_DATA_PORT: u64 = 0x60;
/// The device spans 0x60-0x64.
pub const I8042_LEN: u64 = 5;
const COMMAND_OFFSET: u64 = 4;
const CMD_RESET: u8 = 0xfe;

/// The device.
pub struct I8042 {
    stop: Arc<dyn StopRequest>,
}

impl I8042 {
    /// A controller that requests a reset through `stop`.
    pub fn new(stop: Arc<dyn StopRequest>) -> Self {
        I8042 { stop }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        // Port 0x61 (offset 1) is served by the in-kernel PIT (speaker dummy) and never gets
        // here. The rest read as zero: no keyboard data, output buffer empty.
        let _ = offset;
        data.fill(0);
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        if offset == COMMAND_OFFSET && data.first() == Some(&CMD_RESET) {
            self.stop.request_stop(GuestStop::Reset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopLog;

    #[test]
    fn reset_command_requests_reset() {
        let stop = Arc::new(StopLog::default());
        let mut k = I8042::new(stop.clone());
        k.write(0, &[0xfe], &Origin::default());
        assert!(!stop.is_requested());
        k.write(COMMAND_OFFSET, &[0xfe], &Origin::default());
        assert_eq!(stop.outcome(), Some(GuestStop::Reset));
    }
}
