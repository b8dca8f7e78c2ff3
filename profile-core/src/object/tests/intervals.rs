//! NtSetIntervalProfile and NtQueryIntervalProfile; platform consistency.

use super::*;

#[test]
fn set_interval_clamps_to_the_source_range() {
    let mut m = manager(1);
    let t = ProfileSource::TIME;
    assert_eq!(m.set_interval(CallerRights::KERNEL, t, 1), Ok(1000));
    assert_eq!(m.query_interval(t), 1000);
    assert_eq!(
        m.set_interval(CallerRights::KERNEL, t, u32::MAX),
        Ok(10_000_000)
    );
    assert_eq!(m.set_interval(CallerRights::KERNEL, t, 12_345), Ok(12_345));
    assert_eq!(m.query_interval(t), 12_345);
}

#[test]
fn set_interval_is_global_per_source() {
    let mut m = manager(1);
    m.set_interval(CallerRights::KERNEL, PMU, 50_000).unwrap();
    assert_eq!(m.query_interval(PMU), 50_000);
    assert_eq!(m.query_interval(ProfileSource::TIME), DEFAULT_TIME_INTERVAL);
}

#[test]
fn set_interval_without_privilege_is_privilege_not_held() {
    let caller = CallerRights {
        system_profile_privilege: false,
        restricted: false,
    };
    let mut m = manager(1);
    let r = m.set_interval(caller, ProfileSource::TIME, 5000);
    assert_eq!(r, Err(NtStatus::PRIVILEGE_NOT_HELD));
    assert_eq!(m.query_interval(ProfileSource::TIME), DEFAULT_TIME_INTERVAL);
}

#[test]
fn query_interval_default_profile_time_is_39063() {
    assert_eq!(manager(1).query_interval(ProfileSource::TIME), 39_063);
}

#[test]
fn query_interval_unsupported_source_is_zero_and_set_changes_nothing() {
    let mut m: ObjectManager<u32> = ObjectManager::new(PlatformInfo::timer_only(1)).unwrap();
    assert_eq!(m.query_interval(PMU), 0);
    assert_eq!(m.set_interval(CallerRights::KERNEL, PMU, 5000), Ok(0));
    assert_eq!(m.query_interval(PMU), 0);
}

#[test]
fn alignment_fixup_query_returns_last_value_set() {
    let mut m = manager(1);
    let fixup = ProfileSource::ALIGNMENT_FIXUP;
    assert_eq!(m.query_interval(fixup), 0);
    assert_eq!(m.set_interval(CallerRights::KERNEL, fixup, 3), Ok(3));
    assert_eq!(
        m.set_interval(CallerRights::KERNEL, fixup, u32::MAX),
        Ok(u32::MAX)
    );
    assert_eq!(m.query_interval(fixup), u32::MAX);
}

#[test]
fn new_rejects_inconsistent_platforms() {
    assert!(ObjectManager::<u32>::new(PlatformInfo::timer_only(0)).is_err());
    assert!(ObjectManager::<u32>::new(PlatformInfo::timer_only(2049)).is_err());
    let mut no_timer = platform(1);
    no_timer.sources.remove(0);
    assert!(ObjectManager::<u32>::new(no_timer).is_err());
    let mut bad_clamp = platform(1);
    bad_clamp.sources[1].default_interval = 1;
    assert!(ObjectManager::<u32>::new(bad_clamp).is_err());
}
