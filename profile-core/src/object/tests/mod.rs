//! One test per documented behaviour and status of the object manager, by topic: create
//! (NtCreateProfile(Ex)'s checks), lifecycle (start, stop, close), intervals, record. The
//! helpers below are shared.

mod create;
mod intervals;
mod lifecycle;
mod record;

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::affinity::{GroupAffinity, KAFFINITY_ALL};
use crate::attribution::{CounterSink, Sample};
use crate::handle::Handle;
use crate::source::DEFAULT_TIME_INTERVAL;
use crate::NtStatus;

const OWNER: Owner = Owner(1);
const KBASE: u64 = 0xFFFF_F800_0000_0000;
const PMU: ProfileSource = ProfileSource::TOTAL_CYCLES;

fn platform(n: u32) -> PlatformInfo {
    let mut p = PlatformInfo::timer_only(n);
    p.sources.push(SourceInfo {
        source: PMU,
        min_interval: 10_000,
        max_interval: 100_000_000,
        default_interval: 1_000_000,
    });
    p
}

fn manager(n: u32) -> ObjectManager<u32> {
    ObjectManager::new(platform(n)).unwrap()
}

/// A valid global kernel-range profile: 4 KiB in 16-byte buckets, exactly 1 KiB of counters.
fn params() -> CreateParams {
    CreateParams {
        owner: OWNER,
        process: None,
        base: KBASE,
        size: 0x1000,
        bucket_size: 4,
        buffer: 0x1000_0000,
        buffer_size: 1024,
        source: ProfileSource::TIME,
        buffer_writable: true,
        access: AccessMask::PROFILE_CONTROL,
        caller: CallerRights::KERNEL,
    }
}

fn create(m: &mut ObjectManager<u32>, p: &CreateParams) -> Result<Handle, NtStatus> {
    m.create(p, 0, KAFFINITY_ALL)
}

fn start(m: &mut ObjectManager<u32>, h: Handle, tag: u32) -> Result<Started, NtStatus> {
    m.start(OWNER, h, |_| Ok(tag))
}

#[derive(Default)]
struct Recorder(Vec<(u32, ObjectId, u64)>);

impl CounterSink<u32> for Recorder {
    fn increment(&mut self, pin: &u32, object: ObjectId, byte_offset: u64) {
        self.0.push((*pin, object, byte_offset));
    }
}

fn sample(vcpu: u32, pc: u64, process: Option<u64>) -> Sample {
    Sample {
        vcpu,
        pc,
        process,
        source: ProfileSource::TIME,
    }
}

fn hits(m: &ObjectManager<u32>, s: Sample) -> Vec<(u32, u64)> {
    let mut r = Recorder::default();
    let n = m.record(&s, &mut r);
    let mut naive = Recorder::default();
    assert_eq!(m.record_naive(&s, &mut naive), n);
    let mut got: Vec<(u32, u64)> = r.0.iter().map(|&(p, _, o)| (p, o)).collect();
    let mut want: Vec<(u32, u64)> = naive.0.iter().map(|&(p, _, o)| (p, o)).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "index and naive model disagree");
    got
}

fn create_err(p: CreateParams) -> NtStatus {
    create(&mut manager(4), &p).unwrap_err()
}
