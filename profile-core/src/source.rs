//! Profile sources (`KPROFILE_SOURCE`) and the per-source interval limits a platform offers.

/// A `KPROFILE_SOURCE` value. A newtype rather than an enum: values from 0x19 up are
/// processor-specific and a guest may name any 32-bit value.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(transparent)]
pub struct ProfileSource(pub u32);

impl ProfileSource {
    /// `ProfileTime`: the timer. Interval unit: 100 ns.
    pub const TIME: ProfileSource = ProfileSource(0x00);
    /// `ProfileAlignmentFixup`: not a HAL source; its interval is only stored and reported back.
    pub const ALIGNMENT_FIXUP: ProfileSource = ProfileSource(0x01);
    /// `ProfileTotalIssues`.
    pub const TOTAL_ISSUES: ProfileSource = ProfileSource(0x02);
    /// `ProfilePipelineDry`.
    pub const PIPELINE_DRY: ProfileSource = ProfileSource(0x03);
    /// `ProfileLoadInstructions`.
    pub const LOAD_INSTRUCTIONS: ProfileSource = ProfileSource(0x04);
    /// `ProfilePipelineFrozen`.
    pub const PIPELINE_FROZEN: ProfileSource = ProfileSource(0x05);
    /// `ProfileBranchInstructions`.
    pub const BRANCH_INSTRUCTIONS: ProfileSource = ProfileSource(0x06);
    /// `ProfileTotalNonissues`.
    pub const TOTAL_NONISSUES: ProfileSource = ProfileSource(0x07);
    /// `ProfileDcacheMisses`.
    pub const DCACHE_MISSES: ProfileSource = ProfileSource(0x08);
    /// `ProfileIcacheMisses`.
    pub const ICACHE_MISSES: ProfileSource = ProfileSource(0x09);
    /// `ProfileCacheMisses`.
    pub const CACHE_MISSES: ProfileSource = ProfileSource(0x0A);
    /// `ProfileBranchMispredictions`.
    pub const BRANCH_MISPREDICTIONS: ProfileSource = ProfileSource(0x0B);
    /// `ProfileStoreInstructions`.
    pub const STORE_INSTRUCTIONS: ProfileSource = ProfileSource(0x0C);
    /// `ProfileFpInstructions`.
    pub const FP_INSTRUCTIONS: ProfileSource = ProfileSource(0x0D);
    /// `ProfileIntegerInstructions`.
    pub const INTEGER_INSTRUCTIONS: ProfileSource = ProfileSource(0x0E);
    /// `Profile2Issue`.
    pub const ISSUE2: ProfileSource = ProfileSource(0x0F);
    /// `Profile3Issue`.
    pub const ISSUE3: ProfileSource = ProfileSource(0x10);
    /// `Profile4Issue`.
    pub const ISSUE4: ProfileSource = ProfileSource(0x11);
    /// `ProfileSpecialInstructions`.
    pub const SPECIAL_INSTRUCTIONS: ProfileSource = ProfileSource(0x12);
    /// `ProfileTotalCycles`.
    pub const TOTAL_CYCLES: ProfileSource = ProfileSource(0x13);
    /// `ProfileIcacheIssues`.
    pub const ICACHE_ISSUES: ProfileSource = ProfileSource(0x14);
    /// `ProfileDcacheAccesses`.
    pub const DCACHE_ACCESSES: ProfileSource = ProfileSource(0x15);
    /// `ProfileMemoryBarrierCycles`.
    pub const MEMORY_BARRIER_CYCLES: ProfileSource = ProfileSource(0x16);
    /// `ProfileLoadLinkedIssues`.
    pub const LOAD_LINKED_ISSUES: ProfileSource = ProfileSource(0x17);
    /// `ProfileMaximum`: the first value that is not a generic source; processor-specific
    /// sources start here.
    pub const MAXIMUM: ProfileSource = ProfileSource(0x18);
}

/// Windows 10's default `ProfileTime` interval: 39063 x 100 ns (about 3.9 ms).
pub const DEFAULT_TIME_INTERVAL: u32 = 39_063;
/// The smallest `ProfileTime` interval hvprof accepts: 1000 x 100 ns = 100 µs (10 kHz), the same
/// floor as ReactOS' APIC HAL. Set requests below it are clamped up to it.
pub const MIN_TIME_INTERVAL: u32 = 1_000;
/// The largest `ProfileTime` interval hvprof accepts: 10,000,000 x 100 ns = 1 s.
pub const MAX_TIME_INTERVAL: u32 = 10_000_000;

/// A profile source the platform supports, with its interval clamp and default.
///
/// The interval unit is the source's own: 100 ns for [`ProfileSource::TIME`], events for PMU
/// sources. `min_interval <= default_interval <= max_interval` must hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SourceInfo {
    /// The source.
    pub source: ProfileSource,
    /// The smallest interval; set requests below it are raised to it.
    pub min_interval: u32,
    /// The largest interval; set requests above it are lowered to it.
    pub max_interval: u32,
    /// The interval in force until the guest sets one.
    pub default_interval: u32,
}

impl SourceInfo {
    /// The timer source every platform has: clamp [1000, 10,000,000] (100 ns units), default
    /// 39063 as on Windows 10.
    pub const fn profile_time() -> SourceInfo {
        SourceInfo {
            source: ProfileSource::TIME,
            min_interval: MIN_TIME_INTERVAL,
            max_interval: MAX_TIME_INTERVAL,
            default_interval: DEFAULT_TIME_INTERVAL,
        }
    }

    /// `interval` clamped into `[min_interval, max_interval]`.
    pub const fn clamp(&self, interval: u32) -> u32 {
        if interval < self.min_interval {
            self.min_interval
        } else if interval > self.max_interval {
            self.max_interval
        } else {
            interval
        }
    }
}
