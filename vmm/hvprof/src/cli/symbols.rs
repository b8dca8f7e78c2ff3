//! `--symbol-path` (and the deprecated `--symbol-dir`): the finder the report library looks
//! PDBs up with, and what the binary prints about it.

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
