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

pub mod file;
pub mod fxprof;
pub mod perf;
pub mod text;
pub mod window;

#[cfg(test)]
pub(crate) mod testdata;
