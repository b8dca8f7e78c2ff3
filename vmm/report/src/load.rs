//! Loading symbols for a profile: the kernel it ran when the caller holds its image (a
//! kernel built into hvprof), plus `--symbols FILE[@BASE]` images. The kernel path a saved
//! profile records is never opened: a kernel file's symbols come from `--symbols`.
//!
//! An image is recognised by its first bytes: ELF, PE (`MZ`), or PDB (the MSF 7.00 magic).
//! Without `@BASE` an ELF stays where it was linked; a PE is placed at the base of the first
//! profile object whose size is exactly its image size (a module profile, as a Windows tool
//! creates it with `NtCreateProfile(ImageBase, SizeOfImage)`), else at its preferred base; a
//! bare PDB needs `@BASE` (it knows only RVAs) and is placed at 0 without one.
//!
//! With a [`Finder`], a PE's PDB is found through its symbol path, and so are the PDBs (and,
//! when the finder wants them, the images) of the modules found in guest memory. With
//! [`GuestFiles`] (an initramfs, sysroots), so are the ELF files a Linux guest's processes
//! mapped ([`add_mapped_files`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::profile::{GuestModule, Profile};
use super::symbols::debug_file::{add_debug, DebugRef};
use super::symbols::guest_files::{GuestFiles, Origin};
use super::symbols::{elf, pdb, pe, Finder, Mismatch, Module, SymbolError, Symbols};
use super::ReportError;
use files::bounded;

const PDB_MAGIC: &[u8] = b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0";

/// Whether `head`, a file's first bytes, starts as a PDB, a PE image or an ELF file does:
/// anything else is refused before the rest is read, however large it is.
fn may_be_symbols(head: &[u8]) -> bool {
    head.starts_with(PDB_MAGIC) || head.starts_with(b"MZ") || head.starts_with(b"\x7fELF")
}

/// One `--symbols` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolSpec {
    /// The image or PDB.
    pub path: PathBuf,
    /// Where to place it, when given.
    pub base: Option<u64>,
}

impl std::str::FromStr for SymbolSpec {
    type Err = ReportError;

