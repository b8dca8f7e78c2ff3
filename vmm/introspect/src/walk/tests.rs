use super::*;
use crate::testimage::{code, stack, unwind_info, ImageBuilder};
use crate::Regions;

const S: u64 = 0x7_0000;
const CODE: u64 = 0x4000_0000;

fn opts(max_depth: usize) -> Options {
    Options {
        max_depth,
        linux_entries: false,
    }
}

fn walk_in(mem: &mut Regions, regs: Regs, max_depth: usize) -> Stack {
    walk(
        mem,
        &mut WalkCache::new(0x10_0000),
        0x1000,
        regs,
        opts(max_depth),
    )
}

/// Frame-pointer frames at S: rbp S+0x10 -> S+0x30 -> 0.
fn fp_stack() -> Regions {
    let mut words = vec![0; 12];
    words[2] = S + 0x30;
    words[3] = CODE + 0x100;
    words[6] = 0;
    words[7] = CODE + 0x200;
    Regions::new().with(S, stack(&words))
}

#[test]
fn a_frame_pointer_chain_is_followed_to_its_end() {
    let s = walk_in(&mut fp_stack(), Regs::new(CODE + 0x10, S, S + 0x10), 64);
    assert_eq!(s.pcs, [CODE + 0x10, CODE + 0x100, CODE + 0x200]);
    assert_eq!(s.end, End::Complete);
    assert!(!s.truncated());
}

#[test]
fn depth_zero_walks_nothing_and_the_limit_truncates() {
    let regs = Regs::new(CODE + 0x10, S, S + 0x10);
    assert_eq!(walk_in(&mut fp_stack(), regs, 0).pcs, Vec::<u64>::new());
    let s = walk_in(&mut fp_stack(), regs, 2);
    assert_eq!((s.pcs.len(), s.end), (2, End::Depth));
    assert!(s.truncated());
}

#[test]
fn loops_garbage_and_holes_end_the_walk() {
    // RBP pointing at itself.
    let mut looped = Regions::new().with(S, stack(&[S, CODE + 0x40]));
    let s = walk_in(&mut looped, Regs::new(CODE, S, S), 64);
    assert_eq!((s.pcs, s.end), (vec![CODE, CODE + 0x40], End::NotGrowing));
    // RBP below RSP.
    let s = walk_in(&mut fp_stack(), Regs::new(CODE, S + 0x40, S + 0x10), 64);
    assert_eq!(s.end, End::NotGrowing);
    // A return address outside the canonical range.
    let mut wild = Regions::new().with(S, stack(&[0, 0x8000_0000_0000]));
    let s = walk_in(&mut wild, Regs::new(CODE, S, S), 64);
    assert_eq!(s.end, End::NonCanonical(0x8000_0000_0000));
    // An unmapped frame.
    let s = walk_in(&mut Regions::new(), Regs::new(CODE, S, S + 0x10), 64);
    assert_eq!((s.pcs, s.end), (vec![CODE], End::Unreadable(S + 0x10)));
}

#[test]
fn pe_frames_unwind_from_their_data_and_hand_over_to_frame_pointers() {
    let base = 0x1_4000_0000;
    // F at 0x1000: push rbx (1); sub rsp, 0x20 (5). A leaf at 0x1200 has no entry.
    let image = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .bytes(
            0x3000,
            &unwind_info(5, (0, 0), &[code(5, 2, 3), code(1, 0, 3)], None),
        )
        .build();
    let mut words = vec![0; 10];
    words[0] = base + 0x1050; // the leaf's return into F's body
    words[5] = 0xb0b; // F's saved RBX
    words[6] = CODE + 0x123; // F's return into frame-pointer code
    words[8] = 0; // that code's frame: the end of the chain
    words[9] = CODE + 0x456;
    let mut mem = Regions::new().with(base, image).with(S, stack(&words));
    let s = walk_in(&mut mem, Regs::new(base + 0x1210, S, S + 0x40), 64);
    assert_eq!(
        s.pcs,
        [base + 0x1210, base + 0x1050, CODE + 0x123, CODE + 0x456]
    );
    assert_eq!(s.end, End::Complete);
}

