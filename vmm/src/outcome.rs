//! How a run ends, the process exit status for each ending, and the one-shot signal that
//! devices, vCPUs and the event loop use to ask for the end.
//!
//! The devices crate knows nothing of runs, users or hosts: what a guest asks through a device
//! ([`GuestStop`]) becomes a [`RunOutcome`] here, and whose fault each of that crate's errors
//! is, is decided at the end of this file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use devices::pci::PciError;
use devices::stop::{GuestStop, StopRequest};
use devices::virtio::block::disk::DiskError;
use devices::virtio::block::AttachError;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Exit status: usage or configuration error.
pub const STATUS_CONFIG_ERROR: i32 = 2;
/// Exit status: the guest crashed (triple fault, KVM shutdown, internal error).
pub const STATUS_GUEST_CRASHED: i32 = 4;
/// Exit status: every vCPU halted with interrupts disabled.
pub const STATUS_GUEST_HUNG: i32 = 6;
/// Exit status: `--timeout` reached.
pub const STATUS_TIMEOUT: i32 = 8;
/// Exit status: SIGINT, SIGTERM, SIGHUP or SIGQUIT.
pub const STATUS_SIGNALLED: i32 = 10;
/// Exit status: KVM or the host failed.
pub const STATUS_HOST_ERROR: i32 = 12;
/// Exit status: a thread made a system call its seccomp filter does not allow.
pub const STATUS_SECCOMP: i32 = 14;

/// Who can mend an error that ends hvprof outside the guest's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The user: a bad argument, a missing or malformed file, a limit exceeded.
    User,
    /// The host: KVM, the kernel or a host resource failed.
    Host,
}

impl Fault {
    /// The process exit status: [`STATUS_CONFIG_ERROR`] or [`STATUS_HOST_ERROR`].
    pub fn exit_status(self) -> i32 {
        match self {
            Fault::User => STATUS_CONFIG_ERROR,
            Fault::Host => STATUS_HOST_ERROR,
        }
    }
}

/// An error that says itself whose fault it is. Each error type implements it beside its
/// definition with an exhaustive match, so a new variant cannot be added without deciding;
/// an error that wraps another asks the inner one. The devices crate's errors are the
/// exception: that crate has no users or hosts, so they are blamed at the end of this file
/// (still exhaustively: a new variant there does not compile here until it is decided).
pub trait Blame {
    /// Whose fault this error is.
    fn fault(&self) -> Fault;
}

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The guest wrote `value` to the isa-debug-exit port.
    DebugExit(u32),
    /// The guest asked for a reset (i8042 command 0xFE or the ACPI reset register).
    Reset,
    /// The guest powered off.
    PowerOff,
    /// A vCPU hit a triple fault or another shutdown condition.
    TripleFault {
        /// The vCPU index.
        vcpu: usize,
        /// RIP at the time, when known.
        rip: Option<u64>,
    },
    /// KVM could not run a vCPU (emulation failure and other internal errors).
    InternalError {
        /// The vCPU index.
        vcpu: usize,
        /// A description with the suberror, RIP and instruction bytes when known.
        detail: String,
    },
    /// Every vCPU is halted with interrupts disabled: nothing can wake the guest.
    Hung,
    /// `--timeout` elapsed.
    TimedOut(Duration),
    /// SIGINT, SIGTERM, SIGHUP or SIGQUIT.
    Signalled(i32),
    /// The host side ended the run on purpose (a benchmark that is done, an API shutdown).
    Stopped(String),
    /// The host side failed (a KVM ioctl, a thread).
    HostError(String),
}

