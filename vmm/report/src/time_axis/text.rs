//! `hvprof report --timeline`: a coarse text timeline for terminals and CI logs. The run is
//! cut into bins (fixed seconds, or by default the phase markers' intervals, or 1 s without
//! any), and for each bin and vCPU the line gives its samples and their top functions (the
//! sampled PC's, named as the flame graph names it) and top guest processes:
//!
//! ```text
//! 1.000-2.000 s  kernel
//!   vCPU 0   10 samples  m!hot 10 | awk (pid 57) 10
//!   markers: pause 1.500-1.600 s paused
//! ```
//!
//! The first timeline is printed (a run records one host profile with a timeline).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::window::secs;
use crate::flame::frame_name;
use crate::processes::Tasks;
use crate::profile::Profile;
use crate::symbols::Symbols;
use crate::timeline::{Marker, MarkerKind, Timeline, RUN_PHASE};

/// The most bins printed: a `--bin` that would cut the run finer is widened to this many.
pub const MAX_BINS: u64 = 10_000;

/// The most markers listed per bin (the rest are counted).
pub const MARKERS_PER_BIN: usize = 8;

/// How the run is cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bins {
    /// Bins of this many seconds (positive).
    Seconds(f64),
    /// The phase markers' intervals; 1 s bins when there are none.
    Phases,
}

/// `kind` as a word.
pub fn kind_name(kind: MarkerKind) -> &'static str {
    match kind {
        MarkerKind::Phase => "phase",
        MarkerKind::Halt => "halt",
        MarkerKind::Hypercall => "hypercall",
        MarkerKind::Object => "object",
        MarkerKind::Pause => "pause",
        MarkerKind::Exit => "exit",
    }
}

/// `s` on one line without controls.
fn one_line(s: &str) -> String {
    crate::sanitize::terminal(s)
        .chars()
        .map(|c| if matches!(c, '\n' | '\t') { ' ' } else { c })
        .collect()
}

/// The bins of `t`: (start, end, label), end exclusive, in time order.
fn bins(t: &Timeline, how: Bins) -> (Vec<(u64, u64, String)>, Option<f64>) {
    let last = t.samples.last().map_or(0, |s| s.t_ns);
    let mut phases: Vec<&Marker> = t
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Phase)
        .collect();
    // The run's phases (firmware, kernel, user) when it has them, not also the whole run.
    if phases.iter().any(|m| m.name != RUN_PHASE) {
        phases.retain(|m| m.name != RUN_PHASE);
    }
    let width = match how {
        Bins::Phases if !phases.is_empty() => {
            let v = phases
                .iter()
                .map(|m| {
                    (
                        m.start_ns,
                        m.end_ns.max(m.start_ns.saturating_add(1)),
                        one_line(&m.name),
                    )
                })
                .collect();
            return (v, None);
        }
        Bins::Phases => 1.0,
        Bins::Seconds(s) if s.is_finite() && s > 0.0 => s,
        Bins::Seconds(_) => 1.0,
    };
    let mut step = (width * 1e9).max(1.0);
    #[allow(clippy::cast_precision_loss)]
    let needed = (last as f64 / step).floor() + 1.0;
    #[allow(clippy::cast_precision_loss)]
    if needed > MAX_BINS as f64 {
        #[allow(clippy::cast_precision_loss)]
        let widened = (last as f64 + 1.0) / MAX_BINS as f64;
        step = widened.ceil();
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let step_ns = step as u64;
    let mut v = Vec::new();
    let mut start = 0u64;
    while start <= last {
        let end = start.saturating_add(step_ns);
        v.push((start, end, String::new()));
        if end == u64::MAX {
            break;
        }
        start = end;
    }
    (v, Some(secs(step_ns)))
}

