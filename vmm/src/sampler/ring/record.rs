//! The records of a perf ring buffer, parsed from bytes the kernel wrote: bounded and checked,
//! never trusting a size field. The events hvprof opens for its in-kernel sampler sample
//! `PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TIME`, so a sample's body is three
//! u64s: the event's id, the sampled instruction pointer and the time. A lost-records record
//! says how many samples the kernel dropped because the ring was full.
//!
//! The bytes arrive already unwrapped (the ring's reader copies them out in order), so a
//! record is a plain slice here.

/// `perf_event_header.type` of a sample.
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `perf_event_header.type` of a lost-records notice.
pub const PERF_RECORD_LOST: u32 = 2;
/// The bits of `misc` that say where the sample was taken.
const CPUMODE_MASK: u16 = 7;
/// `misc`: the guest's kernel mode (the guest's CPL 0).
pub const MISC_GUEST_KERNEL: u16 = 4;
/// `misc`: the guest's user mode (the guest's CPL 3).
pub const MISC_GUEST_USER: u16 = 5;
/// A record's header: type (u32), misc (u16), size (u16, header included).
const HEADER: usize = 8;
/// A sample's body: id, ip, time.
const SAMPLE_BODY: usize = 24;
/// A lost notice's body: id, count.
const LOST_BODY: usize = 16;

/// Where a sample found its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In the guest, at the privilege level `cpl` (0 for the guest's kernel, 3 for user).
    Guest {
        /// 0 or 3.
        cpl: u8,
    },
    /// In the host: the VMM, the host kernel (an exit, or guest code the host emulates).
    Host,
}

impl Mode {
    /// The mode a sample's `misc` says.
    pub fn of_misc(misc: u16) -> Mode {
        match misc & CPUMODE_MASK {
            MISC_GUEST_KERNEL => Mode::Guest { cpl: 0 },
            MISC_GUEST_USER => Mode::Guest { cpl: 3 },
            _ => Mode::Host,
        }
    }
}

/// One record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// A sample.
    Sample {
        /// The id of the event that took it (PERF_EVENT_IOC_ID).
        id: u64,
        /// The sampled instruction pointer: the guest's RIP for a guest sample.
        ip: u64,
        /// When, on the event's clock (ns).
        time: u64,
        /// Where.
        mode: Mode,
    },
    /// The kernel dropped `count` records of event `id` for want of room.
    Lost {
        /// The event.
        id: u64,
        /// Records dropped.
        count: u64,
    },
    /// Any other record (throttling notices and the like), by type.
    Other(u32),
}

/// Bytes that are not a well-formed sequence of records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A header's size is smaller than a header or not a multiple of 8.
    #[error("a record at byte {at} has size {size}")]
    BadSize {
        /// Offset of the record.
        at: usize,
        /// Its size field.
        size: u16,
    },
    /// A record's size runs past the bytes there are.
    #[error("a record at byte {at} of size {size} runs past the {len} bytes read")]
    Truncated {
        /// Offset of the record.
        at: usize,
        /// Its size field.
        size: u16,
        /// Bytes there are.
        len: usize,
    },
    /// A sample or lost notice shorter than its body.
    #[error("a record of type {kind} at byte {at} is too short for its body")]
    ShortBody {
        /// Offset of the record.
        at: usize,
        /// Its type.
        kind: u32,
    },
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = bytes.get(at..at.saturating_add(8)) {
        b.copy_from_slice(s);
    }
    u64::from_ne_bytes(b)
}

/// Parses `bytes`, a whole number of records as the ring held them, calling `f` for each in
/// order. Stops at the first malformed record and returns its error; the records before it
/// were delivered.
pub fn parse(bytes: &[u8], mut f: impl FnMut(Record)) -> Result<(), RecordError> {
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < HEADER {
            return Err(RecordError::Truncated {
                at,
                size: 0,
                len: bytes.len(),
            });
        }
        let kind = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let misc = u16::from_ne_bytes([rest[4], rest[5]]);
        let size = u16::from_ne_bytes([rest[6], rest[7]]);
        let len = usize::from(size);
        if len < HEADER || len % 8 != 0 {
            return Err(RecordError::BadSize { at, size });
        }
        let Some(record) = rest.get(..len) else {
            return Err(RecordError::Truncated {
                at,
                size,
                len: bytes.len(),
            });
        };
        let body = &record[HEADER..];
        match kind {
            PERF_RECORD_SAMPLE if body.len() >= SAMPLE_BODY => f(Record::Sample {
                id: u64_at(body, 0),
                ip: u64_at(body, 8),
                time: u64_at(body, 16),
                mode: Mode::of_misc(misc),
            }),
            PERF_RECORD_LOST if body.len() >= LOST_BODY => f(Record::Lost {
                id: u64_at(body, 0),
                count: u64_at(body, 8),
            }),
            PERF_RECORD_SAMPLE | PERF_RECORD_LOST => {
                return Err(RecordError::ShortBody { at, kind });
            }
            other => f(Record::Other(other)),
        }
        at += len;
    }
    Ok(())
}

