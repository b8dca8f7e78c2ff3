//! The ACPI power-management block of a PC firmware boot (QEMU's ICH9 layout at
//! `ACPI_PM_BASE`): PM1a event (status, enable), PM1a control (SCI_EN, SLP_TYP, SLP_EN), the
//! PM timer at 3.579545 MHz from the host's monotonic clock, and the GPE0 block.
//!
//! Writing SLP_EN with the S5 sleep type powers the VM off. The SCI is level-triggered on
//! `ACPI_SCI_IRQ`; it is raised while an enabled status bit is set. The FADT declares no
//! SMI command port, so the platform is always in ACPI mode and SCI_EN reads as set.

use std::sync::Arc;
use std::time::Instant;

use super::bus::Origin;
use super::BusDevice;
use crate::stop::{GuestStop, StopRequest};

/// The PM timer's frequency.
pub const PM_TIMER_HZ: u64 = 3_579_545;
/// The SLP_TYP value of S5 (soft off) in the DSDT's `_S5` package, as QEMU.
pub const S5_SLP_TYP: u16 = 0;

/// PM1 status/enable: timer overflow.
const PM1_TMR: u16 = 1 << 0;
/// PM1 status/enable: power button.
const PM1_PWRBTN: u16 = 1 << 8;
/// PM1 status: wake.
const PM1_WAK: u16 = 1 << 15;
/// PM1 control: SCI enabled (ACPI mode).
const PM1_SCI_EN: u16 = 1 << 0;
const PM1_SLP_TYP_SHIFT: u16 = 10;
const PM1_SLP_TYP_MASK: u16 = 7 << PM1_SLP_TYP_SHIFT;
/// PM1 control: sleep enable (write-only, reads as 0).
const PM1_SLP_EN: u16 = 1 << 13;

/// Raises (true) or lowers (false) the SCI line.
pub type SciLine = Box<dyn Fn(bool) + Send>;

/// The PM1 event/control registers and the PM timer (`ACPI_PM_LEN` ports).
pub struct AcpiPm {
    sts: u16,
    en: u16,
    cnt: u16,
    start: Instant,
    sci: SciLine,
    sci_level: bool,
    stop: Arc<dyn StopRequest>,
}

impl AcpiPm {
    /// A PM block that drives the SCI through `sci` and ends the run through `stop`.
    pub fn new(sci: SciLine, stop: Arc<dyn StopRequest>) -> Self {
        AcpiPm {
            sts: 0,
            en: 0,
            cnt: PM1_SCI_EN,
            start: Instant::now(),
            sci,
            sci_level: false,
            stop,
        }
    }

    /// Presses the power button: sets PWRBTN_STS and raises the SCI if it is enabled.
    pub fn press_power_button(&mut self) {
        self.sts |= PM1_PWRBTN;
        self.update_sci();
    }

    fn timer(&self) -> u32 {
        let ns = self.start.elapsed().as_nanos();
        let ticks = ns * u128::from(PM_TIMER_HZ) / 1_000_000_000;
        u32::try_from(ticks & 0xff_ffff).unwrap_or(0)
    }

    fn update_sci(&mut self) {
        let level = self.sts & self.en & (PM1_TMR | PM1_PWRBTN) != 0;
        if level != self.sci_level {
            self.sci_level = level;
            (self.sci)(level);
        }
    }

    fn write_cnt(&mut self, v: u16) {
        self.cnt = (v & !PM1_SLP_EN) | PM1_SCI_EN;
        if v & PM1_SLP_EN == 0 {
            return;
        }
        let typ = (v & PM1_SLP_TYP_MASK) >> PM1_SLP_TYP_SHIFT;
        if typ == S5_SLP_TYP {
            self.stop.request_stop(GuestStop::PowerOff);
        } else {
            // Only S5 is offered in the DSDT; another state is a guest error we ignore.
            log::warn!("acpi-pm: sleep type {typ} requested; only S5 ({S5_SLP_TYP}) is supported");
            self.sts |= PM1_WAK;
        }
    }

    /// The 12-byte register file as little-endian bytes.
    fn registers(&self) -> [u8; 12] {
        let mut r = [0u8; 12];
        r[0..2].copy_from_slice(&self.sts.to_le_bytes());
        r[2..4].copy_from_slice(&self.en.to_le_bytes());
        r[4..6].copy_from_slice(&self.cnt.to_le_bytes());
        r[8..12].copy_from_slice(&self.timer().to_le_bytes());
        r
    }
}

impl BusDevice for AcpiPm {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        crate::bytes::read_padded(&self.registers(), offset, data);
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        let mut v = [0u8; 2];
        for (d, s) in v.iter_mut().zip(data) {
            *d = *s;
        }
        let word = u16::from_le_bytes(v);
        match (offset, data.len()) {
            // Status bits are write-one-to-clear.
            (0, _) => self.sts &= !word,
            (1, 1) => self.sts &= !(word << 8),
            (2, _) => self.en = word,
            (3, 1) => self.en = (self.en & 0x00ff) | (word << 8),
            (4, _) => self.write_cnt(word),
            (5, 1) => self.write_cnt((self.cnt & 0x00ff) | (word << 8)),
            _ => log::debug!("acpi-pm: ignoring a write at +{offset:#x}"),
        }
        self.update_sci();
    }
}

