//! `scenario=stacks`: every CPU runs the call-stack workload (`user/stacks.rs`: one leaf
//! reached by three paths costing 1 : 2 : 4) for `stacks.ms` milliseconds (default 2000). The
//! guest needs no profile object: the host samples and walks the stacks. PASS when every
//! process exited cleanly. Each process's rate of work goes out as
//!
//!     refguest: stacks work pid=<n> calls=<u64> ticks=<u64> tsc_khz=<u64>
//!
//! (calls of `stacks_round`, TSC ticks they took): `hvprof bench --peer` compares it across
//! ways of sampling the guest.

use super::common;
use super::{Env, Scenario};
use crate::sched::Table;
use crate::start_info::param_u64;
use crate::user::{prof as work, stacks};

pub const SCENARIO: Scenario = Scenario { name: "stacks", setup, check, control: None };

fn setup(env: &Env) -> Result<(), &'static str> {
    let ms = param_u64("stacks.ms", 2000);
    crate::println!("stacks ms={} cpus={}", ms, env.cpus);
    let plan = work::plan(common::ms(ms), 1, false);
    for cpu in 0..env.cpus {
        common::spawn(stacks::round(), cpu, plan)?;
    }
    Ok(())
}

fn check(table: &Table) -> Result<(), &'static str> {
    for (pid, proc) in table.procs.iter().take(table.count).enumerate() {
        let Some(proc) = proc else { continue };
        let [calls, ticks] = [work::REPORT_CALLS, work::REPORT_TICKS].map(|k| proc.reports[k as usize].unwrap_or(0));
        crate::println!("stacks work pid={} calls={} ticks={} tsc_khz={}", pid, calls, ticks, crate::time::tsc_hz() / 1000);
    }
    common::all_exited("stacks", table)
}
