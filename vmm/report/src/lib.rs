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
pub mod callers;
pub mod chain;
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
pub mod unpack;
pub mod validate;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use files::atomic::Naming;
use files::{atomic, bounded};

pub use error::ReportError;
pub use load::{KernelImage, SymbolSpec};
pub use profile::{
    Bucket, FunctionCount, ObjectOwner, Profile, ProfileObject, RunInfo, SampledBy, VcpuStats,
};
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

/// Writes one file the user named atomically (see [`atomic`]): whole, or not at all, with
/// the error naming `path`; a device or a FIFO with a reader is written through.
pub fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<PathBuf, ReportError> {
    Ok(stage_file(path.to_path_buf(), Naming::Named, f)?.commit()?)
}

/// Stages `path` (see [`atomic`]): written and fsynced beside it, not yet in place. An error
/// names `path` once.
pub fn stage_file(
    path: PathBuf,
    naming: Naming,
    f: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<atomic::Staged, ReportError> {
    atomic::stage(&path, naming, f).map_err(|e| match e {
        // It names the path already.
        e @ ReportError::Write(_) => e,
        e => ReportError::File {
            path,
            source: Box::new(e),
        },
    })
}

/// Writes profile.json, profile.pb.gz, flamegraph.svg and report.txt into `dir` (created if
/// needed). With symbols, the profile.json gets their modules and per-function totals (the
/// profile is symbolized on a copy, unless it already was with these symbols).
///
/// With a timeline ([`Profile::timelines`]), also timeline.json, timeline.fxprof.json and
/// timeline.perf.txt ([`time_axis`]); without one, those an earlier run left in `dir` are
/// removed once the new files are in place ([`remove_timeline_beside`]), so that none is
/// read or opened as this profile's.
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
    let profile = if symbols.all_modules().next().is_none() || profile.symbolized_with(symbols) {
        profile
    } else {
        let mut p = profile.clone();
        p.symbolize(symbols);
        symbolized = p;
        &symbolized
    };
    let mut files = WrittenFiles {
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
        stage_file(files.json.clone(), Naming::InDir, |w| {
            json::write(profile, w)
        })?,
        stage_file(files.pprof.clone(), Naming::InDir, |w| {
            pprof::write(profile, symbols, w)
        })?,
        stage_file(files.flamegraph.clone(), Naming::InDir, |w| {
            flame::write(profile, symbols, w)
        })?,
        stage_file(files.text.clone(), Naming::InDir, |w| {
            w.write_all(text::render(profile, symbols, REPORT_TOP).as_bytes())
                .map_err(ReportError::Io)
        })?,
    ];
    if let [json, fxprof, perf] = files.timeline.as_slice() {
        staged.push(stage_file(json.clone(), Naming::InDir, |w| {
            time_axis::file::write(profile, w)
        })?);
        // An export past its size limit is left out (with a warning), never the profile
        // and its timeline: `hvprof report --perf-script` can still make a part of it.
        let exports = [
            stage_file(fxprof.clone(), Naming::InDir, |w| {
                time_axis::fxprof::write(profile, symbols, w)
            }),
            stage_file(perf.clone(), Naming::InDir, |w| {
                time_axis::perf::write(profile, symbols, time_axis::perf::Tracks::Threads, w)
            }),
        ];
        for export in exports {
            match export {
                Ok(s) => staged.push(s),
                Err(e) if e.is_too_large() => log::warn!("{e}"),
                Err(e) => return Err(e),
            }
        }
    }
    let written: Vec<PathBuf> = staged.iter().map(|s| s.target().to_path_buf()).collect();
    atomic::commit_all(staged)?;
    files.timeline.retain(|p| written.contains(p));
    if files.timeline.len() < 3 {
        remove_timeline_beside(&files.json, &files.timeline)?;
    }
    Ok(files)
}

/// The names of every file [`write_all`] may write into a directory: a run's whole set, so
/// that each can be checked writable before a run and none of an earlier run's is left.
pub const OUTPUT_NAMES: [&str; 7] = [
    "profile.json",
    "profile.pb.gz",
    "flamegraph.svg",
    "report.txt",
    time_axis::file::FILE_NAME,
    time_axis::fxprof::FILE_NAME,
    time_axis::perf::FILE_NAME,
];

/// Removes the timeline files an earlier run left beside the profile.json at `json` (all
/// but those in `keep`, just written), once a profile without a timeline, or without some
/// of its exports, was written there, so that none is read or opened as this
/// profile's: timeline.json (or NAME.timeline.json beside NAME.json,
/// [`time_axis::file::path_beside`]) and, beside a profile.json, its two exports. Only
/// regular files and links are removed: anything else at those names is not an earlier
/// run's output.
pub fn remove_timeline_beside(json: &Path, keep: &[PathBuf]) -> Result<(), ReportError> {
    let mut stale = vec![time_axis::file::path_beside(json)];
    if json.file_name().is_some_and(|n| n == "profile.json") {
        stale.push(json.with_file_name(time_axis::fxprof::FILE_NAME));
        stale.push(json.with_file_name(time_axis::perf::FILE_NAME));
    }
    for path in stale.into_iter().filter(|p| !keep.contains(p)) {
        let kind = match std::fs::symlink_metadata(&path) {
            Ok(m) => m.file_type(),
            Err(_) => continue,
        };
        if !(kind.is_file() || kind.is_symlink()) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ReportError::File {
                    path,
                    source: Box::new(ReportError::Io(e)),
                })
            }
            _ => {}
        }
    }
    Ok(())
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
    fn a_run_without_a_timeline_leaves_none_of_the_earlier_runs_timeline_files() {
        let dir = std::env::temp_dir().join(format!("hvprof-stale-set-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let with = time_axis::testdata::profile();
        assert!(!with.timelines.is_empty());
        let first = write_all(&dir, &with, &Symbols::default()).unwrap();
        assert_eq!(first.timeline.len(), 3);
        let without = sample_profile(0x1000);
        let second = write_all(&dir, &without, &Symbols::default()).unwrap();
        assert!(second.timeline.is_empty());
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "flamegraph.svg",
                "profile.json",
                "profile.pb.gz",
                "report.txt"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_an_earlier_runs_files_are_removed_beside_a_profile() {
        let dir = std::env::temp_dir().join(format!("hvprof-stale-beside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let merged = dir.join("all.json");
        std::fs::write(dir.join("all.timeline.json"), b"{}").unwrap();
        std::fs::write(dir.join(time_axis::perf::FILE_NAME), b"another run's").unwrap();
        std::fs::create_dir(dir.join("timeline.json")).unwrap();
        remove_timeline_beside(&merged, &[]).unwrap();
        assert!(!dir.join("all.timeline.json").exists());
        // Not beside all.json: another profile's.
        assert!(dir.join(time_axis::perf::FILE_NAME).exists());
        remove_timeline_beside(&dir.join("profile.json"), &[]).unwrap();
        assert!(!dir.join(time_axis::perf::FILE_NAME).exists());
        // Not a file an earlier run wrote.
        assert!(dir.join("timeline.json").is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
