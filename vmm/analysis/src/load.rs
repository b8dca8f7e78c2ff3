//! Loading symbols for a profile: the kernel it ran (an image the caller holds, such as a
//! kernel built into hvprof, or the kernel file when it is still there), plus
//! `--symbols FILE[@BASE]` images.
//!
//! An image is recognised by its first bytes: ELF, PE (`MZ`), or PDB (the MSF 7.00 magic).
//! Without `@BASE` an ELF stays where it was linked; a PE is placed at the base of the first
//! profile object whose size is exactly its image size (a module profile, as a Windows tool
//! creates it with `NtCreateProfile(ImageBase, SizeOfImage)`), else at its preferred base; a
//! bare PDB needs `@BASE` (it knows only RVAs) and is placed at 0 without one.

use std::path::{Path, PathBuf};

use super::profile::Profile;
use super::symbols::{elf, pdb, pe, Module, SymbolError, Symbols};
use super::ReportError;

const PDB_MAGIC: &[u8] = b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0";

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
    symbol_dir: Option<&Path>,
    profile: Option<&Profile>,
) -> Result<Module, ReportError> {
    let err = |e: SymbolError| ReportError::Symbols(spec.path.clone(), e);
    let bytes =
        std::fs::read(&spec.path).map_err(|e| err(SymbolError::Read(spec.path.clone(), e)))?;
    let name = file_name(&spec.path);
    let m = if bytes.starts_with(PDB_MAGIC) {
        pdb::read(&name, &bytes).map_err(err)?
    } else if bytes.starts_with(b"MZ") {
        let m = pe::read(&name, &bytes, symbol_dir).map_err(err)?;
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
/// it carries inside itself: a profile names its kernel by a path or a built-in name, and
/// this crate does not guess which is which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelImage<'a> {
    /// The file the profile names (`run.kernel`), when it is still there.
    File,
    /// An ELF image the caller holds, read under the module name `name`.
    Bytes {
        /// The module's name in reports.
        name: &'a str,
        /// The ELF image.
        bytes: &'a [u8],
    },
}

/// The symbols for `profile`: its kernel's from `kernel` when they can be read (a kernel
/// without a readable symbol table is left out, not an error), then every `specs` image.
pub fn for_profile(
    profile: &Profile,
    kernel: KernelImage,
    specs: &[SymbolSpec],
    symbol_dir: Option<&Path>,
) -> Result<Symbols, ReportError> {
    let mut symbols = Symbols::default();
    match kernel {
        KernelImage::Bytes { name, bytes } => {
            if let Ok(m) = elf::read(name, bytes) {
                symbols.push(m);
            }
        }
        KernelImage::File => {
            if let Ok(bytes) = std::fs::read(&profile.run.kernel) {
                let path = PathBuf::from(&profile.run.kernel);
                if let Ok(m) = elf::read(&file_name(&path), &bytes) {
                    symbols.push(Module {
                        path: Some(path),
                        ..m
                    });
                }
            }
        }
    }
    for spec in specs {
        symbols.push(module(spec, symbol_dir, Some(profile))?);
    }
    if let Some(dir) = symbol_dir {
        for m in guest_modules(profile, dir, &symbols) {
            symbols.push(m);
        }
    }
    Ok(symbols)
}

/// The modules found in guest memory whose PDBs `dir` holds (matched by GUID), each placed at
/// its base; those at a base another module already covers, and repeats of one image mapped
/// in several address spaces, are left out. A PDB that is missing or unreadable only logs.
pub fn guest_modules(profile: &Profile, dir: &Path, have: &Symbols) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for g in &profile.guest_modules {
        let Some(p) = &g.pdb else { continue };
        let taken = |base: u64| have.modules().iter().chain(&out).any(|m| m.base == base);
        if taken(g.base.0) {
            continue;
        }
        let r = pe::PdbRef {
            name: p.name.clone(),
            id: pdb::PdbId {
                guid: p.guid.clone(),
                age: p.age,
            },
        };
        let Some(path) = pe::find_pdb(dir, &r) else {
            log::info!(
                "{}: no {} {} in {}",
                g.name,
                p.name,
                r.id.key(),
                dir.display()
            );
            continue;
        };
        match std::fs::read(&path)
            .map_err(|e| SymbolError::Read(path.clone(), e))
            .and_then(|b| pdb::read(&g.name, &b))
        {
            Ok(m) => out.push(Module {
                path: Some(path),
                size: g.size.0,
                ..m.placed_at(g.base.0)
            }),
            Err(e) => log::warn!("{}: {e}", path.display()),
        }
    }
    out
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
        let mut p = sample_profile(0x1000);
        p.run.kernel = "/nonexistent/vmlinux".into();
        let garbage = KernelImage::Bytes {
            name: "k",
            bytes: b"not an ELF",
        };
        for kernel in [KernelImage::File, garbage] {
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
    fn a_missing_image_is_an_error_naming_it() {
        let p = sample_profile(0x1000);
        let spec: SymbolSpec = "/nonexistent/x.dll".parse().unwrap();
        let e = for_profile(&p, KernelImage::File, &[spec], None).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.dll"), "{e}");
    }
}
