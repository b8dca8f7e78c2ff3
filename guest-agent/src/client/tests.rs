//! The client against a model of the VMM that parses blocks with the VMM's own decoder.

use std::vec::Vec;

use profile_core::abi::{
    cpuid, decode_request, encode_reply, Request, StartBuffer, ALL_VCPUS, CALL_CREATE,
    CALL_CREATE_EX, CALL_START, CREATE_PER_PROCESS,
};

use super::*;
use crate::memory::tests::{Scattered, WINDOW};
use crate::{IdentityMapped, ProfileParams, Scratch};

/// A model VMM: handles 4, 8, ...; remembers every decoded call and the blocks it saw.
#[derive(Default)]
struct Model {
    next_handle: u32,
    started: Vec<u32>,
    calls: Vec<u32>,
    blocks: Vec<Vec<u8>>,
    frames: Vec<u64>,
    offset_in_first_page: u32,
    groups: Vec<GroupAffinity>,
    interrupt: Option<(u32, u32, u32)>,
    gpa: u64,
    alignment_fixup: u32,
}

impl Model {
    fn run(&mut self, block: &[u8]) -> Result<Vec<u8>, NtStatus> {
        let (header, request) = decode_request(block)?;
        self.calls.push(header.call);
        let mut out = block.to_vec();
        let range = match request {
            Request::QueryInfo => encode_reply(
                &mut out,
                NtStatus::SUCCESS,
                &InfoReply {
                    abi_version: 1,
                    processor_count: 2,
                    features: cpuid::FEATURES_KNOWN,
                    max_page_count: MAX_PAGE_COUNT,
                    supported_sources: 1,
                    started_limit: 16384,
                    max_groups: 32,
                    max_request_len: abi::MAX_REQUEST_LEN,
                    reserved: 0,
                },
            ),
            Request::Create(r) if r.buffer_size == 0 => {
                encode_reply(&mut out, NtStatus::INVALID_PARAMETER_7, &Empty)
            }
            Request::Create(_) => self.created(&mut out),
            Request::CreateEx(_, groups) => {
                self.groups = groups.iter().collect();
                self.created(&mut out)
            }
            Request::Start(r, buffer) => {
                if self.started.contains(&r.handle) {
                    encode_reply(&mut out, NtStatus::PROFILING_NOT_STOPPED, &Empty)
                } else {
                    self.started.push(r.handle);
                    let pinned = match buffer {
                        StartBuffer::PageList(list) => {
                            self.offset_in_first_page = list.offset_in_first_page();
                            self.frames = list.frames().collect();
                            list.page_count()
                        }
                        StartBuffer::GuestVirtual { .. } => 1,
                    };
                    encode_reply(
                        &mut out,
                        NtStatus::SUCCESS,
                        &StartReply {
                            pinned_pages: pinned,
                            reserved: 0,
                        },
                    )
                }
            }
            Request::Stop(r) => match self.started.iter().position(|&h| h == r.handle) {
                Some(i) => {
                    self.started.remove(i);
                    encode_reply(&mut out, NtStatus::SUCCESS, &Empty)
                }
                None => encode_reply(&mut out, NtStatus::PROFILING_NOT_STARTED, &Empty),
            },
            Request::Close(r) if r.handle == 0 => {
                encode_reply(&mut out, NtStatus::INVALID_HANDLE, &Empty)
            }
            Request::Close(_) => encode_reply(&mut out, NtStatus::SUCCESS, &Empty),
            Request::SetInterval(r) if r.flags & CALLER_SYSTEM_PROFILE_PRIVILEGE == 0 => {
                encode_reply(&mut out, NtStatus::PRIVILEGE_NOT_HELD, &Empty)
            }
            Request::SetInterval(r) => {
                let interval = match r.source {
                    0 => r.interval.clamp(1000, 10_000_000),
                    1 => {
                        self.alignment_fixup = r.interval;
                        r.interval
                    }
                    _ => 0,
                };
                encode_reply(
                    &mut out,
                    NtStatus::SUCCESS,
                    &IntervalReply {
                        interval,
                        reserved: 0,
                    },
                )
            }
            Request::QueryInterval(r) => encode_reply(
                &mut out,
                NtStatus::SUCCESS,
                &IntervalReply {
                    interval: match r.source {
                        0 => 39_063,
                        1 => self.alignment_fixup,
                        _ => 0,
                    },
                    reserved: 0,
                },
            ),
            Request::SetInterrupt(r) => {
                self.interrupt = Some((r.vcpu, r.vector, r.flags));
                encode_reply(&mut out, NtStatus::SUCCESS, &Empty)
            }
            Request::ReadStats => encode_reply(
                &mut out,
                NtStatus::SUCCESS,
                &StatsReply {
                    samples: 1000,
                    counted_samples: 990,
                    counts: 1980,
                    dropped_samples: 3,
                    injected_interrupts: 0,
                    objects_open: 2,
                    objects_started: 2,
                },
            ),
        }?;
        Ok(out[range].to_vec())
    }

