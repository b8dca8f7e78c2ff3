//! `scenario=smoke`: every CPU online; `smoke.procs` (default 2) processes,
//! each in its own address space, pinned round-robin to the CPUs, run the same
//! user code at the same virtual address, compute a sum of squares at CPL3 and
//! report it with system calls. Parameters: `smoke.iters` (default 20000000).

use super::{Env, Scenario};
use crate::sched::{self, State, Table, MAX_PROCS};
use crate::start_info::param_u64;
use crate::user::smoke::{self as prog, KEY_MARKER, KEY_PID, KEY_SUM, MARKER_BASE};

pub const SCENARIO: Scenario = Scenario { name: "smoke", setup, check, control: None };

const DEFAULT_ITERS: u64 = 20_000_000;

fn iterations(pid: usize) -> u64 {
    param_u64("smoke.iters", DEFAULT_ITERS) + pid as u64
}

fn expected_sum(n: u64) -> u64 {
    let n = u128::from(n);
    (n * (n + 1) * (2 * n + 1) / 6) as u64
}

fn setup(env: &Env) -> Result<(), &'static str> {
    let procs = (param_u64("smoke.procs", 2) as usize).clamp(2, MAX_PROCS);
    let entry = prog::main as *const () as u64;
    for pid in 0..procs {
        let cpu = pid % env.cpus;
        let spawned = sched::spawn(entry, cpu, [pid as u64, iterations(pid)]);
        if spawned != Some(pid) {
            return Err("spawn failed");
        }
    }
    Ok(())
}

fn check(table: &Table) -> Result<(), &'static str> {
    let mut ok = true;
    for (pid, proc) in table.procs.iter().enumerate().take(table.count) {
        let Some(proc) = proc else { return Err("missing process") };
        let sum_ok = proc.reports[KEY_SUM as usize] == Some(expected_sum(iterations(pid)));
        let marker_ok = proc.reports[KEY_MARKER as usize] == Some(MARKER_BASE + pid as u64);
        let pid_ok = proc.reports[KEY_PID as usize] == Some(pid as u64);
        let exit_ok = proc.state == State::Exited && proc.exit_code == 0;
        let unique_cr3 = table.procs.iter().flatten().filter(|p| p.space.cr3 == proc.space.cr3).count() == 1;
        let good = sum_ok && marker_ok && pid_ok && exit_ok && unique_cr3;
        crate::println!(
            "smoke pid={} cpu={} cr3={:#x} runs={} sum={} {}",
            pid,
            proc.cpu,
            proc.space.cr3,
            proc.runs,
            proc.reports[KEY_SUM as usize].unwrap_or(0),
            if good { "ok" } else { "BAD" }
        );
        if let Some(f) = proc.fault {
            crate::println!("smoke pid={} fault vector={} error={:#x} rip={:#x} cr2={:#x}", pid, f.vector, f.error, f.rip, f.cr2);
        }
        ok &= good;
    }
    let (native, via_fault) = crate::syscall::counts();
    crate::println!("smoke syscalls native={} via_fault={}", native, via_fault);
    if ok {
        Ok(())
    } else {
        Err("a process reported wrong results")
    }
}
