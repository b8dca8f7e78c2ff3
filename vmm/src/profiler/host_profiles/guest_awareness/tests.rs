use super::*;
use introspect::paging::Paging;
use vm_memory::GuestAddress;

fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
}

fn cpu(cr3: u64, cpl: u8) -> CpuState {
    CpuState {
        cpl,
        paging: Paging {
            cr3,
            ..Paging::default()
        },
        ..CpuState::default()
    }
}

#[test]
fn without_a_layout_samples_are_split_by_address_space() {
    let g = GuestAwareness::new(2, Instant::now());
    let mem = mem();
    let mut v0 = VcpuGuest::default();
    let a = g.identify(0, &mut v0, &mem, &cpu(0x5003, 3)).unwrap().at;
    assert_eq!(g.identify(0, &mut v0, &mem, &cpu(0x5000, 0)).unwrap().at, a);
    let mut v1 = VcpuGuest::default();
    let b = g.identify(1, &mut v1, &mem, &cpu(0x6000, 3)).unwrap().at;
    assert_ne!(a, b);
    assert_eq!(g.identify(1, &mut v1, &mem, &cpu(0x5000, 3)).unwrap().at, a);
    let (p, t) = g.table().rows();
    assert_eq!(
        p.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["[cr3 0x5000]", "[cr3 0x6000]"]
    );
    assert_eq!(t.len(), 2);
    assert!(!g.wants_kernel_gs_base(0));
}

#[test]
fn off_gives_no_thread_and_no_rows() {
    let g = GuestAwareness::new(1, Instant::now());
    assert!(g.set_types(GuestTypes::Off).is_none());
    let mut v = VcpuGuest::default();
    assert!(g.identify(0, &mut v, &mem(), &cpu(0x5000, 3)).is_none());
    assert!(g.table().rows().0.is_empty());
}

#[test]
fn a_given_windows_layout_waits_for_the_kernel() {
    let g = GuestAwareness::new(1, Instant::now());
    assert!(g
        .set_types(GuestTypes::Windows(WindowsLayout::default()))
        .is_none());
    assert_eq!(g.os(), None, "no kernel base yet");
    g.kernel_found(0xffff_f800_0010_0000, None);
    assert_eq!(g.os().map(|os| os.load_bias), Some(0xffff_f800_0010_0000));
    // A second kernel report changes nothing.
    g.kernel_found(0xffff_f800_0020_0000, None);
    assert_eq!(g.os().map(|os| os.load_bias), Some(0xffff_f800_0010_0000));
}

/// Sets `lookup` as `aware`'s layout source and serves it on a thread of its own, as a run
/// does; the thread ends when the lookup is done or the run closes.
fn serve(aware: &std::sync::Arc<GuestAwareness>, lookup: Lookup) -> std::thread::JoinHandle<()> {
    let (lookup, found) = aware.set_types(GuestTypes::Lookup(lookup)).unwrap();
    let a = aware.clone();
    std::thread::spawn(move || a.serve_lookup(lookup, found))
}

#[test]
fn the_lookup_runs_once_with_the_kernels_codeview_and_publishes_its_layout() {
    let g = std::sync::Arc::new(GuestAwareness::new(1, Instant::now()));
    let seen = std::sync::Arc::new(Mutex::new(None));
    let s = seen.clone();
    let lookup: WindowsLookup = Box::new(move |cv: &CodeView| {
        *s.lock().unwrap() = Some(cv.pdb.clone());
        Ok(WindowsLayout::default())
    });
    let t = serve(&g, Lookup::windows(lookup));
    let cv = CodeView {
        pdb: "ntkrnlmp.pdb".into(),
        guid: "0".repeat(32),
        age: 1,
    };
    g.kernel_found(0xffff_f800_0010_0000, Some(cv));
    t.join().unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some("ntkrnlmp.pdb"));
    assert!(matches!(
        g.os(),
        Some(GuestOs {
            layout: OsLayout::Windows(_),
            load_bias: 0xffff_f800_0010_0000
        })
    ));
}

#[test]
fn a_lookup_that_never_gets_a_kernel_ends_with_the_run() {
    let g = std::sync::Arc::new(GuestAwareness::new(1, Instant::now()));
    let lookup: WindowsLookup = Box::new(|_: &CodeView| Err("never".into()));
    let t = serve(&g, Lookup::windows(lookup));
    g.close();
    t.join().unwrap();
    assert_eq!(g.os(), None);
}

