//! The stack walker with an ELF file's call-frame information over arbitrary `.eh_frame`,
//! `.eh_frame_hdr` and stack bytes: it must end, never panic and keep its limits, with the
//! rules kept from an earlier walk and with none. (Not that both give the same stack: over
//! garbage, framehop's cached rule and a fresh evaluation can end a walk for different
//! reasons, as the fuzzer found within a minute.) The file covers the code
//! at 0x1000-0x3000 (linked where it runs); its sections sit above it and the stack at a
//! small address, so that small stack words point into the code.
#![no_main]

use introspect::cfi::{ElfUnwindInfo, Section, SpaceUnwinder};
use introspect::{walk_with_files, End, Options, Regions, Regs, WalkCache};
use libfuzzer_sys::fuzz_target;

const CODE: u64 = 0x1000;
const CODE_END: u64 = 0x3000;
const EH_FRAME: u64 = 0x4000;
const EH_FRAME_HDR: u64 = 0x8000;
const STACK: u64 = 0x10_0000;

fn section(at: u64, bytes: &[u8]) -> Option<Section> {
    (!bytes.is_empty()).then(|| Section {
        addresses: at..at + bytes.len() as u64,
        bytes: bytes.into(),
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let (head, rest) = data.split_at(12);
    let a = usize::from(u16::from_le_bytes([head[0], head[1]])) % (rest.len() + 1);
    let (eh_frame, rest) = rest.split_at(a);
    let b = usize::from(u16::from_le_bytes([head[2], head[3]])) % (rest.len() + 1);
    let (hdr, stack) = rest.split_at(b);
    let info = ElfUnwindInfo {
        eh_frame: section(EH_FRAME, eh_frame),
        eh_frame_hdr: if head[4] & 1 == 1 {
            section(EH_FRAME_HDR, hdr)
        } else {
            None
        },
        ..Default::default()
    };
    let mut space = SpaceUnwinder::new();
    space.add("file", CODE..CODE_END, 0, &info);
    let rip = CODE + u64::from(u16::from_le_bytes([head[5], head[6]])) % (CODE_END - CODE + 0x100);
    let rsp = STACK + u64::from(head[7]) * 8;
    let rbp = STACK + u64::from(head[8]) * 8;
    let max_depth = usize::from(head[9] % 80);
    let mut mem = Regions::new().with(STACK, stack.to_vec());
    let regs = Regs::new(rip, rsp, rbp);
    let opts = Options {
        max_depth,
        linux_entries: false,
    };
    let mut cache = WalkCache::new(0x4000);
    for _ in 0..2 {
        let s = walk_with_files(&mut mem, &mut cache, 0x1000, regs, opts, Some(&space));
        assert!(s.pcs.len() <= max_depth);
        assert_eq!(
            s.end == End::Depth,
            max_depth > 0 && s.pcs.len() == max_depth
        );
        if max_depth > 0 {
            assert_eq!(s.pcs[0], rip);
        }
        assert!(s.pcs.iter().skip(1).all(|&pc| pc != 0));
    }
});
