//! A minimal CMOS/RTC (ports 0x70/0x71): the time of day from the host clock in BCD, the
//! status registers, and the configuration bytes firmware reads: memory sizes, CPU count,
//! no floppy drive (so SeaBIOS does not wait for one), and the boot order (disk first).

use std::time::{SystemTime, UNIX_EPOCH};

use super::bus::Origin;
use super::BusDevice;
use crate::calendar::CivilTime;

/// Index port.
pub const CMOS_PORT: u64 = 0x70;
/// The device spans the index and data ports.
pub const CMOS_LEN: u64 = 2;

const REG_SECONDS: u8 = 0x00;
const REG_MINUTES: u8 = 0x02;
const REG_HOURS: u8 = 0x04;
const REG_WEEKDAY: u8 = 0x06;
const REG_DAY: u8 = 0x07;
const REG_MONTH: u8 = 0x08;
const REG_YEAR: u8 = 0x09;
const REG_STATUS_A: u8 = 0x0a;
const REG_STATUS_B: u8 = 0x0b;
const REG_STATUS_C: u8 = 0x0c;
const REG_STATUS_D: u8 = 0x0d;
const REG_CENTURY: u8 = 0x32;

/// The device: 128 bytes of NVRAM plus the clock.
pub struct Cmos {
    index: u8,
    nvram: [u8; 128],
}

impl Cmos {
    /// A CMOS for a guest with `mem_below_4g` bytes of RAM below 4 GiB, `mem_above_4g` above,
    /// and `cpus` processors.
    pub fn new(mem_below_4g: u64, mem_above_4g: u64, cpus: u8) -> Self {
        let mut nvram = [0u8; 128];
        nvram[usize::from(REG_STATUS_A)] = 0x26;
        nvram[usize::from(REG_STATUS_B)] = 0x02; // 24-hour, BCD
        nvram[usize::from(REG_STATUS_D)] = 0x80; // battery good
        nvram[0x10] = 0; // no floppy drives
        nvram[0x14] = 0x06; // equipment: FPU, no floppy, EGA/VGA
        let put16 = |n: &mut [u8; 128], at: usize, v: u64| {
            let v = u16::try_from(v.min(0xffff))
                .unwrap_or(u16::MAX)
                .to_le_bytes();
            n[at] = v[0];
            n[at + 1] = v[1];
        };
        put16(&mut nvram, 0x15, 640);
        let ext_kib = (mem_below_4g.saturating_sub(1 << 20) >> 10).min(0xfc00);
        put16(&mut nvram, 0x17, ext_kib);
        put16(&mut nvram, 0x30, ext_kib);
        put16(
            &mut nvram,
            0x34,
            mem_below_4g.saturating_sub(16 << 20) >> 16,
        );
        let high = (mem_above_4g >> 16).to_le_bytes();
        nvram[0x5b..0x5e].copy_from_slice(&high[..3]);
        nvram[0x5f] = cpus.saturating_sub(1);
        // Boot order for SeaBIOS (QEMU's encoding, -boot order=cda): 0x3d holds the first two
        // devices, 0x38's high nibble the third; 1 floppy, 2 hard disk, 3 CD-ROM. Bit 0 of
        // 0x38: do not check the floppy boot signature.
        nvram[0x3d] = 0x32;
        nvram[0x38] = 0x11;
        Cmos { index: 0, nvram }
    }

    fn read_register(&self, reg: u8) -> u8 {
        // The host clock is read only for the clock registers, not for the status and NVRAM
        // bytes guests poll.
        let now = || {
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            CivilTime::from_unix(secs)
        };
        let t = match reg {
            REG_SECONDS..=REG_YEAR | REG_CENTURY => now(),
            REG_STATUS_C => return 0,
            r => return self.nvram[usize::from(r & 0x7f)],
        };
        match reg {
            REG_SECONDS => bcd(t.second),
            REG_MINUTES => bcd(t.minute),
            REG_HOURS => bcd(t.hour),
            REG_WEEKDAY => bcd(t.weekday),
            REG_DAY => bcd(t.day),
            REG_MONTH => bcd(t.month),
            REG_YEAR => bcd(u8::try_from(t.year % 100).unwrap_or(0)),
            REG_CENTURY => bcd(u8::try_from(t.year / 100).unwrap_or(0)),
            // The odd registers between the clock fields are alarm bytes, kept in NVRAM.
            r => self.nvram[usize::from(r & 0x7f)],
        }
    }
}

impl BusDevice for Cmos {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        let v = if offset == 1 {
            self.read_register(self.index)
        } else {
            0xff
        };
        data.fill(v);
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        let Some(&v) = data.first() else { return };
        match offset {
            0 => self.index = v & 0x7f, // bit 7 is the NMI mask
            _ => match self.index {
                REG_SECONDS..=REG_YEAR | REG_STATUS_C | REG_STATUS_D | REG_CENTURY => {
                    log::debug!("cmos: ignoring a write to clock register {:#x}", self.index);
                }
                r => self.nvram[usize::from(r)] = v,
            },
        }
    }
}

fn bcd(v: u8) -> u8 {
    ((v / 10) << 4) | (v % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bytes_and_cpu_count() {
        let mut c = Cmos::new(256 << 20, 0, 2);
        let mut read = |reg: u8| {
            c.write(0, &[reg], &Origin::default());
            let mut b = [0u8];
            c.read(1, &mut b, &Origin::default());
            b[0]
        };
        assert_eq!(read(0x10), 0);
        assert_eq!(u16::from_le_bytes([read(0x34), read(0x35)]), 240 * 16);
        assert_eq!(read(0x5f), 1);
        assert_eq!((read(0x3d), read(0x38)), (0x32, 0x11), "disk, CD, floppy");
        assert_eq!(read(REG_STATUS_D), 0x80);
    }

    #[test]
    fn nvram_is_writable_but_the_clock_is_not() {
        let mut c = Cmos::new(64 << 20, 0, 1);
        c.write(0, &[0x40], &Origin::default());
        c.write(1, &[0xaa], &Origin::default());
        let mut b = [0u8];
        c.read(1, &mut b, &Origin::default());
        assert_eq!(b[0], 0xaa);
        c.write(0, &[REG_SECONDS], &Origin::default());
        c.write(1, &[0x99], &Origin::default());
        c.read(1, &mut b, &Origin::default());
        assert!(b[0] < 0x60);
    }
}
