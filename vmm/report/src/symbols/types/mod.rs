//! Guest kernels' structure layouts from their debug information.
//!
//! The walkers that name a sample's process and thread need the offsets of a few members of the
//! kernel's own structures ([`introspect::os::layout`]). They differ between every Windows build
//! and every Linux configuration, so they are read from the kernel's debug information, never
//! from a table in the code:
//!
//! - Windows: ntoskrnl's PDB ([`pdb`]): the type stream (TPI) through the `pdb` crate, plus the
//!   data publics and `S_GDATA32` globals for `PsActiveProcessHead` and the other symbols.
//! - Linux: a vmlinux's `.BTF` section or a raw BTF blob ([`btf`], a parser of our own), else its
//!   DWARF ([`dwarf`], through gimli); the per-CPU and kernel symbols from its symbol table.
//! - Either: a Volatility 3 symbol table ([`isf`], JSON, plain, .xz or .gz), made from the
//!   same PDB or DWARF by someone else.
//!
//! Each reader turns the structures it finds into [`Record`]s, and one resolver here looks
//! members up by path: `Pcb.DirectoryTableBase` goes through the member `Pcb`'s type (by name, so
//! a forward reference resolves to the full definition), and a member inside an anonymous union
//! or struct is found as if it were its parent's (as C names it), however deep (up to
//! [`MAX_DEPTH`] levels). A missing structure or mandatory member is an error naming it; a
//! missing optional member is `None`.
//!
//! Everything read is hostile input (a guest's kernel, or whoever put a file on the symbol path):
//! every count and length is checked against the bytes there are and against fixed bounds, type
//! chains are followed a bounded number of steps, and nothing panics.

pub mod btf;
pub mod dwarf;
pub mod isf;
pub mod pdb;

use std::collections::HashMap;
use std::rc::Rc;

use introspect::os::layout::{
    Dentry, Eprocess, Ethread, Field, FileStruct, Kpcr, Kprcb, Kthread, LayoutError,
    LdrDataTableEntry, MapleArange64, MapleRange64, MmStruct, PcpuHot, Peb, PebLdrData, TaskStruct,
    UnicodeString, VmAreaStruct, VmaLayout,
};
use introspect::os::{LinuxLayout, WindowsLayout};

/// How deep member lookup goes through anonymous members and member paths, and how many
/// typedef / const / volatile / forward-reference links a reader follows.
pub const MAX_DEPTH: usize = 32;

/// The most members a reader reads for one structure, its anonymous members' included.
pub const MAX_MEMBERS: usize = 1 << 16;

/// Why no layout could be read.
#[derive(Debug, thiserror::Error)]
pub enum TypeError {
    /// The PDB could not be read.
    #[error("PDB: {0}")]
    Pdb(String),
    /// The BTF could not be read.
    #[error("BTF")]
    Btf(#[from] btf::BtfError),
    /// The DWARF could not be read.
    #[error("DWARF: {0}")]
    Dwarf(String),
    /// The ELF file could not be read.
    #[error("ELF: {0}")]
    Elf(String),
    /// Neither BTF nor DWARF.
    #[error("the file has neither a .BTF section nor DWARF debug information")]
    NoTypes,
    /// The ISF file could not be read.
    #[error("ISF: {0}")]
    Isf(isf::IsfError),
    /// Not a PDB, an ELF file, BTF or ISF.
    #[error("not a PDB, an ELF file, BTF or ISF (JSON, .json.xz, .json.gz)")]
    UnknownFormat,
    /// A structure the layout needs is not there.
    #[error("no structure {0} in the type information")]
    MissingStruct(&'static str),
    /// A symbol the layout needs is not there.
    #[error("no symbol {0}")]
    MissingSymbol(&'static str),
    /// A member is missing or out of bounds.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A structure has more members than [`MAX_MEMBERS`], or its members nest deeper than
    /// [`MAX_DEPTH`].
    #[error("{0}: too many members or too deep")]
    TooBig(String),
}

/// What a member's type is, as far as path lookup cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// A named structure or union (looked up by name: forward references resolve).
    Named(String),
    /// An anonymous structure or union, inline.
    Anon(Rc<Record>),
    /// Anything else.
    Other,
}

/// One member of a structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name (empty for an anonymous member).
    pub name: String,
    /// Where it lies.
    pub field: Field,
    /// Its type.
    pub ty: Ty,
}

/// A structure or union as a reader found it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Size in bytes.
    pub size: u32,
    /// Members in declaration order.
    pub members: Vec<Member>,
}

