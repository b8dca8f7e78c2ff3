//! The VMM thread's event loop: event-manager subscribers for standard input (to COM1), the
//! stop signals (SIGINT/SIGTERM), the timeout, the hang watchdog, the stop request itself,
//! and the virtio queues' notification eventfds (disk I/O is served on this thread).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_manager::{EventManager, EventOps, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::timerfd::TimerFd;

use crate::outcome::{RunOutcome, StopSignal};
use crate::seccomp::{Seccomp, ThreadKind};
use crate::signals::StopSignals;
use crate::vcpu::{guest_is_hung, Request, VcpuRequester};
use devices::serial::SerialDevice;
use devices::virtio::notify::QueueEventWatch;

const EV_STDIN: u32 = 1;
const EV_SERIAL_DRAINED: u32 = 2;
const EV_SIGNAL: u32 = 3;
const EV_STOP: u32 = 4;
const EV_TIMEOUT: u32 = 5;
const EV_WATCHDOG: u32 = 6;

/// How long the watchdog waits for all vCPUs to answer a probe.
const PROBE_WAIT: Duration = Duration::from_millis(200);

/// Forwards standard input to COM1, holding back what the UART's FIFO cannot take yet.
struct ConsoleInput {
    serial: Arc<Mutex<SerialDevice>>,
    _tty: Option<TtyMode>,
}

impl MutEventSubscriber for ConsoleInput {
    fn init(&mut self, ops: &mut EventOps) {
        let drained = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = ops.add(Events::with_data(
            drained.drained_event(),
            EV_SERIAL_DRAINED,
            EventSet::IN,
        )) {
            log::warn!("serial input disabled: {e:?}");
            return;
        }
        drop(drained);
        // epoll refuses regular files and /dev/null; then there is simply no input.
        if let Err(e) = ops.add(Events::with_data(&std::io::stdin(), EV_STDIN, EventSet::IN)) {
            log::debug!("standard input is not pollable ({e:?}); COM1 gets no input");
        }
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        match events.data() {
            EV_STDIN => {
                let mut buf = [0u8; 512];
                match std::io::stdin().lock().read(&mut buf) {
                    Ok(0) | Err(_) => {
                        // End of input: stop watching it.
                        let _ = ops.remove(Events::with_data(
                            &std::io::stdin(),
                            EV_STDIN,
                            EventSet::IN,
                        ));
                    }
                    Ok(n) => self
                        .serial
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .queue_input(&buf[..n]),
                }
            }
            EV_SERIAL_DRAINED => {
                let mut serial = self.serial.lock().unwrap_or_else(|e| e.into_inner());
                let _ = serial.drained_event().read();
                serial.flush_input();
            }
            _ => {}
        }
    }
}

/// Non-canonical, no-echo mode on an interactive terminal, restored on drop. Ctrl-C still
/// reaches hvprof as SIGINT.
struct TtyMode(libc::termios);

impl TtyMode {
    fn enter() -> Option<Self> {
        let fd = std::io::stdin().as_raw_fd();
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(fd) } != 1 {
            return None;
        }
        // SAFETY: termios is plain data; tcgetattr fills it.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `saved` is a valid termios to fill.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO);
        // SAFETY: `raw` is a valid termios derived from the current one.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) };
        Some(TtyMode(saved))
    }
}

