//! `scenario=stopped`: two global profiles P1 and P2 of `.user` while a worker spins in `w`.
//! After the first phase P1 is stopped and its buffer copied; at the end of each later phase
//! the guest checks that P1's buffer is byte-for-byte unchanged while P2's total keeps growing.
//! Then both are closed (P1 stopped, P2 still started). Parameters: `stopped.ms` per phase
//! (default 300), `stopped.phases` (default 4), `stopped.cpus` (default 1): with more, a
//! worker as busy spins in `w` on each other CPU too, so that samples of other vCPUs are in
//! flight when the first CPU's worker stops P1 (the host must count those taken before the
//! stop, and none after, whichever vCPU took them).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::common;
use super::{Env, Scenario};
use crate::prof;
use crate::sched::Table;
use crate::start_info::param_u64;
use crate::sync::RacyCell;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "stopped", setup, check, control: Some(control) };

static P1: AtomicU32 = AtomicU32::new(0);
static P2: AtomicU32 = AtomicU32::new(0);
static P2_LAST: AtomicU64 = AtomicU64::new(0);
/// P1's buffer when it was stopped.
static SNAPSHOT: RacyCell<[u32; prof::COUNTERS]> = RacyCell::new([0; prof::COUNTERS]);

fn total(slot: usize) -> u64 {
    let p = common::user_profile(slot);
    prof::sum(p.buffer, p.base, p.bucket_size, p.base, p.base + p.size)
}

fn setup(env: &Env) -> Result<(), &'static str> {
    common::hvprof("stopped")?;
    common::set_interval("stopped.interval")?;
    P1.store(common::create_start(&common::user_profile(0), None)?, Ordering::Relaxed);
    P2.store(common::create_start(&common::user_profile(1), None)?, Ordering::Relaxed);
    let phases = param_u64("stopped.phases", 4).clamp(2, 20);
    let phase = common::ms(param_u64("stopped.ms", 300));
    common::spawn(work::w().start, 0, work::plan(phase, phases, true))?;
    // The other CPUs' workers make no control calls: only the first stops and compares.
    let cpus = (param_u64("stopped.cpus", 1) as usize).clamp(1, env.cpus);
    for cpu in 1..cpus {
        common::spawn(work::w().start, cpu, work::plan(phase, phases, false))?;
    }
    crate::println!("stopped workers={}", cpus);
    Ok(())
}

/// After phase 1: stop P1 and copy its buffer. After later phases: compare.
fn control(_cpu: usize, phase: u64) -> u64 {
    let p1 = common::user_profile(0);
    let words = (p1.buffer_size / 4) as usize;
    // SAFETY: only the (single) worker's control calls touch the snapshot, one at a time.
    let snapshot = unsafe { &mut *SNAPSHOT.get() };
    let p2 = total(1);
    if phase == 1 {
        if common::stop(P1.load(Ordering::Relaxed)).is_err() {
            common::fail_later("stopping P1 failed");
        }
        for (i, slot) in snapshot.iter_mut().enumerate().take(words) {
            *slot = prof::read(p1.buffer, i as u64);
        }
        let p1_total: u64 = snapshot[..words].iter().map(|&c| u64::from(c)).sum();
        crate::println!("stopped phase=1 p1_stopped_at={} p2={}", p1_total, p2);
        if p1_total == 0 {
            common::fail_later("P1 counted nothing before it was stopped");
        }
    } else {
        let changed = (0..words).filter(|&i| prof::read(p1.buffer, i as u64) != snapshot[i]).count();
        let p1_total = total(0);
        let grew = p2 > P2_LAST.load(Ordering::Relaxed);
        let good = changed == 0 && grew;
        crate::println!(
            "stopped phase={} p1={} p1_changed_buckets={} p2={} p2_grew={} {}",
            phase,
            p1_total,
            changed,
            p2,
            grew,
            common::ok(good)
        );
        if changed != 0 {
            common::fail_later("P1's buffer changed after STOP");
        }
        if !grew {
            common::fail_later("P2 stopped growing");
        }
    }
    P2_LAST.store(p2, Ordering::Relaxed);
    0
}

fn check(_: &Table) -> Result<(), &'static str> {
    common::close(P1.load(Ordering::Relaxed))?;
    common::close(P2.load(Ordering::Relaxed))?;
    crate::println!("stopped closed p1 (stopped) and p2 (started)");
    common::verdict()
}
