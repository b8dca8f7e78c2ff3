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

#[test]
fn the_lookup_runs_once_with_the_kernels_codeview_and_publishes_its_layout() {
    let g = std::sync::Arc::new(GuestAwareness::new(1, Instant::now()));
    let seen = std::sync::Arc::new(Mutex::new(None));
    let s = seen.clone();
    let lookup: WindowsLookup = Box::new(move |cv: &CodeView| {
        *s.lock().unwrap() = Some(cv.pdb.clone());
        Ok(WindowsLayout::default())
    });
    let (lookup, found) = g.set_types(GuestTypes::WindowsLookup(lookup)).unwrap();
    let g2 = g.clone();
    let t = std::thread::spawn(move || g2.serve_lookup(lookup, found));
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
    let (lookup, found) = g.set_types(GuestTypes::WindowsLookup(lookup)).unwrap();
    let g2 = g.clone();
    let t = std::thread::spawn(move || g2.serve_lookup(lookup, found));
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
