//! Global per-source intervals (NtSetIntervalProfile / NtQueryIntervalProfile).

use alloc::vec::Vec;

use crate::source::{ProfileSource, SourceInfo};

/// The interval in force for each supported source, plus ProfileAlignmentFixup's stored value.
#[derive(Clone, Debug)]
pub(crate) struct Intervals {
    current: Vec<(SourceInfo, u32)>,
    alignment_fixup: u32,
}

impl Intervals {
    pub(crate) fn new(sources: &[SourceInfo]) -> Intervals {
        let mut current: Vec<(SourceInfo, u32)> = Vec::new();
        for s in sources {
            if !current.iter().any(|(c, _)| c.source == s.source) {
                current.push((*s, s.default_interval));
            }
        }
        Intervals {
            current,
            alignment_fixup: 0,
        }
    }

    /// Sets an interval; returns what is now in force (clamped; 0 for unsupported sources,
    /// which are left alone; the raw value for ProfileAlignmentFixup).
    pub(crate) fn set(&mut self, source: ProfileSource, interval: u32) -> u32 {
        if source == ProfileSource::ALIGNMENT_FIXUP {
            self.alignment_fixup = interval;
            return interval;
        }
        match self.current.iter_mut().find(|(s, _)| s.source == source) {
            Some((info, value)) => {
                *value = info.clamp(interval);
                *value
            }
            None => 0,
        }
    }

    /// The interval in force; 0 for an unsupported source; the last value set (0 if none) for
    /// ProfileAlignmentFixup.
    pub(crate) fn query(&self, source: ProfileSource) -> u32 {
        if source == ProfileSource::ALIGNMENT_FIXUP {
            return self.alignment_fixup;
        }
        self.current
            .iter()
            .find(|(s, _)| s.source == source)
            .map_or(0, |(_, v)| *v)
    }
}
