//! [`Client`]: one typed method per hypercall.

use profile_core::abi::{
    self, decode_reply, encode_create_ex, encode_request, encode_start_page_list, CreateExRequest,
    CreateReply, CreateRequest, Empty, HandleRequest, Header, InfoReply, IntervalReply,
    PageListHeader, QueryIntervalRequest, SetInterruptRequest, SetIntervalRequest, StartReply,
    StartRequest, StatsReply, Wire, CALLER_SYSTEM_PROFILE_PRIVILEGE, HEADER_SIZE, INTERRUPT_ENABLE,
    MAX_PAGE_COUNT, PAGE_SHIFT, PAGE_SIZE,
};
use profile_core::affinity::GroupAffinity;
use profile_core::{NtStatus, ProfileSource};

use crate::memory::{contiguous, PhysicalMemory};
use crate::{Error, Transport};

/// The status the client writes into a block's header before ringing. The VMM never answers
/// it (it is `STATUS_PENDING`, and every call completes synchronously), so finding it after the
/// ring means the VMM did not write the block: see [`Error::NotAnswered`].
pub const STATUS_SENTINEL: u32 = 0x0000_0103;

/// Offset of `Header::status` in a block.
const STATUS_AT: usize = 12;

/// A guest agent's handle on the VMM: a [`Transport`] (the doorbell), the agent's memory model
/// and a scratch block that every call builds its request in.
///
/// The scratch block is caller-provided (no allocation): 8-byte aligned, guest-physically
/// contiguous, resident for the client's lifetime (nonpaged, or locked), and large enough for
/// the largest request used: 80 bytes for CREATE, 80 + 16 x groups for CREATE_EX, and
/// 48 + 8 x pages for a page-list START. One client serves one processor at a time (the doorbell's
/// high-dword latch is per processor); use one client per processor, or a lock and pinning.
pub struct Client<'s, T: Transport, M: PhysicalMemory> {
    transport: T,
    memory: M,
    scratch: &'s mut [u8],
    scratch_gpa: u64,
}

impl<'s, T: Transport, M: PhysicalMemory> Client<'s, T, M> {
    /// A client ringing `transport`, translating with `memory`, building requests in
    /// `scratch`. Checks that `scratch` is 8-byte aligned, holds at least a header and is
    /// physically contiguous.
    pub fn new(transport: T, memory: M, scratch: &'s mut [u8]) -> Result<Self, Error> {
        let va = scratch.as_ptr() as u64;
        if va % 8 != 0 {
            return Err(Error::ScratchMisaligned);
        }
        if scratch.len() < HEADER_SIZE {
            return Err(Error::ScratchTooSmall(HEADER_SIZE));
        }
        let scratch_gpa = contiguous(&memory, va, scratch.len())?;
        if scratch_gpa % 8 != 0 {
            return Err(Error::ScratchMisaligned);
        }
        Ok(Client {
            transport,
            memory,
            scratch,
            scratch_gpa,
        })
    }

    /// The transport (for example to read the doorbell's last status).
    pub fn transport(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The memory model.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Rings the first `len` bytes of the scratch block, already built. Returns the status the
    /// VMM wrote: `Ok` for success, `Error::Status` for a failure it answered,
    /// `Error::NotAnswered` if it did not write the block at all.
    fn ring(&mut self, len: usize) -> Result<(), Error> {
        let block = self
            .scratch
            .get_mut(..len)
            .ok_or(Error::ScratchTooSmall(len))?;
        block[STATUS_AT..HEADER_SIZE].copy_from_slice(&STATUS_SENTINEL.to_le_bytes());
        // SAFETY: `scratch_gpa` is the guest-physical address of the scratch block, checked
        // contiguous in `new` and resident for the client's lifetime (the memory model's
        // contract); `block` is its prefix.
        unsafe { self.transport.ring(self.scratch_gpa, block) };
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&self.scratch[STATUS_AT..HEADER_SIZE]);
        let status = u32::from_le_bytes(raw);
        if status == STATUS_SENTINEL {
            return Err(Error::NotAnswered(self.transport.last_status()));
        }
        NtStatus(status).ok().map_err(Error::Status)
    }

    /// Rings and decodes reply body `R`.
    fn ring_for<R: Wire>(&mut self, len: usize) -> Result<R, Error> {
        self.ring(len)?;
        decode_reply::<R>(self.scratch).map_err(Error::Status)
    }

    /// Builds a fixed-size request for `call` and rings it.
    fn call<Q: Wire, R: Wire>(&mut self, call: u32, body: &Q) -> Result<R, Error> {
        let needed = abi::min_length(call).unwrap_or(usize::MAX);
        let len = encode_request(call, body, self.scratch).map_err(|s| encode_error(s, needed))?;
        self.ring_for(len)
    }

