//! The guest side of the hvprof hypercall ABI (docs/abi.md): a `no_std` client library for a
//! guest agent running at CPL0 (the reference guest's kernel, a Windows kernel driver).
//!
//! Needs neither `alloc` nor `std`, and compiles with Rust 1.63 (the Windows driver toolchain;
//! see `check-msrv.sh`). Every request is built with `profile_core::abi`'s encoders, so the agent
//! and the VMM share one definition of the bytes.
//!
//! The pieces:
//!
//! * [`discover`]: CPUID leaves 0x40000100 and 0x40000101: is hvprof there, which ABI version,
//!   which doorbell port, which features.
//! * [`Doorbell`]: the I/O-port doorbell (two 32-bit `OUT`s ring a call, an `IN` reads the last
//!   status), behind the [`Transport`] trait so that everything above it is testable off-guest.
//! * [`PhysicalMemory`]: the agent's memory model, "the guest-physical address of this kernel
//!   virtual address" ([`IdentityMapped`] for an identity-mapped kernel; a Windows driver
//!   implements it with `MmGetPhysicalAddress`), and [`page_list`], which turns a locked buffer
//!   into the frame list START takes.
//! * [`Client`]: one typed method per call (`query_info`, `create`, `create_ex`, `start_*`,
//!   `stop`, `close`, `set_interval`, `query_interval`, `set_interrupt`, `read_stats`). Each
//!   builds its request in a caller-provided scratch block (8-byte aligned, physically
//!   contiguous), rings, and decodes the reply or the NTSTATUS.
//! * [`ProfileParams`]: the arguments of NtCreateProfile(Ex) with a kernel agent's defaults.
//!
//! ```no_run
//! use guest_agent::{discover, Client, Doorbell, IdentityMapped, ProfileParams, Scratch};
//!
//! let found = discover().expect("hvprof is present");
//! // SAFETY (example): the port base comes from hvprof's own CPUID leaf.
//! let doorbell = unsafe { Doorbell::new(found.port_base) };
//! let mut scratch = Scratch::<256>::new();
//! // `IdentityMapped`: this kernel maps virtual addresses 1:1 to guest-physical ones.
//! let mut client = Client::new(doorbell, IdentityMapped, scratch.bytes_mut()).unwrap();
//! static mut COUNTERS: [u32; 1024] = [0; 1024];
//! let buffer = unsafe { core::ptr::addr_of_mut!(COUNTERS) } as u64;
//! let params = ProfileParams::global(0x4000_0000, 0x4000, 4, buffer, 4096);
//! let handle = client.create(&params.to_create()).unwrap().handle;
//! // SAFETY (example): COUNTERS is static, so it stays resident until stop.
//! unsafe { client.start_buffer(handle, buffer, 4096) }.unwrap();
//! client.stop(handle).unwrap();
//! client.close(handle).unwrap();
//! ```
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod client;
mod discovery;
mod doorbell;
mod error;
mod memory;
mod params;

pub use client::{Client, STATUS_SENTINEL};
pub use discovery::{discover, discover_with, Found};
pub use doorbell::{Doorbell, Transport};
pub use error::Error;
pub use memory::{page_list, IdentityMapped, PageListInfo, PhysicalMemory, Scratch};
pub use params::{ProfileParams, PROFILE_CONTROL};

pub use profile_core::abi;
pub use profile_core::abi::{
    CreateExRequest, CreateReply, CreateRequest, InfoReply, StartReply, StatsReply,
};
pub use profile_core::affinity::GroupAffinity;
pub use profile_core::{NtStatus, ProfileSource};
