//! The Linux readers on the synthetic guest, with `current_task` and with `pcpu_hot`.

use super::*;
use crate::testguest::linux::{test_layout, LinuxGuest, DIRECT_MAP};

#[test]
fn every_task_is_identified_with_its_process() {
    for hot in [false, true] {
        let g = LinuxGuest::new(&test_layout(hot));
        for t in &g.tasks {
            let id = identify(&mut g.kmem(), &g.layout, t.task).unwrap();
            assert_eq!(id, t.identity, "{:?}", t.identity.thread.name);
        }
        let names: Vec<&str> = g
            .tasks
            .iter()
            .map(|t| t.identity.process.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "[swapper/0]",
                "[swapper/1]",
                "[kworker/0:1]",
                "sh",
                "awk",
                "awk"
            ]
        );
        // The second thread: its own name, its leader's process.
        let (awk, io) = (&g.tasks[4].identity, &g.tasks[5].identity);
        assert_eq!(io.process, awk.process);
        assert_eq!(io.thread.name.as_deref(), Some("awk-io"));
        assert_eq!(io.thread.key.id, 58);
        // cr3 = the physical address of mm->pgd, a direct-map address.
        let pgd = awk.process.cr3s[0];
        assert!(pgd != g.kernel_cr3 && pgd < g.phys.used());
        assert!(g.tasks[2].identity.process.cr3s.is_empty());
        // Two idle tasks: pid 0 both, one process each.
        assert_ne!(
            g.tasks[0].identity.process.key,
            g.tasks[1].identity.process.key
        );
    }
}

#[test]
fn the_per_cpu_base_is_checked_by_this_cpu_off() {
    let mut g = LinuxGuest::new(&test_layout(false));
    let l = g.layout;
    for &b in &g.per_cpu {
        assert_eq!(check_per_cpu(&mut g.kmem(), &l, b), Ok(()));
    }
    let b = g.per_cpu[0];
    assert_eq!(
        check_per_cpu(&mut g.kmem(), &l, b + 0x40),
        Err(IdentifyError::BadPerCpuBase(b + 0x40))
    );
    assert_eq!(
        check_per_cpu(&mut g.kmem(), &l, 0x7fff_0000_0000),
        Err(IdentifyError::BadPerCpuBase(0x7fff_0000_0000))
    );
    g.write_u64(b + l.symbols.this_cpu_off.unwrap(), b + 0x1000);
    assert_eq!(
        check_per_cpu(&mut g.kmem(), &l, b),
        Err(IdentifyError::BadPerCpuBase(b))
    );
    // Without the symbol only the address is checked.
    let mut bare = l;
    bare.symbols.this_cpu_off = None;
    assert_eq!(check_per_cpu(&mut g.kmem(), &bare, b), Ok(()));
    let mut none = l;
    none.symbols.current_task = None;
    assert_eq!(current_task_offset(&none), None);
}

