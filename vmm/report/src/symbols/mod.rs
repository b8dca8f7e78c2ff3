//! Symbol tables of guest images, looked up by guest-virtual address.
//!
//! A [`Module`] is one image (an ELF file, a PE file, or a bare PDB) with its symbols as offsets
//! from its image base (RVAs) and its code bytes, placed at a load address. [`Symbols`] is the
//! set of placed modules a profile is symbolized with.
//!
//! Readers: ELF through the object crate ([`elf`]: the reference guest, Linux kernels), PE export
//! tables plus the matching PDB found through a symbol path ([`pe`]), and PDB files on their
//! own ([`pdb`]: public symbols and procedures). PDBs and images are found by identity through
//! a [`SymbolPath`] ([`path`]: `_NT_SYMBOL_PATH` syntax) by a [`Finder`] ([`find`]), in local
//! stores ([`store`]) and on HTTP(S) symbol servers ([`server`]).
//!
//! Guest kernels' structure layouts (for naming processes and threads) come from the same files'
//! type information: [`types`] (PDB type streams, BTF, DWARF), or from Volatility's ISF symbol
//! tables, in packs on the symbol path too ([`packs`]).

pub mod debug_file;
pub mod elf;
pub mod find;
pub mod guest_files;
pub mod inlines;
pub mod lines;
pub mod packs;
pub mod path;
pub mod pdb;
pub mod pe;
pub mod server;
pub mod store;
#[cfg(test)]
pub(crate) mod testdata;
pub mod types;

use std::path::PathBuf;

pub use find::{Finder, MissingPdb};
pub use lines::{LineTable, SourceLine};
pub use path::SymbolPath;

/// One symbol of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Offset from the module's image base.
    pub rva: u64,
    /// Size in bytes (0 if unknown: it then extends to the next symbol).
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

/// Bytes of one code section, for disassembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Offset of the first byte from the module's image base.
    pub rva: u64,
    /// The section's bytes as they are in the file (shorter than the section when it has
    /// uninitialised tail).
    pub data: Vec<u8>,
}

/// What a module's symbols were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// An ELF file's symbol table.
    Elf,
    /// A PE file's export table (and its PDB when one was found).
    Pe,
    /// A PDB file alone.
    Pdb,
}

/// One image: its symbols and code, placed at a load address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Short name (the file name without directories), as shown in reports.
    pub name: String,
    /// The file it came from, when read from one.
    pub path: Option<PathBuf>,
    /// The format its symbols came from.
    pub kind: ImageKind,
    /// Where the image is placed in the guest's address space.
    pub base: u64,
    /// Bytes it spans from `base`.
    pub size: u64,
    /// ELF build id (hex) or PDB signature (`GUID` in hex followed by the age), when known.
    pub debug_id: Option<String>,
    /// Symbols sorted by RVA, at most one per RVA.
    pub symbols: Vec<Symbol>,
    /// Code sections, sorted by RVA.
    pub code: Vec<Section>,
    /// 64 or 32: how its code decodes.
    pub bits: u32,
    /// Source lines by RVA (empty without debug line information).
    pub lines: LineTable,
}

/// A symbol found for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit<'a> {
    /// The module whose range holds the address.
    pub module: &'a Module,
    /// The symbol covering it, if any.
    pub symbol: Option<&'a Symbol>,
    /// Offset from the symbol's start (or from the module's base when there is no symbol).
    pub offset: u64,
}

impl<'a> Hit<'a> {
    /// The address's source line, when the module has line information.
    pub fn source(&self) -> Option<SourceLine<'a>> {
        self.module.lines.lookup(self.rva())
    }

    /// `module!name+0xoff`, `module!name`, or `module+0xrva` when no symbol covers it.
    pub fn describe(&self) -> String {
        match (self.symbol, self.offset) {
            (Some(s), 0) => format!("{}!{}", self.module.name, s.name),
            (Some(s), off) => format!("{}!{}+{off:#x}", self.module.name, s.name),
            (None, off) => format!("{}+{off:#x}", self.module.name),
        }
    }

    /// The address's offset from the module's base.
    pub fn rva(&self) -> u64 {
        self.symbol.map_or(self.offset, |s| s.rva + self.offset)
    }

    /// The function's name, or `module+0xrva`.
    pub fn function(&self) -> String {
        match self.symbol {
            Some(s) => s.name.clone(),
            None => format!("{}+{:#x}", self.module.name, self.offset),
        }
    }
}

