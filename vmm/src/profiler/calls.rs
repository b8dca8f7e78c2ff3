//! Running one hypercall: reading the request block from guest memory, checking it, calling
//! the object manager, and writing the status and reply back. Everything the guest wrote is
//! untrusted; profile-core's decoder checks the block's structure, this module checks what
//! only the VMM can: privilege, guest memory, page tables.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use profile_core::abi::{
    self, decode_header, decode_request, encode_reply, CreateReply, Empty, InfoReply,
    IntervalReply, Request, StartBuffer, StartReply, StatsReply, Wire,
};
use profile_core::{Handle, NtStatus, ObjectId, ProfileSource};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::pin::PinnedBuffer;
use super::stats::{bump, total};
use super::{Profiler, GUEST_OWNER};
use crate::memory::{GuestPhys, GuestRam};
use introspect::paging::{writable_frames, Paging};

/// Feature flags hvprof offers (CPUID 0x40000101 ECX, QUERY_INFO).
pub const FEATURES: u32 = abi::cpuid::FEATURE_START_GUEST_VIRTUAL
    | abi::cpuid::FEATURE_INTERRUPT_INJECTION
    | abi::cpuid::FEATURE_STATISTICS;

/// The state of the vCPU at a hypercall or a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// RIP.
    pub rip: u64,
    /// The integer registers, numbered as x86-64 encodes them (RAX, RCX, RDX, RBX, RSP, RBP,
    /// RSI, RDI, R8..R15): the stack walker starts from them.
    pub gpr: [u64; 16],
    /// Current privilege level.
    pub cpl: u8,
    /// Paging registers.
    pub paging: Paging,
}

/// How many CPL>0 doorbell rings are logged before going quiet.
const USER_RING_LOG_LIMIT: u64 = 8;
static USER_RINGS: AtomicU64 = AtomicU64::new(0);

/// A call's outcome: the status and, on success, the reply body.
type CallResult<T> = Result<T, NtStatus>;

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

impl Profiler {
    /// Runs the call whose request block is at `gpa`, rung by vCPU `vcpu` in state `cpu`.
    /// Returns the status (also written into the block when the block is reachable).
    pub fn hypercall(&self, vcpu: usize, gpa: u64, cpu: &CpuState) -> NtStatus {
        if let Some(slot) = self.vcpus.get(vcpu) {
            bump(&slot.stats.hypercalls, 1);
        }
        if cpu.cpl != 0 {
            if USER_RINGS.fetch_add(1, Ordering::Relaxed) < USER_RING_LOG_LIMIT {
                log::warn!(
                    "hypercall from CPL{} on vCPU {vcpu} at RIP {:#x} refused (CPL0 only)",
                    cpu.cpl,
                    cpu.rip
                );
            }
            return NtStatus::ACCESS_DENIED;
        }
        if !gpa.is_multiple_of(8) {
            return NtStatus::DATATYPE_MISALIGNMENT;
        }
        let mut block = match fetch_block(&self.ram, &self.mem, gpa) {
            Ok(block) => block,
            Err(Refused::Untouched(status)) => return status,
            Err(Refused::InHeader(status)) => {
                self.write_status(gpa, status);
                return status;
            }
        };
        let (status, range) = match decode_request(&block) {
            Ok((_, request)) => {
                // The decoded request borrows `block`; copy what the reply needs first.
                let result = self.dispatch(&request, cpu);
                result.write(&mut block)
            }
            Err(status) => reply(&mut block, CallResult::<Empty>::Err(status)),
        };
        if let Some(r) = range {
            let at = gpa + r.start as u64;
            if self.mem.write_slice(&block[r], GuestAddress(at)).is_err() {
                return NtStatus::ACCESS_VIOLATION;
            }
        }
        status
    }

    fn write_status(&self, gpa: u64, status: NtStatus) {
        // Best effort: the header was readable a moment ago.
        let _ = self.mem.write_obj(status.0, GuestAddress(gpa + 12));
    }

    fn dispatch(&self, request: &Request<'_>, cpu: &CpuState) -> Reply {
        match request {
            Request::QueryInfo => {
                Reply::Info(Ok(InfoReply::for_manager(&*self.read(), self.features())))
            }
            Request::Create(r) => {
                let writable = self.buffer_writable(cpu, r.buffer, r.buffer_size);
                let params = r.to_params(GUEST_OWNER, writable);
                let result = self.write().create(&params, r.group, r.affinity);
                Reply::Create(result.and_then(|h| self.create_reply(h)))
            }
            Request::CreateEx(r, groups) => {
                let writable = self.buffer_writable(cpu, r.buffer, r.buffer_size);
                let params = r.to_params(GUEST_OWNER, writable);
                let result = self.write().create_ex(&params, &groups.to_vec());
                Reply::Create(result.and_then(|h| self.create_reply(h)))
            }
            Request::Start(r, buffer) => Reply::Start(self.start(Handle(r.handle), buffer, cpu)),
            Request::Stop(r) => Reply::Empty(self.stop(Handle(r.handle))),
            Request::Close(r) => Reply::Empty(self.close(Handle(r.handle))),
            Request::SetInterval(r) => {
                let source = ProfileSource(r.source);
                let result = self.write().set_interval(r.caller(), source, r.interval);
                // Armed triggers take the new interval; an absent source has none.
                if result.is_ok() && self.sampling.for_source(source).is_some() {
                    self.timers_changed();
                }
                Reply::Interval(result.map(|interval| IntervalReply {
                    interval,
                    reserved: 0,
                }))
            }
            Request::QueryInterval(r) => {
                let interval = self.read().query_interval(ProfileSource(r.source));
                Reply::Interval(Ok(IntervalReply {
                    interval,
                    reserved: 0,
                }))
            }
            Request::SetInterrupt(r) => Reply::Empty(self.set_interrupt(r.vcpu, r.vector)),
            Request::ReadStats => Reply::Stats(Ok(self.stats_reply())),
        }
    }

