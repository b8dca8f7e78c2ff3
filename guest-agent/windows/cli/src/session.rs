//! The IOCTL sequence of a profiling run, over any [`Device`] (the driver on Windows, a model in
//! the tests): set the interval, create, start, wait, stop, close, collect.

use std::fmt;
use std::time::Instant;

use hvprof_ioctl::codes::{
    IOCTL_HVPROF_CLOSE, IOCTL_HVPROF_CREATE, IOCTL_HVPROF_QUERY_INFO, IOCTL_HVPROF_QUERY_INTERVAL,
    IOCTL_HVPROF_READ_STATS, IOCTL_HVPROF_SET_INTERVAL, IOCTL_HVPROF_START, IOCTL_HVPROF_STOP,
};
use hvprof_ioctl::messages::{
    CreateReply, DriverInfo, InfoReply, IntervalReply, StartReply, StatsReply, Wire,
};
use hvprof_ioctl::NtStatus;

use crate::plan::{self, Plan};

/// Something that answers the driver's IOCTLs.
pub trait Device {
    /// Issues `code` with `input`; on success returns the bytes written to `output`, else the
    /// NTSTATUS the driver completed the request with.
    fn ioctl(&mut self, code: u32, input: &[u8], output: &mut [u8]) -> Result<usize, NtStatus>;
}

/// The process a session runs in: its token and the memory the counters live in (Windows:
/// this process; the tests: a model, or a process of the emulated NT kernel).
pub trait Host {
    /// Enables SeSystemProfilePrivilege in the process token if the token holds it (Windows
    /// counts only enabled privileges; an elevated administrator holds this one disabled).
    /// `Ok(false)`: not held, the run goes on as a restricted caller.
    fn enable_profile_privilege(&mut self) -> Result<bool, String>;
    /// Allocates `n` zeroed 32-bit counters that live until the host is dropped; returns
    /// their address.
    fn alloc_counters(&mut self, n: usize) -> Result<u64, String>;
    /// Stores `value` at `addr` (inside an allocation), as a volatile write.
    fn write_u32(&mut self, addr: u64, value: u32);
    /// Loads the value at `addr` (inside an allocation), as a volatile read.
    fn read_u32(&self, addr: u64) -> u32;
}

/// Counters in this process's own heap (the Windows agent, the unit tests).
#[derive(Default, Debug)]
pub struct LocalCounters {
    allocations: Vec<Vec<u32>>,
}

impl LocalCounters {
    /// `n` zeroed counters; their address.
    pub fn alloc(&mut self, n: usize) -> u64 {
        let mut v = vec![0u32; n.max(1)];
        let addr = v.as_mut_ptr() as u64;
        self.allocations.push(v);
        addr
    }

    /// The allocation and index holding `addr`.
    fn find(&self, addr: u64) -> Option<(usize, usize)> {
        self.allocations.iter().enumerate().find_map(|(a, v)| {
            let start = v.as_ptr() as u64;
            let i = addr.checked_sub(start)? / 4;
            (addr % 4 == 0 && (i as usize) < v.len()).then_some((a, i as usize))
        })
    }

    /// A volatile store (ignored outside every allocation).
    pub fn write(&mut self, addr: u64, value: u32) {
        if let Some((a, i)) = self.find(addr) {
            // SAFETY: `i` is in bounds of allocation `a`, which this borrow owns.
            unsafe { std::ptr::write_volatile(self.allocations[a].as_mut_ptr().add(i), value) }
        }
    }

    /// A volatile load (0 outside every allocation): the VMM writes these behind the
    /// compiler's back.
    pub fn read(&self, addr: u64) -> u32 {
        match self.find(addr) {
            // SAFETY: `i` is in bounds of allocation `a`.
            Some((a, i)) => unsafe { std::ptr::read_volatile(self.allocations[a].as_ptr().add(i)) },
            None => 0,
        }
    }
}

/// A failed run.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SessionError {
    /// The driver failed `call` with `status`.
    Driver {
        /// The IOCTL's name.
        call: &'static str,
        /// The NTSTATUS.
        status: NtStatus,
    },
    /// The driver returned fewer bytes than `call`'s reply.
    ShortReply(&'static str),
    /// Waiting (the command) failed.
    Wait(String),
    /// The process could not prepare the run (privilege, counters).
    Host(String),
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::Driver { call, status } => {
                write!(f, "{} failed: {}", call, crate::ntstatus::text(*status))
            }
            SessionError::ShortReply(call) => {
                write!(f, "{}: the driver's reply is too short", call)
            }
            SessionError::Wait(why) | SessionError::Host(why) => write!(f, "{}", why),
        }
    }
}

impl std::error::Error for SessionError {}

fn call<D: Device + ?Sized, R: Wire>(
    d: &mut D,
    name: &'static str,
    code: u32,
    input: &[u8],
) -> Result<R, SessionError> {
    let mut out = [0u8; 64];
    let n = d
        .ioctl(code, input, &mut out[..R::SIZE])
        .map_err(|status| SessionError::Driver { call: name, status })?;
    if n < R::SIZE {
        return Err(SessionError::ShortReply(name));
    }
    R::decode(&out).ok_or(SessionError::ShortReply(name))
}

fn call_no_reply<D: Device + ?Sized>(
    d: &mut D,
    name: &'static str,
    code: u32,
    input: &[u8],
) -> Result<(), SessionError> {
    d.ioctl(code, input, &mut [])
        .map(|_| ())
        .map_err(|status| SessionError::Driver { call: name, status })
}