/// Errors reading symbols.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    /// The object crate could not parse the image.
    #[error("cannot parse the image")]
    Object(#[from] object::Error),
    /// The pdb crate could not read the PDB.
    #[error("cannot read the PDB")]
    Pdb(#[from] ::pdb::Error),
    /// The image is neither ELF nor PE.
    #[error("not an ELF or PE image, nor a PDB")]
    UnknownFormat,
    /// A file could not be read.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// A file was refused (not a regular file, above its limit) or could not be read.
    #[error(transparent)]
    Input(#[from] files::bounded::InputError),
}

/// Sorts symbols by RVA and keeps one per RVA: the one with a size over one without, then the
/// first one given (callers list preferred kinds first).
pub(crate) fn sort_symbols(syms: &mut Vec<Symbol>) {
    syms.sort_by_key(|s| (s.rva, s.size == 0));
    syms.dedup_by_key(|s| s.rva);
}

impl Module {
    /// Moves the module to `base`.
    pub fn placed_at(mut self, base: u64) -> Self {
        self.base = base;
        self
    }

    /// One past its last byte.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// True when `addr` lies in the module's range.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.end()
    }

    /// The symbol containing `rva`, and the offset into it.
    pub fn lookup_rva(&self, rva: u64) -> Option<(&Symbol, u64)> {
        let i = self
            .symbols
            .partition_point(|s| s.rva <= rva)
            .checked_sub(1)?;
        let s = &self.symbols[i];
        let offset = rva - s.rva;
        let inside = if s.size > 0 {
            offset < s.size
        } else {
            self.symbols.get(i + 1).is_none_or(|n| rva < n.rva)
        };
        inside.then_some((s, offset))
    }

    /// The code bytes from guest address `addr` to the end of its section, if `addr` is in
    /// one.
    pub fn code_at(&self, addr: u64) -> Option<&[u8]> {
        let rva = addr.checked_sub(self.base)?;
        let s = self
            .code
            .iter()
            .find(|s| rva >= s.rva && rva - s.rva < s.data.len() as u64)?;
        let from = usize::try_from(rva - s.rva).ok()?;
        s.data.get(from..)
    }
}

/// A guest file found on the host (in a sysroot or an initramfs) whose build id is not the
/// one the guest had mapped: another build of the file, whose symbols would name the wrong
/// functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The file's path in the guest.
    pub path: String,
    /// Where it was found.
    pub origin: String,
    /// The found file's build id.
    pub found: String,
    /// The guest's.
    pub guest: String,
}

/// A set of placed modules, and the PDBs that were looked for and not found.
///
/// Most modules are seen from every address space (a kernel, its drivers, the Windows images
/// found in guest memory, which Windows maps at one base across processes). A Linux process's
/// files are seen only from the processes that map them there ([`Symbols::push_in`]): two
/// programs linked at the same address are told apart by the process a sample came from.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    modules: Vec<Module>,
    /// Modules mapped by some processes only, with those processes' keys (sorted).
    mapped: Vec<(Vec<u32>, Module)>,
    missing: Vec<MissingPdb>,
    /// Guest files that processes mapped and that were not found or not readable.
    unmapped: Vec<String>,
    mismatched: Vec<Mismatch>,
}

impl Symbols {
    /// A set holding one module.
    pub fn from_module(module: Module) -> Self {
        Symbols {
            modules: vec![module],
            ..Symbols::default()
        }
    }

