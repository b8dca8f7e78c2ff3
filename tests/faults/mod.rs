//! The fault-injection suite: hvprof under the faults a fleet host meets and the input a hostile
//! user or guest can hand it. Each test checks that nothing written before is lost, that
//! nothing hangs past its bound, and that the exit status is the documented one
//! (docs/architecture.md, "Guarantees").

/// The control API: slow and idle clients, stale socket files.
mod api;
/// Disk and kernel images: corrupt qcow2 headers, truncated bzImages.
mod images;
/// Inputs: FIFOs, devices, directories, oversized files; signals before any input is opened.
mod inputs;
/// Error lines that say each cause once.
pub(crate) mod messages;
/// Outputs: full file systems, kills during the write, symlinks, unwritable `--out`.
mod outputs;
/// Standard output into a pipe whose reader went away: no panic, no file lost.
mod pipes;
/// Saved profiles and compare/merge arguments: inconsistent counts, non-finite thresholds,
/// control characters in text that reaches XML, JSON, Markdown and the terminal.
mod profiles;
