//! Reading a guest from outside: what hvprof learns from guest memory alone, read-only and
//! treating every byte as hostile.
//!
//! Call stacks: given a sampled vCPU's registers and read-only access to its address space, [`walk`]
//! returns the return addresses of the stack, choosing an unwinder per frame:
//!
//! - inside a PE32+ image mapped in the guest ([`pe`], found and cached by [`ImageCache`]),
//!   the image's own unwind data, interpreted as the Windows x64 unwinder does ([`x64`]);
//! - inside an ELF file the caller maps in that address space (a Linux process's program and
//!   libraries, read on the host), the file's DWARF call-frame information ([`cfi`]);
//! - anywhere else, the frame-pointer chain ([`fp`]).
//!
//! Windows kernels: [`nt`] finds ntoskrnl in guest memory and walks its loaded-module list.
//!
//! Guest kernels' processes and threads: [`os::layout`] holds the member offsets of Windows'
//! and Linux's process and thread structures (read from their debug information by the report
//! crate); [`os::GuestContext`] names the thread and process a sample ran in from the per-CPU
//! area at the GS base, caching per vCPU; [`os::windows`] also lists processes and a process's
//! user-mode modules, over [`os::list`]'s bounded list walk.
//!
//! Address spaces: [`paging`] walks the guest's own page tables (every x86 paging mode) from
//! guest-physical memory, to translate a guest-virtual address or find a buffer's frames.
//!
//! The guest controls every byte read: each read is bounded and checked, every loop has a
//! fixed bound, nothing is allocated by a size the guest chose, and a walk that cannot go on
//! ends with the frames it has and the reason it stopped ([`End`]).

pub mod bytes;
pub mod cfi;
pub mod fp;
mod images;
pub mod mem;
pub mod nt;
pub mod os;
pub mod paging;
pub mod pe;
mod regs;
mod walk;
pub mod x64;

#[cfg(any(test, feature = "test-support"))]
pub mod testguest;
#[cfg(any(test, feature = "test-support"))]
pub mod testimage;

pub use images::{space_of, ImageCache, KERNEL_SPACE};
pub use mem::{Memory, Regions, Unreadable};
pub use regs::Regs;
pub use walk::{entry, walk, walk_with_files, End, Options, Stack, WalkCache};