    fn created(&mut self, out: &mut [u8]) -> Result<core::ops::Range<usize>, NtStatus> {
        self.next_handle += 4;
        encode_reply(
            out,
            NtStatus::SUCCESS,
            &CreateReply {
                handle: self.next_handle,
                reserved: 0,
                object_id: u64::from(self.next_handle / 4),
            },
        )
    }
}

impl Transport for Model {
    unsafe fn ring(&mut self, gpa: u64, block: &mut [u8]) {
        self.gpa = gpa;
        self.blocks.push(block.to_vec());
        // The VMM writes the status at 12 and, on success, the reply at 16.
        match self.run(block) {
            Ok(written) => block[12..12 + written.len()].copy_from_slice(&written),
            Err(status) => block[12..16].copy_from_slice(&status.0.to_le_bytes()),
        }
    }
    fn last_status(&mut self) -> u32 {
        0
    }
}

/// A port with no device behind it (QEMU): writes vanish, reads return all ones.
struct NoDevice;

impl Transport for NoDevice {
    unsafe fn ring(&mut self, _: u64, _: &mut [u8]) {}
    fn last_status(&mut self) -> u32 {
        u32::MAX
    }
}

/// hvprof refusing the ring from CPL3: the block is untouched, base + 4 says ACCESS_DENIED.
struct FromUserMode;

impl Transport for FromUserMode {
    unsafe fn ring(&mut self, _: u64, _: &mut [u8]) {}
    fn last_status(&mut self) -> u32 {
        NtStatus::ACCESS_DENIED.0
    }
}

fn params() -> ProfileParams {
    ProfileParams::global(0x4000_0000, 0x4000, 4, 0x20_0000, 0x1000)
}

#[test]
fn query_info_decodes_the_reply_and_rings_the_scratch_address() {
    let mut scratch = Scratch::<256>::new();
    let va = scratch.bytes_mut().as_ptr() as u64;
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    let info = c.query_info().unwrap();
    assert_eq!(info.processor_count, 2);
    assert_eq!(info.started_limit, 16384);
    assert_eq!(c.transport().gpa, va);
    // Header: version 1, call 1, length 56.
    assert_eq!(
        &c.transport().blocks[0][..12],
        &[1, 0, 0, 0, 1, 0, 0, 0, 56, 0, 0, 0]
    );
}

#[test]
fn create_builds_the_documented_block_and_returns_the_handle() {
    let mut scratch = Scratch::<128>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    let reply = c
        .create(&params().per_process(0x1AB000).to_create())
        .unwrap();
    assert_eq!((reply.handle, reply.object_id), (4, 1));
    let block = &c.transport().blocks[0];
    assert_eq!(block.len(), 80);
    let (_, request) = decode_request(block).unwrap();
    let Request::Create(r) = request else {
        panic!("not a create: {:?}", request)
    };
    assert_eq!(r.process_cr3, 0x1AB000);
    assert_eq!(
        r.flags,
        CREATE_PER_PROCESS | CALLER_SYSTEM_PROFILE_PRIVILEGE
    );
    assert_eq!((r.base, r.size, r.bucket_size), (0x4000_0000, 0x4000, 4));
    assert_eq!(c.transport().calls, [CALL_CREATE]);
}

#[test]
fn a_failure_status_comes_back_as_the_ntstatus() {
    let mut scratch = Scratch::<128>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    let mut p = params();
    p.buffer_size = 0;
    let err = c.create(&p.to_create()).unwrap_err();
    assert_eq!(err, Error::Status(NtStatus::INVALID_PARAMETER_7));
    assert_eq!(err.status(), NtStatus::INVALID_PARAMETER_7);
}

