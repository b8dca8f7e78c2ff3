//! profile-core: the NT profile-object semantics, sample attribution and the hvprof hypercall
//! ABI. No KVM, no threads, no I/O: `no_std`, exact and testable anywhere.
//!
//! * [`object`]: [`ObjectManager`], Windows 10's NtCreateProfile(Ex), NtStartProfile,
//!   NtStopProfile, close, NtSetIntervalProfile and NtQueryIntervalProfile, with their checks in
//!   Windows' order and their exact [`NtStatus`] values; [`ObjectManager::record`] counts a
//!   [`Sample`] into every matching started object through a [`CounterSink`], via the manager's
//!   index of started objects (one stabbing table per process plus one for global objects);
//!   and the decoded requests of the ABI as the manager's parameters.
//! * [`attribution`]: what a count is made of, below the manager: the [`Sample`], the
//!   [`CounterSink`], the counter's byte offset and the process key.
//! * [`abi`]: the versioned hypercall ABI shared by the VMM and the guest agents (it knows
//!   nothing of the manager).
//!
//! Features: `alloc` (default) enables the object manager and attribution. Without it only the
//! ABI, statuses, sources and affinity types remain, needing neither `alloc` nor `std`: what a
//! Windows kernel driver links. Everything compiles with Rust 1.63 (see `check-msrv.sh`).
#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod abi;
pub mod affinity;
#[cfg(feature = "alloc")]
pub mod attribution;
pub mod handle;
#[cfg(feature = "alloc")]
pub mod object;
pub mod source;
pub mod status;

#[cfg(feature = "alloc")]
pub use attribution::{CounterSink, Sample};
pub use handle::{AccessMask, Handle, ObjectId, Owner};
#[cfg(feature = "alloc")]
pub use object::{CallerRights, CreateParams, ObjectManager, PinRequest, PlatformInfo, Started};
pub use source::{ProfileSource, SourceInfo};
pub use status::NtStatus;
