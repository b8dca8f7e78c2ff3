//! Attribution: counting a sample into every started object that matches it, as
//! `KeProfileInterruptWithSource` does.
//!
//! An object counts a sample if the sample's source is the object's source, the sample's vCPU
//! is in the object's affinity, `Base <= PC < Base + Size`, and the object is global or profiles
//! the sample's process. The counter is the `ULONG` at byte offset
//! `((PC - Base) >> BucketSize) * 4` of the object's buffer. Overlapping objects all count.
//!
//! This module holds what counting is made of, below the object manager: the [`Sample`], the
//! [`CounterSink`] counts go to, the counter's [`bucket_offset`] and the [`process_key`] a
//! sample names its process by. The counting itself is the manager's, beside the objects it
//! counts into: [`crate::object::ObjectManager::record`] finds the objects whose range holds
//! the PC through the manager's index of started objects (one stabbing table per process plus
//! one for global objects, see `object/index/`), in O(log n + hits) for n objects in the
//! tables consulted, plus a scan of the few objects started or stopped since a table was last
//! rebuilt; it then checks source and affinity. [`crate::object::ObjectManager::record_naive`]
//! is the reference model: it walks every object and applies the rule to each. Both call the
//! same [`CounterSink`]; the order of the calls is unspecified.

use crate::handle::ObjectId;
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
