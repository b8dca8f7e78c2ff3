//! What can go wrong in a call, and the NTSTATUS a driver returns for it.

use core::fmt;

use profile_core::NtStatus;

/// A failed call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Error {
    /// The VMM ran the call and answered this failure status.
    Status(NtStatus),
    /// The VMM did not write the block; this is the vCPU's last status read back from the
    /// doorbell (`base + 4`): `STATUS_ACCESS_DENIED` from CPL > 0, `STATUS_ACCESS_VIOLATION`
    /// for a block outside RAM, `0xFFFFFFFF` when no device answers the port.
    NotAnswered(u32),
    /// CPUID does not report hvprof.
    NotPresent,
    /// hvprof reports an ABI version this library does not speak.
    UnsupportedVersion(u32),
    /// The VMM does not offer an optional call (a `FEATURE_*` bit of `abi::cpuid`).
    FeatureMissing(u32),
    /// The scratch block is not 8-byte aligned.
    ScratchMisaligned,
    /// The scratch block cannot hold this request (bytes needed).
    ScratchTooSmall(usize),
    /// The scratch block is not guest-physically contiguous.
    ScratchNotContiguous,
    /// [`crate::PhysicalMemory`] could not translate this virtual address.
    NotMapped(u64),
    /// A caller argument the ABI cannot carry (for example a page list longer than the caller's
    /// frame array, or more than `MAX_PAGE_COUNT` pages).
    InvalidArgument,
}

impl Error {
    /// The NTSTATUS a driver returns to its caller for this error: the VMM's own status
    /// unchanged; otherwise the closest Windows status.
    pub fn status(&self) -> NtStatus {
        match *self {
            Error::Status(s) => s,
            Error::NotAnswered(raw) if raw != u32::MAX && raw != 0 => NtStatus(raw),
            Error::NotAnswered(_) | Error::NotPresent => NtStatus::NOT_SUPPORTED,
            Error::UnsupportedVersion(_) => NtStatus::REVISION_MISMATCH,
            Error::FeatureMissing(_) => NtStatus::NOT_IMPLEMENTED,
            Error::ScratchMisaligned => NtStatus::DATATYPE_MISALIGNMENT,
            Error::ScratchTooSmall(_) => NtStatus::BUFFER_TOO_SMALL,
            Error::ScratchNotContiguous | Error::InvalidArgument => NtStatus::INVALID_PARAMETER,
            Error::NotMapped(_) => NtStatus::ACCESS_VIOLATION,
        }
    }
}

impl From<NtStatus> for Error {
    fn from(status: NtStatus) -> Error {
        Error::Status(status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Status(s) => write!(f, "hvprof answered {}", s),
            Error::NotAnswered(raw) => {
                write!(
                    f,
                    "hvprof did not answer the block (last status {:#010x})",
                    raw
                )
            }
            Error::NotPresent => write!(f, "hvprof is not present (no CPUID signature)"),
            Error::UnsupportedVersion(v) => write!(f, "hvprof ABI version {} is not 1", v),
            Error::FeatureMissing(bit) => write!(f, "hvprof lacks feature {:#x}", bit),
            Error::ScratchMisaligned => write!(f, "scratch block is not 8-byte aligned"),
            Error::ScratchTooSmall(n) => write!(f, "scratch block needs {} bytes", n),
            Error::ScratchNotContiguous => write!(f, "scratch block is not physically contiguous"),
            Error::NotMapped(va) => write!(f, "virtual address {:#x} has no physical page", va),
            Error::InvalidArgument => write!(f, "argument out of the ABI's range"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmm_statuses_pass_through_unchanged() {
        for s in [
            NtStatus::PROFILING_AT_LIMIT,
            NtStatus::BUFFER_OVERFLOW,
            NtStatus::INVALID_PARAMETER_7,
        ] {
            assert_eq!(Error::Status(s).status(), s);
            assert_eq!(Error::from(s), Error::Status(s));
        }
    }

    #[test]
    fn doorbell_level_statuses_map_to_themselves_and_silence_to_not_supported() {
        assert_eq!(
            Error::NotAnswered(0xC000_0022).status(),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            Error::NotAnswered(u32::MAX).status(),
            NtStatus::NOT_SUPPORTED
        );
        assert_eq!(Error::NotAnswered(0).status(), NtStatus::NOT_SUPPORTED);
    }

    #[test]
    fn local_errors_map_to_windows_statuses() {
        assert_eq!(Error::NotPresent.status(), NtStatus::NOT_SUPPORTED);
        assert_eq!(
            Error::UnsupportedVersion(2).status(),
            NtStatus::REVISION_MISMATCH
        );
        assert_eq!(Error::FeatureMissing(2).status(), NtStatus::NOT_IMPLEMENTED);
        assert_eq!(
            Error::ScratchMisaligned.status(),
            NtStatus::DATATYPE_MISALIGNMENT
        );
        assert_eq!(
            Error::ScratchTooSmall(64).status(),
            NtStatus::BUFFER_TOO_SMALL
        );
        assert_eq!(
            Error::ScratchNotContiguous.status(),
            NtStatus::INVALID_PARAMETER
        );
        assert_eq!(Error::InvalidArgument.status(), NtStatus::INVALID_PARAMETER);
        assert_eq!(
            Error::NotMapped(0x1000).status(),
            NtStatus::ACCESS_VIOLATION
        );
    }
}
