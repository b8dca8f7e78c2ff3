//! timeline.fxprof.json: a timeline in the Firefox Profiler's processed format, written
//! through the `fxprof-processed-profile` crate; open it at profiler.firefox.com ("Load a
//! profile from file") or in any build of the profiler, offline: function names are in the
//! file (no symbol server is asked).
//!
//! - a process `vCPUs` with a thread per vCPU, `vCPU N`: every sample on its vCPU's track,
//!   and the markers: each vCPU's own (halt, hypercall, slow exit) on its track, the VM's
//!   (phase, pause, guest agent object) on every vCPU's;
//! - when the run named the guest's processes and threads, a process per guest process
//!   (`NAME`, its pid) with a thread per guest thread (its name or `tid N`): the same
//!   samples again, on their thread's track;
//! - frames named as the flame graph names them ([`crate::flame::frame_name`]), outermost
//!   first; category `Kernel` or `User` by the sample's CPL for the sampled PC, by the
//!   address's half for the return addresses under it.
//!
//! The first timeline is written (a run records one host profile with a timeline).

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use fx::{
    CategoryColor, CategoryHandle, CpuDelta, Frame, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerLocations, MarkerTiming, MarkerTypeHandle, ReferenceTimestamp,
    RuntimeSchemaMarkerField, RuntimeSchemaMarkerSchema, SamplingInterval, StackHandle,
    StringHandle, ThreadHandle, Timestamp,
};
use fxprof_processed_profile as fx;

use super::text::kind_name;
use crate::flame::frame_name;
use crate::processes::is_kernel_address;
use crate::processes::Tasks;
use crate::profile::Profile;
use crate::sanitize::flame_frame;
use crate::symbols::Symbols;
use crate::timeline::{MarkerKind, Timeline};
use crate::ReportError;

/// The file name beside profile.json.
pub const FILE_NAME: &str = "timeline.fxprof.json";

/// Every marker kind, in the order their types are registered.
const KINDS: [MarkerKind; 6] = [
    MarkerKind::Phase,
    MarkerKind::Halt,
    MarkerKind::Hypercall,
    MarkerKind::Object,
    MarkerKind::Pause,
    MarkerKind::Exit,
];

/// One of the VMM's markers, as the crate adds it.
struct VmMarker {
    ty: MarkerTypeHandle,
    name: StringHandle,
    what: StringHandle,
    category: CategoryHandle,
}

impl fx::Marker for VmMarker {
    fn marker_type(&self, _: &mut fx::Profile) -> MarkerTypeHandle {
        self.ty
    }

    fn name(&self, _: &mut fx::Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _: &mut fx::Profile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, _field_index: u32) -> StringHandle {
        self.what
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        // The schema has one field, a string.
        0.0
    }
}

/// What the export builds on the way: categories, name cache, stacks per track.
struct Builder<'a> {
    fx: fx::Profile,
    symbols: &'a Symbols,
    kernel: CategoryHandle,
    user: CategoryHandle,
    /// Frame names by (PC, return address, process): a process's mapped files name its
    /// user-mode addresses.
    names: HashMap<(u64, bool, Option<u32>), StringHandle>,
    stacks: HashMap<(ThreadHandle, u32, bool, Option<u32>), StackHandle>,
}

