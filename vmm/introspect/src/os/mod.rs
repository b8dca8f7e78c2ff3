//! Guest operating systems seen from outside: which process and thread a sample ran in, and
//! which user-mode modules a process has loaded, read from the guest kernel's own structures.
//!
//! [`layout`] holds the member offsets of those structures and the kernel symbols they hang
//! from, as plain data. They are read from the kernel's own debug information (a PDB's type
//! stream, BTF, DWARF) by the report crate's type readers; nothing here knows a Windows build's
//! or a Linux version's offsets.
//!
//! [`GuestContext`] (one per vCPU) names the thread a sample ran in: the per-CPU area (KPCR on
//! Windows, the per-CPU base on Linux) from the GS base, the current thread pointer in it, and
//! the thread's and its process's identity read once per thread change and cached by pointer.
//! [`windows`] and [`linux`] hold the readers of each kernel's objects; [`list`] walks a
//! kernel's doubly linked lists with the checks every walk of guest lists needs.
//!
//! Everything read is the guest's: pointers are checked (canonical, aligned, in the kernel half
//! for kernel objects), strings and lists are bounded, and an identity whose fields do not
//! agree is refused. A hostile guest can at worst mislabel its own samples.

pub mod layout;
pub mod linux;
pub mod list;
mod read;
pub mod text;
pub mod windows;

pub use layout::{Field, LayoutError, LinuxLayout, WindowsLayout};
pub use read::CR3_ADDR_MASK;

/// The layout of a guest kernel's structures, for one of the kernels hvprof understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsLayout {
    /// A Windows kernel: offsets from ntoskrnl's PDB; symbols as RVAs from ntoskrnl's base.
    Windows(WindowsLayout),
    /// A Linux kernel: offsets from vmlinux's BTF or DWARF; symbols as addresses.
    Linux(LinuxLayout),
}

/// A guest kernel hvprof can read: its structures' layout and where it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestOs {
    /// Its structures.
    pub layout: OsLayout,
    /// Windows: ntoskrnl's base (the layout's symbols are RVAs from it). Linux: the KASLR
    /// slide added to the layout's symbol addresses (0 for a kernel that is not relocated).
    pub load_bias: u64,
}

/// What identifies a process for as long as it lives, surviving the reuse of its page tables
/// (CR3) or its kernel object's address by a later process.
///
/// Windows: `object` = the EPROCESS address, `id` = UniqueProcessId, `created` = CreateTime,
/// `space` = 0. Linux: `object` = the thread-group leader's task_struct, `id` = tgid, `created`
/// = the leader's start_time, `space` = its mm_struct (exec replaces it: a new process row, with
/// the new program's name, as perf's comm events do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ProcessKey {
    /// The kernel object's address.
    pub object: u64,
    /// The process id.
    pub id: u64,
    /// When it was created, in the kernel's own units.
    pub created: u64,
    /// Linux: the address space object (0 on Windows).
    pub space: u64,
}

/// What identifies a thread for as long as it lives: Windows `object` = ETHREAD, `id` =
/// Cid.UniqueThread, `created` = CreateTime; Linux `object` = task_struct, `id` = pid,
/// `created` = start_time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ThreadKey {
    /// The kernel object's address.
    pub object: u64,
    /// The thread id.
    pub id: u64,
    /// When it was created, in the kernel's own units.
    pub created: u64,
}

/// A process as the guest kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessFacts {
    /// Its identity.
    pub key: ProcessKey,
    /// Its name: Windows ImageFileName (at most 15 bytes, as the kernel truncates it), Linux
    /// the thread-group leader's comm; `[swapper/N]`-style names for the kernel's own.
    pub name: String,
    /// The executable's full path where the kernel keeps one cheaply (Windows: the first
    /// loader entry's FullDllName, once the PEB's list has been read; Linux: `mm->exe_file`'s
    /// path within its file system), else None.
    pub path: Option<String>,
    /// Its page-table roots, page-aligned, PCID bits cleared: Windows DirectoryTableBase and
    /// (KVA shadow) UserDirectoryTableBase; Linux mm->pgd's physical address. Empty for a
    /// kernel thread's process.
    pub cr3s: Vec<u64>,
    /// True for the kernel's own process (Windows System and Idle, Linux kernel threads).
    pub kernel: bool,
    /// Windows: the PEB address (0 if none yet); Linux: 0.
    pub peb: u64,
}

/// A thread as the guest kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadFacts {
    /// Its identity.
    pub key: ThreadKey,
    /// Its name: Windows ETHREAD.ThreadName when set, Linux the task's comm.
    pub name: Option<String>,
}

/// The thread a sample ran in and its process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// The process.
    pub process: ProcessFacts,
    /// The thread.
    pub thread: ThreadFacts,
}

/// The registers identification needs, read at the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleRegs {
    /// Current privilege level.
    pub cpl: u8,
    /// The GS segment's base (at CPL0 the kernel's per-CPU area on both kernels).
    pub gs_base: u64,
    /// IA32_KERNEL_GS_BASE when the caller read it (at CPL3 it holds the kernel's per-CPU
    /// base); None when it was not read at this sample.
    pub kernel_gs_base: Option<u64>,
}

/// Why a sample's thread could not be named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// No per-CPU base is known for this vCPU yet: the caller should read
    /// IA32_KERNEL_GS_BASE at a later sample ([`GuestContext::wants_kernel_gs_base`]).
    #[error("the vCPU's per-CPU area is not known yet")]
    NoPerCpuBase,
    /// The candidate per-CPU base failed its check (KPCR.Self, this_cpu_off).
    #[error("{0:#x} is not the kernel's per-CPU area")]
    BadPerCpuBase(u64),
    /// A read failed.
    #[error("guest address {0:#x} is not readable")]
    Unreadable(u64),
    /// A pointer the guest gave is not a kernel address, or a field is out of range.
    #[error("implausible {what} {value:#x}")]
    Implausible {
        /// What was read.
        what: &'static str,
        /// Its value.
        value: u64,
    },
}

/// Most processes a walk of a kernel's process list (`PsActiveProcessHead`, `init_task.tasks`)
/// reads, whatever the caller asks for.
pub const MAX_PROCESSES: usize = 16_384;

/// The processes on a kernel's list, in list order, and how the walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessList {
    /// The processes read.
    pub processes: Vec<ProcessFacts>,
    /// Why the walk stopped.
    pub end: list::ListEnd,
}

mod context;
pub use context::{
    ContextStats, GuestContext, BASE_CHECK_EVERY, MAX_CACHED_THREADS, RECHECK_EVERY,
};
