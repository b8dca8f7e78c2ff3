//! The stack walk alone, without a vCPU exit around it: the VMM's own walker
//! (`StackWalker::walk`, what every host-side sample with stacks calls) over a guest memory
//! image recorded once with real 4-level page tables (`introspect::testguest`), copied into
//! a `GuestMemoryMmap` as a VM's RAM is. Each iteration walks one 16-frame stack, so a
//! figure divided by 16 is the cost of one frame. No figure is asserted: the budgets and the
//! latest measurements are in docs/performance.md.
//!
//! * `fp16`: 16 frames of frame-pointer code outside any PE image.
//! * `x64_16`: 16 frames of 16 different functions of a PE32+ image without frame pointers
//!   (2,000 RUNTIME_FUNCTIONs, so the exception directory is searched as in a real module),
//!   their prologues using PUSH_NONVOL, ALLOC_SMALL, ALLOC_LARGE, SAVE_NONVOL and chained
//!   unwind info.
//! * `x64_16_cold`: the same with a new walker (empty caches) for every walk: what the first
//!   sample of a stack costs.
//! * `cfi16`: 16 frames of 16 different functions of an ELF file without frame pointers, in
//!   user space at a load bias, unwound by the file's DWARF call-frame information (2,000
//!   FDEs found through `.eh_frame_hdr`, every other function pushing a register), as a
//!   Linux process's are: the file's sections on the host, the stack in guest memory.
//! * `cfi16_cold`: the same with a new walker for every walk.
//!
//! `cargo bench -p bench --bench stack_walk`.

