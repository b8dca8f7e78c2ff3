//! `scenario=shares`: a global ProfileTime profile of `.user` in 16-byte buckets while every
//! CPU runs f1(n), f2(2n), f4(4n) in a loop (the same register loop, so the time shares are
//! 1/7, 2/7, 4/7). After stop, the guest sums the buckets of each function's range. PASS if
//! each share is within 3 percentage points of its ideal and enough samples arrived.
//! Parameters: `shares.ms` (default 2000), `shares.interval` (100 ns units, default 10000),
//! `shares.bucket` (log2 bytes, default 4), `shares.slowf2=1` (f2 20% slower: 1 : 2.4 : 4).

use core::sync::atomic::{AtomicU32, Ordering};

use super::common::{self, Pct};
use super::{Env, Scenario};
use crate::sched::Table;
use crate::start_info::param_u64;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "shares", setup, check, control: None };

static HANDLE: AtomicU32 = AtomicU32::new(0);
static INTERVAL: AtomicU32 = AtomicU32::new(0);
static WORKERS: AtomicU32 = AtomicU32::new(0);

fn params() -> guest_agent::ProfileParams {
    let mut p = common::user_profile(0);
    let shift = param_u64("shares.bucket", 4).clamp(2, 12) as u32;
    p.bucket_size = shift;
    p.buffer_size = crate::prof::buffer_bytes(p.size, shift);
    p
}

/// `shares.slowf2=1`: f2 runs 20% longer (costs 1 : 2.4 : 4), for regression tests.
fn slow_f2() -> bool {
    param_u64("shares.slowf2", 0) != 0
}

fn duration_ms() -> u64 {
    param_u64("shares.ms", 2000)
}

fn setup(env: &Env) -> Result<(), &'static str> {
    common::hvprof("shares")?;
    let interval = common::set_interval("shares.interval")?;
    INTERVAL.store(interval, Ordering::Relaxed);
    let p = params();
    crate::println!(
        "shares profile base={:#x} size={:#x} bucket={} interval={} ms={} cpus={}",
        p.base,
        p.size,
        p.bucket_size,
        interval,
        duration_ms(),
        env.cpus
    );
    HANDLE.store(common::create_start(&p, None)?, Ordering::Relaxed);
    let plan = work::plan(common::ms(duration_ms()), 1, false);
    let round = if slow_f2() { work::round_slow_f2() } else { work::round() };
    for cpu in 0..env.cpus {
        common::spawn(round, cpu, plan)?;
    }
    WORKERS.store(env.cpus as u32, Ordering::Relaxed);
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    let handle = HANDLE.load(Ordering::Relaxed);
    common::stop(handle)?;
    let p = params();
    // Relative costs in fifths: 1 : 2 : 4, or 1 : 2.4 : 4 with f2 slowed.
    let f2_weight = if slow_f2() { 12 } else { 10 };
    let fns = [(work::f1(), 5u64), (work::f2(), f2_weight), (work::f4(), 20)];
    let weight_sum: u64 = fns.iter().map(|(_, w)| w).sum();
    let counts = fns.map(|(r, _)| common::count(&p, &r));
    let in_fns: u64 = counts.iter().sum();
    let total = crate::prof::sum(p.buffer, p.base, p.bucket_size, p.base, p.base + p.size);
    let mut good = true;
    for ((r, weight), count) in fns.iter().zip(counts) {
        let share = common::hundredths(count, in_fns);
        let ideal = common::hundredths(*weight, weight_sum);
        let fn_ok = share.abs_diff(ideal) <= 300;
        good &= fn_ok;
        crate::println!(
            "shares fn={} start={:#x} end={:#x} count={} share={} ideal={} {}",
            r.name,
            r.start,
            r.end,
            count,
            Pct(share),
            Pct(ideal),
            common::ok(fn_ok)
        );
    }
    // Expected samples: one per interval per busy vCPU. Require a quarter of that (the host may
    // be slow to kick) and at least 200, so shares are meaningful.
    let interval_us = u64::from(INTERVAL.load(Ordering::Relaxed)) / 10;
    let expected = duration_ms() * 1000 / interval_us.max(1) * u64::from(WORKERS.load(Ordering::Relaxed));
    let minimum = (expected / 4).max(200);
    let enough = in_fns >= minimum;
    crate::println!(
        "shares total={} in_functions={} expected={} minimum={} {}",
        total,
        in_fns,
        expected,
        minimum,
        common::ok(enough)
    );
    if let Ok(stats) = crate::prof::with(|c| c.read_stats()) {
        crate::println!(
            "shares stats samples={} counted={} counts={} dropped={}",
            stats.samples,
            stats.counted_samples,
            stats.counts,
            stats.dropped_samples
        );
    }
    common::close(handle)?;
    match (good, enough) {
        (true, true) => Ok(()),
        (false, _) => Err("a function's share is off by more than 3 points"),
        (true, false) => Err("too few samples"),
    }
}
