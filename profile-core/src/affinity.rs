//! Processor affinity: `KAFFINITY`, `GROUP_AFFINITY` and the resolved set of processors a
//! profile object samples on.
//!
//! hvprof numbers processors as Windows numbers them within groups of 64: vCPU index `v` is
//! processor number `v % 64` of group `v / 64`. The active processors are vCPUs
//! `0..active_processors`.

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

#[cfg(feature = "alloc")]
use crate::NtStatus;

/// `KAFFINITY`: one bit per processor of a group. [`KAFFINITY_ALL`] (-1) stands for every
/// active processor of the group.
pub type KAffinity = u64;

/// The `KAFFINITY` value -1: all active processors of the group.
pub const KAFFINITY_ALL: KAffinity = u64::MAX;

/// Processors per group, as on 64-bit Windows.
pub const PROCESSORS_PER_GROUP: u32 = 64;

/// The most processor groups hvprof supports (2048 vCPUs).
pub const MAX_GROUPS: u16 = 32;

/// `GROUP_AFFINITY`, laid out as Windows lays it out (16 bytes): a mask, a group number and
/// three reserved `USHORT`s that must be zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(C)]
pub struct GroupAffinity {
    /// The processors of the group.
    pub mask: KAffinity,
    /// The group number.
    pub group: u16,
    /// Must be zero.
    pub reserved: [u16; 3],
}

const _: () = assert!(core::mem::size_of::<GroupAffinity>() == 16);

impl GroupAffinity {
    /// A group affinity with zero reserved fields.
    pub const fn new(group: u16, mask: KAffinity) -> GroupAffinity {
        GroupAffinity {
            mask,
            group,
            reserved: [0; 3],
        }
    }
}

/// The number of groups `active_processors` processors fill.
pub const fn group_count(active_processors: u32) -> u32 {
    (active_processors + PROCESSORS_PER_GROUP - 1) / PROCESSORS_PER_GROUP
}

/// The mask of active processors in `group` (0 for a group that has none).
pub const fn active_mask(group: u32, active_processors: u32) -> KAffinity {
    let first = group as u64 * PROCESSORS_PER_GROUP as u64;
    let total = active_processors as u64;
    if first >= total {
        0
    } else if total - first >= 64 {
        u64::MAX
    } else {
        (1u64 << (total - first)) - 1
    }
}

/// A resolved, validated set of processors.
///
/// Group 0 is held inline so the common membership test touches no other memory.
#[cfg(feature = "alloc")]
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProcessorSet {
    group0: KAffinity,
    /// Masks of groups 1, 2, ... (index `g - 1`); empty for guests with at most 64 vCPUs.
    higher: Vec<KAffinity>,
}

#[cfg(feature = "alloc")]
impl ProcessorSet {
    /// Every active processor.
    pub fn all_active(active_processors: u32) -> ProcessorSet {
        let groups = group_count(active_processors);
        ProcessorSet {
            group0: active_mask(0, active_processors),
            higher: (1..groups)
                .map(|g| active_mask(g, active_processors))
                .collect(),
        }
    }

    /// NtCreateProfile's rule: one `KAFFINITY` for the caller's current `group`;
    /// [`KAFFINITY_ALL`] means all active processors of that group.
    pub fn from_kaffinity(
        group: u16,
        affinity: KAffinity,
        active_processors: u32,
    ) -> Result<ProcessorSet, NtStatus> {
        let mask = if affinity == KAFFINITY_ALL {
            active_mask(u32::from(group), active_processors)
        } else {
            affinity
        };
        Self::from_groups(&[GroupAffinity::new(group, mask)], active_processors)
    }

    /// NtCreateProfileEx's rule: an empty array means all active processors; otherwise every
    /// element must name an existing group, have a non-empty mask of active processors only and
    /// zero reserved fields, else `STATUS_INVALID_PARAMETER`. Masks of repeated groups combine.
    pub fn from_groups(
        groups: &[GroupAffinity],
        active_processors: u32,
    ) -> Result<ProcessorSet, NtStatus> {
        Self::from_group_iter(groups.iter().copied(), active_processors)
    }