impl RunOutcome {
    /// The process exit status for this outcome. isa-debug-exit statuses are odd, exactly as
    /// QEMU's `(v << 1) | 1`; hvprof's own are even.
    pub fn exit_status(&self) -> i32 {
        match self {
            // The OS keeps the low 8 bits of an exit status, as for QEMU.
            RunOutcome::DebugExit(v) => i32::from_ne_bytes(((v << 1) | 1).to_ne_bytes()),
            RunOutcome::Reset | RunOutcome::PowerOff | RunOutcome::Stopped(_) => 0,
            RunOutcome::TripleFault { .. } | RunOutcome::InternalError { .. } => {
                STATUS_GUEST_CRASHED
            }
            RunOutcome::Hung => STATUS_GUEST_HUNG,
            RunOutcome::TimedOut(_) => STATUS_TIMEOUT,
            RunOutcome::Signalled(_) => STATUS_SIGNALLED,
            RunOutcome::HostError(_) => STATUS_HOST_ERROR,
        }
    }

    /// True when the outcome is a failure hvprof reports as an error.
    pub fn is_error(&self) -> bool {
        !matches!(
            self,
            RunOutcome::DebugExit(_)
                | RunOutcome::Reset
                | RunOutcome::PowerOff
                | RunOutcome::Stopped(_)
        )
    }
}

impl std::fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunOutcome::DebugExit(v) => {
                write!(
                    f,
                    "guest wrote {v:#x} to isa-debug-exit (status {})",
                    self.exit_status()
                )
            }
            RunOutcome::Reset => f.write_str("guest requested a reset"),
            RunOutcome::PowerOff => f.write_str("guest powered off"),
            RunOutcome::TripleFault {
                vcpu,
                rip: Some(rip),
            } => {
                write!(
                    f,
                    "guest triple fault on vCPU {vcpu} (shutdown exit, RIP {rip:#x})"
                )
            }
            RunOutcome::TripleFault { vcpu, rip: None } => {
                write!(f, "guest triple fault on vCPU {vcpu} (shutdown exit)")
            }
            RunOutcome::InternalError { vcpu, detail } => {
                write!(f, "KVM internal error on vCPU {vcpu}: {detail}")
            }
            RunOutcome::Hung => {
                f.write_str("guest hung: every vCPU is halted with interrupts disabled")
            }
            RunOutcome::TimedOut(d) => write!(f, "guest timed out after {} s", d.as_secs_f64()),
            RunOutcome::Signalled(sig) => match stop_signal_name(*sig) {
                Some(name) => write!(f, "stopped by {name}"),
                None => write!(f, "stopped by signal {sig}"),
            },
            RunOutcome::Stopped(by) => write!(f, "stopped by {by}"),
            RunOutcome::HostError(e) => write!(f, "host error: {e}"),
        }
    }
}

/// The name of a signal that stops a run.
fn stop_signal_name(sig: i32) -> Option<&'static str> {
    match sig {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        libc::SIGQUIT => Some("SIGQUIT"),
        _ => None,
    }
}

impl From<GuestStop> for RunOutcome {
    fn from(stop: GuestStop) -> Self {
        match stop {
            GuestStop::DebugExit(v) => RunOutcome::DebugExit(v),
            GuestStop::Reset => RunOutcome::Reset,
            GuestStop::PowerOff => RunOutcome::PowerOff,
        }
    }
}

/// A one-shot request to end the run. The first request wins; later ones are ignored.
#[derive(Debug)]
pub struct StopSignal {
    requested: AtomicBool,
    outcome: Mutex<Option<RunOutcome>>,
    event: EventFd,
}

impl StopSignal {
    /// A new, unrequested signal.
    pub fn new() -> std::io::Result<Self> {
        Ok(StopSignal {
            requested: AtomicBool::new(false),
            outcome: Mutex::new(None),
            event: EventFd::new(EFD_NONBLOCK)?,
        })
    }

    /// Requests the end of the run. Returns false if another request came first.
    pub fn request(&self, outcome: RunOutcome) -> bool {
        let mut slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(outcome);
        self.requested.store(true, Ordering::Release);
        // A failed eventfd write leaves the flag set; the loop also polls it.
        let _ = self.event.write(1);
        true
    }

