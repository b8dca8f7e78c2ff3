//! timeline.json: a profile's [`Timeline`]s on disk (docs/profile-json.md, "timeline.json").
//!
//! Columnar, so that a million samples cost a few bytes each: per timeline, one array per
//! sample field (`t_delta_ns`, `vcpu`, `cpl`, `thread`, `stack`) and one per marker field,
//! times delta-encoded (each sample's time is the previous one's plus its delta; a marker's
//! start likewise, its end as a duration), call stacks once each in a table that samples
//! refer to by index. The file names the run it belongs to (profile.json's
//! `run.start_time`), so a timeline.json left beside another run's profile.json is refused
//! rather than misread.
//!
//! What is read is bounded ([`files::bounded::TIMELINE`] bytes; samples, markers, stack
//! depth and frames counted first and held to what hvprof records: [`shape`]) and checked
//! ([`check`]) before anything uses it: columns of one length, times that fit 64 bits, stack indexes in the
//! table, thread keys in the profile's thread table, vCPUs below the run's count, markers'
//! ends at or after their starts, each timeline's object a host profile of the profile.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hex::{Big, Hex};
use crate::profile::{ObjectOwner, Profile};
use crate::timeline::{Marker, MarkerKind, Timeline, TimelineSample};
use crate::validate::Inconsistent;
use crate::ReportError;

/// The value of `format` in every timeline.json.
pub const FORMAT_NAME: &str = "hvprof-timeline";

/// The version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The file name beside profile.json.
pub const FILE_NAME: &str = "timeline.json";

pub mod shape;

/// The fields read before the rest: which format and version the file is.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    format: Option<Value>,
    #[serde(default)]
    format_version: Option<Value>,
}

/// The whole file.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    format: String,
    format_version: u32,
    /// profile.json's `run.start_time`: which run these timelines are of.
    run_start_time: String,
    timelines: Vec<StoredTimeline>,
}

