//! The reference model: walk every object and apply Windows' rule to each.

use super::{bucket_offset, CounterSink, Sample};
use crate::object::ObjectManager;

/// [`ObjectManager::record_naive`]: every started object, each checked against the rule from
/// its own configuration. (It reaches the started objects through the index's records, where
/// the pin tokens live, but uses none of the records' copied fields and no stabbing
/// structure.)
pub(crate) fn record<P, S: CounterSink<P>>(
    manager: &ObjectManager<P>,
    sample: &Sample,
    sink: &mut S,
) -> u32 {
    let mut counted = 0;
    let slots = manager.slots();
    debug_assert_eq!(
        manager.index.len() as u64,
        manager.started_count(),
        "every started object is in the index exactly once"
    );
    for entry in manager.index.records() {
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
