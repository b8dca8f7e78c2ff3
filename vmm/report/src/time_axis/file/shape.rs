//! How much a timeline.json holds, counted before it is read (issue 40): one pass over the
//! text that keeps no value, only the length of every column, the depth of every stack and
//! the frames of every stack table; a file past the limits of what hvprof records is refused
//! naming the limit before anything is allocated for it.
//!
//! The limits are the recorder's caps (`vmm::profiler::timeline` and `--stack-depth`; the
//! guest test `timeline::read_limits_accept_what_the_recorder_keeps` holds them equal), so
//! every file hvprof wrote reads back:
//!
//! | what | limit |
//! | --- | --- |
//! | samples, all timelines together | [`MAX_SAMPLES`] |
//! | markers per timeline | [`MAX_MARKERS`] |
//! | frames of one stack | [`MAX_STACK_DEPTH`] |
//! | frames of one timeline's stack table | [`MAX_FRAMES_PER_VCPU`] x the run's vCPUs |

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Samples a run records, all vCPUs and timelines together (the recorder's `MAX_SAMPLES`).
pub const MAX_SAMPLES: u64 = 2_000_000;
/// Markers of one timeline: the recorder's `MAX_MARKERS` (100,000) and the run's phase
/// markers, which are kept past it (`run`, `firmware`, `kernel`, `user`).
pub const MAX_MARKERS: u64 = 100_000 + 4;
/// Frames of one call stack: the largest `--stack-depth` (the sampled PC is its first frame).
pub const MAX_STACK_DEPTH: u64 = 1024;
/// Frames of distinct stacks the recorder keeps per vCPU (its `MAX_STACK_FRAMES`): a
/// timeline's stack table holds at most this many per vCPU of the run.
pub const MAX_FRAMES_PER_VCPU: u64 = 1 << 20;

/// What was counted, all timelines together.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Samples (each timeline's longest sample column).
    pub samples: u64,
    /// The most markers of one timeline (its longest marker column).
    pub markers: u64,
    /// The deepest stack.
    pub depth: u64,
    /// The most frames of one timeline's stack table.
    pub frames: u64,
}

/// Counts `text` (a timeline.json): an error from serde_json for text that is not JSON;
/// anything else that does not fit the format is left for the read that follows.
pub fn count(text: &str) -> Result<Shape, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(text);
    let top = File::deserialize(&mut d)?;
    Ok(top.timelines.0)
}

/// The limit `shape` passes (a message naming it, the file's figure and what hvprof
/// records), for a run of `vcpus` vCPUs; None within them all.
pub fn over_limit(shape: &Shape, vcpus: u32) -> Option<String> {
    let frames = MAX_FRAMES_PER_VCPU.saturating_mul(u64::from(vcpus.max(1)));
    let checks = [
        (
            shape.samples,
            MAX_SAMPLES,
            "samples (all timelines together; the recorder keeps at most that many per run)",
        ),
        (
            shape.markers,
            MAX_MARKERS,
            "markers in one timeline (the recorder's cap and the run's phases)",
        ),
        (
            shape.depth,
            MAX_STACK_DEPTH,
            "frames in one call stack (the largest --stack-depth)",
        ),
        (
            shape.frames,
            frames,
            "frames in one timeline's stack table (the recorder keeps 1,048,576 per vCPU of the run)",
        ),
    ];
    checks
        .into_iter()
        .find(|(n, limit, _)| n > limit)
        .map(|(n, limit, what)| format!("{n} is over the limit of {limit} {what}"))
}

/// The top level: only `timelines` is counted, anything else skipped.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    timelines: Timelines,
}

/// Every timeline's counts added up as they are read.
#[derive(Default)]
struct Timelines(Shape);

