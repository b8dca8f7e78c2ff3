//! `scenario=interrupts`: profile-interrupt injection. One profile per vCPU (affinity = that
//! vCPU, range [0, 2 GiB) in one 2 GiB bucket, so it counts every sample taken on the vCPU)
//! measures the VMM's per-vCPU samples from inside the guest, and a second one per vCPU counts
//! only the samples in `.user`. With injection of `PROFILE_VECTOR` enabled on every vCPU, a
//! worker per CPU spins for a phase; then injection is disabled and checked; during a second
//! phase the profiles keep counting but no new interrupt may arrive.
//!
//! The checks hold however the host schedules the vCPU threads. Every delivery follows its
//! sample, so a vCPU's deliveries never exceed its samples. Deliveries fall short of samples
//! where an injection finds the previous one still pending (the APIC merges them): a sample
//! taken while interrupts are off, in kernel code, or a second sample taken before the vCPU
//! re-entered the guest after the first (its thread was descheduled between two ticks: 5 of
//! 579 user samples merged so in one CI run under load). Merging needs such a pair, so it can
//! take at most half of the user samples; per vCPU,
//!
//!     user samples before the disable / 2 <= deliveries <= samples
//!
//! and in total deliveries are at most READ_STATS' injected_interrupts plus one in flight per
//! vCPU. How many samples merge depends on the host's scheduling (up to 9% of them under a
//! parallel build here), so deliveries are not held to a tighter share of the samples.
//! After the disable, at most two interrupts per vCPU still arrive (one pending in the APIC,
//! one in its handler before the count).
//! Parameters: `interrupts.ms` per phase (default 1000), `interrupts.interval` (default 10000).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use guest_agent::{abi, ProfileParams};

use super::common;
use super::{Env, Scenario};
use crate::prof::{self, PROFILE_VECTOR};
use crate::sched::Table;
use crate::percpu::MAX_CPUS;
use crate::start_info::param_u64;
use crate::sync::RacyCell;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "interrupts", setup, check, control: Some(control) };

static CPUS: AtomicU32 = AtomicU32::new(0);
static HANDLES: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// Per-CPU (samples, deliveries) at the end of phase 1.
static PHASE1: [(AtomicU64, AtomicU64); MAX_CPUS] = [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MAX_CPUS];
static INJECTED0: AtomicU64 = AtomicU64::new(0);

/// One counter per vCPU profile, each in its own 4-byte buffer.
#[repr(C, align(4096))]
struct Counters([u32; MAX_CPUS]);
static COUNTERS: RacyCell<Counters> = RacyCell::new(Counters([0; MAX_CPUS]));
/// The same for the per-vCPU profiles of `.user`.
static USER_COUNTERS: RacyCell<Counters> = RacyCell::new(Counters([0; MAX_CPUS]));
static USER_HANDLES: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

const SPAN: u64 = 0x8000_0000;
const SHIFT: u32 = 31;

fn profile(cpu: usize) -> ProfileParams {
    // SAFETY: only the address is taken.
    let buffer = unsafe { (*COUNTERS.get()).0.as_ptr().add(cpu) } as u64;
    let vcpu = crate::percpu::apic_id(cpu);
    ProfileParams::global(0, SPAN, SHIFT, buffer, 4).with_affinity(0, 1 << vcpu)
}

/// All of `.user` in one bucket on `cpu`'s vCPU.
fn user_profile(cpu: usize) -> ProfileParams {
    let (start, end) = prof::user_range();
    let shift = (u64::BITS - (end - start - 1).leading_zeros()).max(2);
    // SAFETY: only the address is taken.
    let buffer = unsafe { (*USER_COUNTERS.get()).0.as_ptr().add(cpu) } as u64;
    ProfileParams::global(start, end - start, shift, buffer, 4).with_affinity(0, 1 << crate::percpu::apic_id(cpu))
}

fn samples(cpu: usize) -> u64 {
    u64::from(prof::read(profile(cpu).buffer, 0))
}

fn user_samples(cpu: usize) -> u64 {
    u64::from(prof::read(user_profile(cpu).buffer, 0))
}

