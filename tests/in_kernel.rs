//! The in-kernel sampler (`--sampler`): the agent's objects served from the vCPU threads' perf
//! rings with the shares the guest measures itself, the NT semantics of Stop and of the
//! interval with it on, and the one-line fallback to kicks when the host denies perf events
//! (simulated by the debug builds' `HVPROF_SAMPLER_TEST_DENY`, which answers the self-test as a
//! host with that kernel.perf_event_paranoid would: no system file is touched).
//!
//! The tests that need the kernel's sampler skip where `hvprof events` says its self-test
//! fails (a host whose kernel does not attribute guest samples); the fallback test runs
//! everywhere.

use std::path::Path;
use std::time::Duration;

use crate::harness::{hvprof, hvprof_run, TempDir, REFGUEST_PASS};
use crate::profiling::{lines, num};

const LIMIT: Duration = Duration::from_secs(60);

/// Whether `--sampler kernel` works here, by `hvprof events --json`.
fn kernel_sampler_here() -> bool {
    let out = hvprof(["events", "--json"]).run();
    out.assert_status(0);
    let events: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let why = &events["kernel_sampler_unavailable"];
    if !why.is_null() {
        eprintln!("no in-kernel sampling here: {why}; skipping");
    }
    assert_eq!(events["sampler"] == "kernel", why.is_null(), "{events}");
    why.is_null()
}

/// Runs the built-in guest with `--sampler kernel` and `args`, its results into a new
/// directory named after `tag`, and checks that the run and the guest passed.
fn run_kernel_sampler(
    command: &str,
    tag: &str,
    args: &[&str],
) -> (TempDir, crate::harness::Output) {
    let dir = TempDir::new(tag);
    let mut all = vec![command, "--sampler", "kernel"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", dir.path().to_str().unwrap()]);
    let out = hvprof(all).limit(LIMIT).run();
    out.assert_status(0);
    out.assert_stdout_contains("refguest: PASS");
    (dir, out)
}

fn profile_json(dir: &TempDir) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.path().join("profile.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_agent_s_shares_are_served_in_the_kernel() {
    if !kernel_sampler_here() {
        return;
    }
    let (dir, out) = run_kernel_sampler("demo", "in-kernel-shares", &[]);
    // The guest's own judgement of each function's share against its ground truth.
    let shares = lines(&out, "shares fn=");
    assert_eq!(shares.len(), 3, "{out}");
    assert!(shares.iter().all(|l| l.ends_with(" ok")), "{out}");
    let p = profile_json(&dir);
    assert_eq!(p["run"]["sampler"], "kernel", "{}", p["run"]);
    assert_eq!(
        p["run"]["clock"], "cpu",
        "ProfileTime on the thread's CPU time"
    );
    // No sample was a kick: the few kicks are re-arming and the end of the run.
    let stats = lines(&out, "shares stats ")[0];
    let kicks = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("hvprof: exits: "))
        .and_then(|l| l.split(", ").find_map(|e| e.strip_prefix("kick ")))
        .map_or(0, |n| n.parse::<u64>().unwrap());
    assert!(kicks < num(stats, "samples"), "{kicks} kicks\n{out}");
}

/// Runs scenario=stopped under the kernel's sampler on `cpus` vCPUs, a worker on each, and
/// checks that the stopped profile never changes after Stop returned while the other keeps
/// growing.
fn stop_holds_on(cpus: usize) {
    if !kernel_sampler_here() {
        return;
    }
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let cmdline = format!("scenario=stopped stopped.ms=200 stopped.phases=3 stopped.cpus={cpus}");
    let cpus_arg = cpus.to_string();
    let out = hvprof_run(
        elf,
        &[
            "--sampler",
            "kernel",
            "--cpus",
            &cpus_arg,
            "--cmdline",
            &cmdline,
        ],
    )
    .limit(LIMIT)
    .run();
    out.assert_debug_exit(REFGUEST_PASS);
    out.assert_stdout_contains(&format!("stopped workers={cpus}"));
    out.assert_stdout_lacks(" BAD");
    crate::profiling::stopped_phases_hold(&out, 3);
}

#[test]
fn stop_counts_what_came_before_and_nothing_after_with_the_kernel_s_samples() {
    stop_holds_on(1);
}

