//! `scenario=process`: per-process profiles keyed by CR3. Three processes run the same `.user`
//! code at the same addresses: A spins in g1 on CPU 0; B spins in g2 and A2 in g1 on CPU 1
//! (interleaved by the scheduler; everything on CPU 0 with one CPU). Profiles of the whole
//! `.user` range keyed by A's, A2's and B's CR3 must count only their own process's function:
//! A and A2 only g1 (never g2, although B runs g2 at the same time on another vCPU and on the
//! same vCPU), B only g2. Parameter: `process.ms` (default 1500).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::common;
use super::{Env, Scenario};
use crate::sched::Table;
use crate::start_info::param_u64;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "process", setup, check, control: None };

/// (name, work function index: 1 = g1, 2 = g2, cpu choice: 0 = CPU 0, 1 = the second CPU).
const PROCS: [(&str, u8, usize); 3] = [("A", 1, 0), ("B", 2, 1), ("A2", 1, 1)];

static HANDLES: [AtomicU32; 3] = [const { AtomicU32::new(0) }; 3];
static CR3S: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

fn setup(env: &Env) -> Result<(), &'static str> {
    common::hvprof("process")?;
    common::set_interval("process.interval")?;
    let plan = work::plan(common::ms(param_u64("process.ms", 1500)), 1, false);
    for (i, (name, f, cpu_choice)) in PROCS.iter().enumerate() {
        let work_fn = if *f == 1 { work::g1().start } else { work::g2().start };
        let cpu = cpu_choice % env.cpus;
        let pid = common::spawn(work_fn, cpu, plan)?;
        let cr3 = common::cr3_of(pid);
        CR3S[i].store(cr3, Ordering::Relaxed);
        let p = common::user_profile(i).per_process(cr3);
        HANDLES[i].store(common::create_start(&p, None)?, Ordering::Relaxed);
        crate::println!("process proc={} pid={} cpu={} cr3={:#x} runs=g{}", name, pid, cpu, cr3, f);
    }
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    let mut good = true;
    for (i, (name, f, _)) in PROCS.iter().enumerate() {
        common::stop(HANDLES[i].load(Ordering::Relaxed))?;
        let p = common::user_profile(i).per_process(CR3S[i].load(Ordering::Relaxed));
        let g1 = common::count(&p, &work::g1());
        let g2 = common::count(&p, &work::g2());
        let (own, other) = if *f == 1 { (g1, g2) } else { (g2, g1) };
        let ok = own > 0 && other == 0;
        good &= ok;
        crate::println!(
            "process profile cr3={:#x} of={} g1={} g2={} {}",
            p.process_cr3.unwrap_or(0),
            name,
            g1,
            g2,
            common::ok(ok)
        );
        common::close(HANDLES[i].load(Ordering::Relaxed))?;
    }
    if good {
        Ok(())
    } else {
        Err("a per-process profile counted another process's samples (or none of its own)")
    }
}
