//! Attribution: counting a sample into every started object that matches it, as
//! `KeProfileInterruptWithSource` does.
//!
//! An object counts a sample if the sample's source is the object's source, the sample's vCPU
//! is in the object's affinity, `Base <= PC < Base + Size`, and the object is global or profiles
//! the sample's process. The counter is the `ULONG` at byte offset
//! `((PC - Base) >> BucketSize) * 4` of the object's buffer. Overlapping objects all count.
//!
//! [`ObjectManager::record`] finds the candidates through an index (a global table and one per
//! process, each answering "which ranges hold this PC" in O(log n + k)); the candidates are then
//! filtered by source and affinity. [`ObjectManager::record_naive`] is the reference model: it
//! walks every object and applies the rule to each. Both call the same [`CounterSink`].

pub(crate) mod index;
mod naive;
mod procmap;
pub mod stab;

use crate::handle::ObjectId;
use crate::object::ObjectManager;
use crate::source::ProfileSource;

pub use crate::abi::{process_key, CR3_KEY_MASK};

/// One sample taken from a vCPU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Sample {
    /// vCPU index (processor `vcpu % 64` of group `vcpu / 64`).
    pub vcpu: u32,
    /// Guest RIP at the sample.
    pub pc: u64,
    /// The running process's key, [`process_key`]`(CR3)`, or `None` if unknown (then only
    /// global objects can count the sample).
    pub process: Option<u64>,
    /// The source that produced the sample.
    pub source: ProfileSource,
}

/// Where counts go. The VMM implements it over its pinned buffers: `increment` adds 1 to the
/// little-endian `u32` at `byte_offset` of the buffer `pin` stands for (wrapping, as Windows'
/// `ULONG` counters do). `byte_offset` is a multiple of 4 below the object's counter length,
/// which is at most its `BufferSize`.
pub trait CounterSink<P> {
    /// Count one sample for `object`, whose pinned buffer is `pin`.
    fn increment(&mut self, pin: &P, object: ObjectId, byte_offset: u64);
}

/// `((pc - base) >> bucket_size) * 4`: the byte offset of the counter for `pc`
/// (`pc >= base` required).
#[inline]
pub const fn bucket_offset(pc: u64, base: u64, bucket_size: u32) -> u64 {
    ((pc - base) >> bucket_size) << 2
}

impl<P> ObjectManager<P> {
    /// Counts `sample` into every started object that matches it; returns how many counted.
    ///
    /// Takes `&self`: call it from any number of vCPU threads at once (under the read side of
    /// the lock whose write side `start`/`stop`/`close` take).
    #[inline]
    pub fn record<S: CounterSink<P>>(&self, sample: &Sample, sink: &mut S) -> u32 {
        let mut counted = 0;
        if let Some(key) = sample.process {
            if let Some(table) = self.index.procs.get(key) {
                counted += self.count_table(table, sample, sink);
            }
        }
        counted + self.count_table(&self.index.global, sample, sink)
    }

    #[inline]
    fn count_table<S: CounterSink<P>>(
        &self,
        table: &index::Table<P>,
        sample: &Sample,
        sink: &mut S,
    ) -> u32 {
        let mut counted = 0;
        let slots = self.slots();
        table.query(sample.pc, |e| {
            if e.source != sample.source || sample.pc < e.base || sample.pc >= e.end {
                return;
            }
            let in_affinity = if sample.vcpu < 64 {
                e.group0 >> sample.vcpu & 1 != 0
            } else {
                e.higher_groups
                    && matches!(slots.get(e.slot as usize),
                        Some(Some(o)) if o.config().affinity.contains(sample.vcpu))
            };
            if !in_affinity {
                return;
            }
            let offset = bucket_offset(sample.pc, e.base, e.shift);
            if offset >= e.counters_len {
                return; // cannot happen for a validated object; never write past the buffer
            }
            sink.increment(&e.pin, e.id, offset);
            counted += 1;
        });
        counted
    }

    /// Forces the index layout (tests and benchmarks): call before starting objects.
    #[doc(hidden)]
    pub fn set_index_layout(&mut self, layout: stab::Layout) {
        self.index.set_layout(layout);
    }
}
