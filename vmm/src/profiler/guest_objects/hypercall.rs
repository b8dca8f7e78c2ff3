//! Running one hypercall: reading the request block from guest memory, checking it, calling
//! the guest's objects, and writing the status and reply back. Everything the guest wrote is
//! untrusted; profile-core's decoder checks the block's structure, this module checks what
//! only the VMM can: privilege, guest memory, page tables. The vCPU that rang runs it (its
//! exit mapper returns the ring as an action of its own), before it re-enters the guest.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use profile_core::abi::{
    self, decode_header, decode_request, encode_reply, CreateReply, Empty, InfoReply,
    IntervalReply, Request, StartReply, StatsReply, Wire,
};
use profile_core::{Handle, NtStatus, ProfileSource};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::{CallResult, GuestObjects, GUEST_OWNER};
use crate::arch::cpu_state::CpuState;
use crate::memory::GuestRam;
use crate::profiler::vcpu_counters::{total, VcpuProfileStats};

/// How many CPL>0 doorbell rings are logged before going quiet.
const USER_RING_LOG_LIMIT: u64 = 8;
static USER_RINGS: AtomicU64 = AtomicU64::new(0);

fn reply<T: Wire>(block: &mut [u8], result: CallResult<T>) -> (NtStatus, Option<Range<usize>>) {
    let (status, range) = match result {
        Ok(r) => (
            NtStatus::SUCCESS,
            encode_reply(block, NtStatus::SUCCESS, &r),
        ),
        Err(s) => (s, encode_reply(block, s, &Empty)),
    };
    (status, range.ok())
}

/// Runs the call whose request block is at `gpa`, rung by vCPU `vcpu` in state `cpu`, on
/// `objects` (`counters`: every vCPU's, for READ_STATS). Returns the call's number when its
/// header passed its checks (for the timeline's marker) and the status (also written into the
/// block when the block is reachable).
pub fn run(
    objects: &GuestObjects,
    counters: &[VcpuProfileStats],
    vcpu: usize,
    gpa: u64,
    cpu: &CpuState,
) -> (Option<u32>, NtStatus) {
    if cpu.cpl != 0 {
        if USER_RINGS.fetch_add(1, Ordering::Relaxed) < USER_RING_LOG_LIMIT {
            log::warn!(
                "hypercall from CPL{} on vCPU {vcpu} at RIP {:#x} refused (CPL0 only)",
                cpu.cpl,
                cpu.rip
            );
        }
        return (None, NtStatus::ACCESS_DENIED);
    }
    if !gpa.is_multiple_of(8) {
        return (None, NtStatus::DATATYPE_MISALIGNMENT);
    }
    let mem = &objects.mem;
    let mut block = match fetch_block(&objects.ram, mem, gpa) {
        Ok(block) => block,
        Err(Refused::Untouched(status)) => return (None, status),
        Err(Refused::InHeader(status)) => {
            // Best effort: the header was readable a moment ago.
            let _ = mem.write_obj(status.0, GuestAddress(gpa + 12));
            return (None, status);
        }
    };
    // The header passed its checks: its call number is one the ABI defines.
    let call = block
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes);
    let (status, range) = match decode_request(&block) {
        Ok((_, request)) => {
            // The decoded request borrows `block`; copy what the reply needs first.
            let result = dispatch(objects, counters, &request, cpu);
            result.write(&mut block)
        }
        Err(status) => reply(&mut block, CallResult::<Empty>::Err(status)),
    };
    if let Some(r) = range {
        let at = gpa + r.start as u64;
        if mem.write_slice(&block[r], GuestAddress(at)).is_err() {
            return (call, NtStatus::ACCESS_VIOLATION);
        }
    }
    (call, status)
}

fn dispatch(
    objects: &GuestObjects,
    counters: &[VcpuProfileStats],
    request: &Request<'_>,
    cpu: &CpuState,
) -> Reply {
    match request {
        Request::QueryInfo => Reply::Info(Ok(objects.info())),
        Request::Create(r) => {
            let writable = objects.buffer_writable(cpu, r.buffer, r.buffer_size);
            let params = r.to_params(GUEST_OWNER, writable);
            Reply::Create(objects.create(&params, r.group, r.affinity))
        }
        Request::CreateEx(r, groups) => {
            let writable = objects.buffer_writable(cpu, r.buffer, r.buffer_size);
            let params = r.to_params(GUEST_OWNER, writable);
            Reply::Create(objects.create_ex(&params, &groups.to_vec()))
        }
        Request::Start(r, buffer) => Reply::Start(objects.start(Handle(r.handle), buffer, cpu)),
        Request::Stop(r) => Reply::Empty(objects.stop(Handle(r.handle)).map(|()| Empty)),
        Request::Close(r) => Reply::Empty(objects.close(Handle(r.handle)).map(|()| Empty)),
        Request::SetInterval(r) => {
            let source = ProfileSource(r.source);
            let result = objects.set_interval(r.caller(), source, r.interval);
            Reply::Interval(result.map(|interval| IntervalReply {
                interval,
                reserved: 0,
            }))
        }
        Request::QueryInterval(r) => Reply::Interval(Ok(IntervalReply {
            interval: objects.query_interval(ProfileSource(r.source)),
            reserved: 0,
        })),
        Request::SetInterrupt(r) => {
            Reply::Empty(objects.set_interrupt(r.vcpu, r.vector).map(|()| Empty))
        }
        Request::ReadStats => Reply::Stats(Ok(stats_reply(objects, counters))),
    }
}

