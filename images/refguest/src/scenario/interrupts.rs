//! `scenario=interrupts`: profile-interrupt injection. One profile per vCPU (affinity = that
//! vCPU, range [0, 2 GiB) in one 2 GiB bucket, so it counts every sample taken on the vCPU)
//! measures the VMM's per-vCPU samples from inside the guest. With injection of
//! `PROFILE_VECTOR` enabled on every vCPU, a worker per CPU spins for a phase; then injection
//! is disabled and, per vCPU, the handler's deliveries must be within 10% (or 5) of the
//! samples, and in total within 10% of READ_STATS' injected_interrupts. During a second phase
//! the profiles keep counting but no interrupt may arrive (at most one in flight per vCPU).
//! Parameters: `interrupts.ms` per phase (default 1000), `interrupts.interval` (default 10000).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use guest_agent::{abi, ProfileParams};

use super::common;
use super::{Env, Scenario};
use crate::prof::{self, PROFILE_VECTOR};
use crate::sched::Table;
use crate::smp::MAX_CPUS;
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

const SPAN: u64 = 0x8000_0000;
const SHIFT: u32 = 31;

fn profile(cpu: usize) -> ProfileParams {
    // SAFETY: only the address is taken.
    let buffer = unsafe { (*COUNTERS.get()).0.as_ptr().add(cpu) } as u64;
    let vcpu = crate::smp::apic_id(cpu);
    ProfileParams::global(0, SPAN, SHIFT, buffer, 4).with_affinity(0, 1 << vcpu)
}

fn samples(cpu: usize) -> u64 {
    u64::from(prof::read(profile(cpu).buffer, 0))
}

fn setup(env: &Env) -> Result<(), &'static str> {
    let found = common::hvprof("interrupts")?;
    if !common::has(&found, abi::cpuid::FEATURE_INTERRUPT_INJECTION | abi::cpuid::FEATURE_STATISTICS) {
        return Err("hvprof lacks interrupt injection or statistics");
    }
    let interval = common::set_interval("interrupts.interval")?;
    CPUS.store(env.cpus as u32, Ordering::Relaxed);
    for (cpu, handle) in HANDLES.iter().enumerate().take(env.cpus) {
        handle.store(common::create_start(&profile(cpu), None)?, Ordering::Relaxed);
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

fn within(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= (b / 10).max(5)
}

fn control(_cpu: usize, phase: u64) -> u64 {
    let cpus = CPUS.load(Ordering::Relaxed) as usize;
    if phase == 1 {
        if prof::with(|c| c.set_interrupt(abi::ALL_VCPUS, None)).is_err() {
            common::fail_later("disabling injection failed");
        }
        let injected = prof::with(|c| c.read_stats()).map_or(0, |s| s.injected_interrupts)
            - INJECTED0.load(Ordering::Relaxed);
        let mut delivered = 0;
        for (cpu, (s, d)) in PHASE1.iter().enumerate().take(cpus) {
            let (samples, deliveries) = (samples(cpu), prof::deliveries(cpu));
            s.store(samples, Ordering::Relaxed);
            d.store(deliveries, Ordering::Relaxed);
            delivered += deliveries;
            let good = samples > 0 && within(deliveries, samples);
            crate::println!(
                "interrupts vcpu={} samples={} deliveries={} {}",
                crate::smp::apic_id(cpu),
                samples,
                deliveries,
                common::ok(good)
            );
            if !good {
                common::fail_later("deliveries differ from the vCPU's samples by more than 10%");
            }
        }
        let good = within(delivered, injected);
        crate::println!("interrupts injected={} delivered={} {}", injected, delivered, common::ok(good));
        if !good {
            common::fail_later("deliveries differ from READ_STATS injected_interrupts by more than 10%");
        }
    } else {
        for (cpu, (s, d)) in PHASE1.iter().enumerate().take(cpus) {
            let (samples, deliveries) = (samples(cpu), prof::deliveries(cpu));
            let late = deliveries - d.load(Ordering::Relaxed);
            let sampled = samples - s.load(Ordering::Relaxed);
            let good = late <= 1 && sampled > 0;
            crate::println!(
                "interrupts after_disable vcpu={} new_samples={} new_deliveries={} {}",
                crate::smp::apic_id(cpu),
                sampled,
                late,
                common::ok(good)
            );
            if late > 1 {
                common::fail_later("interrupts kept arriving after injection was disabled");
            }
            if sampled == 0 {
                common::fail_later("sampling stopped with injection");
            }
        }
        for handle in HANDLES.iter().take(cpus) {
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
