//! NTSTATUS values as the agent prints them: the session's errors ([`crate::session`]) and
//! the Windows side's messages ([`crate::windows`]) name a driver's status the same way.

use hvprof_ioctl::NtStatus;

/// Text for an NTSTATUS: `0xC00000B8 (STATUS_PROFILING_NOT_STOPPED)`.
pub fn text(status: NtStatus) -> String {
    match status.name() {
        Some(name) => format!("{:#010X} (STATUS_{})", status.0, name),
        None => format!("{:#010X}", status.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_statuses_are_named() {
        assert_eq!(
            text(NtStatus::PROFILING_NOT_STOPPED),
            "0xC00000B8 (STATUS_PROFILING_NOT_STOPPED)"
        );
        assert_eq!(text(NtStatus(0xC000_1234)), "0xC0001234");
    }
}