/// A sample record's bytes as the kernel writes them (tests, the fuzz target's seeds).
pub fn encode_sample(misc: u16, id: u64, ip: u64, time: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + SAMPLE_BODY);
    v.extend_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
    v.extend_from_slice(&misc.to_ne_bytes());
    v.extend_from_slice(&32u16.to_ne_bytes());
    for x in [id, ip, time] {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    v
}

/// A lost notice's bytes as the kernel writes them (tests, the fuzz target's seeds).
pub fn encode_lost(id: u64, count: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + LOST_BODY);
    v.extend_from_slice(&PERF_RECORD_LOST.to_ne_bytes());
    v.extend_from_slice(&0u16.to_ne_bytes());
    v.extend_from_slice(&24u16.to_ne_bytes());
    for x in [id, count] {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> (Vec<Record>, Result<(), RecordError>) {
        let mut v = Vec::new();
        let r = parse(bytes, |rec| v.push(rec));
        (v, r)
    }

    #[test]
    fn guest_samples_carry_rip_and_cpl_and_the_rest_is_host_time() {
        let mut bytes = encode_sample(MISC_GUEST_USER, 7, 0x4000_1234, 100);
        bytes.extend(encode_sample(
            MISC_GUEST_KERNEL,
            7,
            0xffff_8000_0000_0010,
            200,
        ));
        // PERF_RECORD_MISC_KERNEL (1): the host's kernel, e.g. an exit.
        bytes.extend(encode_sample(1, 8, 0xffff_ffff_8100_0000, 300));
        bytes.extend(encode_lost(7, 12));
        let (recs, r) = all(&bytes);
        assert_eq!(r, Ok(()));
        assert_eq!(
            recs,
            [
                Record::Sample {
                    id: 7,
                    ip: 0x4000_1234,
                    time: 100,
                    mode: Mode::Guest { cpl: 3 }
                },
                Record::Sample {
                    id: 7,
                    ip: 0xffff_8000_0000_0010,
                    time: 200,
                    mode: Mode::Guest { cpl: 0 }
                },
                Record::Sample {
                    id: 8,
                    ip: 0xffff_ffff_8100_0000,
                    time: 300,
                    mode: Mode::Host
                },
                Record::Lost { id: 7, count: 12 },
            ]
        );
    }

    #[test]
    fn other_records_are_passed_over_by_their_size() {
        // A throttle notice (type 5) of 24 bytes, then a sample.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&5u32.to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&24u16.to_ne_bytes());
        bytes.extend_from_slice(&[0xAA; 16]);
        bytes.extend(encode_sample(MISC_GUEST_USER, 1, 2, 3));
        let (recs, r) = all(&bytes);
        assert_eq!(r, Ok(()));
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0], Record::Other(5));
    }

    #[test]
    fn malformed_sizes_stop_the_parse_after_the_good_records() {
        let good = encode_sample(MISC_GUEST_USER, 1, 2, 3);
        // A zero size would loop forever if trusted.
        let mut zero = good.clone();
        zero.extend_from_slice(&[9, 0, 0, 0, 5, 0, 0, 0]);
        let (recs, r) = all(&zero);
        assert_eq!(recs.len(), 1);
        assert_eq!(r, Err(RecordError::BadSize { at: 32, size: 0 }));
        // A size past the end.
        let mut long = good.clone();
        long.extend_from_slice(&[9, 0, 0, 0, 5, 0, 64, 0]);
        assert!(matches!(
            all(&long).1,
            Err(RecordError::Truncated { at: 32, .. })
        ));
        // An unaligned size.
        let mut odd = good.clone();
        odd.extend_from_slice(&[9, 0, 0, 0, 5, 0, 12, 0, 0, 0, 0, 0]);
        assert!(matches!(all(&odd).1, Err(RecordError::BadSize { .. })));
        // A sample too short for id, ip and time.
        let mut short = good.clone();
        short.extend_from_slice(&[9, 0, 0, 0, 5, 0, 16, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            all(&short).1,
            Err(RecordError::ShortBody { at: 32, kind: 9 })
        );
        // A trailing partial header.
        let mut tail = good;
        tail.extend_from_slice(&[9, 0, 0]);
        assert!(matches!(all(&tail).1, Err(RecordError::Truncated { .. })));
        assert_eq!(all(&[]), (Vec::new(), Ok(())));
    }
}
