//! hvprof: a KVM virtual machine monitor that profiles its guests from outside.
//!
//! The library holds everything; the `hvprof` binary (its own package, vmm/hvprof) only
//! parses arguments. See docs/architecture.md for the threads, the data flow and where each
//! piece lives.
#![warn(missing_docs)]

pub mod acpi;
pub mod api;
pub mod arch;
pub mod boot;
pub mod clock;
pub mod config;
pub mod firmware;
pub mod layout;
pub mod memory;
pub mod outcome;
pub mod profiler;
pub mod refguest;
pub mod report_input;
pub mod sampler;
pub mod seccomp;
pub mod session;
pub mod signals;
pub mod top;
pub mod vcpu;
pub mod vm;
