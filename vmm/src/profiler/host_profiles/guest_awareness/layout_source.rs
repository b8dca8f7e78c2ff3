//! Where a run learns the guest kernel's structure layout, from what the user gave: a file
//! (`--guest-types`: a PDB, a vmlinux, raw BTF or a Volatility ISF file), the vmlinux it boots
//! (its BTF or DWARF), or, looked up on the symbol path once a sample has shown the kernel: for a
//! Windows guest, the kernel's ISF file in a symbol pack or its PDB, found by the kernel's
//! CodeView identity; for a Linux guest, the ISF file in a symbol pack whose banner is the one in
//! guest memory. Without any, samples are split by address space.

use std::path::{Path, PathBuf};

use files::bounded;
use introspect::os::OsLayout;
use introspect::pe::CodeView;
use report::symbols::packs;
use report::symbols::path::SymbolPath;
use report::symbols::pdb::PdbId;
use report::symbols::types::{
    isf, layout_from_file, linux_layout_from_elf, pdb::windows_layout, TypeError,
};
use report::symbols::Finder;

use super::GuestTypes;
use crate::outcome::{Blame, Fault};

/// Which guest kernel to read processes and threads from (`--guest-os`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuestOsChoice {
    /// Linux when the booted vmlinux has type information, else, when a symbol path is given,
    /// whichever kernel a sample shows first (a Windows kernel's identity or a Linux banner),
    /// else none (samples split by address space).
    #[default]
    Auto,
    /// A Windows kernel: its layout from `--guest-types` or its PDB on the symbol path.
    Windows,
    /// A Linux kernel: its layout from `--guest-types`, the booted vmlinux, or a symbol pack
    /// (by the banner in guest memory).
    Linux,
    /// Do not name processes and threads.
    Off,
}

impl std::str::FromStr for GuestOsChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GuestOsChoice::Auto),
            "windows" => Ok(GuestOsChoice::Windows),
            "linux" => Ok(GuestOsChoice::Linux),
            "off" => Ok(GuestOsChoice::Off),
            _ => Err(format!(
                "--guest-os takes auto, windows, linux or off, not {s:?}"
            )),
        }
    }
}

/// The layout the user asked for cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum GuestTypesError {
    /// The file could not be read (the source names it).
    #[error("cannot read the guest kernel's types")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: files::bounded::InputError,
    },
    /// The file holds no usable layout.
    #[error("no structure layout in {path}")]
    Types {
        /// The file.
        path: PathBuf,
        /// Why.
        source: report::symbols::types::TypeError,
    },
    /// The file is for the other kernel.
    #[error("{path} describes a {found} kernel, but --guest-os {wanted} was given")]
    WrongOs {
        /// The file.
        path: PathBuf,
        /// What it holds.
        found: &'static str,
        /// What was asked for.
        wanted: &'static str,
    },
    /// A Windows guest without a symbol path or a types file.
    #[error("--guest-os windows needs --symbol-path (to find the kernel's PDB) or --guest-types")]
    NoWindowsSource,
    /// A Linux guest without a vmlinux or a types file.
    #[error(
        "--guest-os linux needs --kernel vmlinux (with BTF or DWARF), --guest-types, or \
         --symbol-path with Linux ISF symbol packs"
    )]
    NoLinuxSource,
}

impl Blame for GuestTypesError {
    /// Every one is about a file or an option the user gave.
    fn fault(&self) -> Fault {
        Fault::User
    }
}

/// The layout source for a run: `choice` (`--guest-os`), `file` (`--guest-types`), the
/// `kernel` it boots (if it boots one) and, for the Windows lookup, the user's symbol path
/// (searched on a thread of its own during the run, without a progress bar).
pub fn guest_types(
    choice: GuestOsChoice,
    file: Option<&Path>,
    kernel: Option<&Path>,
    symbol_path: Option<SymbolPath>,
) -> Result<GuestTypes, GuestTypesError> {
    if choice == GuestOsChoice::Off {
        return Ok(GuestTypes::Off);
    }
    if let Some(path) = file {
        let bytes = read_types_file(path)?;
        let layout = layout_from_file(&bytes).map_err(|source| GuestTypesError::Types {
            path: path.into(),
            source,
        })?;
        return match (layout, choice) {
            (OsLayout::Windows(l), GuestOsChoice::Auto | GuestOsChoice::Windows) => {
                Ok(GuestTypes::Windows(l))
            }
            (OsLayout::Linux(l), GuestOsChoice::Auto | GuestOsChoice::Linux) => {
                Ok(GuestTypes::Linux(l))
            }
            (layout, _) => Err(GuestTypesError::WrongOs {
                path: path.into(),
                found: if matches!(layout, OsLayout::Windows(_)) {
                    "Windows"
                } else {
                    "Linux"
                },
                wanted: if choice == GuestOsChoice::Windows {
                    "windows"
                } else {
                    "linux"
                },
            }),
        };
    }
    if matches!(choice, GuestOsChoice::Auto | GuestOsChoice::Linux) {
        if let Some(kernel) = kernel {
            match vmlinux_layout(kernel) {
                Ok(l) => return Ok(GuestTypes::Linux(l)),
                Err(e) if choice == GuestOsChoice::Linux && symbol_path.is_none() => return Err(e),
                // Not a vmlinux with types (a bzImage, a PVH kernel without debug
                // information): a note, unless its types are there but wanting.
                Err(
                    e @ GuestTypesError::Types {
                        source: TypeError::NoTypes | TypeError::Elf(_),
                        ..
                    },
                ) => log::info!(
                    "guest processes are not named from the kernel: {}",
                    report::chain::with_causes(&e)
                ),
                Err(e) => log::warn!(
                    "guest processes are not named: {}; samples are split by address space",
                    report::chain::with_causes(&e)
                ),
            }
        } else if choice == GuestOsChoice::Linux && symbol_path.is_none() {
            return Err(GuestTypesError::NoLinuxSource);
        }
    }
    match (choice, symbol_path) {
        // A Linux guest's memory is scanned for its banner only when a Linux pack is there
        // to match it (a Windows guest's layout would wait for the scan).
        (GuestOsChoice::Auto, Some(path)) => Ok(GuestTypes::Lookup(super::Lookup {
            windows: Some(windows_lookup(path.clone())),
            linux: (!packs::linux_isf_files(&path, 1).0.is_empty()).then(|| linux_lookup(path)),
        })),
        (GuestOsChoice::Windows, Some(path)) => Ok(GuestTypes::Lookup(super::Lookup::windows(
            windows_lookup(path),
        ))),
        (GuestOsChoice::Linux, Some(path)) => Ok(GuestTypes::Lookup(super::Lookup {
            windows: None,
            linux: Some(linux_lookup(path)),
        })),
        (GuestOsChoice::Windows, None) => Err(GuestTypesError::NoWindowsSource),
        _ => Ok(GuestTypes::AddressSpaces),
    }
}