/// A source of records by name (a reader's type information).
pub trait Records {
    /// The complete (not forward) structure or union called `name`, if there is one.
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError>;
}

/// Finds `name` among `rec`'s members, looking through anonymous members; returns it with the
/// offset of the member from `rec`'s start.
fn find_member<'r>(rec: &'r Record, name: &str, depth: usize) -> Option<(Field, &'r Ty)> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(m) = rec.members.iter().find(|m| m.name == name) {
        return Some((m.field, &m.ty));
    }
    for m in rec.members.iter().filter(|m| m.name.is_empty()) {
        if let Ty::Anon(inner) = &m.ty {
            if let Some((mut f, ty)) = find_member(inner, name, depth + 1) {
                f.offset = f.offset.checked_add(m.field.offset)?;
                return Some((f, ty));
            }
        }
    }
    None
}

/// The member at `path` (`a.b.c`) of the structure `structure`: its offset from the
/// structure's start, bits and size.
pub fn field(
    src: &mut impl Records,
    structure: &str,
    path: &str,
) -> Result<Option<Field>, TypeError> {
    let Some(mut rec) = src.record(structure)? else {
        return Ok(None);
    };
    let mut base = 0u32;
    let mut segments = path.split('.').peekable();
    for _ in 0..MAX_DEPTH {
        let Some(seg) = segments.next() else { break };
        let Some((f, ty)) = find_member(&rec, seg, 0) else {
            return Ok(None);
        };
        let Some(offset) = base.checked_add(f.offset) else {
            return Ok(None);
        };
        if segments.peek().is_none() {
            return Ok(Some(Field { offset, ..f }));
        }
        base = offset;
        let next = match ty {
            Ty::Anon(r) => r.clone(),
            Ty::Named(n) => match src.record(&n.clone())? {
                Some(r) => r,
                None => return Ok(None),
            },
            Ty::Other => return Ok(None),
        };
        rec = next;
    }
    Ok(None)
}

/// Builds one structure's offsets: `build` is the layout type's `build`, `mandatory` and
/// `optional` its member paths.
fn structure<T>(
    src: &mut impl Records,
    name: &'static str,
    paths: [&'static [&'static str]; 2],
    build: impl FnOnce(u32, &mut dyn FnMut(&'static str) -> Option<u32>) -> Result<T, LayoutError>,
) -> Result<T, TypeError> {
    let Some(rec) = src.record(name)? else {
        return Err(TypeError::MissingStruct(name));
    };
    let mut found = HashMap::new();
    for path in paths.into_iter().flatten() {
        if let Some(f) = field(src, name, path)? {
            found.insert(*path, f.offset);
        }
    }
    Ok(build(rec.size, &mut |p| found.get(p).copied())?)
}

macro_rules! read {
    ($src:expr, $t:ty) => {
        structure(
            $src,
            <$t>::NAME,
            [<$t>::MANDATORY, <$t>::OPTIONAL],
            |s, f| <$t>::build(s, f),
        )
    };
}

/// Reads a [`WindowsLayout`]'s structures from `src`; the symbols are the caller's.
pub fn windows_structures(src: &mut impl Records) -> Result<WindowsLayout, TypeError> {
    Ok(WindowsLayout {
        kpcr: read!(src, Kpcr)?,
        kprcb: read!(src, Kprcb)?,
        ethread: read!(src, Ethread)?,
        kthread: read!(src, Kthread)?,
        eprocess: read!(src, Eprocess)?,
        peb: read!(src, Peb)?,
        peb_ldr_data: read!(src, PebLdrData)?,
        ldr_data_table_entry: read!(src, LdrDataTableEntry)?,
        unicode_string: read!(src, UnicodeString)?,
        symbols: Default::default(),
    })
}

/// Reads a [`LinuxLayout`]'s structures from `src` (`pcpu_hot` only where it is and holds
/// `current_task`: 6.2 to 6.14); the symbols are the caller's.
pub fn linux_structures(src: &mut impl Records) -> Result<LinuxLayout, TypeError> {
    let pcpu_hot = match src.record(PcpuHot::NAME)? {
        Some(_) => read!(src, PcpuHot).ok(),
        None => None,
    };
    let task_struct = read!(src, TaskStruct)?;
    let mm_struct = read!(src, MmStruct)?;
    // Mappings are read where the address space keeps its VMAs in a maple tree and every
    // structure on the way to a file's name is described.
    let vmas = match mm_struct.mm_mt_root {
        Some(_) => vma_structures(src).ok(),
        None => None,
    };
    Ok(LinuxLayout {
        task_struct,
        mm_struct,
        pcpu_hot,
        vmas,
        symbols: Default::default(),
    })
}

/// The structures of a [`VmaLayout`].
fn vma_structures(src: &mut impl Records) -> Result<VmaLayout, TypeError> {
    Ok(VmaLayout {
        vm_area_struct: read!(src, VmAreaStruct)?,
        file: read!(src, FileStruct)?,
        dentry: read!(src, Dentry)?,
        range_64: read!(src, MapleRange64)?,
        arange_64: read!(src, MapleArange64)?,
    })
}

/// Reads a vmlinux's [`LinuxLayout`]: structures from its `.BTF` section, else its DWARF;
/// symbols from its symbol table.
pub fn linux_layout_from_elf(bytes: &[u8]) -> Result<LinuxLayout, TypeError> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(bytes).map_err(|e| TypeError::Elf(e.to_string()))?;
    let mut layout = match file.section_by_name(".BTF") {
        Some(s) => {
            let data = s.data().map_err(|e| TypeError::Elf(e.to_string()))?;
            btf::linux_layout(data)?
        }
        None => dwarf::linux_layout(&file)?,
    };
    let s = &mut layout.symbols;
    for sym in file.symbols() {
        let Ok(name) = sym.name() else { continue };
        let slot = match name {
            "current_task" => &mut s.current_task,
            "pcpu_hot" => &mut s.pcpu_hot,
            "this_cpu_off" => &mut s.this_cpu_off,
            "__per_cpu_offset" => &mut s.per_cpu_offset,
            "init_task" => &mut s.init_task,
            _ => continue,
        };
        slot.get_or_insert(sym.address());
    }
    Ok(layout)
}

