use profile_core::{abi, NtStatus};

use super::*;

fn recording(vcpus: usize) -> Timelines {
    let t = Timelines::new(vcpus);
    t.profile_started();
    t
}

#[test]
fn samples_of_every_vcpu_come_out_sorted_with_their_stacks_merged() {
    let t = recording(2);
    t.sample(1, 1, 30, 3, Some(4), &[0x10, 0x20]);
    t.sample(0, 1, 10, 0, None, &[0x10, 0x20]);
    t.sample(0, 1, 40, 3, None, &[0x30]);
    t.sample(1, 1, 20, 3, None, &[0x30]);
    t.sample(0, 2, 15, 3, None, &[0x99]);
    let out = t.finish(&[1, 2]);
    assert_eq!(out.len(), 2);
    let one = &out[0];
    assert_eq!(one.object, 1);
    let times: Vec<u64> = one.samples.iter().map(|s| s.t_ns).collect();
    assert_eq!(times, [10, 20, 30, 40]);
    let vcpus: Vec<u32> = one.samples.iter().map(|s| s.vcpu).collect();
    assert_eq!(vcpus, [0, 1, 1, 0]);
    // Two distinct stacks, each once, whichever vCPU interned them.
    assert_eq!(one.stacks.len(), 2);
    let stack = |i: usize| one.stacks[one.samples[i].stack as usize].clone();
    assert_eq!(stack(0), [0x10, 0x20]);
    assert_eq!(stack(2), [0x10, 0x20]);
    assert_eq!(stack(1), [0x30]);
    assert_eq!(one.samples[2].thread, Some(4));
    assert_eq!(one.samples[0].thread, None);
    assert_eq!(one.samples[0].cpl, 0);
    // Profile 2 has its own sample and stack only.
    assert_eq!(out[1].samples.len(), 1);
    assert_eq!(out[1].stacks, [vec![0x99]]);
    assert!(out.iter().all(|t| t.start_unix_ns > 0));
}

#[test]
fn markers_need_a_recording_timeline_and_the_run_is_a_phase() {
    let t = Timelines::new(1);
    t.marker(Some(0), MarkerKind::Halt, 1, 2, "hlt".into());
    t.object_started(7);
    t.profile_started();
    t.marker(Some(0), MarkerKind::Exit, 5, 3, "port 0x3f8 write".into());
    t.object_started(8);
    t.marker(None, MarkerKind::Pause, 4, 9, "pause".into());
    let out = t.finish(&[1]);
    let m = &out[0].markers;
    let kinds: Vec<MarkerKind> = m.iter().map(|m| m.kind).collect();
    // Sorted by start: the run's phase at 0, the pause, the exit, object 8 still open.
    assert_eq!(
        kinds,
        [
            MarkerKind::Phase,
            MarkerKind::Pause,
            MarkerKind::Exit,
            MarkerKind::Object
        ]
    );
    assert_eq!(m[0].name, "run");
    assert_eq!(m[0].vcpu, None);
    // An end before its start is clamped to an instant.
    assert_eq!((m[2].start_ns, m[2].end_ns, m[2].vcpu), (5, 5, Some(0)));
    assert_eq!(m[3].name, "object 8");
    assert!(m[3].end_ns >= m[3].start_ns);
    assert!(m.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
}

#[test]
fn the_sample_cap_counts_what_it_drops() {
    let t = recording(1);
    t.samples.store(MAX_SAMPLES - 1, Ordering::Relaxed);
    t.sample(0, 1, 1, 3, None, &[1]);
    t.sample(0, 1, 2, 3, None, &[1]);
    t.sample(0, 1, 3, 3, None, &[1]);
    let out = t.finish(&[1]);
    assert_eq!(out[0].samples.len(), 1);
    assert_eq!(out[0].dropped_samples, 2);
}

#[test]
fn the_marker_cap_counts_what_it_drops() {
    let t = recording(1);
    t.markers.store(MAX_MARKERS - 1, Ordering::Relaxed);
    t.marker(Some(0), MarkerKind::Halt, 1, 2, "a".into());
    t.marker(Some(0), MarkerKind::Halt, 3, 4, "b".into());
    let out = t.finish(&[1]);
    // "a" fits, "b" does not; the run's phase is kept past the cap (windows and bins use it).
    let names: Vec<&str> = out[0].markers.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["run", "a"]);
    assert_eq!(out[0].dropped_markers, 1);
}

/// A timeline recorded from the run's start gets the run's phases as the samples showed
/// them; one that was not (started through the API) gets the whole run only.
#[test]
fn phases_are_the_runs_only_from_its_start() {
    let paging = introspect::paging::Paging {
        cr0: 0x8000_0011,
        cr4: 0x20,
        efer: 0x500,
        ..Default::default()
    };
    let phases = |from_start: bool| {
        let t = recording(1);
        if from_start {
            t.phases_from_start();
        }
        t.observe(5, 0, 0x10_0000, &paging);
        t.observe(7, 3, 0x4000_0000, &paging);
        let out = t.finish(&[1]);
        out[0]
            .markers
            .iter()
            .filter(|m| m.kind == MarkerKind::Phase)
            .map(|m| (m.name.clone(), m.start_ns))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        phases(true),
        [("kernel".into(), 0), ("run".into(), 0), ("user".into(), 7)]
    );
    assert_eq!(phases(false), [("run".to_string(), 0)]);
}

#[test]
fn a_full_stack_table_keeps_the_pc_alone() {
    let mut log = VcpuLog::default();
    let big: Vec<u64> = (0..MAX_STACK_FRAMES as u64).collect();
    log.sample(1, 1, 3, None, &big);
    log.sample(1, 2, 3, None, &[5, 6]);
    log.sample(1, 3, 3, None, &big);
    assert_eq!(log.samples.len(), 2);
    assert_eq!(log.dropped(1), 1, "not even the PC fits");
    assert_eq!(log.stack(log.samples[1].stack).len(), MAX_STACK_FRAMES);
    let mut log = VcpuLog::default();
    log.sample(1, 1, 3, None, &big[..MAX_STACK_FRAMES - 1]);
    log.sample(1, 2, 3, None, &[7, 8]);
    assert_eq!(log.stack(log.samples[1].stack), [7]);
}

#[test]
fn hypercall_markers_use_the_abi_names() {
    assert_eq!(
        hypercall_marker(Some(abi::CALL_QUERY_INTERVAL), NtStatus::SUCCESS),
        "QUERY_INTERVAL -> STATUS_SUCCESS"
    );
    assert_eq!(
        hypercall_marker(Some(99), NtStatus(0xC000_9999)),
        "call 0x63 -> 0xc0009999"
    );
    assert_eq!(
        hypercall_marker(None, NtStatus::ACCESS_DENIED),
        "? -> STATUS_ACCESS_DENIED"
    );
    assert_eq!(ExitSite::Port(0x3f8, true).name(), "port 0x3f8 write");
    assert_eq!(
        ExitSite::Mmio(0xfee0_0000, false).name(),
        "mmio 0xfee00000 read"
    );
}

#[test]
fn stopping_more_than_started_never_wraps() {
    let t = Timelines::new(1);
    t.profile_stopped();
    assert!(!t.recording());
    t.profile_started();
    assert!(t.recording());
    t.profile_stopped();
    assert!(!t.recording());
}