fn setup(env: &Env) -> Result<(), &'static str> {
    let found = common::hvprof("interrupts")?;
    if !common::has(&found, abi::cpuid::FEATURE_INTERRUPT_INJECTION | abi::cpuid::FEATURE_STATISTICS) {
        return Err("hvprof lacks interrupt injection or statistics");
    }
    let interval = common::set_interval("interrupts.interval")?;
    CPUS.store(env.cpus as u32, Ordering::Relaxed);
    for cpu in 0..env.cpus {
        HANDLES[cpu].store(common::create_start(&profile(cpu), None)?, Ordering::Relaxed);
        USER_HANDLES[cpu].store(common::create_start(&user_profile(cpu), None)?, Ordering::Relaxed);
    }
    let stats = prof::with(|c| c.read_stats()).map_err(|_| "READ_STATS failed")?;
    INJECTED0.store(stats.injected_interrupts, Ordering::Relaxed);
    prof::with(|c| c.set_interrupt(abi::ALL_VCPUS, Some(PROFILE_VECTOR))).map_err(|_| "SET_INTERRUPT failed")?;
    crate::println!("interrupts enabled vector={:#x} interval={}", PROFILE_VECTOR, interval);
    let phase = common::ms(param_u64("interrupts.ms", 1000));
    for cpu in 0..env.cpus {
        // The worker on CPU 0 drives the phases; the others spin as long.
        let plan = work::plan(phase, 2, cpu == 0);
        common::spawn(work::w().start, cpu, plan)?;
    }
    Ok(())
}

fn control(_cpu: usize, phase: u64) -> u64 {
    let cpus = CPUS.load(Ordering::Relaxed) as usize;
    if phase == 1 {
        // `.user` samples first, while injection is still on: each of them was delivered.
        let mut user = [0u64; MAX_CPUS];
        for (cpu, u) in user.iter_mut().enumerate().take(cpus) {
            *u = user_samples(cpu);
        }
        if prof::with(|c| c.set_interrupt(abi::ALL_VCPUS, None)).is_err() {
            common::fail_later("disabling injection failed");
        }
        let injected = prof::with(|c| c.read_stats()).map_or(0, |s| s.injected_interrupts)
            - INJECTED0.load(Ordering::Relaxed);
        let (mut delivered, mut user_total) = (0, 0);
        for (cpu, (s, d)) in PHASE1.iter().enumerate().take(cpus) {
            // Deliveries before samples: a delivery's sample is counted before it is injected.
            let deliveries = prof::deliveries(cpu);
            let samples = samples(cpu);
            s.store(samples, Ordering::Relaxed);
            d.store(deliveries, Ordering::Relaxed);
            delivered += deliveries;
            user_total += user[cpu];
            let good = user[cpu] > 0 && user[cpu] <= 2 * deliveries && deliveries <= samples;
            crate::println!(
                "interrupts vcpu={} samples={} user_samples={} deliveries={} {}",
                crate::percpu::apic_id(cpu),
                samples,
                user[cpu],
                deliveries,
                common::ok(good)
            );
            if !good {
                common::fail_later("deliveries outside [user samples / 2, samples] (or no user samples)");
            }
        }
        let good = delivered <= injected + cpus as u64 && user_total <= 2 * delivered;
        crate::println!("interrupts injected={} delivered={} user_samples={} {}", injected, delivered, user_total, common::ok(good));
        if !good {
            common::fail_later("deliveries outside [user samples / 2, READ_STATS injected_interrupts]");
        }
    } else {
        for (cpu, (s, d)) in PHASE1.iter().enumerate().take(cpus) {
            let (samples, deliveries) = (samples(cpu), prof::deliveries(cpu));
            let late = deliveries - d.load(Ordering::Relaxed);
            let sampled = samples - s.load(Ordering::Relaxed);
            let good = late <= 2 && sampled > 0;
            crate::println!(
                "interrupts after_disable vcpu={} new_samples={} new_deliveries={} {}",
                crate::percpu::apic_id(cpu),
                sampled,
                late,
                common::ok(good)
            );
            if late > 2 {
                common::fail_later("interrupts kept arriving after injection was disabled");
            }
            if sampled == 0 {
                common::fail_later("sampling stopped with injection");
            }
        }
        for handle in HANDLES[..cpus].iter().chain(&USER_HANDLES[..cpus]) {
            if common::close(handle.load(Ordering::Relaxed)).is_err() {
                common::fail_later("closing a profile failed");
            }
        }
    }
    0
}

fn check(_: &Table) -> Result<(), &'static str> {
    common::verdict()
}
