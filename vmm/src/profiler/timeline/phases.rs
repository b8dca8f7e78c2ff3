//! The run's phases as its samples show them:
//!
//! - `firmware`: from the reset vector (a run that boots firmware: SeaBIOS, OVMF) until the
//!   first sample at a kernel-half address (bit 63 set) in long mode. Boot loaders run in it
//!   too (the Windows Boot Manager and winload run at low addresses; so does GRUB).
//! - `kernel`: from there, or from the run's start for a kernel the VMM loaded itself (PVH,
//!   bzImage, multiboot), until the first user-mode (CPL3) sample.
//! - `user`: from there until the run ends.
//!
//! A boundary is the first sample past it, so it is known to within one sampling interval of
//! the vCPUs sampled. Phases are followed only while a timeline records; if the first sample
//! seen is already past the run's first phase (a timeline started late, through the API), when
//! the earlier phases ended is unknown and none is reported. Each sample costs one relaxed
//! atomic load once the run is in `user`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

const FIRMWARE: u8 = 0;
const KERNEL: u8 = 1;
const USER: u8 = 2;
const NAMES: [&str; 3] = ["firmware", "kernel", "user"];
const UNSEEN: u64 = u64::MAX;
const EFER_LMA: u64 = 1 << 10;

/// Where the run is, and when each phase began.
pub(super) struct Phases {
    stage: AtomicU8,
    /// When each phase began, ns from the run's start ([`UNSEEN`]: not seen).
    starts: [AtomicU64; 3],
    /// A sample has been seen.
    observed: AtomicBool,
    /// The first sample seen was past the first phase: no boundary is known.
    unknown: AtomicBool,
}

impl Phases {
    /// A run that starts in a kernel the VMM loaded.
    pub(super) fn new() -> Self {
        Phases {
            stage: AtomicU8::new(KERNEL),
            starts: [
                AtomicU64::new(UNSEEN),
                AtomicU64::new(0),
                AtomicU64::new(UNSEEN),
            ],
            observed: AtomicBool::new(false),
            unknown: AtomicBool::new(false),
        }
    }

    /// The run starts in firmware (before any sample).
    pub(super) fn boot_firmware(&self) {
        self.stage.store(FIRMWARE, Ordering::Relaxed);
        self.starts[usize::from(FIRMWARE)].store(0, Ordering::Relaxed);
        self.starts[usize::from(KERNEL)].store(UNSEEN, Ordering::Relaxed);
    }

    /// A sample at `t_ns`: privilege level `cpl`, PC `pc`, EFER `efer`.
    #[inline]
    pub(super) fn observe(&self, t_ns: u64, cpl: u8, pc: u64, efer: u64) {
        let stage = self.stage.load(Ordering::Relaxed);
        if stage == USER {
            return;
        }
        // The first sample seen (a load, not a write to the shared line, once one has been).
        let first =
            !self.observed.load(Ordering::Relaxed) && !self.observed.swap(true, Ordering::Relaxed);
        let next = if cpl == 3 {
            USER
        } else if stage == FIRMWARE && efer & EFER_LMA != 0 && pc >> 63 == 1 {
            KERNEL
        } else {
            return;
        };
        let was = self.stage.fetch_max(next, Ordering::Relaxed);
        if was < next {
            if first {
                self.unknown.store(true, Ordering::Relaxed);
            }
            self.starts[usize::from(next)].store(t_ns, Ordering::Relaxed);
        }
    }

    /// The phases seen, the run ending at `end_ns`: `(name, start, end)` in order, each
    /// ending where the next seen one begins.
    pub(super) fn spans(&self, end_ns: u64) -> Vec<(&'static str, u64, u64)> {
        if self.unknown.load(Ordering::Relaxed) || !self.observed.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let seen: Vec<(usize, u64)> = self
            .starts
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .enumerate()
            .filter(|&(_, t)| t != UNSEEN)
            .collect();
        seen.iter()
            .enumerate()
            .map(|(i, &(k, start))| {
                let end = seen.get(i + 1).map_or(end_ns, |&(_, next)| next);
                (NAMES[k], start, end.max(start))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LMA: u64 = EFER_LMA | 0x500;
    const KERNEL_PC: u64 = 0xffff_f800_1234_5678;

    #[test]
    fn a_firmware_boot_goes_firmware_kernel_user() {
        let p = Phases::new();
        p.boot_firmware();
        p.observe(10, 0, 0xf_e05b, 0); // real mode
        p.observe(20, 0, 0x7c00, 0);
        p.observe(30, 0, 0x1_0000_0000, LMA); // a boot loader, low in long mode
        p.observe(40, 0, KERNEL_PC, 0); // kernel half but not long mode: not the kernel
        p.observe(50, 0, KERNEL_PC, LMA);
        p.observe(60, 0, 0x1000, LMA); // the kernel at a low address: still the kernel
        p.observe(70, 3, 0x7ff6_0000_1000, LMA);
        p.observe(80, 0, 0x1000, 0); // nothing goes back
        assert_eq!(
            p.spans(100),
            vec![("firmware", 0, 50), ("kernel", 50, 70), ("user", 70, 100)]
        );
    }

    #[test]
    fn a_loaded_kernel_starts_in_kernel() {
        let p = Phases::new();
        p.observe(5, 0, 0x10_0000, LMA);
        assert_eq!(p.spans(9), vec![("kernel", 0, 9)]);
        p.observe(7, 3, 0x4000_0000, LMA);
        assert_eq!(p.spans(9), vec![("kernel", 0, 7), ("user", 7, 9)]);
    }

    #[test]
    fn a_firmware_that_reaches_user_mode_has_no_kernel_phase() {
        let p = Phases::new();
        p.boot_firmware();
        p.observe(5, 0, 0x1000, 0);
        p.observe(8, 3, 0x1000, 0);
        assert_eq!(p.spans(9), vec![("firmware", 0, 8), ("user", 8, 9)]);
    }

    #[test]
    fn a_timeline_started_late_reports_no_phases() {
        let p = Phases::new();
        p.observe(1_000, 3, 0x4000_0000, LMA);
        assert_eq!(p.spans(2_000), vec![]);
        let q = Phases::new();
        assert_eq!(q.spans(2_000), vec![], "nothing seen: nothing known");
    }
}
