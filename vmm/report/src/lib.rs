//! hvprof's report side: turning a run's counts into something people and tools read,
//! symbolizing them, and comparing and merging runs. It depends on profile-core and ordinary
//! crates only, never on the VMM: a host without /dev/kvm can read, compare and symbolize
//! profiles, and the compiler keeps it that way. The VMM hands a run over as an
//! [`input::RunInput`].
//!
//! [`Profile`] is one run's measurements; every format is written from it and [`Symbols`]
//! (the placed modules):
//!
//! | file | module | what |
//! | --- | --- | --- |
//! | profile.json | [`json`] | the profile itself, versioned (docs/profile-json.md) |
//! | profile.pb.gz | [`pprof`] | pprof protobuf for `go tool pprof` |
//! | flamegraph.svg | [`flame`] | inferno flame graph of object → (guest process) → module → function → bucket |
//! | report.txt | [`text`] | Kernrate-style tables per module, function and bucket |
//! | timeline.json, timeline.fxprof.json, timeline.perf.txt | [`time_axis`] | the samples on a time axis ([`timeline`]), when the run recorded them (`--timeline`) |
//!
//! [`annotate`] disassembles the hottest buckets; [`load`] finds the symbols for a saved
//! profile; [`compare`] compares and merges saved profiles; [`processes`] gives every output
//! the guest's processes and threads (profile.json format 4).
#![warn(missing_docs)]

pub mod annotate;
pub mod atomic;
pub mod bounded;
pub mod callers;
pub mod compare;
mod error;
pub mod flame;
pub mod hex;
pub mod input;
pub mod json;
pub mod load;
pub mod pprof;
pub mod processes;
pub mod profile;
pub mod sanitize;
pub mod symbols;
pub mod text;
pub mod time_axis;
pub mod timeline;
pub mod validate;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub use error::ReportError;
pub use load::{KernelImage, SymbolSpec};
pub use profile::{Bucket, FunctionCount, ObjectOwner, Profile, ProfileObject, RunInfo, VcpuStats};
pub use symbols::{Module, SymbolError, Symbols};

/// Rows per table in the report.txt that [`write_all`] writes.
pub const REPORT_TOP: usize = 20;

/// The files [`write_all`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFiles {
    /// profile.json
    pub json: PathBuf,
    /// profile.pb.gz
    pub pprof: PathBuf,
    /// flamegraph.svg
    pub flamegraph: PathBuf,
    /// report.txt
    pub text: PathBuf,
    /// timeline.json, timeline.fxprof.json and timeline.perf.txt, when the profile has a
    /// timeline (empty otherwise).
    pub timeline: Vec<PathBuf>,
}

impl WrittenFiles {
    /// Every path written.
    pub fn all(&self) -> Vec<&Path> {
        let mut v = vec![
            self.json.as_path(),
            &self.pprof,
            &self.flamegraph,
            &self.text,
        ];
        v.extend(self.timeline.iter().map(PathBuf::as_path));
        v
    }
}

/// Writes one file atomically (see [`atomic`]): whole, or not at all, with the error naming
/// `path`.
pub fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<PathBuf, ReportError> {
    Ok(stage_file(path.to_path_buf(), f)?.commit()?)
}

