//! A PE image read from guest memory: headers, export name, exports by name, CodeView record
//! and function lookups over arbitrary bytes must never panic, and names stay within their limit. With the
//! shape bit set the image gets well-formed headers, PE32+ or (with the second bit) a WOW64
//! process's x86 PE32, whose export, exception and debug directories point into fuzzer bytes,
//! so the readers behind them are reached.
#![no_main]

use introspect::pe::{Image, MAX_NAME};
use introspect::Regions;
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x1000;
const LFANEW: usize = 0x40;

fn shape(image: &mut [u8], dirs: &[u8], pe32: bool) {
    let len = image.len();
    let mut put = |at: usize, b: &[u8]| image[at..at + b.len()].copy_from_slice(b);
    // Machine, optional header size and magic, where the directories start.
    let (machine, optional_len, magic, d) = if pe32 {
        (0x14cu16, 224u16, 0x10bu16, 96)
    } else {
        (0x8664, 240, 0x20b, 112)
    };
    put(0, b"MZ");
    put(0x3c, &(LFANEW as u32).to_le_bytes());
    put(LFANEW, b"PE\0\0");
    put(LFANEW + 4, &machine.to_le_bytes());
    put(LFANEW + 20, &optional_len.to_le_bytes());
    let opt = LFANEW + 24;
    put(opt, &magic.to_le_bytes());
    put(opt + 56, &u32::try_from(len).unwrap().to_le_bytes());
    put(opt + d - 4, &16u32.to_le_bytes());
    // Directories 0 (exports), 3 (exceptions), 6 (debug) at fuzzer-chosen places in the image.
    for (i, index) in [0usize, 3, 6].into_iter().enumerate() {
        let rva = 0x150 + usize::from(dirs[2 * i]) * 8;
        let size = usize::from(dirs[2 * i + 1]) * 4;
        put(
            opt + d + 8 * index,
            &u32::try_from(rva).unwrap().to_le_bytes(),
        );
        put(
            opt + d + 4 + 8 * index,
            &u32::try_from(size).unwrap().to_le_bytes(),
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (head, rest) = data.split_at(16);
    let mut image = rest.to_vec();
    if head[0] & 1 == 1 && image.len() >= 0x400 {
        shape(&mut image, &head[1..7], head[0] & 2 == 2);
    }
    let mut mem = Regions::new().with(BASE, image);
    let Ok(im) = Image::read(&mut mem, BASE) else {
        return;
    };
    if let Some(name) = im.export_name(&mut mem) {
        assert!(!name.is_empty() && name.len() <= MAX_NAME);
    }
    if let Some(cv) = im.codeview(&mut mem) {
        assert!(cv.pdb.len() <= MAX_NAME && cv.guid.len() == 32);
    }
    // The name the kernel search asks for, and one the fuzzer picks.
    let wanted = String::from_utf8_lossy(&head[10..16]).into_owned();
    for name in ["PsLoadedModuleList", wanted.as_str()] {
        if let Some(at) = im.export(&mut mem, name) {
            assert!(im.contains(at));
        }
    }
    let pc = BASE + u64::from(u16::from_le_bytes([head[8], head[9]]));
    if let Ok(Some(f)) = im.function(&mut mem, pc) {
        assert!(f.begin < f.end && f.end <= im.size);
    }
});
