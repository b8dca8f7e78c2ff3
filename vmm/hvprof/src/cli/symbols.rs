//! `--symbol-path` (and the deprecated `--symbol-dir`): the finder the report library looks
//! PDBs up with, and what the binary prints about it.

use std::path::Path;

use report::symbols::guest_files::{GuestFiles, Initrd};
use report::symbols::path::SymbolPath;
use report::symbols::Finder;
use report::Symbols;

use super::args::SymbolArgs;
use super::progress::DownloadBar;
use super::stdout::errln;

/// The environment variable WinDbg reads its symbol path from.
pub const ENV: &str = "_NT_SYMBOL_PATH";

/// The symbol path the options give, else `_NT_SYMBOL_PATH` when set and not empty, as a
/// finder that shows downloads on a progress bar unless `quiet`. `None`: no symbol path.
pub fn finder(a: &SymbolArgs, quiet: bool) -> Result<Option<Finder>, String> {
    let path = if let Some(dir) = &a.symbol_dir {
        errln!(
            "hvprof: warning: --symbol-dir is deprecated; use --symbol-path {}",
            dir.display()
        );
        SymbolPath::from_dir(dir)
    } else if let Some(s) = &a.symbol_path {
        s.parse().map_err(|e| format!("--symbol-path: {e}"))?
    } else {
        match std::env::var(ENV) {
            Ok(s) if !s.trim().is_empty() => s.parse().map_err(|e| format!("{ENV}: {e}"))?,
            Ok(_) | Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("{ENV} is not valid UTF-8"))
            }
        }
    };
    let finder = Finder::new(path);
    Ok(Some(if quiet {
        finder
    } else {
        finder.with_progress(Box::new(DownloadBar::default()))
    }))
}

/// Checks that each `--sysroot` is a directory (before a run, not after it).
pub fn check_sysroots(a: &SymbolArgs) -> Result<(), String> {
    match a.sysroot.iter().find(|d| !d.is_dir()) {
        Some(d) => Err(format!("--sysroot {}: not a directory", d.display())),
        None => Ok(()),
    }
}

/// Where a Linux guest's mapped files are looked for: the `--sysroot` trees, the
/// `--initramfs` archive, then the `--disk-image` images, each checked to hold a file system
/// (a run adds the initrd it booted and its disks, [`read_initramfs`]).
pub fn guest_files(a: &SymbolArgs) -> Result<GuestFiles, String> {
    check_sysroots(a)?;
    let files = a
        .sysroot
        .iter()
        .fold(GuestFiles::new(), |f, d| f.with_sysroot(d.clone()));
    let files = match &a.initramfs {
        Some(path) => files.with_initrd(path.clone(), read_initramfs(path)?),
        None => files,
    };
    a.disk_image.iter().try_fold(files, |files, path| {
        let place = vmm::report_input::disk_image_place(path);
        place
            .check()
            .map_err(|e| format!("--disk-image {}: {e}", path.display()))?;
        Ok(files.with_image(place))
    })
}

/// The initramfs at `path`, read and checked.
pub fn read_initramfs(path: &Path) -> Result<Initrd, String> {
    let bytes = files::bounded::read(path, files::bounded::INITRD).map_err(|e| e.to_string())?;
    Initrd::parse(&bytes).map_err(|e| {
        format!(
            "{}: not an initramfs: {}",
            path.display(),
            report::chain::with_causes(&e)
        )
    })
}

/// Prints on stderr what the symbols lack: PDBs not found, guest files not found, and guest
/// files found as another build.
pub fn report_gaps(symbols: &Symbols) {
    report_missing(symbols);
    report_file_gaps(symbols);
}

/// Prints on stderr the guest files not found, and those found as another build.
pub fn report_file_gaps(symbols: &Symbols) {
    report_unmapped(symbols.unmapped());
    report_mismatched(symbols.mismatched());
}

/// Prints the guest files mapped by processes that no sysroot or initramfs had, on stderr.
fn report_unmapped(paths: &[String]) {
    if paths.is_empty() {
        return;
    }
    errln!(
        "hvprof: no symbols for {} file(s) the guest's processes mapped (not in --sysroot, --initramfs or the initrd, or not ELF):",
        paths.len()
    );
    for p in paths {
        errln!("hvprof:   {}", report::sanitize::terminal(p));
    }
}

/// Warns, on stderr, of the guest files found on the host as another build than the guest's
/// (their symbols were not used).
fn report_mismatched(found: &[report::symbols::Mismatch]) {
    for m in found {
        errln!(
            "hvprof: warning: {} in {} has build id {}, the guest's had {}: another build, its symbols are not used",
            report::sanitize::terminal(&m.path),
            report::sanitize::terminal(&m.origin),
            m.found,
            m.guest
        );
    }
}

/// Prints the PDBs the symbol path did not have, one a line, on stderr.
pub fn report_missing(symbols: &Symbols) {
    let missing = symbols.missing();
    if missing.is_empty() {
        return;
    }
    errln!("hvprof: symbols not found for {} PDB(s):", missing.len());
    for m in missing {
        errln!("hvprof:   {m}");
    }
}
