//! Kernel layouts from Volatility 3's Intermediate Symbol Format (ISF): the JSON symbol tables
//! that memory-forensics users keep for hundreds of Windows builds (made from Microsoft's own
//! PDBs) and Linux kernels (made by dwarf2json from a vmlinux's DWARF).
//!
//! An ISF file lists `base_types`, `user_types` (structures with their members' offsets and
//! type descriptors), `enums` and `symbols`, under `metadata` naming what it was made from.
//! The reader:
//!
//! - unpacks it ([`compressed`]: plain, .xz or .gz, bounded);
//! - checks it against the ISF schema (formats 4.1 to 6.x, [`schema`]) while parsing it: a
//!   wrong key, kind or type is refused naming where it is (`user_types._EPROCESS.fields.Pcb`);
//!   JSON nests at most 128 levels (serde_json's limit);
//! - reads the same structures and members as the PDB and BTF readers, through the same
//!   resolver ([`super::windows_structures`], [`super::linux_structures`]): a missing one is
//!   named the same way;
//! - Windows (`metadata.windows`): the symbols of [`WindowsSymbols`] are RVAs from the kernel's
//!   base, as in the PDB; Linux (`metadata.linux`): the symbols of [`LinuxSymbols`] are
//!   link-time addresses, as in the vmlinux's symbol table (a per-CPU variable's is its
//!   offset in the per-CPU section), moved at run time by the KASLR slide the guest shows.
//!
//! [`WindowsSymbols`]: introspect::os::layout::WindowsSymbols
//! [`LinuxSymbols`]: introspect::os::layout::LinuxSymbols

pub mod banner;
pub mod compressed;
mod records;
pub mod schema;

use introspect::os::layout::{LinuxSymbols, WindowsSymbols};
use introspect::os::{LinuxLayout, OsLayout, WindowsLayout};

pub use records::IsfTypes;
use schema::Isf;

use super::TypeError;
use crate::symbols::pdb::PdbId;

/// Why an ISF file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsfError {
    /// The JSON is malformed or does not follow the schema.
    #[error("{0}")]
    Schema(String),
    /// A format version this reader does not know.
    #[error("metadata.format {0:?}: ISF formats 4.1 to 6.x are read")]
    Format(String),
    /// Neither a Windows nor a Linux table.
    #[error("its metadata names neither a Windows PDB nor a Linux kernel")]
    UnknownOs,
    /// Its contents are larger than the limit.
    #[error("it is larger than {limit} bytes once decompressed")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The xz stream is corrupt or asks for too much memory.
    #[error("xz: {0}")]
    Xz(String),
    /// The gzip stream is corrupt.
    #[error("gzip: {0}")]
    Gzip(String),
    /// Not JSON (once decompressed).
    #[error("not ISF: a JSON object was expected")]
    NotJson,
    /// A symbol's address does not fit what it is.
    #[error("symbol {name}: address {address:#x} is not an RVA below 4 GiB")]
    BadRva {
        /// The symbol.
        name: &'static str,
        /// Its address in the file.
        address: u64,
    },
    /// A Windows table of another PDB than the one wanted.
    #[error("made from {found}, not {wanted}")]
    OtherBuild {
        /// The PDB wanted (`name GUID age`).
        wanted: String,
        /// The PDB the file names (`name GUID age`, or "an unnamed PDB").
        found: String,
    },
}

impl From<IsfError> for TypeError {
    fn from(e: IsfError) -> Self {
        TypeError::Isf(e)
    }
}

/// Parses ISF JSON (already unpacked) and checks it against the schema.
pub fn parse(json: &[u8]) -> Result<Isf, IsfError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let isf: Isf = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            IsfError::Schema(inner.to_string())
        } else {
            IsfError::Schema(format!("{path}: {inner}"))
        }
    })?;
    de.end().map_err(|e| IsfError::Schema(e.to_string()))?;
    check_format(&isf.metadata.format)?;
    Ok(isf)
}

