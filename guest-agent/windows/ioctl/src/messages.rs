//! The METHOD_BUFFERED input and output of every IOCTL. Little-endian, no implicit padding;
//! where an IOCTL carries an ABI body unchanged (handles, intervals, replies), the ABI's own
//! type is used.
//!
//! | IOCTL | input | output |
//! |---|---|---|
//! | QUERY_INFO | none | [`DriverInfo`] (8) + `InfoReply` (40) |
//! | CREATE | [`CreateIn`] (64) | `CreateReply` (16) |
//! | CREATE_EX | [`CreateExIn`] (56) + 16 x `group_count` | `CreateReply` (16) |
//! | START | `HandleRequest` (8) | `StartReply` (8) |
//! | STOP, CLOSE | `HandleRequest` (8) | none |
//! | SET_INTERVAL | [`SetIntervalIn`] (8) | `IntervalReply` (8) |
//! | QUERY_INTERVAL | `QueryIntervalRequest` (8) | `IntervalReply` (8) |
//! | READ_STATS | none | `StatsReply` (48) |

pub use profile_core::abi::wire::Wire;
pub use profile_core::abi::{
    CreateReply, HandleRequest, InfoReply, IntervalReply, QueryIntervalRequest, StartReply,
    StatsReply,
};
pub use profile_core::affinity::GroupAffinity;

/// Version of this IOCTL interface ([`DriverInfo::interface_version`]).
pub const INTERFACE_VERSION: u32 = 1;

/// Where the driver found the doorbell ([`DriverInfo::port_source`]).
pub mod port_source {
    /// Not found: hvprof does not answer.
    pub const NONE: u16 = 0;
    /// The I/O resource of the ACPI device `HVPR0001` (PnP start).
    pub const ACPI: u16 = 1;
    /// CPUID leaf 0x40000101.
    pub const CPUID: u16 = 2;
    /// The documented default port 0x6A0, answering the doorbell magic.
    pub const DEFAULT: u16 = 3;
}

profile_core::wire_struct! {
    /// The first 8 bytes of QUERY_INFO's output; the VMM's `InfoReply` follows.
    pub struct DriverInfo(8) {
        /// The doorbell's first port.
        pub port: u16,
        /// A [`port_source`] value.
        pub port_source: u16,
        /// [`INTERFACE_VERSION`].
        pub interface_version: u32,
    }
}

profile_core::wire_struct! {
    /// CREATE's input: NtCreateProfile's arguments. The driver adds the caller's rights and
    /// resolves `process_id` to the process's address space itself.
    pub struct CreateIn(64) {
        /// 0: every process (a global profile); else the id of the process to profile.
        pub process_id: u64,
        /// `ProfileBase`.
        pub base: u64,
        /// `ProfileSize`.
        pub size: u64,
        /// `Buffer`: the counters, in the caller's address space (user mode).
        pub buffer: u64,
        /// `BufferSize` in bytes.
        pub buffer_size: u32,
        /// `BucketSize`: log2 of the bytes per counter, 2..=31.
        pub bucket_size: u32,
        /// `ProfileSource` (KPROFILE_SOURCE).
        pub source: u32,
        /// Reserved, 0.
        pub flags: u32,
        /// The processor group `affinity` refers to.
        pub group: u16,
        /// Reserved, 0.
        pub reserved0: u16,
        /// Reserved, 0.
        pub reserved1: u32,
        /// `KAFFINITY`; all ones = every active processor of `group`.
        pub affinity: u64,
    }
}

profile_core::wire_struct! {
    /// CREATE_EX's input: NtCreateProfileEx's arguments, followed by `group_count`
    /// 16-byte `GROUP_AFFINITY` elements.
    pub struct CreateExIn(56) {
        /// As [`CreateIn::process_id`].
        pub process_id: u64,
        /// `ProfileBase`.
        pub base: u64,
        /// `ProfileSize`.
        pub size: u64,
        /// `Buffer`.
        pub buffer: u64,
        /// `BufferSize`.
        pub buffer_size: u32,
        /// `BucketSize`.
        pub bucket_size: u32,
        /// `ProfileSource`.
        pub source: u32,
        /// Reserved, 0.
        pub flags: u32,
        /// `GroupCount`: 0 = every active processor, at most 32.
        pub group_count: u16,
        /// Reserved, 0.
        pub reserved0: u16,
        /// Reserved, 0.
        pub reserved1: u32,
    }
}

profile_core::wire_struct! {
    /// SET_INTERVAL's input.
    pub struct SetIntervalIn(8) {
        /// `ProfileSource`.
        pub source: u32,
        /// The interval (ProfileTime: 100 ns units).
        pub interval: u32,
    }
}

/// Bytes of QUERY_INFO's output.
pub const QUERY_INFO_OUT_SIZE: usize = DriverInfo::SIZE + InfoReply::SIZE;

/// Encodes `message` into a new array of `N` bytes (`N` must be its size).
pub fn to_bytes<W: Wire, const N: usize>(message: &W) -> [u8; N] {
    let mut out = [0u8; N];
    let _ = message.encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_in_layout_is_the_documented_one() {
        let c = CreateIn {
            process_id: 0x1234,
            base: 0xFFFF_F800_0000_0000,
            size: 0x20_0000,
            buffer: 0x1F_0000,
            buffer_size: 0x800,
            bucket_size: 12,
            source: 0,
            flags: 0,
            group: 1,
            reserved0: 0,
            reserved1: 0,
            affinity: 3,
        };
        let b: [u8; 64] = to_bytes(&c);
        assert_eq!(&b[0..8], &0x1234u64.to_le_bytes());
        assert_eq!(&b[8..16], &0xFFFF_F800_0000_0000u64.to_le_bytes());
        assert_eq!(&b[32..36], &0x800u32.to_le_bytes());
        assert_eq!(&b[36..40], &12u32.to_le_bytes());
        assert_eq!(&b[48..50], &1u16.to_le_bytes());
        assert_eq!(&b[56..64], &3u64.to_le_bytes());
        assert_eq!(CreateIn::decode(&b), Some(c));
        assert_eq!(CreateIn::decode(&b[..63]), None);
    }

    #[test]
    fn create_ex_in_and_small_messages_round_trip() {
        let c = CreateExIn {
            group_count: 2,
            buffer_size: 4,
            ..CreateExIn::default()
        };
        let b: [u8; 56] = to_bytes(&c);
        assert_eq!(&b[48..50], &2u16.to_le_bytes());
        assert_eq!(CreateExIn::decode(&b), Some(c));
        let s = SetIntervalIn {
            source: 0,
            interval: 10_000,
        };
        assert_eq!(SetIntervalIn::decode(&to_bytes::<_, 8>(&s)), Some(s));
        let d = DriverInfo {
            port: 0x6A0,
            port_source: port_source::ACPI,
            interface_version: INTERFACE_VERSION,
        };
        let b: [u8; 8] = to_bytes(&d);
        assert_eq!(b, [0xA0, 0x06, 1, 0, 1, 0, 0, 0]);
        assert_eq!(QUERY_INFO_OUT_SIZE, 48);
    }
}
