//! The table of host events hvprof samples on: which perf event stands for each
//! `KPROFILE_SOURCE` that has one, and the software clocks a host-side profile may name.
//!
//! Generic perf events (hardware and hardware-cache) come first; a vendor's raw event only
//! where Windows' HAL offers a source and the generic set has none. Sources with no row are
//! absent on every host. docs/profiling.md reproduces this table.

use perf_event_open_sys::bindings as perf;
use profile_core::ProfileSource;

/// How an event is encoded for `perf_event_open`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// A generic hardware event (`PERF_TYPE_HARDWARE`).
    Hardware(u32),
    /// A generic cache event (`PERF_TYPE_HW_CACHE`): cache, operation, result.
    Cache(u32, u32, u32),
    /// A processor-specific event (`PERF_TYPE_RAW`), per vendor; None: that vendor has none.
    Raw {
        /// Intel Core (Haswell and later): umask << 8 | event select.
        intel: Option<u64>,
        /// AMD Zen (and Hygon): umask << 8 | event select.
        amd: Option<u64>,
    },
    /// A software clock (`PERF_TYPE_SOFTWARE`), counting nanoseconds.
    Software(u32),
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventDef {
    /// The name users give `--event` (perf's own name where perf has one).
    pub name: &'static str,
    /// How to open it.
    pub encoding: Encoding,
    /// The profile source it serves, if any.
    pub source: Option<ProfileSource>,
    /// What it counts, for `hvprof events`.
    pub what: &'static str,
}

impl EventDef {
    /// True for the software clocks: their periods are nanoseconds, not events, and they run
    /// on every host perf runs on.
    pub fn is_clock(&self) -> bool {
        matches!(self.encoding, Encoding::Software(_))
    }
}

const fn hw(
    name: &'static str,
    config: u32,
    source: ProfileSource,
    what: &'static str,
) -> EventDef {
    EventDef {
        name,
        encoding: Encoding::Hardware(config),
        source: Some(source),
        what,
    }
}

const fn cache(
    name: &'static str,
    cache: u32,
    result: u32,
    source: ProfileSource,
    what: &'static str,
) -> EventDef {
    EventDef {
        name,
        encoding: Encoding::Cache(cache, perf::PERF_COUNT_HW_CACHE_OP_READ, result),
        source: Some(source),
        what,
    }
}

const fn raw(
    name: &'static str,
    intel: Option<u64>,
    amd: Option<u64>,
    source: ProfileSource,
    what: &'static str,
) -> EventDef {
    EventDef {
        name,
        encoding: Encoding::Raw { intel, amd },
        source: Some(source),
        what,
    }
}

const fn clock(name: &'static str, config: u32, what: &'static str) -> EventDef {
    EventDef {
        name,
        encoding: Encoding::Software(config),
        source: None,
        what,
    }
}

/// The name of the software clock `--clock cpu` ticks ProfileTime on.
pub const TASK_CLOCK: &str = "task-clock";
/// The software clock the in-kernel sampler ticks ProfileTime on (as `perf kvm record`).
pub const CPU_CLOCK: &str = "cpu-clock";

