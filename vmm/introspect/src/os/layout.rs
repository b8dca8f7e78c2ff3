//! Member offsets of a guest kernel's structures, as plain data.
//!
//! A [`WindowsLayout`] is what the walkers need from ntoskrnl's PDB: the offsets of `_KPCR`,
//! `_KPRCB`, `_ETHREAD`, `_KTHREAD`, `_EPROCESS`, `_KPROCESS`, `_PEB`, `_PEB_LDR_DATA`,
//! `_LDR_DATA_TABLE_ENTRY` and `_UNICODE_STRING` members and the RVAs of `PsActiveProcessHead`,
//! `PsLoadedModuleList`, `KiSystemCall64[Shadow]` and `PsInitialSystemProcess`. A
//! [`LinuxLayout`] is the same from a vmlinux's BTF or DWARF: `task_struct`, `mm_struct`,
//! `pcpu_hot`, and the per-CPU and kernel symbols' addresses.
//!
//! Each structure is one Rust struct whose fields are its members' byte offsets from the
//! structure's start: mandatory members as `u32`, optional ones (absent in some kernel versions)
//! as `Option<u32>`. Every member is named by its path in the debug information
//! (`Pcb.DirectoryTableBase`: a member of a member; anonymous unions and structs are looked
//! through, so a member inside one is named as if it were the parent's). Readers fill a
//! structure through its `build` function, which asks for each member by path and refuses a
//! missing mandatory member by name.
//!
//! The debug information is the guest's (or whoever supplied the file): [`validate`]
//! refuses a structure larger than [`MAX_STRUCT_SIZE`] and an offset at or beyond its
//! structure's size, so a walker can rely on every offset being small and in bounds.
//!
//! [`validate`]: WindowsLayout::validate

use std::fmt;

/// The largest structure a layout accepts, in bytes (64 KiB; `_KPCR` with its embedded
/// `_KPRCB`, the largest here, is under 48 KiB on every x64 Windows).
pub const MAX_STRUCT_SIZE: u32 = 64 * 1024;

