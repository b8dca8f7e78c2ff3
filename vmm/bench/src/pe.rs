//! The PE image `hvprof bench` gives the reference guest (`bench.pe=1`) to time Windows x64
//! unwinding: one function, `deep(frames)`, that calls itself until `frames` frames are on the
//! stack and then spins, with a prologue (`push rbx; sub rsp, 0x20`) and no frame pointer, so
//! only its unwind data describes its frames, as in Windows code. Generated here, byte by
//! byte, so that the benchmark needs no compiler for Windows.

/// Where the guest maps it (the reference guest's PE window).
pub const IMAGE_BASE: u64 = 0x4030_0000;
const PAGE: usize = 0x1000;
const TEXT: usize = 0x1000;
const PDATA: usize = 0x2000;
const XDATA: usize = 0x2100;
const SIZE: usize = 0x3000;
const LFANEW: usize = 0x40;

/// `deep`, System V (RDI = frames): one frame per call, the innermost spins.
const CODE: [u8; 20] = [
    0x53, //                          0: push rbx
    0x48, 0x83, 0xec, 0x20, //        1: sub rsp, 0x20
    0x48, 0xff, 0xcf, //              5: dec rdi
    0x7e, 0x05, //                    8: jle 0xf
    0xe8, 0xf1, 0xff, 0xff, 0xff, //  a: call 0x0
    0x48, 0xff, 0xc0, //              f: inc rax (the spin loop)
    0xeb, 0xfb, //                   12: jmp 0xf
];

/// UNWIND_INFO version 1: prologue of 5 bytes, two codes: ALLOC_SMALL 0x20 at 5, PUSH_NONVOL
/// RBX at 1.
const UNWIND: [u8; 8] = [0x01, 0x05, 0x02, 0x00, 0x05, 0x32, 0x01, 0x30];

fn put(image: &mut [u8], at: usize, bytes: &[u8]) {
    image[at..at + bytes.len()].copy_from_slice(bytes);
}

/// A 32-bit field; every value here is an offset or size within the 12 KiB image.
fn put32(image: &mut [u8], at: usize, v: usize) {
    put(
        image,
        at,
        &u32::try_from(v).unwrap_or(u32::MAX).to_le_bytes(),
    );
}

/// A section header: name, virtual size and address, raw size and file offset (the file is
/// laid out as it is mapped), characteristics.
fn section(image: &mut [u8], at: usize, name: &[u8; 8], rva: usize, flags: u32) {
    put(image, at, name);
    for (i, v) in [PAGE, rva, PAGE, rva].into_iter().enumerate() {
        put32(image, at + 8 + 4 * i, v);
    }
    put(image, at + 36, &flags.to_le_bytes());
}

/// The image, as a file (whose layout is its memory layout: file alignment = page).
pub fn deep_module() -> Vec<u8> {
    let mut m = vec![0u8; SIZE];
    put(&mut m, 0, b"MZ");
    put32(&mut m, 0x3c, LFANEW);
    put(&mut m, LFANEW, b"PE\0\0");
    let file = LFANEW + 4;
    put(&mut m, file, &0x8664u16.to_le_bytes()); // Machine
    put(&mut m, file + 2, &2u16.to_le_bytes()); // NumberOfSections
    put(&mut m, file + 16, &240u16.to_le_bytes()); // SizeOfOptionalHeader
    put(&mut m, file + 18, &0x0022u16.to_le_bytes()); // executable, large address aware
    let opt = file + 20;
    put(&mut m, opt, &0x20bu16.to_le_bytes()); // PE32+
    put32(&mut m, opt + 16, TEXT); // AddressOfEntryPoint
    put32(&mut m, opt + 20, TEXT); // BaseOfCode
    put(&mut m, opt + 24, &IMAGE_BASE.to_le_bytes());
    put32(&mut m, opt + 32, PAGE); // SectionAlignment
    put32(&mut m, opt + 36, PAGE); // FileAlignment
    put(&mut m, opt + 48, &6u16.to_le_bytes()); // MajorSubsystemVersion
    put32(&mut m, opt + 56, SIZE); // SizeOfImage
    put32(&mut m, opt + 60, PAGE); // SizeOfHeaders
    put(&mut m, opt + 68, &1u16.to_le_bytes()); // Subsystem: native
    put32(&mut m, opt + 108, 16); // NumberOfRvaAndSizes
    put32(&mut m, opt + 112 + 3 * 8, PDATA); // the exception directory
    put32(&mut m, opt + 116 + 3 * 8, 12);
    let sections = opt + 240;
    section(&mut m, sections, b".text\0\0\0", TEXT, 0x6000_0020);
    section(&mut m, sections + 40, b".rdata\0\0", PDATA, 0x4000_0040);
    put(&mut m, TEXT, &CODE);
    for (i, v) in [TEXT, TEXT + CODE.len(), XDATA].into_iter().enumerate() {
        put32(&mut m, PDATA + 4 * i, v);
    }
    put(&mut m, XDATA, &UNWIND);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use introspect::pe::Image;
    use introspect::{walk, End, ImageCache, Options, Regions, Regs};

    #[test]
    fn the_module_unwinds_frame_by_frame_to_its_caller() {
        let image = deep_module();
        // Three frames of deep on a stack at 0x10_0000, called from 0x4000_1234, spinning.
        let ret = IMAGE_BASE + TEXT as u64 + 0xf;
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
            &mut ImageCache::new(1 << 20),
            0,
            regs,
            Options::default(),
        );
        assert_eq!(s.pcs, [ret + 3, ret, ret, 0x4000_1234]);
        // The FP step from the caller finds RBP 0: the outermost frame.
        assert_eq!(s.end, End::Complete);
    }
}