    /// `FILE` or `FILE@0xBASE` (hex).
    fn from_str(s: &str) -> Result<Self, ReportError> {
        let bad = || ReportError::SymbolSpec(s.to_string());
        match s.rsplit_once('@') {
            Some((path, base)) => {
                let digits = base.strip_prefix("0x").ok_or_else(bad)?;
                let base = u64::from_str_radix(digits, 16).map_err(|_| bad())?;
                if path.is_empty() {
                    return Err(bad());
                }
                Ok(SymbolSpec {
                    path: path.into(),
                    base: Some(base),
                })
            }
            None if !s.is_empty() => Ok(SymbolSpec {
                path: s.into(),
                base: None,
            }),
            None => Err(bad()),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Reads one image as a module placed by `spec`'s base, or else as described above.
pub fn module(
    spec: &SymbolSpec,
    finder: Option<&mut Finder>,
    profile: Option<&Profile>,
) -> Result<Module, ReportError> {
    let err = |e: SymbolError| ReportError::Symbols(spec.path.clone(), e);
    let (file, size) = bounded::open(&spec.path, bounded::SYMBOLS, false)?;
    if !may_be_symbols(&bounded::head(&file, &spec.path, PDB_MAGIC.len())?) {
        return Err(err(SymbolError::UnknownFormat));
    }
    let bytes = bounded::read_from(&file, &spec.path, size, bounded::SYMBOLS)?;
    let name = file_name(&spec.path);
    let m = if bytes.starts_with(PDB_MAGIC) {
        pdb::read(&name, &bytes).map_err(err)?
    } else if bytes.starts_with(b"MZ") {
        let m = pe::read(&name, &bytes, finder).map_err(err)?;
        let module_profile = profile
            .and_then(|p| p.objects.iter().find(|o| o.size.0 == m.size))
            .map(|o| o.base.0);
        match module_profile {
            Some(base) if spec.base.is_none() => m.placed_at(base),
            _ => m,
        }
    } else {
        elf::read(&name, &bytes).map_err(err)?
    };
    let m = Module {
        path: Some(spec.path.clone()),
        ..m
    };
    Ok(match spec.base {
        Some(base) => m.placed_at(base),
        None => m,
    })
}

/// Where the symbols of a profile's kernel come from. Only the caller knows which kernels
/// it carries inside itself. A saved profile's `run.kernel` is a name, never a file to open:
/// the file a saved (and possibly crafted) profile names may be anything on this host, so a
/// kernel file's symbols come only from what the user names (`--symbols`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelImage<'a> {
    /// No kernel image beyond the `--symbols` the user gives.
    None,
    /// An ELF image the caller holds, read under the module name `name`.
    Bytes {
        /// The module's name in reports.
        name: &'a str,
        /// The ELF image.
        bytes: &'a [u8],
    },
}

/// The symbols for `profile`: its kernel's from `kernel` when they can be read (a kernel
/// without a readable symbol table is left out, not an error), then every `specs` image,
/// then with a finder the modules found in guest memory ([`guest_modules`]). The PDBs the
/// finder did not find are recorded in the symbols ([`Symbols::missing`]).
pub fn for_profile(
    profile: &Profile,
    kernel: KernelImage,
    specs: &[SymbolSpec],
    mut finder: Option<&mut Finder>,
) -> Result<Symbols, ReportError> {
    let mut symbols = Symbols::default();
    match kernel {
        KernelImage::Bytes { name, bytes } => {
            if let Ok(m) = elf::read(name, bytes) {
                symbols.push(m);
            }
        }
        KernelImage::None => {}
    }
    for spec in specs {
        symbols.push(module(spec, finder.as_deref_mut(), Some(profile))?);
    }
    if let Some(finder) = finder {
        add_guest_modules(&mut symbols, profile, finder);
    }
    Ok(symbols)
}

/// Adds [`guest_modules`] to `symbols`, and records what `finder` did not find.
pub fn add_guest_modules(symbols: &mut Symbols, profile: &Profile, finder: &mut Finder) {
    for m in guest_modules(profile, finder, symbols) {
        symbols.push(m);
    }
    symbols.note_missing(finder);
}

/// Adds the ELF files a Linux guest's processes mapped (profile.json's
/// `processes[].mappings`) that `files` has, each placed where its mapping put it and seen
/// only from the processes that map it there ([`Symbols::push_in`]). A file is read once
/// however many processes map it. The guest paths not found or not readable as ELF are
/// recorded ([`Symbols::unmapped`]).
pub fn add_mapped_files(symbols: &mut Symbols, profile: &Profile, files: &GuestFiles) {
    if files.is_empty() {
        return;
    }
    // Each file (each build of it the guest had) once: its module as linked and its loadable
    // segments, or None; and the builds read of each path.
    type Build<'a> = (&'a str, Option<&'a str>);
    let mut read: HashMap<Build, Option<(Module, elf::Segments)>> = HashMap::new();
    let mut of_path: HashMap<&str, Vec<Build>> = HashMap::new();
    let mut missing: Vec<String> = Vec::new();
    // (path, build id, placed base) -> the processes that map it there.
    let mut placed: BTreeMap<(Build, u64), Vec<u32>> = BTreeMap::new();
    for p in &profile.processes {
        for m in &p.mappings {
            let path = m.path.as_str();
            let asked = m.build_id.as_deref();
            // A file read before that is this mapping's: one whose build id the guest could
            // not read takes the path's file, one with an id the file that has it; each such
            // pair is one module.
            let known = of_path.get(path).into_iter().flatten().copied().find(|b| {
                read.get(b)
                    .and_then(|r| r.as_ref())
                    .is_some_and(|(module, _)| {
                        asked.is_none() || asked == module.debug_id.as_deref()
                    })
            });
            let build = known.unwrap_or((path, asked));
            if known.is_none() && !read.contains_key(&build) {
                of_path.entry(path).or_default().push(build);
            }
            let entry = read.entry(build).or_insert_with(|| {
                // Another build than the guest's would name the wrong functions: it is passed
                // over (and said so), and the places after it are looked in.
                let (bytes, origin) =
                    files.read_accepted(path, bounded::SYMBOLS, |bytes, at| {
                        let (Some(guest), Some(found)) = (&m.build_id, elf::build_id(bytes)) else {
                            return true;
                        };
                        if *guest == found {
                            return true;
                        }
                        symbols.add_mismatched(Mismatch {
                            path: path.to_string(),
                            origin: at.to_string(),
                            found,
                            guest: guest.clone(),
                        });
                        false
                    })?;
                match elf::read(super::symbols::base_name(path), &bytes) {
                    Ok(module) => Some((
                        with_debug_file(
                            files,
                            path,
                            &bytes,
                            Module {
                                path: Some(PathBuf::from(origin.to_string())),
                                ..module
                            },
                        ),
                        elf::Segments::of(&bytes)?,
                    )),
                    Err(e) => {
                        log::warn!("{path} (in {origin}): {e}");
                        None
                    }
                }
            });
            let Some((module, segments)) = entry else {
                if !missing.iter().any(|x| x == path) {
                    missing.push(path.to_string());
                }
                continue;
            };
            let Some(linked) = segments.linked_address(m.offset.0) else {
                log::warn!(
                    "{path}: no loadable segment holds offset {:#x} (mapped at {:#x})",
                    m.offset.0,
                    m.start.0
                );
                continue;
            };
            let base = module.base.wrapping_add(m.start.0.wrapping_sub(linked));
            placed.entry((build, base)).or_default().push(p.key);
        }
    }
    for ((build, base), processes) in placed {
        if let Some(Some((module, _))) = read.get(&build) {
            symbols.push_in(processes, module.clone().placed_at(base));
        }
    }
    for path in missing {
        symbols.add_unmapped(path);
    }
}

/// `module`, read from the guest file `path` (`bytes`), with the symbols and lines of its
/// separate debug file when it is stripped and one of the places has it ([`DebugRef`]); its
/// path then says where they came from. A candidate that is another build's is passed over.
fn with_debug_file(files: &GuestFiles, path: &str, bytes: &[u8], mut module: Module) -> Module {
    let Some(wanted) = DebugRef::of(bytes) else {
        return module;
    };
    let found = wanted.candidates(path).into_iter().find_map(|at| {
        let (debug, origin) = files.read_accepted(&at, bounded::SYMBOLS, |debug, origin| {
            let ok = wanted.accepts(debug);
            if !ok {
                log::warn!("{at} in {origin} is not the debug file of {path}: passed over");
            }
            ok
        })?;
        let read = elf::read(super::symbols::base_name(path), &debug).ok()?;
        Some((read, at, origin))
    });
    let Some((debug, at, origin)) = found else {
        return module;
    };
    let from = match &origin {
        Origin::Host(p) => p.display().to_string(),
        other => format!("{at} in {other}"),
    };
    if add_debug(&mut module, debug) {
        module.path = module
            .path
            .map(|p| PathBuf::from(format!("{} (symbols: {from})", p.display())));
    } else {
        log::warn!("{from}: linked at another address than {path}: passed over");
    }
    module
}

/// The modules found in guest memory that `finder` finds symbols for, each placed at its
/// base: its image when the finder looks for images and finds it (exports, code for
/// disassembly, and its PDB), else its PDB alone. Modules at a base another module already
/// covers, and repeats of one image mapped in several address spaces, are left out. A file
/// that is missing or unreadable only logs.
pub fn guest_modules(profile: &Profile, finder: &mut Finder, have: &Symbols) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for g in &profile.guest_modules {
        let taken = |base: u64| have.modules().iter().chain(&out).any(|m| m.base == base);
        if taken(g.base.0) {
            continue;
        }
        let found = guest_image(g, finder).or_else(|| guest_pdb(g, finder));
        if let Some(m) = found {
            out.push(Module {
                size: g.size.0,
                ..m.placed_at(g.base.0)
            });
        }
    }
    out
}

/// A guest module read from its image, found by the name its export directory gives it
/// (a module named after its PDB has no file name to look up) and its TimeDateStamp and
/// SizeOfImage.
fn guest_image(g: &GuestModule, finder: &mut Finder) -> Option<Module> {
    if !finder.wants_images() || !g.name.contains('.') {
        return None;
    }
    let size = u32::try_from(g.size.0).ok()?;
    let path = finder.find_image(&g.name, g.timestamp, size)?;
    read_found(path, |b| pe::read(&g.name, b, Some(finder)))
}

/// The module `read` makes of the file at `path` (found on the symbol path), or None with a
/// warning if the file cannot be read or parsed.
fn read_found(
    path: PathBuf,
    read: impl FnOnce(&[u8]) -> Result<Module, SymbolError>,
) -> Option<Module> {
    let module = bounded::read(&path, bounded::SYMBOLS)
        .map_err(SymbolError::from)
        .and_then(|b| read(&b));
    match module {
        Ok(m) => Some(Module {
            path: Some(path),
            ..m
        }),
        Err(e) => {
            log::warn!("{}: {e}", path.display());
            None
        }
    }
}

/// A guest module's PDB alone.
fn guest_pdb(g: &GuestModule, finder: &mut Finder) -> Option<Module> {
    let p = g.pdb.as_ref()?;
    let id = pdb::PdbId {
        guid: p.guid.clone(),
        age: p.age,
    };
    let path = finder.find_pdb(&g.name, &p.name, &id)?;
    read_found(path, |b| pdb::read(&g.name, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn specs_parse_with_and_without_base() {
        let s: SymbolSpec = "a/b.dll@0xfffff80000000000".parse().unwrap();
        assert_eq!(s.path, PathBuf::from("a/b.dll"));
        assert_eq!(s.base, Some(0xffff_f800_0000_0000));
        let s: SymbolSpec = "x.pdb".parse().unwrap();
        assert_eq!(s.base, None);
        for bad in ["", "x@1000", "@0x1000", "x@0xzz"] {
            assert!(bad.parse::<SymbolSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unreadable_kernel_is_left_out() {
        let p = sample_profile(0x1000);
        let garbage = KernelImage::Bytes {
            name: "k",
            bytes: b"not an ELF",
        };
        for kernel in [KernelImage::None, garbage] {
            let s = for_profile(&p, kernel, &[], None).unwrap();
            assert!(s.modules().is_empty(), "{kernel:?}");
        }
    }

    #[test]
    fn a_kernel_given_as_bytes_is_read_under_its_name() {
        // Any ELF with symbols will do: the test binary is one.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let p = sample_profile(0x1000);
        let kernel = KernelImage::Bytes {
            name: "k",
            bytes: &exe,
        };
        let s = for_profile(&p, kernel, &[], None).unwrap();
        assert_eq!(s.modules()[0].name, "k");
        assert!(s.len() > 10);
    }

    #[test]
    fn guest_modules_whose_pdbs_are_not_found_are_recorded() {
        use crate::hex::{Hex, OptHex};
        use crate::profile::GuestPdb;
        use crate::symbols::SymbolPath;
        let dir = crate::symbols::testdata::temp_dir("load-missing");
        let mut p = sample_profile(0x1000);
        let g = GuestModule {
            process: OptHex(Some(0x5000)),
            name: "app".into(),
            base: Hex(0x4030_0000),
            size: Hex(0x5000),
            timestamp: 2,
            pdb: Some(GuestPdb {
                name: "app.pdb".into(),
                guid: "0123456789ABCDEF0123456789ABCDEF".into(),
                age: 3,
            }),
        };
        // The same image in two address spaces is looked for once.
        p.guest_modules = vec![
            g.clone(),
            GuestModule {
                process: OptHex(Some(0x6000)),
                ..g
            },
        ];
        let mut finder = Finder::new(SymbolPath::from_dir(&dir));
        let s = for_profile(&p, KernelImage::None, &[], Some(&mut finder)).unwrap();
        let [m] = s.missing() else {
            panic!("{:?}", s.missing())
        };
        assert_eq!(
            (m.module.as_str(), m.pdb.as_str(), m.age),
            ("app", "app.pdb", 3)
        );
        assert!(s.modules().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_image_is_an_error_naming_it() {
        let p = sample_profile(0x1000);
        let spec: SymbolSpec = "/nonexistent/x.dll".parse().unwrap();
        let e = for_profile(&p, KernelImage::None, &[spec], None).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.dll"), "{e}");
    }
}