    /// QUERY_INFO: ABI version, processors, features, supported sources, limits.
    pub fn query_info(&mut self) -> Result<InfoReply, Error> {
        self.call(abi::CALL_QUERY_INFO, &Empty)
    }

    /// CREATE (NtCreateProfile). `request.buffer` is a virtual address in the calling
    /// processor's current address space.
    pub fn create(&mut self, request: &CreateRequest) -> Result<CreateReply, Error> {
        self.call(abi::CALL_CREATE, request)
    }

    /// CREATE_EX (NtCreateProfileEx) with its `GROUP_AFFINITY` array (empty: all processors).
    pub fn create_ex(
        &mut self,
        request: &CreateExRequest,
        groups: &[GroupAffinity],
    ) -> Result<CreateReply, Error> {
        let needed = HEADER_SIZE + CreateExRequest::SIZE + groups.len() * GroupAffinity::SIZE;
        let len =
            encode_create_ex(request, groups, self.scratch).map_err(|s| encode_error(s, needed))?;
        self.ring_for(len)
    }

    /// START in page-list mode with the caller's frames (for example `MmGetMdlPfnArray` of a
    /// locked MDL): `offset_in_first_page` is `Buffer & 0xFFF`, `frames` the buffer's pages.
    ///
    /// # Safety
    ///
    /// From success until STOP or CLOSE returns, the VMM writes counters into these frames:
    /// they must be the object's buffer and stay resident (locked) that long.
    pub unsafe fn start_page_list(
        &mut self,
        handle: u32,
        offset_in_first_page: u32,
        frames: &[u64],
    ) -> Result<StartReply, Error> {
        let needed = HEADER_SIZE + StartRequest::SIZE + PageListHeader::SIZE + frames.len() * 8;
        let len = encode_start_page_list(handle, offset_in_first_page, frames, self.scratch)
            .map_err(|s| encode_error(s, needed))?;
        self.ring_for(len)
    }

    /// START in page-list mode for the buffer at virtual address `buffer` of `size` bytes (the
    /// object's `Buffer` and `BufferSize`): the page list is built from the memory model
    /// directly in the scratch block, so no frame array is needed.
    ///
    /// # Safety
    ///
    /// As [`Client::start_page_list`]: the buffer must stay mapped to the same pages and resident
    /// until STOP or CLOSE returns.
    pub unsafe fn start_buffer(
        &mut self,
        handle: u32,
        buffer: u64,
        size: u32,
    ) -> Result<StartReply, Error> {
        if size == 0 || buffer.checked_add(u64::from(size)).is_none() {
            return Err(Error::InvalidArgument);
        }
        let pages = abi::pages_spanned(buffer, u64::from(size));
        if pages > u64::from(MAX_PAGE_COUNT) {
            return Err(Error::InvalidArgument);
        }
        #[allow(clippy::cast_possible_truncation)] // at most MAX_PAGE_COUNT
        let pages = pages as usize;
        let frames_at = HEADER_SIZE + StartRequest::SIZE + PageListHeader::SIZE;
        let len = frames_at + pages * 8;
        let block = self
            .scratch
            .get_mut(..len)
            .ok_or(Error::ScratchTooSmall(len))?;
        #[allow(clippy::cast_possible_truncation)] // len <= MAX_REQUEST_LEN
        let header = Header {
            version: abi::ABI_VERSION,
            call: abi::CALL_START,
            length: len as u32,
            status: 0,
        };
        let request = StartRequest {
            handle,
            mode: abi::START_MODE_PAGE_LIST,
            buffer_va: 0,
            cr3: 0,
        };
        #[allow(clippy::cast_possible_truncation)] // below 4096; pages <= MAX_PAGE_COUNT
        let list = PageListHeader {
            offset_in_first_page: (buffer & (PAGE_SIZE - 1)) as u32,
            page_count: pages as u32,
        };
        // The lengths were checked above; encode cannot run out of room.
        header.encode(block).ok_or(Error::ScratchTooSmall(len))?;
        request
            .encode(&mut block[HEADER_SIZE..])
            .ok_or(Error::ScratchTooSmall(len))?;
        list.encode(&mut block[HEADER_SIZE + StartRequest::SIZE..])
            .ok_or(Error::ScratchTooSmall(len))?;
        let first = buffer & !(PAGE_SIZE - 1);
        for (i, slot) in block[frames_at..].chunks_exact_mut(8).enumerate() {
            let va = first + ((i as u64) << PAGE_SHIFT);
            let pa = self
                .memory
                .physical_address(va)
                .ok_or(Error::NotMapped(va))?;
            slot.copy_from_slice(&(pa >> PAGE_SHIFT).to_le_bytes());
        }
        self.ring_for(len)
    }

