//! Walking a kernel's circular doubly linked lists (Windows `LIST_ENTRY`, Linux `list_head`:
//! a forward link then a back link, embedded in each entry at a fixed offset), and a 32-bit
//! process's (`LIST_ENTRY32`: two 4-byte links, [`walk32`]).
//!
//! The guest owns every link. Each link must be canonical, aligned to its width and in the same half of
//! the address space as the list's head (kernel lists stay in the kernel, a process's lists in
//! user space), and each entry's back link must point at the entry the walk came from. That
//! last check also ends every loop that does not pass through the head: the first entry
//! reached a second time is reached from a different predecessor than the first time (by
//! induction from the head, which ends the walk), so its back link fails. A fixed bound ends
//! the rest, so a walk reads at most `limit + 1` links.

use std::ops::ControlFlow;

use crate::mem::{canonical, Memory};

/// How a walk of a list ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEnd {
    /// Back at the head: every entry was visited.
    Complete,
    /// An entry (or the head) could not be read.
    Unreadable(u64),
    /// A link is not canonical, not aligned, in the wrong half, or its entry's back link does
    /// not point back.
    BadLink(u64),
    /// The walk's bound was reached.
    Limit,
}

/// True when `a` and `b` are in the same half of the address space (kernel or user).
fn same_half(a: u64, b: u64) -> bool {
    (a ^ b) >> 63 == 0
}

/// Walks the circular list whose head (a `LIST_ENTRY` / `list_head`) is at `head`. Each entry
/// holds its link at `link_offset`; `visit` gets the entry's address (link − `link_offset`)
/// and may end the walk with a reason of its own. At most `limit` entries are visited.
pub fn walk<M: Memory + ?Sized>(
    mem: &mut M,
    head: u64,
    link_offset: u32,
    limit: usize,
    visit: impl FnMut(&mut M, u64) -> ControlFlow<ListEnd>,
) -> ListEnd {
    walk_links::<M, 8>(mem, head, link_offset, limit, visit)
}

/// [`walk`] for a list of `LIST_ENTRY32` (a 32-bit process's, under WOW64): 4-byte links,
/// 4-aligned, zero-extended (so all in the low 4 GiB, user space), with the same checks.
pub fn walk32<M: Memory + ?Sized>(
    mem: &mut M,
    head: u64,
    link_offset: u32,
    limit: usize,
    visit: impl FnMut(&mut M, u64) -> ControlFlow<ListEnd>,
) -> ListEnd {
    walk_links::<M, 4>(mem, head, link_offset, limit, visit)
}

/// The little-endian link of `W` bytes at the start of `b`, zero-extended.
fn link<const W: usize>(b: &[u8]) -> u64 {
    let mut l = [0u8; 8];
    l[..W].copy_from_slice(&b[..W]);
    u64::from_le_bytes(l)
}

