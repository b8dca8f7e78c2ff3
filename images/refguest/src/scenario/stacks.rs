//! `scenario=stacks`: every CPU runs the call-stack workload (`user/stacks.rs`: one leaf
//! reached by three paths costing 1 : 2 : 4) for `stacks.ms` milliseconds (default 2000). The
//! guest needs no profile object: the host samples and walks the stacks. PASS when every
//! process exited cleanly.

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
    common::all_exited("stacks", table)
}