#[test]
fn lstar_is_read_now_and_then_only_while_a_windows_kernel_is_looked_for() {
    let g = GuestAwareness::new(1, Instant::now());
    assert_eq!(g.wanted_msrs(0), WantedMsrs::default());
    g.set_types(GuestTypes::Windows(WindowsLayout::default()));
    let reads = (0..3 * LSTAR_PERIOD)
        .filter(|_| g.wanted_msrs(0).lstar)
        .count();
    assert_eq!(reads, 3);
    g.kernel_found(0xffff_f800_0010_0000, None);
    assert!((0..2 * LSTAR_PERIOD).all(|_| !g.wanted_msrs(0).lstar));
    assert!(!g.wanted_msrs(7).lstar, "no such vCPU");
}

/// The synthetic guest's physical memory as the VMM's guest memory.
fn guest_memory(phys: &introspect::testguest::PhysMem) -> GuestMemoryMmap {
    let bytes = phys.bytes();
    let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), bytes.len())]).unwrap();
    vm_memory::Bytes::write_slice(&m, bytes, GuestAddress(0)).unwrap();
    m
}

/// vCPU `v` of `g` sampled at `cpl` in process `p` (its DTB), GS as the guest keeps it.
fn sample(
    g: &introspect::testguest::windows::WindowsGuest,
    v: usize,
    cpl: u8,
    p: usize,
    with_kgs: bool,
) -> CpuState {
    let regs = g.regs(v, cpl, with_kgs);
    CpuState {
        cpl,
        paging: Paging {
            cr3: g.processes[p].dtb,
            ..g.kernel_paging()
        },
        gs_base: regs.gs_base,
        kernel_gs_base: regs.kernel_gs_base,
        ..CpuState::default()
    }
}

#[test]
fn windows_threads_are_named_once_per_switch_with_their_processes_dlls() {
    use introspect::testguest::windows::{ntproc_layout, WindowsGuest};
    let mut g = WindowsGuest::new(&ntproc_layout());
    let aware = GuestAwareness::new(2, Instant::now());
    aware.set_types(GuestTypes::Windows(g.layout));
    aware.kernel_found(g.os().load_bias, None);
    let mut v = VcpuGuest::default();
    // A kernel-mode sample of System first: the kernel's paging is learnt there.
    let mem = guest_memory(&g.phys);
    let who = aware.identify(0, &mut v, &mem, &sample(&g, 0, 0, 0, false));
    assert_eq!(who.map(|w| w.process_name.as_str()), Some("System"));
    // Process A's worker at CPL3 on vCPU 1, never sampled in the kernel: GS holds the TEB,
    // so the KPCR must come from KERNEL_GS_BASE.
    let worker = g.processes[1].threads[1].ethread;
    g.switch(1, worker);
    let mem = guest_memory(&g.phys);
    let mut v1 = VcpuGuest::default();
    assert_eq!(
        aware
            .identify(1, &mut v1, &mem, &sample(&g, 1, 3, 1, false))
            .map(|w| w.process_name.as_str()),
        Some(""),
        "an address-space row until the KPCR is known"
    );
    assert!(aware.wants_kernel_gs_base(1), "the KPCR is asked for");
    let a = aware
        .identify(1, &mut v1, &mem, &sample(&g, 1, 3, 1, true))
        .map(|w| (w.at, w.process_name.clone()))
        .unwrap();
    assert_eq!(a.1, "a.exe");
    // The same thread again, without the MSR: the same rows, from the cache.
    let again = aware.identify(1, &mut v1, &mem, &sample(&g, 1, 3, 1, false));
    assert_eq!(again.map(|w| w.at), Some(a.0));
    let (processes, threads) = aware.table().rows();
    let row = &processes[a.0.process as usize];
    assert_eq!(row.pid, Some(g.processes[1].facts.key.id));
    assert_eq!(
        row.path.as_deref(),
        Some(g.processes[1].modules[0].path.as_str()),
        "the executable's full path, from the loader list"
    );
    assert_eq!(
        threads[a.0.thread as usize].name,
        g.processes[1].threads[1].facts.name
    );
    // A's DLLs, read in A's address space, keyed by its DTB.
    let dlls: Vec<_> = aware
        .user_modules()
        .into_iter()
        .map(|m| (m.process, m.name.unwrap_or_default()))
        .collect();
    let want: Vec<_> = g.processes[1]
        .modules
        .iter()
        .map(|m| (Some(g.processes[1].dtb), m.name.clone()))
        .collect();
    assert_eq!(dlls, want);
    // C exits and D takes its EPROCESS, DTB and ETHREAD: a process row of its own.
    g.switch(0, g.processes[3].threads[0].ethread);
    let mem = guest_memory(&g.phys);
    let c = aware
        .identify(0, &mut v, &mem, &sample(&g, 0, 0, 3, false))
        .map(|w| (w.at, w.process_name.clone()))
        .unwrap();
    assert_eq!(c.1, "c.exe");
    let c = c.0;
    let d = g.replace(3, "d.exe");
    g.switch(0, g.processes[d].threads[0].ethread);
    let mem = guest_memory(&g.phys);
    let dw = aware
        .identify(0, &mut v, &mem, &sample(&g, 0, 0, d, false))
        .map(|w| (w.at, w.process_name.clone()))
        .unwrap();
    assert_eq!(dw.1, "d.exe");
    assert_ne!(dw.0.process, c.process);
    assert_ne!(dw.0.thread, c.thread);
    let (processes, _) = aware.table().rows();
    assert_eq!(
        processes[dw.0.process as usize].cr3s, processes[c.process as usize].cr3s,
        "one DTB, two processes"
    );
}

