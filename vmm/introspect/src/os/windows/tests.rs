//! The Windows readers on the synthetic guest at the stand-in kernel's offsets
//! (tests/fixtures/pe/ntproc.h), and on hostile variants of it.

use super::*;
use crate::nt::Kernel;
use crate::pe::Image;
use crate::testguest::windows::{ntproc_layout, WindowsGuest, NT_BASE};
use crate::testguest::Counting;

fn guest() -> WindowsGuest {
    WindowsGuest::new(&ntproc_layout())
}

#[test]
fn every_thread_of_every_process_is_identified() {
    let g = guest();
    let l = g.layout;
    assert_eq!(g.processes.len(), 4);
    for p in &g.processes {
        for (i, t) in p.threads.iter().enumerate() {
            let id = identify(&mut g.kmem(), &l, t.ethread).unwrap();
            assert_eq!(id, p.identity(i), "{}", p.facts.name);
        }
    }
    let system = &g.processes[0].facts;
    assert!(system.kernel && system.name == "System" && system.peb == 0);
    let b = &g.processes[2];
    assert_eq!(
        b.facts.cr3s,
        [b.dtb, b.user_dtb.unwrap()],
        "both DTBs, flags cleared"
    );
    assert_eq!(
        g.processes[1].threads[1].facts.name.as_deref(),
        Some("a worker")
    );
    assert_eq!(g.processes[0].threads[0].facts.name, None);
}

#[test]
fn kernel_objects_are_read_through_the_kernel_dtb_only() {
    // KVA shadow: B's user DTB maps its user space and not the kernel's objects.
    let g = guest();
    let b = &g.processes[2];
    let mut user = g.space(b.user_dtb.unwrap());
    assert!(matches!(
        identify(&mut user, &g.layout, b.threads[0].ethread),
        Err(IdentifyError::Unreadable(_))
    ));
    let list = user_modules(&mut user, &g.layout, b.facts.peb, 100);
    assert_eq!(list.end, ListEnd::Complete);
    assert_eq!(list.modules.len(), 3);
}

#[test]
fn the_process_list_names_every_live_process() {
    let mut g = guest();
    let list = processes(&mut g.kmem(), &g.layout, NT_BASE, 100);
    assert_eq!(list.end, ListEnd::Complete);
    let want: Vec<ProcessFacts> = g.processes.iter().map(|p| p.facts.clone()).collect();
    assert_eq!(list.processes, want);
    let limited = processes(&mut g.kmem(), &g.layout, NT_BASE, 2);
    assert_eq!((limited.processes.len(), limited.end), (2, ListEnd::Limit));

    // C exits; D takes its EPROCESS, its DTB and its first ETHREAD.
    let d = g.replace(3, "d.exe");
    let (c, d) = (&g.processes[3], &g.processes[d]);
    assert_eq!(c.facts.key.object, d.facts.key.object);
    assert_eq!(c.facts.cr3s, d.facts.cr3s);
    assert_ne!(c.facts.key, d.facts.key);
    let list = processes(&mut g.kmem(), &g.layout, NT_BASE, 100);
    let names: Vec<&str> = list.processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["System", "a.exe", "b.exe", "d.exe"]);
    assert_eq!(list.processes[3], d.facts);
    let id = identify(&mut g.kmem(), &g.layout, d.threads[0].ethread).unwrap();
    assert_eq!(id, d.identity(0));
    assert_eq!(d.threads[0].ethread, c.threads[0].ethread);
    assert_ne!(id.thread.key, c.threads[0].facts.key);
}