// The recorded guest is small: every length and offset fits its fields.
#![allow(clippy::cast_possible_truncation)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use introspect::cfi::build::{eh_frame_with_hdr, Function};
use introspect::cfi::{ElfUnwindInfo, Section, SpaceUnwinder};
use introspect::testguest::{long_mode, PhysMem};
use introspect::testimage::{code, unwind_info, ImageBuilder};
use introspect::{End, Regs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm::arch::cpu_state::CpuState;
use vmm::profiler::host_profiles::stacks::StackWalker;

/// Frames per walked stack (the sampled PC included).
const FRAMES: usize = 16;
/// The PE image: user space, as a DLL would be.
const IMAGE: u64 = 0x7ffa_1000_0000;
const IMAGE_SIZE: u32 = 0x4_0000;
/// Its code: `FUNCTIONS` functions of `FUNCTION_LEN` bytes each from `TEXT`.
const TEXT: u32 = 0x8000;
const FUNCTIONS: u32 = 2000;
const FUNCTION_LEN: u32 = 0x40;
/// Unwind info from here.
const XDATA: u32 = 0x3_0000;
/// Where a frame's call lies in its function (past every prologue).
const CALL_SITE: u32 = 0x30;
/// The stacks (grown down from their tops) and the frame-pointer code.
const X64_STACK_TOP: u64 = 0x7ff0_0000_0000;
const FP_STACK_TOP: u64 = 0x7fe0_0000_0000;
const FP_CODE: u64 = 0x40_0000;
/// The ELF file: its code linked from `ELF_TEXT`, loaded `ELF_BIAS` higher (a PIE); its
/// stack grown down from `CFI_STACK_TOP`.
const ELF_TEXT: u64 = 0x1000;
const ELF_EH_FRAME_HDR: u64 = 0x10_0000;
const ELF_EH_FRAME: u64 = 0x20_0000;
const ELF_BIAS: u64 = 0x5555_5555_0000;
const CFI_STACK_TOP: u64 = 0x7fd0_0000_0000;

/// UNWIND_CODE operations and register numbers.
const PUSH_NONVOL: u8 = 0;
const ALLOC_LARGE: u8 = 1;
const ALLOC_SMALL: u8 = 2;
const SAVE_NONVOL: u8 = 4;
const RBX: u8 = 3;
const RBP: u8 = 5;
const RSI: u8 = 6;
const RDI: u8 = 7;

/// A prologue shape: its UNWIND_INFO (given the parent entry for a chained one) and the bytes
/// its frame takes below the return address.
struct Shape {
    info: fn(Option<[u32; 3]>) -> Vec<u8>,
    frame: u64,
    chained: bool,
}

const SHAPES: [Shape; 6] = [
    // push rbx; sub rsp, 0x20
    Shape {
        info: |_| {
            unwind_info(
                5,
                (0, 0),
                &[code(5, ALLOC_SMALL, 3), code(1, PUSH_NONVOL, RBX)],
                None,
            )
        },
        frame: 0x28,
        chained: false,
    },
    // push rbx; push rsi; push rdi; sub rsp, 0x30
    Shape {
        info: |_| {
            unwind_info(
                7,
                (0, 0),
                &[
                    code(7, ALLOC_SMALL, 5),
                    code(3, PUSH_NONVOL, RDI),
                    code(2, PUSH_NONVOL, RSI),
                    code(1, PUSH_NONVOL, RBX),
                ],
                None,
            )
        },
        frame: 0x48,
        chained: false,
    },
    // sub rsp, 0x28
    Shape {
        info: |_| unwind_info(4, (0, 0), &[code(4, ALLOC_SMALL, 4)], None),
        frame: 0x28,
        chained: false,
    },
    // push rbp; push rbx; sub rsp, 0x1000
    Shape {
        info: |_| {
            unwind_info(
                9,
                (0, 0),
                &[
                    code(9, ALLOC_LARGE, 0),
                    0x1000 / 8,
                    code(2, PUSH_NONVOL, RBX),
                    code(1, PUSH_NONVOL, RBP),
                ],
                None,
            )
        },
        frame: 0x1010,
        chained: false,
    },
    // sub rsp, 0x38; mov [rsp + 0x30], rbx
    Shape {
        info: |_| {
            unwind_info(
                9,
                (0, 0),
                &[code(9, SAVE_NONVOL, RBX), 0x30 / 8, code(4, ALLOC_SMALL, 6)],
                None,
            )
        },
        frame: 0x38,
        chained: false,
    },
    // push rdi, chained to a parent's push rbx; sub rsp, 0x20
    Shape {
        info: |parent| unwind_info(1, (0, 0), &[code(1, PUSH_NONVOL, RDI)], parent),
        frame: 0x30,
        chained: true,
    },
];

/// A recorded guest: its RAM, and the registers of the sampled vCPU in each scenario.
struct Guest {
    mem: GuestMemoryMmap,
    x64: CpuState,
    fp: CpuState,
    cfi: CpuState,
    /// The ELF file's unwinder, for `cfi`'s address space.
    files: SpaceUnwinder,
}

/// The ELF file's functions: `FUNCTIONS` of `FUNCTION_LEN` bytes, every other one pushing a
/// register first.
fn elf_functions() -> Vec<Function> {
    (0..u64::from(FUNCTIONS))
        .map(|i| Function {
            start: ELF_TEXT + i * u64::from(FUNCTION_LEN),
            len: u64::from(FUNCTION_LEN),
            pushes: i % 2 == 1,
        })
        .collect()
}

/// The ELF file's unwinder: its sections at their linked addresses, its code mapped at the
/// bias.
fn elf_unwinder() -> SpaceUnwinder {
    let (eh, hdr) = eh_frame_with_hdr(ELF_EH_FRAME, ELF_EH_FRAME_HDR, &elf_functions());
    let section = |at: u64, bytes: Vec<u8>| Section {
        addresses: at..at + bytes.len() as u64,
        bytes: bytes.into(),
    };
    let info = ElfUnwindInfo {
        eh_frame: Some(section(ELF_EH_FRAME, eh)),
        eh_frame_hdr: Some(section(ELF_EH_FRAME_HDR, hdr)),
        ..Default::default()
    };
    let mut space = SpaceUnwinder::new();
    let code = ELF_BIAS + ELF_TEXT..ELF_BIAS + ELF_TEXT + u64::from(FUNCTIONS * FUNCTION_LEN);
    assert!(space.add("elf", code, ELF_BIAS, &info));
    space
}

/// The function of the image that frame `i` (0 innermost) runs in: spread over the image, so
/// the frames' code lies on different pages.
fn function_of(i: usize) -> u32 {
    (i as u32 * 97 + 13) % FUNCTIONS
}

fn record() -> Guest {
    let mut phys = PhysMem::new(16 << 20);
    let root = phys.alloc();

    // The image: every function gets a RUNTIME_FUNCTION (the frames' own shapes; the others
    // share one info), the code is one-byte NOPs, so no return address looks like an epilogue.
    let filler = XDATA;
    let mut b = ImageBuilder::new(IMAGE_SIZE as usize)
        .bytes(TEXT, &vec![0x90; (FUNCTIONS * FUNCTION_LEN) as usize])
        .bytes(filler, &(SHAPES[2].info)(None));
    let parent_info = XDATA + 0x10;
    b = b.bytes(parent_info, &(SHAPES[0].info)(None));
    // The chained shapes' parent: a function of its own (the part before the shrink-wrapped
    // prologue), as a compiler lays it out.
    let parent = [TEXT - 0x40, TEXT - 0x20, parent_info];
    b = b.function(parent[0], parent[1], parent[2]);
    let frame_fn: Vec<u32> = (0..FRAMES).map(function_of).collect();
    for f in 0..FUNCTIONS {
        let begin = TEXT + f * FUNCTION_LEN;
        let info = match frame_fn.iter().position(|&g| g == f) {
            Some(i) => {
                let at = XDATA + 0x100 + i as u32 * 0x40;
                let shape = &SHAPES[i % SHAPES.len()];
                b = b.bytes(at, &(shape.info)(shape.chained.then_some(parent)));
                at
            }
            None => filler,
        };
        b = b.function(begin, begin + FUNCTION_LEN, info);
    }
    // Exception directory at 0x200: 2,001 entries end below TEXT - 0x40.
    phys_write(&mut phys, root, IMAGE, &b.build());

    // The x64 stack: each frame's area (zeros, or saved registers) and its return address
    // into the next frame's function; the outermost returns to 0 (the end of the stack).
    let mut words = Vec::new();
    for i in 0..FRAMES {
        let shape = &SHAPES[i % SHAPES.len()];
        words.extend(std::iter::repeat_n(0xb0b_u64, (shape.frame / 8) as usize));
        let ret = match i + 1 {
            n if n < FRAMES => IMAGE + u64::from(TEXT + function_of(n) * FUNCTION_LEN + CALL_SITE),
            _ => 0,
        };
        words.push(ret);
    }
    let x64_rsp = X64_STACK_TOP - 8 * words.len() as u64;
    phys_write(&mut phys, root, x64_rsp, &stack_bytes(&words));

    // The frame-pointer stack: 15 frames of 0x40 bytes below the sampled PC's, [rbp] the
    // caller's rbp and [rbp + 8] the return address; the outermost frame's rbp is 0.
    let fp_frames = FRAMES - 1;
    let fp_rsp = FP_STACK_TOP - 0x40 * fp_frames as u64;
    let mut fp_words = vec![0u64; 8 * fp_frames];
    for i in 0..fp_frames {
        let rbp = fp_rsp + 0x40 * i as u64 + 0x30;
        let slot = ((rbp - fp_rsp) / 8) as usize;
        fp_words[slot] = if i + 1 < fp_frames { rbp + 0x40 } else { 0 };
        fp_words[slot + 1] = FP_CODE + 0x100 * (i as u64 + 1);
    }
    phys_write(&mut phys, root, fp_rsp, &stack_bytes(&fp_words));

    // The ELF stack: frame i runs in function_of(i) at its call site; a pushing function's
    // frame holds the pushed register above the return address.
    let mut cfi_words = Vec::new();
    for i in 0..FRAMES {
        if function_of(i) % 2 == 1 {
            cfi_words.push(0xb0b);
        }
        let ret = match i + 1 {
            n if n < FRAMES => {
                ELF_BIAS + ELF_TEXT + u64::from(function_of(n) * FUNCTION_LEN + CALL_SITE)
            }
            _ => 0,
        };
        cfi_words.push(ret);
    }
    let cfi_rsp = CFI_STACK_TOP - 8 * cfi_words.len() as u64;
    phys_write(&mut phys, root, cfi_rsp, &stack_bytes(&cfi_words));

    let bytes = phys.bytes();
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), bytes.len())])
        .expect("guest memory of the recorded image's size");
    mem.write_slice(bytes, GuestAddress(0))
        .expect("the recorded image fits");
    let cpu = |rip: u64, rsp: u64, rbp: u64| {
        let mut gpr = [0; 16];
        gpr[Regs::RSP] = rsp;
        gpr[Regs::RBP] = rbp;
        CpuState {
            rip,
            gpr,
            cpl: 3,
            paging: long_mode(root),
            ..CpuState::default()
        }
    };
    Guest {
        mem,
        x64: cpu(
            IMAGE + u64::from(TEXT + function_of(0) * FUNCTION_LEN + CALL_SITE + 2),
            x64_rsp,
            0,
        ),
        fp: cpu(FP_CODE + 0x10, fp_rsp, fp_rsp + 0x30),
        cfi: cpu(
            ELF_BIAS + ELF_TEXT + u64::from(function_of(0) * FUNCTION_LEN + CALL_SITE + 2),
            cfi_rsp,
            0,
        ),
        files: elf_unwinder(),
    }
}

