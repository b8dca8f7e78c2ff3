//! A profile restricted to a time window (`hvprof compare --from/--to`, `--phase`): each
//! host profile with a timeline is rebuilt from the timeline's samples inside the window
//! (its counts, per-thread counts and call stacks), so that a regression in one phase (a
//! boot) is not hidden by the rest of the run.
//!
//! What the window keeps: the host profiles that have a timeline, rebuilt; the processes and
//! threads; the run, its wall time the window's length. What it drops: the guest agent's
//! objects and host profiles without a timeline (their counts have no times), per-function
//! totals (symbolize the windowed profile again: [`Profile::symbolize`]). Each vCPU's
//! counters count the window's samples of the first timeline (samples, attributed and counts
//! alike; the rest 0).

use std::collections::BTreeMap;

use crate::profile::{Profile, ProfileObject, StackCount, ThreadCounts, VcpuStats};
use crate::timeline::{MarkerKind, Timeline};

/// Why a profile could not be windowed. All of these are the user's to mend.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    /// The profile was recorded without `--timeline`.
    #[error("the profile has no timeline (record it with --timeline): it cannot be restricted to a time window")]
    NoTimeline,
    /// No timeline of that host profile.
    #[error("the profile has no timeline of object {object} (its timelines are of objects {})", .have.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))]
    NoTimelineOf {
        /// The object asked for.
        object: u64,
        /// The objects it has timelines of.
        have: Vec<u64>,
    },
    /// No phase marker of that name.
    #[error("the profile has no phase {name:?} (its phases: {})", if .phases.is_empty() { "none".to_string() } else { .phases.join(", ") })]
    NoPhase {
        /// The name asked for.
        name: String,
        /// The phases it has.
        phases: Vec<String>,
    },
    /// `--from` at or after `--to`, or a bound that is not a finite non-negative number of
    /// seconds.
    #[error("the window {from} s to {to} s is empty or not a time from the run's start")]
    Empty {
        /// The start asked for, in seconds.
        from: f64,
        /// The end asked for, in seconds.
        to: f64,
    },
}

/// A window asked for: seconds from the run's start, or a phase marker's interval.
#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// From `from` (inclusive) to `to` (exclusive) seconds; `to` None: to the end.
    Seconds {
        /// Start.
        from: f64,
        /// End.
        to: Option<f64>,
    },
    /// The first phase marker of this name.
    Phase(String),
}

/// Seconds as nanoseconds (saturating), or None for a negative or non-finite value.
fn ns(seconds: f64) -> Option<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    let n = (seconds * 1e9).round();
    // As u64 saturates: 2^64 ns is 584 years.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Some(if n >= 18_446_744_073_709_551_615.0 {
        u64::MAX
    } else {
        n as u64
    })
}

/// The phase names of `profile`'s timelines, in order of start, each once.
pub fn phases(profile: &Profile) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for m in profile.timelines.iter().flat_map(|t| &t.markers) {
        if m.kind == MarkerKind::Phase && !names.contains(&m.name) {
            names.push(m.name.clone());
        }
    }
    names
}

/// The interval `window` stands for in `profile`, nanoseconds from the run's start, end
/// exclusive.
pub fn resolve(profile: &Profile, window: &Window) -> Result<(u64, u64), WindowError> {
    if profile.timelines.is_empty() {
        return Err(WindowError::NoTimeline);
    }
    match window {
        Window::Seconds { from, to } => {
            let end = to.unwrap_or(f64::INFINITY);
            let empty = WindowError::Empty {
                from: *from,
                to: end,
            };
            let start = ns(*from).ok_or(empty.clone())?;
            let end_ns = match to {
                Some(t) => ns(*t).ok_or(empty.clone())?,
                None => u64::MAX,
            };
            if start >= end_ns {
                return Err(empty);
            }
            Ok((start, end_ns))
        }
        Window::Phase(name) => profile
            .timelines
            .iter()
            .flat_map(|t| &t.markers)
            .find(|m| m.kind == MarkerKind::Phase && m.name == *name)
            // An instant phase marker still keeps the samples at its time.
            .map(|m| (m.start_ns, m.end_ns.max(m.start_ns.saturating_add(1))))
            .ok_or_else(|| WindowError::NoPhase {
                name: name.clone(),
                phases: phases(profile),
            }),
    }
}