#[test]
fn create_ex_sends_the_group_array() {
    let mut scratch = Scratch::<128>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    let groups = [GroupAffinity::new(0, 0b10)];
    let reply = c.create_ex(&params().to_create_ex(), &groups).unwrap();
    assert_eq!(reply.handle, 4);
    assert_eq!(c.transport().groups, groups);
    assert_eq!(c.transport().blocks[0].len(), 96);
    assert_eq!(c.transport().calls, [CALL_CREATE_EX]);
}

#[test]
fn start_buffer_builds_the_page_list_from_the_memory_model() {
    let mut scratch = Scratch::<128>::new();
    let memory = Scattered {
        frames: [0x1234, 0x1235, 0x2000, 0x2001],
    };
    // The scratch itself is identity mapped: translate through a model that knows both.
    struct Both<'a>(&'a Scattered);
    // SAFETY: a test model.
    unsafe impl PhysicalMemory for Both<'_> {
        fn physical_address(&self, va: u64) -> Option<u64> {
            if (WINDOW..WINDOW + 0x1000_0000).contains(&va) {
                self.0.physical_address(va)
            } else {
                Some(va)
            }
        }
    }
    let mut c = Client::new(Model::default(), Both(&memory), scratch.bytes_mut()).unwrap();
    // SAFETY: the model VMM writes nothing.
    let reply = unsafe { c.start_buffer(4, WINDOW + 0x10, 0x3FF0) }.unwrap();
    assert_eq!(reply.pinned_pages, 4);
    assert_eq!(c.transport().frames, [0x1234, 0x1235, 0x2000, 0x2001]);
    assert_eq!(c.transport().offset_in_first_page, 0x10);
    assert_eq!(c.transport().blocks[0].len(), 48 + 32);
    // An unmapped page is reported before anything is rung.
    // SAFETY: as above.
    let err = unsafe { c.start_buffer(8, WINDOW + 0x3000, 0x2000) }.unwrap_err();
    assert_eq!(err, Error::NotMapped(WINDOW + 0x4000));
    assert_eq!(c.transport().calls, [CALL_START]);
}

#[test]
fn start_page_list_matches_start_buffer_and_abi_md() {
    let mut scratch = Scratch::<128>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    // SAFETY: the model VMM writes nothing.
    unsafe { c.start_page_list(4, 0, &[0x1234, 0x1235, 0x2000, 0x2001]) }.unwrap();
    // docs/abi.md 6.4, mode 0 example, request block.
    let expected: [u8; 80] = [
        0x01, 0, 0, 0, 0x04, 0, 0, 0, 0x50, 0, 0, 0, 0x03, 0x01, 0, 0, //
        0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, //
        0x34, 0x12, 0, 0, 0, 0, 0, 0, 0x35, 0x12, 0, 0, 0, 0, 0, 0, //
        0, 0x20, 0, 0, 0, 0, 0, 0, 0x01, 0x20, 0, 0, 0, 0, 0, 0,
    ];
    // The status field holds the client's sentinel (STATUS_PENDING) while ringing.
    assert_eq!(c.transport().blocks[0], expected);
    // Starting again: PROFILING_NOT_STOPPED.
    // SAFETY: as above.
    let again = unsafe { c.start_page_list(4, 0, &[0x1234, 0x1235, 0x2000, 0x2001]) };
    assert_eq!(
        again.unwrap_err(),
        Error::Status(NtStatus::PROFILING_NOT_STOPPED)
    );
}

#[test]
fn start_guest_virtual_sends_mode_1() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    // SAFETY: the model VMM writes nothing.
    let reply = unsafe { c.start_guest_virtual(8, 0xFFFF_C000_0001_0000, 0x1AD000) }.unwrap();
    assert_eq!(reply.pinned_pages, 1);
    // docs/abi.md 6.4, mode 1 example (status field aside).
    let block = &c.transport().blocks[0];
    assert_eq!(&block[..12], &[1, 0, 0, 0, 4, 0, 0, 0, 0x28, 0, 0, 0]);
    assert_eq!(
        &block[16..40],
        &[8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0xc0, 0xff, 0xff, 0, 0xd0, 0x1a, 0, 0, 0, 0, 0]
    );
}

