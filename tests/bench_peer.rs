//! `hvprof bench --peer`: the guest's rate of work unprofiled, under perf kvm's events and
//! under hvprof's two samplers at 10 kHz, one short round. Only what holds on every host is asserted:
//! every row is there, each either measured or saying why not, the kick path (which every
//! host has) measured; a measured mode's guest did work and was sampled, the baseline was
//! not. The figures themselves are docs/performance.md's, from longer runs.

use std::time::Duration;

use crate::harness::hvprof;

#[test]
fn the_peer_bench_reports_every_mode_with_its_samples() {
    let out = hvprof(["bench", "--peer", "--json", "--rounds", "1", "--ms", "300"])
        .limit(Duration::from_secs(120))
        .run();
    out.assert_status(0);
    let r: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(
        (&r["rate_hz"], &r["work_ms"], &r["rounds"]),
        (&10_000.into(), &300.into(), &1.into()),
        "{r}"
    );
    let rows = r["rows"].as_array().unwrap_or_else(|| panic!("{r}"));
    let modes: Vec<&str> = rows
        .iter()
        .map(|row| row["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["unprofiled", "perf-kvm", "kernel", "kick"], "{r}");
    for row in rows {
        let mode = row["mode"].as_str().unwrap();
        if let Some(why) = row["unavailable"].as_str() {
            assert!(
                !why.is_empty() && mode != "unprofiled" && mode != "kick",
                "{mode} not measured: {why}\n{out}"
            );
            eprintln!("{mode} not measured here: {why}");
            continue;
        }
        assert_eq!(row["runs"], 1, "{row}");
        assert!(row["work_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["slowdown"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["cpu_share"].as_f64().unwrap() > 0.0, "{row}");
        let samples = row["samples"].as_f64().unwrap();
        if mode == "unprofiled" {
            assert_eq!(samples, 0.0, "{row}");
            assert_eq!(row["slowdown"], 1.0, "{row}");
        } else {
            assert!(samples > 0.0, "{mode} took no guest sample: {row}\n{out}");
        }
    }
}