#[test]
fn user_modules_come_from_each_process_s_own_space() {
    let mut g = guest();
    let d = g.replace(3, "d.exe");
    for p in g.processes.iter().filter(|p| p.alive && !p.facts.kernel) {
        let list = user_modules(&mut g.space(p.dtb), &g.layout, p.facts.peb, 100);
        assert_eq!(list.end, ListEnd::Complete, "{}", p.facts.name);
        let got: Vec<(u64, u32, &str, &str)> = list
            .modules
            .iter()
            .map(|m| {
                let name = m.name.as_deref().unwrap();
                (m.base, m.size, name, m.path.as_deref().unwrap())
            })
            .collect();
        let want: Vec<(u64, u32, &str, &str)> = p
            .modules
            .iter()
            .map(|m| (m.base, m.size, m.name.as_str(), m.path.as_str()))
            .collect();
        assert_eq!(got, want);
    }
    assert_eq!(
        g.processes[d].modules[0].path, "C:\\apps\\d\\d.exe",
        "the reused DTB holds the new program"
    );
    // A PEB from another process's space is not there.
    let a = &g.processes[1];
    let list = user_modules(
        &mut g.space(g.processes[2].dtb),
        &g.layout,
        a.facts.peb,
        100,
    );
    assert!(matches!(list.end, ListEnd::Unreadable(_)), "{:?}", list.end);
    for bad in [0, 0xffff_8000_0000_0000, a.facts.peb + 4] {
        let list = user_modules(&mut g.space(a.dtb), &g.layout, bad, 100);
        assert_eq!(list.end, ListEnd::BadLink(bad));
    }
}

#[test]
fn the_kernel_module_list_is_read_at_the_layout_s_offsets() {
    let g = guest();
    let kernel = Kernel {
        image: Image {
            base: NT_BASE,
            machine: Default::default(),
            size: 0x10_0000,
            timestamp: 0,
            exports: Default::default(),
            exceptions: Default::default(),
            debug: Default::default(),
        },
        module_list: NT_BASE + u64::from(g.layout.symbols.ps_loaded_module_list),
    };
    let list = kernel.modules_with(&mut g.kmem(), &g.layout);
    assert_eq!(list.end, ListEnd::Complete);
    let got: Vec<_> = list
        .modules
        .iter()
        .map(|m| (m.base, m.name.clone().unwrap(), m.path.clone().unwrap()))
        .collect();
    let want: Vec<_> = g
        .kernel_modules
        .iter()
        .map(|m| (m.base, m.name.clone(), m.path.clone()))
        .collect();
    assert_eq!(got, want);
    // The built-in offsets (x64 KLDR) do not fit this layout's entries (the stand-in's
    // DllBase happens to sit where x64's would behind its shifted links; its names do not).
    let names: Vec<Option<String>> = kernel
        .modules(&mut g.kmem())
        .modules
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_ne!(
        names,
        [
            Some("ntoskrnl.exe".to_string()),
            Some("hal.dll".to_string())
        ]
    );
}

#[test]
fn a_kpcr_is_checked_by_self_and_current_prcb() {
    let mut g = guest();
    let l = g.layout;
    let k = g.kpcrs[0];
    assert_eq!(check_kpcr(&mut g.kmem(), &l, k), Ok(()));
    assert_eq!(
        check_kpcr(&mut g.kmem(), &l, g.kpcrs[1]),
        Ok(()),
        "each vCPU's own"
    );
    assert_eq!(
        check_kpcr(&mut g.kmem(), &l, k + 8),
        Err(IdentifyError::BadPerCpuBase(k + 8))
    );
    assert!(check_kpcr(&mut g.kmem(), &l, 0x1000).is_err());
    g.write_u64(k + u64::from(l.kpcr.current_prcb), k);
    assert_eq!(
        check_kpcr(&mut g.kmem(), &l, k),
        Err(IdentifyError::BadPerCpuBase(k))
    );
}

