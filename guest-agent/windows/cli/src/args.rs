//! The command line of `hvprof-agent.exe`, parsed by hand (the Windows build has no crates).

use std::fmt;

use crate::number::parse_u64;

/// The usage text (`--help`).
pub const USAGE: &str = "\
hvprof-agent: profile this Windows guest from outside, through the hvprof driver.

USAGE:
    hvprof-agent [OPTIONS] --module NAME             [-- COMMAND [ARGS...]]
    hvprof-agent [OPTIONS] --pid PID --module NAME   [-- COMMAND [ARGS...]]
    hvprof-agent [OPTIONS] --pid PID --range BASE:SIZE
    hvprof-agent [OPTIONS] --range BASE:SIZE         [-- COMMAND [ARGS...]]
    hvprof-agent --info | --stats | --help | --version

WHAT TO PROFILE:
    --module NAME        a loaded kernel module (ntoskrnl.exe, hal.dll, ...), base and size from
                         the kernel's module list; with --pid, a module of that process
    --pid PID            profile only process PID (a per-process profile of its user range)
    --range BASE:SIZE    an explicit address range (hex with 0x, or decimal)

OPTIONS:
    --bucket N           log2 of the bytes per counter, 2..=31 (default 4: 16-byte buckets)
    --source S           profile source: a number or a name (time, totalcycles, ...;
                         default time)
    --interval N         set the source's interval first (ProfileTime: 100 ns units)
    --seconds N          profile for N seconds (default 10); ignored with a COMMAND
    --out FILE           result file (default hvprof-result.txt)
    --top N              rows of the table printed at the end (default 10)
    -- COMMAND ARGS...   launch COMMAND and profile until it exits

OTHER:
    --info               show the driver's doorbell and the VMM's limits and sources
    --stats              show hvprof's sampling statistics
    -h, --help           this text
    -V, --version        the version

The driver (hvprof.sys) must be installed and running; see docs/windows.md.
";

/// What to profile.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Target {
    /// A loaded kernel module, by file name.
    KernelModule(String),
    /// A module of process `pid` (per-process profile).
    ProcessModule {
        /// The process id.
        pid: u32,
        /// The module's file name.
        name: String,
    },
    /// A range of process `pid` (per-process profile).
    ProcessRange {
        /// The process id.
        pid: u32,
        /// First byte.
        base: u64,
        /// Bytes.
        size: u64,
    },
    /// A range in every process (global profile).
    Range {
        /// First byte.
        base: u64,
        /// Bytes.
        size: u64,
    },
}

/// How long to profile.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Run {
    /// For this many seconds.
    Seconds(u32),
    /// Around this command (program and arguments).
    Command(Vec<String>),
}

/// A profiling run.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProfileArgs {
    /// What to profile.
    pub target: Target,
    /// log2 of the bytes per counter.
    pub bucket_shift: u32,
    /// KPROFILE_SOURCE.
    pub source: u32,
    /// Interval to set first, if any.
    pub interval: Option<u32>,
    /// How long.
    pub run: Run,
    /// The result file's path.
    pub out: String,
    /// Rows of the table.
    pub top: usize,
}

/// What the command line asks for.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Action {
    /// Print the usage.
    Help,
    /// Print the version.
    Version,
    /// Print driver and VMM information.
    Info,
    /// Print hvprof's statistics.
    Stats,
    /// Profile.
    Profile(ProfileArgs),
}

/// A command line that cannot be run; the message says why.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (try --help)", self.0)
    }
}

impl std::error::Error for ArgError {}

fn err<T>(message: String) -> Result<T, ArgError> {
    Err(ArgError(message))
}

/// `BASE:SIZE`, both numbers, `SIZE` nonzero.
pub fn parse_range(text: &str) -> Option<(u64, u64)> {
    let (base, size) = text.split_once(':')?;
    let base = parse_u64(base)?;
    let size = parse_u64(size)?;
    if size == 0 {
        return None;
    }
    Some((base, size))
}

fn number<T: TryFrom<u64>>(option: &str, value: &str) -> Result<T, ArgError> {
    parse_u64(value)
        .and_then(|n| T::try_from(n).ok())
        .map_or_else(
            || err(format!("{} {}: not a number in range", option, value)),
            Ok,
        )
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Action, ArgError> {
    let mut args = args.into_iter();
    let mut module = None;
    let mut pid = None;
    let mut range = None;
    let mut bucket_shift = 4u32;
    let mut source = 0u32;
    let mut interval = None;
    let mut seconds = None;
    let mut out = String::from("hvprof-result.txt");
    let mut top = 10usize;
    let mut command = Vec::new();
    let mut action = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .map_or_else(|| err(format!("{} needs a value", name)), Ok)
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Action::Help),
            "-V" | "--version" => return Ok(Action::Version),
            "--info" => action = Some(Action::Info),
            "--stats" => action = Some(Action::Stats),
            "--module" => module = Some(value("--module")?),
            "--pid" => pid = Some(number::<u32>("--pid", &value("--pid")?)?),
            "--range" => {
                let v = value("--range")?;
                range = Some(parse_range(&v).map_or_else(
                    || err(format!("--range {}: expected BASE:SIZE, SIZE > 0", v)),
                    Ok,
                )?);
            }
            "--bucket" => {
                bucket_shift = number("--bucket", &value("--bucket")?)?;
                if !(2..=31).contains(&bucket_shift) {
                    return err(format!("--bucket {}: must be 2..=31", bucket_shift));
                }
            }
            "--source" => {
                let v = value("--source")?;
                source = crate::sources::parse(&v)
                    .map_or_else(|| err(format!("--source {}: unknown source", v)), Ok)?;
            }
            "--interval" => interval = Some(number("--interval", &value("--interval")?)?),
            "--seconds" => {
                let s: u32 = number("--seconds", &value("--seconds")?)?;
                if s == 0 {
                    return err("--seconds 0: must be at least 1".into());
                }
                seconds = Some(s);
            }
            "--out" => out = value("--out")?,
            "--top" => top = number("--top", &value("--top")?)?,
            "--" => {
                command.extend(args.by_ref());
                if command.is_empty() {
                    return err("-- must be followed by a command".into());
                }
            }
            other => return err(format!("unexpected argument '{}'", other)),
        }
    }
    if let Some(action) = action {
        return Ok(action);
    }
    let target = match (module, pid, range) {
        (Some(name), None, None) => Target::KernelModule(name),
        (Some(name), Some(pid), None) => Target::ProcessModule { pid, name },
        (None, Some(pid), Some((base, size))) => Target::ProcessRange { pid, base, size },
        (None, None, Some((base, size))) => Target::Range { base, size },
        (None, None, None) => return err("nothing to profile: give --module or --range".into()),
        (None, Some(_), None) => return err("--pid needs --module or --range".into()),
        (Some(_), _, Some(_)) => return err("--module and --range exclude each other".into()),
    };
    let run = if command.is_empty() {
        Run::Seconds(seconds.unwrap_or(10))
    } else {
        Run::Command(command)
    };
    Ok(Action::Profile(ProfileArgs {
        target,
        bucket_shift,
        source,
        interval,
        run,
        out,
        top,
    }))
}

#[cfg(test)]
mod tests;
