//! The hypercall doorbell (docs/abi.md section 3) as each vCPU holds it: 8 ports from the
//! ABI's base that the exit mapper answers itself, with no device on the bus and no state
//! shared between vCPUs. A 32-bit write to base+4 latches the high dword of a request block's
//! address for this vCPU; a 32-bit write to base+0 rings with the low dword, and the exit
//! mapper returns the call for the vCPU to run before it re-enters the guest (it needs the
//! vCPU's registers): the call completes before the OUT retires. Reads: base+0 gives the magic,
//! base+4 the status of this vCPU's last ring. Every other width or offset inside the ports is
//! ignored on write and reads as all ones; an access that does not lie wholly inside them is
//! not the doorbell's (the port bus answers it).

use profile_core::abi::{
    DOORBELL_HIGH, DOORBELL_MAGIC, DOORBELL_PORT_BASE, DOORBELL_PORT_COUNT, DOORBELL_RING,
};

/// Where the doorbell's ports are: the exit mapper's data, the same for every vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoorbellPorts {
    /// The first port.
    pub base: u16,
    /// How many ports from `base`.
    pub count: u16,
}

impl DoorbellPorts {
    /// The ABI's ports (CPUID 0x40000101 EBX and the DSDT's `HVPR0001` name the same).
    pub const ABI: DoorbellPorts = DoorbellPorts {
        base: DOORBELL_PORT_BASE,
        count: DOORBELL_PORT_COUNT,
    };

    /// The offset of an access of `len` bytes at `port` when it lies wholly inside the ports.
    pub fn offset(&self, port: u16, len: usize) -> Option<u16> {
        let offset = port.checked_sub(self.base)?;
        let end = usize::from(offset).checked_add(len)?;
        (end <= usize::from(self.count)).then_some(offset)
    }
}

/// One vCPU's side of the doorbell: the high dword it latched and the status of its last ring.
#[derive(Debug)]
pub struct Doorbell {
    ports: DoorbellPorts,
    high: u32,
    last_status: u32,
}

fn dword(data: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(data.try_into().ok()?))
}

impl Doorbell {
    /// A vCPU's doorbell at `ports`: nothing latched, last status 0.
    pub fn new(ports: DoorbellPorts) -> Self {
        Doorbell {
            ports,
            high: 0,
            last_status: 0,
        }
    }

    /// Its ports.
    pub fn ports(&self) -> DoorbellPorts {
        self.ports
    }

    /// Fills `data` for a read at `offset`.
    pub fn read(&self, offset: u16, data: &mut [u8]) {
        let value = match (offset, data.len()) {
            (DOORBELL_RING, 4) => Some(DOORBELL_MAGIC),
            (DOORBELL_HIGH, 4) => Some(self.last_status),
            _ => None,
        };
        match value {
            Some(v) => data.copy_from_slice(&v.to_le_bytes()),
            None => data.fill(0xff),
        }
    }

    /// Handles a write of `data` at `offset`; a ring returns the request block's address.
    pub fn write(&mut self, offset: u16, data: &[u8]) -> Option<u64> {
        // Only 32-bit accesses are defined; others are ignored.
        let value = dword(data)?;
        match offset {
            DOORBELL_HIGH => {
                self.high = value;
                None
            }
            DOORBELL_RING => {
                let gpa = (u64::from(self.high) << 32) | u64::from(value);
                self.high = 0;
                Some(gpa)
            }
            _ => None,
        }
    }

    /// Records the status of the last ring (read back at base+4).
    pub fn set_status(&mut self, status: u32) {
        self.last_status = status;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doorbell() -> Doorbell {
        Doorbell::new(DoorbellPorts::ABI)
    }

    fn read(d: &Doorbell, offset: u16, len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        d.read(offset, &mut data);
        data
    }

    #[test]
    fn ring_combines_the_latched_high_dword() {
        let mut d = doorbell();
        assert_eq!(d.write(4, &1u32.to_le_bytes()), None);
        assert_eq!(d.write(0, &0x2000u32.to_le_bytes()), Some(0x1_0000_2000));
        // The latch resets after a ring.
        assert_eq!(d.write(0, &0x3000u32.to_le_bytes()), Some(0x3000));
        // A second latch before the ring replaces the first.
        d.write(4, &7u32.to_le_bytes());
        d.write(4, &9u32.to_le_bytes());
        assert_eq!(d.write(0, &0x4000u32.to_le_bytes()), Some(0x9_0000_4000));
    }

    #[test]
    fn each_vcpu_latches_its_own_high_dword() {
        let (mut a, mut b) = (doorbell(), doorbell());
        a.write(4, &1u32.to_le_bytes());
        b.write(4, &7u32.to_le_bytes());
        assert_eq!(a.write(0, &0x2000u32.to_le_bytes()), Some(0x1_0000_2000));
        assert_eq!(b.write(0, &0x4000u32.to_le_bytes()), Some(0x7_0000_4000));
    }

    #[test]
    fn reads_give_magic_and_last_status() {
        let mut d = doorbell();
        assert_eq!(read(&d, 0, 4), DOORBELL_MAGIC.to_le_bytes());
        assert_eq!(read(&d, 4, 4), [0; 4], "no ring yet");
        d.set_status(0xc000_0022);
        assert_eq!(read(&d, 4, 4), 0xc000_0022u32.to_le_bytes());
        // Latching does not change the status.
        d.write(4, &5u32.to_le_bytes());
        assert_eq!(read(&d, 4, 4), 0xc000_0022u32.to_le_bytes());
    }

    #[test]
    fn other_widths_and_offsets_read_all_ones() {
        let mut d = doorbell();
        d.set_status(0);
        for (offset, len) in [
            (0, 1),
            (0, 2),
            (4, 1),
            (4, 2),
            (1, 1),
            (2, 2),
            (3, 4),
            (6, 2),
        ] {
            assert_eq!(read(&d, offset, len), vec![0xff; len], "{offset}+{len}");
        }
        for offset in [1, 2, 3, 5, 6, 7] {
            assert_eq!(read(&d, offset, 1), [0xff]);
        }
    }

    #[test]
    fn other_widths_and_offsets_are_ignored_on_write() {
        let mut d = doorbell();
        assert_eq!(d.write(0, &[1, 2]), None, "a 16-bit write does not ring");
        assert_eq!(d.write(0, &[1]), None);
        assert_eq!(d.write(4, &[1, 2]), None, "nor latches");
        for offset in [1, 2, 3, 5, 6, 7] {
            assert_eq!(d.write(offset, &u32::MAX.to_le_bytes()), None);
        }
        assert_eq!(d.write(0, &0x5000u32.to_le_bytes()), Some(0x5000));
    }

    #[test]
    fn only_accesses_wholly_inside_the_ports_are_the_doorbell_s() {
        let p = DoorbellPorts::ABI;
        assert_eq!(p.offset(0x6a0, 4), Some(0));
        assert_eq!(p.offset(0x6a4, 4), Some(4));
        assert_eq!(p.offset(0x6a7, 1), Some(7));
        assert_eq!(p.offset(0x6a6, 2), Some(6));
        assert_eq!(p.offset(0x6a6, 4), None, "runs past the last port");
        assert_eq!(p.offset(0x69f, 4), None, "starts below the first");
        assert_eq!(p.offset(0x6a8, 1), None);
        assert_eq!(p.offset(0, 1), None);
        assert_eq!(p.offset(u16::MAX, 4), None);
    }
}
