//! The report crate's error: reading, checking or writing a profile and its files.

use std::path::PathBuf;

use crate::symbols::SymbolError;
use crate::{profile, validate};
use files::{atomic, bounded};

/// Errors reading or writing profiles.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading or writing failed.
    #[error("I/O failed")]
    Io(#[source] std::io::Error),
    /// Malformed JSON, or JSON that does not fit the schema.
    #[error("invalid profile JSON")]
    Json(#[source] serde_json::Error),
    /// Well-formed JSON whose fields disagree (an index past `buckets`, a total that is not
    /// the sum of the counts...): see [`validate`](crate::validate).
    #[error(transparent)]
    Inconsistent(#[from] validate::Inconsistent),
    /// The JSON is not an hvprof profile.
    #[error("not an hvprof profile (its \"format\" is not \"hvprof-profile\")")]
    NotAProfile,
    /// `format_version` missing, or not a non-negative integer (`"2"`, `2.5`, `-1`).
    #[error(
        "format_version: {0}; this hvprof reads the integers {OLDEST} to {NEWEST}",
        OLDEST = profile::OLDEST_FORMAT_VERSION,
        NEWEST = profile::FORMAT_VERSION
    )]
    VersionNotANumber(String),
    /// A profile of a format version this build does not read.
    #[error("profile format version {found}; this hvprof reads versions {oldest} to {newest}")]
    Version {
        /// The file's version.
        found: u64,
        /// The oldest version this build reads.
        oldest: u32,
        /// The newest (the one it writes).
        newest: u32,
    },
    /// The JSON is not an hvprof timeline file (timeline.json).
    #[error("not an hvprof timeline (its \"format\" is not \"hvprof-timeline\")")]
    NotATimeline,
    /// A timeline.json of a format version this build does not read.
    #[error("timeline format version {found}; this hvprof reads version {newest}")]
    TimelineVersion {
        /// The file's version, as written (`missing` when it has none).
        found: String,
        /// The version this build reads and writes.
        newest: u32,
    },
    /// A timeline.json holding more than hvprof records (samples, markers, a stack's depth,
    /// a stack table's frames: [`crate::time_axis::file::shape`]).
    #[error("the timeline holds more than hvprof records: {0}")]
    TimelineTooLarge(String),
    /// An export that would be larger than its limit: refused before a byte is written.
    #[error(
        "the {what} would be at least {bytes} bytes, over its limit of {limit} bytes (docs/reports.md, \"Limits\")"
    )]
    ExportTooLarge {
        /// The export ("perf script text").
        what: &'static str,
        /// Its size, or a lower bound of it.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// An error about one file.
    #[error("{}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<ReportError>,
    },
    /// The output directory could not be created.
    #[error("cannot create {}", .0.display())]
    CreateDir(PathBuf, #[source] std::io::Error),
    /// A file could not be put in place, or a directory takes no new files.
    #[error(transparent)]
    Write(#[from] atomic::WriteError),
    /// An image's symbols could not be read.
    #[error("symbols of {}", .0.display())]
    Symbols(PathBuf, #[source] SymbolError),
    /// A `--symbols` argument that is neither `FILE` nor `FILE@0xBASE`.
    #[error("bad symbols argument {0:?}: expected FILE or FILE@0xBASE")]
    SymbolSpec(String),
    /// An input file was refused or could not be read.
    #[error(transparent)]
    Input(#[from] bounded::InputError),
}

impl ReportError {
    /// Whether the user can mend this by naming another output: something stands at an
    /// output's path that hvprof never replaces (a directory, a FIFO nobody reads), as
    /// opposed to the host failing while writing (a full file system).
    pub fn is_output_refused(&self) -> bool {
        match self {
            ReportError::Write(e) => e.is_refusal(),
            ReportError::File { source, .. } => source.is_output_refused(),
            _ => false,
        }
    }

    /// True for an error that is the input's or the user's to mend, not the host's, when
    /// writing: an export past its size limit (within [`ReportError::File`]).
    pub fn is_too_large(&self) -> bool {
        match self {
            ReportError::ExportTooLarge { .. } => true,
            ReportError::File { source, .. } => source.is_too_large(),
            _ => false,
        }
    }
}

impl From<std::io::Error> for ReportError {
    fn from(e: std::io::Error) -> Self {
        ReportError::Io(e)
    }
}
