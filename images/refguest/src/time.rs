//! Time: the TSC and the LAPIC timer are calibrated once against the PIT
//! (channel 2, gated through port 0x61), which KVM emulates in the kernel.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu::{inb, outb, rdtsc};
use crate::{apic, idt};

const PIT_HZ: u64 = 1_193_182;
const CALIBRATE_MS: u64 = 10;
const CALIBRATE_ROUNDS: usize = 3;
/// Each poll is a VM exit (microseconds), so this is seconds, not a hang.
const MAX_POLLS: u32 = 2_000_000;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static APIC_HZ: AtomicU64 = AtomicU64::new(0);
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

/// Records the TSC at kernel entry.
pub fn mark_boot() {
    BOOT_TSC.store(rdtsc(), Ordering::Relaxed);
}

/// Milliseconds since `mark_boot`, by the calibrated TSC.
pub fn ms_since_boot() -> u64 {
    (rdtsc() - BOOT_TSC.load(Ordering::Relaxed)) / (tsc_hz() / 1000).max(1)
}

/// Measures TSC and APIC timer rates against a 10 ms PIT one-shot. A late
/// poll only lengthens the measured window, so the shortest of a few rounds
/// is kept (single rounds were seen 33% long on a busy host).
pub fn calibrate() {
    let (mut tsc, mut ticks) = (u64::MAX, u64::MAX);
    for _ in 0..CALIBRATE_ROUNDS {
        let (t, a) = measure();
        if t < tsc {
            (tsc, ticks) = (t, a);
        }
    }
    TSC_HZ.store(tsc * 1000 / CALIBRATE_MS, Ordering::Relaxed);
    APIC_HZ.store(ticks * 1000 / CALIBRATE_MS, Ordering::Relaxed);
}

/// One round: (TSC ticks, APIC timer ticks) during CALIBRATE_MS.
fn measure() -> (u64, u64) {
    let count = PIT_HZ * CALIBRATE_MS / 1000;
    outb(0x61, (inb(0x61) & !0x02) | 0x01); // gate on, speaker off
    outb(0x43, 0xB0); // channel 2, lo/hi, mode 0
    outb(0x42, (count & 0xFF) as u8);
    apic::timer_start_free_running(idt::TIMER_VECTOR);
    let tsc0 = rdtsc();
    outb(0x42, (count >> 8) as u8); // counting starts now
    let mut polls = 0u32;
    while inb(0x61) & 0x20 == 0 {
        polls += 1;
        if polls > MAX_POLLS {
            crate::exit::fail(format_args!("PIT channel 2 never fired (no in-kernel PIT?)"));
        }
    }
    (rdtsc() - tsc0, u64::from(apic::timer_elapsed()))
}

pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

pub fn apic_hz() -> u64 {
    APIC_HZ.load(Ordering::Relaxed)
}

/// Busy-waits `us` microseconds on the TSC.
pub fn delay_us(us: u64) {
    let end = rdtsc() + tsc_hz() / 1_000_000 * us;
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// TSC ticks in `ms` milliseconds.
pub fn ms_to_tsc(ms: u64) -> u64 {
    tsc_hz() / 1000 * ms
}
