//! Every signal hvprof handles, in one place.
//!
//! - **Kicks** (`SIGRTMIN`): make a vCPU thread leave `KVM_RUN` so it looks at its requests or
//!   its timer settings ([`kick`]). Other threads reach a vCPU only through a [`KickTable`]
//!   slot the vCPU thread fills itself while it runs.
//! - **Ticks** (`SIGRTMIN + 1`): a vCPU's own sampling timer fired ([`tick`]); the handler
//!   counts the tick and kicks the thread it runs on.
//! - **Overflows** (`SIGRTMIN + 2`, and SIGIO when the kernel's signal queue is full): one of
//!   a vCPU's perf events overflowed ([`overflow`]); the handler counts it for that event and
//!   kicks the thread it runs on.
//! - **Stop signals** (SIGINT, SIGTERM, SIGHUP, SIGQUIT): blocked in every thread from the
//!   start of a run's subcommand, before any input is opened, and read from a signalfd by the
//!   event loop ([`stop`]), so they end the run cleanly.
//!
//! This module sits below everything that sends or receives these signals (the sampler, the
//! profiler, the vCPUs, the VM): it knows nothing about any of them.

pub mod kick;
pub mod overflow;
pub mod stop;
pub mod tick;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

pub use kick::KickTable;
pub use stop::StopSignals;

/// The signal used for kicks.
pub fn kick_signal() -> i32 {
    SIGRTMIN()
}

/// The sampling timers' signal.
pub fn tick_signal() -> i32 {
    SIGRTMIN() + 1
}

/// The signal perf events send their vCPU thread when they overflow.
pub fn overflow_signal() -> i32 {
    SIGRTMIN() + 2
}

/// A signal handler could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {what} signal handler")]
pub struct HandlerError {
    what: &'static str,
    #[source]
    source: std::io::Error,
}

/// Installs the kick, tick and overflow handlers. Idempotent: installing again replaces a handler with
/// itself.
pub fn install_handlers() -> Result<(), HandlerError> {
    let install = |what, signal, handler| {
        register_signal_handler(signal, handler).map_err(|e| HandlerError {
            what,
            source: std::io::Error::from_raw_os_error(e.errno()),
        })
    };
    install("kick", kick_signal(), kick::on_kick)?;
    install("sampling tick", tick_signal(), tick::on_tick)?;
    install("perf overflow", overflow_signal(), overflow::on_overflow)?;
    install("SIGIO", libc::SIGIO, overflow::on_sigio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kicks_and_ticks_use_distinct_real_time_signals() {
        assert!(kick_signal() >= libc::SIGRTMIN());
        assert!(tick_signal() <= libc::SIGRTMAX());
        assert!(overflow_signal() <= libc::SIGRTMAX());
        assert_ne!(kick_signal(), tick_signal());
        assert_ne!(tick_signal(), overflow_signal());
    }

    #[test]
    fn handlers_install_more_than_once() {
        install_handlers().unwrap();
        install_handlers().unwrap();
    }
}
