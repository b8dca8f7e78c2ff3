//! The WOW64 reader on the synthetic guest's 32-bit process, and on hostile variants of it.

use super::*;
use crate::os::list::ListEnd;
use crate::testguest::windows::{ntproc_layout, WindowsGuest, WOW64_EXE_BASE};

/// The synthetic guest with a 32-bit process, its index, and its layout.
fn guest() -> (WindowsGuest, usize) {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let i = g.add_wow64_process("legacy32.exe");
    (g, i)
}

fn names(modules: &[Module]) -> Vec<(u64, &str, &str)> {
    modules
        .iter()
        .map(|m| {
            (
                m.base,
                m.name.as_deref().unwrap_or("?"),
                m.path.as_deref().unwrap_or("?"),
            )
        })
        .collect()
}

#[test]
fn a_32_bit_process_lists_its_64_bit_and_its_x86_modules_once_each() {
    let (g, i) = guest();
    let p = &g.processes[i];
    assert_eq!(
        wow64_peb(&mut g.kmem(), &g.layout, p.facts.key.object),
        Some(p.peb32)
    );
    let list = process_modules(&mut g.kmem(), &mut g.space(p.dtb), &g.layout, &p.facts, 100);
    assert_eq!(list.native.end, ListEnd::Complete);
    let wow64 = list.wow64.clone().expect("a 32-bit loader list");
    assert_eq!(wow64.end, ListEnd::Complete);
    let want32: Vec<(u64, &str, &str)> = p
        .wow64_modules
        .iter()
        .map(|m| (m.base, m.name.as_str(), m.path.as_str()))
        .collect();
    assert_eq!(names(&wow64.modules), want32);
    assert!(want32[1].2.starts_with("C:\\Windows\\SysWOW64\\"));
    assert_eq!(
        wow64.modules.iter().map(|m| m.size).collect::<Vec<_>>(),
        p.wow64_modules.iter().map(|m| m.size).collect::<Vec<_>>()
    );
    // Both lists, the executable (on both, at one base) once.
    let all = list.modules();
    assert_eq!(all.len(), p.modules.len() + p.wow64_modules.len() - 1);
    assert_eq!(all.iter().filter(|m| m.base == WOW64_EXE_BASE).count(), 1);
    for dll in ["wow64.dll", "wow64cpu.dll", "KERNELBASE.dll"] {
        assert!(all.iter().any(|m| m.name.as_deref() == Some(dll)), "{dll}");
    }
    // Two ntdll.dll: the 64-bit one and the x86 one.
    assert_eq!(
        all.iter()
            .filter(|m| m.name.as_deref() == Some("ntdll.dll"))
            .count(),
        2
    );
}

#[test]
fn a_64_bit_process_has_no_32_bit_list() {
    let (g, _) = guest();
    let a = &g.processes[1];
    assert_eq!(
        wow64_peb(&mut g.kmem(), &g.layout, a.facts.key.object),
        None
    );
    let list = process_modules(&mut g.kmem(), &mut g.space(a.dtb), &g.layout, &a.facts, 100);
    assert_eq!(list.wow64, None);
    assert_eq!(list.modules().len(), a.modules.len());
}

#[test]
fn the_earlier_builds_member_points_at_the_peb32_itself() {
    let mut l = ntproc_layout();
    (l.eprocess.wow64_peb32, l.eprocess.wow64_process) = (l.eprocess.wow64_process, None);
    let mut g = WindowsGuest::new(&l);
    let i = g.add_wow64_process("old32.exe");
    let p = &g.processes[i];
    assert_eq!(
        wow64_peb(&mut g.kmem(), &l, p.facts.key.object),
        Some(p.peb32)
    );
    let list = process_modules(&mut g.kmem(), &mut g.space(p.dtb), &l, &p.facts, 100);
    assert_eq!(list.wow64.unwrap().modules.len(), p.wow64_modules.len());
    // A layout with neither member reads no 32-bit list.
    (l.eprocess.wow64_peb32, l.eprocess.wow64_process) = (None, None);
    assert_eq!(wow64_peb(&mut g.kmem(), &l, p.facts.key.object), None);
}

#[test]
fn hostile_wow64_pointers_and_lists_end_the_walk() {
    let (mut g, i) = guest();
    let p = g.processes[i].clone();
    let l = g.layout;
    let slot = p.facts.key.object + u64::from(l.eprocess.wow64_process.unwrap());
    let ewow64 = crate::Memory::read_u64(&mut g.kmem(), slot).unwrap();
    // A user-space _EWOW64PROCESS, or one whose Peb is above 4 GiB, misaligned or NULL.
    g.write_u64(slot, 0x7ff0_0000);
    assert_eq!(wow64_peb(&mut g.kmem(), &l, p.facts.key.object), None);
    g.write_u64(slot, ewow64);
    for bad in [0x1_0000_0000, p.peb32 + 2, 0] {
        g.write_u64(ewow64, bad);
        assert_eq!(
            wow64_peb(&mut g.kmem(), &l, p.facts.key.object),
            None,
            "{bad:#x}"
        );
    }
    g.write_u64(ewow64, p.peb32);
    // Ldr: not a 32-bit user address; then unreadable.
    let space = |g: &mut WindowsGuest, at: u64, v: u32| g.phys.write(p.dtb, at, &v.to_le_bytes());
    let ldr_at = p.peb32 + u64::from(Ldr32::PEB_LDR);
    let ldr = crate::Memory::read_u32(&mut g.space(p.dtb), ldr_at).unwrap();
    space(&mut g, ldr_at, 0x0123_4567);
    assert_eq!(
        wow64_modules(&mut g.space(p.dtb), p.peb32, 100).end,
        ListEnd::BadLink(0x0123_4567)
    );
    space(&mut g, ldr_at, 0x7000_0000);
    assert_eq!(
        wow64_modules(&mut g.space(p.dtb), p.peb32, 100).end,
        ListEnd::Unreadable(0x7000_0000 + u64::from(Ldr32::IN_LOAD_ORDER_MODULE_LIST))
    );
    space(&mut g, ldr_at, ldr);
    // The second entry's forward link back to the first: a loop the back links catch.
    let head = u64::from(ldr) + u64::from(Ldr32::IN_LOAD_ORDER_MODULE_LIST);
    let first = u64::from(crate::Memory::read_u32(&mut g.space(p.dtb), head).unwrap());
    let second = u64::from(crate::Memory::read_u32(&mut g.space(p.dtb), first).unwrap());
    space(&mut g, second, u32::try_from(first).unwrap());
    let list = wow64_modules(&mut g.space(p.dtb), p.peb32, 100);
    assert_eq!((list.modules.len(), list.end), (2, ListEnd::BadLink(first)));
    // A bound, and a huge name length read at 260 units.
    assert_eq!(
        wow64_modules(&mut g.space(p.dtb), p.peb32, 1).end,
        ListEnd::Limit
    );
    space(&mut g, second, u32::try_from(first).unwrap());
    space(&mut g, first + u64::from(Ldr32::BASE_DLL_NAME), 0xffff);
    let list = wow64_modules(&mut g.space(p.dtb), p.peb32, 1);
    assert!(list.modules[0].name.as_ref().unwrap().chars().count() <= 260);
    // Not a 32-bit PEB at all.
    assert_eq!(
        wow64_modules(&mut g.space(p.dtb), 0x1_0000_0000, 100).end,
        ListEnd::BadLink(0x1_0000_0000)
    );
}
