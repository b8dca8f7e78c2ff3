//! `hvprof bench` end to end, one short round: every kind of kick is timed on the sample path
//! it names. The figures are docs/performance.md's, from full runs; what is asserted holds on
//! every host: each stack-kind sample walked the guest's 16 frames (frame pointers in one VM,
//! x64 unwind data in the other), and those walks were timed inside the sample and repeated
//! alone. A bench whose samples walked nothing (a sampler that never took the kick's path)
//! fails here instead of printing ratios of nothing.

use std::time::Duration;

use crate::harness::hvprof;

#[test]
fn every_kick_kind_is_timed_and_its_stacks_walked() {
    let out = hvprof(["bench", "--json", "--rounds", "1", "--kicks", "30"])
        .limit(Duration::from_secs(180))
        .run();
    out.assert_status(0);
    let r: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let num = |k: &str| {
        r[k].as_f64()
            .unwrap_or_else(|| panic!("{k} is not a number: {r}"))
    };
    assert!(num("kicks") >= 1.0, "{r}");
    for k in [
        "kick_bare_ns",
        "kick_full_ns",
        "kick_stack_ns",
        "kick_unwind_ns",
    ] {
        assert!(num(k) > 0.0, "{k}: {r}");
    }
    // The guest spins 16 frames deep in both VMs; every walk finds all of them.
    assert_eq!(num("stack_frames"), 16.0, "{r}");
    assert_eq!(num("unwind_frames"), 16.0, "{r}");
    for k in [
        "ns_per_frame",
        "alone_ns_per_frame",
        "walk_ratio",
        "ns_per_unwind_frame",
        "alone_ns_per_unwind_frame",
        "unwind_walk_ratio",
    ] {
        let v = num(k);
        assert!(v.is_finite() && v > 0.0, "{k} = {v}: {r}");
    }
}
