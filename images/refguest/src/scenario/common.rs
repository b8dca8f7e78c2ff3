//! Helpers shared by the profiling scenarios: hvprof set-up, workers, profiles, verdicts.

use guest_agent::{abi, Error, Found, ProfileParams, ProfileSource};

use crate::prof;
use crate::sched::{self, State, Table};
use crate::sync::SpinLock;
use crate::user::prof as work;

/// The ProfileTime interval the scenarios sample at unless told otherwise: 1 ms.
pub const DEFAULT_INTERVAL: u32 = 10_000;

/// Finds hvprof and prints what it offers.
pub fn hvprof(scenario: &str) -> Result<Found, &'static str> {
    let found = prof::init()?;
    let info = prof::with(|c| c.query_info()).map_err(|_| "QUERY_INFO failed")?;
    crate::println!(
        "{} hvprof port={:#x} features={:#x} processors={} sources={:#x} started_limit={}",
        scenario,
        found.port_base,
        found.features,
        info.processor_count,
        info.supported_sources,
        info.started_limit
    );
    Ok(found)
}

/// Sets the ProfileTime interval (`<scenario>.interval`, 100 ns units) and returns it.
pub fn set_interval(scenario_param: &str) -> Result<u32, &'static str> {
    let wanted = crate::start_info::param_u64(scenario_param, u64::from(DEFAULT_INTERVAL)) as u32;
    prof::with(|c| c.set_interval(ProfileSource::TIME, wanted)).map_err(|_| "SET_INTERVAL failed")
}

/// Creates a profile (CREATE, or CREATE_EX with `groups`) and starts it with its buffer's page
/// list. The buffer is zeroed first.
pub fn create_start(p: &ProfileParams, groups: Option<&[guest_agent::GroupAffinity]>) -> Result<u32, &'static str> {
    prof::clear(p.buffer, p.buffer_size);
    let handle = prof::with(|c| match groups {
        None => c.create(&p.to_create()),
        Some(g) => c.create_ex(&p.to_create_ex(), g),
    })
    .map_err(|e| report("CREATE", e))?
    .handle;
    // SAFETY: the buffers of `prof` are static, so they stay resident until stop.
    prof::with(|c| unsafe { c.start_buffer(handle, p.buffer, p.buffer_size) }).map_err(|e| report("START", e))?;
    Ok(handle)
}

fn report(call: &str, e: Error) -> &'static str {
    crate::println!("{} failed: {}", call, e);
    "a profiling call failed"
}

/// Stops a profile; an error fails the scenario.
pub fn stop(handle: u32) -> Result<(), &'static str> {
    prof::with(|c| c.stop(handle)).map_err(|e| report("STOP", e))
}

/// Closes a profile; an error fails the scenario.
pub fn close(handle: u32) -> Result<(), &'static str> {
    prof::with(|c| c.close(handle)).map_err(|e| report("CLOSE", e))
}

/// A global ProfileTime profile of `.user` in 16-byte buckets into buffer `slot`.
pub fn user_profile(slot: usize) -> ProfileParams {
    let (start, end) = prof::user_range();
    let shift = 4;
    ProfileParams::global(start, end - start, shift, prof::buffer(slot), prof::buffer_bytes(end - start, shift))
}

/// Counts of `p`'s buffer inside `r`.
pub fn count(p: &ProfileParams, r: &work::Range) -> u64 {
    prof::sum(p.buffer, p.base, p.bucket_size, r.start, r.end)
}

/// Spawns a worker pinned to `cpu` that runs `work` (a work function's address) per `plan`.
pub fn spawn(work_fn: u64, cpu: usize, plan: u64) -> Result<usize, &'static str> {
    sched::spawn(work::main as *const () as u64, cpu, [work_fn, plan]).ok_or("spawn failed")
}

/// TSC ticks in `ms` milliseconds.
pub fn ms(ms: u64) -> u64 {
    crate::time::ms_to_tsc(ms)
}

/// The CR3 of process `pid` (not from `check`, which already holds the table).
pub fn cr3_of(pid: usize) -> u64 {
    sched::TABLE.lock().procs[pid].as_ref().map_or(0, |p| p.space.cr3)
}

/// The kernel CPU index of vCPU `vcpu` (hvprof numbers vCPUs by APIC id).
pub fn cpu_of_vcpu(vcpu: u32) -> Option<usize> {
    (0..crate::percpu::cpu_count()).find(|&c| crate::percpu::apic_id(c) == vcpu)
}

/// `part / whole` in hundredths of a percent.
pub fn hundredths(part: u64, whole: u64) -> u64 {
    (part * 10_000).checked_div(whole).unwrap_or(0)
}

/// Formats hundredths of a percent as `12.34`.
pub struct Pct(pub u64);

impl core::fmt::Display for Pct {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

/// The first failure a control hook recorded (control hooks cannot fail the run directly).
static FAILURE: SpinLock<Option<&'static str>> = SpinLock::new(None);

/// Records a failure for `verdict`.
pub fn fail_later(reason: &'static str) {
    let mut f = FAILURE.lock();
    if f.is_none() {
        *f = Some(reason);
    }
}

/// `Err` with the first recorded failure.
pub fn verdict() -> Result<(), &'static str> {
    match *FAILURE.lock() {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// "ok" or "BAD".
pub fn ok(good: bool) -> &'static str {
    if good {
        "ok"
    } else {
        "BAD"
    }
}

/// True if `found` offers `feature` (an `abi::cpuid::FEATURE_*` bit).
pub fn has(found: &Found, feature: u32) -> bool {
    found.has(feature)
}

/// The started-object limit and processors, from QUERY_INFO.
pub fn info() -> Result<abi::InfoReply, &'static str> {
    prof::with(|c| c.query_info()).map_err(|e| report("QUERY_INFO", e))
}

/// The verdict of a workload-only scenario: every process `name` spawned exited cleanly.
pub fn all_exited(name: &str, table: &Table) -> Result<(), &'static str> {
    let clean = table.procs.iter().take(table.count).flatten().all(|p| p.state == State::Exited && p.exit_code == 0);
    crate::println!("{} processes={} {}", name, table.count, ok(clean));
    if clean && table.count > 0 {
        Ok(())
    } else {
        Err("a workload process did not exit cleanly")
    }
}
