//! What is made of a run's [`Timeline`](crate::timeline::Timeline)s (issue 32): the files
//! [`crate::write_all`] writes beside profile.json when the profile has a timeline, a text
//! timeline and time windows of a profile.
//!
//! | file | module | what |
//! | --- | --- | --- |
//! | timeline.json | [`file`](mod@file) | the timelines themselves: columnar, times delta-encoded, stacks as a table (docs/profile-json.md) |
//! | timeline.fxprof.json | [`fxprof`] | the Firefox Profiler's processed format: a track per vCPU, per guest process and thread, markers |
//! | timeline.perf.txt | [`perf`] | `perf script` text (speedscope, Firefox Profiler, Perfetto, inferno) |
//!
//! [`text`] prints a coarse timeline per vCPU and time bin (`hvprof report --timeline`);
//! [`window`] restricts a profile to a time window or phase (`hvprof compare --from/--to`,
//! `--phase`), rebuilding its counts from the timeline's samples.

use crate::profile::{ObjectOwner, Profile, ProfileObject};
use crate::timeline::Timeline;
use window::WindowError;

pub mod file;
pub mod fxprof;
pub mod perf;
pub mod text;
pub mod window;

#[cfg(test)]
pub(crate) mod testdata;

/// The largest export written from a timeline, in bytes: timeline.perf.txt
/// (`report --perf-script`), timeline.fxprof.json (`--fxprof`) and the text timeline
/// (`--timeline`) alike. Each is sized before a byte is written and refused past this
/// ([`crate::ReportError::ExportTooLarge`]); a saved timeline.json is itself at most 1 GiB
/// ([`crate::bounded::TIMELINE`]), but its perf text repeats every stack for every sample.
pub const EXPORT_LIMIT: u64 = 1 << 30;

/// `Ok` when `bytes` of the export `what` are within `limit`.
pub(crate) fn within(what: &'static str, bytes: u64, limit: u64) -> Result<(), crate::ReportError> {
    if bytes > limit {
        return Err(crate::ReportError::ExportTooLarge { what, bytes, limit });
    }
    Ok(())
}

/// The host profile whose samples timeline `t` holds: the object of `t.object`'s id *and*
/// owned by the host (a guest agent's object may have the same id).
pub fn host_object<'p>(profile: &'p Profile, t: &Timeline) -> Option<&'p ProfileObject> {
    profile
        .objects
        .iter()
        .find(|o| o.owner == ObjectOwner::Host && o.id == t.object)
}

/// Keeps only the timeline of host profile `object` in `profile` (`hvprof report --object`: a
/// run with several host profiles recording one each); an error naming the ones it has when
/// there is none, or no timeline at all.
pub fn keep_only(profile: &mut Profile, object: u64) -> Result<(), WindowError> {
    if profile.timelines.is_empty() {
        return Err(WindowError::NoTimeline);
    }
    if !profile.timelines.iter().any(|t| t.object == object) {
        return Err(WindowError::NoTimelineOf {
            object,
            have: profile.timelines.iter().map(|t| t.object).collect(),
        });
    }
    profile.timelines.retain(|t| t.object == object);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_only_picks_one_timeline_or_names_the_ones_there_are() {
        let mut p = testdata::profile();
        let mut other = p.timelines[0].clone();
        other.object = 3;
        p.timelines.push(other);
        let mut one = p.clone();
        keep_only(&mut one, 3).unwrap();
        assert_eq!(one.timelines.len(), 1);
        assert_eq!(one.timelines[0].object, 3);
        let err = keep_only(&mut p.clone(), 9).unwrap_err();
        assert_eq!(
            err,
            WindowError::NoTimelineOf {
                object: 9,
                have: vec![2, 3]
            }
        );
        assert!(err.to_string().contains("of objects 2, 3"), "{err}");
        p.timelines.clear();
        assert_eq!(keep_only(&mut p, 2), Err(WindowError::NoTimeline));
    }
}
