//! The kernel and its module list laid out in memory byte for byte as 64-bit Windows lays
//! them out (a layout-level test: no real ntoskrnl has been read).

use super::*;
use crate::testimage::ImageBuilder;
use crate::{ImageCache, Regions};

/// The kernel as the stack walker finds it: the cache's scan from `addr` (scanning at most
/// `scan` bytes down), then the export.
fn kernel_at(mem: &mut Regions, addr: u64, scan: u64) -> Option<Kernel> {
    let image = ImageCache::new(scan).find(mem, 0x1000, addr)?;
    Kernel::of(mem, &image)
}

const NT: u64 = 0xffff_f807_1a20_0000;
const NT_SIZE: usize = 0x8000;
/// PsLoadedModuleList's RVA in the image.
const HEAD_RVA: u32 = 0x5000;
/// Where the entries live (pool memory).
const POOL: u64 = 0xffff_a00c_4d00_0000;

/// A KLDR_DATA_TABLE_ENTRY as Windows 10/11 x64 lays it out, 0xa0 bytes.
fn entry(flink: u64, blink: u64, base: u64, size: u32, name_at: u64, name: &str) -> Vec<u8> {
    let mut e = vec![0u8; 0xa0];
    let mut put = |at: usize, b: &[u8]| e[at..at + b.len()].copy_from_slice(b);
    put(0x00, &flink.to_le_bytes());
    put(0x08, &blink.to_le_bytes());
    put(0x30, &base.to_le_bytes());
    put(0x38, &(base + 0x1000).to_le_bytes());
    put(0x40, &size.to_le_bytes());
    let len = u16::try_from(2 * name.encode_utf16().count()).unwrap();
    // FullDllName: "\SystemRoot\" + name, stored after the base name.
    let full = format!("\\SystemRoot\\{name}");
    let full_len = u16::try_from(2 * full.encode_utf16().count()).unwrap();
    put(0x48, &full_len.to_le_bytes());
    put(0x4a, &(full_len + 2).to_le_bytes());
    put(0x50, &(name_at + 0x1000).to_le_bytes());
    put(0x58, &len.to_le_bytes());
    put(0x5a, &(len + 2).to_le_bytes());
    put(0x60, &name_at.to_le_bytes());
    e
}

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// Entry i at POOL + 0x2000 * i, its base name at + 0x400, its full name at + 0x1400.
fn slot(i: u64) -> u64 {
    POOL + 0x2000 * i
}

/// The kernel image, its list head, and `names.len()` entries linked in order (links may be
/// rewritten by `tweak`).
fn guest(names: &[&str], tweak: impl Fn(usize, &mut Vec<u8>)) -> Regions {
    let head = NT + u64::from(HEAD_RVA);
    let n = names.len();
    let last = if n == 0 { head } else { slot(n as u64 - 1) };
    let first = if n == 0 { head } else { slot(0) };
    let mut list_head = first.to_le_bytes().to_vec();
    list_head.extend(last.to_le_bytes());
    let image = ImageBuilder::new(NT_SIZE)
        .exports(
            0x3000,
            &[("KeBugCheckEx", 0x1000), ("PsLoadedModuleList", HEAD_RVA)],
        )
        .bytes(HEAD_RVA, &list_head)
        .build();
    let mut mem = Regions::new().with(NT, image);
    for (i, name) in names.iter().enumerate() {
        let flink = if i + 1 == n { head } else { slot(i as u64 + 1) };
        let blink = if i == 0 { head } else { slot(i as u64 - 1) };
        let name_at = slot(i as u64) + 0x400;
        let base = if i == 0 {
            NT
        } else {
            0xffff_f807_2000_0000 + 0x10_0000 * i as u64
        };
        let mut bytes = entry(flink, blink, base, 0x8000, name_at, name);
        bytes.resize(0x400, 0);
        bytes.extend(utf16(name));
        bytes.resize(0x1400, 0);
        bytes.extend(utf16(&format!("\\SystemRoot\\{name}")));
        tweak(i, &mut bytes);
        mem = mem.with(slot(i as u64), bytes);
    }
    mem
}

fn names(list: &ModuleList) -> Vec<&str> {
    list.modules
        .iter()
        .filter_map(|m| m.name.as_deref())
        .collect()
}

#[test]
fn finds_the_kernel_from_inside_and_lists_its_modules() {
    let mods = ["ntoskrnl.exe", "hal.dll", "kd.dll", "tcpip.sys"];
    let mut mem = guest(&mods, |_, _| {});
    let k = kernel_at(&mut mem, NT + 0x4321, 64 << 20).unwrap();
    assert_eq!(
        (k.image.base, k.module_list),
        (NT, NT + u64::from(HEAD_RVA))
    );
    let list = k.modules(&mut mem);
    assert_eq!(list.end, ListEnd::Complete);
    assert_eq!(names(&list), mods);
    let nt = &list.modules[0];
    assert_eq!(
        (nt.base, nt.size, nt.entry_point),
        (NT, 0x8000, NT + 0x1000)
    );
    assert_eq!(nt.path.as_deref(), Some("\\SystemRoot\\ntoskrnl.exe"));
    assert_eq!(list.modules[3].entry, slot(3));
}