/// Every event hvprof knows, in the order `hvprof events` lists them.
pub const EVENTS: &[EventDef] = &[
    hw(
        "cycles",
        perf::PERF_COUNT_HW_CPU_CYCLES,
        ProfileSource::TOTAL_CYCLES,
        "core cycles",
    ),
    hw(
        "instructions",
        perf::PERF_COUNT_HW_INSTRUCTIONS,
        ProfileSource::TOTAL_ISSUES,
        "instructions retired",
    ),
    hw(
        "branches",
        perf::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
        ProfileSource::BRANCH_INSTRUCTIONS,
        "branch instructions retired",
    ),
    hw(
        "branch-misses",
        perf::PERF_COUNT_HW_BRANCH_MISSES,
        ProfileSource::BRANCH_MISPREDICTIONS,
        "mispredicted branches retired",
    ),
    hw(
        "cache-misses",
        perf::PERF_COUNT_HW_CACHE_MISSES,
        ProfileSource::CACHE_MISSES,
        "last-level cache misses",
    ),
    hw(
        "stalled-cycles-frontend",
        perf::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
        ProfileSource::PIPELINE_DRY,
        "cycles the front end issued nothing",
    ),
    hw(
        "stalled-cycles-backend",
        perf::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
        ProfileSource::PIPELINE_FROZEN,
        "cycles the back end was stalled",
    ),
    cache(
        "L1-dcache-loads",
        perf::PERF_COUNT_HW_CACHE_L1D,
        perf::PERF_COUNT_HW_CACHE_RESULT_ACCESS,
        ProfileSource::DCACHE_ACCESSES,
        "L1 data cache reads",
    ),
    cache(
        "L1-dcache-load-misses",
        perf::PERF_COUNT_HW_CACHE_L1D,
        perf::PERF_COUNT_HW_CACHE_RESULT_MISS,
        ProfileSource::DCACHE_MISSES,
        "L1 data cache read misses",
    ),
    cache(
        "L1-icache-loads",
        perf::PERF_COUNT_HW_CACHE_L1I,
        perf::PERF_COUNT_HW_CACHE_RESULT_ACCESS,
        ProfileSource::ICACHE_ISSUES,
        "L1 instruction cache fetches",
    ),
    cache(
        "L1-icache-load-misses",
        perf::PERF_COUNT_HW_CACHE_L1I,
        perf::PERF_COUNT_HW_CACHE_RESULT_MISS,
        ProfileSource::ICACHE_MISSES,
        "L1 instruction cache misses",
    ),
    // MEM_INST_RETIRED.ALL_LOADS / ALL_STORES (Intel); LsDispatch loads / stores (AMD Zen).
    raw(
        "loads",
        Some(0x81d0),
        Some(0x0129),
        ProfileSource::LOAD_INSTRUCTIONS,
        "load instructions",
    ),
    raw(
        "stores",
        Some(0x82d0),
        Some(0x0229),
        ProfileSource::STORE_INSTRUCTIONS,
        "store instructions",
    ),
    // FP_ARITH_INST_RETIRED, every width (Intel); retired x87/MMX/SSE instructions, the event
    // Windows' AMD64 HAL uses for this source (AMD).
    raw(
        "fp-instructions",
        Some(0xffc7),
        Some(0x07cb),
        ProfileSource::FP_INSTRUCTIONS,
        "floating-point instructions retired",
    ),
    clock(
        CPU_CLOCK,
        perf::PERF_COUNT_SW_CPU_CLOCK,
        "the vCPU thread's time on a CPU (per-CPU clock)",
    ),
    clock(
        TASK_CLOCK,
        perf::PERF_COUNT_SW_TASK_CLOCK,
        "the vCPU thread's CPU time (task clock)",
    ),
];

/// The row named `name` (case-sensitive, as perf names them).
pub fn by_name(name: &str) -> Option<&'static EventDef> {
    EVENTS.iter().find(|e| e.name == name)
}

/// The row that serves `source`, if any.
pub fn for_source(source: ProfileSource) -> Option<&'static EventDef> {
    EVENTS.iter().find(|e| e.source == Some(source))
}

/// The source whose interval sets the period of samples on `event` (None: ProfileTime's
/// clock): the event's PMU source, or ProfileTime for the software clocks and unknown names.
pub fn interval_source(event: Option<&str>) -> ProfileSource {
    event
        .and_then(by_name)
        .and_then(|d| d.source)
        .unwrap_or(ProfileSource::TIME)
}

/// The processor vendors whose raw events the table knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// GenuineIntel.
    Intel,
    /// AuthenticAMD or HygonGenuine.
    Amd,
    /// Anything else.
    Other,
}

impl Vendor {
    /// The vendor of the processor hvprof runs on (CPUID leaf 0).
    pub fn host() -> Vendor {
        // CPUID leaf 0 exists on every x86-64 processor and has no side effects.
        let r = core::arch::x86_64::__cpuid(0);
        let mut id = [0u8; 12];
        id[0..4].copy_from_slice(&r.ebx.to_le_bytes());
        id[4..8].copy_from_slice(&r.edx.to_le_bytes());
        id[8..12].copy_from_slice(&r.ecx.to_le_bytes());
        Vendor::from_id(&id)
    }

    /// The vendor a CPUID vendor string names.
    pub fn from_id(id: &[u8; 12]) -> Vendor {
        match id {
            b"GenuineIntel" => Vendor::Intel,
            b"AuthenticAMD" | b"HygonGenuine" => Vendor::Amd,
            _ => Vendor::Other,
        }
    }
}

/// An event ready for `perf_event_open`: its type and config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// `perf_event_attr.type`.
    pub kind: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// Counts nanoseconds of a software clock rather than hardware events.
    pub clock: bool,
}

