//! PDB files through the pdb crate: public symbols and procedures, as RVAs.
//!
//! Procedures (`S_GPROC32`/`S_LPROC32` in the modules' symbol streams) carry undecorated names
//! and sizes; public symbols (`S_PUB32` in the global stream) cover functions compiled without
//! debug information. Where both name the same RVA the procedure wins. Source lines come from
//! the modules' C13 line programs, file names from the PDB's string table; a PDB whose line
//! data cannot be read still gives its functions, without lines.

use std::collections::HashMap;
use std::io::Cursor;

use ::pdb::{AddressMap, FallibleIterator, FileIndex, ModuleInfo, StringTable, SymbolData, PDB};

use super::lines::Builder;
use super::{sort_symbols, ImageKind, Module, Symbol, SymbolError};

/// Line numbers at and above this are CodeView's markers for compiler-generated code
/// (0xF00F00, 0xFEEFEE), not lines.
const HIDDEN_LINE: u32 = 0x00F0_0000;

/// A PDB's identity: the GUID its PE's CodeView record must carry, and its age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdbId {
    /// The GUID as 32 upper-case hex digits in the symbol-server order.
    pub guid: String,
    /// The age.
    pub age: u32,
}

impl PdbId {
    /// `GUID` followed by the age in hex: the symbol-server directory name.
    pub fn key(&self) -> String {
        format!("{}{:X}", self.guid, self.age)
    }
}

/// Formats a GUID stored as in a CodeView record (Data1..Data3 little-endian, Data4 as bytes)
/// as 32 upper-case hex digits.
pub fn guid_hex(raw: [u8; 16]) -> String {
    introspect::pe::guid_hex(&raw)
}

/// The identity of a PDB.
pub fn id(bytes: &[u8]) -> Result<PdbId, SymbolError> {
    id_from(Cursor::new(bytes))
}

/// The identity of the PDB `source` reads (a file: only the streams needed are read).
pub fn id_from<S>(source: S) -> Result<PdbId, SymbolError>
where
    S: std::io::Read + std::io::Seek + std::fmt::Debug,
{
    let mut pdb = PDB::open(source)?;
    let info = pdb.pdb_information()?;
    let guid = format!("{:X}", info.guid.simple());
    // The DBI stream's age is the one PE files record; the info stream's may be newer.
    let age = pdb
        .debug_information()
        .map_or(info.age, |d| d.age().unwrap_or(info.age));
    Ok(PdbId { guid, age })
}

/// Reads a PDB's functions as a module named `name` placed at 0 (move it with
/// [`Module::placed_at`]). Its size reaches the end of the last function.
pub fn read(name: &str, bytes: &[u8]) -> Result<Module, SymbolError> {
    let pdb_id = id(bytes)?;
    let mut pdb = PDB::open(Cursor::new(bytes))?;
    let address_map = pdb.address_map()?;
    let mut symbols = Vec::new();

    let strings = pdb.string_table().ok();
    let mut lines = Builder::default();

    let dbi = pdb.debug_information()?;
    let mut modules = dbi.modules()?;
    while let Some(m) = modules.next()? {
        let Some(info) = pdb.module_info(&m)? else {
            continue;
        };
        if let Err(e) = read_lines(&info, &address_map, strings.as_ref(), &mut lines) {
            log::debug!(
                "{name}: line information of {} left out: {e}",
                m.module_name()
            );
        }
        let mut syms = info.symbols()?;
        while let Some(sym) = syms.next()? {
            if let Ok(SymbolData::Procedure(p)) = sym.parse() {
                if let Some(rva) = p.offset.to_rva(&address_map) {
                    symbols.push(Symbol {
                        rva: u64::from(rva.0),
                        size: u64::from(p.len),
                        name: p.name.to_string().into_owned(),
                    });
                }
            }
        }
    }

    let globals = pdb.global_symbols()?;
    let mut it = globals.iter();
    while let Some(sym) = it.next()? {
        if let Ok(SymbolData::Public(p)) = sym.parse() {
            if !(p.function || p.code) {
                continue;
            }
            if let Some(rva) = p.offset.to_rva(&address_map) {
                symbols.push(Symbol {
                    rva: u64::from(rva.0),
                    size: 0,
                    name: p.name.to_string().into_owned(),
                });
            }
        }
    }
    sort_symbols(&mut symbols);
    let size = symbols
        .iter()
        .map(|s| s.rva + s.size.max(1))
        .max()
        .unwrap_or(0);
    Ok(Module {
        name: name.to_string(),
        path: None,
        kind: ImageKind::Pdb,
        base: 0,
        size,
        debug_id: Some(pdb_id.key()),
        symbols,
        code: Vec::new(),
        bits: 64,
        lines: lines.finish(),
    })
}

/// Adds the rows of one module's line program: each line record holds from its RVA for its
/// length (then nothing, unless another record starts there).
fn read_lines(
    info: &ModuleInfo<'_>,
    address_map: &AddressMap<'_>,
    strings: Option<&StringTable<'_>>,
    out: &mut Builder,
) -> Result<(), ::pdb::Error> {
    let program = info.line_program()?;
    // The module's file index -> the table's: each name is read and interned once per module,
    // not once per line record.
    let mut files: HashMap<FileIndex, u32> = HashMap::new();
    let mut records = program.lines();
    while let Some(l) = records.next()? {
        let Some(rva) = l.offset.to_rva(address_map) else {
            continue;
        };
        let rva = u64::from(rva.0);
        let file = *files.entry(l.file_index).or_insert_with(|| {
            let name = program
                .get_file_info(l.file_index)
                .ok()
                .zip(strings)
                .and_then(|(f, s)| f.name.to_string_lossy(s).ok())
                .map(|n| n.into_owned())
                .unwrap_or_default();
            out.file(name)
        });
        let line = if l.line_start >= HIDDEN_LINE {
            0
        } else {
            l.line_start
        };
        out.push(rva, file, line);
        if let Some(len) = l.length.filter(|&n| n > 0) {
            out.push(rva + u64::from(len), 0, 0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_use_the_symbol_server_order() {
        let raw = [
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ];
        assert_eq!(guid_hex(raw), "00112233445566778899AABBCCDDEEFF");
        let id = PdbId {
            guid: guid_hex(raw),
            age: 10,
        };
        assert_eq!(id.key(), "00112233445566778899AABBCCDDEEFFA");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read("x.pdb", b"Microsoft C/C++ MSF 7.00 but not really").is_err());
    }
}
