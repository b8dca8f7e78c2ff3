//! Attribution: counting a sample into every started object that matches it, as
//! `KeProfileInterruptWithSource` does.
//!
//! An object counts a sample if the sample's source is the object's source, the sample's vCPU
//! is in the object's affinity, `Base <= PC < Base + Size`, and the object is global or profiles
//! the sample's process. The counter is the `ULONG` at byte offset
//! `((PC - Base) >> BucketSize) * 4` of the object's buffer. Overlapping objects all count.
//!
//! [`ObjectManager::record`] finds the objects whose range holds the PC through an index of
//! one stabbing table per process plus one for global objects (see `index.rs`), in
//! O(log n + hits) for n objects in the tables consulted, plus a scan of the few objects
//! started or stopped since a table was last rebuilt; it then checks source and affinity.
//! [`ObjectManager::record_naive`] is the reference model: it walks every object and applies
//! the rule to each. Both call the same [`CounterSink`]; the order of the calls is unspecified.

pub(crate) mod index;
pub(crate) mod naive;
mod procmap;
mod stab;

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

/// [`ObjectManager::record`]: the index's candidates for the PC, each checked against the rule.
#[inline]
pub(crate) fn record<P, S: CounterSink<P>>(
    manager: &ObjectManager<P>,
    sample: &Sample,
    sink: &mut S,
) -> u32 {
    let mut counted = 0;
    manager.index.candidates(sample.pc, sample.process, |r| {
        counted += count_one(manager, r, sample, sink);
    });
    counted
}

/// Applies the rule to one candidate; counts and returns 1 if it matches.
fn count_one<P, S: CounterSink<P>>(
    manager: &ObjectManager<P>,
    r: &index::Rec<P>,
    sample: &Sample,
    sink: &mut S,
) -> u32 {
    let pc = sample.pc;
    // The index yields only records whose range holds the PC; the range is checked again
    // here so that the offset below is in bounds by this function alone.
    if !(r.source == sample.source && pc >= r.base && pc < r.end) {
        return 0;
    }
    let in_affinity = if sample.vcpu < 64 {
        r.group0 >> sample.vcpu & 1 != 0
    } else {
        r.higher_groups
            && matches!(manager.slots().get(r.slot as usize),
                Some(Some(o)) if o.config().affinity.contains(sample.vcpu))
    };
    if !in_affinity {
        return 0;
    }
    let offset = bucket_offset(pc, r.base, u32::from(r.shift));
    if offset >= r.counters_len {
        return 0; // cannot happen for a validated object; never write past the buffer
    }
    sink.increment(&r.pin, r.id, offset);
    1
}
