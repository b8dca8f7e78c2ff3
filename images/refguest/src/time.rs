//! Time: the TSC and the LAPIC timer are calibrated once against the PIT
//! (channel 2, gated through port 0x61, read with counter-latch commands), which KVM
//! emulates in the kernel.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu::{inb, outb, rdtsc};
use crate::{apic, idt};

const PIT_HZ: u64 = 1_193_182;
/// PIT ticks per round: 10 ms.
const ROUND_PIT_TICKS: u16 = (PIT_HZ / 100) as u16;
/// Clean rounds wanted, and the most rounds tried to get them.
const CALIBRATE_ROUNDS: usize = 3;
const MAX_ROUNDS: usize = 20;
/// A round is clean if both of its readings are bracketed by TSC reads this close together:
/// the brackets' widths times this are at most the round's TSC ticks.
const CLEAN_RATIO: u64 = 100;
/// Each poll is a few VM exits (microseconds), so this is seconds, not a hang.
const MAX_POLLS: u32 = 1_000_000;

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

/// Measures the TSC and APIC timer rates against PIT channel 2 (gated through port 0x61).
///
/// Each round reads the PIT's count (latched) and the APIC timer's count together, between two
/// TSC reads, at its start and again once 10 ms of PIT ticks have passed; the rates are the
/// counts' differences over the PIT's. A reading is only as good as its TSC bracket is narrow,
/// and the vCPU itself makes the bracket (a few instructions and one port write), so a host
/// that deschedules the vCPU for milliseconds (a busy host does) only spoils the rare bracket
/// it lands in. The former method, polling for the PIT's expiry, was spoiled whenever the vCPU
/// was off its CPU when the PIT expired: here, under load, 1 boot in 20 read the TSC as 3.1 or
/// 4.2 GHz instead of 2.6, and up to 14.5 GHz with more load. Rounds whose brackets exceed 1%
/// of the window are not counted; of the clean ones the narrowest is kept. If none is clean
/// after `MAX_ROUNDS`, the narrowest round is used and a warning printed.
pub fn calibrate() {
    let mut best: Option<Round> = None;
    let mut clean = 0;
    for _ in 0..MAX_ROUNDS {
        let Some(round) = measure() else { continue };
        if round.is_clean() {
            clean += 1;
        }
        if best.is_none_or(|b| round.slack < b.slack) {
            best = Some(round);
        }
        if clean >= CALIBRATE_ROUNDS {
            break;
        }
    }
    let Some(best) = best else {
        crate::exit::fail(format_args!("timer calibration: PIT channel 2 wrapped in every round"))
    };
    if !best.is_clean() {
        crate::println!(
            "warning: timer calibration uncertain: no clean round in {}, best slack {} of {} TSC ticks",
            MAX_ROUNDS,
            best.slack,
            best.tsc
        );
    }
    let pit = u64::from(best.pit);
    TSC_HZ.store(best.tsc * PIT_HZ / pit, Ordering::Relaxed);
    APIC_HZ.store(best.apic * PIT_HZ / pit, Ordering::Relaxed);
}

#[derive(Clone, Copy)]
struct Round {
    /// PIT, TSC and APIC timer ticks between the two readings.
    pit: u16,
    tsc: u64,
    apic: u64,
    /// Widths of the two readings' TSC brackets, added.
    slack: u64,
}

impl Round {
    fn is_clean(&self) -> bool {
        self.slack.saturating_mul(CLEAN_RATIO) <= self.tsc
    }
}

/// PIT channel 2 and APIC timer counts, taken together between two TSC reads.
struct Reading {
    /// TSC at the bracket's midpoint, and the bracket's width.
    tsc: u64,
    width: u64,
    pit: u16,
    apic: u32,
}

fn read_counters() -> Reading {
    let t0 = rdtsc();
    outb(0x43, 0x80); // counter latch, channel 2
    let apic = apic::timer_elapsed();
    let t1 = rdtsc();
    let lo = inb(0x42);
    let hi = inb(0x42);
    Reading { tsc: t0 + (t1 - t0) / 2, width: t1 - t0, pit: u16::from_le_bytes([lo, hi]), apic }
}

/// One round; None if the PIT reached zero (the vCPU was away for over 50 ms), so its count
/// may have wrapped.
fn measure() -> Option<Round> {
    outb(0x61, (inb(0x61) & !0x02) | 0x01); // gate on, speaker off
    outb(0x43, 0xB0); // channel 2, lo/hi, mode 0
    outb(0x42, 0xFF);
    apic::timer_start_free_running(idt::TIMER_VECTOR);
    outb(0x42, 0xFF); // counting down from 0xFFFF (55 ms) starts now
    let first = read_counters();
    let mut polls = 0u32;
    let last = loop {
        let r = read_counters();
        if first.pit.wrapping_sub(r.pit) >= ROUND_PIT_TICKS {
            break r;
        }
        polls += 1;
        if polls > MAX_POLLS {
            crate::exit::fail(format_args!("PIT channel 2 does not count (no in-kernel PIT?)"));
        }
    };
    if inb(0x61) & 0x20 != 0 {
        return None; // mode 0: OUT2 went high at zero
    }
    Some(Round {
        pit: first.pit.wrapping_sub(last.pit),
        tsc: last.tsc - first.tsc,
        apic: u64::from(last.apic.wrapping_sub(first.apic)),
        slack: first.width + last.width,
    })
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
