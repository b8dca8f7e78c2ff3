//! The in-kernel sampler's drain: the rings the vCPU threads' ring events fill
//! (`sampler::ring`), read from outside the vCPUs and attributed to what needs only the
//! sample's RIP and CPL: the guest's objects without a process restriction (counted straight
//! into their pinned pages, with the atomic adds the kicked path uses), host profiles with no
//! CR3 or process filter and no stacks, and their timelines, at each record's own time.
//! Records of host time (exits, guest code the host emulates) are counted as such; records the
//! kernel dropped for want of room are counted as lost.
//!
//! Who drains: the drain thread every [`DRAIN_PERIOD`], and every change of the started
//! objects under the object table's write lock (start, stop, close, a new interval), so each
//! record is attributed against the objects that were started when it was taken: a Stop or
//! close returns to the guest only after every sample taken before it is counted, and none
//! taken after it is (docs/performance.md says why a thread rather than the vCPUs' exits).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::host_profiles::HostProfiles;
use super::timeline::Timelines;
use super::triggers::Triggers;
use super::vcpu_counters::VcpuProfileStats;
use crate::sampler::ring::record::{self, Mode, Record};
use crate::sampler::ring::Ring;
use crate::sampler::TriggerId;

/// How often the drain thread empties the rings: a guest reading its own buffer sees counts at
/// most this late; at 10 kHz a ring holds 40 such periods.
pub const DRAIN_PERIOD: Duration = Duration::from_millis(10);

/// One vCPU's ring and the drain's state of it.
struct Slot {
    ring: Ring,
    /// The last time a record of this vCPU was put on the time axis (its times never go back).
    last_ns: u64,
    /// Bytes taken from the ring, reused.
    bytes: Vec<u8>,
}

/// The vCPUs' rings and where their records go.
pub struct Flat {
    slots: Box<[Mutex<Option<Slot>>]>,
    triggers: Arc<Triggers>,
    counters: Arc<[VcpuProfileStats]>,
    host: Arc<HostProfiles>,
    timeline: Arc<Timelines>,
}

/// The time now on CLOCK_MONOTONIC, the ring records' clock, in ns.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, live for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

impl Flat {
    /// No rings yet, for the vCPUs of `triggers`.
    pub fn new(
        triggers: Arc<Triggers>,
        counters: Arc<[VcpuProfileStats]>,
        host: Arc<HostProfiles>,
        timeline: Arc<Timelines>,
    ) -> Self {
        Flat {
            slots: (0..triggers.vcpu_count())
                .map(|_| Mutex::new(None))
                .collect(),
            triggers,
            counters,
            host,
            timeline,
        }
    }

    fn slot(&self, v: usize) -> Option<std::sync::MutexGuard<'_, Option<Slot>>> {
        self.slots
            .get(v)
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// vCPU `v`'s thread samples into `ring` from now on.
    pub fn register(&self, v: usize, ring: Ring) {
        if let Some(mut slot) = self.slot(v) {
            *slot = Some(Slot {
                ring,
                last_ns: 0,
                bytes: Vec::new(),
            });
        }
    }

    /// True while vCPU `v` has a ring with an event for trigger `t`.
    pub fn serves(&self, v: usize, t: TriggerId) -> bool {
        self.slot(v)
            .is_some_and(|s| s.as_ref().is_some_and(|s| s.ring.serves(t)))
    }

    /// Takes vCPU `v`'s ring away (its thread is leaving; drain it first).
    pub fn unregister(&self, v: usize) {
        if let Some(mut slot) = self.slot(v) {
            *slot = None;
        }
    }

    /// Attributes every record published so far in every ring: to the guest's objects through
    /// `objects(v, pc, t)` (which counts a sample of vCPU `v` at `pc` on trigger `t` with the
    /// object table whose read or write side the caller holds, and returns the increments),
    /// and to the host profiles.
    pub fn drain(&self, objects: impl Fn(usize, u64, TriggerId) -> u32) {
        // One reading of both clocks maps the records' times onto the run's axis.
        let (now_run, now_mono) = (self.timeline.now_ns(), monotonic_ns());
        for v in 0..self.slots.len() {
            let Some(mut guard) = self.slot(v) else {
                continue;
            };
            let Some(slot) = guard.as_mut() else {
                continue;
            };
            slot.bytes.clear();
            let Some(counters) = self.counters.get(v) else {
                continue;
            };
            if !slot.ring.take(&mut slot.bytes) {
                // The kernel's head was past what the ring holds: its records are gone.
                counters.lost(1);
                continue;
            }
            let Slot {
                ring,
                last_ns,
                bytes,
            } = slot;
            let parsed = record::parse(bytes, |r| match r {
                Record::Sample { id, ip, time, mode } => {
                    let Some(t) = ring.trigger(id) else { return };
                    if !self.triggers.is_sampled(v, t) {
                        return; // armed for a claim that has gone
                    }
                    let Mode::Guest { cpl } = mode else {
                        counters.host_time(1);
                        return;
                    };
                    let t_ns = now_run
                        .saturating_sub(now_mono.saturating_sub(time))
                        .max(*last_ns);
                    *last_ns = t_ns;
                    let guest = objects(v, ip, t);
                    let host = self.host.record_flat(v, t, ip, cpl, t_ns);
                    counters.sampled(u64::from(guest) + host);
                }
                Record::Lost { count, .. } => counters.lost(count),
                Record::Other(_) => {}
            });
            if let Err(e) = parsed {
                log::debug!("vCPU {v}'s ring: {e}");
                counters.lost(1);
            }
        }
    }
}
