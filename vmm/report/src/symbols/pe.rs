//! PE images: export tables, code sections, and the PDB their CodeView record names.
//!
//! The PDB is looked up through a symbol path by a [`Finder`] (see [`super::find`]), which
//! uses a PDB only when its GUID and age are the ones the PE records (a stale PDB would name
//! the wrong functions); a missing or stale PDB leaves the exports alone.

use object::{BinaryFormat, Object, ObjectSection, SectionKind};

use super::{
    base_name, pdb, sort_symbols, Finder, ImageKind, Module, Section, Symbol, SymbolError,
};

/// The PDB a PE file names in its CodeView (RSDS) debug record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdbRef {
    /// The PDB's file name (directories dropped).
    pub name: String,
    /// The GUID and age it must have.
    pub id: pdb::PdbId,
}

/// The PDB reference in a PE image, if it has one.
pub fn pdb_ref(bytes: &[u8]) -> Result<Option<PdbRef>, SymbolError> {
    let file = object::File::parse(bytes)?;
    Ok(file.pdb_info()?.map(|cv| PdbRef {
        name: base_name(&String::from_utf8_lossy(cv.path())).to_string(),
        id: pdb::PdbId {
            guid: pdb::guid_hex(cv.guid()),
            age: cv.age(),
        },
    }))
}

/// Reads a PE image as a module named `name`, placed at its preferred image base: its exports,
/// its code sections, and the symbols of its PDB when `finder` finds the matching one.
pub fn read(name: &str, bytes: &[u8], finder: Option<&mut Finder>) -> Result<Module, SymbolError> {
    let file = object::File::parse(bytes)?;
    if file.format() != BinaryFormat::Pe {
        return Err(SymbolError::UnknownFormat);
    }
    let image_base = file.relative_address_base();
    let size = file
        .sections()
        .map(|s| {
            s.address()
                .saturating_add(s.size())
                .saturating_sub(image_base)
        })
        .max()
        .unwrap_or(0);
    let mut symbols: Vec<Symbol> = Vec::new();
    for export in file.exports()? {
        let export = export?;
        let object::ExportTarget::Address { address } = export.target() else {
            continue; // forwarders name another DLL's code
        };
        let (object::NameOrOrdinal::Name(name), Some(rva)) =
            (export.name(), address.checked_sub(image_base))
        else {
            continue;
        };
        if rva < size {
            symbols.push(Symbol {
                rva,
                size: 0,
                name: String::from_utf8_lossy(name).into_owned(),
            });
        }
    }
    let code = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text && s.address() >= image_base)
        .filter_map(|s| {
            Some(Section {
                rva: s.address() - image_base,
                data: s.data().ok()?.to_vec(),
            })
        })
        .collect();
    let mut debug_id = None;
    let mut lines = super::LineTable::default();
    if let (Some(finder), Some(r)) = (finder, pdb_ref(bytes)?) {
        debug_id = Some(r.id.key());
        match finder.find_pdb(name, &r.name, &r.id) {
            Some(path) => {
                let pdb_bytes = files::bounded::read(&path, files::bounded::SYMBOLS)?;
                let from_pdb = pdb::read(&r.name, &pdb_bytes)?;
                lines = from_pdb.lines;
                // PDB symbols first: they have sizes and undecorated names.
                let mut all = from_pdb.symbols;
                all.append(&mut symbols);
                symbols = all;
            }
            None => log::info!("{name}: exports only"),
        }
    }
    sort_symbols(&mut symbols);
    Ok(Module {
        name: name.to_string(),
        path: None,
        kind: ImageKind::Pe,
        base: image_base,
        size,
        debug_id,
        symbols,
        code,
        bits: if file.is_64() { 64 } else { 32 },
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elf_is_not_a_pe() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(
            read("exe", &exe, None),
            Err(SymbolError::UnknownFormat)
        ));
    }
}
