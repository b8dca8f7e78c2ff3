//! System-call filters: every guest-booting test runs with them on (the default), so a call a
//! thread needs and its filter lacks fails that test at once. Here: a call no filter allows,
//! made on purpose by each kind of thread right after its filter is installed (the debug-build
//! trigger `HVPROF_SECCOMP_TEST_TRIGGER`), ends the run with status 14 and a message naming the
//! call and the thread; with `--seccomp off` the same run is not filtered and passes.

use crate::harness::{hvprof, TempDir};

/// The exit status of a refused system call (docs/architecture.md).
const STATUS_SECCOMP: i32 = 14;

/// `hvprof profile` of the built-in reference guest (a session: vCPUs, the event loop and
/// its progress controller) with the trigger set to `trigger`.
fn profile(dir: &TempDir, trigger: &str, extra: &[&str]) -> crate::harness::Output {
    let out = dir.join(trigger);
    let mut args = vec!["profile", "--quiet", "--out", out.to_str().unwrap()];
    args.extend(extra);
    hvprof(args)
        .env("HVPROF_SECCOMP_TEST_TRIGGER", trigger)
        .run()
}

#[test]
fn a_refused_call_on_each_kind_of_thread_ends_the_run_naming_it() {
    let dir = TempDir::new("seccomp");
    for kind in ["vcpu", "event-loop", "controller", "results"] {
        let out = profile(&dir, kind, &[]);
        out.assert_status(STATUS_SECCOMP);
        out.assert_stderr_contains(&format!(
            "hvprof: seccomp: the {kind} thread made a system call its filter does not allow: socket (41)"
        ));
    }
}

#[test]
fn seccomp_off_installs_no_filter() {
    let dir = TempDir::new("seccomp-off");
    profile(&dir, "vcpu", &["--seccomp", "off"]).assert_status(0);
}

/// `report`, `compare` and `merge` read saved profiles (data a guest wrote) under the results'
/// filter from their start: a refused call ends them with status 14, `--seccomp off` not.
#[test]
fn report_compare_and_merge_run_under_the_results_filter() {
    let dir = TempDir::new("seccomp-tools");
    profile(&dir, "none", &[]).assert_status(0);
    let saved = dir.join("none").join("profile.json");
    let saved = saved.to_str().unwrap();
    let merged = dir.join("merged.json");
    let merged = merged.to_str().unwrap();
    let commands: [Vec<&str>; 3] = [
        vec!["report", saved],
        vec!["compare", saved, saved],
        vec!["merge", "--out", merged, saved],
    ];
    for args in commands {
        let out = hvprof(args.iter().copied())
            .env("HVPROF_SECCOMP_TEST_TRIGGER", "results")
            .run();
        out.assert_status(STATUS_SECCOMP);
        out.assert_stderr_contains(
            "the results thread made a system call its filter does not allow",
        );
        let mut off = args.clone();
        off.extend(["--seccomp", "off"]);
        hvprof(off)
            .env("HVPROF_SECCOMP_TEST_TRIGGER", "results")
            .run()
            .assert_status(0);
    }
}
