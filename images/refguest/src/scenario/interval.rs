//! `scenario=interval`: SET_INTERVAL / QUERY_INTERVAL. ProfileTime: the default before any
//! set, a value in range, clamping below the minimum and above the maximum; an unsupported
//! source (set and query answer 0 with SUCCESS); ProfileAlignmentFixup (0 before any set, then
//! the last value set, unclamped); a set without the privilege (PRIVILEGE_NOT_HELD, nothing
//! changes). Prints `refguest: interval <check> ... ok|BAD`.

use guest_agent::{Error, NtStatus, ProfileSource};

use super::common;
use super::{Env, Scenario};
use crate::prof;
use crate::sched::Table;
use crate::sync::SpinLock;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "interval", setup, check, control: None };

static VERDICT: SpinLock<Result<(), &'static str>> = SpinLock::new(Ok(()));

const MIN: u32 = 1000;
const MAX: u32 = 10_000_000;
const DEFAULT: u32 = 39_063;

fn expect(bad: &mut u32, what: &str, got: Result<u32, Error>, want: u32) {
    let good = got == Ok(want);
    if !good {
        *bad += 1;
    }
    crate::println!(
        "interval {} status={:#010x} value={} want={} {}",
        what,
        prof::status(&got).0,
        got.unwrap_or(0),
        want,
        common::ok(good)
    );
}

fn set(s: ProfileSource, v: u32) -> Result<u32, Error> {
    prof::with(|c| c.set_interval(s, v))
}

fn query(s: ProfileSource) -> Result<u32, Error> {
    prof::with(|c| c.query_interval(s))
}

fn setup(_: &Env) -> Result<(), &'static str> {
    common::hvprof("interval")?;
    let info = common::info()?;
    let time = ProfileSource::TIME;
    let fixup = ProfileSource::ALIGNMENT_FIXUP;
    // The first generic source the VMM does not support.
    let unsupported = (2u32..0x18)
        .find(|s| info.supported_sources & (1u64 << s) == 0)
        .map_or(ProfileSource(0x18), ProfileSource);
    let mut bad = 0;
    expect(&mut bad, "time_default", query(time), DEFAULT);
    expect(&mut bad, "fixup_before_set", query(fixup), 0);
    expect(&mut bad, "time_set_in_range", set(time, 10_000), 10_000);
    expect(&mut bad, "time_query_in_range", query(time), 10_000);
    expect(&mut bad, "time_set_below_min", set(time, 500), MIN);
    expect(&mut bad, "time_query_below_min", query(time), MIN);
    expect(&mut bad, "time_set_above_max", set(time, 20_000_000), MAX);
    expect(&mut bad, "time_query_above_max", query(time), MAX);
    let denied = prof::with(|c| c.set_interval_as(time, 20_000, 0));
    let good = denied == Err(Error::Status(NtStatus::PRIVILEGE_NOT_HELD));
    if !good {
        bad += 1;
    }
    crate::println!("interval time_set_unprivileged status={:#010x} {}", prof::status(&denied).0, common::ok(good));
    expect(&mut bad, "time_query_after_unprivileged", query(time), MAX);
    crate::println!("interval unsupported_source={}", unsupported.0);
    expect(&mut bad, "unsupported_set", set(unsupported, 10_000), 0);
    expect(&mut bad, "unsupported_query", query(unsupported), 0);
    expect(&mut bad, "fixup_set", set(fixup, 7), 7);
    expect(&mut bad, "fixup_query", query(fixup), 7);
    expect(&mut bad, "fixup_set_again", set(fixup, 123_456), 123_456);
    expect(&mut bad, "fixup_query_again", query(fixup), 123_456);
    expect(&mut bad, "time_restore_default", set(time, DEFAULT), DEFAULT);
    crate::println!("interval bad={}", bad);
    if bad != 0 {
        *VERDICT.lock() = Err("an interval call answered the wrong value or status");
    }
    common::spawn(work::w().start, 0, work::plan(common::ms(1), 1, false))?;
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    *VERDICT.lock()
}
