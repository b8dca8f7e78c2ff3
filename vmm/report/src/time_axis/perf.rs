//! timeline.perf.txt: a timeline's samples as Linux `perf script` prints them, which
//! speedscope, the Firefox Profiler, Perfetto and inferno's `collapse-perf` all read:
//!
//! ```text
//! awk 57/57 [000] 1.000000: 1 cpu-clock:
//! <TAB>1075 m!hot+0x5 (m)
//! <TAB>1050 m!caller+0x10 (m)
//!
//! ```
//!
//! (each frame line starts with a tab). One event line per sample (`comm pid/tid [vcpu] seconds.micros:` from the run's start,
//! period 1, event `cpu-clock`), then its frames innermost first, each `address symbol+offset
//! (module)`, then a blank line. The comm is the guest thread's name, else its process's
//! (spaces as `_`); a sample in no known thread is `vcpuN 0/0`. A frame's symbol is what the
//! flame graph calls it ([`crate::flame::frame_name`]: a return address by the call before
//! it), always followed by `+0x` and its offset (0 where no symbol covers it), so that a
//! reader that strips the offset gets the flame graph's frame names exactly. The first
//! timeline is written (a run records one host profile with a timeline).
//!
//! With [`Tracks::Vcpus`] (`hvprof report --perf-script FILE --per-vcpu`) every sample is
//! `vcpuN 0/0` instead: one track per vCPU, the whole machine's time axis in one view (what
//! samply's `--per-cpu-threads` gives), where a viewer that opens one thread at a time
//! (speedscope) would otherwise show one guest thread.

use std::collections::HashMap;
use std::io::Write;

use crate::flame::frame_name;
use crate::processes::Tasks;
use crate::profile::Profile;
use crate::sanitize::flame_frame;
use crate::symbols::Symbols;
use crate::timeline::{Timeline, TimelineSample};
use crate::ReportError;

/// The file name beside profile.json.
pub const FILE_NAME: &str = "timeline.perf.txt";

/// A word of an event or frame line: no whitespace (readers split at it), no control.
fn word(s: &str) -> String {
    let w: String = flame_frame(s)
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    // An all-digit comm would read as the pid.
    if w.is_empty() || w.chars().all(|c| c.is_ascii_digit()) {
        format!("_{w}")
    } else {
        w
    }
}

/// What a sample's `comm pid/tid` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tracks {
    /// Its guest thread (`vcpuN 0/0` when none is known).
    #[default]
    Threads,
    /// Its vCPU, always `vcpuN 0/0`.
    Vcpus,
}

/// The comm, pid and tid of a sample in `thread`.
fn task(tasks: &Tasks, thread: Option<u32>, vcpu: u32) -> (String, u64, u64) {
    let Some(t) = thread.and_then(|k| tasks.thread(k)) else {
        return (format!("vcpu{vcpu}"), 0, 0);
    };
    let p = tasks.process(t.process);
    let name = match (&t.name, p) {
        (Some(n), _) => n.clone(),
        (None, Some(p)) => p.name.clone(),
        (None, None) => format!("vcpu{vcpu}"),
    };
    (
        word(&name),
        p.and_then(|p| p.pid).unwrap_or(0),
        t.tid.unwrap_or(0),
    )
}

/// The frame line of `pc` (`ret`: a return address) as the process with key `process` sees
/// it, without its tab.
pub fn frame_line(symbols: &Symbols, process: Option<u32>, pc: u64, ret: bool) -> String {
    let lookup = if ret { pc.wrapping_sub(1) } else { pc };
    let (offset, module) = match symbols.resolve_in(process, lookup) {
        Some(hit) => (
            if hit.symbol.is_some() {
                pc.wrapping_sub(lookup) + hit.offset
            } else {
                0
            },
            word(&hit.module.name).replace(['(', ')'], "_"),
        ),
        None => (0, "[unknown]".to_string()),
    };
    format!(
        "{pc:x} {}+{offset:#x} ({module})",
        word(&frame_name(symbols, process, pc, ret))
    )
}

