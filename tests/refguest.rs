//! The reference guest (images/refguest) under hvprof: `hvprof demo` and `hvprof run` on its
//! ELF, with 1 and 2 vCPUs; every vCPU listed in the MADT must come online, two processes with
//! distinct CR3s must run their CPL3 workloads, and the guest's verdict must reach the exit
//! status.

use std::path::Path;

use crate::harness::{hvprof, hvprof_run, Output, REFGUEST_PASS};

fn smoke(cpus: u32) -> Output {
    hvprof([
        "demo",
        "--cpus",
        &cpus.to_string(),
        "--cmdline",
        "scenario=smoke",
    ])
    .run()
}

/// Checks a passing smoke run with `cpus` vCPUs.
fn assert_smoke_passed(out: &Output, cpus: u32) {
    for cpu in 0..cpus {
        out.assert_stdout_contains(&format!("refguest: cpu {cpu} online apic={cpu}"));
    }
    out.assert_stdout_contains(&format!("refguest: smp {cpus}/{cpus} cpus online"));
    out.assert_stdout_contains("refguest: PASS");
    out.assert_stdout_lacks("BAD");
    let cr3s: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("refguest: smoke pid="))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("cr3=")))
        .collect();
    assert_eq!(cr3s.len(), 2, "two processes report\n{out}");
    assert_ne!(
        cr3s[0], cr3s[1],
        "the processes have separate address spaces\n{out}"
    );
    out.assert_stderr_contains(&format!("{cpus} vCPU"));
}

#[test]
fn smoke_with_one_vcpu_passes_and_exits_zero() {
    let out = smoke(1);
    out.assert_status(0);
    assert_smoke_passed(&out, 1);
}

#[test]
fn smoke_with_two_vcpus_brings_each_vcpu_online() {
    let out = smoke(2);
    out.assert_status(0);
    assert_smoke_passed(&out, 2);
}

#[test]
fn refguest_elf_under_run_returns_the_debug_exit_status() {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(elf, &["--cpus", "2", "--cmdline", "scenario=smoke"]).run();
    out.assert_debug_exit(REFGUEST_PASS);
    assert_smoke_passed(&out, 2);
}

#[test]
fn unknown_scenario_fails_the_demo() {
    let out = hvprof(["demo", "--cmdline", "scenario=no-such-scenario"]).run();
    out.assert_status(1);
    out.assert_stdout_contains("refguest: FAIL");
}

#[test]
fn demo_default_profiles_the_workload_and_shows_its_shares() {
    let out = hvprof(["demo"]).run();
    out.assert_status(0);
    out.assert_stdout_contains("refguest: PASS");
    // hvprof's own report: the object's per-function table, from the VMM's copy of the counts.
    out.assert_stdout_contains("profile object 1 (guest agent):");
    out.assert_stdout_contains("Hottest buckets");
    for f in ["shares_f1", "shares_f2", "shares_f4"] {
        out.assert_stdout_contains(&format!("refguest!{f}"));
    }
    for f in ["f1", "f2", "f4"] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("refguest: shares fn={f} ")))
            .unwrap_or_else(|| panic!("no share line for {f}\n{out}"));
        assert!(line.ends_with(" ok"), "{line}");
    }
    out.assert_stderr_contains("samples (");
}
