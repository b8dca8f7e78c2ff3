//! Standard output, for every subcommand: text goes out until its reader goes away, then it
//! is dropped and the command carries on to its own end and status.
//!
//! Rust starts every program with SIGPIPE ignored, so a write to a pipe whose reader has gone
//! (`hvprof report P --timeline | head -1`) fails with EPIPE, and `print!` panics on that
//! (status 101 and a backtrace). Two ways out were open: restore SIGPIPE's default action,
//! so hvprof dies of it as Unix filters do, or keep it ignored and handle EPIPE here. This
//! writer is the right one for every subcommand, for these reasons:
//!
//! * `run`, `demo` and `profile` print the run's report before they write its files (`--out`),
//!   with the stop signals blocked so that nothing ends a run before its profile is written:
//!   dying of SIGPIPE there would lose the profile of a run already made.
//! * `compare` prints its tables before it writes `--markdown`, `--junit` and `--out`: dying
//!   there would lose those files, and the exit status of the regression test with them.
//! * `report` writes its files before it prints, and `events` and `bench` only print: for
//!   them death by SIGPIPE would do no harm, but it would be a second rule to keep in step
//!   with each subcommand's order of work; with this writer they end with status 0 instead.
//!
//! Any other failure of standard output (a full file system behind `> FILE`) is said once on
//! stderr, and a command that would have succeeded exits with the host-failure status.
//!
//! Standard error goes through [`eprint`] alike (`hvprof report P 2>&1 | head -1` closes it
//! too): its messages are dropped once it fails, since there is nowhere left to say so.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};

use vmm::outcome::STATUS_HOST_ERROR;

/// What has become of an output.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Every write so far went out.
    Open,
    /// Its reader went away (EPIPE): later text is dropped, quietly.
    Closed,
    /// A write failed otherwise, and was said on stderr: later text is dropped.
    Failed,
}

/// Standard output's state, across the calls of [`print`].
static STDOUT: Mutex<State> = Mutex::new(State::Open);

/// Writes `text` to `w` (and flushes it) when `state` is still open, and moves `state` on a
/// failure. Returns a failure other than EPIPE, once: the caller says it.
fn write_to(w: &mut impl Write, state: &mut State, text: &str) -> Option<io::Error> {
    if *state != State::Open {
        return None;
    }
    match w.write_all(text.as_bytes()).and_then(|()| w.flush()) {
        Ok(()) => None,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            *state = State::Closed;
            None
        }
        Err(e) => {
            *state = State::Failed;
            Some(e)
        }
    }
}

/// Prints `text` to standard output, or drops it once the output's reader has gone or a
/// write to it failed (said on stderr the first time). Never panics.
pub fn print(text: &str) {
    let mut state = STDOUT.lock().unwrap_or_else(PoisonError::into_inner);
    let failed = write_to(&mut io::stdout().lock(), &mut state, text);
    if let Some(e) = failed {
        let e = anyhow::Error::new(e).context("cannot write to the standard output");
        // The status is settled in `status`, at the end.
        let _ = super::fail(e, STATUS_HOST_ERROR);
    }
}

/// Standard error's state, across the calls of [`eprint`].
static STDERR: Mutex<State> = Mutex::new(State::Open);

/// Prints `text` to standard error, or drops it once a write to it failed. Never panics.
pub fn eprint(text: &str) {
    let mut state = STDERR.lock().unwrap_or_else(PoisonError::into_inner);
    // A failure of standard error cannot be said anywhere: later text is dropped.
    let _ = write_to(&mut io::stderr().lock(), &mut state, text);
}

/// `eprint!` through [`eprint`].
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::cli::stdout::eprint(&format!($($arg)*))
    };
}

/// `eprintln!` through [`eprint`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::stdout::eprint(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`print`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::stdout::print(&format!($($arg)*))
    };
}

/// `println!` through [`print`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::stdout::print(&format!("{}\n", format_args!($($arg)*)))
    };
}

pub(super) use {err, errln, out, outln};

/// True once standard output can take no more (its reader went away, or a write failed): a
/// command that only prints, such as `top --batch`, stops there.
pub fn ended() -> bool {
    *STDOUT.lock().unwrap_or_else(PoisonError::into_inner) != State::Open
}

/// The status a subcommand ends with: its own, or the host-failure status when it succeeded
/// but a write to standard output failed (a reader that went away is no failure).
pub fn status(code: ExitCode) -> ExitCode {
    let state = *STDOUT.lock().unwrap_or_else(PoisonError::into_inner);
    if state == State::Failed && code == ExitCode::SUCCESS {
        super::exit_code(STATUS_HOST_ERROR)
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes `room` bytes, then fails every write with `error`.
    struct Limited {
        taken: Vec<u8>,
        room: usize,
        error: io::ErrorKind,
    }

    impl Write for Limited {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room - self.taken.len());
            if n == 0 {
                return Err(io::Error::from(self.error));
            }
            self.taken.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn limited(room: usize, error: io::ErrorKind) -> Limited {
        Limited {
            taken: Vec::new(),
            room,
            error,
        }
    }

    #[test]
    fn text_goes_out_while_the_reader_reads() {
        let mut w = limited(64, io::ErrorKind::BrokenPipe);
        let mut state = State::Open;
        assert!(write_to(&mut w, &mut state, "one\n").is_none());
        assert!(write_to(&mut w, &mut state, "two\n").is_none());
        assert_eq!(w.taken, b"one\ntwo\n");
        assert_eq!(state, State::Open);
    }

    #[test]
    fn broken_pipe_is_no_panic_and_no_error() {
        let mut w = limited(4, io::ErrorKind::BrokenPipe);
        let mut state = State::Open;
        assert!(write_to(&mut w, &mut state, "first line\n").is_none());
        assert_eq!(state, State::Closed);
        // Later text is dropped without another write.
        w.room = 64;
        assert!(write_to(&mut w, &mut state, "more\n").is_none());
        assert_eq!(w.taken, b"firs");
        assert_eq!(state, State::Closed);
    }

    #[test]
    fn another_failure_is_returned_once() {
        let mut w = limited(0, io::ErrorKind::StorageFull);
        let mut state = State::Open;
        let e = write_to(&mut w, &mut state, "text").expect("the failure");
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert_eq!(state, State::Failed);
        assert!(write_to(&mut w, &mut state, "text").is_none());
    }
}
