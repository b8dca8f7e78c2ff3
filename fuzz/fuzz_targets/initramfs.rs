//! The initramfs reader (report::symbols::guest_files::initrd): cpio newc archives, plain or
//! gzip, xz or zstd, one after another, as a user gives them with --initrd or --initramfs to
//! find the files a Linux guest's processes mapped. Every byte is the file's. The reader must
//! never panic, loop or unpack past its bound, and every lookup (symbolic links to themselves,
//! to `..` past the root, through each other) ends with a file inside the data or none.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::symbols::guest_files::Initrd;

/// How much a fuzzed archive may unpack to.
const LIMIT: u64 = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(initrd) = Initrd::parse_within(data, LIMIT) else {
        return;
    };
    for path in ["/bin/prog", "/lib/libc.so.6", "/a/../b", "/loop", "/x/y/z"] {
        if let Some(bytes) = initrd.read(path) {
            assert!(u64::try_from(bytes.len()).unwrap() <= LIMIT);
        }
    }
});