/// The event line of sample `s` (without its newline).
fn event_line(tasks: &Tasks, s: &TimelineSample, tracks: Tracks) -> String {
    let thread = match tracks {
        Tracks::Threads => s.thread,
        Tracks::Vcpus => None,
    };
    let (comm, pid, tid) = task(tasks, thread, s.vcpu);
    format!(
        "{comm} {pid}/{tid} [{:03}] {}.{:06}: 1 cpu-clock:",
        s.vcpu,
        s.t_ns / 1_000_000_000,
        s.t_ns % 1_000_000_000 / 1000
    )
}

/// The process sample `s` ran in (by its thread, whatever the tracks).
fn process_of(tasks: &Tasks, s: &TimelineSample) -> Option<u32> {
    s.thread.and_then(|t| tasks.process_of(t)).map(|p| p.key)
}

/// The stack of sample `s` (none if its index is past the table).
fn stack_of<'t>(timeline: &'t Timeline, s: &TimelineSample) -> &'t [u64] {
    usize::try_from(s.stack)
        .ok()
        .and_then(|k| timeline.stacks.get(k))
        .map_or(&[][..], Vec::as_slice)
}

/// How many bytes [`write_timeline`] would write, counted without writing them: each stack's
/// frame lines once, each sample's event line; the count stops once past `stop`.
pub fn size(
    profile: &Profile,
    timeline: &Timeline,
    symbols: &Symbols,
    tracks: Tracks,
    stop: u64,
) -> u64 {
    let len = |s: &str| u64::try_from(s.len()).unwrap_or(u64::MAX);
    let tasks = Tasks::new(profile);
    // Each frame line is a tab, the line and a newline; a stack's lines are counted once per
    // process it was sampled in (its frames may be named differently in each).
    let mut stacks: HashMap<(u32, Option<u32>), u64> = HashMap::new();
    let mut total = 0u64;
    for s in &timeline.samples {
        let process = process_of(&tasks, s);
        let frames = *stacks.entry((s.stack, process)).or_insert_with(|| {
            stack_of(timeline, s)
                .iter()
                .enumerate()
                .map(|(i, pc)| len(&frame_line(symbols, process, *pc, i > 0)) + 2)
                .sum()
        });
        // The event line, its newline, the frames and the blank line.
        total = total
            .saturating_add(len(&event_line(&tasks, s, tracks)) + 2)
            .saturating_add(frames);
        if total > stop {
            break;
        }
    }
    total
}

/// Writes `timeline`'s samples (of `profile`, named with `symbols`) as `perf script` text, a
/// track per guest thread or per vCPU; refused before a byte is written when the text would
/// pass [`super::EXPORT_LIMIT`].
pub fn write_timeline(
    profile: &Profile,
    timeline: &Timeline,
    symbols: &Symbols,
    tracks: Tracks,
    w: impl Write,
) -> Result<(), ReportError> {
    write_within(profile, timeline, symbols, tracks, super::EXPORT_LIMIT, w)
}

/// [`write_timeline`], refused past `limit` bytes.
fn write_within(
    profile: &Profile,
    timeline: &Timeline,
    symbols: &Symbols,
    tracks: Tracks,
    limit: u64,
    mut w: impl Write,
) -> Result<(), ReportError> {
    let bytes = size(profile, timeline, symbols, tracks, limit);
    super::within("perf script text", bytes, limit)?;
    let tasks = Tasks::new(profile);
    for s in &timeline.samples {
        writeln!(w, "{}", event_line(&tasks, s, tracks))?;
        let process = process_of(&tasks, s);
        for (i, pc) in stack_of(timeline, s).iter().enumerate() {
            writeln!(w, "\t{}", frame_line(symbols, process, *pc, i > 0))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// Writes `profile`'s first timeline as `perf script` text (nothing without one).
pub fn write(
    profile: &Profile,
    symbols: &Symbols,
    tracks: Tracks,
    w: impl Write,
) -> Result<(), ReportError> {
    match profile.timelines.first() {
        Some(t) => write_timeline(profile, t, symbols, tracks, w),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