/// `rows` (name, samples) as `name n`, the `top` largest, ties by name.
fn top_of(rows: BTreeMap<String, u64>, top: usize) -> String {
    let mut v: Vec<(String, u64)> = rows.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.iter()
        .take(top)
        .map(|(n, c)| format!("{n} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The timelines of `profile` as text (one after the other, a run with several host profiles
/// recording one each), `top` functions and processes per vCPU and bin.
pub fn render(profile: &Profile, symbols: &Symbols, how: Bins, top: usize) -> String {
    render_within(profile, symbols, how, top, u64::MAX).unwrap_or_default()
}

/// [`render`], refused once the text passes `limit` bytes (`hvprof report --timeline` gives
/// [`super::EXPORT_LIMIT`]): the text is made a bin at a time and never grows more than one
/// bin past the limit before it is refused.
pub fn render_within(
    profile: &Profile,
    symbols: &Symbols,
    how: Bins,
    top: usize,
    limit: u64,
) -> Result<String, crate::ReportError> {
    if profile.timelines.is_empty() {
        return Ok("no timeline: the run was recorded without --timeline\n".to_string());
    }
    let tasks = Tasks::new(profile);
    let mut out = String::new();
    for (n, t) in profile.timelines.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        render_one(&mut out, t, &tasks, symbols, how, top, limit)?;
    }
    Ok(out)
}

/// One timeline's text, appended to `out`.
fn render_one(
    out: &mut String,
    t: &Timeline,
    tasks: &Tasks,
    symbols: &Symbols,
    how: Bins,
    top: usize,
    limit: u64,
) -> Result<(), crate::ReportError> {
    let (bins, width) = bins(t, how);
    let _ = writeln!(
        out,
        "timeline of object {}: {} samples ({} dropped past the recorder's cap), {} markers ({} dropped); {}",
        t.object,
        t.samples.len(),
        t.dropped_samples,
        t.markers.len(),
        t.dropped_markers,
        match width {
            Some(w) => format!("bins of {w} s"),
            None => "bins by phase".to_string(),
        }
    );
    for (start, end, label) in bins {
        super::within(
            "text timeline",
            u64::try_from(out.len()).unwrap_or(u64::MAX),
            limit,
        )?;
        let _ = writeln!(
            out,
            "{:.3}-{:.3} s{}{}",
            secs(start),
            secs(end),
            if label.is_empty() { "" } else { "  " },
            label
        );
        // vCPU -> (samples, functions, processes)
        type Rows = BTreeMap<String, u64>;
        let mut per_vcpu: BTreeMap<u32, (u64, Rows, Rows)> = BTreeMap::new();
        let first = t.samples.partition_point(|s| s.t_ns < start);
        for s in t.samples[first..].iter().take_while(|s| s.t_ns < end) {
            let e = per_vcpu.entry(s.vcpu).or_default();
            e.0 += 1;
            if let Some(&pc) = usize::try_from(s.stack)
                .ok()
                .and_then(|k| t.stacks.get(k))
                .and_then(|st| st.first())
            {
                *e.1.entry(one_line(&frame_name(symbols, None, pc, false)))
                    .or_default() += 1;
            }
            if let Some(p) = s.thread.and_then(|k| tasks.process_of(k)) {
                *e.2.entry(one_line(&p.label())).or_default() += 1;
            }
        }
        if per_vcpu.is_empty() {
            out.push_str("  no samples\n");
        }
        for (vcpu, (n, functions, processes)) in per_vcpu {
            let _ = write!(
                out,
                "  vCPU {vcpu:<3} {n:>6} samples  {}",
                top_of(functions, top)
            );
            if !processes.is_empty() {
                let _ = write!(out, " | {}", top_of(processes, top));
            }
            out.push('\n');
        }
        let markers: Vec<&Marker> = t
            .markers
            .iter()
            .filter(|m| m.kind != MarkerKind::Phase && m.start_ns >= start && m.start_ns < end)
            .collect();
        if !markers.is_empty() {
            let listed: Vec<String> = markers
                .iter()
                .take(MARKERS_PER_BIN)
                .map(|m| {
                    let at = if m.end_ns > m.start_ns {
                        format!("{:.3}-{:.3} s", secs(m.start_ns), secs(m.end_ns))
                    } else {
                        format!("{:.3} s", secs(m.start_ns))
                    };
                    let vcpu = m.vcpu.map(|v| format!(" vCPU {v}")).unwrap_or_default();
                    format!("{}{vcpu} {at} {}", kind_name(m.kind), one_line(&m.name))
                })
                .collect();
            let _ = write!(out, "  markers: {}", listed.join("; "));
            if markers.len() > MARKERS_PER_BIN {
                let _ = write!(out, "; {} more", markers.len() - MARKERS_PER_BIN);
            }
            out.push('\n');
        }
    }
    super::within(
        "text timeline",
        u64::try_from(out.len()).unwrap_or(u64::MAX),
        limit,
    )
}

#[cfg(test)]
mod tests;