impl Builder<'_> {
    /// The stack handle on `thread` of stack `index` of `t`, its innermost frame sampled at
    /// `user` mode or not, in the process with key `process`.
    fn stack(
        &mut self,
        thread: ThreadHandle,
        t: &Timeline,
        index: u32,
        user: bool,
        process: Option<u32>,
    ) -> Option<StackHandle> {
        if let Some(h) = self.stacks.get(&(thread, index, user, process)) {
            return Some(*h);
        }
        let pcs = t.stacks.get(usize::try_from(index).ok()?)?;
        let mut frames = Vec::with_capacity(pcs.len());
        for (i, &pc) in pcs.iter().enumerate().rev() {
            let ret = i > 0;
            let name = match self.names.get(&(pc, ret, process)) {
                Some(h) => *h,
                None => {
                    let h = self.fx.intern_string(&flame_frame(&frame_name(
                        self.symbols,
                        process,
                        pc,
                        ret,
                    )));
                    self.names.insert((pc, ret, process), h);
                    h
                }
            };
            let kernel = if ret { is_kernel_address(pc) } else { !user };
            frames.push(FrameInfo {
                frame: Frame::Label(name),
                category_pair: if kernel { self.kernel } else { self.user }.into(),
                flags: FrameFlags::empty(),
            });
        }
        let h = self.fx.intern_stack_frames(thread, frames.into_iter())?;
        self.stacks.insert((thread, index, user, process), h);
        Some(h)
    }
}

/// Nanoseconds as the crate's timestamp.
fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos_since_reference(ns)
}

/// A u64 id as the crate's u32 (saturating: a guest's id past 2^32 is not a Linux or
/// Windows one).
fn id32(id: Option<u64>) -> u32 {
    id.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX))
}

/// The Firefox Profiler profile of `timeline` (of `profile`, named with `symbols`).
pub fn build(profile: &Profile, timeline: &Timeline, symbols: &Symbols) -> fx::Profile {
    let interval_ns = u64::from(profile.run.interval_100ns.max(1)) * 100;
    let mut fx = fx::Profile::new(
        &format!("hvprof: {} {}", profile.run.kernel, profile.run.cmdline),
        ReferenceTimestamp::from_duration_since_unix_epoch(Duration::from_nanos(
            timeline.start_unix_ns,
        )),
        SamplingInterval::from_nanos(interval_ns),
    );
    fx.set_symbolicated(true);
    let kernel = fx.add_category("Kernel", CategoryColor::Orange);
    let user = fx.add_category("User", CategoryColor::Yellow);
    let markers_category = fx.add_category("VMM", CategoryColor::Purple);
    let end = timeline
        .samples
        .last()
        .map_or(0, |s| s.t_ns)
        .max(timeline.markers.iter().map(|m| m.end_ns).max().unwrap_or(0));
    // The vCPU tracks.
    let vm = fx.add_process("vCPUs", 0, at(0));
    fx.set_process_end_time(vm, at(end));
    let vcpus: Vec<ThreadHandle> = (0..profile.run.vcpus)
        .map(|v| {
            // None is the main thread: a main thread takes its process's name.
            let th = fx.add_thread(vm, v, at(0), false);
            fx.set_thread_name(th, &format!("vCPU {v}"));
            th
        })
        .collect();
    // The guest's processes and threads that have samples.
    let mut guest: HashMap<u32, ThreadHandle> = HashMap::new();
    let mut processes = HashMap::new();
    let used: std::collections::BTreeSet<u32> =
        timeline.samples.iter().filter_map(|s| s.thread).collect();
    for t in profile.threads.iter().filter(|t| used.contains(&t.key)) {
        let Some(p) = profile.processes.iter().find(|p| p.key == t.process) else {
            continue;
        };
        let ph = *processes.entry(p.key).or_insert_with(|| {
            let h = fx.add_process(&flame_frame(&p.name), id32(p.pid), at(0));
            fx.set_process_end_time(h, at(end));
            h
        });
        let main = t.tid.is_some() && t.tid == p.pid;
        let th = fx.add_thread(ph, id32(t.tid), at(0), main);
        let name = match (&t.name, t.tid) {
            (Some(n), _) => flame_frame(n),
            (None, Some(tid)) => format!("tid {tid}"),
            (None, None) => format!("thread {}", t.key),
        };
        fx.set_thread_name(th, &name);
        guest.insert(t.key, th);
    }
    let mut b = Builder {
        fx,
        symbols,
        kernel,
        user,
        names: HashMap::new(),
        stacks: HashMap::new(),
    };
    let tasks = Tasks::new(profile);
    for s in &timeline.samples {
        let user_mode = s.cpl == 3;
        let process = s.thread.and_then(|t| tasks.process_of(t)).map(|p| p.key);
        let tracks = usize::try_from(s.vcpu)
            .ok()
            .and_then(|v| vcpus.get(v))
            .copied()
            .into_iter()
            .chain(s.thread.and_then(|k| guest.get(&k).copied()));
        for th in tracks {
            let stack = b.stack(th, timeline, s.stack, user_mode, process);
            b.fx.add_sample(th, at(s.t_ns), stack, CpuDelta::ZERO, 1);
        }
    }
    let mut fx = b.fx;
    let types: HashMap<MarkerKind, MarkerTypeHandle> = KINDS
        .iter()
        .map(|&k| {
            let ty = fx.register_marker_type(RuntimeSchemaMarkerSchema {
                type_name: format!("hvprof-{}", kind_name(k)),
                description: None,
                locations: MarkerLocations::MARKER_CHART
                    | MarkerLocations::MARKER_TABLE
                    | MarkerLocations::TIMELINE_OVERVIEW,
                chart_label: Some("{marker.data.what}".to_string()),
                tooltip_label: Some("{marker.name}: {marker.data.what}".to_string()),
                table_label: Some("{marker.data.what}".to_string()),
                fields: vec![RuntimeSchemaMarkerField {
                    key: "what".to_string(),
                    label: "What".to_string(),
                    format: MarkerFieldFormat::String,
                    flags: MarkerFieldFlags::SEARCHABLE,
                }],
                graphs: Vec::new(),
            });
            (k, ty)
        })
        .collect();
    for m in &timeline.markers {
        let timing = if m.end_ns > m.start_ns {
            MarkerTiming::Interval(at(m.start_ns), at(m.end_ns))
        } else {
            MarkerTiming::Instant(at(m.start_ns))
        };
        let name = fx.intern_string(kind_name(m.kind));
        let what = fx.intern_string(&flame_frame(&m.name));
        let on: Vec<ThreadHandle> = match m.vcpu {
            Some(v) => usize::try_from(v)
                .ok()
                .and_then(|v| vcpus.get(v))
                .copied()
                .into_iter()
                .collect(),
            None => vcpus.clone(),
        };
        for th in on {
            fx.add_marker(
                th,
                timing.clone(),
                VmMarker {
                    ty: types[&m.kind],
                    name,
                    what,
                    category: markers_category,
                },
            );
        }
    }
    fx
}

