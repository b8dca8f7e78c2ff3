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
//! the vCPUs sampled. Phases are reported only for a timeline that recorded from the run's
//! start ([`Phases::recorded_from_start`]: `hvprof profile --timeline`); one started later, through the
//! API, did not see when the earlier phases ended and reports none. Each sample costs one
//! relaxed atomic load once the run is in `user`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use introspect::paging::Paging;

const FIRMWARE: u8 = 0;
const KERNEL: u8 = 1;
const USER: u8 = 2;
const NAMES: [&str; 3] = ["firmware", "kernel", "user"];
const UNSEEN: u64 = u64::MAX;
const EFER_LMA: u64 = 1 << 10;
const CR0_PE: u64 = 1;

/// Where the run is, and when each phase began.
pub(super) struct Phases {
    stage: AtomicU8,
    /// When each phase began, ns from the run's start ([`UNSEEN`]: not seen).
    starts: [AtomicU64; 3],
    /// A timeline recorded from the run's start: the boundaries seen are the run's.
    from_start: AtomicBool,
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
            from_start: AtomicBool::new(false),
        }
    }

    /// A timeline records from the run's start (before its vCPUs ran any guest code that
    /// matters: set as they start).
    pub(super) fn recorded_from_start(&self) {
        self.from_start.store(true, Ordering::Relaxed);
    }

    /// The run starts in firmware (before any sample).
    pub(super) fn boot_firmware(&self) {
        self.stage.store(FIRMWARE, Ordering::Relaxed);
        self.starts[usize::from(FIRMWARE)].store(0, Ordering::Relaxed);
        self.starts[usize::from(KERNEL)].store(UNSEEN, Ordering::Relaxed);
    }

    /// A sample at `t_ns`: privilege level `cpl`, PC `pc`, in the address space `paging`.
    #[inline]
    pub(super) fn observe(&self, t_ns: u64, cpl: u8, pc: u64, paging: &Paging) {
        let stage = self.stage.load(Ordering::Relaxed);
        if stage == USER {
            return;
        }
        // CPL 3 only in protected mode (a sample whose registers could not be read has none).
        let next = if cpl == 3 && paging.cr0 & CR0_PE != 0 {
            USER
        } else if stage == FIRMWARE && paging.efer & EFER_LMA != 0 && pc >> 63 == 1 {
            KERNEL
        } else {
            return;
        };
        let was = self.stage.fetch_max(next, Ordering::Relaxed);
        if was <= next {
            // Two vCPUs may both see the boundary: the earlier sample's time is it, whichever
            // thread moved the stage on.
            self.starts[usize::from(next)].fetch_min(t_ns, Ordering::Relaxed);
        }
    }

    /// The phases seen, the run ending at `end_ns`: `(name, start, end)` in order, each
    /// ending where the next seen one begins.
    pub(super) fn spans(&self, end_ns: u64) -> Vec<(&'static str, u64, u64)> {
        if !self.from_start.load(Ordering::Relaxed) {
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

    const KERNEL_PC: u64 = 0xffff_f800_1234_5678;

    fn real() -> Paging {
        Paging::default()
    }

    fn protected() -> Paging {
        Paging {
            cr0: CR0_PE | (1 << 31),
            ..Paging::default()
        }
    }

    fn long() -> Paging {
        Paging {
            efer: EFER_LMA | 0x500,
            cr4: 0x20,
            ..protected()
        }
    }

    fn from_start(firmware: bool) -> Phases {
        let p = Phases::new();
        if firmware {
            p.boot_firmware();
        }
        p.recorded_from_start();
        p
    }

    #[test]
    fn a_firmware_boot_goes_firmware_kernel_user() {
        let p = from_start(true);
        p.observe(10, 0, 0xf_e05b, &real());
        p.observe(20, 0, 0x7c00, &real());
        p.observe(30, 0, 0x1_0000_0000, &long()); // a boot loader, low in long mode
        p.observe(40, 0, KERNEL_PC, &protected()); // kernel half but not long mode
        p.observe(50, 0, KERNEL_PC, &long());
        p.observe(60, 0, 0x1000, &long()); // the kernel at a low address: still the kernel
        p.observe(70, 3, 0x7ff6_0000_1000, &long());
        p.observe(80, 0, 0x1000, &real()); // nothing goes back
        assert_eq!(
            p.spans(100),
            vec![("firmware", 0, 50), ("kernel", 50, 70), ("user", 70, 100)]
        );
    }

    #[test]
    fn a_loaded_kernel_starts_in_kernel() {
        let p = from_start(false);
        p.observe(5, 0, 0x10_0000, &long());
        assert_eq!(p.spans(9), vec![("kernel", 0, 9)]);
        p.observe(7, 3, 0x4000_0000, &long());
        assert_eq!(p.spans(9), vec![("kernel", 0, 7), ("user", 7, 9)]);
    }

    #[test]
    fn a_firmware_that_reaches_user_mode_has_no_kernel_phase() {
        let p = from_start(true);
        p.observe(5, 0, 0x1000, &real());
        p.observe(8, 3, 0x1000, &protected());
        assert_eq!(p.spans(9), vec![("firmware", 0, 8), ("user", 8, 9)]);
    }

    /// Registers that could not be read come as CPL 3 with nothing else: not user mode.
    #[test]
    fn cpl3_without_protected_mode_is_not_user_mode() {
        let p = from_start(false);
        p.observe(5, 3, 0, &real());
        assert_eq!(p.spans(9), vec![("kernel", 0, 9)]);
    }

    /// Two vCPUs cross the boundary; the later sample's thread moves the stage first: the
    /// boundary is still the earlier sample's time.
    #[test]
    fn the_earlier_of_racing_samples_is_the_boundary() {
        let p = from_start(false);
        p.observe(12, 3, 0x4000_0000, &long());
        // What the other thread does next: it loaded the stage (kernel) before the first
        // thread moved it, so it goes on as if it were still the kernel's.
        let was = p.stage.fetch_max(USER, Ordering::Relaxed);
        assert_eq!(was, USER);
        p.starts[usize::from(USER)].fetch_min(10, Ordering::Relaxed);
        assert_eq!(p.spans(20), vec![("kernel", 0, 10), ("user", 10, 20)]);
    }

    #[test]
    fn a_timeline_started_late_reports_no_phases() {
        let p = Phases::new();
        p.observe(1_000, 0, 0x10_0000, &long());
        p.observe(2_000, 3, 0x4000_0000, &long());
        assert_eq!(p.spans(3_000), vec![]);
    }
}