    /// START in guest-virtual mode (needs `FEATURE_START_GUEST_VIRTUAL`): the VMM walks the page
    /// tables at `cr3` to find the pages of `buffer_va` (which must equal the object's
    /// `Buffer`).
    ///
    /// # Safety
    ///
    /// The VMM pins the frames the page tables name now and writes counters there until STOP
    /// or CLOSE returns: the buffer must stay mapped to those frames (locked) that long.
    pub unsafe fn start_guest_virtual(
        &mut self,
        handle: u32,
        buffer_va: u64,
        cr3: u64,
    ) -> Result<StartReply, Error> {
        let request = StartRequest {
            handle,
            mode: abi::START_MODE_GUEST_VIRTUAL,
            buffer_va,
            cr3,
        };
        self.call(abi::CALL_START, &request)
    }

    /// STOP (NtStopProfile). When this returns, the VMM counts nothing more into the buffer.
    pub fn stop(&mut self, handle: u32) -> Result<(), Error> {
        let request = HandleRequest {
            handle,
            reserved: 0,
        };
        self.call::<_, Empty>(abi::CALL_STOP, &request).map(|_| ())
    }

    /// CLOSE: stops the object if started and deletes it; the handle becomes invalid.
    pub fn close(&mut self, handle: u32) -> Result<(), Error> {
        let request = HandleRequest {
            handle,
            reserved: 0,
        };
        self.call::<_, Empty>(abi::CALL_CLOSE, &request).map(|_| ())
    }

    /// SET_INTERVAL (NtSetIntervalProfile) as a caller holding `SeSystemProfilePrivilege`.
    /// Returns the interval now in force (clamped; 0 for an unsupported source).
    pub fn set_interval(&mut self, source: ProfileSource, interval: u32) -> Result<u32, Error> {
        self.set_interval_as(source, interval, CALLER_SYSTEM_PROFILE_PRIVILEGE)
    }

    /// SET_INTERVAL with explicit `CALLER_*` flags (an agent forwarding a user's request).
    pub fn set_interval_as(
        &mut self,
        source: ProfileSource,
        interval: u32,
        caller_flags: u32,
    ) -> Result<u32, Error> {
        let request = SetIntervalRequest {
            source: source.0,
            interval,
            flags: caller_flags,
            reserved: 0,
        };
        self.call::<_, IntervalReply>(abi::CALL_SET_INTERVAL, &request)
            .map(|r| r.interval)
    }

    /// QUERY_INTERVAL (NtQueryIntervalProfile): the source's interval, 0 if unsupported.
    pub fn query_interval(&mut self, source: ProfileSource) -> Result<u32, Error> {
        let request = QueryIntervalRequest {
            source: source.0,
            reserved: 0,
        };
        self.call::<_, IntervalReply>(abi::CALL_QUERY_INTERVAL, &request)
            .map(|r| r.interval)
    }

    /// SET_INTERRUPT (needs `FEATURE_INTERRUPT_INJECTION`): `Some(vector)` (0x20..=0xFF) makes
    /// the VMM inject `vector` on `vcpu` (or every vCPU, `abi::ALL_VCPUS`) after each sample it
    /// takes there; `None` stops that.
    pub fn set_interrupt(&mut self, vcpu: u32, vector: Option<u8>) -> Result<(), Error> {
        let request = SetInterruptRequest {
            vcpu,
            vector: vector.map_or(0, u32::from),
            flags: if vector.is_some() {
                INTERRUPT_ENABLE
            } else {
                0
            },
            reserved: 0,
        };
        self.call::<_, Empty>(abi::CALL_SET_INTERRUPT, &request)
            .map(|_| ())
    }

    /// READ_STATS (needs `FEATURE_STATISTICS`): the VMM's sampling counters since VM start.
    pub fn read_stats(&mut self) -> Result<StatsReply, Error> {
        self.call(abi::CALL_READ_STATS, &Empty)
    }
}

/// The error for an encoder's status: the scratch buffer is smaller than `needed` bytes, or the
/// request itself is invalid.
fn encode_error(status: NtStatus, needed: usize) -> Error {
    if status == NtStatus::BUFFER_TOO_SMALL {
        Error::ScratchTooSmall(needed)
    } else {
        Error::InvalidArgument
    }
}

#[cfg(test)]
mod tests;
