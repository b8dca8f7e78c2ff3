//! One test per unwind code and per epilogue form, on hand-made images and stacks.

use super::*;
use crate::testimage::{code, stack, unwind_info, ImageBuilder};
use crate::Regions;

const BASE: u64 = 0x1_4000_0000;
const FUNC: u32 = 0x1000;
const INFO: u32 = 0x3000;
const STACK: u64 = 0x10_0000;
const RET: u64 = 0x1_4000_2222;

const PUSH: u8 = 0;
const ALLOC_LARGE: u8 = 1;
const ALLOC_SMALL: u8 = 2;
const SET_FPREG: u8 = 3;
const SAVE: u8 = 4;
const SAVE_FAR: u8 = 5;
const SAVE_XMM: u8 = 8;
const SAVE_XMM_FAR: u8 = 9;
const MACHFRAME: u8 = 10;
const RAX: u8 = 0;
const RBX: u8 = 3;
const RBP: u8 = 5;
const RSI: u8 = 6;

/// Unwinds a function at FUNC..FUNC+0x100 whose unwind info is `info` and whose code is
/// `code`, from `regs` (RIP given as an offset into the function), over `words` at STACK.
fn unwind_with(
    info: Vec<u8>,
    code: &[u8],
    at: u32,
    mut regs: Regs,
    words: &[u64],
) -> Result<(Regs, Unwound), UnwindError> {
    let bytes = ImageBuilder::new(0x4000)
        .function(FUNC, FUNC + 0x100, INFO)
        .bytes(INFO, &info)
        .bytes(FUNC, code)
        .build();
    let mut mem = Regions::new().with(BASE, bytes).with(STACK, stack(words));
    let image = Image::read(&mut mem, BASE).unwrap();
    let f = image
        .function(&mut mem, BASE + u64::from(FUNC + at))
        .unwrap()
        .unwrap();
    regs.rip = BASE + u64::from(FUNC + at);
    let u = unwind(&mut mem, &image, f, &mut regs)?;
    Ok((regs, u))
}

fn at_stack(rbp: u64) -> Regs {
    Regs::new(0, STACK, rbp)
}

#[test]
fn push_nonvol_and_alloc_small_in_the_body_and_inside_the_prologue() {
    // push rbp (ends at 1); push rbx (2); sub rsp, 0x28 (6)
    let info = || {
        unwind_info(
            6,
            (0, 0),
            &[
                code(6, ALLOC_SMALL, 4),
                code(2, PUSH, RBX),
                code(1, PUSH, RBP),
            ],
            None,
        )
    };
    let mut words = vec![0; 5];
    words.extend([0xb0b, 0xbad, RET]);
    let (r, u) = unwind_with(info(), &[], 0x20, at_stack(7), &words).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), r.gpr[3], r.rbp()),
        (RET, STACK + 0x40, 0xb0b, 0xbad)
    );
    assert!(!u.machine_frame);
    // At offset 2 both pushes ran but not the sub.
    let (r, _) = unwind_with(info(), &[], 2, at_stack(7), &[0xb0b, 0xbad, RET]).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), r.gpr[3], r.rbp()),
        (RET, STACK + 0x18, 0xb0b, 0xbad)
    );
    // At offset 0 nothing ran: the return address is on top.
    let (r, _) = unwind_with(info(), &[], 0, at_stack(7), &[RET]).unwrap();
    assert_eq!((r.rip, r.rsp(), r.rbp()), (RET, STACK + 8, 7));
}

