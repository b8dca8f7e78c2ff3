//! `scenario=pestacks`: the call-stack workload of a PE module. Module 0 (hvprof `--initrd`)
//! must be a PE32+ image linked /fixed into the PE window whose entry point is a System V
//! `fn(u64)` (tests/fixtures/pe/stacks.c); every CPU runs it in a loop for `stacks.ms`
//! milliseconds (default 2000). The host walks the stacks with the image's unwind data, as
//! on Windows. PASS when every process exited cleanly.

use super::common;
use super::{Env, Scenario};
use crate::sched::Table;
use crate::start_info::{module, param_u64};
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "pestacks", setup, check, control: None };

fn setup(env: &Env) -> Result<(), &'static str> {
    let image = crate::pe::load(module().ok_or("no module 0: pass the PE image as --initrd")?)?;
    let ms = param_u64("stacks.ms", 2000);
    crate::println!("pestacks base={:#x} pages={} entry={:#x} ms={} cpus={}", image.base, image.pages, image.entry, ms, env.cpus);
    let plan = work::plan(common::ms(ms), 1, false);
    for cpu in 0..env.cpus {
        common::spawn(image.entry, cpu, plan)?;
    }
    Ok(())
}

fn check(table: &Table) -> Result<(), &'static str> {
    common::all_exited("pestacks", table)
}
