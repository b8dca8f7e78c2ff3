use super::build::{eh_frame, eh_frame_with_hdr, Function};
use super::*;
use crate::Regions;

/// A file whose `.eh_frame` (linked at 0x3000) covers `functions`.
fn file(functions: &[Function]) -> ElfUnwindInfo {
    let bytes = eh_frame(0x3000, functions);
    ElfUnwindInfo {
        eh_frame: Some(Section {
            addresses: 0x3000..0x3000 + bytes.len() as u64,
            bytes: bytes.into(),
        }),
        ..Default::default()
    }
}

/// `leaf` (0x1000, no push) called from `caller` (0x1100, one push) called from `outer`
/// (0x1200, one push), linked at address 0.
fn functions() -> [Function; 3] {
    let function = |start, pushes| Function {
        start,
        len: 0x100,
        pushes,
    };
    [
        function(0x1000, false),
        function(0x1100, true),
        function(0x1200, true),
    ]
}

/// [`functions`] as a file.
fn program() -> ElfUnwindInfo {
    file(&functions())
}

fn stack(at: u64, words: &[u64]) -> Regions {
    Regions::new().with(at, words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

#[test]
fn frames_without_frame_pointers_unwind_by_their_cfa_rules() {
    let bias = 0x5555_0000_0000;
    let mut space = SpaceUnwinder::new();
    assert!(space.add("prog", bias + 0x1000..bias + 0x2000, bias, &program()));
    // leaf's frame: its return address at RSP; caller's: its pushed register, then its return
    // address; outer's the same, returning to 0 (the outermost frame).
    let sp = 0x7ff0_0000;
    let rbp = 0xdead_beef; // a register the code uses for data: never followed
    let mut mem = stack(sp, &[bias + 0x1150, 1, bias + 0x1280, 2, 0]);
    let mut cache = CfiCache::default();
    let mut regs = Regs::new(bias + 0x1010, sp, rbp);
    assert_eq!(space.step(&mut mem, &mut cache, &mut regs, true), Ok(true));
    assert_eq!((regs.rip, regs.rsp()), (bias + 0x1150, sp + 8));
    assert_eq!(space.step(&mut mem, &mut cache, &mut regs, false), Ok(true));
    assert_eq!((regs.rip, regs.rsp()), (bias + 0x1280, sp + 24));
    assert_eq!(
        space.step(&mut mem, &mut cache, &mut regs, false),
        Ok(false),
        "outer returns to 0: the outermost frame"
    );
}

#[test]
fn a_sample_on_a_functions_first_byte_has_no_push_yet() {
    let mut space = SpaceUnwinder::new();
    space.add("prog", 0x1000..0x2000, 0, &program());
    let mut mem = stack(0x8000, &[0x1280]);
    let mut regs = Regs::new(0x1100, 0x8000, 0);
    let mut cache = CfiCache::default();
    assert_eq!(space.step(&mut mem, &mut cache, &mut regs, true), Ok(true));
    assert_eq!((regs.rip, regs.rsp()), (0x1280, 0x8008));
}

#[test]
fn an_unreadable_stack_ends_the_walk_where_it_is() {
    let mut space = SpaceUnwinder::new();
    space.add("prog", 0x1000..0x2000, 0, &program());
    let mut mem = stack(0x8000, &[0x1150]);
    let mut regs = Regs::new(0x1010, 0x8000, 0);
    let mut cache = CfiCache::default();
    assert_eq!(space.step(&mut mem, &mut cache, &mut regs, true), Ok(true));
    assert_eq!(
        space.step(&mut mem, &mut cache, &mut regs, false),
        Err(StepError::Unreadable(0x8010))
    );
}

#[test]
fn files_do_not_overlap_and_files_without_cfi_are_left_out() {
    let mut space = SpaceUnwinder::new();
    assert!(space.add("a", 0x1000..0x2000, 0, &program()));
    assert!(!space.add("b", 0x1800..0x2800, 0, &program()), "overlaps a");
    assert!(!space.add("c", 0x3000..0x3000, 0, &program()), "empty");
    assert!(!space.add("d", 0x4000..0x5000, 0, &ElfUnwindInfo::default()));
    assert!(space.add("e", 0x2000..0x3000, 0x1000, &program()));
    assert_eq!(space.ranges(), &[0x1000..0x2000, 0x2000..0x3000]);
    assert!(space.covers(0x1000) && space.covers(0x2fff));
    assert!(!space.covers(0xfff) && !space.covers(0x3000));
}

/// One walker's cache serves one address space at a time: two processes with different code
/// at the same addresses each get their own rules.
#[test]
fn a_cache_moving_to_another_address_space_forgets_the_rules_of_the_last() {
    let mut pushes = SpaceUnwinder::new();
    pushes.add(
        "p",
        0x1000..0x2000,
        0,
        &file(&[Function {
            start: 0x1000,
            len: 0x100,
            pushes: true,
        }]),
    );
    let mut plain = SpaceUnwinder::new();
    plain.add(
        "q",
        0x1000..0x2000,
        0,
        &file(&[Function {
            start: 0x1000,
            len: 0x100,
            pushes: false,
        }]),
    );
    let mut mem = stack(0x8000, &[0xaaaa, 0xbbbb]);
    let mut cache = CfiCache::default();
    for _ in 0..2 {
        let mut regs = Regs::new(0x1050, 0x8000, 0);
        pushes.step(&mut mem, &mut cache, &mut regs, true).unwrap();
        assert_eq!(regs.rip, 0xbbbb);
        let mut regs = Regs::new(0x1050, 0x8000, 0);
        plain.step(&mut mem, &mut cache, &mut regs, true).unwrap();
        assert_eq!(regs.rip, 0xaaaa);
    }
}

/// The same functions found through `.eh_frame_hdr`'s table (how linkers ship them, and how
/// framehop searches a real file) unwind the same way.
#[test]
fn an_eh_frame_hdr_finds_the_same_rules() {
    let (eh, hdr) = eh_frame_with_hdr(0x3000, 0x2800, &functions());
    let section = |at: u64, bytes: Vec<u8>| Section {
        addresses: at..at + bytes.len() as u64,
        bytes: bytes.into(),
    };
    let info = ElfUnwindInfo {
        eh_frame: Some(section(0x3000, eh)),
        eh_frame_hdr: Some(section(0x2800, hdr)),
        ..Default::default()
    };
    let mut space = SpaceUnwinder::new();
    assert!(space.add("prog", 0x1000..0x2000, 0, &info));
    let sp = 0x7ff0_0000;
    let mut mem = stack(sp, &[0x1150, 1, 0x1280, 2, 0]);
    let mut regs = Regs::new(0x1010, sp, 0);
    let mut cache = CfiCache::default();
    let mut pcs = vec![regs.rip];
    let mut first = true;
    while space.step(&mut mem, &mut cache, &mut regs, first) == Ok(true) && regs.rip != 0 {
        pcs.push(regs.rip);
        first = false;
    }
    assert_eq!(pcs, [0x1010, 0x1150, 0x1280]);
}

/// A header whose FDE count runs past its table is not trusted (the unwinder indexes
/// `.eh_frame` itself): gimli's search multiplies the count unchecked.
#[test]
fn an_eh_frame_hdr_is_used_only_when_its_table_fits() {
    let (_, hdr) = eh_frame_with_hdr(
        0x3000,
        0x2800,
        &[Function {
            start: 0x1000,
            len: 0x100,
            pushes: false,
        }],
    );
    assert!(hdr_table_fits(&hdr));
    let mut lying = hdr.clone();
    lying[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(!hdr_table_fits(&lying));
    assert!(!hdr_table_fits(&hdr[..hdr.len() - 1]));
    let mut version2 = hdr;
    version2[0] = 2;
    assert!(!hdr_table_fits(&version2));
    assert!(!hdr_table_fits(&[]));
}