#[test]
fn the_process_list_is_walked_once_a_layout_is_known_and_takes_in_the_earlier_rows() {
    use introspect::testguest::windows::{ntproc_layout, WindowsGuest};
    let g = WindowsGuest::new(&ntproc_layout());
    let mem = guest_memory(&g.phys);
    let aware = GuestAwareness::new(1, Instant::now());
    aware.set_types(GuestTypes::Windows(g.layout));
    let mut v = VcpuGuest::default();
    // Before the kernel is found: a kernel-mode sample in System's address space and a
    // user-mode one in a.exe's get address-space rows.
    let system = aware
        .identify(0, &mut v, &mem, &sample(&g, 0, 0, 0, false))
        .map(|w| w.at)
        .unwrap();
    let a = aware
        .identify(0, &mut v, &mem, &sample(&g, 0, 3, 1, false))
        .map(|w| w.at)
        .unwrap();
    let names = |p: &[report::profile::ProcessInfo]| -> Vec<String> {
        let mut n: Vec<String> = p.iter().map(|r| r.name.clone()).collect();
        n.sort();
        n
    };
    let (p, _) = aware.table().rows();
    assert_eq!(
        names(&p),
        [
            format!("[cr3 {:#x}]", g.processes[0].dtb),
            format!("[cr3 {:#x}]", g.processes[1].dtb)
        ]
    );
    // The kernel is found: the next kernel-mode sample walks PsActiveProcessHead.
    aware.kernel_found(g.os().load_bias, None);
    let who = aware.identify(0, &mut v, &mem, &sample(&g, 0, 0, 0, false));
    assert_eq!(who.map(|w| w.process_name.as_str()), Some("System"));
    let (p, t) = aware.table().rows();
    assert_eq!(
        names(&p),
        ["System", "a.exe", "b.exe", "c.exe"],
        "no [cr3 ..] row is left"
    );
    let row = |name: &str| p.iter().find(|r| r.name == name).unwrap();
    assert_eq!(t[system.thread as usize].process, row("System").key);
    assert_eq!(t[a.thread as usize].process, row("a.exe").key);
    assert_eq!(row("a.exe").pid, Some(g.processes[1].facts.key.id));
    // b.exe and c.exe never ran in a sample: listed, without threads.
    for name in ["b.exe", "c.exe"] {
        assert!(t.iter().all(|th| th.process != row(name).key), "{name}");
    }
    // The walk at the end finds nothing new.
    assert_eq!(aware.walk_at_end(&mem), Some(Default::default()));
}

#[test]
fn without_a_layout_nothing_is_walked() {
    let aware = GuestAwareness::new(1, Instant::now());
    let mut v = VcpuGuest::default();
    aware.identify(0, &mut v, &mem(), &cpu(0x5000, 0));
    assert_eq!(aware.walk_at_end(&mem()), None);
    assert_eq!(aware.table().rows().0.len(), 1);
}