#[test]
fn stop_close_and_their_statuses() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    assert_eq!(
        c.stop(4),
        Err(Error::Status(NtStatus::PROFILING_NOT_STARTED))
    );
    // SAFETY: the model VMM writes nothing.
    unsafe { c.start_guest_virtual(4, 0x1000, 0x2000) }.unwrap();
    assert_eq!(c.stop(4), Ok(()));
    assert_eq!(c.close(4), Ok(()));
    assert_eq!(c.close(0), Err(Error::Status(NtStatus::INVALID_HANDLE)));
    let blocks = &c.transport().blocks;
    assert_eq!(blocks[2].len(), 24);
    assert_eq!(&blocks[3][..12], &[1, 0, 0, 0, 6, 0, 0, 0, 24, 0, 0, 0]);
}

#[test]
fn intervals() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    assert_eq!(c.query_interval(ProfileSource::TIME), Ok(39_063));
    assert_eq!(c.set_interval(ProfileSource::TIME, 500), Ok(1000));
    assert_eq!(c.query_interval(ProfileSource::ALIGNMENT_FIXUP), Ok(0));
    assert_eq!(c.set_interval(ProfileSource::ALIGNMENT_FIXUP, 7), Ok(7));
    assert_eq!(c.query_interval(ProfileSource::ALIGNMENT_FIXUP), Ok(7));
    assert_eq!(
        c.set_interval_as(ProfileSource::TIME, 10_000, 0),
        Err(Error::Status(NtStatus::PRIVILEGE_NOT_HELD))
    );
    // docs/abi.md 6.7's example block.
    c.set_interval(ProfileSource::TIME, 500).unwrap();
    let last = c.transport().blocks.last().unwrap().clone();
    assert_eq!(
        &last[16..],
        &[0, 0, 0, 0, 0xf4, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn set_interrupt_enable_and_disable() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    c.set_interrupt(ALL_VCPUS, Some(0xFE)).unwrap();
    assert_eq!(
        c.transport().interrupt,
        Some((ALL_VCPUS, 0xFE, INTERRUPT_ENABLE))
    );
    c.set_interrupt(1, None).unwrap();
    assert_eq!(c.transport().interrupt, Some((1, 0, 0)));
    // A vector below 0x20 is refused by the VMM's decoder.
    assert_eq!(
        c.set_interrupt(0, Some(0x10)),
        Err(Error::Status(NtStatus::INVALID_PARAMETER))
    );
}

#[test]
fn read_stats_decodes_every_field() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(Model::default(), IdentityMapped, scratch.bytes_mut()).unwrap();
    let s = c.read_stats().unwrap();
    assert_eq!((s.samples, s.counted_samples, s.counts), (1000, 990, 1980));
    assert_eq!(
        (s.dropped_samples, s.objects_open, s.objects_started),
        (3, 2, 2)
    );
}

#[test]
fn no_device_is_reported_as_not_answered() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(NoDevice, IdentityMapped, scratch.bytes_mut()).unwrap();
    let err = c.query_info().unwrap_err();
    assert_eq!(err, Error::NotAnswered(u32::MAX));
    assert_eq!(err.status(), NtStatus::NOT_SUPPORTED);
}

#[test]
fn a_refused_ring_reports_the_doorbell_status() {
    let mut scratch = Scratch::<64>::new();
    let mut c = Client::new(FromUserMode, IdentityMapped, scratch.bytes_mut()).unwrap();
    let err = c.stop(4).unwrap_err();
    assert_eq!(err.status(), NtStatus::ACCESS_DENIED);
}

#[test]
fn scratch_checks() {
    let mut scratch = Scratch::<64>::new();
    let bytes = scratch.bytes_mut();
    assert!(matches!(
        Client::new(NoDevice, IdentityMapped, &mut bytes[1..]),
        Err(Error::ScratchMisaligned)
    ));
    assert!(matches!(
        Client::new(NoDevice, IdentityMapped, &mut bytes[..8]),
        Err(Error::ScratchTooSmall(16))
    ));
    let mut c = Client::new(Model::default(), IdentityMapped, &mut bytes[..40]).unwrap();
    assert_eq!(
        c.create(&params().to_create()),
        Err(Error::ScratchTooSmall(80))
    );
    // SAFETY: nothing is rung.
    let err = unsafe { c.start_buffer(4, 0x1000, 0x1000) }.unwrap_err();
    assert_eq!(err, Error::ScratchTooSmall(56));
    assert!(c.transport().calls.is_empty());
}