#[test]
fn alloc_large_in_both_forms() {
    let scaled = unwind_info(7, (0, 0), &[code(7, ALLOC_LARGE, 0), 0x20 / 8], None);
    let mut words = vec![0; 0x20 / 8];
    words.push(RET);
    let (r, _) = unwind_with(scaled, &[], 0x10, at_stack(0), &words).unwrap();
    assert_eq!((r.rip, r.rsp()), (RET, STACK + 0x28));
    // Unscaled 32-bit size in two slots, low half first.
    let size = 0x1_0010u32;
    let long = unwind_info(
        7,
        (0, 0),
        &[
            code(7, ALLOC_LARGE, 1),
            (size & 0xffff) as u16,
            (size >> 16) as u16,
        ],
        None,
    );
    let mut words = vec![0; size as usize / 8];
    words.push(RET);
    let (r, _) = unwind_with(long, &[], 0x10, at_stack(0), &words).unwrap();
    assert_eq!((r.rip, r.rsp()), (RET, STACK + u64::from(size) + 8));
}

#[test]
fn set_fpreg_recovers_rsp_after_alloca() {
    // push rbp (1); sub rsp, 0x40 (5); lea rbp, [rsp + 0x20] (10): frame register RBP, offset 2*16.
    let info = unwind_info(
        10,
        (RBP, 2),
        &[
            code(10, SET_FPREG, 0),
            code(5, ALLOC_SMALL, 7),
            code(1, PUSH, RBP),
        ],
        None,
    );
    let mut words = vec![0; 0x40 / 8];
    words.extend([0xcafe, RET]);
    // The body moved RSP far below (alloca); RBP still says where the frame is.
    let mut regs = at_stack(STACK + 0x20);
    regs.gpr[Regs::RSP] = STACK - 0x1000;
    let (r, _) = unwind_with(info, &[], 0x30, regs, &words).unwrap();
    assert_eq!((r.rip, r.rsp(), r.rbp()), (RET, STACK + 0x50, 0xcafe));
}

#[test]
fn set_fpreg_without_a_frame_register_is_malformed() {
    let info = unwind_info(3, (0, 0), &[code(3, SET_FPREG, 0)], None);
    assert!(matches!(
        unwind_with(info, &[], 0x10, at_stack(0), &[RET]),
        Err(UnwindError::Malformed(_))
    ));
}

#[test]
fn save_nonvol_near_and_far_and_inside_the_prologue() {
    // sub rsp, 0x28 (4); mov [rsp+0x30], rbx (9); mov [rsp+0x20], rsi (14, the far form)
    let info = || {
        unwind_info(
            14,
            (0, 0),
            &[
                code(14, SAVE_FAR, RSI),
                0x20,
                0,
                code(9, SAVE, RBX),
                0x30 / 8,
                code(4, ALLOC_SMALL, 4),
            ],
            None,
        )
    };
    let words = [0, 0, 0, 0, 0x51, RET, 0xb0b];
    let mut regs = at_stack(0);
    regs.gpr[3] = 1;
    regs.gpr[6] = 2;
    let (r, _) = unwind_with(info(), &[], 0x20, regs, &words).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), r.gpr[3], r.gpr[6]),
        (RET, STACK + 0x30, 0xb0b, 0x51)
    );
    // At offset 9 RSI was not saved yet: it keeps its value.
    let (r, _) = unwind_with(info(), &[], 9, regs, &words).unwrap();
    assert_eq!((r.gpr[3], r.gpr[6]), (0xb0b, 2));
}

#[test]
fn xmm_saves_use_their_slots_and_change_no_integer_register() {
    let info = unwind_info(
        12,
        (0, 0),
        &[
            code(12, SAVE_XMM_FAR, 7),
            0x10,
            0,
            code(8, SAVE_XMM, 6),
            1,
            code(4, ALLOC_SMALL, 3),
        ],
        None,
    );
    let (r, _) = unwind_with(info, &[], 0x20, at_stack(9), &[0, 0, 0, 0, RET]).unwrap();
    assert_eq!((r.rip, r.rsp(), r.rbp()), (RET, STACK + 0x28, 9));
}

