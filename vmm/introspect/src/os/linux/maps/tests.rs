use super::*;
use crate::testguest::linux_maps::{layout, process, root, Heap, HEAP, MM};

#[test]
fn a_two_level_tree_gives_every_mapping_in_order_with_its_file() {
    let mut mem = process().mem();
    let m = mappings(&mut mem, &layout(), MM).unwrap();
    let got: Vec<(u64, u64, u64, u64, Option<&str>)> = m
        .mappings
        .iter()
        .map(|m| (m.start, m.end, m.flags, m.offset, m.path.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (0x40_1000, 0x4a_0000, 5, 0x1000, Some("/bin/busybox")),
            (0x4a_0000, 0x4a_2000, 3, 0xa_0000, Some("/bin/busybox")),
            (0x4c_0000, 0x4e_0000, 3, 0, None),
            (0x7ffc_0000_0000, 0x7ffc_0002_1000, 3, 0, None),
        ]
    );
    assert_eq!(m.skipped, 0);
    assert!(m.mappings[0].exec() && !m.mappings[1].exec());
    assert_eq!(m.find(0x40_2345).map(|x| x.start), Some(0x40_1000));
    assert_eq!(m.find(0x4a_1fff).map(|x| x.start), Some(0x4a_0000));
    assert_eq!(m.find(0x4b_0000), None);
    assert_eq!(m.find(0), None);
}

#[test]
fn no_tree_or_no_layout_is_no_mappings() {
    let mut mem = Heap::new().mem();
    assert_eq!(
        mappings(&mut mem, &layout(), MM).unwrap(),
        Mappings::default()
    );
    let mut no_vmas = layout();
    no_vmas.vmas = None;
    let mut mem = process().mem();
    assert_eq!(
        mappings(&mut mem, &no_vmas, MM).unwrap(),
        Mappings::default()
    );
}

#[test]
fn a_vma_whose_range_disagrees_with_the_tree_is_left_out() {
    let mut h = process();
    // The heap's VMA now says it starts a page later than the tree has it.
    h.u64(HEAP + 0x3200, 0x4c_1000);
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert_eq!(m.skipped, 1);
    assert_eq!(m.mappings.len(), 3);
    assert!(m.find(0x4c_8000).is_none());
}

#[test]
fn a_node_that_holds_itself_ends_at_the_bounds() {
    let mut h = Heap::new();
    let at = HEAP + 0x1000;
    let me = at | (ARANGE_64 << 3) | 4;
    // One slot over the whole range, holding the node itself: consistent at every level.
    h.node(at, ARANGE_64, &[u64::MAX], &[me]);
    h.u64(MM + 8, root(me));
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert!(m.mappings.is_empty());
    assert!(m.skipped > 0);
}

#[test]
fn decreasing_pivots_and_unknown_node_types_are_refused() {
    let mut h = Heap::new();
    let leaf = h.node(HEAP + 0x1000, LEAF_64, &[0x5000, 0x4000], &[0, 0, 0]);
    h.u64(MM + 8, root(leaf));
    assert!(matches!(
        mappings(&mut h.mem(), &layout(), MM),
        Err(IdentifyError::Implausible {
            what: "maple pivot",
            ..
        })
    ));
    let mut h = Heap::new();
    h.u64(MM + 8, (HEAP + 0x1000) | (7 << 3) | 2);
    assert!(matches!(
        mappings(&mut h.mem(), &layout(), MM),
        Err(IdentifyError::Implausible {
            what: "maple node type",
            ..
        })
    ));
}

#[test]
fn a_leaf_under_a_range_its_pivots_do_not_fit_is_refused() {
    let mut h = process();
    // The inner node's second slot, [0x8000_0000, MAX], holds the first leaf again, whose
    // pivots all lie below that range.
    let low = (HEAP + 0x1000) | (LEAF_64 << 3) | 4;
    let top = h.node(
        HEAP + 0x1200,
        ARANGE_64,
        &[0x7fff_ffff, u64::MAX],
        &[low, low],
    );
    h.u64(MM + 8, root(top));
    assert!(matches!(
        mappings(&mut h.mem(), &layout(), MM),
        Err(IdentifyError::Implausible {
            what: "maple pivot",
            ..
        })
    ));
}

#[test]
fn paths_that_loop_or_names_without_an_end_are_not_named() {
    let mut h = process();
    // bin's parent is busybox: the chain never reaches the root.
    h.u64(HEAP + 0x2100 + 0x18, HEAP + 0x2200);
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert_eq!(m.mappings[0].path, None);
    assert_eq!(m.mappings.len(), 4);

    let mut h = process();
    // busybox's name runs on for 300 bytes without a NUL.
    h.bytes(HEAP + 0x2200 + 0x80, &[b'x'; 300]);
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert_eq!(m.mappings[0].path, None);
}

#[test]
fn a_child_entry_must_be_an_encoded_node() {
    let mut h = process();
    // The inner node's second slot holds the leaf with the root's bit 1 set: not a child.
    let high = (HEAP + 0x1100) | (LEAF_64 << 3) | 2;
    let low = (HEAP + 0x1000) | (LEAF_64 << 3) | 4;
    h.node(
        HEAP + 0x1200,
        ARANGE_64,
        &[0x7fff_ffff, u64::MAX],
        &[low, high],
    );
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert_eq!(m.mappings.len(), 3, "the stack's leaf is not read");
    assert_eq!(m.skipped, 1);
}

#[test]
fn a_user_address_for_a_node_or_vma_is_refused() {
    let mut h = process();
    h.u64(MM + 8, 0x1000 | (LEAF_64 << 3) | 2);
    assert!(mappings(&mut h.mem(), &layout(), MM).is_err());
}

#[test]
fn pivots_past_the_last_slot_in_use_are_not_read() {
    // Two slots in use (meta.end 1: a gap, then the VMA up to `second`, 0 meaning the node's
    // maximum), then stale pivots a node keeps after a shrink: read, they would run backwards.
    let build = |second: u64| {
        let mut h = Heap::new();
        let vma = h.vma(HEAP + 0x3000, 0x40_0000, 0x40_1000, VM_READ | VM_EXEC, 0, 0);
        let leaf = h.node(
            HEAP + 0x1000,
            LEAF_64,
            &[0x3f_ffff, second, 0x1000, 0x800],
            &[0, vma],
        );
        h.u64(HEAP + 0x1000 + 0xf8, 1);
        h.u64(MM + 8, root(leaf));
        h.mem()
    };
    let m = mappings(&mut build(0), &layout(), MM).unwrap();
    assert!(
        m.mappings.is_empty(),
        "the VMA's range is the tree's: to the maximum"
    );
    assert_eq!(m.skipped, 1);
    let m = mappings(&mut build(0x40_0fff), &layout(), MM).unwrap();
    assert_eq!(m.mappings.len(), 1, "{m:?}");
    assert_eq!(m.skipped, 0);
}

#[test]
fn control_characters_in_a_name_are_replaced_as_in_every_guest_name() {
    let mut h = process();
    // busybox's name with an escape sequence in it.
    h.bytes(HEAP + 0x2200 + 0x80, b"busy\x1b[2Jbox\0");
    let m = mappings(&mut h.mem(), &layout(), MM).unwrap();
    assert_eq!(
        m.mappings[0].path.as_deref(),
        Some("/bin/busy\u{fffd}[2Jbox")
    );
}
