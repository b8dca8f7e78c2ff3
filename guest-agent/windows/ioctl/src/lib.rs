//! The contract between the Windows guest agent's two halves: the kernel driver `hvprof.sys`
//! and the command-line tool `hvprof-agent.exe` (docs/windows.md, "IOCTLs").
//!
//! `no_std`, no allocation, compiles with Rust 1.63 (the Windows toolchain) and 1.95 (the
//! workspace, where its unit tests run on Linux). Both halves link it, so the control codes and
//! the byte layouts have one definition:
//!
//! * [`codes`]: device names, the ACPI hardware id, the `CTL_CODE`s.
//! * [`messages`]: the METHOD_BUFFERED input and output layouts of every IOCTL.
//! * [`checks`]: what the driver checks before it forwards a caller's request to the VMM, as
//!   pure functions (the NTSTATUS values of the seeds, in Windows' order).
//! * [`table`]: the driver's per-caller table of VMM handles and locked buffers.
//! * [`resources`]: finding the doorbell's I/O ports in a `CM_RESOURCE_LIST`.
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod checks;
pub mod codes;
pub mod messages;
pub mod resources;
pub mod table;

pub use profile_core::{abi, NtStatus, ProfileSource};

/// Statuses the agent uses that profile-core does not name.
pub mod status {
    use profile_core::NtStatus;

    /// `STATUS_INVALID_CID`: no process has this id.
    pub const INVALID_CID: NtStatus = NtStatus(0xC000_000B);
    /// `STATUS_NO_SUCH_DEVICE`: hvprof does not answer on any doorbell port.
    pub const NO_SUCH_DEVICE: NtStatus = NtStatus(0xC000_000E);
    /// `STATUS_INVALID_DEVICE_REQUEST`: an IOCTL this driver does not know.
    pub const INVALID_DEVICE_REQUEST: NtStatus = NtStatus(0xC000_0010);
}