/// `o` with its counts, per-thread counts and (when `stacks`) call stacks rebuilt from the
/// samples of `t` at `from_ns <= t < to_ns` whose PC lies in its range.
pub fn rebuild(
    o: &ProfileObject,
    t: &Timeline,
    from_ns: u64,
    to_ns: u64,
    stacks: bool,
) -> ProfileObject {
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut per_thread: BTreeMap<u32, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut all_threaded = true;
    let mut by_stack: BTreeMap<(u32, Option<u32>), u64> = BTreeMap::new();
    let first = t.samples.partition_point(|s| s.t_ns < from_ns);
    for s in t.samples[first..].iter().take_while(|s| s.t_ns < to_ns) {
        let Some(&pc) = usize::try_from(s.stack)
            .ok()
            .and_then(|k| t.stacks.get(k))
            .and_then(|st| st.first())
        else {
            continue;
        };
        if pc < o.base.0 || pc >= o.end() {
            continue;
        }
        let index = (pc - o.base.0) >> o.bucket_shift.min(63);
        *counts.entry(index).or_default() += 1;
        match s.thread {
            Some(k) => *per_thread.entry(k).or_default().entry(index).or_default() += 1,
            None => all_threaded = false,
        }
        *by_stack.entry((s.stack, s.thread)).or_default() += 1;
    }
    let mut stack_rows: Vec<StackCount> = if stacks {
        by_stack
            .into_iter()
            .filter_map(|((k, thread), count)| {
                let pcs = t.stacks.get(usize::try_from(k).ok()?)?;
                let mut row = StackCount::new(pcs.iter().copied(), false, count);
                row.thread = thread;
                Some(row)
            })
            .collect()
    } else {
        Vec::new()
    };
    stack_rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.pcs.cmp(&b.pcs))
            .then_with(|| a.thread.cmp(&b.thread))
    });
    ProfileObject {
        total: counts.values().sum(),
        counts: counts.into_iter().collect(),
        functions: Vec::new(),
        stacks: stack_rows,
        stacks_dropped: 0,
        threads: if all_threaded {
            per_thread
                .into_iter()
                .map(|(thread, c)| ThreadCounts {
                    samples: None,
                    user: None,
                    kernel: None,
                    thread,
                    counts: c.into_iter().collect(),
                })
                .collect()
        } else {
            Vec::new()
        },
        // Totals of the whole object's threads, not the window's: filled again on writing.
        processes: Vec::new(),
        // Which path took the window's samples is not on the time axis.
        sampled_by: None,
        ..o.clone()
    }
}

/// `profile` restricted to `from_ns..to_ns` (the module's doc says what is kept).
pub fn restrict(profile: &Profile, from_ns: u64, to_ns: u64) -> Result<Profile, WindowError> {
    if profile.timelines.is_empty() {
        return Err(WindowError::NoTimeline);
    }
    let objects = profile
        .timelines
        .iter()
        .filter_map(|t| {
            let o = super::host_object(profile, t)?;
            let stacks = !o.stacks.is_empty() || o.stacks_dropped > 0;
            Some(rebuild(o, t, from_ns, to_ns, stacks))
        })
        .collect();
    let first = &profile.timelines[0];
    let mut per_vcpu: BTreeMap<u32, u64> = BTreeMap::new();
    let start = first.samples.partition_point(|s| s.t_ns < from_ns);
    for s in first.samples[start..].iter().take_while(|s| s.t_ns < to_ns) {
        *per_vcpu.entry(s.vcpu).or_default() += 1;
    }
    let vcpus = profile
        .vcpus
        .iter()
        .map(|v| {
            let n = per_vcpu.get(&v.vcpu).copied().unwrap_or(0);
            VcpuStats {
                vcpu: v.vcpu,
                samples: n,
                attributed: n,
                outside: 0,
                lost: 0,
                counts: n,
                injected: 0,
                hypercalls: 0,
            }
        })
        .collect();
    let mut run = profile.run.clone();
    let end_s = if to_ns == u64::MAX {
        run.wall_time_s
    } else {
        secs(to_ns).min(run.wall_time_s)
    };
    run.wall_time_s = (end_s - secs(from_ns)).max(0.0);
    Ok(Profile {
        run,
        vcpus,
        modules: Vec::new(),
        objects,
        timelines: Vec::new(),
        ..profile.clone()
    })
}

/// Nanoseconds as seconds.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests;