/// Stages `path` (see [`atomic`]): written and fsynced beside it, not yet in place.
fn stage_file(
    path: PathBuf,
    f: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<atomic::Staged, ReportError> {
    atomic::stage(&path, f).map_err(|e| ReportError::File {
        path,
        source: Box::new(e),
    })
}

/// Writes profile.json, profile.pb.gz, flamegraph.svg and report.txt into `dir` (created if
/// needed). With symbols, the profile.json gets their modules and per-function totals (the
/// profile is symbolized on a copy, unless it already was with these symbols).
///
/// With a timeline ([`Profile::timelines`]), also timeline.json, timeline.fxprof.json and
/// timeline.perf.txt ([`time_axis`]); without one, a timeline.json left in `dir` by an
/// earlier run is removed once the new files are in place, so that it is never read as this
/// profile's.
///
/// The files are replaced together (see [`atomic`]): all are written and fsynced beside
/// their final names before any is renamed into place, so a failure while writing any of
/// them (a full file system) leaves every previous file as it was.
pub fn write_all(
    dir: &Path,
    profile: &Profile,
    symbols: &Symbols,
) -> Result<WrittenFiles, ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| ReportError::CreateDir(dir.to_path_buf(), e))?;
    let symbolized;
    let profile = if symbols.modules().is_empty() || profile.symbolized_with(symbols) {
        profile
    } else {
        let mut p = profile.clone();
        p.symbolize(symbols);
        symbolized = p;
        &symbolized
    };
    let files = WrittenFiles {
        json: dir.join("profile.json"),
        pprof: dir.join("profile.pb.gz"),
        flamegraph: dir.join("flamegraph.svg"),
        text: dir.join("report.txt"),
        timeline: if profile.timelines.is_empty() {
            Vec::new()
        } else {
            vec![
                dir.join(time_axis::file::FILE_NAME),
                dir.join(time_axis::fxprof::FILE_NAME),
                dir.join(time_axis::perf::FILE_NAME),
            ]
        },
    };
    let mut staged = vec![
        stage_file(files.json.clone(), |w| json::write(profile, w))?,
        stage_file(files.pprof.clone(), |w| pprof::write(profile, symbols, w))?,
        stage_file(files.flamegraph.clone(), |w| {
            flame::write(profile, symbols, w)
        })?,
        stage_file(files.text.clone(), |w| {
            w.write_all(text::render(profile, symbols, REPORT_TOP).as_bytes())
                .map_err(ReportError::Io)
        })?,
    ];
    if let [json, fxprof, perf] = files.timeline.as_slice() {
        staged.push(stage_file(json.clone(), |w| {
            time_axis::file::write(profile, w)
        })?);
        staged.push(stage_file(fxprof.clone(), |w| {
            time_axis::fxprof::write(profile, symbols, w)
        })?);
        staged.push(stage_file(perf.clone(), |w| {
            time_axis::perf::write(profile, symbols, time_axis::perf::Tracks::Threads, w)
        })?);
    }
    atomic::commit_all(staged)?;
    if files.timeline.is_empty() {
        let stale = time_axis::file::path_beside(&files.json);
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ReportError::File {
                    path: stale,
                    source: Box::new(ReportError::Io(e)),
                })
            }
            _ => {}
        }
    }
    Ok(files)
}

/// Reads a profile.json file, and its timeline when one is beside it
/// ([`time_axis::file::path_beside`]: timeline.json beside a profile.json).
pub fn read_profile(path: &Path) -> Result<Profile, ReportError> {
    let wrap = |path: &Path| {
        let path = path.to_path_buf();
        move |e: ReportError| ReportError::File {
            path,
            source: Box::new(e),
        }
    };
    let text = bounded::read(path, bounded::PROFILE)?;
    let mut profile = json::read(text.as_slice()).map_err(wrap(path))?;
    let beside = time_axis::file::path_beside(path);
    // A missing timeline is a run recorded without one; anything else there is read (and
    // refused by kind, size or content like every input).
    if std::fs::symlink_metadata(&beside).is_ok() {
        let text = bounded::read(&beside, bounded::TIMELINE)?;
        profile.timelines =
            time_axis::file::read(&profile, text.as_slice()).map_err(wrap(&beside))?;
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::tests::sample_profile;
    use symbols::tests::module;

    #[test]
    fn write_all_writes_four_files_and_the_json_reads_back_symbolized() {
        let dir = std::env::temp_dir().join(format!("hvprof-write-all-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let files = write_all(&dir, &p, &symbols).unwrap();
        for f in files.all() {
            assert!(std::fs::metadata(f).unwrap().len() > 0, "{}", f.display());
        }
        let back = read_profile(&files.json).unwrap();
        assert_eq!(back.objects[0].functions[0].name, "hot");
        assert_eq!(back.modules[0].name, "m");
        let text = std::fs::read_to_string(&files.text).unwrap();
        assert!(text.contains("m!hot"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_file() {
        let e = read_profile(Path::new("/nonexistent/profile.json")).unwrap_err();
        assert_eq!(e.to_string(), "cannot open /nonexistent/profile.json");
        assert!(matches!(e, ReportError::Input(_)));
        let e = read_profile(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
    }
}