/// Writes `profile`'s first timeline in the Firefox Profiler's format (nothing without one);
/// refused before a byte is written when the file would pass [`super::EXPORT_LIMIT`].
pub fn write(profile: &Profile, symbols: &Symbols, w: impl Write) -> Result<(), ReportError> {
    write_within(profile, symbols, super::EXPORT_LIMIT, w)
}

/// Counts what is written to it, and fails once past `stop` (so that sizing an export stops
/// early).
struct Counter {
    bytes: u64,
    stop: u64,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes = self
            .bytes
            .saturating_add(u64::try_from(buf.len()).unwrap_or(u64::MAX));
        if self.bytes > self.stop {
            return Err(std::io::Error::other("past the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`write`], refused past `limit` bytes: the file is serialized once into a counter, then,
/// within the limit, into `w`.
fn write_within(
    profile: &Profile,
    symbols: &Symbols,
    limit: u64,
    mut w: impl Write,
) -> Result<(), ReportError> {
    let Some(t) = profile.timelines.first() else {
        return Ok(());
    };
    let fx = build(profile, t, symbols);
    let mut counter = Counter {
        bytes: 1,
        stop: limit,
    };
    // An error here is the counter's: the size is past the limit.
    let _ = serde_json::to_writer(&mut counter, &fx);
    super::within("Firefox Profiler file", counter.bytes, limit)?;
    serde_json::to_writer(&mut w, &fx).map_err(ReportError::Json)?;
    w.write_all(b"\n").map_err(ReportError::Io)?;
    Ok(())
}

#[cfg(test)]
mod tests;