impl<'de> Deserialize<'de> for Timelines {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Timelines;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of timelines")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Timelines, A::Error> {
                let mut all = Shape::default();
                while let Some(t) = seq.next_element::<OneTimeline>()? {
                    all.samples = all.samples.saturating_add(t.samples.0);
                    all.markers = all.markers.max(t.markers.0);
                    all.depth = all.depth.max(t.stacks.depth);
                    all.frames = all.frames.max(t.stacks.frames);
                }
                Ok(Timelines(all))
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Deserialize)]
struct OneTimeline {
    #[serde(default)]
    samples: Longest,
    #[serde(default)]
    markers: Longest,
    #[serde(default)]
    stacks: Stacks,
}

/// The longest array among an object's fields (the columns).
#[derive(Default)]
struct Longest(u64);

impl<'de> Deserialize<'de> for Longest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Longest;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of columns")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Longest, A::Error> {
                let mut longest = 0;
                while map.next_key::<IgnoredAny>()?.is_some() {
                    longest = longest.max(map.next_value::<Length>()?.0);
                }
                Ok(Longest(longest))
            }
        }
        d.deserialize_map(V)
    }
}

/// The length of an array (0 for anything else), its items skipped.
struct Length(u64);

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LengthVisitor)
    }
}

struct LengthVisitor;

impl<'de> Visitor<'de> for LengthVisitor {
    type Value = Length;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Length, A::Error> {
        let mut n = 0u64;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(Length(n))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Length, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Length(0))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Length, E> {
        Ok(Length(0))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Length, E> {
        Ok(Length(0))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Length, E> {
        Ok(Length(0))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Length, E> {
        Ok(Length(0))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Length, E> {
        Ok(Length(0))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Length, E> {
        Ok(Length(0))
    }
}

/// A stack table's deepest stack and its frames.
#[derive(Default)]
struct Stacks {
    depth: u64,
    frames: u64,
}

impl<'de> Deserialize<'de> for Stacks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stacks;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of stacks")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stacks, A::Error> {
                let mut s = Stacks::default();
                while let Some(Length(n)) = seq.next_element_seed(LengthSeed)? {
                    s.depth = s.depth.max(n);
                    s.frames = s.frames.saturating_add(n);
                }
                Ok(s)
            }
        }
        d.deserialize_seq(V)
    }
}

struct LengthSeed;

impl<'de> DeserializeSeed<'de> for LengthSeed {
    type Value = Length;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Length, D::Error> {
        d.deserialize_any(LengthVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_stacks_and_frames_are_counted_without_reading_them() {
        let text = r#"{"format":"hvprof-timeline","timelines":[
            {"samples":{"t_delta_ns":[0,1,2],"vcpu":[0,0,0,0]},"stacks":[["0x1","0x2"],["0x3"]],
             "markers":{"kind":["phase"],"name":["a","b"]}},
            {"samples":{"t_delta_ns":[5]},"stacks":[["0x1","0x2","0x3"]],"markers":{}}]}"#;
        assert_eq!(
            count(text).unwrap(),
            Shape {
                samples: 5,
                markers: 2,
                depth: 3,
                frames: 3
            }
        );
        assert_eq!(count("{}").unwrap(), Shape::default());
        assert!(count("[").is_err());
    }

    #[test]
    fn each_limit_is_named_past_it_and_not_at_it() {
        let at = Shape {
            samples: MAX_SAMPLES,
            markers: MAX_MARKERS,
            depth: MAX_STACK_DEPTH,
            frames: 2 * MAX_FRAMES_PER_VCPU,
        };
        assert_eq!(over_limit(&at, 2), None);
        let past = |f: fn(&mut Shape)| {
            let mut s = at;
            f(&mut s);
            over_limit(&s, 2).unwrap()
        };
        assert!(
            past(|s| s.samples += 1).starts_with("2000001 is over the limit of 2000000 samples")
        );
        assert!(past(|s| s.markers += 1).contains("limit of 100004 markers"));
        assert!(past(|s| s.depth += 1).contains("limit of 1024 frames in one call stack"));
        assert!(past(|s| s.frames += 1).contains("limit of 2097152 frames in one timeline's"));
    }
}
