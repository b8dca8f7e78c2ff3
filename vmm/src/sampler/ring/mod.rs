//! The in-kernel sampler's events: on each vCPU thread, one perf event per trigger that
//! samples into a ring buffer the kernel fills, with no signal and no exit. When such an event
//! fires while the thread runs guest code, KVM gives perf the guest's RIP and whether it was
//! in kernel or user mode ([`record::Mode`]); the record lands in the ring and the vCPU goes
//! on. The drain (`profiler::flat`) reads the rings from another thread.
//!
//! All of a thread's events write into one ring (PERF_EVENT_IOC_SET_OUTPUT) and tell
//! themselves apart by their id (PERF_SAMPLE_IDENTIFIER). Records are stamped on
//! CLOCK_MONOTONIC, the clock the run's time axis counts on.
//!
//! [`ThreadEvents`] stays on the vCPU thread, which arms and disarms its events; [`Ring`] is
//! the reading side, which the drain owns behind a lock.

pub mod record;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_mmap_page, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_TIME,
};
use perf_event_open_sys::ioctls;
use vmm_sys_util::syscall::SyscallReturnCode;

use super::events::EventSpec;
use super::perf;
use super::TriggerId;

/// Data pages of each vCPU's ring (a power of two): 128 KiB, 4,096 records of 32 bytes, 0.4 s
/// of one trigger at 10 kHz; the drain empties it every few milliseconds.
pub const RING_PAGES: usize = 32;
const PAGE: usize = 4096;

/// The attributes of a ring event for `spec`: disabled until armed, counting the guest and
/// the host kernel (a sample taken at the timer interrupt is a kernel-mode sample of the host:
/// with `exclude_kernel` every guest sample would be dropped).
fn ring_attr(spec: &EventSpec, watermark: u32) -> perf_event_attr {
    let mut attr = perf::attr(spec, perf::UNARMED_PERIOD);
    attr.sample_type = u64::from(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TIME);
    attr.set_exclude_guest(0);
    attr.set_exclude_kernel(0);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = watermark;
    attr
}

/// A thread's ring events could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// perf_event_open refused an event.
    #[error("perf_event_open refused the ring event")]
    Open(#[source] io::Error),
    /// The ring could not be mapped (the locked-memory limit).
    #[error("cannot map the ring buffer")]
    Map(#[source] io::Error),
    /// An event could not join the thread's ring or say its id.
    #[error("cannot join an event to the thread's ring")]
    Join(#[source] io::Error),
    /// No event to open.
    #[error("no event to sample into a ring")]
    Empty,
}

/// One vCPU thread's ring events, by trigger.
pub struct ThreadEvents {
    events: Vec<Option<(OwnedFd, Option<u64>)>>,
}

/// The reading side of one vCPU thread's ring.
pub struct Ring {
    /// The mapping: the control page, then the data pages.
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
    /// Our copy of data_tail.
    tail: u64,
    /// Which trigger each event id is.
    ids: Vec<(u64, TriggerId)>,
}

// SAFETY: `Ring` owns its mapping (unmapped only in Drop); the kernel writes the data area and
// data_head concurrently, which `take` reads only with an acquire load and below data_head.
// Moving the owner to another thread changes none of that.
unsafe impl Send for Ring {}

fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: ID writes one u64 through the pointer, which is live for the call.
    SyscallReturnCode(unsafe { ioctls::ID(fd.as_raw_fd(), &mut id) }).into_empty_result()?;
    Ok(id)
}

impl ThreadEvents {
    /// Opens `specs` (trigger, encoding) on the calling thread, all disarmed, writing into one
    /// ring of [`RING_PAGES`] data pages.
    pub fn open_on_current_thread(
        specs: &[(TriggerId, EventSpec)],
        triggers: usize,
    ) -> Result<(ThreadEvents, Ring), RingError> {
        let data_size = RING_PAGES * PAGE;
        let watermark = u32::try_from(data_size / 2).unwrap_or(u32::MAX);
        let mut events: Vec<Option<(OwnedFd, Option<u64>)>> = (0..triggers).map(|_| None).collect();
        let mut ids = Vec::new();
        let mut leader: Option<i32> = None;
        let mut ring = None;
        for (t, spec) in specs {
            let fd = perf::open_attr(ring_attr(spec, watermark)).map_err(RingError::Open)?;
            match leader {
                None => {
                    ring = Some(Ring::map(&fd, data_size).map_err(RingError::Map)?);
                    leader = Some(fd.as_raw_fd());
                }
                Some(l) => {
                    // SAFETY: SET_OUTPUT takes the descriptor of a live event of this thread.
                    SyscallReturnCode(unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), l) })
                        .into_empty_result()
                        .map_err(RingError::Join)?;
                }
            }
            ids.push((event_id(&fd).map_err(RingError::Join)?, *t));
            if let Some(slot) = events.get_mut(*t) {
                *slot = Some((fd, None));
            }
        }
        let mut ring = ring.ok_or(RingError::Empty)?;
        ring.ids = ids;
        Ok((ThreadEvents { events }, ring))
    }

    /// True if trigger `t` has a ring event on this thread.
    pub fn has(&self, t: TriggerId) -> bool {
        self.events.get(t).is_some_and(Option::is_some)
    }

    /// Arms trigger `t`'s ring event to sample every `period` events (ns for a clock), or
    /// disarms it; does nothing if that is already its setting.
    pub fn set(&mut self, t: TriggerId, period: Option<u64>) -> io::Result<()> {
        let Some(Some((fd, armed))) = self.events.get_mut(t) else {
            return Ok(());
        };
        if *armed != period {
            perf::arm(fd.as_raw_fd(), period)?;
            *armed = period;
        }
        Ok(())
    }
}

