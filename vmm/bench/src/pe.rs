//! The PE image `hvprof bench` gives the reference guest (`bench.pe=1`) to time Windows x64
//! unwinding: one function, `deep(frames)`, that calls itself until `frames` frames are on the
//! stack and then spins, with a prologue (`push rbx; sub rsp, 0x20`) and no frame pointer, so
//! only its unwind data describes its frames, as in Windows code. Generated here with
//! introspect's PE builder (feature `test-support`), so that the benchmark needs no compiler
//! for Windows.

use introspect::testimage::{code, unwind_info, ImageBuilder};

/// Where the guest maps it (the reference guest's PE window).
pub const IMAGE_BASE: u64 = 0x4030_0000;
const PAGE: u32 = 0x1000;
const TEXT: u32 = 0x1000;
const PDATA: u32 = 0x2000;
const XDATA: u32 = 0x2100;
const SIZE: usize = 0x3000;

/// `deep`'s length in bytes.
const CODE_LEN: u32 = 20;

/// `deep`, System V (RDI = frames): one frame per call, the innermost spins.
const CODE: [u8; CODE_LEN as usize] = [
    0x53, //                          0: push rbx
    0x48, 0x83, 0xec, 0x20, //        1: sub rsp, 0x20
    0x48, 0xff, 0xcf, //              5: dec rdi
    0x7e, 0x05, //                    8: jle 0xf
    0xe8, 0xf1, 0xff, 0xff, 0xff, //  a: call 0x0
    0x48, 0xff, 0xc0, //              f: inc rax (the spin loop)
    0xeb, 0xfb, //                   12: jmp 0xf
];

/// UWOP_PUSH_NONVOL and UWOP_ALLOC_SMALL, and the register number of RBX.
const PUSH_NONVOL: u8 = 0;
const ALLOC_SMALL: u8 = 2;
const RBX: u8 = 3;

/// The image, as a file (whose layout is its memory layout: file alignment = page): `deep` in
/// `.text`; its RUNTIME_FUNCTION (the exception directory) and UNWIND_INFO in `.rdata`.
pub fn deep_module() -> Vec<u8> {
    // UNWIND_INFO version 1: prologue of 5 bytes, two codes: ALLOC_SMALL 0x20 (operand
    // 0x20 / 8 - 1) at 5, PUSH_NONVOL RBX at 1.
    let unwind = unwind_info(
        5,
        (0, 0),
        &[code(5, ALLOC_SMALL, 3), code(1, PUSH_NONVOL, RBX)],
        None,
    );
    let function: Vec<u8> = [TEXT, TEXT + CODE_LEN, XDATA]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    ImageBuilder::new(SIZE)
        .timestamp(0)
        .executable(IMAGE_BASE, TEXT)
        .section(b".text\0\0\0", TEXT, PAGE, 0x6000_0020)
        .section(b".rdata\0\0", PDATA, PAGE, 0x4000_0040)
        .directory(3, PDATA, 12)
        .bytes(TEXT, &CODE)
        .bytes(PDATA, &function)
        .bytes(XDATA, &unwind)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use introspect::pe::Image;
    use introspect::{walk, End, Options, Regions, Regs, WalkCache};

    #[test]
    fn the_module_unwinds_frame_by_frame_to_its_caller() {
        let image = deep_module();
        // Three frames of deep on a stack at 0x10_0000, called from 0x4000_1234, spinning.
        let ret = IMAGE_BASE + u64::from(TEXT) + 0xf;
        let mut words = Vec::new();
        for caller in [ret, ret, 0x4000_1234] {
            words.extend([0u64, 0, 0, 0, 0xb0b, caller]);
        }
        words.push(0);
        let stack: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut mem = Regions::new()
            .with(IMAGE_BASE, image)
            .with(0x10_0000, stack);
        let im = Image::read(&mut mem, IMAGE_BASE).unwrap();
        assert_eq!(im.size as usize, SIZE);
        let regs = Regs::new(ret + 3, 0x10_0000, 0);
        let s = walk(
            &mut mem,
            &mut WalkCache::new(1 << 20),
            0,
            regs,
            Options::default(),
        );
        assert_eq!(s.pcs, [ret + 3, ret, ret, 0x4000_1234]);
        // The FP step from the caller finds RBP 0: the outermost frame.
        assert_eq!(s.end, End::Complete);
    }
}
