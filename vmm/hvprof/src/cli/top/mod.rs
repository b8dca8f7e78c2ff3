//! `hvprof top`: a running hvprof's samples, watched through its control API (vmm::top): the
//! full-screen view on a terminal (screen.rs), screens of text otherwise or with `--batch`.

mod screen;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use std::io::IsTerminal;
use vmm::outcome::{STATUS_CONFIG_ERROR, STATUS_HOST_ERROR};

use vmm::top::frame::{render, Screen};
use vmm::top::{Order, TopError, View, Watch, WatchOptions};

use super::args::FilterArgs;
use super::stdout::{self, out};
use super::{fail, thread_filter};
use vmm::seccomp::ThreadKind;

/// `hvprof top`.
#[derive(Args)]
pub struct TopArgs {
    /// The control API socket of the run to watch (`--api-socket` of run, demo or profile).
    #[arg(long)]
    pub api_socket: PathBuf,
    /// Print a screen of text every interval (as `top -b`); the default when standard output
    /// is not a terminal.
    #[arg(long)]
    pub batch: bool,
    /// Seconds between two screens (0.2 to 60).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many screens (default: until the run ends).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// What the screen lists.
    #[arg(long, value_enum, default_value = "functions")]
    pub view: ViewArg,
    /// Sort by all samples so far rather than by the recent window.
    #[arg(long)]
    pub total: bool,
    /// Only the samples of guest processes of this name (ASCII case ignored).
    #[arg(long)]
    pub process: Option<String>,
    /// Rows a screen lists at most.
    #[arg(long, default_value_t = 20)]
    pub rows: usize,
    /// The recent window: each sample's weight halves every this many seconds (0.5 to 600).
    #[arg(long, default_value_t = 5.0)]
    pub half_life: f64,
    /// The host profile to watch (its id in the API); default: the first one sampling, or
    /// a new one of the whole address space.
    #[arg(long)]
    pub profile: Option<u32>,
    /// An image (ELF, PE) or PDB to name functions with beyond the run's kernel, placed at
    /// BASE when given as FILE@0xBASE.
    #[arg(long = "symbols", value_name = "FILE[@0xBASE]")]
    pub symbols: Vec<report::SymbolSpec>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `--view`.
#[derive(Clone, Copy, ValueEnum)]
pub enum ViewArg {
    /// Functions, with their modules.
    Functions,
    /// Guest processes.
    Processes,
    /// Guest threads.
    Threads,
    /// Modules.
    Modules,
    /// vCPUs.
    Vcpus,
}

impl From<ViewArg> for View {
    fn from(v: ViewArg) -> View {
        match v {
            ViewArg::Functions => View::Functions,
            ViewArg::Processes => View::Processes,
            ViewArg::Threads => View::Threads,
            ViewArg::Modules => View::Modules,
            ViewArg::Vcpus => View::Vcpus,
        }
    }
}

/// Runs `hvprof top`.
pub fn top(a: &TopArgs) -> ExitCode {
    if !(0.2..=60.0).contains(&a.interval) {
        return fail(
            anyhow::anyhow!("--interval {}: not 0.2 to 60 s", a.interval),
            STATUS_CONFIG_ERROR,
        );
    }
    if !(0.5..=600.0).contains(&a.half_life) {
        return fail(
            anyhow::anyhow!("--half-life {}: not 0.5 to 600 s", a.half_life),
            STATUS_CONFIG_ERROR,
        );
    }
    // The full-screen view on a terminal: the terminal is taken before the filter.
    let full_screen = !a.batch && std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    let tty = match full_screen.then(screen::Tty::open).transpose() {
        Ok(t) => t,
        Err(e) => {
            return fail(
                anyhow::Error::new(e).context("the terminal"),
                STATUS_HOST_ERROR,
            )
        }
    };
    // The answers carry guest text (process, thread and function names): read under the
    // results' filter, as saved profiles are, which may also set the terminal's mode.
    if let Err(code) = thread_filter(ThreadKind::Watch, a.filter.seccomp.into()) {
        return code;
    }
    let options = WatchOptions {
        socket: a.api_socket.clone(),
        profile: a.profile,
        symbols: a.symbols.clone(),
        half_life_s: a.half_life,
    };
    let mut watch = match Watch::attach(&options) {
        Ok(w) => w,
        Err(e) => {
            drop(tty);
            let status = attach_status(&e);
            return fail(e, status);
        }
    };
    let screen = Screen {
        view: a.view.into(),
        order: if a.total { Order::Total } else { Order::Recent },
        process: a.process.clone(),
        rows: a.rows,
        width: 200,
    };
    let interval = Duration::from_secs_f64(a.interval);
    if let Some(tty) = tty {
        return match screen::run(tty, &mut watch, screen, interval) {
            Ok(()) => ExitCode::SUCCESS,
            Err(screen::Failed::Watch(e)) => ended(e),
            Err(screen::Failed::Terminal(e)) => fail(
                anyhow::Error::new(e).context("the terminal"),
                STATUS_HOST_ERROR,
            ),
        };
    }
    let mut shown = 0u64;
    loop {
        let next = Instant::now() + interval;
        out!("{}\n", render(&mut watch, &screen));
        shown += 1;
        if a.iterations.is_some_and(|n| shown >= n) || stdout::ended() {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        if let Err(e) = watch.refresh() {
            return ended(e);
        }
    }
}

/// The end of a watch whose refresh failed: the run ended (its socket is gone), and what was
/// shown stands; or the API failed.
fn ended(e: TopError) -> ExitCode {
    if matches!(e, TopError::Api(vmm::api::client::ClientError::Connect(..))) {
        super::stdout::eprint("hvprof: the run ended\n");
        return ExitCode::SUCCESS;
    }
    fail(e, STATUS_HOST_ERROR)
}

/// The status of a watch that could not start: a socket nobody serves or a profile the run
/// does not have is the user's to mend.
fn attach_status(e: &TopError) -> i32 {
    match e {
        TopError::Api(vmm::api::client::ClientError::Connect(..))
        | TopError::NoProfile(_)
        | TopError::Symbols(_) => STATUS_CONFIG_ERROR,
        _ => STATUS_HOST_ERROR,
    }
}
