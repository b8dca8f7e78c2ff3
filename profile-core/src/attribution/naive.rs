//! The reference model: walk every object and apply Windows' rule to each.

use super::{bucket_offset, CounterSink, Sample};
use crate::object::ObjectManager;

impl<P> ObjectManager<P> {
    /// Counts `sample` like [`ObjectManager::record`] but by walking every started object and
    /// applying the rule to each from the object's own configuration: O(n). The model the
    /// index is tested and benchmarked against. (It reaches the started objects through the
    /// index's records, where the pin tokens live, but uses none of the records' copied fields
    /// and no stabbing structure.)
    pub fn record_naive<S: CounterSink<P>>(&self, sample: &Sample, sink: &mut S) -> u32 {
        let mut counted = 0;
        let slots = self.slots();
        debug_assert_eq!(
            self.index.len() as u64,
            self.started_count(),
            "every started object is in the index exactly once"
        );
        for entry in self.index.records() {
            let object = match slots.get(entry.slot as usize) {
                Some(Some(object)) if object.is_started() && object.id() == entry.id => object,
                _ => continue,
            };
            let pin = &entry.pin;
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