impl EventDef {
    /// The encoding on `vendor`'s processors; None when the event is raw and that vendor has
    /// no encoding for it.
    pub fn spec(&self, vendor: Vendor) -> Option<EventSpec> {
        let (kind, config) = match self.encoding {
            Encoding::Hardware(c) => (perf::PERF_TYPE_HARDWARE, u64::from(c)),
            Encoding::Cache(cache, op, result) => (
                perf::PERF_TYPE_HW_CACHE,
                u64::from(cache) | u64::from(op) << 8 | u64::from(result) << 16,
            ),
            Encoding::Raw { intel, amd } => {
                let config = match vendor {
                    Vendor::Intel => intel,
                    Vendor::Amd => amd,
                    Vendor::Other => None,
                }?;
                (perf::PERF_TYPE_RAW, config)
            }
            Encoding::Software(c) => (perf::PERF_TYPE_SOFTWARE, u64::from(c)),
        };
        Some(EventSpec {
            kind,
            config,
            clock: self.is_clock(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_has_at_most_one_event_and_names_are_unique() {
        for (i, a) in EVENTS.iter().enumerate() {
            for b in &EVENTS[i + 1..] {
                assert_ne!(a.name, b.name);
                if a.source.is_some() {
                    assert_ne!(a.source, b.source, "{} and {}", a.name, b.name);
                }
            }
        }
    }

    #[test]
    fn the_sources_windows_names_map_to_perf_events() {
        let name = |s| for_source(s).map(|e| e.name);
        assert_eq!(name(ProfileSource::TOTAL_CYCLES), Some("cycles"));
        assert_eq!(name(ProfileSource::TOTAL_ISSUES), Some("instructions"));
        assert_eq!(
            name(ProfileSource::BRANCH_MISPREDICTIONS),
            Some("branch-misses")
        );
        assert_eq!(
            name(ProfileSource::DCACHE_MISSES),
            Some("L1-dcache-load-misses")
        );
        // ProfileTime is the clock, not a row; these have no host event.
        for none in [
            ProfileSource::TIME,
            ProfileSource::ALIGNMENT_FIXUP,
            ProfileSource::TOTAL_NONISSUES,
            ProfileSource::INTEGER_INSTRUCTIONS,
            ProfileSource::ISSUE2,
            ProfileSource::SPECIAL_INSTRUCTIONS,
            ProfileSource::MEMORY_BARRIER_CYCLES,
            ProfileSource::LOAD_LINKED_ISSUES,
            ProfileSource::MAXIMUM,
        ] {
            assert_eq!(name(none), None, "{none:?}");
        }
        // Sources served stay below ProfileMaximum: the QUERY_INFO bitmap has a bit for each.
        assert!(EVENTS
            .iter()
            .filter_map(|e| e.source)
            .all(|s| s < ProfileSource::MAXIMUM));
    }

    #[test]
    fn encodings_follow_perf_event_open() {
        let spec = |n| by_name(n).unwrap().spec(Vendor::Intel).unwrap();
        assert_eq!(
            spec("cycles"),
            EventSpec {
                kind: 0,
                config: 0,
                clock: false
            }
        );
        assert_eq!(spec("branch-misses").config, 5);
        // L1I, read, miss: 1 | 0 << 8 | 1 << 16.
        assert_eq!(
            spec("L1-icache-load-misses"),
            EventSpec {
                kind: 3,
                config: 0x1_0001,
                clock: false
            }
        );
        assert_eq!(
            spec("task-clock"),
            EventSpec {
                kind: 1,
                config: 1,
                clock: true
            }
        );
        assert_eq!(
            spec("loads"),
            EventSpec {
                kind: 4,
                config: 0x81d0,
                clock: false
            }
        );
        let loads = by_name("loads").unwrap();
        assert_eq!(loads.spec(Vendor::Amd).unwrap().config, 0x0129);
        assert_eq!(loads.spec(Vendor::Other), None);
        // Generic events do not depend on the vendor.
        assert_eq!(
            by_name("cycles").unwrap().spec(Vendor::Other),
            Some(spec("cycles"))
        );
    }

    #[test]
    fn vendors_from_cpuid_strings() {
        assert_eq!(Vendor::from_id(b"GenuineIntel"), Vendor::Intel);
        assert_eq!(Vendor::from_id(b"AuthenticAMD"), Vendor::Amd);
        assert_eq!(Vendor::from_id(b"HygonGenuine"), Vendor::Amd);
        assert_eq!(Vendor::from_id(b"CentaurHauls"), Vendor::Other);
    }
}
