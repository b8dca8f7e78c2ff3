//! A perf event opened on the calling thread (a vCPU thread), whose counter overflows are
//! delivered as a signal to that very thread: `F_SETOWN_EX` with `F_OWNER_TID`, `F_SETSIG`,
//! `O_ASYNC`. The kernel queues one signal per overflow, and the handler (`signals::overflow`)
//! tells the events of one thread apart by the descriptor the signal names.
//!
//! Every event counts with `exclude_host`: a hardware counter then counts only while the
//! thread runs guest code. Software clocks ignore the bit and count the thread's whole time
//! on a CPU, exits included.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::bindings::{perf_event_attr, PERF_FLAG_FD_CLOEXEC};
use perf_event_open_sys::{ioctls, perf_event_open};
use vmm_sys_util::syscall::SyscallReturnCode;

use super::events::EventSpec;
use crate::signals::overflow;

/// The period an event is opened with, before anything arms it (it is opened disabled).
pub(super) const UNARMED_PERIOD: u64 = 1 << 40;

/// One perf event counting the calling thread.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    armed: Option<u64>,
}

pub(super) fn attr(spec: &EventSpec, period: u64) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: u32::try_from(std::mem::size_of::<perf_event_attr>()).unwrap_or(0),
        type_: spec.kind,
        config: spec.config,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period;
    attr.set_disabled(1);
    attr.set_exclude_host(1);
    attr
}

fn open(spec: &EventSpec, period: u64) -> io::Result<OwnedFd> {
    open_attr(attr(spec, period))
}

/// Opens the event `attr` describes on the calling thread (pid 0, any CPU, no group).
pub(super) fn open_attr(mut attr: perf_event_attr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose size field is its
    // own size; pid 0 / cpu -1 / no group names the calling thread on any CPU.
    let fd = unsafe { perf_event_open(&mut attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC.into()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor this process owns and nothing else refers to.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `spec` on the calling thread and closes it again: whether this host and this user
/// may sample it on a vCPU thread.
pub fn try_open(spec: &EventSpec) -> io::Result<()> {
    open(spec, UNARMED_PERIOD).map(drop)
}

/// Arms the event `fd` to overflow every `period` events, or disarms it (`None`).
pub(super) fn arm(fd: RawFd, period: Option<u64>) -> io::Result<()> {
    match period {
        Some(p) => {
            let p = p.max(1);
            // SAFETY: PERIOD reads a u64 through the pointer, which is live for the call.
            SyscallReturnCode(unsafe { ioctls::PERIOD(fd, std::ptr::addr_of!(p) as u64) })
                .into_empty_result()?;
            // SAFETY: RESET and ENABLE take no argument beyond the flag word.
            SyscallReturnCode(unsafe { ioctls::RESET(fd, 0) }).into_empty_result()?;
            // SAFETY: as above.
            SyscallReturnCode(unsafe { ioctls::ENABLE(fd, 0) }).into_empty_result()
        }
        // SAFETY: as above.
        None => SyscallReturnCode(unsafe { ioctls::DISABLE(fd, 0) }).into_empty_result(),
    }
}

impl PerfEvent {
    /// Opens `spec` on the calling thread, disabled; each overflow, once armed, sends the
    /// overflow signal to this thread.
    pub fn open_on_current_thread(spec: &EventSpec) -> io::Result<Self> {
        let fd = open(spec, UNARMED_PERIOD)?;
        overflow::route_to_current_thread(fd.as_raw_fd())?;
        Ok(PerfEvent { fd, armed: None })
    }

    /// The descriptor, which overflow signals name.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Arms the event to overflow every `period` events (nanoseconds for a clock), or disarms
    /// it (`None`); does nothing if that is already its setting.
    pub fn set(&mut self, period: Option<u64>) -> io::Result<()> {
        if self.armed == period {
            return Ok(());
        }
        arm(self.fd(), period)?;
        self.armed = period;
        Ok(())
    }

    /// The count since the event was last armed.
    pub fn count(&self) -> io::Result<u64> {
        let mut value = 0u64;
        // SAFETY: reading 8 bytes into `value`, a live u64, from a live descriptor.
        let n = unsafe { libc::read(self.fd(), std::ptr::addr_of_mut!(value).cast(), 8) };
        if n == 8 {
            Ok(value)
        } else if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Err(io::Error::from(io::ErrorKind::UnexpectedEof))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::events;

    fn task_clock() -> EventSpec {
        events::by_name(events::TASK_CLOCK)
            .and_then(|e| e.spec(events::Vendor::host()))
            .unwrap()
    }

    /// Hosts where perf is closed to this user skip (the probe's tests cover that answer).
    fn perf_open() -> bool {
        match try_open(&task_clock()) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("perf events unavailable here ({e}); skipping");
                false
            }
        }
    }

    #[test]
    fn a_clock_overflows_into_signals_to_its_own_thread() {
        if !perf_open() {
            return;
        }
        crate::signals::install_handlers().unwrap();
        let (ticks, count) = std::thread::spawn(|| {
            let mut e = PerfEvent::open_on_current_thread(&task_clock()).unwrap();
            let slot = overflow::watch(e.fd()).unwrap();
            e.set(Some(1_000_000)).unwrap();
            // Spin until five overflows arrived: the clock advances only while this thread
            // runs, so however loaded the host, it gets there.
            let mut n = 0;
            while n < 5 {
                n += overflow::take(slot);
            }
            e.set(None).unwrap();
            let count = e.count().unwrap();
            overflow::unwatch(slot);
            (n, count)
        })
        .join()
        .unwrap();
        assert!(ticks >= 5);
        // Five periods of 1 ms of this thread's CPU time passed.
        assert!(count >= 5_000_000, "{count}");
        // Nothing reached the thread that did not open the event.
        assert_eq!(overflow::stray(), 0);
    }

    #[test]
    fn a_disarmed_event_stays_quiet() {
        if !perf_open() {
            return;
        }
        crate::signals::install_handlers().unwrap();
        std::thread::spawn(|| {
            let e = PerfEvent::open_on_current_thread(&task_clock()).unwrap();
            let slot = overflow::watch(e.fd()).unwrap();
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(20) {}
            assert_eq!(overflow::take(slot), 0);
            assert_eq!(e.count().unwrap(), 0, "opened disabled");
            overflow::unwatch(slot);
        })
        .join()
        .unwrap();
    }
}
