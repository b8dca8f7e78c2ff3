//! Names and control codes of the `\\.\HvProf` device.

/// The ACPI `_HID` of the hvprof device in the DSDT (docs/windows.md). The INF matches
/// `ACPI\HVPR0001`.
pub const ACPI_HID: &str = "HVPR0001";

/// The control device's NT name.
pub const DEVICE_NAME: &str = "\\Device\\HvProf";
/// The symbolic link the driver creates for it.
pub const DOS_DEVICE_NAME: &str = "\\DosDevices\\HvProf";
/// The path user mode opens.
pub const USER_PATH: &str = "\\\\.\\HvProf";

/// The device type of `\\.\HvProf` (vendor range 0x8000..=0xFFFF).
pub const FILE_DEVICE_HVPROF: u32 = 0x8A50;

/// `METHOD_BUFFERED`: the I/O manager copies input and output through a system buffer.
pub const METHOD_BUFFERED: u32 = 0;
/// `FILE_ANY_ACCESS`.
pub const FILE_ANY_ACCESS: u32 = 0;
/// `FILE_READ_DATA | FILE_WRITE_DATA`: the handle must be open for reading and writing.
pub const FILE_READ_WRITE_DATA: u32 = 3;

/// Windows' `CTL_CODE` macro.
pub const fn ctl_code(device_type: u32, function: u32, method: u32, access: u32) -> u32 {
    (device_type << 16) | (access << 14) | (function << 2) | method
}

const fn code(function: u32, access: u32) -> u32 {
    ctl_code(FILE_DEVICE_HVPROF, function, METHOD_BUFFERED, access)
}

/// Driver and VMM information (`QueryInfoOut`). `0x8A502000`.
pub const IOCTL_HVPROF_QUERY_INFO: u32 = code(0x800, FILE_ANY_ACCESS);
/// NtCreateProfile (`CreateIn` -> `CreateReply`). `0x8A50E004`.
pub const IOCTL_HVPROF_CREATE: u32 = code(0x801, FILE_READ_WRITE_DATA);
/// NtCreateProfileEx (`CreateExIn` + `GROUP_AFFINITY[n]` -> `CreateReply`). `0x8A50E008`.
pub const IOCTL_HVPROF_CREATE_EX: u32 = code(0x802, FILE_READ_WRITE_DATA);
/// NtStartProfile (`HandleRequest` -> `StartReply`). `0x8A50E00C`.
pub const IOCTL_HVPROF_START: u32 = code(0x803, FILE_READ_WRITE_DATA);
/// NtStopProfile (`HandleRequest`). `0x8A50E010`.
pub const IOCTL_HVPROF_STOP: u32 = code(0x804, FILE_READ_WRITE_DATA);
/// Close a profile handle (`HandleRequest`). `0x8A50E014`.
pub const IOCTL_HVPROF_CLOSE: u32 = code(0x805, FILE_READ_WRITE_DATA);
/// NtSetIntervalProfile (`SetIntervalIn` -> `IntervalReply`). `0x8A50E018`.
pub const IOCTL_HVPROF_SET_INTERVAL: u32 = code(0x806, FILE_READ_WRITE_DATA);
/// NtQueryIntervalProfile (`QueryIntervalRequest` -> `IntervalReply`). `0x8A50201C`.
pub const IOCTL_HVPROF_QUERY_INTERVAL: u32 = code(0x807, FILE_ANY_ACCESS);
/// hvprof's sampling statistics (-> `StatsReply`). `0x8A502020`.
pub const IOCTL_HVPROF_READ_STATS: u32 = code(0x808, FILE_ANY_ACCESS);

/// Every control code with its name, for diagnostics and docs.
pub const ALL: [(u32, &str); 9] = [
    (IOCTL_HVPROF_QUERY_INFO, "QUERY_INFO"),
    (IOCTL_HVPROF_CREATE, "CREATE"),
    (IOCTL_HVPROF_CREATE_EX, "CREATE_EX"),
    (IOCTL_HVPROF_START, "START"),
    (IOCTL_HVPROF_STOP, "STOP"),
    (IOCTL_HVPROF_CLOSE, "CLOSE"),
    (IOCTL_HVPROF_SET_INTERVAL, "SET_INTERVAL"),
    (IOCTL_HVPROF_QUERY_INTERVAL, "QUERY_INTERVAL"),
    (IOCTL_HVPROF_READ_STATS, "READ_STATS"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_documented_values() {
        // The values docs/windows.md lists; a change here is an interface change.
        assert_eq!(IOCTL_HVPROF_QUERY_INFO, 0x8A50_2000);
        assert_eq!(IOCTL_HVPROF_CREATE, 0x8A50_E004);
        assert_eq!(IOCTL_HVPROF_CREATE_EX, 0x8A50_E008);
        assert_eq!(IOCTL_HVPROF_START, 0x8A50_E00C);
        assert_eq!(IOCTL_HVPROF_STOP, 0x8A50_E010);
        assert_eq!(IOCTL_HVPROF_CLOSE, 0x8A50_E014);
        assert_eq!(IOCTL_HVPROF_SET_INTERVAL, 0x8A50_E018);
        assert_eq!(IOCTL_HVPROF_QUERY_INTERVAL, 0x8A50_201C);
        assert_eq!(IOCTL_HVPROF_READ_STATS, 0x8A50_2020);
    }

    #[test]
    fn codes_are_buffered_and_distinct() {
        for (i, (a, _)) in ALL.iter().enumerate() {
            assert_eq!(a & 3, METHOD_BUFFERED);
            assert_eq!(a >> 16, FILE_DEVICE_HVPROF);
            for (b, _) in &ALL[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn ctl_code_matches_a_known_windows_code() {
        // IOCTL_DISK_GET_DRIVE_GEOMETRY = CTL_CODE(FILE_DEVICE_DISK 7, 0, BUFFERED, ANY).
        assert_eq!(ctl_code(7, 0, 0, 0), 0x0007_0000);
        // FSCTL_GET_RETRIEVAL_POINTERS = CTL_CODE(9, 28, METHOD_NEITHER 3, ANY).
        assert_eq!(ctl_code(9, 28, 3, 0), 0x0009_0073);
    }
}
