//! COM1: a 16550 UART (vm-superio) whose interrupt is an irqfd and whose output goes to
//! stdout or a file. Input bytes that do not fit the UART's FIFO wait in a queue and are
//! delivered when the guest has drained the FIFO, so no input is lost.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;

use vm_superio::serial::SerialEvents;
use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::bus::Origin;
use super::BusDevice;

/// Base port of COM1.
pub const COM1_PORT: u64 = 0x3f8;
/// Ports COM1 occupies.
pub const COM1_LEN: u64 = 8;
/// COM1's ISA interrupt line.
pub const COM1_IRQ: u32 = 4;

/// Raises the UART's interrupt through an irqfd.
pub struct IrqTrigger(pub EventFd);

impl Trigger for IrqTrigger {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.0.write(1)
    }
}

/// Signals when the guest has emptied the receive FIFO.
pub struct RxDrained(pub EventFd);

impl SerialEvents for RxDrained {
    fn buffer_read(&self) {}
    fn out_byte(&self) {}
    fn tx_lost_byte(&self) {
        log::warn!("serial: a byte could not be written to the output");
    }
    fn in_buffer_empty(&self) {
        // A failed write only delays delivery until the next input event.
        let _ = self.0.write(1);
    }
}

/// The UART plus the queue of input waiting for FIFO room.
pub struct SerialDevice {
    uart: Serial<IrqTrigger, Arc<RxDrained>, Box<dyn Write + Send>>,
    pending: VecDeque<u8>,
    drained: Arc<RxDrained>,
}

impl SerialDevice {
    /// A UART raising `irq` and writing to `out`.
    pub fn new(irq: EventFd, out: Box<dyn Write + Send>) -> std::io::Result<Self> {
        let drained = Arc::new(RxDrained(EventFd::new(EFD_NONBLOCK)?));
        Ok(SerialDevice {
            uart: Serial::with_events(IrqTrigger(irq), drained.clone(), out),
            pending: VecDeque::new(),
            drained,
        })
    }

    /// The eventfd that fires when the guest has drained the receive FIFO.
    pub fn drained_event(&self) -> &EventFd {
        &self.drained.0
    }

    /// Queues input for the guest and moves as much as fits into the FIFO.
    pub fn queue_input(&mut self, bytes: &[u8]) {
        self.pending.extend(bytes);
        self.flush_input();
    }

    /// Moves queued input into the FIFO while there is room.
    pub fn flush_input(&mut self) {
        while !self.pending.is_empty() && self.uart.fifo_capacity() > 0 {
            let (front, _) = self.pending.as_slices();
            match self.uart.enqueue_raw_bytes(front) {
                Ok(n) => drop(self.pending.drain(..n)),
                Err(e) => {
                    log::warn!("serial: cannot deliver input: {e:?}");
                    return;
                }
            }
        }
    }

    /// Bytes still waiting for FIFO room.
    pub fn pending_input(&self) -> usize {
        self.pending.len()
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        if let (Ok(off), [b]) = (u8::try_from(offset), &mut *data) {
            *b = self.uart.read(off);
        } else {
            data.fill(0xff);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        if let (Ok(off), [b]) = (u8::try_from(offset), data) {
            if let Err(e) = self.uart.write(off, *b) {
                log::warn!("serial: write failed: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_reaches_the_writer() {
        let out = Shared::default();
        let mut s = SerialDevice::new(EventFd::new(0).unwrap(), Box::new(out.clone())).unwrap();
        for b in b"hi\n" {
            s.write(0, &[*b], &Origin::default());
        }
        assert_eq!(out.0.lock().unwrap().as_slice(), b"hi\n");
    }

    #[test]
    fn input_larger_than_the_fifo_is_not_lost() {
        let mut s = SerialDevice::new(EventFd::new(0).unwrap(), Box::new(std::io::sink())).unwrap();
        let input: Vec<u8> = (0..200u8).collect();
        s.queue_input(&input);
        assert!(s.pending_input() > 0);
        let mut got = Vec::new();
        while got.len() < input.len() {
            let mut lsr = [0u8];
            s.read(5, &mut lsr, &Origin::default());
            if lsr[0] & 1 == 0 {
                s.flush_input();
                continue;
            }
            let mut b = [0u8];
            s.read(0, &mut b, &Origin::default());
            got.push(b[0]);
        }
        assert_eq!(got, input);
    }
}