/// Reads an ISF file (plain, .xz or .gz) up to [`compressed::MAX_JSON_BYTES`] of JSON.
pub fn read(bytes: &[u8]) -> Result<Isf, IsfError> {
    parse(&compressed::unpack(bytes, compressed::MAX_JSON_BYTES)?)
}

/// Accepts formats 4.1 to 6.x: their user types, base types and symbols are the same.
fn check_format(format: &str) -> Result<(), IsfError> {
    let mut parts = format.split('.').map(str::parse::<u32>);
    let ok = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), Some(Ok(_)), None) => {
            (major == 4 && minor >= 1) || major == 5 || major == 6
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(IsfError::Format(format.to_string()))
    }
}

/// The layout in an ISF file (plain, .xz or .gz): Windows or Linux, as its metadata says.
pub fn layout(bytes: &[u8]) -> Result<OsLayout, TypeError> {
    let isf = read(bytes)?;
    if isf.metadata.windows.is_some() {
        Ok(OsLayout::Windows(windows_layout(&isf)?))
    } else if isf.metadata.linux.is_some() {
        Ok(OsLayout::Linux(linux_layout(&isf)?))
    } else {
        Err(IsfError::UnknownOs.into())
    }
}

/// The Windows layout in an ISF file made from the PDB `name` with identity `id` (a pack's
/// file found by that identity): a file whose metadata names another PDB is refused.
pub fn windows_layout_for(
    bytes: &[u8],
    name: &str,
    id: &PdbId,
) -> Result<WindowsLayout, TypeError> {
    let isf = read(bytes)?;
    let wanted = format!("{name} GUID {} age {}", id.guid, id.age);
    let found = match isf.metadata.windows.as_ref().and_then(|w| w.pdb.as_ref()) {
        Some(pdb) => {
            let same = pdb.guid.eq_ignore_ascii_case(&id.guid)
                && pdb.age == id.age
                && pdb.database.eq_ignore_ascii_case(name);
            if same {
                return windows_layout(&isf);
            }
            format!("{} GUID {} age {}", pdb.database, pdb.guid, pdb.age)
        }
        None => "an unnamed PDB".to_string(),
    };
    Err(IsfError::OtherBuild { wanted, found }.into())
}

/// A Windows kernel's layout: structures from `user_types`, symbols as RVAs.
pub fn windows_layout(isf: &Isf) -> Result<WindowsLayout, TypeError> {
    let mut layout = super::windows_structures(&mut IsfTypes::new(isf))?;
    let mut found: [Option<u32>; 5] = [None; 5];
    for (slot, name) in found.iter_mut().zip(WindowsSymbols::NAMES) {
        let Some(sym) = isf.symbols.get(name) else {
            continue;
        };
        let rva = u32::try_from(sym.address).map_err(|_| IsfError::BadRva {
            name,
            address: sym.address,
        })?;
        *slot = Some(rva);
    }
    layout.symbols = WindowsSymbols {
        ps_active_process_head: found[0].ok_or(TypeError::MissingSymbol("PsActiveProcessHead"))?,
        ps_loaded_module_list: found[1].ok_or(TypeError::MissingSymbol("PsLoadedModuleList"))?,
        ki_system_call64: found[2],
        ki_system_call64_shadow: found[3],
        ps_initial_system_process: found[4],
    };
    Ok(layout)
}

/// A Linux kernel's layout: structures from `user_types`, symbols as link-time addresses.
pub fn linux_layout(isf: &Isf) -> Result<LinuxLayout, TypeError> {
    let mut layout = super::linux_structures(&mut IsfTypes::new(isf))?;
    let address = |name: &str| isf.symbols.get(name).map(|s| s.address);
    let [current_task, pcpu_hot, this_cpu_off, per_cpu_offset, init_task] =
        LinuxSymbols::NAMES.map(address);
    layout.symbols = LinuxSymbols {
        current_task,
        pcpu_hot,
        this_cpu_off,
        per_cpu_offset,
        init_task,
    };
    Ok(layout)
}

#[cfg(test)]
pub(crate) mod tests;