/// The GPE0 block: status (write-one-to-clear) then enable bytes. No event is ever raised.
#[derive(Default)]
pub struct Gpe0 {
    regs: [u8; 16],
}

impl BusDevice for Gpe0 {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        crate::bytes::read_padded(&self.regs, offset, data);
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        for (i, v) in data.iter().enumerate() {
            let at = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .saturating_add(i);
            match at {
                0..=7 => self.regs[at] &= !v,
                8..=15 => self.regs[at] = *v,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopLog;
    use std::sync::Mutex;

    fn pm() -> (AcpiPm, Arc<StopLog>, Arc<Mutex<Vec<bool>>>) {
        let stop = Arc::new(StopLog::default());
        let levels = Arc::new(Mutex::new(Vec::new()));
        let l = levels.clone();
        let pm = AcpiPm::new(Box::new(move |v| l.lock().unwrap().push(v)), stop.clone());
        (pm, stop, levels)
    }

    fn read16(pm: &mut AcpiPm, offset: u64) -> u16 {
        let mut b = [0u8; 2];
        pm.read(offset, &mut b, &Origin::default());
        u16::from_le_bytes(b)
    }

    #[test]
    fn s5_powers_off() {
        let (mut pm, stop, _) = pm();
        pm.write(4, &(S5_SLP_TYP << 10).to_le_bytes(), &Origin::default());
        assert!(!stop.is_requested(), "SLP_TYP without SLP_EN does nothing");
        pm.write(
            4,
            &((S5_SLP_TYP << 10) | PM1_SLP_EN).to_le_bytes(),
            &Origin::default(),
        );
        assert_eq!(stop.outcome(), Some(GuestStop::PowerOff));
    }

    #[test]
    fn other_sleep_states_are_refused() {
        let (mut pm, stop, _) = pm();
        pm.write(
            4,
            &((1u16 << 10) | PM1_SLP_EN).to_le_bytes(),
            &Origin::default(),
        );
        assert!(!stop.is_requested());
        assert_ne!(read16(&mut pm, 0) & PM1_WAK, 0);
    }

    #[test]
    fn sci_en_is_always_set_and_slp_en_reads_zero() {
        let (mut pm, _, _) = pm();
        pm.write(4, &[0, 0], &Origin::default());
        assert_eq!(read16(&mut pm, 4), PM1_SCI_EN);
    }

    #[test]
    fn power_button_raises_the_sci_until_cleared() {
        let (mut pm, _, levels) = pm();
        pm.press_power_button();
        assert!(levels.lock().unwrap().is_empty(), "not enabled yet");
        pm.write(2, &PM1_PWRBTN.to_le_bytes(), &Origin::default());
        assert_eq!(*levels.lock().unwrap(), vec![true]);
        pm.write(0, &PM1_PWRBTN.to_le_bytes(), &Origin::default());
        assert_eq!(*levels.lock().unwrap(), vec![true, false]);
        assert_eq!(read16(&mut pm, 0) & PM1_PWRBTN, 0);
    }

    #[test]
    fn pm_timer_counts_at_3_58_mhz_in_24_bits() {
        let (mut pm, _, _) = pm();
        let read = |pm: &mut AcpiPm| {
            let mut b = [0u8; 4];
            pm.read(8, &mut b, &Origin::default());
            u32::from_le_bytes(b)
        };
        let ticks = |d: std::time::Duration| d.as_nanos() * u128::from(PM_TIMER_HZ) / 1_000_000_000;
        // Between the reads lie at least the 20 ms slept (71,590 ticks, less one for
        // truncation) and at most the time between the clock readings around them, however long
        // a loaded host keeps the thread off the CPU. The counter wraps every 4.7 s, so a stall
        // that long says nothing: measure again.
        loop {
            let before = std::time::Instant::now();
            let a = read(&mut pm);
            std::thread::sleep(std::time::Duration::from_millis(20));
            let b = read(&mut pm);
            let most = ticks(before.elapsed()) + 1;
            assert!(a < 1 << 24 && b < 1 << 24);
            if most >= 1 << 24 {
                continue;
            }
            let delta = u128::from(b.wrapping_sub(a) & 0xff_ffff);
            let least = ticks(std::time::Duration::from_millis(20)) - 1;
            assert!(
                (least..=most).contains(&delta),
                "delta {delta}, not in {least}..={most}"
            );
            break;
        }
    }

    #[test]
    fn gpe0_status_is_write_one_to_clear() {
        let mut g = Gpe0::default();
        g.regs[0] = 0xff;
        g.write(0, &[0x0f], &Origin::default());
        g.write(8, &[0x55], &Origin::default());
        let mut b = [0u8; 1];
        g.read(0, &mut b, &Origin::default());
        assert_eq!(b[0], 0xf0);
        g.read(8, &mut b, &Origin::default());
        assert_eq!(b[0], 0x55);
    }
}
