//! A run on a time axis: every sample of a host-side profile with its time, vCPU, privilege
//! level, guest thread and call stack, and markers for what the VMM saw that a sampler cannot
//! (halts, hypercalls, pauses, slow exits, the run's phases). Interface of issue 32; the
//! recorder is the VMM's, the exports (Firefox Profiler, `perf script` text, a text timeline)
//! are written from this model.
//!
//! The files written from it and the views of it are [`crate::time_axis`]'s.

use serde::{Deserialize, Serialize};

/// One sample on the time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSample {
    /// Nanoseconds from the run's start (the host's monotonic clock).
    pub t_ns: u64,
    /// The vCPU sampled.
    pub vcpu: u32,
    /// Its privilege level.
    pub cpl: u8,
    /// The guest thread (a key of the profile's thread table), when known.
    pub thread: Option<u32>,
    /// Its call stack: an index into [`Timeline::stacks`].
    pub stack: u32,
}

/// The name of the phase marker that spans the whole run; the run's phases within it are
/// `firmware`, `kernel` and `user` (each when the samples showed it).
pub const RUN_PHASE: &str = "run";

/// What a marker stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// A phase of the run: the whole run ([`RUN_PHASE`]), firmware, kernel, user.
    Phase,
    /// A vCPU halted (HLT) until it was woken.
    Halt,
    /// A hypercall from the guest agent (its name and status in the marker's name).
    Hypercall,
    /// A guest agent's profile object started or stopped.
    Object,
    /// The VM was paused (control API) until resumed.
    Pause,
    /// An MMIO or port-I/O exit that took longer than the recorder's threshold.
    Exit,
}

/// Something that happened at a time, or over an interval, on one vCPU or the whole VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// What it is.
    pub kind: MarkerKind,
    /// The vCPU it happened on (None: the whole VM).
    pub vcpu: Option<u32>,
    /// Nanoseconds from the run's start.
    pub start_ns: u64,
    /// Its end (equal to `start_ns` for an instant).
    pub end_ns: u64,
    /// What it says (`QUERY_INTERVAL -> STATUS_SUCCESS`, `kernel`, `port 0x3f8`).
    pub name: String,
}

/// One host profile's samples in time order, the stacks they reference, and the run's
/// markers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// The host profile (object id) whose samples these are.
    pub object: u64,
    /// The run's start on the host's wall clock, nanoseconds since the Unix epoch (to line the
    /// timeline up with other records of the host).
    pub start_unix_ns: u64,
    /// The samples, sorted by time.
    pub samples: Vec<TimelineSample>,
    /// Call stacks, innermost PC first (a sample without a walked stack has its PC alone).
    pub stacks: Vec<Vec<u64>>,
    /// Markers, sorted by start.
    pub markers: Vec<Marker>,
    /// Samples not kept past the recorder's cap.
    pub dropped_samples: u64,
    /// Markers not kept past the recorder's cap.
    pub dropped_markers: u64,
}