#[test]
fn machine_frames_with_and_without_an_error_code() {
    let user_rip = 0x7ff6_1234;
    let user_rsp = 0x5000;
    let frame = [user_rip, 0x33, 0x202, user_rsp, 0x2b];
    let info = unwind_info(0, (0, 0), &[code(0, MACHFRAME, 0)], None);
    let (r, u) = unwind_with(info, &[], 0x10, at_stack(0), &frame).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), u.machine_frame),
        (user_rip, user_rsp, true)
    );
    // With an error code under the frame, and a push after it (push rax ends at 1).
    let info = unwind_info(
        1,
        (0, 0),
        &[code(1, PUSH, RAX), code(0, MACHFRAME, 1)],
        None,
    );
    let mut words = vec![0xaa, 0x0e];
    words.extend(frame);
    let (r, u) = unwind_with(info, &[], 0x10, at_stack(0), &words).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), r.gpr[0], u.machine_frame),
        (user_rip, user_rsp, 0xaa, true)
    );
    let bad = unwind_info(0, (0, 0), &[code(0, MACHFRAME, 2)], None);
    assert!(unwind_with(bad, &[], 0x10, at_stack(0), &frame).is_err());
}

#[test]
fn chained_info_continues_with_the_parents_codes() {
    // The parent (at 0x1000) pushed RBX; the chained fragment (0x1200..0x1280) allocated 0x20.
    let parent = unwind_info(1, (0, 0), &[code(1, PUSH, RBX)], None);
    let child = unwind_info(
        4,
        (0, 0),
        &[code(4, ALLOC_SMALL, 3)],
        Some([FUNC, FUNC + 0x100, INFO]),
    );
    let bytes = ImageBuilder::new(0x4000)
        .function(FUNC, FUNC + 0x100, INFO)
        .function(0x1200, 0x1280, INFO + 0x40)
        .bytes(INFO, &parent)
        .bytes(INFO + 0x40, &child)
        .build();
    let mut mem = Regions::new()
        .with(BASE, bytes)
        .with(STACK, stack(&[0, 0, 0, 0, 0xb0b, RET]));
    let image = Image::read(&mut mem, BASE).unwrap();
    let pc = BASE + 0x1210;
    let f = image.function(&mut mem, pc).unwrap().unwrap();
    let mut r = Regs::new(pc, STACK, 0);
    unwind(&mut mem, &image, f, &mut r).unwrap();
    assert_eq!((r.rip, r.rsp(), r.gpr[3]), (RET, STACK + 0x30, 0xb0b));
}

#[test]
fn a_chain_that_loops_is_malformed() {
    let looped = unwind_info(0, (0, 0), &[], Some([FUNC, FUNC + 0x100, INFO]));
    assert!(matches!(
        unwind_with(looped, &[], 0x10, at_stack(0), &[RET]),
        Err(UnwindError::Malformed(_))
    ));
}

#[test]
fn malformed_codes_and_headers_are_refused() {
    let cases = [
        unwind_info(2, (0, 0), &[code(2, 11, 0)], None),
        unwind_info(2, (0, 0), &[code(2, ALLOC_LARGE, 2), 0, 0], None),
        unwind_info(2, (0, 0), &[code(2, SAVE, RBX)], None),
        unwind_info(2, (0, 0), &[code(2, ALLOC_LARGE, 1), 1], None),
        {
            let mut v3 = unwind_info(0, (0, 0), &[], None);
            v3[0] = 3;
            v3
        },
    ];
    for info in cases {
        let r = unwind_with(info.clone(), &[], 0x10, at_stack(0), &[RET; 4]);
        assert!(
            matches!(r, Err(UnwindError::Malformed(_))),
            "{info:x?}: {r:?}"
        );
    }
}

/// push rbx (1); sub rsp, 0x20 (5)
fn rbx_frame() -> Vec<u8> {
    unwind_info(
        5,
        (0, 0),
        &[code(5, ALLOC_SMALL, 3), code(1, PUSH, RBX)],
        None,
    )
}