impl Ring {
    /// Maps the ring of the perf event `fd` with `data_size` bytes of data pages (a power of
    /// two of pages) after its control page. Also what `hvprof bench --peer` reads perf kvm's
    /// events with.
    pub fn map(fd: &OwnedFd, data_size: usize) -> io::Result<Ring> {
        let len = PAGE + data_size;
        // SAFETY: a new shared mapping of a perf event's ring: no existing memory is touched;
        // the result is checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        let meta = base.cast::<perf_event_mmap_page>();
        // SAFETY: the control page is mapped, and its data_offset and data_size fields were
        // written by the kernel before mmap returned (it never changes them afterwards).
        let (offset, size) = unsafe { ((*meta).data_offset, (*meta).data_size) };
        let (mut data_offset, mut data_size_k) = (
            usize::try_from(offset).unwrap_or(0),
            usize::try_from(size).unwrap_or(0),
        );
        // Kernels before 4.1 leave them 0: the data follows the control page.
        if data_size_k == 0 || data_offset.saturating_add(data_size_k) > len {
            (data_offset, data_size_k) = (PAGE, data_size);
        }
        Ok(Ring {
            base,
            len,
            data_offset,
            data_size: data_size_k,
            tail: 0,
            ids: Vec::new(),
        })
    }

    fn control(&self, field: usize) -> &AtomicU64 {
        // SAFETY: `field` is the offset of data_head or data_tail in the control page, which
        // is mapped for as long as `self` and 8-byte aligned; the kernel and this reader only
        // access them atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(field).cast::<u64>()) }
    }

    /// True if one of the ring's events samples trigger `t`.
    pub fn serves(&self, t: TriggerId) -> bool {
        self.ids.iter().any(|(_, s)| *s == t)
    }

    /// The trigger whose event has id `id`.
    pub fn trigger(&self, id: u64) -> Option<TriggerId> {
        self.ids.iter().find(|(i, _)| *i == id).map(|(_, t)| *t)
    }

    /// Moves the records the kernel published since the last call into `out` (appended, in
    /// order, unwrapped) and hands their room back to the kernel. Returns false if the head
    /// was implausible (more than the ring holds past our tail); then nothing is taken and the
    /// ring is reset to the head.
    pub fn take(&mut self, out: &mut Vec<u8>) -> bool {
        let head_field = std::mem::offset_of!(perf_event_mmap_page, data_head);
        let tail_field = std::mem::offset_of!(perf_event_mmap_page, data_tail);
        let head = self.control(head_field).load(Ordering::Acquire);
        let pending = head.wrapping_sub(self.tail);
        let size = self.data_size;
        let ok = usize::try_from(pending).is_ok_and(|p| p <= size);
        if ok && pending > 0 {
            let mut at = usize::try_from(self.tail % size as u64).unwrap_or(0);
            let mut left = usize::try_from(pending).unwrap_or(0);
            while left > 0 {
                let n = left.min(size - at);
                // SAFETY: `data_offset + at .. + n` lies inside the data area, which lies
                // inside the mapping (checked in `map`); the kernel does not write below
                // data_head until data_tail passes it, which happens only after this copy.
                let src =
                    unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset + at), n) };
                out.extend_from_slice(src);
                at = (at + n) % size;
                left -= n;
            }
        }
        self.tail = head;
        self.control(tail_field).store(head, Ordering::Release);
        ok
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping `map` made, once; nothing refers to it any more.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests;
