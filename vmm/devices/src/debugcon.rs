//! The debug console at port 0x402 (as QEMU's `-debugcon`): bytes written go to a log; a read
//! returns 0xe9 so firmware can detect it.

use std::io::Write;

use super::bus::Origin;
use super::BusDevice;

/// The port SeaBIOS and OVMF write to.
pub const DEBUGCON_PORT: u64 = 0x402;
/// The detection value.
pub const DEBUGCON_READBACK: u8 = 0xe9;

/// The device; `out` is the log file, or None to discard.
pub struct DebugCon {
    out: Option<Box<dyn Write + Send>>,
}

impl DebugCon {
    /// A console writing to `out`.
    pub fn new(out: Option<Box<dyn Write + Send>>) -> Self {
        DebugCon { out }
    }
}

impl BusDevice for DebugCon {
    fn read(&mut self, _offset: u64, data: &mut [u8], _origin: &Origin) {
        data.fill(DEBUGCON_READBACK);
    }

    fn write(&mut self, _offset: u64, data: &[u8], _origin: &Origin) {
        if let Some(out) = &mut self.out {
            if let Err(e) = out
                .write_all(&data[..1.min(data.len())])
                .and_then(|()| out.flush())
            {
                log::warn!("debugcon: cannot write the log: {e}; further output is dropped");
                self.out = None;
            }
        }
    }
}