    fn create_reply(&self, handle: Handle) -> CallResult<CreateReply> {
        let object_id = self.read().object(GUEST_OWNER, handle).map(|o| o.id().0)?;
        Ok(CreateReply {
            handle: handle.0,
            reserved: 0,
            object_id,
        })
    }

    /// Windows' ProbeForWrite: every page of the buffer mapped writable in the caller's space.
    fn buffer_writable(&self, cpu: &CpuState, buffer: u64, size: u32) -> bool {
        size == 0
            || writable_frames(&GuestPhys(&self.mem), &cpu.paging, buffer, u64::from(size)).is_ok()
    }

    fn start(
        &self,
        handle: Handle,
        buffer: &StartBuffer<'_>,
        cpu: &CpuState,
    ) -> CallResult<StartReply> {
        let mut manager = self.write();
        let mut pages = 0usize;
        manager.start(GUEST_OWNER, handle, |req| {
            let offset = u32::try_from(req.buffer & 0xfff).unwrap_or(0);
            let pin = match buffer {
                StartBuffer::PageList(list) => {
                    list.check_covers(req.buffer, req.buffer_size)?;
                    self.check_ram(list.frames())?;
                    PinnedBuffer::pin(
                        &self.mem,
                        list.frames(),
                        offset,
                        req.buffer_size,
                        req.counters_len,
                    )
                }
                StartBuffer::GuestVirtual { va, cr3 } => {
                    if *va != req.buffer {
                        return Err(NtStatus::INVALID_PARAMETER);
                    }
                    let paging = Paging {
                        cr3: *cr3,
                        ..cpu.paging
                    };
                    let frames = writable_frames(
                        &GuestPhys(&self.mem),
                        &paging,
                        *va,
                        u64::from(req.buffer_size),
                    )
                    .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
                    self.check_ram(frames.iter().copied())?;
                    PinnedBuffer::pin(&self.mem, frames, offset, req.buffer_size, req.counters_len)
                }
            };
            let pin = pin.map_err(|e| {
                log::info!("START of handle {}: cannot pin the buffer: {e}", handle.0);
                NtStatus::INSUFFICIENT_RESOURCES
            })?;
            pages = pin.page_count();
            Ok(pin)
        })?;
        let (_, config) = identity(&manager, handle)?;
        self.cover(&config, true);
        Ok(StartReply {
            pinned_pages: u32::try_from(pages).unwrap_or(u32::MAX),
            reserved: 0,
        })
    }

    /// Every frame must be RAM by the guest's memory map (not merely backed by a slot).
    fn check_ram(&self, frames: impl IntoIterator<Item = u64>) -> CallResult<()> {
        match frames.into_iter().find(|f| !self.ram.has_frame(*f)) {
            Some(frame) => {
                log::info!("START: frame {frame:#x} is not guest RAM");
                Err(NtStatus::INSUFFICIENT_RESOURCES)
            }
            None => Ok(()),
        }
    }

    fn stop(&self, handle: Handle) -> CallResult<Empty> {
        let mut manager = self.write();
        let (object, config) = identity(&manager, handle)?;
        let pin = manager.stop(GUEST_OWNER, handle)?;
        self.cover(&config, false);
        self.keep_result(object, config, &pin);
        Ok(Empty)
    }

    fn close(&self, handle: Handle) -> CallResult<Empty> {
        let mut manager = self.write();
        let (object, config) = identity(&manager, handle)?;
        if let Some(pin) = manager.close(GUEST_OWNER, handle)? {
            self.cover(&config, false);
            self.keep_result(object, config, &pin);
        }
        Ok(Empty)
    }

    fn set_interrupt(&self, vcpu: u32, vector: u32) -> CallResult<Empty> {
        let slots: Vec<_> = if vcpu == u32::MAX {
            self.vcpus.iter().collect()
        } else {
            let v = usize::try_from(vcpu).map_err(|_| NtStatus::INVALID_PARAMETER)?;
            vec![self.vcpus.get(v).ok_or(NtStatus::INVALID_PARAMETER)?]
        };
        for slot in slots {
            slot.vector.store(vector, Ordering::Relaxed);
        }
        Ok(Empty)
    }

    fn stats_reply(&self) -> StatsReply {
        let t = total(&self.stats());
        let manager = self.read();
        StatsReply {
            samples: t.samples,
            counted_samples: t.attributed,
            counts: t.counts,
            dropped_samples: t.coalesced,
            injected_interrupts: t.injected,
            objects_open: u32::try_from(manager.open_count()).unwrap_or(u32::MAX),
            objects_started: u32::try_from(manager.started_count()).unwrap_or(u32::MAX),
        }
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

fn identity(
    manager: &profile_core::ObjectManager<PinnedBuffer>,
    handle: Handle,
) -> CallResult<(ObjectId, profile_core::object::ObjectConfig)> {
    let o = manager.object(GUEST_OWNER, handle)?;
    Ok((o.id(), o.config().clone()))
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
