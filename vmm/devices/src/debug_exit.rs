//! isa-debug-exit: a write of `v` ends the run with exit status `(v << 1) | 1`, exactly as
//! QEMU's device, so test kernels written for QEMU work unchanged.

use std::sync::Arc;

use super::bus::Origin;
use super::BusDevice;
use crate::stop::{GuestStop, StopRequest};

/// The conventional port.
pub const DEBUG_EXIT_PORT: u64 = 0xf4;
/// Ports it claims (accesses of 1, 2 or 4 bytes at the base).
pub const DEBUG_EXIT_LEN: u64 = 4;

/// The device.
pub struct DebugExit {
    stop: Arc<dyn StopRequest>,
}

impl DebugExit {
    /// A device that ends the run through `stop`.
    pub fn new(stop: Arc<dyn StopRequest>) -> Self {
        DebugExit { stop }
    }
}

impl BusDevice for DebugExit {
    fn read(&mut self, _offset: u64, data: &mut [u8], _origin: &Origin) {
        data.fill(0);
    }

    fn write(&mut self, _offset: u64, data: &[u8], _origin: &Origin) {
        let mut v = [0u8; 4];
        let n = data.len().min(4);
        v[..n].copy_from_slice(&data[..n]);
        self.stop
            .request_stop(GuestStop::DebugExit(u32::from_le_bytes(v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopLog;

    #[test]
    fn write_requests_debug_exit_with_the_value() {
        let stop = Arc::new(StopLog::default());
        let mut d = DebugExit::new(stop.clone());
        d.write(0, &[0x10, 0x00], &Origin::default());
        assert_eq!(stop.outcome(), Some(GuestStop::DebugExit(0x10)));
    }
}