/// One timeline, columnar.
#[derive(Debug, Serialize, Deserialize)]
struct StoredTimeline {
    #[serde(with = "crate::hex::big")]
    object: u64,
    #[serde(with = "crate::hex::big")]
    start_unix_ns: u64,
    #[serde(with = "crate::hex::big")]
    dropped_samples: u64,
    #[serde(with = "crate::hex::big")]
    dropped_markers: u64,
    samples: SampleColumns,
    /// Program counters, innermost first, per stack.
    stacks: Vec<Vec<Hex>>,
    markers: MarkerColumns,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct SampleColumns {
    t_delta_ns: Vec<Big>,
    vcpu: Vec<u32>,
    cpl: Vec<u8>,
    thread: Vec<Option<u32>>,
    stack: Vec<u32>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct MarkerColumns {
    kind: Vec<MarkerKind>,
    vcpu: Vec<Option<u32>>,
    start_delta_ns: Vec<Big>,
    duration_ns: Vec<Big>,
    name: Vec<String>,
}

fn bad(at: impl Into<String>, problem: impl Into<String>) -> Inconsistent {
    Inconsistent {
        at: at.into(),
        problem: problem.into(),
    }
}

/// Where the timeline of the profile at `profile_json` is kept: `timeline.json` beside a
/// `profile.json`, `NAME.timeline.json` beside any other `NAME.json`.
pub fn path_beside(profile_json: &Path) -> PathBuf {
    let name = profile_json.file_name().and_then(|n| n.to_str());
    match name {
        Some("profile.json") | None => profile_json.with_file_name(FILE_NAME),
        Some(n) => {
            let stem = n.strip_suffix(".json").unwrap_or(n);
            profile_json.with_file_name(format!("{stem}.{FILE_NAME}"))
        }
    }
}

impl StoredTimeline {
    fn from_timeline(t: &Timeline) -> Self {
        let mut samples = SampleColumns::default();
        let mut previous = 0u64;
        for s in &t.samples {
            // Checked before writing: times never decrease.
            samples
                .t_delta_ns
                .push(Big(s.t_ns.saturating_sub(previous)));
            previous = s.t_ns;
            samples.vcpu.push(s.vcpu);
            samples.cpl.push(s.cpl);
            samples.thread.push(s.thread);
            samples.stack.push(s.stack);
        }
        let mut markers = MarkerColumns::default();
        let mut previous = 0u64;
        for m in &t.markers {
            markers.kind.push(m.kind);
            markers.vcpu.push(m.vcpu);
            markers
                .start_delta_ns
                .push(Big(m.start_ns.saturating_sub(previous)));
            previous = m.start_ns;
            markers
                .duration_ns
                .push(Big(m.end_ns.saturating_sub(m.start_ns)));
            markers.name.push(m.name.clone());
        }
        StoredTimeline {
            object: t.object,
            start_unix_ns: t.start_unix_ns,
            dropped_samples: t.dropped_samples,
            dropped_markers: t.dropped_markers,
            samples,
            stacks: t
                .stacks
                .iter()
                .map(|s| s.iter().copied().map(Hex).collect())
                .collect(),
            markers,
        }
    }

    /// The timeline, its columns checked for equal lengths and its times for overflow.
    fn into_timeline(self, at: &str) -> Result<Timeline, Inconsistent> {
        let s = &self.samples;
        let n = s.t_delta_ns.len();
        for (name, len) in [
            ("vcpu", s.vcpu.len()),
            ("cpl", s.cpl.len()),
            ("thread", s.thread.len()),
            ("stack", s.stack.len()),
        ] {
            if len != n {
                return Err(bad(
                    format!("{at}.samples.{name}"),
                    format!("{len} entries, t_delta_ns has {n}: columns must be of one length"),
                ));
            }
        }
        let mut t_ns = 0u64;
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            t_ns = t_ns.checked_add(s.t_delta_ns[i].0).ok_or_else(|| {
                bad(
                    format!("{at}.samples.t_delta_ns[{i}]"),
                    "the time passes 2^64-1 ns",
                )
            })?;
            samples.push(TimelineSample {
                t_ns,
                vcpu: s.vcpu[i],
                cpl: s.cpl[i],
                thread: s.thread[i],
                stack: s.stack[i],
            });
        }
        let m = self.markers;
        let n = m.kind.len();
        for (name, len) in [
            ("vcpu", m.vcpu.len()),
            ("start_delta_ns", m.start_delta_ns.len()),
            ("duration_ns", m.duration_ns.len()),
            ("name", m.name.len()),
        ] {
            if len != n {
                return Err(bad(
                    format!("{at}.markers.{name}"),
                    format!("{len} entries, kind has {n}: columns must be of one length"),
                ));
            }
        }
        let mut start = 0u64;
        let mut markers = Vec::with_capacity(n);
        for (i, ((((kind, vcpu), delta), duration), name)) in m
            .kind
            .into_iter()
            .zip(m.vcpu)
            .zip(m.start_delta_ns)
            .zip(m.duration_ns)
            .zip(m.name)
            .enumerate()
        {
            start = start.checked_add(delta.0).ok_or_else(|| {
                bad(
                    format!("{at}.markers.start_delta_ns[{i}]"),
                    "the time passes 2^64-1 ns",
                )
            })?;
            let end_ns = start.checked_add(duration.0).ok_or_else(|| {
                bad(
                    format!("{at}.markers.duration_ns[{i}]"),
                    "the end passes 2^64-1 ns",
                )
            })?;
            markers.push(Marker {
                kind,
                vcpu,
                start_ns: start,
                end_ns,
                name,
            });
        }
        Ok(Timeline {
            object: self.object,
            start_unix_ns: self.start_unix_ns,
            samples,
            stacks: self
                .stacks
                .into_iter()
                .map(|s| s.into_iter().map(|h| h.0).collect())
                .collect(),
            markers,
            dropped_samples: self.dropped_samples,
            dropped_markers: self.dropped_markers,
        })
    }
}

/// Checks `timelines` against `profile`, whose they are (the rules of the module's doc).
pub fn check(profile: &Profile, timelines: &[Timeline]) -> Result<(), Inconsistent> {
    let threads: BTreeSet<u32> = profile.threads.iter().map(|t| t.key).collect();
    let vcpus = profile.run.vcpus;
    let mut objects = BTreeSet::new();
    for (n, t) in timelines.iter().enumerate() {
        let at = format!("timelines[{n}]");
        let host = profile
            .objects
            .iter()
            .any(|o| o.id == t.object && o.owner == ObjectOwner::Host);
        if !host {
            return Err(bad(
                format!("{at}.object"),
                format!("object {} is not a host profile of the profile", t.object),
            ));
        }
        if !objects.insert(t.object) {
            return Err(bad(
                format!("{at}.object"),
                format!("object {} has two timelines", t.object),
            ));
        }
        if let Some(i) = t.stacks.iter().position(Vec::is_empty) {
            return Err(bad(
                format!("{at}.stacks[{i}]"),
                "an empty stack: every sample has at least its PC",
            ));
        }
        let mut previous = 0u64;
        for (i, s) in t.samples.iter().enumerate() {
            let at_s = format!("{at}.samples[{i}]");
            if s.t_ns < previous {
                return Err(bad(
                    format!("{at_s}.t_ns"),
                    format!(
                        "{} ns comes before {previous} ns: samples are in time order",
                        s.t_ns
                    ),
                ));
            }
            previous = s.t_ns;
            if s.vcpu >= vcpus {
                return Err(bad(
                    format!("{at_s}.vcpu"),
                    format!("vCPU {} of a run with {vcpus}", s.vcpu),
                ));
            }
            if s.cpl > 3 {
                return Err(bad(format!("{at_s}.cpl"), format!("CPL {}", s.cpl)));
            }
            if usize::try_from(s.stack).map_or(true, |k| k >= t.stacks.len()) {
                return Err(bad(
                    format!("{at_s}.stack"),
                    format!("stack {} of a table of {}", s.stack, t.stacks.len()),
                ));
            }
            if let Some(k) = s.thread.filter(|k| !threads.contains(k)) {
                return Err(bad(
                    format!("{at_s}.thread"),
                    format!("thread {k} is not in the profile's thread table"),
                ));
            }
        }
        let mut previous = 0u64;
        for (i, m) in t.markers.iter().enumerate() {
            let at_m = format!("{at}.markers[{i}]");
            if m.start_ns < previous {
                return Err(bad(
                    format!("{at_m}.start_ns"),
                    format!(
                        "{} ns comes before {previous} ns: markers are in order of start",
                        m.start_ns
                    ),
                ));
            }
            previous = m.start_ns;
            if m.end_ns < m.start_ns {
                return Err(bad(
                    format!("{at_m}.end_ns"),
                    format!(
                        "ends at {} ns, before its start {} ns",
                        m.end_ns, m.start_ns
                    ),
                ));
            }
            if let Some(v) = m.vcpu.filter(|v| *v >= vcpus) {
                return Err(bad(
                    format!("{at_m}.vcpu"),
                    format!("vCPU {v} of a run with {vcpus}"),
                ));
            }
        }
    }
    Ok(())
}

/// Writes `profile`'s timelines as one line of JSON and a newline. They are checked first:
/// a timeline that breaks a rule is an error, never a file no reader takes.
pub fn write(profile: &Profile, mut w: impl Write) -> Result<(), ReportError> {
    check(profile, &profile.timelines)?;
    let stored = Stored {
        format: FORMAT_NAME.to_string(),
        format_version: FORMAT_VERSION,
        run_start_time: profile.run.start_time.clone(),
        timelines: profile
            .timelines
            .iter()
            .map(StoredTimeline::from_timeline)
            .collect(),
    };
    serde_json::to_writer(&mut w, &stored).map_err(ReportError::Json)?;
    w.write_all(b"\n").map_err(ReportError::Io)?;
    Ok(())
}

/// Reads a timeline.json of `profile` (its format, version and run checked first), and
/// checks what it read against the profile ([`check`]).
pub fn read(profile: &Profile, mut r: impl Read) -> Result<Vec<Timeline>, ReportError> {
    let mut text = String::new();
    r.read_to_string(&mut text).map_err(ReportError::Io)?;
    crate::json::keys::check(&text).map_err(ReportError::Json)?;
    // The format and version alone (the rest skipped, nothing kept), then how much the file
    // holds, then the file.
    let Ok(header) = serde_json::from_str::<Header>(&text) else {
        return Err(ReportError::NotATimeline);
    };
    if header.format.as_ref().and_then(Value::as_str) != Some(FORMAT_NAME) {
        return Err(ReportError::NotATimeline);
    }
    let version = header.format_version.as_ref();
    if version.and_then(Value::as_u64) != Some(u64::from(FORMAT_VERSION)) {
        return Err(ReportError::TimelineVersion {
            found: version.map_or("missing".to_string(), Value::to_string),
            newest: FORMAT_VERSION,
        });
    }
    let counted = shape::count(&text).map_err(ReportError::Json)?;
    if let Some(limit) = shape::over_limit(&counted, profile.run.vcpus) {
        return Err(ReportError::TimelineTooLarge(limit));
    }
    let stored: Stored = serde_json::from_str(&text).map_err(ReportError::Json)?;
    if stored.run_start_time != profile.run.start_time {
        return Err(bad(
            "run_start_time",
            format!(
                "{:?}: the timeline is of another run than the profile ({:?})",
                stored.run_start_time, profile.run.start_time
            ),
        )
        .into());
    }
    let mut timelines = Vec::with_capacity(stored.timelines.len());
    for (n, t) in stored.timelines.into_iter().enumerate() {
        timelines.push(t.into_timeline(&format!("timelines[{n}]"))?);
    }
    check(profile, &timelines)?;
    Ok(timelines)
}

#[cfg(test)]
mod tests;
