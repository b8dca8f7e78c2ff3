//! The stack walker over an arbitrary image and arbitrary stack bytes: it must end, never
//! panic, keep its limits, and give the same stack with warm caches (images found, unwind
//! plans kept) as with cold ones and as without kept plans (every frame from the guest's
//! bytes).
//! With the shape bit set the image gets well-formed PE32+ headers and an exception directory
//! over fuzzer bytes, so unwind codes and epilogues are reached without seeds; the image and
//! the stack sit at small addresses so that small stack words point into the image.
//! With the Linux bit set the walk starts in kernel code with no image, over the same stack
//! bytes mapped at a kernel address too, and Linux entry frames are followed: odd frame
//! pointers and RBP 0 lead to saved contexts, user or kernel, whose checks must hold.
#![no_main]

use introspect::{walk, End, Options, Regions, Regs, WalkCache};
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x1000;
const STACK: u64 = 0x10_0000;
/// Where the stack bytes are mapped again, and the sampled PC, on the Linux path.
const KSTACK: u64 = 0xffff_c900_0000_0000;
const KTEXT: u64 = 0xffff_ffff_8100_0000;
const LFANEW: usize = 0x40;
const EXCEPTIONS: usize = 0x150;

/// Writes PE32+ headers whose exception directory holds `functions` entries at 0x150.
fn shape(image: &mut [u8], functions: u8) {
    let len = image.len();
    let mut put = |at: usize, b: &[u8]| image[at..at + b.len()].copy_from_slice(b);
    put(0, b"MZ");
    put(0x3c, &(LFANEW as u32).to_le_bytes());
    put(LFANEW, b"PE\0\0");
    put(LFANEW + 4, &0x8664u16.to_le_bytes());
    put(LFANEW + 20, &240u16.to_le_bytes());
    let opt = LFANEW + 24;
    put(opt, &0x20bu16.to_le_bytes());
    put(opt + 56, &u32::try_from(len).unwrap().to_le_bytes());
    put(opt + 108, &16u32.to_le_bytes());
    let table = (usize::from(functions % 32) * 12).min(len - EXCEPTIONS);
    put(opt + 112 + 24, &(EXCEPTIONS as u32).to_le_bytes());
    put(opt + 116 + 24, &u32::try_from(table).unwrap().to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let (head, rest) = data.split_at(12);
    let split = usize::from(u16::from_le_bytes([head[0], head[1]])) % (rest.len() + 1);
    let (image, stack) = rest.split_at(split);
    let mut image = image.to_vec();
    if head[2] & 1 == 1 && image.len() >= 0x400 {
        shape(&mut image, head[3]);
    }
    let linux = head[2] & 2 == 2;
    let (code, sp_base) = if linux {
        (KTEXT, KSTACK)
    } else {
        (BASE, STACK)
    };
    let rip = code + u64::from(u16::from_le_bytes([head[4], head[5]]));
    let rsp = sp_base + u64::from(head[6]) * 8;
    // An odd frame pointer is an entry's mark on the Linux path.
    let rbp = sp_base + u64::from(head[7]) * 8 + u64::from(linux && head[3] & 1 == 1);
    let max_depth = usize::from(head[8] % 80);
    let mut mem = Regions::new()
        .with(BASE, image)
        .with(STACK, stack.to_vec())
        .with(KSTACK, stack.to_vec());
    let regs = Regs::new(rip, rsp, rbp);
    let opts = Options {
        max_depth,
        linux_entries: linux,
    };
    let mut cache = WalkCache::new(0x4000);
    let cold = walk(&mut mem, &mut cache, 0x1000, regs, opts);
    let warm = walk(&mut mem, &mut cache, 0x1000, regs, opts);
    let reference = walk(
        &mut mem,
        &mut WalkCache::without_plans(0x4000),
        0x1000,
        regs,
        opts,
    );
    assert_eq!(cold, reference);
    assert_eq!(warm, reference);
    assert!(cold.pcs.len() <= max_depth);
    assert_eq!(
        cold.end == End::Depth,
        max_depth > 0 && cold.pcs.len() == max_depth
    );
    if max_depth > 0 {
        assert_eq!(cold.pcs[0], rip);
    }
    assert!(cold.pcs.iter().skip(1).all(|&pc| pc != 0));
});
