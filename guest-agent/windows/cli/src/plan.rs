//! From "what to profile" to the driver's requests: buckets, buffer size, the CREATE input.

use std::fmt;

use hvprof_ioctl::abi::MAX_PAGE_COUNT;
use hvprof_ioctl::messages::{CreateIn, HandleRequest, QueryIntervalRequest, SetIntervalIn};

/// A resolved address range to profile.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Region {
    /// What it is: a module name, or `range`.
    pub name: String,
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// 0: every process; else the profiled process.
    pub process_id: u32,
}

/// A profile ready to create.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Plan {
    /// The range.
    pub region: Region,
    /// log2 of the bytes per counter.
    pub bucket_shift: u32,
    /// KPROFILE_SOURCE.
    pub source: u32,
    /// Counters.
    pub buckets: usize,
}

/// Why a region cannot be profiled as asked.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PlanError {
    /// The region is empty.
    Empty,
    /// `base + size` wraps.
    Wraps,
    /// The counters would need more than the driver can lock in one buffer.
    TooManyBuckets {
        /// Counters needed.
        buckets: u64,
        /// The smallest bucket shift that fits.
        min_shift: u32,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Empty => write!(f, "the region is empty"),
            PlanError::Wraps => write!(f, "the region wraps past the end of the address space"),
            PlanError::TooManyBuckets { buckets, min_shift } => write!(
                f,
                "{} counters do not fit in one buffer; use --bucket {} or more",
                buckets, min_shift
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// The largest buffer: what one page list carries (256 MiB at a page offset of 0).
pub const MAX_BUFFER_BYTES: u64 = (MAX_PAGE_COUNT as u64 - 1) * 4096;

/// Counters for `size` bytes in `1 << shift`-byte buckets.
pub const fn buckets_for(size: u64, shift: u32) -> u64 {
    if size == 0 {
        0
    } else {
        ((size - 1) >> shift) + 1
    }
}

/// Plans a profile of `region`.
pub fn plan(region: Region, bucket_shift: u32, source: u32) -> Result<Plan, PlanError> {
    if region.size == 0 {
        return Err(PlanError::Empty);
    }
    if region.base.checked_add(region.size).is_none() {
        return Err(PlanError::Wraps);
    }
    let buckets = buckets_for(region.size, bucket_shift);
    if buckets * 4 > MAX_BUFFER_BYTES {
        let min_shift = (bucket_shift..32)
            .find(|&s| buckets_for(region.size, s) * 4 <= MAX_BUFFER_BYTES)
            .unwrap_or(31);
        return Err(PlanError::TooManyBuckets { buckets, min_shift });
    }
    let buckets = usize::try_from(buckets).map_err(|_| PlanError::TooManyBuckets {
        buckets,
        min_shift: 31,
    })?;
    Ok(Plan {
        region,
        bucket_shift,
        source,
        buckets,
    })
}

impl Plan {
    /// Bytes of the counters buffer.
    pub fn buffer_size(&self) -> u32 {
        // At most MAX_BUFFER_BYTES (checked in `plan`).
        u32::try_from(self.buckets * 4).unwrap_or(u32::MAX)
    }

    /// IOCTL_HVPROF_CREATE's input for counters at `buffer` (the agent's own memory), on every
    /// processor of group 0.
    pub fn create_in(&self, buffer: u64) -> CreateIn {
        CreateIn {
            process_id: u64::from(self.region.process_id),
            base: self.region.base,
            size: self.region.size,
            buffer,
            buffer_size: self.buffer_size(),
            bucket_size: self.bucket_shift,
            source: self.source,
            flags: 0,
            group: 0,
            reserved0: 0,
            reserved1: 0,
            affinity: u64::MAX,
        }
    }
}

/// START, STOP and CLOSE's input.
pub fn handle_in(handle: u32) -> HandleRequest {
    HandleRequest {
        handle,
        reserved: 0,
    }
}

/// SET_INTERVAL's input.
pub fn set_interval_in(source: u32, interval: u32) -> SetIntervalIn {
    SetIntervalIn { source, interval }
}

/// QUERY_INTERVAL's input.
pub fn query_interval_in(source: u32) -> QueryIntervalRequest {
    QueryIntervalRequest {
        source,
        reserved: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: u64, size: u64) -> Region {
        Region {
            name: "ntoskrnl.exe".into(),
            base,
            size,
            process_id: 0,
        }
    }

    #[test]
    fn a_kernel_module_in_16_byte_buckets() {
        let p = plan(region(0xFFFF_F800_1240_0000, 0x104_6000), 4, 0).unwrap();
        assert_eq!(p.buckets, 0x10_4600);
        assert_eq!(p.buffer_size(), 0x41_1800);
        let c = p.create_in(0x2000_0000);
        assert_eq!(c.base, 0xFFFF_F800_1240_0000);
        assert_eq!(c.size, 0x104_6000);
        assert_eq!(c.buffer, 0x2000_0000);
        assert_eq!(c.buffer_size, 0x41_1800);
        assert_eq!(c.bucket_size, 4);
        assert_eq!(c.process_id, 0);
        assert_eq!(c.affinity, u64::MAX);
        assert_eq!((c.flags, c.reserved0, c.reserved1), (0, 0, 0));
    }

    #[test]
    fn buffer_size_matches_the_vmm_rule() {
        // The VMM needs ((size - 1) >> shift) + 1 counters (docs/abi.md 6.2 step 3).
        for (size, shift, buckets) in [
            (1, 2, 1),
            (4, 2, 1),
            (5, 2, 2),
            (0x1000, 12, 1),
            (0x1001, 12, 2),
        ] {
            let p = plan(region(0x1000, size), shift, 0).unwrap();
            assert_eq!(p.buckets, buckets, "{} {}", size, shift);
            assert_eq!(u64::from(p.buffer_size()), 4 * buckets as u64);
        }
    }

    #[test]
    fn a_per_process_range_carries_the_pid() {
        let r = Region {
            name: "range".into(),
            base: 0x7FF6_1234_0000,
            size: 0x1_0000,
            process_id: 1234,
        };
        let c = plan(r, 4, 0x13).unwrap().create_in(0x10_0000);
        assert_eq!(c.process_id, 1234);
        assert_eq!(c.source, 0x13);
    }

    #[test]
    fn too_large_empty_and_wrapping_regions() {
        let e = plan(region(0, 1 << 40), 4, 0).unwrap_err();
        assert_eq!(
            e,
            PlanError::TooManyBuckets {
                buckets: 1 << 36,
                min_shift: 14
            }
        );
        assert!(e.to_string().contains("--bucket 14"));
        assert!(plan(region(0, 1 << 40), 14, 0).is_ok());
        assert_eq!(plan(region(0, 0), 4, 0), Err(PlanError::Empty));
        assert_eq!(plan(region(u64::MAX, 2), 4, 0), Err(PlanError::Wraps));
    }

    #[test]
    fn small_requests() {
        assert_eq!(handle_in(8).handle, 8);
        assert_eq!(set_interval_in(0, 1000).interval, 1000);
        assert_eq!(query_interval_in(3).source, 3);
    }
}
