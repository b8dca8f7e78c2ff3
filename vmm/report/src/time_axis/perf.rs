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

use std::io::Write;

use crate::flame::frame_name;
use crate::processes::Tasks;
use crate::profile::Profile;
use crate::sanitize::flame_frame;
use crate::symbols::Symbols;
use crate::timeline::Timeline;
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

/// The frame line of `pc` (`ret`: a return address), without its tab.
pub fn frame_line(symbols: &Symbols, pc: u64, ret: bool) -> String {
    let lookup = if ret { pc.wrapping_sub(1) } else { pc };
    let (offset, module) = match symbols.resolve(lookup) {
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
        word(&frame_name(symbols, pc, ret))
    )
}

/// Writes `timeline`'s samples (of `profile`, named with `symbols`) as `perf script` text, a
/// track per guest thread or per vCPU.
pub fn write_timeline(
    profile: &Profile,
    timeline: &Timeline,
    symbols: &Symbols,
    tracks: Tracks,
    mut w: impl Write,
) -> Result<(), ReportError> {
    let tasks = Tasks::new(profile);
    for s in &timeline.samples {
        let thread = match tracks {
            Tracks::Threads => s.thread,
            Tracks::Vcpus => None,
        };
        let (comm, pid, tid) = task(&tasks, thread, s.vcpu);
        writeln!(
            w,
            "{comm} {pid}/{tid} [{:03}] {}.{:06}: 1 cpu-clock:",
            s.vcpu,
            s.t_ns / 1_000_000_000,
            s.t_ns % 1_000_000_000 / 1000
        )?;
        let stack = usize::try_from(s.stack)
            .ok()
            .and_then(|k| timeline.stacks.get(k))
            .map_or(&[][..], Vec::as_slice);
        for (i, pc) in stack.iter().enumerate() {
            writeln!(w, "\t{}", frame_line(symbols, *pc, i > 0))?;
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
