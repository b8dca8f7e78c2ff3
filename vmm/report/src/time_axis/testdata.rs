//! A hand-built run with a timeline for the timeline's tests: 3 vCPUs sampled every 100 ms
//! for 3 s (vCPU n at n * 10 ms past each tenth), two guest processes with three threads,
//! call stacks, and a marker of every kind.
//!
//! Symbols: [`crate::profile::tests::call_site_symbols`] (`m`: `caller` 0x1040, `next`
//! 0x1050, `hot` 0x1070). Stacks: 0 `caller -> hot`, 1 `caller`, 2 `next`, 3 `0x5000`
//! (outside every module). Phases: `firmware` 0..1 s (stack 1, CPL 0, no thread), `kernel`
//! 1..2 s (stack 0, CPL 3, awk's threads: tid 57 on vCPUs 0 and 1, `worker` tid 58 on vCPU
//! 2), `user` 2..3 s (stack 2 in init, CPL 3, every fifth sample stack 3 at CPL 0).

use crate::hex::{Hex, OptHex};
use crate::profile::tests::sample_profile;
use crate::profile::{ObjectOwner, ProcessInfo, Profile, ProfileObject, ThreadInfo};
use crate::timeline::{Marker, MarkerKind, Timeline, TimelineSample};

/// Milliseconds as nanoseconds.
pub(crate) const MS: u64 = 1_000_000;

/// The host object's id.
pub(crate) const OBJECT: u64 = 2;

fn marker(kind: MarkerKind, vcpu: Option<u32>, start_ms: u64, end_ms: u64, name: &str) -> Marker {
    Marker {
        kind,
        vcpu,
        start_ns: start_ms * MS,
        end_ns: end_ms * MS,
        name: name.to_string(),
    }
}

/// The timeline alone.
pub(crate) fn timeline() -> Timeline {
    let mut samples = Vec::new();
    for tenth in 0..30u64 {
        for vcpu in 0..3u32 {
            let t_ns = tenth * 100 * MS + u64::from(vcpu) * 10 * MS;
            let (cpl, thread, stack) = match tenth {
                0..=9 => (0, None, 1),
                10..=19 => (3, Some(if vcpu == 2 { 2 } else { 1 }), 0),
                _ if tenth % 5 == 0 => (0, Some(0), 3),
                _ => (3, Some(0), 2),
            };
            samples.push(TimelineSample {
                t_ns,
                vcpu,
                cpl,
                thread,
                stack,
            });
        }
    }
    Timeline {
        object: OBJECT,
        start_unix_ns: 1_700_000_000_123_000_000,
        samples,
        stacks: vec![
            vec![0x1075, 0x1050],
            vec![0x1045],
            vec![0x1055],
            vec![0x5000],
        ],
        markers: vec![
            marker(MarkerKind::Phase, None, 0, 1000, "firmware"),
            marker(
                MarkerKind::Hypercall,
                Some(0),
                200,
                200,
                "QUERY_INTERVAL -> STATUS_SUCCESS",
            ),
            marker(MarkerKind::Halt, Some(1), 500, 700, "hlt"),
            marker(MarkerKind::Phase, None, 1000, 2000, "kernel"),
            marker(MarkerKind::Object, None, 1200, 2400, "object 1"),
            marker(MarkerKind::Pause, None, 1500, 1600, "paused"),
            marker(MarkerKind::Phase, None, 2000, 3000, "user"),
            marker(MarkerKind::Exit, Some(2), 2100, 2101, "port 0x3f8"),
        ],
        dropped_samples: 4,
        dropped_markers: 0,
    }
}

/// A profile of 3 vCPUs whose host object [`OBJECT`] (0x1000..0x11000, 16-byte buckets,
/// with stacks) is the timeline's samples counted, with the guest's processes and threads.
pub(crate) fn profile() -> Profile {
    let mut p = sample_profile(0x1000);
    p.run.vcpus = 3;
    p.run.wall_time_s = 3.0;
    p.processes = vec![process(0, 1, "init"), process(1, 57, "awk")];
    p.threads = vec![
        thread(0, 0, 1, None),
        thread(1, 1, 57, None),
        thread(2, 1, 58, Some("worker")),
    ];
    let template = ProfileObject {
        id: OBJECT,
        owner: ObjectOwner::Host,
        process: OptHex(None),
        base: Hex(0x1000),
        size: Hex(0x10000),
        bucket_shift: 4,
        buckets: 0x1000,
        affinity: vec![0, 1, 2],
        ..p.objects[0].clone()
    };
    let t = timeline();
    let host = super::window::rebuild(&template, &t, 0, u64::MAX, true);
    p.objects.push(host);
    p.timelines = vec![t];
    p
}

/// [`crate::profile::tests::call_site_symbols`], and a file `sh` (`main` at 0x5000) that only
/// `p`'s init maps.
pub(crate) fn init_maps_sh(p: &Profile) -> crate::symbols::Symbols {
    let init = p.processes.iter().find(|r| r.name == "init").unwrap().key;
    let mut symbols = crate::profile::tests::call_site_symbols();
    symbols.push_in(
        vec![init],
        crate::symbols::tests::module("sh", 0x5000, &[(0, 0x100, "main")]),
    );
    symbols
}

fn process(key: u32, pid: u64, name: &str) -> ProcessInfo {
    ProcessInfo {
        key,
        pid: Some(pid),
        name: name.to_string(),
        path: None,
        cr3s: vec![Hex(0x10_0000 * (u64::from(key) + 1))],
        first_seen_s: 0.0,
        last_seen_s: 3.0,
        kernel: false,
        identified: true,
        mappings: Vec::new(),
    }
}

fn thread(key: u32, process: u32, tid: u64, name: Option<&str>) -> ThreadInfo {
    ThreadInfo {
        key,
        process,
        tid: Some(tid),
        name: name.map(str::to_string),
    }
}
