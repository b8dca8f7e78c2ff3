//! The command line: argument types (clap) and one function per subcommand, each a thin call
//! into the `vmm` library.

mod args;
mod docs;
mod progress;
mod run;
mod stdout;
mod symbols;
mod tools;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vmm::outcome::Blame;
use vmm::seccomp::ThreadKind;

use stdout::errln;

use args::{
    BenchArgs, CompareArgs, DemoArgs, EventsArgs, MergeArgs, ProfileArgs, ReportArgs, RunArgs,
};

/// `hvprof --version`: the package's version and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HVPROF_COMMIT"),
    ")"
);

/// hvprof runs a KVM guest (Windows, Linux, any PVH or multiboot kernel) and profiles it from outside.
///
/// `hvprof profile` boots the guest and samples its vCPUs from the host: call stacks, the
/// guest's processes and threads, and the profile objects of the guest agent when one runs.
/// It writes profile.json, a pprof profile, a flame graph and report.txt to `--out`. `hvprof
/// report` prints a saved profile again, its timeline too; `hvprof compare` tests two
/// profiles for a significant regression (exit status 1) for automated regression runs;
/// `hvprof merge` combines repeated runs into one profile.
///
/// Exit statuses and what hvprof guarantees: docs/architecture.md (the package installs the
/// docs in /usr/share/doc/hvprof/docs/; `man hvprof` and `man hvprof-SUBCOMMAND` too).
#[derive(Parser)]
#[command(name = "hvprof", version = VERSION)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a VM to its end: a kernel (PVH ELF, multiboot, Linux bzImage) or firmware and a disk.
    Run(RunArgs),
    /// Run the bundled reference guest's default scenario (a profiled 1:2:4 workload).
    Demo(DemoArgs),
    /// Run a VM and collect every profile: the guest agent's objects and a host-side profile.
    ///
    /// For regression runs give the guest's system disk as `--disk IMAGE,snapshot`: the image
    /// is opened read-only and the guest's writes go to a temporary overlay discarded when the
    /// run ends, so every run starts from the same golden image and the image never changes.
    Profile(Box<ProfileArgs>),
    /// Print a saved profile.json's report again, its disassembly, timeline or exports.
    Report(ReportArgs),
    /// Compare two profiles; exit status 1 on a significant regression above the threshold.
    Compare(CompareArgs),
    /// Combine runs (repetitions or hosts) into one profile.json.
    Merge(MergeArgs),
    /// Watch a running hvprof's hottest functions, processes and threads, live.
    ///
    /// Attaches to the control API of a run started with `--api-socket` and shows what its
    /// host profile counted recently (each sample's weight halving every `--half-life`
    /// seconds) and in all. `--batch` prints a screen of text every `--interval`.
    Top(top::TopArgs),
    /// Measure hvprof's sample and hypercall paths against same-run baselines.
    Bench(BenchArgs),
    /// List the perf events hvprof can sample on this host and why the others are absent.
    ///
    /// These are what the guest's PMU profile sources, `profile --event` and `--clock cpu`
    /// can use here.
    Events(EventsArgs),
    /// Print a shell's completion script for hvprof.
    ///
    /// Source it, or install it where the shell looks (bash:
    /// /usr/share/bash-completion/completions/hvprof).
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write hvprof's man pages into a directory.
    ///
    /// hvprof.1 and one hvprof-SUBCOMMAND.1 for each subcommand.
    Man {
        /// An existing directory; pages already there are replaced.
        dir: std::path::PathBuf,
    },
}

/// The process exit code for an hvprof status.
pub fn exit_code(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status & 0xff).unwrap_or(u8::MAX))
}

/// Prints an error with its causes and returns `status`.
pub fn fail(e: impl Into<anyhow::Error>, status: i32) -> ExitCode {
    // Messages quote file contents and guest text: no escape sequence reaches the terminal.
    let message = format!("{:#}", e.into());
    errln!("hvprof: error: {}", report::sanitize::terminal(&message));
    exit_code(status)
}

/// The exit of a failure to write an output that was checked writable a moment ago: the
/// host's (a full file system), unless something was put at its path since that an output
/// never replaces (the user's to mend) or the export is past its size limit (the input's).
pub fn fail_write(e: report::ReportError) -> ExitCode {
    let status = if e.is_output_refused() || e.is_too_large() {
        vmm::outcome::STATUS_CONFIG_ERROR
    } else {
        vmm::outcome::STATUS_HOST_ERROR
    };
    fail(e, status)
}

/// Filters the calling thread's system calls for the results ([`ThreadKind::Results`]): from
/// here on it handles data a guest wrote. The error is the exit code to return.
pub fn results_filter(mode: vmm::seccomp::Seccomp) -> Result<(), ExitCode> {
    thread_filter(ThreadKind::Results, mode)
}

/// Filters the calling thread's system calls as a thread of `kind`. The error is the exit
/// code to return.
pub fn thread_filter(kind: ThreadKind, mode: vmm::seccomp::Seccomp) -> Result<(), ExitCode> {
    vmm::seccomp::install(kind, mode).map_err(|e| {
        let status = e.fault().exit_status();
        fail(e, status)
    })
}

/// Parses the arguments and runs the subcommand.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
    // A run's stop signals are blocked before any input is opened and stay blocked to the
    // end: one that arrives while a kernel is read, or after the run while the profile is
    // written, never kills hvprof; during the run it ends it (status 10, profile written).
    let _stop = match cli.command {
        Command::Run(_) | Command::Demo(_) | Command::Profile(_) => {
            match vmm::signals::StopSignals::block_and_open() {
                Ok(s) => Some(s),
                Err(e) => {
                    return fail(
                        anyhow::Error::new(e).context("cannot block the stop signals"),
                        vmm::outcome::STATUS_HOST_ERROR,
                    )
                }
            }
        }
        _ => None,
    };
    // Every subcommand prints through `stdout`, which ends quietly when the reader goes away.
    stdout::status(match cli.command {
        Command::Run(a) => run::run(a),
        Command::Demo(a) => run::demo(a),
        Command::Profile(a) => run::profile(*a),
        Command::Report(a) => tools::report(&a),
        Command::Compare(a) => tools::compare(&a),
        Command::Merge(a) => tools::merge(&a),
        Command::Top(a) => top::top(&a),
        Command::Bench(a) => tools::bench(&a),
        Command::Events(a) => tools::events(&a),
        Command::Completions { shell } => docs::completions(shell),
        Command::Man { dir } => docs::man_pages(&dir),
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn help_says_what_hvprof_does_not_how_its_source_is_laid_out() {
        for help in [
            Cli::command().render_help(),
            Cli::command().render_long_help(),
        ] {
            let help = help.to_string();
            let first = help.lines().next().unwrap_or_default();
            assert!(
                first.contains("runs a KVM guest") && first.contains("profiles it from outside"),
                "{first}"
            );
            assert!(!first.contains("library"), "{first}");
        }
        let long = Cli::command().render_long_help().to_string();
        assert!(long.contains("regression"), "{long}");
    }

    #[test]
    fn every_subcommand_has_a_one_line_help_that_fits_a_terminal() {
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let line = format!("  {:<9}{about}", sub.get_name());
            assert!(!about.is_empty(), "{} has no help", sub.get_name());
            assert!(!about.ends_with('.'), "{line}");
            assert!(line.len() <= 100, "{} columns: {line}", line.len());
        }
    }
}