    /// The exports of a PE image, and the symbols of its PDB when `finder` finds the PDB its
    /// CodeView record names (see [`pe::read`]). Placed at the image's preferred base.
    pub fn from_pe(
        bytes: &[u8],
        name: &str,
        finder: Option<&mut Finder>,
    ) -> Result<Self, SymbolError> {
        Ok(Self::from_module(pe::read(name, bytes, finder)?))
    }

    /// The PDBs looked for and not found (each once), for reports.
    pub fn missing(&self) -> &[MissingPdb] {
        &self.missing
    }

    /// Records a PDB looked for and not found (once).
    pub fn add_missing(&mut self, m: MissingPdb) {
        if !self.missing.contains(&m) {
            self.missing.push(m);
        }
    }

    /// The guest files processes mapped that were looked for and not found (or not ELF).
    pub fn unmapped(&self) -> &[String] {
        &self.unmapped
    }

    /// Records a guest file that was looked for and not found (once).
    pub fn add_unmapped(&mut self, path: String) {
        if !self.unmapped.contains(&path) {
            self.unmapped.push(path);
        }
    }

    /// The guest files found on the host with another build id than the guest's, whose
    /// symbols were not used.
    pub fn mismatched(&self) -> &[Mismatch] {
        &self.mismatched
    }

    /// Records a file found with another build id than the guest's (once).
    pub fn add_mismatched(&mut self, m: Mismatch) {
        if !self.mismatched.contains(&m) {
            self.mismatched.push(m);
        }
    }

    /// Records the PDBs `finder` did not find.
    pub fn note_missing(&mut self, finder: &Finder) {
        for m in finder.missing() {
            self.add_missing(m.clone());
        }
    }

    /// The public symbols and procedures of a PDB, placed at 0 until moved with
    /// [`Module::placed_at`].
    pub fn from_pdb(bytes: &[u8], name: &str) -> Result<Self, SymbolError> {
        Ok(Self::from_module(pdb::read(name, bytes)?))
    }

    /// Adds a module.
    pub fn push(&mut self, module: Module) {
        self.modules.push(module);
        self.modules.sort_by_key(|m| m.base);
    }

    /// Adds a module that only the processes with these keys map (at its base).
    pub fn push_in(&mut self, mut processes: Vec<u32>, module: Module) {
        processes.sort_unstable();
        processes.dedup();
        self.mapped.push((processes, module));
        self.mapped.sort_by_key(|(_, m)| m.base);
    }

    /// The modules seen from every address space, by base address.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Every module: those every address space sees, then those some processes map (each
    /// once, however many processes map it).
    pub fn all_modules(&self) -> impl Iterator<Item = &Module> {
        self.modules
            .iter()
            .chain(self.mapped.iter().map(|(_, m)| m))
    }

    /// Every module, to change what it holds (not where it lies).
    pub fn all_modules_mut(&mut self) -> impl Iterator<Item = &mut Module> {
        (self.modules.iter_mut()).chain(self.mapped.iter_mut().map(|(_, m)| m))
    }

    /// The modules some processes map, with their keys, by base address.
    pub fn mapped(&self) -> impl Iterator<Item = (&[u32], &Module)> {
        self.mapped.iter().map(|(p, m)| (p.as_slice(), m))
    }

    /// Number of symbols over all modules.
    pub fn len(&self) -> usize {
        self.all_modules().map(|m| m.symbols.len()).sum()
    }

    /// True when there are no symbols.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The module whose range holds `addr` (the last placed one when ranges overlap).
    pub fn module_at(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().rev().find(|m| m.contains(addr))
    }

    /// The module at `addr` as the process with key `process` sees it: one it maps there,
    /// else one every address space sees ([`Symbols::module_at`]).
    pub fn module_in(&self, process: Option<u32>, addr: u64) -> Option<&Module> {
        process
            .and_then(|p| {
                self.mapped
                    .iter()
                    .rev()
                    .find(|(ps, m)| m.contains(addr) && ps.binary_search(&p).is_ok())
                    .map(|(_, m)| m)
            })
            .or_else(|| self.module_at(addr))
    }