#[test]
fn the_search_passes_unmapped_pages_and_refuses_what_is_not_the_kernel() {
    // The middle pages of the image are not mapped: the scan passes over them.
    let mut bytes = vec![0u8; NT_SIZE];
    guest(&[], |_, _| {}).read(NT, &mut bytes).unwrap();
    let mut mem = Regions::new()
        .with(NT, bytes[..0x1000].to_vec())
        .with(NT + 0x3000, bytes[0x3000..].to_vec());
    assert!(kernel_at(&mut mem, NT + 0x7000, 1 << 20).is_some());
    assert_eq!(
        kernel_at(&mut mem, NT + 0x7000, 0x1000),
        None,
        "the header is beyond the scan"
    );
    assert_eq!(
        kernel_at(&mut mem, NT + 0x9000, 1 << 20),
        None,
        "past the image's end"
    );
    let driver = 0xffff_f807_3000_0000;
    let mut mem = Regions::new().with(driver, ImageBuilder::new(0x2000).build());
    assert_eq!(
        kernel_at(&mut mem, driver + 0x1800, 1 << 20),
        None,
        "no PsLoadedModuleList"
    );
    let user = Image::read(&mut guest(&[], |_, _| {}), NT).unwrap();
    let user = Image {
        base: 0x1_4000_0000,
        ..user
    };
    assert_eq!(
        Kernel::of(&mut mem, &user),
        None,
        "a user-space image is not the kernel"
    );
}

#[test]
fn an_empty_list_is_complete_and_an_unreadable_head_is_reported() {
    let mut mem = guest(&[], |_, _| {});
    let head = NT + u64::from(HEAD_RVA);
    assert_eq!(walk_modules(&mut mem, head, 100).end, ListEnd::Complete);
    let list = walk_modules(&mut Regions::new(), head, 100);
    assert_eq!(
        (list.modules.len(), list.end),
        (0, ListEnd::Unreadable(head))
    );
}

#[test]
fn a_loop_that_misses_the_head_ends_at_the_first_bad_blink() {
    // Entry 2's Flink goes back to entry 1: entry 1's Blink (entry 0) does not match.
    let mut mem = guest(&["a", "b", "c"], |i, e| {
        if i == 2 {
            e[..8].copy_from_slice(&slot(1).to_le_bytes());
        }
    });
    let list = walk_modules(&mut mem, NT + u64::from(HEAD_RVA), 100);
    assert_eq!(names(&list), ["a", "b", "c"]);
    assert_eq!(list.end, ListEnd::BadLink(slot(1)));
    // An entry linked to itself.
    let mut mem = guest(&["a"], |_, e| {
        e[..8].copy_from_slice(&slot(0).to_le_bytes())
    });
    let list = walk_modules(&mut mem, NT + u64::from(HEAD_RVA), 100);
    assert_eq!(
        (list.modules.len(), list.end),
        (1, ListEnd::BadLink(slot(0)))
    );
}

#[test]
fn bad_links_unreadable_entries_and_the_bound_end_the_walk() {
    let head = NT + u64::from(HEAD_RVA);
    let cases: [(u64, ListEnd); 3] = [
        (
            0x8000_0000_0000_1000,
            ListEnd::BadLink(0x8000_0000_0000_1000),
        ),
        (slot(1) + 4, ListEnd::BadLink(slot(1) + 4)),
        (
            0xffff_c000_0000_0000,
            ListEnd::Unreadable(0xffff_c000_0000_0000),
        ),
    ];
    for (link, end) in cases {
        let mut mem = guest(&["a", "b"], |i, e| {
            if i == 0 {
                e[..8].copy_from_slice(&link.to_le_bytes());
            }
        });
        let list = walk_modules(&mut mem, head, 100);
        assert_eq!((names(&list), list.end), (vec!["a"], end), "{link:#x}");
    }
    let mut mem = guest(&["a", "b", "c"], |_, _| {});
    let list = walk_modules(&mut mem, head, 2);
    assert_eq!((list.modules.len(), list.end), (2, ListEnd::Limit));
    let list = walk_modules(&mut mem, head, usize::MAX);
    assert_eq!(list.end, ListEnd::Complete);
}

#[test]
fn names_are_bounded_and_cleaned() {
    let long = "x".repeat(1000);
    let mut mem = guest(&[&long, "ok.sys"], |i, e| {
        if i == 1 {
            // BaseDllName.Buffer points at nothing readable; Length odd.
            e[0x60..0x68].copy_from_slice(&0xffff_c000_0000_0000u64.to_le_bytes());
            e[0x48..0x4a].copy_from_slice(&7u16.to_le_bytes());
        }
    });
    let list = walk_modules(&mut mem, NT + u64::from(HEAD_RVA), 100);
    assert_eq!(list.end, ListEnd::Complete);
    let first = list.modules[0].name.as_deref().unwrap();
    assert_eq!(first.chars().count(), 260);
    assert_eq!(list.modules[1].name, None);
    // An odd length reads the whole units it covers.
    assert_eq!(list.modules[1].path.as_deref(), Some("\\Sy"));
    let mut ctl = guest(&["a\u{1}b"], |_, _| {});
    let list = walk_modules(&mut ctl, NT + u64::from(HEAD_RVA), 100);
    assert_eq!(list.modules[0].name.as_deref(), Some("a\u{fffd}b"));
}