#[test]
fn epilogues_are_simulated_from_any_instruction_in_them() {
    // add rsp, 0x20; pop rbx; ret
    let mut body = vec![0u8; 0x40];
    body.extend([0x48, 0x83, 0xc4, 0x20, 0x5b, 0xc3]);
    let words = [0, 0, 0, 0, 0xb0b, RET];
    for (at, rsp) in [(0x40, STACK), (0x44, STACK + 0x20), (0x45, STACK + 0x28)] {
        let mut regs = at_stack(0);
        regs.gpr[Regs::RSP] = rsp;
        regs.gpr[3] = if at == 0x45 { 0xb0b } else { 1 };
        let (r, _) = unwind_with(rbx_frame(), &body, at, regs, &words).unwrap();
        assert_eq!(
            (r.rip, r.rsp(), r.gpr[3]),
            (RET, STACK + 0x30, 0xb0b),
            "at {at:#x}"
        );
    }
}

#[test]
fn epilogue_with_lea_from_the_frame_register_and_r12_to_r15_pops() {
    // push r12 (2); push rbp (3); sub rsp, 0x10 (7); lea rbp, [rsp + 0x20] (12)
    let info = unwind_info(
        12,
        (RBP, 2),
        &[
            code(12, SET_FPREG, 0),
            code(7, ALLOC_SMALL, 1),
            code(3, PUSH, RBP),
            code(2, PUSH, 12),
        ],
        None,
    );
    // lea rsp, [rbp - 0x10]; pop rbp; pop r12; ret
    let mut body = vec![0u8; 0x40];
    body.extend([0x48, 0x8d, 0x65, 0xf0, 0x5d, 0x41, 0x5c, 0xc3]);
    let words = [0, 0, 0xbad, 0x12, RET];
    let mut regs = at_stack(STACK + 0x20);
    regs.gpr[Regs::RSP] = STACK - 0x300;
    let (r, _) = unwind_with(info, &body, 0x40, regs, &words).unwrap();
    assert_eq!(
        (r.rip, r.rsp(), r.gpr[12], r.rbp()),
        (RET, STACK + 0x28, 0x12, 0xbad)
    );
}

/// Body code at 0x40 of the function, after `bytes` of zeros.
fn at_0x40(tail: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8; 0x40];
    body.extend(tail);
    body
}

#[test]
fn tail_calls_end_epilogues_but_jumps_inside_the_function_do_not() {
    let words = [0, 0, 0, 0, 0xb0b, RET, 0, 0, 0x99, 0x1234];
    // add rsp, 0x20; pop rbx; jmp rel32 to far outside the function.
    let out = at_0x40(&[0x48, 0x83, 0xc4, 0x20, 0x5b, 0xe9, 0x00, 0x10, 0x00, 0x00]);
    let (r, _) = unwind_with(rbx_frame(), &out, 0x40, at_stack(0), &words).unwrap();
    assert_eq!((r.rip, r.rsp(), r.gpr[3]), (RET, STACK + 0x30, 0xb0b));
    // rex.w jmp qword ptr [rip + x]
    let ind = at_0x40(&[0x48, 0x83, 0xc4, 0x20, 0x5b, 0x48, 0xff, 0x25, 0, 0, 0, 0]);
    let (r, _) = unwind_with(rbx_frame(), &ind, 0x40, at_stack(0), &words).unwrap();
    assert_eq!(r.rip, RET);
    // The same pop followed by a short jmp back into the function is body code: the unwind
    // codes apply to the current RSP, as they must for code the compiler did not shape as an
    // epilogue.
    let inside = at_0x40(&[0x48, 0x83, 0xc4, 0x20, 0x5b, 0xeb, 0xf9]);
    let mut regs = at_stack(0);
    regs.gpr[Regs::RSP] = STACK + 0x20;
    let (r, _) = unwind_with(rbx_frame(), &inside, 0x44, regs, &words).unwrap();
    assert_eq!((r.rip, r.rsp(), r.gpr[3]), (0x1234, STACK + 0x50, 0x99));
}

#[test]
fn an_unreadable_stack_is_reported_where_it_failed() {
    let r = unwind_with(rbx_frame(), &[], 0x20, Regs::new(0, 0x9000, 0), &[]);
    assert_eq!(r, Err(UnwindError::Unreadable(Unreadable(0x9020))));
}