/// Where a member lies inside its structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Field {
    /// Byte offset from the structure's start (the storage unit's, for a bitfield).
    pub offset: u32,
    /// For a bitfield: its first bit within the storage unit at `offset` and its width in bits.
    pub bits: Option<(u8, u8)>,
    /// Size in bytes (of the storage unit, for a bitfield; of the whole array, for an array).
    pub size: u32,
}

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A mandatory member is not in the debug information.
    Missing {
        /// The structure's name in the debug information.
        structure: &'static str,
        /// The member's path.
        member: &'static str,
    },
    /// A member's offset is at or beyond its structure's size.
    OutOfBounds {
        /// The structure's name.
        structure: &'static str,
        /// The member's path.
        member: &'static str,
        /// Its offset.
        offset: u32,
        /// The structure's size.
        size: u32,
    },
    /// A structure larger than [`MAX_STRUCT_SIZE`] (or of size 0).
    BadSize {
        /// The structure's name.
        structure: &'static str,
        /// Its size.
        size: u32,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Missing { structure, member } => {
                write!(f, "{structure} has no member {member}")
            }
            LayoutError::OutOfBounds {
                structure,
                member,
                offset,
                size,
            } => write!(
                f,
                "{structure}.{member} at offset {offset:#x} lies outside the structure ({size:#x} bytes)"
            ),
            LayoutError::BadSize { structure, size } => write!(
                f,
                "{structure} is {size:#x} bytes (accepted: 1 to {MAX_STRUCT_SIZE:#x})"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Defines one structure's offsets: `Name = "c_name" { field: "Member.Path", .. } optional { .. }`.
macro_rules! structure {
    (
        $(#[$meta:meta])*
        $name:ident = $cname:literal {
            $( $(#[$fmeta:meta])* $field:ident : $path:literal ),* $(,)?
        }
        optional {
            $( $(#[$ometa:meta])* $ofield:ident : $opath:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            /// The structure's size in bytes.
            pub size: u32,
            $( $(#[$fmeta])* pub $field: u32, )*
            $( $(#[$ometa])* pub $ofield: Option<u32>, )*
        }

        impl $name {
            /// The structure's name in the debug information.
            pub const NAME: &'static str = $cname;
            /// The paths of its mandatory members.
            pub const MANDATORY: &'static [&'static str] = &[$($path),*];
            /// The paths of its optional members.
            pub const OPTIONAL: &'static [&'static str] = &[$($opath),*];

            /// Builds it from its size and `member`, which gives a member's offset by path
            /// (`None`: not there), then validates it.
            pub fn build(
                size: u32,
                mut member: impl FnMut(&'static str) -> Option<u32>,
            ) -> Result<Self, LayoutError> {
                let s = $name {
                    size,
                    $( $field: member($path).ok_or(LayoutError::Missing {
                        structure: $cname,
                        member: $path,
                    })?, )*
                    $( $ofield: member($opath), )*
                };
                s.validate()?;
                Ok(s)
            }

            /// Refuses a size above [`MAX_STRUCT_SIZE`] (or 0) and an offset at or beyond the
            /// size.
            pub fn validate(&self) -> Result<(), LayoutError> {
                if self.size == 0 || self.size > MAX_STRUCT_SIZE {
                    return Err(LayoutError::BadSize { structure: $cname, size: self.size });
                }
                let members: &[(&'static str, Option<u32>)] = &[
                    $( ($path, Some(self.$field)), )*
                    $( ($opath, self.$ofield), )*
                ];
                for &(member, offset) in members {
                    if let Some(offset) = offset {
                        if offset >= self.size {
                            return Err(LayoutError::OutOfBounds {
                                structure: $cname,
                                member,
                                offset,
                                size: self.size,
                            });
                        }
                    }
                }
                Ok(())
            }
        }
    };
}

structure! {
    /// `_KPCR`: the processor control region at a CPU's kernel GS base.
    Kpcr = "_KPCR" {
        /// `Self`: the KPCR's own address (checks a GS base).
        self_: "Self",
        /// `CurrentPrcb`: the address of the embedded `_KPRCB`.
        current_prcb: "CurrentPrcb",
        /// `Prcb`: the embedded `_KPRCB`.
        prcb: "Prcb",
    }
    optional {}
}

structure! {
    /// `_KPRCB`: the processor control block.
    Kprcb = "_KPRCB" {
        /// `CurrentThread`: the running `_ETHREAD`.
        current_thread: "CurrentThread",
    }
    optional {}
}

structure! {
    /// `_ETHREAD`: an executive thread.
    Ethread = "_ETHREAD" {
        /// `Tcb`: the embedded `_KTHREAD`.
        tcb: "Tcb",
        /// `Cid.UniqueProcess`: the owning process's id.
        unique_process: "Cid.UniqueProcess",
        /// `Cid.UniqueThread`: the thread id.
        unique_thread: "Cid.UniqueThread",
        /// `CreateTime`.
        create_time: "CreateTime",
    }
    optional {
        /// `ThreadName`: a `PUNICODE_STRING` (Windows 10 1607 and later).
        thread_name: "ThreadName",
    }
}

structure! {
    /// `_KTHREAD`: a kernel thread.
    Kthread = "_KTHREAD" {
        /// `Process`: the owning `_EPROCESS` (not `ApcState.Process`, the attached one).
        process: "Process",
    }
    optional {}
}

structure! {
    /// `_EPROCESS`: an executive process.
    Eprocess = "_EPROCESS" {
        /// `Pcb`: the embedded `_KPROCESS`.
        pcb: "Pcb",
        /// `Pcb.DirectoryTableBase`: the process's page-table root (CR3).
        directory_table_base: "Pcb.DirectoryTableBase",
        /// `UniqueProcessId`.
        unique_process_id: "UniqueProcessId",
        /// `CreateTime`.
        create_time: "CreateTime",
        /// `ImageFileName`: `UCHAR[15]`.
        image_file_name: "ImageFileName",
        /// `ActiveProcessLinks`: the `LIST_ENTRY` on `PsActiveProcessHead`.
        active_process_links: "ActiveProcessLinks",
        /// `Peb`: the user-mode `_PEB`.
        peb: "Peb",
    }
    optional {
        /// `Pcb.UserDirectoryTableBase`: the user page-table root under KVA shadow.
        user_directory_table_base: "Pcb.UserDirectoryTableBase",
        /// `ImageFilePointer`: the image's `_FILE_OBJECT` (Windows 10 and later).
        image_file_pointer: "ImageFilePointer",
        /// `WoW64Process`: a 32-bit process's `_EWOW64PROCESS`, whose `Peb` (at offset 0) is
        /// its 32-bit PEB; NULL for a 64-bit process (later Windows 10 builds, 11).
        wow64_process: "WoW64Process",
        /// `Wow64Process`: earlier builds' `PVOID`, taken as the 32-bit PEB itself.
        wow64_peb32: "Wow64Process",
    }
}

structure! {
    /// `_PEB`: the process environment block (user space).
    Peb = "_PEB" {
        /// `Ldr`: the `_PEB_LDR_DATA`.
        ldr: "Ldr",
    }
    optional {}
}

structure! {
    /// `_PEB_LDR_DATA`: the user-mode loader's lists.
    PebLdrData = "_PEB_LDR_DATA" {
        /// `InLoadOrderModuleList`: the `LIST_ENTRY` of loaded modules, executable first.
        in_load_order_module_list: "InLoadOrderModuleList",
    }
    optional {}
}

structure! {
    /// `_LDR_DATA_TABLE_ENTRY`: one loaded module.
    LdrDataTableEntry = "_LDR_DATA_TABLE_ENTRY" {
        /// `InLoadOrderLinks`.
        in_load_order_links: "InLoadOrderLinks",
        /// `DllBase`.
        dll_base: "DllBase",
        /// `SizeOfImage`.
        size_of_image: "SizeOfImage",
        /// `FullDllName`: a `_UNICODE_STRING`.
        full_dll_name: "FullDllName",
        /// `BaseDllName`: a `_UNICODE_STRING`.
        base_dll_name: "BaseDllName",
    }
    optional {}
}

structure! {
    /// `_UNICODE_STRING`: a counted UTF-16 string.
    UnicodeString = "_UNICODE_STRING" {
        /// `Length`: in bytes.
        length: "Length",
        /// `Buffer`.
        buffer: "Buffer",
    }
    optional {}
}

/// The kernel symbols a Windows layout needs, as RVAs in ntoskrnl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowsSymbols {
    /// `PsActiveProcessHead`: the `LIST_ENTRY` heading every process's `ActiveProcessLinks`.
    pub ps_active_process_head: u32,
    /// `PsLoadedModuleList`: the kernel's loaded-module list.
    pub ps_loaded_module_list: u32,
    /// `KiSystemCall64`: MSR_LSTAR's value without KVA shadow.
    pub ki_system_call64: Option<u32>,
    /// `KiSystemCall64Shadow`: MSR_LSTAR's value under KVA shadow.
    pub ki_system_call64_shadow: Option<u32>,
    /// `PsInitialSystemProcess`: a pointer to the System process's `_EPROCESS`.
    pub ps_initial_system_process: Option<u32>,
}

impl WindowsSymbols {
    /// The symbols' names, in field order (the first two mandatory).
    pub const NAMES: [&'static str; 5] = [
        "PsActiveProcessHead",
        "PsLoadedModuleList",
        "KiSystemCall64",
        "KiSystemCall64Shadow",
        "PsInitialSystemProcess",
    ];
}

/// What the Windows walkers need: ntoskrnl's structures and symbols, from its PDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowsLayout {
    /// `_KPCR`.
    pub kpcr: Kpcr,
    /// `_KPRCB`.
    pub kprcb: Kprcb,
    /// `_ETHREAD`.
    pub ethread: Ethread,
    /// `_KTHREAD`.
    pub kthread: Kthread,
    /// `_EPROCESS`.
    pub eprocess: Eprocess,
    /// `_PEB`.
    pub peb: Peb,
    /// `_PEB_LDR_DATA`.
    pub peb_ldr_data: PebLdrData,
    /// `_LDR_DATA_TABLE_ENTRY`.
    pub ldr_data_table_entry: LdrDataTableEntry,
    /// `_UNICODE_STRING`.
    pub unicode_string: UnicodeString,
    /// The kernel symbols.
    pub symbols: WindowsSymbols,
}

impl WindowsLayout {
    /// Validates every structure (see the module's documentation).
    pub fn validate(&self) -> Result<(), LayoutError> {
        self.kpcr.validate()?;
        self.kprcb.validate()?;
        self.ethread.validate()?;
        self.kthread.validate()?;
        self.eprocess.validate()?;
        self.peb.validate()?;
        self.peb_ldr_data.validate()?;
        self.ldr_data_table_entry.validate()?;
        self.unicode_string.validate()
    }
}

structure! {
    /// `task_struct`: a Linux task (thread).
    TaskStruct = "task_struct" {
        /// `pid`: the thread id.
        pid: "pid",
        /// `tgid`: the thread group's (process's) id.
        tgid: "tgid",
        /// `comm`: `char[TASK_COMM_LEN]`.
        comm: "comm",
        /// `mm`: the `mm_struct` (NULL for a kernel thread).
        mm: "mm",
        /// `group_leader`: the thread group leader's `task_struct`.
        group_leader: "group_leader",
        /// `flags`: `PF_*` (`PF_KTHREAD` = 0x0020_0000).
        flags: "flags",
        /// `start_time`: monotonic ns at creation.
        start_time: "start_time",
    }
    optional {
        /// `tasks`: the `list_head` on `init_task.tasks`.
        tasks: "tasks",
    }
}

structure! {
    /// `mm_struct`: a Linux address space.
    MmStruct = "mm_struct" {
        /// `pgd`: the page-table root's direct-map address (inside an anonymous struct in 6.1).
        pgd: "pgd",
    }
    optional {
        /// `mm_mt.ma_root`: the root of the maple tree of its VMAs (6.1 and later).
        mm_mt_root: "mm_mt.ma_root",
        /// `exe_file`: the executable's `struct file` (what /proc/PID/exe shows).
        exe_file: "exe_file",
    }
}

structure! {
    /// `vm_area_struct`: one mapping of an address space.
    VmAreaStruct = "vm_area_struct" {
        /// `vm_start`: its first address.
        vm_start: "vm_start",
        /// `vm_end`: the address after its last.
        vm_end: "vm_end",
        /// `vm_flags`: `VM_READ` 1, `VM_WRITE` 2, `VM_EXEC` 4, ...
        vm_flags: "vm_flags",
        /// `vm_pgoff`: its offset in the file, in pages.
        vm_pgoff: "vm_pgoff",
        /// `vm_file`: the `struct file` mapped (NULL: anonymous memory).
        vm_file: "vm_file",
    }
    optional {}
}

structure! {
    /// `file`: an open file.
    FileStruct = "file" {
        /// `f_path.dentry`: its directory entry.
        dentry: "f_path.dentry",
    }
    optional {}
}

structure! {
    /// `dentry`: a name in a file system's tree.
    Dentry = "dentry" {
        /// `d_name.name`: the name's bytes (NUL-terminated).
        name: "d_name.name",
        /// `d_parent`: the directory holding it (itself at the file system's root).
        parent: "d_parent",
    }
    optional {}
}

structure! {
    /// `maple_range_64`: a maple tree node of ranges (leaves use it too).
    MapleRange64 = "maple_range_64" {
        /// `pivot[15]`: each slot's last index.
        pivot: "pivot",
        /// `slot[16]`: children or entries.
        slot: "slot",
        /// `meta` (`maple_metadata`, over the last slot): `end`, the last slot in use, when
        /// the node is not full.
        meta: "meta",
    }
    optional {}
}

structure! {
    /// `maple_arange_64`: a maple tree node of ranges that tracks gaps (an allocation tree's
    /// inner nodes, as an address space's is).
    MapleArange64 = "maple_arange_64" {
        /// `pivot[9]`.
        pivot: "pivot",
        /// `slot[10]`.
        slot: "slot",
        /// `meta` (`maple_metadata`): `end`, the last slot in use.
        meta: "meta",
    }
    optional {}
}

/// What reading an address space's mappings needs (Linux 6.1 and later: the VMAs in the
/// maple tree `mm_struct.mm_mt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VmaLayout {
    /// `vm_area_struct`.
    pub vm_area_struct: VmAreaStruct,
    /// `file`.
    pub file: FileStruct,
    /// `dentry`.
    pub dentry: Dentry,
    /// `maple_range_64`.
    pub range_64: MapleRange64,
    /// `maple_arange_64`.
    pub arange_64: MapleArange64,
}

impl VmaLayout {
    /// Validates every structure.
    pub fn validate(&self) -> Result<(), LayoutError> {
        self.vm_area_struct.validate()?;
        self.file.validate()?;
        self.dentry.validate()?;
        self.range_64.validate()?;
        self.arange_64.validate()
    }
}

structure! {
    /// `pcpu_hot`: the per-CPU hot data of Linux 6.2 and later.
    PcpuHot = "pcpu_hot" {
        /// `current_task`.
        current_task: "current_task",
    }
    optional {}
}

/// The kernel symbols a Linux layout needs, as the vmlinux's addresses (per-CPU symbols as
/// offsets from a CPU's per-CPU base).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinuxSymbols {
    /// `current_task` (per-CPU; before 6.2).
    pub current_task: Option<u64>,
    /// `pcpu_hot` (per-CPU; 6.2 and later).
    pub pcpu_hot: Option<u64>,
    /// `this_cpu_off` (per-CPU: a CPU's per-CPU base).
    pub this_cpu_off: Option<u64>,
    /// `__per_cpu_offset`: every CPU's per-CPU base.
    pub per_cpu_offset: Option<u64>,
    /// `init_task`.
    pub init_task: Option<u64>,
}

impl LinuxSymbols {
    /// The symbols' names, in field order.
    pub const NAMES: [&'static str; 5] = [
        "current_task",
        "pcpu_hot",
        "this_cpu_off",
        "__per_cpu_offset",
        "init_task",
    ];
}

/// What the Linux walkers need: a vmlinux's structures (and, from its symbol table, symbols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinuxLayout {
    /// `task_struct`.
    pub task_struct: TaskStruct,
    /// `mm_struct`.
    pub mm_struct: MmStruct,
    /// `pcpu_hot`, where the kernel has it.
    pub pcpu_hot: Option<PcpuHot>,
    /// What reading a process's mappings needs, where the types have it and the address
    /// space keeps its VMAs in a maple tree.
    pub vmas: Option<VmaLayout>,
    /// The kernel symbols (all `None` when read from a bare BTF blob).
    pub symbols: LinuxSymbols,
}

impl LinuxLayout {
    /// Validates every structure (see the module's documentation).
    pub fn validate(&self) -> Result<(), LayoutError> {
        self.task_struct.validate()?;
        self.mm_struct.validate()?;
        if let Some(p) = &self.pcpu_hot {
            p.validate()?;
        }
        if let Some(v) = &self.vmas {
            v.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_names_the_missing_member() {
        let err = Kpcr::build(0x100, |m| (m != "Prcb").then_some(8)).unwrap_err();
        assert_eq!(
            err,
            LayoutError::Missing {
                structure: "_KPCR",
                member: "Prcb"
            }
        );
        assert_eq!(err.to_string(), "_KPCR has no member Prcb");
    }

    #[test]
    fn optional_members_may_be_missing() {
        let e = Ethread::build(0x800, |m| (m != "ThreadName").then_some(0x10)).unwrap();
        assert_eq!(e.thread_name, None);
        assert_eq!(e.unique_thread, 0x10);
    }

    #[test]
    fn offsets_outside_the_structure_are_refused() {
        let err = Kthread::build(0x20, |_| Some(0x20)).unwrap_err();
        assert!(matches!(err, LayoutError::OutOfBounds { offset: 0x20, .. }));
        let err =
            Ethread::build(0x20, |m| Some(if m == "ThreadName" { 0x40 } else { 0 })).unwrap_err();
        assert!(matches!(
            err,
            LayoutError::OutOfBounds {
                member: "ThreadName",
                ..
            }
        ));
    }

    #[test]
    fn huge_and_empty_structures_are_refused() {
        for size in [0, MAX_STRUCT_SIZE + 1, u32::MAX] {
            let err = MmStruct::build(size, |_| Some(0)).unwrap_err();
            assert!(matches!(err, LayoutError::BadSize { .. }), "{size}");
        }
        assert!(MmStruct::build(MAX_STRUCT_SIZE, |_| Some(MAX_STRUCT_SIZE - 1)).is_ok());
    }

    #[test]
    fn a_whole_layout_validates_each_structure() {
        let mut l = LinuxLayout {
            task_struct: TaskStruct::build(0x1000, |_| Some(0)).unwrap(),
            mm_struct: MmStruct::build(0x100, |_| Some(0x50)).unwrap(),
            ..Default::default()
        };
        assert!(l.validate().is_ok());
        l.pcpu_hot = Some(PcpuHot::default());
        assert!(matches!(l.validate(), Err(LayoutError::BadSize { .. })));
        assert!(WindowsLayout::default().validate().is_err());
    }
}