#[test]
fn a_wow64_process_lists_its_64_bit_and_its_x86_dlls() {
    use introspect::testguest::windows::{ntproc_layout, WindowsGuest};
    let mut g = WindowsGuest::new(&ntproc_layout());
    let w = g.add_wow64_process("legacy32.exe");
    let aware = GuestAwareness::new(2, Instant::now());
    aware.set_types(GuestTypes::Windows(g.layout));
    aware.kernel_found(g.os().load_bias, None);
    let mut v = VcpuGuest::default();
    let mem = guest_memory(&g.phys);
    aware.identify(0, &mut v, &mem, &sample(&g, 0, 0, 0, false));
    g.switch(0, g.processes[w].threads[0].ethread);
    let mem = guest_memory(&g.phys);
    let who = aware.identify(0, &mut v, &mem, &sample(&g, 0, 0, w, false));
    assert_eq!(who.map(|w| w.process_name.as_str()), Some("legacy32.exe"));
    let p = &g.processes[w];
    let found: Vec<_> = aware
        .user_modules()
        .into_iter()
        .map(|m| (m.process, m.image.base, m.name.unwrap_or_default()))
        .collect();
    // The 64-bit list (the executable, ntdll and WOW64's DLLs), then the x86 DLLs from the
    // 32-bit PEB's list, the executable not twice.
    let mut want: Vec<_> = p
        .modules
        .iter()
        .chain(p.wow64_modules.iter().skip(1))
        .map(|m| (Some(p.dtb), m.base, m.name.clone()))
        .collect();
    want.dedup();
    assert_eq!(found, want);
    assert!(found
        .iter()
        .any(|m| m.2 == "KERNELBASE.dll" && m.1 < 1 << 32));
}

/// Linux: the first kernel-mode sample with the layout walks `init_task.tasks`, so processes
/// that never ran in a sample are listed (without threads); the walk at the end adds a
/// process started since.
#[test]
fn linux_processes_are_listed_from_init_task_before_their_first_sample() {
    use introspect::testguest::linux::{test_layout, LinuxGuest};
    let mut g = LinuxGuest::new(&test_layout(false));
    let aware = GuestAwareness::new(2, Instant::now());
    aware.set_types(GuestTypes::Linux(g.layout));
    let mut v = VcpuGuest::default();
    let regs = g.regs(0, 0, false);
    let kernel = CpuState {
        cpl: 0,
        paging: g.kernel_paging(),
        gs_base: regs.gs_base,
        ..CpuState::default()
    };
    let mem = guest_memory(&g.phys);
    let who = aware.identify(0, &mut v, &mem, &kernel);
    assert_eq!(who.map(|w| w.process_name.as_str()), Some("[swapper/0]"));
    let names = |aware: &GuestAwareness| -> Vec<String> {
        let mut n: Vec<String> = aware.table().rows().0.into_iter().map(|r| r.name).collect();
        n.sort();
        n
    };
    assert_eq!(names(&aware), ["[kworker/0:1]", "[swapper/0]", "awk", "sh"]);
    let (p, t) = aware.table().rows();
    let sh = p.iter().find(|r| r.name == "sh").unwrap();
    assert_eq!(sh.pid, Some(1));
    assert!(t.iter().all(|th| th.process != sh.key), "sh never ran");
    // A process that exits, its task_struct reused by another: the end's walk lists it.
    g.reuse(3, 77, "dd");
    let mem = guest_memory(&g.phys);
    assert_eq!(aware.walk_at_end(&mem).map(|l| l.added), Some(1));
    assert!(names(&aware).contains(&"dd".to_string()));
}