#[test]
fn implausible_tasks_are_refused() {
    let g0 = LinuxGuest::new(&test_layout(false));
    let l = g0.layout;
    let t = &l.task_struct;
    let io = g0.tasks[5].task;
    for bad in [0x5555_0000_1000, io + 4, 0x8000_0000_0000_0000] {
        assert!(matches!(
            identify(&mut g0.kmem(), &l, bad),
            Err(IdentifyError::Implausible { .. })
        ));
    }
    let cases: [(u32, u64, &str); 4] = [
        (t.pid, 1 << 22, "pid"),
        (t.tgid, 1 << 30, "pid"),
        // A tgid its leader does not have.
        (t.tgid, 1, "thread group id"),
        (t.group_leader, 0x7f00_0000_0000, "group_leader"),
    ];
    for (off, value, what) in cases {
        let mut g = g0.clone();
        if off == t.pid || off == t.tgid {
            g.write(
                io + u64::from(off),
                &u32::try_from(value).unwrap().to_le_bytes(),
            );
        } else {
            g.write_u64(io + u64::from(off), value);
        }
        match identify(&mut g.kmem(), &l, io) {
            Err(IdentifyError::Implausible { what: w, .. }) => assert_eq!(w, what, "{value:#x}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    // A leader that cannot be read; an mm outside the kernel.
    let mut g = g0.clone();
    g.write_u64(io + u64::from(t.group_leader), DIRECT_MAP + (512 << 20));
    assert!(matches!(
        identify(&mut g.kmem(), &l, io),
        Err(IdentifyError::Unreadable(_))
    ));
    let mut g = g0.clone();
    g.write_u64(io + u64::from(t.mm), 0x1000);
    assert!(matches!(
        identify(&mut g.kmem(), &l, io),
        Err(IdentifyError::Implausible { what: "mm", .. })
    ));
}

#[test]
fn a_long_comm_is_cut_at_fifteen_bytes() {
    let mut g = LinuxGuest::new(&test_layout(false));
    let sh = g.tasks[3].task;
    g.write(
        sh + u64::from(g.layout.task_struct.comm),
        b"0123456789abcdefXYZ",
    );
    let id = identify(&mut g.kmem(), &g.layout, sh).unwrap();
    assert_eq!(id.thread.name.as_deref(), Some("0123456789abcde"));
}

#[test]
fn a_task_without_an_mm_is_the_kernel_s() {
    // sh past exit_mm: no PF_KTHREAD, mm NULL: a bracketed kernel row without a CR3.
    let mut g = LinuxGuest::new(&test_layout(false));
    let sh = g.tasks[3].task;
    g.write_u64(sh + u64::from(g.layout.task_struct.mm), 0);
    let id = identify(&mut g.kmem(), &g.layout, sh).unwrap();
    assert_eq!(id.process.name, "[sh]");
    assert!(id.process.kernel && id.process.cr3s.is_empty());
    assert_eq!(id.process.key.space, 0);
    assert_eq!(id.thread.name.as_deref(), Some("sh"));
    // A user task's mm->pgd outside the kernel half gives no CR3 (and no error).
    let mut g = LinuxGuest::new(&test_layout(false));
    let mm = g.tasks[4].identity.process.key.space;
    g.write_u64(mm + u64::from(g.layout.mm_struct.pgd), 0x1000);
    let id = identify(&mut g.kmem(), &g.layout, g.tasks[4].task).unwrap();
    assert!(id.process.cr3s.is_empty() && !id.process.kernel);
}

/// `init_task.tasks`: swapper/0 first, then every thread-group leader in list order; not the
/// other CPU's idle task, nor a second thread.
#[test]
fn the_process_list_is_init_task_and_every_leader_on_its_tasks_list() {
    for hot in [false, true] {
        let g = LinuxGuest::new(&test_layout(hot));
        let list = processes(&mut g.kmem(), &g.layout, 0, MAX_PROCESSES).unwrap();
        assert_eq!(list.end, ListEnd::Complete);
        let want: Vec<_> = [0usize, 2, 3, 4]
            .iter()
            .map(|&i| g.tasks[i].identity.process.clone())
            .collect();
        assert_eq!(list.processes, want);
    }
}

#[test]
fn the_process_list_walk_is_bounded_and_needs_its_symbol_and_member() {
    let g = LinuxGuest::new(&test_layout(false));
    let l = g.layout;
    for (limit, n) in [(0, 0), (1, 1), (3, 3)] {
        let list = processes(&mut g.kmem(), &l, 0, limit).unwrap();
        assert_eq!(
            (list.processes.len(), list.end),
            (n, ListEnd::Limit),
            "limit {limit}"
        );
    }
    // A slide moves init_task: off by a page, nothing there is a task.
    let list = processes(&mut g.kmem(), &l, 0x1000, 10).unwrap();
    assert!(list.processes.is_empty() && list.end != ListEnd::Complete);
    let mut no_symbol = l;
    no_symbol.symbols.init_task = None;
    assert_eq!(processes(&mut g.kmem(), &no_symbol, 0, 10), None);
    let mut no_member = l;
    no_member.task_struct.tasks = None;
    assert_eq!(processes(&mut g.kmem(), &no_member, 0, 10), None);
}

/// A task on the list whose fields fail their checks ends the walk with what was read.
#[test]
fn a_bad_task_on_the_list_ends_the_walk() {
    let mut g = LinuxGuest::new(&test_layout(false));
    let sh = g.tasks[3].task;
    let tgid = sh + u64::from(g.layout.task_struct.tgid);
    g.write(tgid, &(1u32 << 23).to_le_bytes());
    let list = processes(&mut g.kmem(), &g.layout, 0, 100).unwrap();
    assert_eq!(list.end, ListEnd::BadLink(sh));
    assert_eq!(
        list.processes.len(),
        2,
        "swapper/0 and the kworker before it"
    );
}

/// A task_struct reused by a new process is listed as the new process.
#[test]
fn a_reused_task_struct_is_listed_as_its_new_process() {
    let mut g = LinuxGuest::new(&test_layout(false));
    let new = g.reuse(4, 91, "gawk");
    let list = processes(&mut g.kmem(), &g.layout, 0, 100).unwrap();
    assert_eq!(list.end, ListEnd::Complete);
    assert_eq!(list.processes.last(), Some(&g.tasks[new].identity.process));
}