fn phys_write(phys: &mut PhysMem, root: u64, va: u64, data: &[u8]) {
    phys.write(root, va, data);
}

fn stack_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bench(c: &mut Criterion) {
    let g = record();
    // Both stacks are whole: every frame is walked and the walk ends at the outermost one.
    for cpu in [&g.x64, &g.fp] {
        let s = StackWalker::default().walk(&g.mem, cpu, 64);
        assert_eq!((s.pcs.len(), s.end), (FRAMES, End::Complete), "{s:x?}");
    }
    let s = StackWalker::default().walk_with_files(&g.mem, &g.cfi, 64, Some(&g.files), false);
    assert_eq!((s.pcs.len(), s.end), (FRAMES, End::Complete), "{s:x?}");
    let mut group = c.benchmark_group("walk");
    group.throughput(Throughput::Elements(FRAMES as u64));
    let mut walker = StackWalker::default();
    group.bench_function("fp16", |b| {
        b.iter(|| black_box(walker.walk(&g.mem, black_box(&g.fp), 64)))
    });
    let mut walker = StackWalker::default();
    group.bench_function("x64_16", |b| {
        b.iter(|| black_box(walker.walk(&g.mem, black_box(&g.x64), 64)))
    });
    group.bench_function("x64_16_cold", |b| {
        b.iter(|| black_box(StackWalker::default().walk(&g.mem, black_box(&g.x64), 64)))
    });
    let mut walker = StackWalker::default();
    let files = Some(&g.files);
    group.bench_function("cfi16", |b| {
        b.iter(|| black_box(walker.walk_with_files(&g.mem, black_box(&g.cfi), 64, files, false)))
    });
    group.bench_function("cfi16_cold", |b| {
        b.iter(|| {
            black_box(StackWalker::default().walk_with_files(
                &g.mem,
                black_box(&g.cfi),
                64,
                files,
                false,
            ))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3))
        .sample_size(50);
    targets = bench
}
criterion_main!(benches);