fn bytes<W: Wire>(w: &W) -> Vec<u8> {
    let mut v = vec![0u8; W::SIZE];
    let _ = w.encode(&mut v);
    v
}

/// QUERY_INFO: where the driver found the doorbell, and the VMM's limits and sources.
pub fn query_info<D: Device + ?Sized>(d: &mut D) -> Result<(DriverInfo, InfoReply), SessionError> {
    let mut out = [0u8; 48];
    let n = d
        .ioctl(IOCTL_HVPROF_QUERY_INFO, &[], &mut out)
        .map_err(|status| SessionError::Driver {
            call: "QUERY_INFO",
            status,
        })?;
    if n < out.len() {
        return Err(SessionError::ShortReply("QUERY_INFO"));
    }
    let driver = DriverInfo::decode(&out).ok_or(SessionError::ShortReply("QUERY_INFO"))?;
    let vmm = InfoReply::decode(&out[DriverInfo::SIZE..])
        .ok_or(SessionError::ShortReply("QUERY_INFO"))?;
    Ok((driver, vmm))
}

/// READ_STATS.
pub fn read_stats<D: Device + ?Sized>(d: &mut D) -> Result<StatsReply, SessionError> {
    call(d, "READ_STATS", IOCTL_HVPROF_READ_STATS, &[])
}

/// SET_INTERVAL: returns the interval now in force.
pub fn set_interval<D: Device + ?Sized>(
    d: &mut D,
    source: u32,
    interval: u32,
) -> Result<u32, SessionError> {
    let input = bytes(&plan::set_interval_in(source, interval));
    call::<_, IntervalReply>(d, "SET_INTERVAL", IOCTL_HVPROF_SET_INTERVAL, &input)
        .map(|r| r.interval)
}

/// QUERY_INTERVAL.
pub fn query_interval<D: Device + ?Sized>(d: &mut D, source: u32) -> Result<u32, SessionError> {
    let input = bytes(&plan::query_interval_in(source));
    call::<_, IntervalReply>(d, "QUERY_INTERVAL", IOCTL_HVPROF_QUERY_INTERVAL, &input)
        .map(|r| r.interval)
}

/// What a run collected.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Outcome {
    /// One counter per bucket.
    pub counts: Vec<u32>,
    /// The source's interval during the run.
    pub interval: u32,
    /// Milliseconds between START and STOP.
    pub duration_ms: u64,
    /// Pages the VMM pinned.
    pub pinned_pages: u32,
}

/// Writes one counter in every page of `n` counters at `buffer`. A large zeroed allocation is
/// demand-zero memory that no page table maps yet, and the VMM's CREATE check wants every page
/// of the buffer mapped writable now (NtCreateProfile's probe would have faulted them in).
fn touch_pages<H: Host + ?Sized>(host: &mut H, buffer: u64, n: usize) {
    let end = buffer + 4 * n as u64;
    let mut at = buffer;
    while at < end {
        host.write_u32(at, 0);
        at = (at & !0xFFF) + 0x1000;
    }
}

/// Runs a profile: optional SET_INTERVAL, CREATE, START, `wait()`, STOP, CLOSE. The counters
/// live in this process; the driver locks them and the VMM counts into them while started. On
/// any failure after CREATE the object is closed (which also stops it).
pub fn run<D, H, W>(
    d: &mut D,
    host: &mut H,
    plan: &Plan,
    interval: Option<u32>,
    wait: W,
) -> Result<Outcome, SessionError>
where
    D: Device + ?Sized,
    H: Host + ?Sized,
    W: FnOnce() -> Result<(), String>,
{
    // Windows counts only enabled privileges, and an elevated administrator holds this one
    // disabled: without it the driver treats the caller as restricted. Not held: run on as a
    // restricted caller (the driver's statuses say what that refuses).
    host.enable_profile_privilege()
        .map_err(SessionError::Host)?;
    if let Some(i) = interval {
        set_interval(d, plan.source, i)?;
    }
    let interval = query_interval(d, plan.source)?;
    let buffer = host
        .alloc_counters(plan.buckets)
        .map_err(SessionError::Host)?;
    touch_pages(host, buffer, plan.buckets);
    let create = bytes(&plan.create_in(buffer));
    let created: CreateReply = call(d, "CREATE", IOCTL_HVPROF_CREATE, &create)?;
    let handle = bytes(&plan::handle_in(created.handle));
    let started = Instant::now();
    let result = call::<_, StartReply>(d, "START", IOCTL_HVPROF_START, &handle).and_then(|s| {
        let waited = wait().map_err(SessionError::Wait);
        let stopped = call_no_reply(d, "STOP", IOCTL_HVPROF_STOP, &handle);
        waited.and(stopped).map(|()| s.pinned_pages)
    });
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let closed = call_no_reply(d, "CLOSE", IOCTL_HVPROF_CLOSE, &handle);
    let pinned_pages = result?;
    closed?;
    // The VMM wrote the counters behind the compiler's back (through the pages the driver
    // locked); read them afresh now that STOP has returned and nothing writes them any more.
    let counts = (0..plan.buckets as u64)
        .map(|i| host.read_u32(buffer + 4 * i))
        .collect();
    Ok(Outcome {
        counts,
        interval,
        duration_ms,
        pinned_pages,
    })
}

#[cfg(test)]
mod tests;