#[test]
fn implausible_threads_are_refused() {
    let g0 = guest();
    let l = g0.layout;
    let a = g0.processes[1].clone();
    let t = a.threads[0].ethread;
    // A thread pointer into user space, misaligned, not canonical.
    for bad in [0x7ff6_0000_1000, t + 4, 0x8000_0000_0000_0000] {
        assert!(matches!(
            identify(&mut g0.kmem(), &l, bad),
            Err(IdentifyError::Implausible { .. })
        ));
    }
    let cases: [(u32, u64, &str); 4] = [
        (l.ethread.unique_thread, 0x1a5, "thread id"),
        (l.ethread.unique_process, 1 << 40, "process id"),
        // Cid.UniqueProcess is another process's id.
        (l.ethread.unique_process, 0x8, "thread's process id"),
        (
            l.ethread.tcb + l.kthread.process,
            0x1234_5678,
            "KTHREAD.Process",
        ),
    ];
    for (off, value, what) in cases {
        let mut g = g0.clone();
        g.write_u64(t + u64::from(off), value);
        match identify(&mut g.kmem(), &l, t) {
            Err(IdentifyError::Implausible { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn hostile_lists_and_strings_are_bounded() {
    let g0 = guest();
    let l = g0.layout;
    let links = u64::from(l.eprocess.active_process_links);
    let procs: Vec<u64> = g0.processes.iter().map(|p| p.facts.key.object).collect();
    // B's Flink goes back to A: A's Blink (System) does not match.
    let mut g = g0.clone();
    g.write_u64(procs[2] + links, procs[1] + links);
    let list = processes(&mut g.kmem(), &l, NT_BASE, 100);
    assert_eq!(list.processes.len(), 3);
    assert_eq!(list.end, ListEnd::BadLink(procs[1] + links));
    // A's Flink is itself.
    let mut g = g0.clone();
    g.write_u64(procs[1] + links, procs[1] + links);
    let list = processes(&mut g.kmem(), &l, NT_BASE, 100);
    assert_eq!(list.end, ListEnd::BadLink(procs[1] + links));
    // A process whose id is not a multiple of 4 ends the walk at it.
    let mut g = g0.clone();
    g.write_u64(procs[2] + u64::from(l.eprocess.unique_process_id), 7);
    let list = processes(&mut g.kmem(), &l, NT_BASE, 100);
    assert_eq!(
        (list.processes.len(), list.end),
        (2, ListEnd::BadLink(procs[2]))
    );

    // A DLL's name claims 10,000 units (read: 260), an entry links to itself, and the PEB's
    // page is unmapped: all bounded, no panic.
    let a = &g0.processes[1];
    let mut g = g0.clone();
    let peb = a.facts.peb;
    let mut mem = g.space(a.dtb);
    let ldr = crate::Memory::read_u64(&mut mem, peb + u64::from(l.peb.ldr)).unwrap();
    let head = ldr + u64::from(l.peb_ldr_data.in_load_order_module_list);
    let first_link = crate::Memory::read_u64(&mut mem, head).unwrap();
    let first = first_link - u64::from(l.ldr_data_table_entry.in_load_order_links);
    let name_at = first + u64::from(l.ldr_data_table_entry.base_dll_name);
    let buffer =
        crate::Memory::read_u64(&mut mem, name_at + u64::from(l.unicode_string.buffer)).unwrap();
    let long: Vec<u8> = "y"
        .repeat(10_000)
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    g.phys.write(a.dtb, buffer, &long);
    g.phys.write(
        a.dtb,
        name_at + u64::from(l.unicode_string.length),
        &20_000u16.to_le_bytes(),
    );
    let list = user_modules(&mut g.space(a.dtb), &l, peb, 100);
    assert_eq!(list.end, ListEnd::Complete);
    assert_eq!(list.modules[0].name.as_ref().unwrap().len(), 260);
    g.phys.write(a.dtb, first_link, &first_link.to_le_bytes());
    let list = user_modules(&mut g.space(a.dtb), &l, peb, 100);
    assert_eq!(
        (list.modules.len(), list.end),
        (1, ListEnd::BadLink(first_link))
    );
    g.phys.unmap(a.dtb, peb & !0xfff);
    let mut counted = Counting {
        inner: g.space(a.dtb),
        reads: 0,
    };
    let list = user_modules(&mut counted, &l, peb, 100);
    assert_eq!(
        (list.modules.len(), list.end),
        (0, ListEnd::Unreadable(peb + u64::from(l.peb.ldr)))
    );
    assert_eq!(counted.reads, 1);
}
