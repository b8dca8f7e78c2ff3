//! The reference model: walk every object and apply Windows' rule to each.

use super::{bucket_offset, CounterSink, Sample};
use crate::object::ObjectManager;

impl<P> ObjectManager<P> {
    /// Counts `sample` like [`ObjectManager::record`] but by walking every open object: O(n).
    /// The model the index is tested and benchmarked against.
    pub fn record_naive<S: CounterSink<P>>(&self, sample: &Sample, sink: &mut S) -> u32 {
        let mut counted = 0;
        for object in self.slots().iter().flatten() {
            let pin = match object.pin() {
                Some(pin) => pin,
                None => continue,
            };
            let c = object.config();
            let process_matches = match c.process {
                None => true,
                Some(key) => sample.process == Some(key),
            };
            if process_matches
                && c.source == sample.source
                && c.affinity.contains(sample.vcpu)
                && c.base <= sample.pc
                && sample.pc < c.end()
            {
                sink.increment(
                    pin,
                    object.id(),
                    bucket_offset(sample.pc, c.base, c.bucket_size),
                );
                counted += 1;
            }
        }
        counted
    }
}