    /// [`ProcessorSet::from_groups`] over any sequence (the ABI decoder yields one).
    pub fn from_group_iter<I: IntoIterator<Item = GroupAffinity>>(
        groups: I,
        active_processors: u32,
    ) -> Result<ProcessorSet, NtStatus> {
        let mut set = ProcessorSet {
            group0: 0,
            higher: Vec::new(),
        };
        let mut any = false;
        let groups_present = group_count(active_processors);
        for g in groups {
            any = true;
            let group = u32::from(g.group);
            let active = active_mask(group, active_processors);
            if group >= groups_present
                || g.mask == 0
                || g.mask & !active != 0
                || g.reserved != [0; 3]
            {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            set.add(group, g.mask);
        }
        if any {
            Ok(set)
        } else {
            Ok(Self::all_active(active_processors))
        }
    }

    fn add(&mut self, group: u32, mask: KAffinity) {
        if group == 0 {
            self.group0 |= mask;
            return;
        }
        let idx = (group - 1) as usize;
        if self.higher.len() <= idx {
            self.higher.resize(idx + 1, 0);
        }
        self.higher[idx] |= mask;
    }

    /// The group-0 mask (vCPUs 0..64).
    pub fn group0(&self) -> KAffinity {
        self.group0
    }

    /// True if the set has processors beyond group 0.
    pub fn has_higher_groups(&self) -> bool {
        self.higher.iter().any(|&m| m != 0)
    }

    /// True if vCPU `vcpu` is in the set.
    #[inline]
    pub fn contains(&self, vcpu: u32) -> bool {
        if vcpu < PROCESSORS_PER_GROUP {
            return self.group0 >> vcpu & 1 != 0;
        }
        let idx = (vcpu / PROCESSORS_PER_GROUP - 1) as usize;
        match self.higher.get(idx) {
            Some(mask) => mask >> (vcpu % PROCESSORS_PER_GROUP) & 1 != 0,
            None => false,
        }
    }

    /// The vCPUs in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let masks = core::iter::once(self.group0).chain(self.higher.iter().copied());
        (0u32..).zip(masks).flat_map(|(g, mask)| {
            (0..PROCESSORS_PER_GROUP)
                .filter(move |bit| mask >> bit & 1 != 0)
                .map(move |bit| g * PROCESSORS_PER_GROUP + bit)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn active_mask_covers_partial_and_full_groups() {
        assert_eq!(active_mask(0, 4), 0xF);
        assert_eq!(active_mask(0, 64), u64::MAX);
        assert_eq!(active_mask(1, 65), 1);
        assert_eq!(active_mask(2, 65), 0);
        assert_eq!(group_count(65), 2);
    }

    #[test]
    fn kaffinity_minus_one_means_all_active_processors() {
        let set = ProcessorSet::from_kaffinity(0, KAFFINITY_ALL, 4).unwrap();
        assert_eq!(set, ProcessorSet::all_active(4));
        assert_eq!(set.iter().collect::<alloc::vec::Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn kaffinity_empty_mask_is_invalid_parameter() {
        assert_eq!(
            ProcessorSet::from_kaffinity(0, 0, 4),
            Err(NtStatus::INVALID_PARAMETER)
        );
    }

    #[test]
    fn kaffinity_inactive_processor_is_invalid_parameter() {
        assert_eq!(
            ProcessorSet::from_kaffinity(0, 0x10, 4),
            Err(NtStatus::INVALID_PARAMETER)
        );
    }

    #[test]
    fn group_affinity_rules() {
        let n = 70;
        assert_eq!(
            ProcessorSet::from_groups(&[], n),
            Ok(ProcessorSet::all_active(n))
        );
        let bad_group = [GroupAffinity::new(2, 1)];
        assert_eq!(
            ProcessorSet::from_groups(&bad_group, n),
            Err(NtStatus::INVALID_PARAMETER)
        );
        let mut reserved = GroupAffinity::new(0, 1);
        reserved.reserved[1] = 1;
        assert_eq!(
            ProcessorSet::from_groups(&[reserved], n),
            Err(NtStatus::INVALID_PARAMETER)
        );
        let set =
            ProcessorSet::from_groups(&[GroupAffinity::new(1, 0b100), GroupAffinity::new(0, 1)], n)
                .unwrap();
        assert!(set.contains(0) && set.contains(66));
        assert!(!set.contains(1) && !set.contains(64) && !set.contains(1000));
    }
}
