//! `scenario=shares`: a global ProfileTime profile of `.user` in 16-byte buckets while every
//! CPU runs f1(n), f2(2n), f4(4n) in a loop (the same register loop, so the time shares are
//! 1/7, 2/7, 4/7). After stop, the guest sums the buckets of each function's range.
//! Parameters: `shares.ms` (default 2000), `shares.interval` (100 ns units, default 10000),
//! `shares.bucket` (log2 bytes, default 4), `shares.slowf2=<percent>` (f2 that much slower, 20
//! or 100: 1 : 2.4 : 4 or 1 : 4 : 4).
//!
//! PASS needs, whatever the noise of sampling and however loaded the host is:
//!
//! * each share within its tolerance of its ideal. Of the n samples in the three functions, a
//!   function's count is binomial (n, p) with p its ideal share, so its share's standard
//!   deviation is sqrt(p (1 - p) / n); the tolerance is 5 of those (binomial noise exceeds that
//!   about once in 1.7 million) and at least 3 points. With 2,000 samples that is 3.9, 5.1 and
//!   5.5 points for f1, f2 and f4, while 4 KiB buckets (every function gets every sample) are
//!   off by 19, 5 and 24 points. Measured here: the shares' deviations in units of that
//!   standard deviation had a root mean square of 0.8 to 1.1 over 100 runs, idle and under a
//!   parallel build.
//! * at least 200 samples in the functions (a tenth of what one vCPU is expected to take in the
//!   default run), so that the tolerances stay below 12.4, 16 and 17.5 points. How many samples
//!   arrive depends on how much CPU the host gives the vCPU threads (down to a fifth of the
//!   expected count, 393 of 2,000, with a parallel build and two other guests on this 2-core
//!   host), so they are not held to a share of it. Nor are the timers' expirations: samples
//!   plus the ones counted lost fell to 86% of one per interval per vCPU under that load.

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

/// `shares.slowf2=<percent>`: how much longer f2 runs (0, 20 or 100), for regression tests.
fn slow_f2() -> u64 {
    param_u64("shares.slowf2", 0)
}

/// f2's cost in fifths of f1's, and the round that runs it; None for an unsupported slowdown.
fn f2_cost() -> Option<(u64, u64)> {
    match slow_f2() {
        0 => Some((10, work::round())),
        20 => Some((12, work::round_slow_f2())),
        100 => Some((20, work::round_double_f2())),
        _ => None,
    }
}

/// Standard deviations of binomial noise a share may be off by.
const SIGMAS: u64 = 5;
/// The smallest tolerance, in hundredths of a percent.
const MIN_TOLERANCE: u64 = 300;
/// Fewest samples in the functions: keeps the tolerances below 12.4, 16 and 17.5 points.
const MIN_SAMPLES: u64 = 200;

/// How far (hundredths of a percent) the share of a function with `weight` of `weight_sum` may
/// be from its ideal among `n` samples: `SIGMAS` standard deviations of a binomial proportion,
/// 10^4 * sqrt(p (1 - p) / n) with p = weight / weight_sum, rounded up, or `MIN_TOLERANCE`.
fn tolerance(weight: u64, weight_sum: u64, n: u64) -> u64 {
    let variance = SIGMAS * SIGMAS * 100_000_000 * weight * (weight_sum - weight) / (weight_sum * weight_sum * n.max(1));
    (variance.isqrt() + 1).max(MIN_TOLERANCE)
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
    let (_, round) = f2_cost().ok_or("shares.slowf2 must be 0, 20 or 100")?;
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
    // Relative costs in fifths: 1 : 2 : 4, or f2 slowed (1 : 2.4 : 4 or 1 : 4 : 4).
    let (f2_weight, _) = f2_cost().ok_or("shares.slowf2 must be 0, 20 or 100")?;
    let fns = [(work::f1(), 5u64), (work::f2(), f2_weight), (work::f4(), 20)];
    let weight_sum: u64 = fns.iter().map(|(_, w)| w).sum();
    let counts = fns.map(|(r, _)| common::count(&p, &r));
    let in_fns: u64 = counts.iter().sum();
    let total = crate::prof::sum(p.buffer, p.base, p.bucket_size, p.base, p.base + p.size);
    let mut good = true;
    for ((r, weight), count) in fns.iter().zip(counts) {
        let share = common::hundredths(count, in_fns);
        let ideal = common::hundredths(*weight, weight_sum);
        let tolerance = tolerance(*weight, weight_sum, in_fns);
        let fn_ok = share.abs_diff(ideal) <= tolerance;
        good &= fn_ok;
        crate::println!(
            "shares fn={} start={:#x} end={:#x} count={} share={} ideal={} tolerance={} {}",
            r.name,
            r.start,
            r.end,
            count,
            Pct(share),
            Pct(ideal),
            Pct(tolerance),
            common::ok(fn_ok)
        );
    }
    // Expected samples: one per interval per busy vCPU (for the record; see the module's doc).
    let interval_us = u64::from(INTERVAL.load(Ordering::Relaxed)) / 10;
    let expected = duration_ms() * 1000 / interval_us.max(1) * u64::from(WORKERS.load(Ordering::Relaxed));
    let stats = crate::prof::with(|c| c.read_stats()).map_err(|_| "READ_STATS failed")?;
    let enough = in_fns >= MIN_SAMPLES;
    crate::println!(
        "shares total={} in_functions={} minimum={} expected={} fired={} {}",
        total,
        in_fns,
        MIN_SAMPLES,
        expected,
        stats.samples + stats.dropped_samples,
        common::ok(enough)
    );
    crate::println!(
        "shares stats samples={} counted={} counts={} dropped={}",
        stats.samples,
        stats.counted_samples,
        stats.counts,
        stats.dropped_samples
    );
    common::close(handle)?;
    match (good, enough) {
        (true, true) => Ok(()),
        (false, _) => Err("a function's share is off by more than its tolerance"),
        (true, false) => Err("too few samples"),
    }
}
