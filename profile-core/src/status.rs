//! NTSTATUS values: every result the object manager and the hypercall ABI report.

use core::fmt;

/// An NTSTATUS value, bit for bit as Windows defines it.
///
/// The top two bits are the severity (0 success, 1 informational, 2 warning, 3 error). Like
/// Windows' `NT_SUCCESS`, [`NtStatus::is_success`] accepts success and informational values only:
/// `STATUS_BUFFER_OVERFLOW` (a warning) is a failure for the profile calls.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct NtStatus(pub u32);

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        impl NtStatus {
            $($(#[$doc])* pub const $name: NtStatus = NtStatus($value);)*

            /// The Windows name of a status this crate knows (`STATUS_` prefix omitted).
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    /// The operation completed.
    SUCCESS = 0x0000_0000;
    /// The buffer is not aligned as the data type requires (a warning).
    DATATYPE_MISALIGNMENT = 0x8000_0002;
    /// `ProfileBase + ProfileSize` overflows the address space (a warning, still a failure).
    BUFFER_OVERFLOW = 0x8000_0005;
    /// The requested operation is not implemented (the ABI: unknown call number).
    NOT_IMPLEMENTED = 0xC000_0002;
    /// The length given does not match what the operation needs (the ABI: block too short).
    INFO_LENGTH_MISMATCH = 0xC000_0004;
    /// The buffer is not accessible (not mapped or not writable).
    ACCESS_VIOLATION = 0xC000_0005;
    /// The handle does not name an object of this caller.
    INVALID_HANDLE = 0xC000_0008;
    /// A parameter is invalid.
    INVALID_PARAMETER = 0xC000_000D;
    /// The caller lacks the access the operation needs.
    ACCESS_DENIED = 0xC000_0022;
    /// The buffer is too small for the profiled range.
    BUFFER_TOO_SMALL = 0xC000_0023;
    /// The handle names an object of another type.
    OBJECT_TYPE_MISMATCH = 0xC000_0024;
    /// The request block's ABI version is not the one the VMM implements.
    REVISION_MISMATCH = 0xC000_0059;
    /// The caller does not hold the privilege the operation needs.
    PRIVILEGE_NOT_HELD = 0xC000_0061;
    /// Resources (here: pinning the buffer) could not be obtained.
    INSUFFICIENT_RESOURCES = 0xC000_009A;
    /// Stop was called on an object that is not started.
    PROFILING_NOT_STARTED = 0xC000_00B7;
    /// Start was called on an object that is already started.
    PROFILING_NOT_STOPPED = 0xC000_00B8;
    /// The profile source is not supported by the platform.
    NOT_SUPPORTED = 0xC000_00BB;
    /// The system-wide limit of started profile objects is reached.
    PROFILING_AT_LIMIT = 0xC000_00D3;
    /// The first parameter is invalid.
    INVALID_PARAMETER_1 = 0xC000_00EF;
    /// The second parameter is invalid.
    INVALID_PARAMETER_2 = 0xC000_00F0;
    /// The third parameter is invalid.
    INVALID_PARAMETER_3 = 0xC000_00F1;
    /// The fourth parameter is invalid.
    INVALID_PARAMETER_4 = 0xC000_00F2;
    /// The fifth parameter is invalid.
    INVALID_PARAMETER_5 = 0xC000_00F3;
    /// The sixth parameter is invalid.
    INVALID_PARAMETER_6 = 0xC000_00F4;
    /// The seventh parameter is invalid (NtCreateProfile: `BufferSize` is zero).
    INVALID_PARAMETER_7 = 0xC000_00F5;
    /// The eighth parameter is invalid.
    INVALID_PARAMETER_8 = 0xC000_00F6;
    /// The ninth parameter is invalid.
    INVALID_PARAMETER_9 = 0xC000_00F7;
    /// The tenth parameter is invalid.
    INVALID_PARAMETER_10 = 0xC000_00F8;
    /// The eleventh parameter is invalid.
    INVALID_PARAMETER_11 = 0xC000_00F9;
    /// The twelfth parameter is invalid.
    INVALID_PARAMETER_12 = 0xC000_00FA;
}

impl NtStatus {
    /// True for success and informational values (Windows' `NT_SUCCESS`).
    pub const fn is_success(self) -> bool {
        self.0 & 0x8000_0000 == 0
    }

    /// `Ok(())` for a success value, else `Err(self)`.
    pub const fn ok(self) -> Result<(), NtStatus> {
        if self.is_success() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The status a `Result` stands for: `SUCCESS` for `Ok`, the error for `Err`.
    pub fn from_result<T>(result: &Result<T, NtStatus>) -> NtStatus {
        match result {
            Ok(_) => NtStatus::SUCCESS,
            Err(status) => *status,
        }
    }
}

impl fmt::Display for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "STATUS_{} ({:#010x})", name, self.0),
            None => write!(f, "NTSTATUS {:#010x}", self.0),
        }
    }
}

impl fmt::Debug for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::NtStatus;
    use alloc::format;

    #[test]
    fn success_and_warning_classification() {
        assert!(NtStatus::SUCCESS.is_success());
        assert!(!NtStatus::BUFFER_OVERFLOW.is_success());
        assert!(!NtStatus::DATATYPE_MISALIGNMENT.is_success());
        assert!(!NtStatus::INVALID_PARAMETER.is_success());
        assert_eq!(NtStatus::SUCCESS.ok(), Ok(()));
        assert_eq!(NtStatus::NOT_SUPPORTED.ok(), Err(NtStatus::NOT_SUPPORTED));
    }

    #[test]
    fn values_match_windows() {
        assert_eq!(NtStatus::INVALID_PARAMETER_7.0, 0xC000_00F5);
        assert_eq!(NtStatus::INVALID_PARAMETER_12.0, 0xC000_00FA);
        assert_eq!(NtStatus::PROFILING_AT_LIMIT.0, 0xC000_00D3);
    }

    #[test]
    fn display_names_known_values_and_hex_for_others() {
        assert_eq!(
            format!("{}", NtStatus::BUFFER_TOO_SMALL),
            "STATUS_BUFFER_TOO_SMALL (0xc0000023)"
        );
        assert_eq!(format!("{}", NtStatus(0xC000_1234)), "NTSTATUS 0xc0001234");
    }
}
