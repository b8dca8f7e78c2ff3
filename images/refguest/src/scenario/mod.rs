//! Scenario registry. The kernel command line picks one with
//! `scenario=<name>` (default `smoke`). A scenario spawns its processes in
//! `setup` (BSP, after every CPU is online, interrupts still off) and judges
//! the results in `check` once every process has exited or faulted.
//!
//! To add one: write `scenario/<name>.rs` exporting a `SCENARIO` constant,
//! put its CPL3 code in `user/<name>.rs`, and list it in `SCENARIOS`.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::exit;
use crate::sched::Table;

mod affinity;
mod bench;
mod common;
mod interrupts;
mod interval;
mod ntkernel;
mod ntprocs;
mod objects;
mod pestacks;
mod phases;
mod process;
mod ramrule;
mod shares;
mod smoke;
mod sources;
mod stacks;
mod stopped;

/// What a scenario may know about the machine.
#[allow(dead_code)] // `bsp` and `tsc_hz` are for timed scenarios to come.
pub struct Env {
    pub cpus: usize,
    pub bsp: usize,
    pub tsc_hz: u64,
}

pub struct Scenario {
    pub name: &'static str,
    /// Spawns processes; an error fails the run.
    pub setup: fn(&Env) -> Result<(), &'static str>,
    /// Judges the finished processes; may print detail lines first.
    pub check: fn(&Table) -> Result<(), &'static str>,
    /// The CONTROL system call (`user::nr::CONTROL`): (cpu, argument) -> result. Runs at CPL0
    /// with interrupts off, between a workload's phases.
    pub control: Option<fn(usize, u64) -> u64>,
}

static SCENARIOS: &[Scenario] = &[
    smoke::SCENARIO,
    shares::SCENARIO,
    process::SCENARIO,
    objects::SCENARIO,
    interval::SCENARIO,
    affinity::SCENARIO,
    interrupts::SCENARIO,
    stopped::SCENARIO,
    bench::SCENARIO,
    stacks::SCENARIO,
    pestacks::SCENARIO,
    ntkernel::SCENARIO,
    ntprocs::SCENARIO,
    sources::SCENARIO,
    ramrule::SCENARIO,
    phases::SCENARIO,
];
static SELECTED: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Selects the scenario called `name`.
pub fn select(name: &str) -> Option<&'static Scenario> {
    let index = SCENARIOS.iter().position(|s| s.name == name)?;
    SELECTED.store(index, Ordering::Relaxed);
    Some(&SCENARIOS[index])
}

/// Names of all scenarios, for the error message on an unknown name.
pub fn names() -> impl Iterator<Item = &'static str> {
    SCENARIOS.iter().map(|s| s.name)
}

/// The CONTROL system call: the selected scenario's hook, or u64::MAX.
pub fn control(cpu: usize, arg: u64) -> u64 {
    match SCENARIOS.get(SELECTED.load(Ordering::Relaxed)).and_then(|s| s.control) {
        Some(hook) => hook(cpu, arg),
        None => u64::MAX,
    }
}

/// Called with the process table locked when every process has ended.
pub fn finish(table: &Table) -> ! {
    let Some(scenario) = SCENARIOS.get(SELECTED.load(Ordering::Relaxed)) else {
        exit::fail(format_args!("no scenario selected"))
    };
    crate::println!("{} finished after {} ms", scenario.name, crate::time::ms_since_boot());
    match (scenario.check)(table) {
        Ok(()) => exit::pass(),
        Err(reason) => exit::fail(format_args!("{}: {}", scenario.name, reason)),
    }
}