/// The file at `path` (`--guest-types`), whole, once its first bytes show one of the formats
/// it may be: a file of none is refused at the cost of those bytes, however large.
fn read_types_file(path: &Path) -> Result<Vec<u8>, GuestTypesError> {
    use report::symbols::types::{TypesFormat, SNIFF_BYTES};
    let read_err = |source| GuestTypesError::Read {
        path: path.into(),
        source,
    };
    let (file, size) = bounded::open(path, bounded::SYMBOLS, false).map_err(read_err)?;
    let head = bounded::head(&file, path, SNIFF_BYTES).map_err(read_err)?;
    if TypesFormat::sniff(&head).is_none() {
        return Err(GuestTypesError::Types {
            path: path.into(),
            source: TypeError::UnknownFormat,
        });
    }
    bounded::read_from(&file, path, size, bounded::SYMBOLS).map_err(read_err)
}

/// The layout in the vmlinux at `path`.
fn vmlinux_layout(path: &Path) -> Result<introspect::os::LinuxLayout, GuestTypesError> {
    let bytes = bounded::read(path, bounded::KERNEL).map_err(|source| GuestTypesError::Read {
        path: path.into(),
        source,
    })?;
    linux_layout_from_elf(&bytes).map_err(|source| GuestTypesError::Types {
        path: path.into(),
        source,
    })
}

/// Looks the Windows kernel's layout up on the symbol path `path`: an ISF file in a symbol pack
/// (a plain directory entry, [`report::symbols::packs`]) first, as it needs no download, else
/// its PDB through every entry. A pack's file that is unreadable or of another build is passed
/// over with a warning.
fn windows_lookup(path: SymbolPath) -> super::WindowsLookup {
    Box::new(move |cv: &CodeView| {
        let id = PdbId {
            guid: cv.guid.clone(),
            age: cv.age,
        };
        for file in packs::windows_isf_files(&path, &cv.pdb, &id) {
            let layout = file.read().and_then(|bytes| {
                isf::windows_layout_for(&bytes, &cv.pdb, &id).map_err(|e| e.to_string())
            });
            match layout {
                Ok(layout) => {
                    log::info!("guest kernel layout from {file}");
                    return Ok(layout);
                }
                Err(e) => log::warn!("{file}: {e}: ignored"),
            }
        }
        let mut finder = Finder::new(path);
        let path = finder
            .find_pdb("ntoskrnl", &cv.pdb, &id)
            .ok_or_else(|| format!("not on the symbol path (GUID {} age {})", cv.guid, cv.age))?;
        let bytes = bounded::read(&path, bounded::SYMBOLS).map_err(|e| e.to_string())?;
        windows_layout(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    })
}

/// Looks the Linux kernel's layout up in the symbol packs on `path` by the candidate banners
/// read from guest memory ([`packs::linux_isf_layout`]).
fn linux_lookup(path: SymbolPath) -> super::LinuxLookup {
    Box::new(move |banners: &[Vec<u8>], stop: &dyn Fn() -> bool| {
        packs::linux_isf_layout(&path, banners, stop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookups(choice: GuestOsChoice, dir: &Path) -> (bool, bool) {
        let path = SymbolPath::parse(&dir.display().to_string(), None).unwrap();
        match guest_types(choice, None, None, Some(path)).unwrap() {
            GuestTypes::Lookup(l) => (l.windows.is_some(), l.linux.is_some()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_symbol_path_looks_a_linux_kernel_up_when_it_holds_linux_packs_or_linux_is_asked_for() {
        let dir = std::env::temp_dir().join(format!("hvprof-layout-source-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ntkrnlmp.pdb")).unwrap();
        std::fs::write(dir.join("ntkrnlmp.pdb/0-1.json.xz"), b"").unwrap();
        // A Windows pack alone: no scan of guest memory for a banner.
        assert_eq!(lookups(GuestOsChoice::Auto, &dir), (true, false));
        assert_eq!(lookups(GuestOsChoice::Linux, &dir), (false, true));
        assert_eq!(lookups(GuestOsChoice::Windows, &dir), (true, false));
        std::fs::create_dir_all(dir.join("symbols/linux")).unwrap();
        std::fs::write(dir.join("symbols/linux/6.1.json.xz"), b"").unwrap();
        assert_eq!(lookups(GuestOsChoice::Auto, &dir), (true, true));
        // --guest-os linux with neither a kernel nor a symbol path has no source.
        assert!(matches!(
            guest_types(GuestOsChoice::Linux, None, None, None),
            Err(GuestTypesError::NoLinuxSource)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
