//! `scenario=affinity` (2+ vCPUs): vCPU 0 spins in h0, vCPU 1 in h1. A global profile created
//! with CREATE_EX and GROUP_AFFINITY {group 0, mask 0b10} must count only h1; one created with
//! CREATE and KAFFINITY 0b01 only h0. Parameter: `affinity.ms` (default 1500).

use core::sync::atomic::{AtomicU32, Ordering};

use guest_agent::GroupAffinity;

use super::common;
use super::{Env, Scenario};
use crate::sched::Table;
use crate::start_info::param_u64;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "affinity", setup, check, control: None };

static HANDLES: [AtomicU32; 2] = [const { AtomicU32::new(0) }; 2];

/// Profile 0: vCPU 1 only (CREATE_EX); profile 1: vCPU 0 only (CREATE).
const MASKS: [u64; 2] = [0b10, 0b01];

fn setup(env: &Env) -> Result<(), &'static str> {
    if env.cpus < 2 {
        return Err("needs 2 vCPUs (--cpus 2)");
    }
    common::hvprof("affinity")?;
    common::set_interval("affinity.interval")?;
    let p0 = common::user_profile(0);
    HANDLES[0].store(common::create_start(&p0, Some(&[GroupAffinity::new(0, MASKS[0])]))?, Ordering::Relaxed);
    let p1 = common::user_profile(1).with_affinity(0, MASKS[1]);
    HANDLES[1].store(common::create_start(&p1, None)?, Ordering::Relaxed);
    let plan = work::plan(common::ms(param_u64("affinity.ms", 1500)), 1, false);
    for (vcpu, f) in [(0, work::h0()), (1, work::h1())] {
        let cpu = common::cpu_of_vcpu(vcpu).ok_or("no CPU with that APIC id")?;
        common::spawn(f.start, cpu, plan)?;
        crate::println!("affinity vcpu={} cpu={} runs={}", vcpu, cpu, f.name);
    }
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    let mut good = true;
    for (i, mask) in MASKS.iter().enumerate() {
        common::stop(HANDLES[i].load(Ordering::Relaxed))?;
        let p = common::user_profile(i);
        let h0 = common::count(&p, &work::h0());
        let h1 = common::count(&p, &work::h1());
        let (own, other) = if *mask == 0b10 { (h1, h0) } else { (h0, h1) };
        let ok = own > 0 && other == 0;
        good &= ok;
        crate::println!("affinity mask={:#b} h0={} h1={} {}", mask, h0, h1, common::ok(ok));
        common::close(HANDLES[i].load(Ordering::Relaxed))?;
    }
    if good {
        Ok(())
    } else {
        Err("a profile counted samples from a vCPU outside its affinity (or none of its own)")
    }
}