/// The walk, for links of `W` (4 or 8) bytes.
fn walk_links<M: Memory + ?Sized, const W: usize>(
    mem: &mut M,
    head: u64,
    link_offset: u32,
    limit: usize,
    mut visit: impl FnMut(&mut M, u64) -> ControlFlow<ListEnd>,
) -> ListEnd {
    let mut first = [0u8; W];
    if mem.read(head, &mut first).is_err() {
        return ListEnd::Unreadable(head);
    }
    let mut at = link::<W>(&first);
    let mut prev = head;
    let mut visited = 0;
    loop {
        if at == head {
            return ListEnd::Complete;
        }
        if visited == limit {
            return ListEnd::Limit;
        }
        let Some(entry) = at.checked_sub(u64::from(link_offset)) else {
            return ListEnd::BadLink(at);
        };
        if !canonical(at)
            || !at.is_multiple_of(W as u64)
            || !same_half(at, head)
            || !same_half(entry, head)
        {
            return ListEnd::BadLink(at);
        }
        let mut links = [0u8; 16];
        let links = &mut links[..2 * W];
        if mem.read(at, links).is_err() {
            return ListEnd::Unreadable(at);
        }
        let (flink, blink) = (link::<W>(links), link::<W>(&links[W..]));
        if blink != prev {
            return ListEnd::BadLink(at);
        }
        visited += 1;
        if let ControlFlow::Break(end) = visit(mem, entry) {
            return end;
        }
        prev = at;
        at = flink;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Regions;

    const HEAD: u64 = 0xffff_8000_0000_1000;
    /// Entry i at HEAD + 0x100 * (i + 1), its link at +0x18.
    fn entry(i: usize) -> u64 {
        HEAD + 0x100 * (i as u64 + 1)
    }
    const LINK: u32 = 0x18;

    /// A list of `n` entries; `tweak` may rewrite a link pair (flink, blink) of entry i.
    fn list(n: usize, tweak: impl Fn(usize, &mut (u64, u64))) -> Regions {
        let link = |i: usize| entry(i) + u64::from(LINK);
        let mut bytes = vec![0u8; 0x100 * (n + 1)];
        let mut put = |at: u64, (f, b): (u64, u64)| {
            let o = usize::try_from(at - HEAD).unwrap();
            bytes[o..o + 8].copy_from_slice(&f.to_le_bytes());
            bytes[o + 8..o + 16].copy_from_slice(&b.to_le_bytes());
        };
        let first = if n == 0 { HEAD } else { link(0) };
        let last = if n == 0 { HEAD } else { link(n - 1) };
        put(HEAD, (first, last));
        for i in 0..n {
            let mut l = (
                if i + 1 == n { HEAD } else { link(i + 1) },
                if i == 0 { HEAD } else { link(i - 1) },
            );
            tweak(i, &mut l);
            put(link(i), l);
        }
        Regions::new().with(HEAD, bytes)
    }

    fn entries(mem: &mut Regions, limit: usize) -> (Vec<u64>, ListEnd) {
        let mut seen = Vec::new();
        let end = walk(mem, HEAD, LINK, limit, |_, e| {
            seen.push(e);
            ControlFlow::Continue(())
        });
        (seen, end)
    }

    #[test]
    fn visits_each_entry_once_in_order() {
        let (seen, end) = entries(&mut list(3, |_, _| {}), 100);
        assert_eq!(seen, [entry(0), entry(1), entry(2)]);
        assert_eq!(end, ListEnd::Complete);
        assert_eq!(
            entries(&mut list(0, |_, _| {}), 100),
            (vec![], ListEnd::Complete)
        );
        assert_eq!(entries(&mut list(3, |_, _| {}), 2).1, ListEnd::Limit);
        assert_eq!(entries(&mut list(0, |_, _| {}), 0).1, ListEnd::Complete);
    }

    #[test]
    fn loops_and_bad_links_end_the_walk() {
        let link = |i: usize| entry(i) + u64::from(LINK);
        // Entry 2 points back at entry 0: entry 0's Blink is the head, not entry 2.
        let (seen, end) = entries(
            &mut list(3, |i, l| {
                if i == 2 {
                    l.0 = link(0)
                }
            }),
            100,
        );
        assert_eq!((seen.len(), end), (3, ListEnd::BadLink(link(0))));
        // An entry linked to itself (both ways).
        let (seen, end) = entries(&mut list(1, |_, l| *l = (link(0), link(0))), 100);
        assert_eq!((seen.len(), end), (0, ListEnd::BadLink(link(0))));
        let (seen, end) = entries(&mut list(1, |_, l| l.0 = link(0)), 100);
        assert_eq!((seen.len(), end), (1, ListEnd::BadLink(link(0))));
        for bad in [
            0x8000_0000_0000_1000,
            link(1) + 4,
            0x1000,
            u64::from(LINK) - 8,
        ] {
            let (seen, end) = entries(
                &mut list(2, |i, l| {
                    if i == 0 {
                        l.0 = bad
                    }
                }),
                100,
            );
            assert_eq!((seen.len(), end), (1, ListEnd::BadLink(bad)), "{bad:#x}");
        }
        let far = 0xffff_c000_0000_0000;
        let (_, end) = entries(
            &mut list(2, |i, l| {
                if i == 0 {
                    l.0 = far
                }
            }),
            100,
        );
        assert_eq!(end, ListEnd::Unreadable(far));
        assert_eq!(entries(&mut Regions::new(), 1).1, ListEnd::Unreadable(HEAD));
    }

    #[test]
    fn the_visitor_can_end_the_walk() {
        let mut n = 0;
        let end = walk(&mut list(3, |_, _| {}), HEAD, LINK, 100, |_, e| {
            n += 1;
            if e == entry(1) {
                ControlFlow::Break(ListEnd::Unreadable(e))
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!((n, end), (2, ListEnd::Unreadable(entry(1))));
    }

    /// A 32-bit list at 0x7000_0000: entries 0x40 apart, links at +0x8, `links[i]` entry i's
    /// (flink, blink) as u32s (the head's first).
    fn list32(links: &[(u32, u32)]) -> Regions {
        let mut bytes = vec![0u8; 0x40 * links.len()];
        for (i, (f, b)) in links.iter().enumerate() {
            let o = 0x40 * i + if i == 0 { 0 } else { 8 };
            bytes[o..o + 4].copy_from_slice(&f.to_le_bytes());
            bytes[o + 4..o + 8].copy_from_slice(&b.to_le_bytes());
        }
        Regions::new().with(0x7000_0000, bytes)
    }

    #[test]
    fn a_32_bit_list_is_walked_with_4_byte_links_and_the_same_checks() {
        const H: u32 = 0x7000_0000;
        let l = |i: u32| H + 0x40 * i + 8;
        let walk = |mem: &mut Regions| {
            let mut seen = Vec::new();
            let end = walk32(mem, u64::from(H), 8, 100, |_, e| {
                seen.push(e);
                ControlFlow::Continue(())
            });
            (seen, end)
        };
        let good = [(l(1), l(2)), (l(2), H), (H, l(1))];
        assert_eq!(
            walk(&mut list32(&good)),
            (vec![0x7000_0040, 0x7000_0080], ListEnd::Complete)
        );
        // A back link that does not point back (a loop to the first entry), a misaligned one.
        let looped = [(l(1), l(2)), (l(2), H), (l(1), l(1))];
        assert_eq!(
            walk(&mut list32(&looped)).1,
            ListEnd::BadLink(u64::from(l(1)))
        );
        let odd = [(l(1), l(2)), (l(2) + 2, H), (H, l(1))];
        assert_eq!(
            walk(&mut list32(&odd)).1,
            ListEnd::BadLink(u64::from(l(2) + 2))
        );
        // 8-byte links read as 4-byte ones would not pass: the 64-bit walk refuses this list.
        let end = super::walk(&mut list32(&good), u64::from(H), 8, 100, |_, _| {
            ControlFlow::Continue(())
        });
        assert_ne!(end, ListEnd::Complete);
    }
}