impl Drop for TtyMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter`.
        unsafe { libc::tcsetattr(std::io::stdin().as_raw_fd(), libc::TCSANOW, &self.0) };
    }
}

/// SIGINT/SIGTERM end the run.
struct SignalWatch {
    signals: StopSignals,
    stop: Arc<StopSignal>,
}

impl MutEventSubscriber for SignalWatch {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::with_data(&self.signals, EV_SIGNAL, EventSet::IN)) {
            log::error!("cannot watch SIGINT/SIGTERM: {e:?}");
        }
    }

    fn process(&mut self, _events: Events, _ops: &mut EventOps) {
        while let Some(sig) = self.signals.read() {
            self.stop.request(RunOutcome::Signalled(sig));
        }
    }
}

/// The stop request, the timeout and the hang watchdog.
struct RunControl {
    stop: Arc<StopSignal>,
    timeout: Option<(TimerFd, Duration)>,
    watchdog: TimerFd,
    vcpus: Vec<VcpuRequester>,
}

impl RunControl {
    fn probe_for_hang(&self) {
        let (tx, rx) = channel();
        let asked = self
            .vcpus
            .iter()
            .filter(|v| v.request(Request::Probe(tx.clone())))
            .count();
        let deadline = Instant::now() + PROBE_WAIT;
        let mut probes = Vec::with_capacity(asked);
        while probes.len() < asked {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(p) => probes.push(p),
                Err(_) => return, // a vCPU is busy in a device; look again next period
            }
        }
        if asked == self.vcpus.len() && guest_is_hung(&probes) {
            log::debug!("hang probes: {probes:?}");
            self.stop.request(RunOutcome::Hung);
        }
    }
}

impl MutEventSubscriber for RunControl {
    fn init(&mut self, ops: &mut EventOps) {
        let mut add = |e: Events| {
            if let Err(err) = ops.add(e) {
                log::error!("event loop: cannot watch an event: {err:?}");
            }
        };
        add(Events::with_data(self.stop.event(), EV_STOP, EventSet::IN));
        add(Events::with_data(&self.watchdog, EV_WATCHDOG, EventSet::IN));
        if let Some((t, _)) = &self.timeout {
            add(Events::with_data(t, EV_TIMEOUT, EventSet::IN));
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        match events.data() {
            EV_STOP => {
                let _ = self.stop.event().read();
            }
            EV_TIMEOUT => {
                if let Some((t, d)) = &mut self.timeout {
                    let _ = t.wait();
                    self.stop.request(RunOutcome::TimedOut(*d));
                }
            }
            EV_WATCHDOG => {
                let _ = self.watchdog.wait();
                self.probe_for_hang();
            }
            _ => {}
        }
    }
}

/// What the loop needs.
pub struct LoopParams {
    pub stop: Arc<StopSignal>,
    pub signals: StopSignals,
    pub serial: Arc<Mutex<SerialDevice>>,
    pub serial_input: bool,
    pub vcpus: Vec<VcpuRequester>,
    /// `--timeout`, counted from `started`.
    pub timeout: Option<Duration>,
    /// When the run began: before the VM was built, so set-up time counts against the timeout.
    pub started: Instant,
    pub watchdog_period: Duration,
    /// Virtio devices' queue eventfds (`KVM_IOEVENTFD`): their queues are served here.
    pub queue_watches: Vec<QueueEventWatch>,
    /// Whether the loop's thread filters its system calls once its set-up is done.
    pub seccomp: Seccomp,
}

/// What is left of `--timeout` once the run has been going for `elapsed` (the VM's set-up):
/// never zero, which would disarm the timer, so a set-up that used the whole timeout still
/// ends the run, at once.
fn timeout_left(timeout: Duration, elapsed: Duration) -> Duration {
    timeout
        .saturating_sub(elapsed)
        .max(Duration::from_micros(1))
}

/// Runs the event loop until a stop is requested.
pub fn run_until_stopped(p: LoopParams) -> std::io::Result<()> {
    let mut em = EventManager::<Box<dyn MutEventSubscriber>>::new()
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    let timeout = match p.timeout {
        Some(d) => {
            let mut t = TimerFd::new()?;
            t.reset(timeout_left(d, p.started.elapsed()), None)?;
            Some((t, d))
        }
        None => None,
    };
    let mut watchdog = TimerFd::new()?;
    watchdog.reset(p.watchdog_period, Some(p.watchdog_period))?;
    em.add_subscriber(Box::new(RunControl {
        stop: p.stop.clone(),
        timeout,
        watchdog,
        vcpus: p.vcpus,
    }));
    em.add_subscriber(Box::new(SignalWatch {
        signals: p.signals,
        stop: p.stop.clone(),
    }));
    for w in p.queue_watches {
        em.add_subscriber(Box::new(w));
    }
    if p.serial_input {
        em.add_subscriber(Box::new(ConsoleInput {
            serial: p.serial,
            _tty: TtyMode::enter(),
        }));
    }
    crate::seccomp::install(ThreadKind::EventLoop, p.seccomp)
        .map_err(|e| std::io::Error::other(report::chain::with_causes(&e)))?;
    while !p.stop.is_requested() {
        em.run_with_timeout(1000)
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_counts_the_set_up_and_a_spent_one_still_fires() {
        let s = Duration::from_secs;
        assert_eq!(timeout_left(s(10), s(3)), s(7));
        assert_eq!(timeout_left(s(1), s(3)), Duration::from_micros(1));
        assert_eq!(timeout_left(s(1), s(1)), Duration::from_micros(1));
    }
}