    /// True once a request was made.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// The requested outcome, if any.
    pub fn outcome(&self) -> Option<RunOutcome> {
        self.outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The eventfd that becomes readable on request.
    pub fn event(&self) -> &EventFd {
        &self.event
    }
}

/// The devices end the run through the stop signal: the guest's request is the outcome.
impl StopRequest for StopSignal {
    fn request_stop(&self, stop: GuestStop) {
        self.request(stop.into());
    }
}

// ---- Whose fault the devices crate's errors are.

impl Blame for AttachError {
    fn fault(&self) -> Fault {
        match self {
            AttachError::Disk(e) => e.fault(),
            AttachError::Pci(e) => e.fault(),
            AttachError::Config(_) => Fault::Host,
        }
    }
}

impl Blame for DiskError {
    /// The image the user named cannot be used as asked, except for the overlay, which is
    /// the host's temporary directory failing.
    fn fault(&self) -> Fault {
        match self {
            DiskError::Open(..)
            | DiskError::NotAFile(_)
            | DiskError::TooSmall(..)
            | DiskError::Locked(..)
            | DiskError::Twice(..)
            | DiskError::Format(..)
            | DiskError::Qcow2(..)
            | DiskError::Backing(..)
            | DiskError::BackingLocked(..)
            | DiskError::BackingLoop(..)
            | DiskError::ChainTooLong(..)
            | DiskError::Encrypted(..)
            | DiskError::Header(..)
            | DiskError::ExternalData(_) => Fault::User,
            DiskError::Overlay(..) => Fault::Host,
        }
    }
}

impl Blame for PciError {
    fn fault(&self) -> Fault {
        match self {
            // Only more devices than bus 0 has slots for, which the user asked for.
            PciError::NoFreeSlot => Fault::User,
            PciError::InUse(..) | PciError::NoBarSpace(_) | PciError::Bus(_) => Fault::Host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_exit_status_matches_qemu() {
        assert_eq!(RunOutcome::DebugExit(0x10).exit_status(), 0x21);
        assert_eq!(RunOutcome::DebugExit(0).exit_status(), 1);
    }

    #[test]
    fn own_statuses_are_even_and_distinct() {
        let all = [
            STATUS_CONFIG_ERROR,
            STATUS_GUEST_CRASHED,
            STATUS_GUEST_HUNG,
            STATUS_TIMEOUT,
            STATUS_SIGNALLED,
            STATUS_HOST_ERROR,
        ];
        for (i, s) in all.iter().enumerate() {
            assert_eq!(s % 2, 0);
            assert!(!all[i + 1..].contains(s));
        }
    }

    #[test]
    fn a_stop_signal_is_named_in_the_outcome() {
        let hup = RunOutcome::Signalled(libc::SIGHUP);
        assert_eq!(hup.to_string(), "stopped by SIGHUP");
        assert_eq!(hup.exit_status(), STATUS_SIGNALLED);
        assert_eq!(
            RunOutcome::Signalled(libc::SIGQUIT).to_string(),
            "stopped by SIGQUIT"
        );
        assert_eq!(
            RunOutcome::Signalled(64).to_string(),
            "stopped by signal 64"
        );
    }

    #[test]
    fn a_guest_stop_through_a_device_is_the_same_outcome() {
        let s = StopSignal::new().unwrap();
        s.request_stop(GuestStop::DebugExit(0x10));
        s.request_stop(GuestStop::Reset);
        assert_eq!(s.outcome(), Some(RunOutcome::DebugExit(0x10)));
        assert_eq!(s.outcome().unwrap().exit_status(), 0x21);
        assert_eq!(RunOutcome::from(GuestStop::Reset), RunOutcome::Reset);
        assert_eq!(RunOutcome::from(GuestStop::PowerOff), RunOutcome::PowerOff);
    }

    #[test]
    fn first_stop_request_wins() {
        let s = StopSignal::new().unwrap();
        assert!(!s.is_requested());
        assert!(s.request(RunOutcome::Reset));
        assert!(!s.request(RunOutcome::PowerOff));
        assert_eq!(s.outcome(), Some(RunOutcome::Reset));
    }
}
