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
    // An x86 program's PDB (a WOW64 process's DLLs): its code is 32-bit.
    let bits = match dbi.machine_type() {
        Ok(::pdb::MachineType::X86) => 32,
        _ => 64,
    };
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
        bits,
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

    /// An x86 program's PDB (MSVC's, testdata/msvc-pdb/big-read.pdb), as a WOW64 process's
    /// DLLs have: every function that `llvm-pdbutil dump -publics` lists is a symbol at the
    /// RVA its section and offset give by `dump -section-headers`, and the module is 32-bit.
    #[test]
    fn an_x86_pdb_names_its_functions_at_the_rvas_llvm_pdbutil_gives() {
        let bytes = crate::symbols::types::pdb::msvc_tests::fixture("big-read.pdb");
        let dir = std::env::temp_dir().join(format!("hvprof-x86-pdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big-read.pdb");
        std::fs::write(&path, &bytes).unwrap();
        let dump = |what: &str| {
            let out = std::process::Command::new("llvm-pdbutil")
                .args(["dump", what])
                .arg(&path)
                .output()
                .expect("cannot run llvm-pdbutil: install Debian's llvm");
            assert!(out.status.success(), "llvm-pdbutil dump {what} failed");
            String::from_utf8(out.stdout).unwrap()
        };
        let (publics, headers) = (dump("-publics"), dump("-section-headers"));
        std::fs::remove_dir_all(&dir).unwrap();
        // "N virtual address" lines, in section order (sections number from 1).
        let sections: Vec<u64> = headers
            .lines()
            .filter_map(|l| l.trim().strip_suffix(" virtual address"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .collect();
        // "S_PUB32 ... `NAME`" then "flags = function, addr = SSSS:OOOO" (decimal).
        let mut want = Vec::new();
        let mut lines = publics.lines();
        while let Some(l) = lines.next() {
            let Some(name) = l.split('`').nth(1) else {
                continue;
            };
            let Some(next) = lines.next() else { break };
            if !next.contains("flags = function") {
                continue;
            }
            let addr = next.rsplit("addr = ").next().unwrap().trim();
            let (seg, off) = addr.split_once(':').unwrap();
            let (seg, off): (usize, u64) = (seg.parse().unwrap(), off.parse().unwrap());
            want.push((name.to_string(), sections[seg - 1] + off));
        }
        assert!(want.len() > 50, "{} function publics", want.len());
        let m = read("big-read.pdb", &bytes).unwrap();
        assert_eq!(m.bits, 32);
        // hvprof keeps the procedure record's name where a module has one (undecorated:
        // `__scrt_initialize_type_info` for `?__scrt_initialize_type_info@@YAXXZ`, a method as
        // `Class::method`, a template's arguments written out), and one name where the linker
        // folded identical functions into one address: a name of the same function, each part
        // of it within one of the decorated names at that address.
        let same = |public: &str, name: &str| {
            let bare = name.split('<').next().unwrap_or(name);
            public == name || bare.split("::").all(|part| public.contains(part))
        };
        let missing: Vec<_> = want
            .iter()
            .filter(|(_, rva)| {
                let publics = want.iter().filter(|(_, r)| r == rva);
                !m.symbols.iter().any(|s| {
                    s.rva == *rva && publics.clone().any(|(public, _)| same(public, &s.name))
                })
            })
            .collect();
        assert!(
            missing.is_empty(),
            "{} of {}: {missing:?}",
            missing.len(),
            want.len()
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read("x.pdb", b"Microsoft C/C++ MSF 7.00 but not really").is_err());
    }
}
