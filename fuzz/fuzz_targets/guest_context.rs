//! Naming a sample's thread over hostile guest memory: a synthetic Windows or Linux guest
//! (real page tables, the walkers' layouts) whose memory the input corrupts, then a sequence
//! of samples through two vCPUs' `GuestContext`s. Each sample must end, read guest memory a
//! bounded number of times (counted), never panic, and, when a fresh context can name the
//! sample too, name it the same (the caches change nothing). The process list and each PEB's
//! loader list (and the WOW64 process's 32-bit PEB's) are walked over the corrupted memory as
//! well, within their bounds.
//!
//! Input: byte 0 picks the guest (bit 0: Linux; bit 1: Linux with pcpu_hot; bit 2: Windows
//! without ThreadName/UserDirectoryTableBase), byte 1 the number of corruptions (up to 32),
//! each `kind, target, offset (2), length, bytes`, then samples of 2 bytes each:
//! `vCPU | CPL3 << 1 | with IA32_KERNEL_GS_BASE << 2`, and the CPU area whose GS it has.
#![no_main]

use introspect::os::windows::{process_modules, processes, MAX_PROCESSES, MAX_USER_MODULES};
use introspect::os::{GuestContext, GuestOs, ProcessFacts, SampleRegs};
use introspect::testguest::linux::{test_layout, LinuxGuest};
use introspect::testguest::windows::{ntproc_layout, WindowsGuest, NT_BASE};
use introspect::testguest::{Counting, PhysMem, Space};
use introspect::Memory;
use libfuzzer_sys::fuzz_target;

/// Most reads one sample may take: the per-CPU check, the pointer, the fast-path time, a
/// re-check and a full read of a thread and its process, with room to spare.
const MAX_READS: usize = 40;

/// A guest reduced to what the target needs.
struct Guest {
    phys: PhysMem,
    kernel_cr3: u64,
    os: GuestOs,
    /// Each CPU area's GS value (one per thread, each running it).
    areas: Vec<u64>,
    /// Kernel objects the corruptions aim at.
    objects: Vec<u64>,
    /// Windows: each user process (its DTB and facts).
    pebs: Vec<(u64, ProcessFacts)>,
}

fn windows(plain: bool) -> Guest {
    let mut layout = ntproc_layout();
    if plain {
        layout.ethread.thread_name = None;
        layout.eprocess.user_directory_table_base = None;
    }
    let mut g = WindowsGuest::new(&layout);
    // A 32-bit process: its 32-bit PEB and list are in user space, where corruptions of
    // physical memory (kind 1) reach them.
    g.add_wow64_process("legacy32.exe");
    let threads = g.threads();
    for &t in &threads {
        let cpu = g.add_cpu();
        g.switch(cpu, t);
    }
    let mut objects = g.kpcrs.clone();
    objects.extend(&threads);
    objects.extend(g.processes.iter().map(|p| p.facts.key.object));
    objects.push(NT_BASE + u64::from(layout.symbols.ps_active_process_head));
    let pebs = g
        .processes
        .iter()
        .filter(|p| p.facts.peb != 0)
        .map(|p| (p.dtb, p.facts.clone()))
        .collect();
    Guest {
        os: g.os(),
        kernel_cr3: g.kernel_cr3,
        areas: g.kpcrs.clone(),
        objects,
        pebs,
        phys: g.phys,
    }
}

fn linux(hot: bool) -> Guest {
    let mut g = LinuxGuest::new(&test_layout(hot));
    let tasks: Vec<u64> = g.tasks.iter().map(|t| t.task).collect();
    for &t in &tasks {
        let cpu = g.add_cpu();
        g.switch(cpu, t);
    }
    let mut objects = g.per_cpu.clone();
    objects.extend(&tasks);
    objects.extend(g.tasks.iter().map(|t| t.identity.process.key.space));
    Guest {
        os: g.os(),
        kernel_cr3: g.kernel_cr3,
        areas: g.per_cpu.clone(),
        objects,
        pebs: Vec::new(),
        phys: g.phys,
    }
}

