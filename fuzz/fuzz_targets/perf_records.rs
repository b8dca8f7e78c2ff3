//! The in-kernel sampler's ring bytes on arbitrary input: parsing must never panic, stop
//! within the bytes given, and deliver only records whose sizes the bytes had room for; a
//! well-formed record appended after a good prefix is read back as written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmm::sampler::ring::record::{encode_sample, parse, Mode, Record, MISC_GUEST_USER};

fuzz_target!(|data: &[u8]| {
    let mut n = 0usize;
    let result = parse(data, |_| n += 1);
    // Every record is at least a header and a sample or lost notice at least 16 more bytes.
    assert!(n <= data.len() / 8);
    if result.is_ok() {
        // A good sequence stays good with one more sample, which comes back as written.
        let mut more = data.to_vec();
        more.extend(encode_sample(MISC_GUEST_USER, 1, 0x4000, 9));
        let mut last = None;
        assert!(parse(&more, |r| last = Some(r)).is_ok());
        assert_eq!(
            last,
            Some(Record::Sample {
                id: 1,
                ip: 0x4000,
                time: 9,
                mode: Mode::Guest { cpl: 3 }
            })
        );
    }
});
