//! The control API's HTTP request parser on arbitrary bytes: never panics, and a request it
//! accepts used no more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmm::api::http::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok((req, used)) = parse(data) {
        assert!(used <= data.len());
        assert!(req.body.len() <= vmm::api::http::MAX_BODY);
        assert!(req.path.starts_with('/'));
    }
});