fn kmem(g: &Guest) -> Counting<Space<'_>> {
    Counting {
        inner: g.phys.space(g.kernel_cr3),
        reads: 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let mut g = if which & 1 == 1 {
        linux(which & 2 != 0)
    } else {
        windows(which & 4 != 0)
    };
    // Corruptions: of a kernel object (by its virtual address) or of physical memory (the
    // page tables included).
    let n = rest.first().map_or(0, |&n| n % 33);
    rest = rest.get(1..).unwrap_or_default();
    for _ in 0..n {
        let [kind, target, lo, hi, len, ..] = *rest else {
            break;
        };
        let len = usize::from(len % 17);
        let Some(bytes) = rest.get(5..5 + len) else {
            break;
        };
        let offset = u64::from(u16::from_le_bytes([lo, hi]));
        if kind & 1 == 0 {
            // Only where the kernel maps memory (nothing is mapped anew).
            let object = g.objects[usize::from(target) % g.objects.len()];
            for (i, &b) in bytes.iter().enumerate() {
                let va = object.wrapping_add(offset).wrapping_add(i as u64);
                let pa = g.phys.space(g.kernel_cr3).physical(va);
                if let Some(pa) = pa.filter(|&pa| pa < g.phys.used()) {
                    g.phys.write_phys(pa, &[b]);
                }
            }
        } else {
            let at = (u64::from(target) << 16 | offset) % g.phys.used();
            let at = usize::try_from(at).unwrap();
            let end = (at + len).min(g.phys.used() as usize);
            g.phys.bytes_mut()[at..end].copy_from_slice(&bytes[..end - at]);
        }
        rest = &rest[5 + len..];
    }

    let mut warm = [GuestContext::new(g.os), GuestContext::new(g.os)];
    for s in rest.chunks_exact(2).take(256) {
        let (flags, area) = (s[0], g.areas[usize::from(s[1]) % g.areas.len()]);
        let vcpu = usize::from(flags & 1);
        let cpl = if flags & 2 != 0 { 3 } else { 0 };
        let regs = SampleRegs {
            cpl,
            gs_base: if cpl == 0 {
                area
            } else {
                0x0000_00e1_5f4d_0000
            },
            kernel_gs_base: (flags & 4 != 0).then_some(area),
        };
        let mut mem = kmem(&g);
        let got = warm[vcpu].identify(&mut mem, &regs).cloned();
        assert!(mem.reads <= MAX_READS, "{} reads", mem.reads);
        let mut mem = kmem(&g);
        let cold = GuestContext::new(g.os).identify(&mut mem, &regs).cloned();
        assert!(mem.reads <= MAX_READS, "{} reads cold", mem.reads);
        if let (Ok(got), Ok(cold)) = (&got, &cold) {
            assert_eq!(got, cold, "the caches changed an identity");
        }
        if let Ok(id) = &got {
            assert!(id.process.name.chars().count() <= 17);
            assert!(id.thread.name.as_ref().map_or(0, |n| n.chars().count()) <= 260);
            assert!(id.process.cr3s.len() <= 2);
        }
    }

    if let introspect::os::OsLayout::Windows(layout) = &g.os.layout {
        let list = processes(&mut kmem(&g), layout, NT_BASE, usize::MAX);
        assert!(list.processes.len() <= MAX_PROCESSES);
        for (dtb, facts) in &g.pebs {
            let mut space = g.phys.space(*dtb);
            let list = process_modules(&mut kmem(&g), &mut space, layout, facts, usize::MAX);
            assert!(list.native.modules.len() <= MAX_USER_MODULES);
            let wow64 = list.wow64.as_ref().map_or(0, |l| l.modules.len());
            assert!(wow64 <= MAX_USER_MODULES);
            assert!(list.modules().len() <= 2 * MAX_USER_MODULES);
        }
    }
});
