//! timeline.json as `hvprof report` and `compare` read it beside a profile.json (user input,
//! possibly from a hostile guest's run or edited by hand), against a fixed profile of two
//! vCPUs, one process and thread, and a host profile. Reading must never panic: a file that
//! cannot be read is an error. Whatever reads passes the timeline's check; every output of it
//! (the text timeline, `perf script` text, the Firefox Profiler file, windows of it that
//! pass the profile's own consistency check) is made without panicking or overflowing, and
//! what hvprof writes from it, it reads back the same. It uses the report crate alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::time_axis::{file, fxprof, perf, text, window};
use report::{json, validate, Symbols};

/// The profile every input is the timeline of.
const PROFILE_JSON: &str = r#"{"format":"hvprof-profile","format_version":4,"hvprof_version":"0.1.0","run":{"kernel":"refguest (built in)","cmdline":"scenario=shares","protocol":"PVH","vcpus":2,"memory_mib":256,"start_time":"2026-11-26T09:00:00.000Z","wall_time_s":0.5,"outcome":"guest wrote 0x10 to isa-debug-exit (status 33)","exit_status":0,"interval_100ns":10000},"vcpus":[{"vcpu":0,"samples":0,"attributed":0,"outside":0,"lost":0,"counts":0,"injected":0,"hypercalls":0}],"modules":[],"processes":[{"key":0,"pid":1,"name":"init","path":null,"cr3s":["0x1000"],"first_seen_s":0.0,"last_seen_s":0.5,"kernel":false,"identified":true}],"threads":[{"key":0,"process":0,"tid":1,"name":null}],"objects":[{"id":1,"owner":"host","process":null,"base":"0x0","size":"0x10000","bucket_shift":4,"source":0,"source_name":"ProfileTime","affinity":[0,1],"buckets":4096,"total":1,"counts":[["0x10",1]],"functions":[],"stacks":[{"pcs":["0x100"],"truncated":false,"count":1}]}]}"#;

fuzz_target!(|data: &[u8]| {
    let mut p = json::read(PROFILE_JSON.as_bytes()).expect("the fixed profile reads");
    let Ok(timelines) = file::read(&p, data) else {
        return;
    };
    file::check(&p, &timelines).expect("read timelines pass the check");
    p.timelines = timelines;
    let none = Symbols::default();
    let _ = text::render(&p, &none, text::Bins::Phases, 3);
    let _ = text::render(&p, &none, text::Bins::Seconds(1e-6), 3);
    for tracks in [perf::Tracks::Threads, perf::Tracks::Vcpus] {
        perf::write(&p, &none, tracks, std::io::sink()).expect("perf text to a sink");
    }
    fxprof::write(&p, &none, std::io::sink()).expect("the Firefox file to a sink");
    for (from, to) in [(0, u64::MAX), (0, 1000), (500, 501)] {
        let w = window::restrict(&p, from, to).expect("the profile has a timeline");
        validate::check(&w).expect("a window is a consistent profile");
    }
    for name in window::phases(&p) {
        let (from, to) = window::resolve(&p, &window::Window::Phase(name)).expect("its phase");
        let w = window::restrict(&p, from, to).expect("the profile has a timeline");
        validate::check(&w).expect("a phase's window is a consistent profile");
    }
    let mut buf = Vec::new();
    file::write(&p, &mut buf).expect("writing what was read");
    match file::read(&p, &buf[..]) {
        Ok(back) => assert_eq!(back, p.timelines, "read back differently"),
        Err(e) => panic!("hvprof cannot read the timeline it wrote: {e:?}"),
    }
});