/// The same with two vCPUs, each with a worker in P1's range: when the first vCPU's worker
/// stops P1, the second's ring holds samples not yet drained. Stop returns only once those
/// are counted, and nothing the second vCPU samples afterwards reaches P1's buffer.
#[test]
fn stop_holds_with_samples_of_another_vcpu_in_flight() {
    stop_holds_on(2);
}

/// `--stack-interval`: the host profile with call stacks takes its samples by kicks at that
/// interval, while a flat profile of the same range beside it takes the kernel's samples at
/// `--interval`, ten times as often; the agent's objects keep the guest's shares.
#[test]
fn stacks_come_by_kicks_at_their_own_rate_beside_the_kernel_s_flat_samples() {
    if !kernel_sampler_here() {
        return;
    }
    let (dir, _) = run_kernel_sampler(
        "profile",
        "in-kernel-stack-interval",
        &["--interval", "1000", "--stack-interval", "10000", "--quiet"],
    );
    let p = profile_json(&dir);
    let host: Vec<&serde_json::Value> = p["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["owner"] == "host")
        .collect();
    assert_eq!(
        host.len(),
        2,
        "the profile and its flat companion\n{:#}",
        p["objects"]
    );
    let (stacks, flat) = (host[0], host[1]);
    let by = |o: &serde_json::Value, path: &str| o["sampled_by"][path].as_u64().unwrap();
    let total = |o: &serde_json::Value| o["total"].as_u64().unwrap();
    // The profile that walks stacks never counts a ring record: all its samples are kicks.
    assert_eq!(by(stacks, "kernel"), 0, "{stacks}");
    assert!(by(stacks, "kick") > 0 && !stacks["stacks"].as_array().unwrap().is_empty());
    // The flat one is the kernel's, with no stacks, and samples more often.
    assert!(by(flat, "kernel") > 0, "{flat}");
    assert!(flat.get("stacks").is_none(), "{flat}");
    assert!(
        total(flat) > total(stacks),
        "{} flat samples at --interval, {} at --stack-interval",
        total(flat),
        total(stacks)
    );
    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(report.contains("by the host kernel's sampler"), "{report}");
}

#[test]
fn set_and_query_interval_hold_with_the_kernel_s_samples() {
    if !kernel_sampler_here() {
        return;
    }
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(
        elf,
        &["--sampler", "kernel", "--cmdline", "scenario=interval"],
    )
    .limit(LIMIT)
    .run();
    out.assert_debug_exit(REFGUEST_PASS);
    for (check, value) in [
        ("time_default", 39_063),
        ("time_query_in_range", 10_000),
        ("time_query_below_min", 1000),
        ("time_query_above_max", 10_000_000),
    ] {
        let l = lines(&out, &format!("interval {check} "));
        assert_eq!(l.len(), 1, "{out}");
        assert_eq!(
            (num(l[0], "status"), num(l[0], "value")),
            (0, value),
            "{}",
            l[0]
        );
    }
}

#[test]
fn a_host_that_denies_perf_events_falls_back_to_kicks_saying_why_in_one_line() {
    let dir = TempDir::new("in-kernel-denied");
    let out = hvprof(["demo", "--out", dir.path().to_str().unwrap()])
        .env("HVPROF_SAMPLER_TEST_DENY", "2")
        .limit(LIMIT)
        .run();
    out.assert_status(0);
    out.assert_stdout_contains("refguest: PASS");
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("in-kernel sampling"))
        .collect();
    assert_eq!(said.len(), 1, "{out}");
    for part in [
        "unavailable",
        "perf_event_paranoid=2",
        "CAP_PERFMON",
        "sampling with kicks",
    ] {
        assert!(said[0].contains(part), "{part}: {}", said[0]);
    }
    // profile.json says kick by leaving the field out, as every older file does.
    assert!(profile_json(&dir)["run"].get("sampler").is_none());
    // Asked for by name, the kernel's sampler is an error the user can act on.
    let out = hvprof(["demo", "--sampler", "kernel"])
        .env("HVPROF_SAMPLER_TEST_DENY", "2")
        .limit(LIMIT)
        .run();
    out.assert_status(2);
    out.assert_stderr_contains("--sampler kernel cannot run here");
}