/// Linux, by a symbol pack: the first long-mode kernel-mode sample hands guest memory to the
/// lookup thread, which scans it for the banner, looks the banner up and publishes the layout
/// with the KASLR slide where the banner is mapped; the Windows lookup is then given up.
#[test]
fn a_linux_kernel_is_found_by_its_banner_and_published_with_its_slide() {
    use introspect::testguest::linux::{test_layout, LinuxGuest};
    use std::sync::Arc;
    const LINK: u64 = 0xffff_ffff_8220_0100;
    const SLIDE: u64 = 0x1a00_0000;
    const BANNER: &[u8] = b"Linux version 6.1.0-test (hvprof@test) (gcc 12) #1 SMP\n";
    let mut g = LinuxGuest::new(&test_layout(false));
    let paging = g.kernel_paging();
    // The banner in the kernel's read-only data, mapped where KASLR put it; a copy of it in the
    // kernel log and the format /proc/version prints with, unmapped.
    let rodata = g.phys.alloc();
    g.phys.write_phys(rodata + 0x100, &[BANNER, b"\0"].concat());
    g.phys.map(paging.cr3, (LINK + SLIDE) & !0xfff, rodata);
    let log = g.phys.alloc();
    g.phys.write_phys(log + 0x40, &[BANNER, b"\0"].concat());
    g.phys.write_phys(log + 0x400, b"Linux version %s (%s)\n\0");
    let layout = g.layout;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let linux: LinuxLookup = Box::new(move |banners: &[Vec<u8>], _: &dyn Fn() -> bool| {
        *s.lock().unwrap() = banners.to_vec();
        let banner = banners
            .iter()
            .position(|b| b.as_slice() == BANNER)
            .ok_or("no match")?;
        Ok(LinuxMatch {
            file: report::symbols::packs::PackFile::File("6.1.0-test.json.xz".into()),
            banner,
            layout,
            banner_address: Some(LINK),
        })
    });
    let windows: WindowsLookup = Box::new(|_: &CodeView| panic!("not a Windows guest"));
    let aware = Arc::new(GuestAwareness::new(1, Instant::now()));
    let t = serve(
        &aware,
        Lookup {
            windows: Some(windows),
            linux: Some(linux),
        },
    );
    let mem = guest_memory(&g.phys);
    let regs = g.regs(0, 0, false);
    let sample = |cpl: u8, paging: Paging| CpuState {
        cpl,
        paging,
        gs_base: regs.gs_base,
        ..CpuState::default()
    };
    let mut v = VcpuGuest::default();
    // User mode, or a kernel not in long mode: nothing is scanned yet.
    aware.identify(0, &mut v, &mem, &sample(3, paging));
    let legacy = Paging { efer: 0, ..paging };
    aware.identify(0, &mut v, &mem, &sample(0, legacy));
    assert!(aware.linux_pending.load(Ordering::Relaxed));
    aware.identify(0, &mut v, &mem, &sample(0, paging));
    assert!(!aware.linux_pending.load(Ordering::Relaxed));
    t.join().unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [BANNER.to_vec(), b"Linux version %s (%s)\n".to_vec()]
    );
    assert_eq!(
        aware.os(),
        Some(GuestOs {
            layout: OsLayout::Linux(layout),
            load_bias: SLIDE
        })
    );
    assert!((0..2 * LSTAR_PERIOD).all(|_| !aware.wanted_msrs(0).lstar));
    // Its threads are named from the next sample on.
    let who = aware.identify(0, &mut v, &mem, &sample(0, paging));
    assert_eq!(who.map(|w| w.process_name.as_str()), Some("[swapper/0]"));
}

/// A guest whose memory holds no Linux banner: the Linux lookup is not asked, and the
/// Windows kernel found later is still looked up.
#[test]
fn a_guest_without_a_linux_banner_leaves_the_windows_lookup_waiting() {
    use introspect::testguest::long_mode;
    use std::sync::Arc;
    let aware = Arc::new(GuestAwareness::new(1, Instant::now()));
    let linux: LinuxLookup =
        Box::new(|_: &[Vec<u8>], _: &dyn Fn() -> bool| panic!("no banner to look up"));
    let windows: WindowsLookup = Box::new(|_: &CodeView| Ok(WindowsLayout::default()));
    let t = serve(
        &aware,
        Lookup {
            windows: Some(windows),
            linux: Some(linux),
        },
    );
    let mem = mem();
    let mut v = VcpuGuest::default();
    aware.identify(0, &mut v, &mem, &cpu(0x5000, 0));
    let mut kernel = cpu(0x5000, 0);
    kernel.paging = long_mode(0x5000);
    aware.identify(0, &mut v, &mem, &kernel);
    assert!(!aware.linux_pending.load(Ordering::Relaxed));
    let cv = CodeView {
        pdb: "ntkrnlmp.pdb".into(),
        guid: "0".repeat(32),
        age: 1,
    };
    aware.kernel_found(0xffff_f800_0010_0000, Some(cv));
    t.join().unwrap();
    assert!(matches!(
        aware.os(),
        Some(GuestOs {
            layout: OsLayout::Windows(_),
            ..
        })
    ));
}

