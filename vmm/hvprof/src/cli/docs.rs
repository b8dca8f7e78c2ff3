//! What a package installs beside the binary, made from the clap definitions themselves so it
//! never drifts from them: shell completion scripts (`hvprof completions SHELL`) and man pages
//! (`hvprof man DIR`: `hvprof.1` and one `hvprof-SUBCOMMAND.1` each, as git and cargo ship).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;
use vmm::outcome::STATUS_CONFIG_ERROR;

use super::stdout::out;
use super::{fail, fail_write, Cli};

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "hvprof", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    ExitCode::SUCCESS
}

/// Writes the man pages into `dir` (which must exist), each atomically, and names them.
pub fn man_pages(dir: &Path) -> ExitCode {
    if !dir.is_dir() {
        return fail(
            anyhow::anyhow!("{}: not a directory", dir.display()),
            STATUS_CONFIG_ERROR,
        );
    }
    let top = Cli::command().name("hvprof");
    let pages = std::iter::once(top.clone()).chain(
        top.get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.clone().name(format!("hvprof-{}", c.get_name())))
            .collect::<Vec<_>>(),
    );
    for page in pages {
        let path = dir.join(format!("{}.1", page.get_name()));
        let written = report::write_file(&path, |w| {
            let mut text = Vec::new();
            clap_mangen::Man::new(page)
                .date(release_date())
                .render(&mut text)
                .and_then(|()| w.write_all(&text))
                .map_err(report::ReportError::Io)
        });
        match written {
            Ok(p) => eprintln!("hvprof: wrote {}", p.display()),
            Err(e) => return fail_write(e),
        }
    }
    ExitCode::SUCCESS
}

/// The pages' date: `SOURCE_DATE_EPOCH`'s day (UTC) when set (reproducible packages), else
/// none.
fn release_date() -> String {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|secs| {
            let t = vmm::clock::CivilTime::from_unix(secs);
            format!("{:04}-{:02}-{:02}", t.year, t.month, t.day)
        })
        .unwrap_or_default()
}