fn stats_reply(objects: &GuestObjects, counters: &[VcpuProfileStats]) -> StatsReply {
    let snapshots: Vec<_> = counters.iter().map(|c| c.snapshot()).collect();
    let t = total(&snapshots);
    let (open, started) = objects.open_and_started();
    StatsReply {
        samples: t.samples,
        counted_samples: t.attributed,
        counts: t.counts,
        dropped_samples: t.coalesced,
        injected_interrupts: t.injected,
        objects_open: u32::try_from(open).unwrap_or(u32::MAX),
        objects_started: u32::try_from(started).unwrap_or(u32::MAX),
    }
}

/// Why a request block was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Not read, not written: the status is only the doorbell's last status.
    Untouched(NtStatus),
    /// The header failed its checks: the status is also written into it.
    InHeader(NtStatus),
}

/// Reads the request block at `gpa` (docs/abi.md sections 3 and 4.1), in this order: the
/// header's 16 bytes must be guest RAM (else ACCESS_VIOLATION, untouched); the header's checks
/// (version, call, `length` bounds; the status written into the header); then all `length`
/// bytes must be guest RAM (else ACCESS_VIOLATION, untouched). So a `length` under 16 in RAM
/// is INFO_LENGTH_MISMATCH, and an over-long `length` is INFO_LENGTH_MISMATCH even where its
/// bytes would leave RAM.
fn fetch_block(ram: &GuestRam, mem: &GuestMemoryMmap, gpa: u64) -> Result<Vec<u8>, Refused> {
    // Guest RAM is what the guest's memory map says, not whatever a memory slot backs.
    let mut head = [0u8; abi::HEADER_SIZE];
    if !ram.contains(gpa, head.len() as u64)
        || mem.read_slice(&mut head, GuestAddress(gpa)).is_err()
    {
        return Err(Refused::Untouched(NtStatus::ACCESS_VIOLATION));
    }
    let header = decode_header(&head).map_err(Refused::InHeader)?;
    let mut block = vec![0u8; usize::try_from(header.length).unwrap_or(0)];
    if !ram.contains(gpa, u64::from(header.length))
        || mem.read_slice(&mut block, GuestAddress(gpa)).is_err()
    {
        return Err(Refused::Untouched(NtStatus::ACCESS_VIOLATION));
    }
    Ok(block)
}

/// A call's typed result, written into the block once the request's borrow has ended.
enum Reply {
    Info(CallResult<InfoReply>),
    Create(CallResult<CreateReply>),
    Start(CallResult<StartReply>),
    Interval(CallResult<IntervalReply>),
    Stats(CallResult<StatsReply>),
    Empty(CallResult<Empty>),
}

impl Reply {
    fn write(self, block: &mut [u8]) -> (NtStatus, Option<Range<usize>>) {
        match self {
            Reply::Info(r) => reply(block, r),
            Reply::Create(r) => reply(block, r),
            Reply::Start(r) => reply(block, r),
            Reply::Interval(r) => reply(block, r),
            Reply::Stats(r) => reply(block, r),
            Reply::Empty(r) => reply(block, r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::memory_map;

    fn setup() -> (GuestRam, GuestMemoryMmap) {
        let size = 16 << 20;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        (GuestRam::from_map(&memory_map(size as u64)), mem)
    }

    fn header(mem: &GuestMemoryMmap, gpa: u64, call: u32, length: u32) {
        for (i, v) in [abi::ABI_VERSION, call, length, 0].into_iter().enumerate() {
            mem.write_obj(v, GuestAddress(gpa + 4 * i as u64)).unwrap();
        }
    }

    /// docs/abi.md 3 vs 4.1: the header's 16 bytes are always read from RAM; a `length`
    /// under 16 there is the header check's INFO_LENGTH_MISMATCH, not ACCESS_VIOLATION.
    #[test]
    fn a_length_under_16_in_ram_is_info_length_mismatch() {
        let (ram, mem) = setup();
        header(&mem, 0x1000, abi::CALL_QUERY_INFO, 8);
        assert_eq!(
            fetch_block(&ram, &mem, 0x1000),
            Err(Refused::InHeader(NtStatus::INFO_LENGTH_MISMATCH))
        );
        // A header straddling the end of RAM (0x9FC00) is not read at all.
        assert_eq!(
            fetch_block(&ram, &mem, 0x9_fbf8),
            Err(Refused::Untouched(NtStatus::ACCESS_VIOLATION))
        );
    }

    /// docs/abi.md 4.1 vs 8: `length` above MAX_REQUEST_LEN fails the header check (status
    /// written) even where those bytes would leave RAM; a `length` within bounds whose bytes
    /// leave RAM is ACCESS_VIOLATION and the block is untouched.
    #[test]
    fn an_over_long_length_wins_over_leaving_ram() {
        let (ram, mem) = setup();
        let gpa = 0x9_f000;
        header(&mem, gpa, abi::CALL_QUERY_INFO, abi::MAX_REQUEST_LEN + 8);
        assert_eq!(
            fetch_block(&ram, &mem, gpa),
            Err(Refused::InHeader(NtStatus::INFO_LENGTH_MISMATCH))
        );
        header(&mem, gpa, abi::CALL_QUERY_INFO, 0x1000);
        assert_eq!(
            fetch_block(&ram, &mem, gpa),
            Err(Refused::Untouched(NtStatus::ACCESS_VIOLATION))
        );
        header(&mem, 0x1000, abi::CALL_QUERY_INFO, 0x1000);
        assert_eq!(fetch_block(&ram, &mem, 0x1000).map(|b| b.len()), Ok(0x1000));
    }
}