#[test]
fn a_machine_frame_may_switch_to_a_lower_stack() {
    let kernel = 0xffff_f800_0000_0000;
    let kstack = 0xffff_c000_0000_1000;
    let user_stack = 0x5000;
    let image = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .bytes(0x3000, &unwind_info(0, (0, 0), &[code(0, 10, 0)], None))
        .build();
    let mut mem = Regions::new()
        .with(kernel, image)
        .with(kstack, stack(&[CODE + 0x10, 0x33, 0x202, user_stack, 0x2b]))
        .with(user_stack, stack(&[0, CODE + 0x777]));
    let s = walk_in(&mut mem, Regs::new(kernel + 0x1010, kstack, user_stack), 64);
    assert_eq!(s.pcs, [kernel + 0x1010, CODE + 0x10, CODE + 0x777]);
    assert_eq!(s.end, End::Complete);
}

/// A `pt_regs` at the start of `words` that saved a user context at `CODE + 0x80`, its stack
/// `fp_stack`'s (RSP S, RBP S + 0x10).
fn user_pt_regs(words: &mut [u64]) {
    words[4] = S + 0x10; // bp
    words[16] = CODE + 0x80; // ip
    words[17] = 0x33; // cs
    words[19] = S; // sp
    words[20] = 0x2b; // ss
}

/// A Linux kernel stack at K: two frame-pointer frames, the outer one's saved RBP the
/// address of the `pt_regs` at K + 0x40 plus one (an exception entry), which saved a user
/// context whose frame-pointer chain goes on at the user stack S (`fp_stack`).
#[test]
fn linux_entry_frames_lead_from_the_kernel_into_the_context_they_saved() {
    const K: u64 = 0xffff_c900_0001_0000;
    const KTEXT: u64 = 0xffff_ffff_8100_0000;
    let mut words = vec![0u64; 8 + 21];
    // Frame 1 at K: caller's RBP K + 0x20, return into KTEXT + 0x300.
    words[0] = K + 0x20;
    words[1] = KTEXT + 0x300;
    // Frame 2 at K + 0x20: the encoded pt_regs, return into the entry stub.
    words[4] = (K + 0x40) | 1;
    words[5] = KTEXT + 0x900;
    // pt_regs at K + 0x40 (word 8).
    user_pt_regs(&mut words[8..]);
    let mut mem = fp_stack().with(K, stack(&words));
    let regs = Regs::new(KTEXT + 0x10, K - 0x10, K);
    let linux = Options {
        max_depth: 64,
        linux_entries: true,
    };
    let s = walk(
        &mut mem,
        &mut WalkCache::new(0x10_0000),
        0x1000,
        regs,
        linux,
    );
    assert_eq!(
        s.pcs,
        [
            KTEXT + 0x10,
            KTEXT + 0x300,
            KTEXT + 0x900,
            CODE + 0x80,
            CODE + 0x100,
            CODE + 0x200
        ]
    );
    assert_eq!(s.end, End::Complete);
    // Without the Linux rules the odd RBP is read as a frame: garbage, and the walk ends.
    let s = walk(
        &mut mem,
        &mut WalkCache::new(0x10_0000),
        0x1000,
        regs,
        opts(64),
    );
    assert_eq!(&s.pcs[..3], [KTEXT + 0x10, KTEXT + 0x300, KTEXT + 0x900]);
    assert!(!s.pcs.contains(&(CODE + 0x80)));

    // A system call: the entry cleared RBP, and the last frame's step leaves RSP at pt_regs.
    let mut words = vec![0u64; 2 + 21];
    words[0] = 0;
    words[1] = KTEXT + 0x500;
    user_pt_regs(&mut words[2..]);
    let mut mem = fp_stack().with(K, stack(&words));
    let regs = Regs::new(KTEXT + 0x10, K - 0x10, K);
    let s = walk(
        &mut mem,
        &mut WalkCache::new(0x10_0000),
        0x1000,
        regs,
        linux,
    );
    assert_eq!(
        s.pcs,
        [
            KTEXT + 0x10,
            KTEXT + 0x500,
            CODE + 0x80,
            CODE + 0x100,
            CODE + 0x200
        ]
    );
}
