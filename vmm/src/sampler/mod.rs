//! The sampling timer: a thread that ticks at the ProfileTime interval in force and, on each
//! tick, asks every vCPU that some started object covers for a sample and kicks it. The vCPU
//! takes the sample itself when its KVM_RUN returns (registers from the sync-regs area), so a
//! vCPU that is halted or running with interrupts disabled is sampled like any other.
//!
//! One timer serves every vCPU: intervals are global per source, as in Windows.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::timerfd::TimerFd;

use crate::profiler::Profiler;
use crate::vcpu::VcpuRequester;

/// The running sampler thread.
pub struct Sampler {
    stop: EventFd,
    thread: Option<JoinHandle<()>>,
}

/// ProfileTime's unit is 100 ns.
pub fn interval_duration(interval_100ns: u32) -> Duration {
    Duration::from_nanos(u64::from(interval_100ns.max(1)) * 100)
}

impl Sampler {
    /// Starts sampling `vcpus` for `profiler`.
    pub fn start(profiler: Arc<Profiler>, vcpus: Vec<VcpuRequester>) -> std::io::Result<Self> {
        let stop = EventFd::new(EFD_NONBLOCK)?;
        let stop_fd = stop.try_clone()?;
        let mut timer = TimerFd::new().map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        let thread = std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || {
                if let Err(e) = run(&profiler, &vcpus, &mut timer, &stop_fd) {
                    log::error!("sampler stopped: {e}");
                }
            })?;
        Ok(Sampler {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("sampler thread panicked");
            }
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn arm(timer: &mut TimerFd, interval: u32) -> std::io::Result<()> {
    let d = interval_duration(interval);
    timer
        .reset(d, Some(d))
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
}

fn run(
    profiler: &Profiler,
    vcpus: &[VcpuRequester],
    timer: &mut TimerFd,
    stop: &EventFd,
) -> std::io::Result<()> {
    arm(timer, profiler.time_interval())?;
    let mut fds = [
        libc::pollfd {
            fd: timer.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: profiler.interval_changed().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[2].revents != 0 {
            return Ok(());
        }
        if fds[1].revents != 0 {
            let _ = profiler.interval_changed().read();
            arm(timer, profiler.time_interval())?;
        }
        if fds[0].revents != 0 {
            let expirations = timer
                .wait()
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
            tick(profiler, vcpus, expirations);
        }
    }
}

/// One timer tick (`expirations` > 1 when the thread fell behind: the extra ticks are lost).
fn tick(profiler: &Profiler, vcpus: &[VcpuRequester], expirations: u64) {
    for vcpu in vcpus {
        let v = vcpu.index();
        if !profiler.is_sampled(v) {
            continue;
        }
        if expirations > 1 {
            profiler.count_lost(v, expirations - 1);
        }
        if profiler.request_sample(v) {
            vcpu.kick();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_unit_is_100ns() {
        assert_eq!(
            interval_duration(39_063),
            Duration::from_micros(3906) + Duration::from_nanos(300)
        );
        assert_eq!(interval_duration(10_000), Duration::from_millis(1));
    }
}
