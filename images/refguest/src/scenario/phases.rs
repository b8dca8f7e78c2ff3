//! `scenario=phases`: known phases on a time axis (issue 32). One process on the BSP runs
//! `f1`, then a second runs `f2`, then a third `f4`, each for `phases.ms` (default 300) of
//! TSC time; between them the CPU is idle, halted, for `phases.halt_ms` (default 100: the next
//! process is held back until then); after `f4`, a burst of `phases.burst` (default 16)
//! QUERY_INTERVAL hypercalls. One QUERY_INTERVAL before `f1` and the burst after `f4` are
//! anchors a test can match with hvprof's hypercall markers to convert this guest's TSC to the
//! host's time. The guest prints its own TSC record of every boundary (a phase's start and end
//! are read at CPL3 by the process itself, just before its first call and after its last):
//!
//! ```text
//! phases anchor=<tsc> tsc_hz=<hz>
//! phases phase=f1 start=<tsc> end=<tsc>      (f2, f4 likewise)
//! phases burst n=<n> first=<tsc> last=<tsc>  (the TSC before the first and the last call)
//! ```

use core::sync::atomic::{AtomicU64, Ordering};

use guest_agent::ProfileSource;

use super::common;
use super::{Env, Scenario};
use crate::cpu;
use crate::prof;
use crate::sched::{self, Table};
use crate::start_info::param_u64;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "phases", setup, check, control: None };

const PHASES: usize = 3;
const NAMES: [&str; PHASES] = ["f1", "f2", "f4"];

static ANCHOR: AtomicU64 = AtomicU64::new(0);
static BURST: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static BURST_N: AtomicU64 = AtomicU64::new(0);
/// The phase length and the halt, in TSC ticks.
static PHASE_TSC: AtomicU64 = AtomicU64::new(0);
static HALT_TSC: AtomicU64 = AtomicU64::new(0);
static CPU: AtomicU64 = AtomicU64::new(0);

fn work_fn(phase: usize) -> u64 {
    match phase {
        0 => work::f1().start,
        1 => work::f2().start,
        _ => work::f4().start,
    }
}

fn phase_main() -> u64 {
    crate::user::phases::main as *const () as u64
}

fn query() -> bool {
    prof::with(|c| c.query_interval(ProfileSource::TIME)).is_ok()
}

fn setup(env: &Env) -> Result<(), &'static str> {
    common::hvprof("phases")?;
    PHASE_TSC.store(common::ms(param_u64("phases.ms", 300)), Ordering::Relaxed);
    HALT_TSC.store(common::ms(param_u64("phases.halt_ms", 100)), Ordering::Relaxed);
    BURST_N.store(param_u64("phases.burst", 16).clamp(1, 1000), Ordering::Relaxed);
    CPU.store(env.bsp as u64, Ordering::Relaxed);
    sched::set_hooks(sched::Hooks { switched, ended });
    ANCHOR.store(cpu::rdtsc(), Ordering::Relaxed);
    if !query() {
        return Err("the anchor hypercall failed");
    }
    let args = [work_fn(0), PHASE_TSC.load(Ordering::Relaxed)];
    sched::spawn(phase_main(), env.bsp, args).ok_or("spawn failed")?;
    Ok(())
}

fn switched(_: usize, _: Option<usize>) {}

/// A phase's process ended: the next phase, held back for the halt, or after the last, the
/// hypercall burst.
fn ended(table: &mut Table, cpu: usize, pid: usize) {
    let now = cpu::rdtsc();
    let next = pid + 1;
    if next < PHASES {
        let args = [work_fn(next), PHASE_TSC.load(Ordering::Relaxed)];
        match sched::respawn(table, pid, phase_main(), cpu, args) {
            Some(p) => {
                if let Some(proc) = table.procs[p].as_mut() {
                    proc.not_before = now + HALT_TSC.load(Ordering::Relaxed);
                }
            }
            None => common::fail_later("the next phase could not be spawned"),
        }
    } else if next == PHASES {
        let n = BURST_N.load(Ordering::Relaxed);
        for i in 0..n {
            let t = cpu::rdtsc();
            if i == 0 {
                BURST[0].store(t, Ordering::Relaxed);
            }
            BURST[1].store(t, Ordering::Relaxed);
            if !query() {
                common::fail_later("a burst hypercall failed");
            }
        }
    }
}

fn check(table: &Table) -> Result<(), &'static str> {
    crate::println!(
        "phases anchor={} tsc_hz={} cpu={}",
        ANCHOR.load(Ordering::Relaxed),
        crate::time::tsc_hz(),
        CPU.load(Ordering::Relaxed)
    );
    let mut ordered = true;
    let mut last = ANCHOR.load(Ordering::Relaxed);
    for (i, name) in NAMES.iter().enumerate() {
        let reports = table.procs.get(i).and_then(|p| p.as_ref()).map(|p| p.reports);
        let (s, e) = reports.map_or((0, 0), |r| (r[0].unwrap_or(0), r[1].unwrap_or(0)));
        crate::println!("phases phase={} start={} end={}", name, s, e);
        ordered &= last < s && s < e;
        last = e;
    }
    let (first, final_) = (BURST[0].load(Ordering::Relaxed), BURST[1].load(Ordering::Relaxed));
    crate::println!("phases burst n={} first={} last={}", BURST_N.load(Ordering::Relaxed), first, final_);
    ordered &= last < first && first <= final_;
    crate::println!("phases order {}", common::ok(ordered));
    common::verdict()?;
    if !ordered {
        return Err("the phases' TSC record is out of order");
    }
    common::all_exited("phases", table)
}
