//! The control API's HTTP request parser on arbitrary bytes: never panics, a request it
//! accepts used no more bytes than it was given, and every shorter prefix of it is
//! "incomplete" (the server parses what it has read so far, whatever pieces it came in).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmm::api::http::{parse, ParseError};

fuzz_target!(|data: &[u8]| {
    if let Ok((req, used)) = parse(data) {
        assert!(used <= data.len());
        assert!(req.body.len() <= vmm::api::http::MAX_BODY);
        assert!(req.path.starts_with('/'));
        // Every prefix up to 256 bytes, then 64 spread over the rest, and the last one.
        let spread = (used / 64).max(1);
        let cuts = (0..used.min(256))
            .chain((256..used).step_by(spread))
            .chain(used.checked_sub(1));
        for cut in cuts {
            assert_eq!(
                parse(&data[..cut]),
                Err(ParseError::Incomplete),
                "the first {cut} of {used} bytes"
            );
        }
        assert_eq!(parse(&data[..used]).map(|(r, _)| r), Ok(req));
    }
});
