//! NtStartProfile, NtStopProfile, close and close-all: statuses, pinning and the start limit.

use super::*;

#[test]
fn start_with_unknown_or_foreign_handle_is_invalid_handle() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    for bad in [Handle(0), Handle(3), Handle(h.0 + 4), Handle(h.0 + 1)] {
        assert_eq!(start(&mut m, bad, 0), Err(NtStatus::INVALID_HANDLE));
    }
    assert_eq!(
        m.start(Owner(2), h, |_| Ok(0)),
        Err(NtStatus::INVALID_HANDLE)
    );
    assert_eq!(m.stop(Owner(2), h), Err(NtStatus::INVALID_HANDLE));
    assert_eq!(m.close(Owner(2), h), Err(NtStatus::INVALID_HANDLE));
}

#[test]
fn start_and_stop_without_profile_control_are_access_denied() {
    let mut m = manager(1);
    let h = create(
        &mut m,
        &CreateParams {
            access: AccessMask(0x0002_0000),
            ..params()
        },
    )
    .unwrap();
    assert_eq!(start(&mut m, h, 0), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(m.close(OWNER, h), Ok(None), "close needs no access right");
}

#[test]
fn start_hands_back_the_whole_buffer_to_pin() {
    let mut m = manager(1);
    let p = CreateParams {
        buffer_size: 64 * 1024,
        ..params()
    };
    let h = create(&mut m, &p).unwrap();
    let mut asked = None;
    m.start(OWNER, h, |req| {
        asked = Some(*req);
        Ok(9)
    })
    .unwrap();
    let req = asked.unwrap();
    assert_eq!((req.buffer, req.buffer_size), (p.buffer, 64 * 1024));
    assert_eq!(req.counters_len, 1024);
    assert_eq!(req.object, m.object(OWNER, h).unwrap().id());
}

#[test]
fn start_twice_is_profiling_not_stopped_without_pinning() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 1).unwrap();
    let r = m.start(OWNER, h, |_| panic!("must not pin twice"));
    assert_eq!(r, Err(NtStatus::PROFILING_NOT_STOPPED));
}

#[test]
fn start_pin_failure_is_insufficient_resources_and_object_stays_stopped() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    let r = m.start(OWNER, h, |_| Err(NtStatus::INSUFFICIENT_RESOURCES));
    assert_eq!(r, Err(NtStatus::INSUFFICIENT_RESOURCES));
    assert!(!m.object(OWNER, h).unwrap().is_started());
    assert_eq!(m.started_count(), 0);
    assert!(hits(&m, sample(0, KBASE, None)).is_empty());
    assert!(start(&mut m, h, 1).is_ok());
}

#[test]
fn start_beyond_8192_per_processor_is_profiling_at_limit() {
    let mut m = manager(1);
    assert_eq!(m.started_limit(), 8192);
    for i in 0..8192u64 {
        let p = CreateParams {
            process: Some((i + 1) << 12),
            ..params()
        };
        let h = create(&mut m, &p).unwrap();
        start(&mut m, h, 0).unwrap();
    }
    let h = create(&mut m, &params()).unwrap();
    assert_eq!(
        m.start(OWNER, h, |_| panic!("no pin at limit")),
        Err(NtStatus::PROFILING_AT_LIMIT)
    );
    let first = Handle(4);
    m.stop(OWNER, first).unwrap();
    assert!(start(&mut m, h, 0).is_ok());
}

#[test]
fn stop_not_started_is_profiling_not_started() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::PROFILING_NOT_STARTED));
    start(&mut m, h, 1).unwrap();
    assert_eq!(m.stop(OWNER, h), Ok(1));
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::PROFILING_NOT_STARTED));
}

#[test]
fn stop_returns_pin_and_no_sample_counts_after_stop() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 7).unwrap();
    assert_eq!(hits(&m, sample(0, KBASE + 0x20, None)), vec![(7, 8)]);
    assert_eq!(m.stop(OWNER, h), Ok(7));
    assert!(hits(&m, sample(0, KBASE + 0x20, None)).is_empty());
    assert_eq!(m.started_for_source(ProfileSource::TIME), 0);
}

#[test]
fn stop_then_start_again_counts_again() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    for round in 0..3 {
        start(&mut m, h, round).unwrap();
        assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(round, 0)]);
        assert_eq!(m.stop(OWNER, h), Ok(round));
    }
}

#[test]
fn close_while_started_stops_and_returns_pin() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 5).unwrap();
    assert_eq!(m.close(OWNER, h), Ok(Some(5)));
    assert!(hits(&m, sample(0, KBASE, None)).is_empty());
    assert_eq!(m.started_count(), 0);
    assert_eq!(m.close(OWNER, h), Err(NtStatus::INVALID_HANDLE));
    assert_eq!(start(&mut m, h, 1), Err(NtStatus::INVALID_HANDLE));
}

#[test]
fn close_all_releases_every_object_of_one_owner_only() {
    let mut m = manager(1);
    let mine = [
        create(&mut m, &params()).unwrap(),
        create(&mut m, &params()).unwrap(),
    ];
    let other = m
        .create(
            &CreateParams {
                owner: Owner(2),
                ..params()
            },
            0,
            1,
        )
        .unwrap();
    start(&mut m, mine[0], 1).unwrap();
    m.start(Owner(2), other, |_| Ok(3)).unwrap();
    assert_eq!(m.close_all(OWNER), vec![1]);
    assert_eq!(m.open_count(), 1);
    assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(3, 0)]);
}