#[cfg(test)]
mod tests;

/// The formats `--guest-types` takes, told apart by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypesFormat {
    /// A PDB (MSF 7.00).
    Pdb,
    /// An ELF file (a vmlinux).
    Elf,
    /// A raw BTF blob.
    Btf,
    /// A Volatility 3 symbol table (ISF): JSON, xz or gzip.
    Isf(isf::compressed::Packing),
}

/// How many first bytes [`TypesFormat::sniff`] looks at.
pub const SNIFF_BYTES: usize = 32;

impl TypesFormat {
    /// The format whose magic `head` (a file's first [`SNIFF_BYTES`] bytes, or all of a
    /// shorter one) starts with: the whole file is read only once this says it may be one.
    pub fn sniff(head: &[u8]) -> Option<TypesFormat> {
        const MSF7: &[u8] = b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0";
        const ELF: &[u8] = b"\x7fELF";
        const BTF: &[u8] = &[0x9f, 0xeb];
        if head.starts_with(MSF7) {
            Some(TypesFormat::Pdb)
        } else if head.starts_with(ELF) {
            Some(TypesFormat::Elf)
        } else if head.starts_with(BTF) {
            Some(TypesFormat::Btf)
        } else {
            isf::compressed::Packing::sniff(head).map(TypesFormat::Isf)
        }
    }
}

/// The guest kernel layout in a file the user gave (`--guest-types`): a PDB (Windows; its
/// symbols are RVAs), a vmlinux ELF (BTF or DWARF and its symbol table) or a raw BTF blob
/// (such as /sys/kernel/btf/vmlinux or pahole's detached output: structures only), or an
/// ISF symbol table of either.
pub fn layout_from_file(bytes: &[u8]) -> Result<introspect::os::OsLayout, TypeError> {
    use introspect::os::OsLayout;
    match TypesFormat::sniff(bytes) {
        Some(TypesFormat::Pdb) => Ok(OsLayout::Windows(pdb::windows_layout(bytes)?)),
        Some(TypesFormat::Elf) => Ok(OsLayout::Linux(linux_layout_from_elf(bytes)?)),
        Some(TypesFormat::Btf) => Ok(OsLayout::Linux(btf::linux_layout(bytes)?)),
        Some(TypesFormat::Isf(_)) => isf::layout(bytes),
        None => Err(TypeError::UnknownFormat),
    }
}
