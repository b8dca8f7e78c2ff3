//! Kept plans against the uncached unwinder, and what a guest rewriting its unwind data sees.

use super::*;
use crate::testimage::{code, stack, unwind_info, ImageBuilder};
use crate::{walk, Options, Regions, Stack, WalkCache};

const BASE: u64 = 0x1_4000_0000;
const STACK: u64 = 0x10_0000;
const OUTER: u64 = 0x4000_0456;

/// F at 0x1000 (`push rbx; sub rsp, 0x20`, or with `big` 0x40), called from frame-pointer code.
fn guest(big: bool) -> Regions {
    let alloc = if big { 7 } else { 3 };
    let image = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .bytes(
            0x3000,
            &unwind_info(5, (0, 0), &[code(5, 2, alloc), code(1, 0, 3)], None),
        )
        .build();
    // Both layouts on one stack: the return address after 0x20 bytes (small) and after 0x40.
    let mut words = vec![0; 12];
    words[4] = 0xb0b; // small: saved RBX
    words[5] = OUTER; // small: return address
    words[8] = 0xb1b; // big: saved RBX
    words[9] = OUTER + 0x100; // big: return address
    Regions::new().with(BASE, image).with(STACK, stack(&words))
}

fn walk_with(mem: &mut Regions, cache: &mut WalkCache) -> Stack {
    walk(
        mem,
        cache,
        0x1000,
        Regs::new(BASE + 0x1050, STACK, 0),
        Options::default(),
    )
}

#[test]
fn a_kept_plan_gives_what_the_guest_bytes_give() {
    let mut mem = guest(false);
    let mut cache = WalkCache::new(0x10_0000);
    let reference = walk_with(&mut mem, &mut WalkCache::without_plans(0x10_0000));
    assert_eq!(reference.pcs, [BASE + 0x1050, OUTER]);
    for _ in 0..3 {
        assert_eq!(walk_with(&mut mem, &mut cache), reference);
    }
    assert_eq!(cache.unwind.entries.iter().flatten().count(), 1);
}

/// The guest rewrites F's unwind info in place (headers unchanged): walks keep the old plan
/// for at most REDECODE_WALKS walks, then give the new stack.
#[test]
fn unwind_data_rewritten_in_place_is_seen_within_the_staleness_bound() {
    let mut mem = guest(false);
    let mut cache = WalkCache::new(0x10_0000);
    assert_eq!(walk_with(&mut mem, &mut cache).pcs[1], OUTER);
    let mut rewritten = guest(true);
    let new = walk_with(&mut rewritten, &mut WalkCache::without_plans(0x10_0000));
    assert_eq!(new.pcs[1], OUTER + 0x100);
    let mut stale = 0;
    for _ in 0..=REDECODE_WALKS {
        let s = walk_with(&mut rewritten, &mut cache);
        if s.pcs[1] == OUTER {
            stale += 1;
        } else {
            assert_eq!(s, new);
        }
    }
    // The plan was decoded in the first walk; the walks up to REDECODE_WALKS after it keep it.
    assert_eq!(stale, REDECODE_WALKS - 1);
    assert_eq!(walk_with(&mut rewritten, &mut cache), new);
}

/// A module replaced at the same place by another build (its headers say so) is unwound from
/// its own data at the next walk.
#[test]
fn a_replaced_image_drops_its_plans_at_once() {
    let mut mem = guest(false);
    let mut cache = WalkCache::new(0x10_0000);
    assert_eq!(walk_with(&mut mem, &mut cache).pcs[1], OUTER);
    let alloc = 7;
    let image = ImageBuilder::new(0x4000)
        .timestamp(0x600d)
        .function(0x1000, 0x1100, 0x3000)
        .bytes(
            0x3000,
            &unwind_info(5, (0, 0), &[code(5, 2, alloc), code(1, 0, 3)], None),
        )
        .build();
    let mut replaced = guest(false).with(BASE, image);
    assert_eq!(walk_with(&mut replaced, &mut cache).pcs[1], OUTER + 0x100);
}

/// Malformed unwind data is never kept: every walk ends on it as the uncached one does.
#[test]
fn malformed_unwind_data_is_not_kept() {
    let image = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .bytes(0x3000, &[7, 0, 0, 0])
        .build();
    let mut mem = Regions::new().with(BASE, image).with(STACK, stack(&[0; 4]));
    let mut cache = WalkCache::new(0x10_0000);
    for _ in 0..2 {
        let s = walk_with(&mut mem, &mut cache);
        assert_eq!(s.end, crate::End::Malformed(BASE + 0x3000));
    }
    assert!(cache.unwind.entries.iter().flatten().next().is_none());
}