    /// The module and symbol at `addr`, in no process in particular: only the modules every
    /// address space sees.
    pub fn resolve(&self, addr: u64) -> Option<Hit<'_>> {
        self.resolve_in(None, addr)
    }

    /// The module and symbol at `addr` as the process with key `process` sees it.
    pub fn resolve_in(&self, process: Option<u32>, addr: u64) -> Option<Hit<'_>> {
        let module = self.module_in(process, addr)?;
        let rva = addr - module.base;
        Some(match module.lookup_rva(rva) {
            Some((symbol, offset)) => Hit {
                module,
                symbol: Some(symbol),
                offset,
            },
            None => Hit {
                module,
                symbol: None,
                offset: rva,
            },
        })
    }

    /// The symbol containing `addr`, and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let hit = self.resolve(addr)?;
        Some((hit.symbol?, hit.offset))
    }

    /// `name+0xoff` for `addr`, or the bare address.
    pub fn describe(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((s, 0)) => s.name.clone(),
            Some((s, off)) => format!("{}+{off:#x}", s.name),
            None => format!("{addr:#x}"),
        }
    }

    /// `module!name+0xoff`, `module+0xrva`, or the bare address outside every module.
    pub fn describe_qualified(&self, addr: u64) -> String {
        self.resolve(addr)
            .map_or_else(|| format!("{addr:#x}"), |h| h.describe())
    }
}

/// The file name of `path` without directories (either separator), for PDB paths recorded on
/// Windows.
pub(crate) fn base_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn module(name: &str, base: u64, syms: &[(u64, u64, &str)]) -> Module {
        Module {
            name: name.into(),
            path: None,
            kind: ImageKind::Elf,
            base,
            size: 0x100,
            debug_id: None,
            symbols: syms
                .iter()
                .map(|(rva, size, n)| Symbol {
                    rva: *rva,
                    size: *size,
                    name: (*n).into(),
                })
                .collect(),
            code: vec![Section {
                rva: 0x40,
                data: vec![0x90; 8],
            }],
            bits: 64,
            lines: LineTable::default(),
        }
    }

    fn table() -> Symbols {
        Symbols::from_module(module(
            "m",
            0x1000,
            &[(0, 0x10, "a"), (0x20, 0, "b"), (0x40, 0x8, "c")],
        ))
    }

    #[test]
    fn lookup_respects_sizes_and_gaps() {
        let t = table();
        assert_eq!(t.describe(0x1000), "a");
        assert_eq!(t.describe(0x100f), "a+0xf");
        assert_eq!(t.describe(0x1010), "0x1010");
        assert_eq!(t.describe(0x103f), "b+0x1f");
        assert_eq!(t.describe(0x1048), "0x1048");
        assert_eq!(t.describe(0xfff), "0xfff");
        assert_eq!(t.describe_qualified(0x1041), "m!c+0x1");
        assert_eq!(t.describe_qualified(0x1048), "m+0x48");
        assert_eq!(t.describe_qualified(0x1100), "0x1100");
    }

    #[test]
    fn modules_are_found_by_range_and_can_move() {
        let mut t = table();
        t.push(module("n", 0x8000, &[(0x10, 4, "x")]).placed_at(0x9000));
        assert_eq!(t.describe_qualified(0x9011), "n!x+0x1");
        assert_eq!(t.describe_qualified(0x8011), "0x8011");
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn code_bytes_follow_the_placement() {
        let m = module("m", 0x1000, &[]);
        assert_eq!(m.code_at(0x1042), Some(&[0x90u8; 6][..]));
        assert_eq!(m.code_at(0x1048), None);
        assert_eq!(m.code_at(0x0fff), None);
    }

    #[test]
    fn base_names_accept_both_separators() {
        assert_eq!(base_name(r"C:\build\tiny.pdb"), "tiny.pdb");
        assert_eq!(base_name("/tmp/x/tiny.pdb"), "tiny.pdb");
        assert_eq!(base_name("tiny.pdb"), "tiny.pdb");
    }
}