/// A vCPU checks a user-mode PC against its copy of the process's executable ranges, and
/// takes a new copy when any process's ranges change; a process with none read is left to
/// the reads on switches; one with a build id still to read is read again.
#[test]
fn user_pcs_are_checked_against_the_processes_mapped_ranges() {
    use std::sync::atomic::Ordering;
    let aware = GuestAwareness::new(1, Instant::now());
    let mut m = linux_maps::VcpuMapped::default();
    assert!(aware.pc_mapped(&mut m, 3, 0x1234), "nothing read yet");
    let set_with = |ranges: Vec<std::ops::Range<u64>>, ids_pending: bool| {
        let mapped = linux_maps::Mapped {
            ranges: ranges.into(),
            ids_pending,
        };
        aware.linux_mapped.write().unwrap().insert(3, mapped.into());
        aware.mapped_generation.fetch_add(1, Ordering::Release);
    };
    let set = |ranges| set_with(ranges, false);
    set(vec![
        0x40_1000..0x58_5000,
        0x7fff_f7fc_3000..0x7fff_f7fe_9000,
    ]);
    assert!(aware.pc_mapped(&mut m, 3, 0x40_1000));
    assert!(aware.pc_mapped(&mut m, 3, 0x7fff_f7fe_8fff));
    assert!(!aware.pc_mapped(&mut m, 3, 0x58_5000));
    assert!(
        !aware.pc_mapped(&mut m, 3, 0x7fff_f7d0_0000),
        "libc, not mapped yet"
    );
    assert!(
        aware.pc_mapped(&mut m, 4, 0x7fff_f7d0_0000),
        "another process, none read"
    );
    set(vec![
        0x40_1000..0x58_5000,
        0x7fff_f7d0_0000..0x7fff_f7e0_0000,
        0x7fff_f7fc_3000..0x7fff_f7fe_9000,
    ]);
    assert!(aware.pc_mapped(&mut m, 3, 0x7fff_f7d0_0000), "read again");
    // A file's first page was not in memory: its build id is read again at a user-mode
    // sample, inside its ranges too.
    set_with(
        vec![0x40_1000..0x58_5000, 0x7fff_f7d0_0000..0x7fff_f7e0_0000],
        true,
    );
    assert!(!aware.pc_mapped(&mut m, 3, 0x40_1000), "a build id to read");

    // A stack's return address into a library mapped since the read (main's caller in libc,
    // under every leaf sample): the next user-mode sample in the process reads the mappings
    // again; once.
    set(std::iter::once(0x40_1000..0x58_5000).collect());
    aware.note_user_frames(&mut m, 3, &[0x40_2000, 0xffff_ffff_8100_0000]);
    assert!(
        aware.pc_mapped(&mut m, 3, 0x40_1000),
        "every frame mapped, or kernel"
    );
    aware.note_user_frames(&mut m, 3, &[0x40_2000, 0x7fff_f7d2_924a]);
    assert!(!aware.pc_mapped(&mut m, 3, 0x40_1000), "a frame in libc");
    assert!(aware.pc_mapped(&mut m, 3, 0x40_1000), "once");
    aware.note_user_frames(&mut m, 3, &[0x7fff_f7d2_924a]);
    assert!(
        aware.pc_mapped(&mut m, 4, 0x40_1000),
        "another process's sample: none read, and process 3's note is not its"
    );
}

/// A thread that execs between two samples on one vCPU keeps its task_struct and gets a new
/// mm: its next sample is the new program's process row, even with no switch in between (the
/// old row would otherwise take the new program's samples, and read its mappings).
#[test]
fn a_linux_exec_between_two_samples_is_a_new_process() {
    use introspect::testguest::linux::{test_layout, LinuxGuest};
    let mut g = LinuxGuest::new(&test_layout(false));
    let aware = GuestAwareness::new(1, Instant::now());
    aware.set_types(GuestTypes::Linux(g.layout));
    let mut v = VcpuGuest::default();
    let awk = (g.tasks.iter())
        .position(|t| t.identity.process.name == "awk")
        .unwrap();
    g.switch(0, g.tasks[awk].task);
    let sampled = |g: &LinuxGuest, v: &mut VcpuGuest| {
        let regs = g.regs(0, 0, true);
        let cpu = CpuState {
            cpl: 0,
            paging: Paging {
                cr3: g.tasks[awk].identity.process.cr3s[0],
                ..g.kernel_paging()
            },
            gs_base: regs.gs_base,
            kernel_gs_base: regs.kernel_gs_base,
            ..CpuState::default()
        };
        let who = aware.identify(0, v, &guest_memory(&g.phys), &cpu).unwrap();
        (who.at.process, who.process_name.clone())
    };
    let before = sampled(&g, &mut v);
    assert_eq!(before.1, "awk");
    g.exec(awk, "burn");
    let after = sampled(&g, &mut v);
    assert_eq!(after.1, "burn");
    assert_ne!(after.0, before.0, "a new process row");
    let rows = aware.table().rows().0;
    let row = |p: u32| (rows[p as usize].name.as_str(), rows[p as usize].pid);
    assert_eq!(
        (row(before.0), row(after.0)),
        (("awk", Some(57)), ("burn", Some(57)))
    );
}
