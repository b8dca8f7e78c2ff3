//! KPROFILE_SOURCE names (nt-profile-semantics.md) for arguments and reports.

/// Names of sources 0..=0x18, in order.
pub const NAMES: [&str; 25] = [
    "Time",
    "AlignmentFixup",
    "TotalIssues",
    "PipelineDry",
    "LoadInstructions",
    "PipelineFrozen",
    "BranchInstructions",
    "TotalNonissues",
    "DcacheMisses",
    "IcacheMisses",
    "CacheMisses",
    "BranchMispredictions",
    "StoreInstructions",
    "FpInstructions",
    "IntegerInstructions",
    "2Issue",
    "3Issue",
    "4Issue",
    "SpecialInstructions",
    "TotalCycles",
    "IcacheIssues",
    "DcacheAccesses",
    "MemoryBarrierCycles",
    "LoadLinkedIssues",
    "ProfileMaximum",
];

/// The name of `source` (`Profile` + name), or `Source0x..` for processor-specific ones.
pub fn name(source: u32) -> String {
    usize::try_from(source)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(
            || format!("Source{:#x}", source),
            |n| format!("Profile{}", n),
        )
}

/// A source by number (decimal or 0x hex) or by name, with or without the `Profile` prefix,
/// in any case.
pub fn parse(text: &str) -> Option<u32> {
    if let Some(n) = crate::number::parse_u64(text) {
        return u32::try_from(n).ok();
    }
    let lower = text.to_ascii_lowercase();
    let bare = lower.strip_prefix("profile").unwrap_or(&lower);
    NAMES
        .iter()
        .position(|n| n.to_ascii_lowercase() == bare)
        .and_then(|i| u32::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_parsing() {
        assert_eq!(name(0), "ProfileTime");
        assert_eq!(name(0x13), "ProfileTotalCycles");
        assert_eq!(name(0x40), "Source0x40");
        assert_eq!(parse("time"), Some(0));
        assert_eq!(parse("ProfileTotalCycles"), Some(0x13));
        assert_eq!(parse("0x13"), Some(0x13));
        assert_eq!(parse("19"), Some(19));
        assert_eq!(parse("cycles"), None);
        assert_eq!(parse("0x100000000"), None);
    }
}
