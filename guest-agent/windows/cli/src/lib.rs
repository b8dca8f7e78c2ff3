//! hvprof-agent: the command-line half of the Windows guest agent (docs/windows.md).
//!
//! Thin binary, fat library: `main.rs` parses, calls [`session::run`] and prints. Everything
//! but the Windows system calls is here and builds on any host, so its unit tests run on Linux:
//!
//! * [`args`]: the command line (hand-written: the Windows build has no crates).
//! * [`ntstatus`]: an NTSTATUS as text, named when known.
//! * [`number`]: numbers as the user and the result file write them (hex or decimal).
//! * [`modules`]: the kernel's loaded-module list (`SystemModuleInformation`) as bytes -> modules.
//! * [`plan`]: what to profile -> the buckets, the buffer and the driver's requests.
//! * [`session`]: the IOCTL sequence (create, start, wait, stop, close) over a [`session::Device`].
//! * [`result_file`]: the result file the host collects, writer and reader.
//! * [`report`]: the short table printed at the end.
//!
//! The Windows side ([`windows`], `cfg(windows)`) opens `\\.\HvProf`, issues the IOCTLs with
//! `NtDeviceIoControlFile` (so the driver's NTSTATUS arrives unchanged), lists modules and
//! launches the command.
#![warn(missing_docs)]

pub mod args;
pub mod modules;
pub mod ntstatus;
pub mod number;
pub mod plan;
pub mod report;
pub mod result_file;
pub mod session;
pub mod sources;
#[cfg(windows)]
pub mod windows;

pub use hvprof_ioctl::{codes, messages, NtStatus};

/// The agent's version (also without cargo: build.sh calls rustc directly).
pub const VERSION: &str = "0.1.0";
