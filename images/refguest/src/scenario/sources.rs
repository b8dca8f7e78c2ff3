//! `scenario=sources`: the profile sources hvprof offers, as an agent finds them. The PMU
//! feature bit is set exactly when QUERY_INFO offers a source besides ProfileTime; for every
//! generic source (ProfileTotalIssues to ProfileMaximum - 1) CREATE and QUERY_INTERVAL answer
//! as Windows does: a source the bitmap lacks gives STATUS_NOT_SUPPORTED and interval 0, one
//! it has is created (then closed) and reports a nonzero interval. Prints `refguest: sources
//! source=<n> offered=<0|1> create=<status> interval=<v> ok|BAD`.

use guest_agent::{abi, NtStatus, ProfileSource};

use super::common;
use super::{Env, Scenario};
use crate::prof;
use crate::sched::Table;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "sources", setup, check, control: None };

fn setup(_: &Env) -> Result<(), &'static str> {
    let found = common::hvprof("sources")?;
    let info = common::info()?;
    let mut bad = 0u32;
    let pmu = common::has(&found, abi::cpuid::FEATURE_PMU_SOURCES);
    let others = info.supported_sources & !1 != 0;
    if pmu != others || info.supported_sources & 1 == 0 {
        bad += 1;
    }
    crate::println!(
        "sources bitmap={:#x} pmu_feature={} {}",
        info.supported_sources,
        pmu as u8,
        common::ok(pmu == others && info.supported_sources & 1 != 0)
    );
    for s in 2u32..ProfileSource::MAXIMUM.0 {
        let source = ProfileSource(s);
        let offered = info.supported_sources & (1u64 << s) != 0;
        let created = prof::with(|c| c.create(&common::user_profile(0).with_source(source).to_create()));
        let status = prof::status(&created);
        if let Ok(r) = &created {
            let _ = prof::with(|c| c.close(r.handle));
        }
        let interval = prof::with(|c| c.query_interval(source)).unwrap_or(u32::MAX);
        let good = if offered {
            status == NtStatus::SUCCESS && interval != 0 && interval != u32::MAX
        } else {
            status == NtStatus::NOT_SUPPORTED && interval == 0
        };
        if !good {
            bad += 1;
        }
        crate::println!(
            "sources source={} offered={} create={:#010x} interval={} {}",
            s,
            offered as u8,
            status.0,
            interval,
            common::ok(good)
        );
    }
    crate::println!("sources bad={}", bad);
    if bad != 0 {
        common::fail_later("a source answered unlike its QUERY_INFO bit");
    }
    common::spawn(work::w().start, 0, work::plan(common::ms(1), 1, false))?;
    Ok(())
}

fn check(table: &Table) -> Result<(), &'static str> {
    common::all_exited("sources", table)?;
    common::verdict()
}
