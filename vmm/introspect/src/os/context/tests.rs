//! Scripted samples through [`GuestContext`] on the synthetic guests: every sample's identity
//! exact, what each kind of sample costs in reads, and hostile per-CPU areas and pointers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

use super::*;
use crate::os::ProcessKey;
use crate::testguest::linux::{test_layout, LinuxGuest};
use crate::testguest::windows::{ntproc_layout, WindowsGuest};
use crate::testguest::Counting;

/// One context per vCPU of a Windows guest.
fn contexts(os: GuestOs) -> [GuestContext; 2] {
    [GuestContext::new(os), GuestContext::new(os)]
}

/// Identifies a sample of `vcpu` at `cpl` on the Windows guest, giving IA32_KERNEL_GS_BASE
/// only when the context asks for it (as the VMM does); returns the identity and the reads.
fn sample_windows(
    g: &WindowsGuest,
    ctx: &mut GuestContext,
    vcpu: usize,
    cpl: u8,
) -> (Result<Identity, IdentifyError>, usize) {
    let regs = g.regs(vcpu, cpl, ctx.wants_kernel_gs_base());
    let mut mem = Counting {
        inner: g.kmem(),
        reads: 0,
    };
    let r = ctx.identify(&mut mem, &regs).cloned();
    (r, mem.reads)
}

#[test]
fn every_scripted_windows_sample_is_identified_exactly() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctxs = contexts(g.os());
    // (vCPU, process, thread, CPL) per sample; process 4 is D, once C has exited.
    let mut script = Vec::new();
    for round in 0..40usize {
        let p = 1 + round % 3;
        script.push((round % 2, p, round / 3 % 2, u8::from(round % 5 != 0) * 3));
        script.push((round % 2, p, round / 3 % 2, 3));
        script.push(((round + 1) % 2, 0, 0, 0));
    }
    let split = script.len() / 2;
    let mut want: BTreeMap<ProcessKey, usize> = BTreeMap::new();
    let mut got: BTreeMap<ProcessKey, usize> = BTreeMap::new();
    let mut no_base = 0;
    for (n, &(v, p, t, cpl)) in script.iter().enumerate() {
        if n == split {
            g.replace(3, "d.exe");
        }
        let p = if n >= split && p == 3 { 4 } else { p };
        let truth = g.processes[p].identity(t);
        g.switch(v, truth.thread.key.object);
        let (r, _) = sample_windows(&g, &mut ctxs[v], v, cpl);
        let id = match r {
            Err(IdentifyError::NoPerCpuBase) => {
                // The first CPL3 sample of a vCPU: the next one carries KERNEL_GS_BASE.
                assert!(ctxs[v].wants_kernel_gs_base());
                no_base += 1;
                sample_windows(&g, &mut ctxs[v], v, cpl).0.unwrap()
            }
            r => r.unwrap(),
        };
        assert!(!ctxs[v].wants_kernel_gs_base());
        assert_eq!(id, truth, "sample {n}");
        *want.entry(truth.process.key).or_default() += 1;
        *got.entry(id.process.key).or_default() += 1;
    }
    assert_eq!(got, want);
    assert_eq!(got.len(), 5, "System, A, B, C and D");
    assert!(no_base <= 2);
    let (c, d) = (&g.processes[3].facts, &g.processes[4].facts);
    assert_eq!((c.key.object, &c.cr3s), (d.key.object, &d.cr3s));
    assert!(got[&c.key] > 0 && got[&d.key] > 0);
    let s = ctxs[0].stats();
    assert!(s.hits > 0 && s.reads > 0, "{s:?}");
}

#[test]
fn a_repeated_thread_costs_two_reads_and_a_flipping_one_a_bounded_few() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctx = GuestContext::new(g.os());
    let a = g.processes[1].clone();
    g.switch(0, a.threads[0].ethread);
    let (r, first) = sample_windows(&g, &mut ctx, 0, 0);
    assert_eq!(r.unwrap(), a.identity(0));
    assert!(first <= 20, "a first sample reads {first}");
    let mut costs = Vec::new();
    for _ in 0..2 * RECHECK_EVERY {
        let (r, reads) = sample_windows(&g, &mut ctx, 0, 3);
        assert_eq!(r.unwrap(), a.identity(0));
        costs.push(reads);
    }
    // Two reads (the pointer, the thread's create time), and a re-check now and then.
    // (RECHECK_EVERY fast samples, then one re-check, then the rest fast.)
    let rechecks = costs.iter().filter(|&&c| c != 2).count();
    assert_eq!(rechecks, 1, "{costs:?}");
    assert!(costs.iter().all(|&c| c <= 10));
    // The pointer flips every sample between two threads: each is re-checked, never re-read.
    let before = ctx.stats();
    for n in 0..200 {
        g.switch(0, a.threads[n % 2].ethread);
        let (r, reads) = sample_windows(&g, &mut ctx, 0, 0);
        assert_eq!(r.unwrap(), a.identity(n % 2));
        // The second thread's first sample reads it in full; every other one re-checks.
        assert!(reads <= if n == 1 { 20 } else { 9 }, "{n}: {reads}");
    }
    let after = ctx.stats();
    assert_eq!(
        after.reads - before.reads,
        1,
        "only the second thread is read in full"
    );
    assert_eq!(after.hits - before.hits, 199);
}

#[test]
fn a_reused_ethread_is_a_new_thread_at_once() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctx = GuestContext::new(g.os());
    let c = g.processes[3].clone();
    g.switch(0, c.threads[0].ethread);
    assert_eq!(sample_windows(&g, &mut ctx, 0, 0).0.unwrap(), c.identity(0));
    // C exits, D's first thread takes C's ETHREAD: the next sample sees the same pointer.
    let d = g.replace(3, "d.exe");
    let d = g.processes[d].clone();
    assert_eq!(d.threads[0].ethread, c.threads[0].ethread);
    let id = sample_windows(&g, &mut ctx, 0, 0).0.unwrap();
    assert_eq!(id, d.identity(0));
    assert_ne!(id.process.key, c.facts.key);
}

#[test]
fn a_per_cpu_base_that_stops_checking_out_is_dropped() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctx = GuestContext::new(g.os());
    let k = g.kpcrs[0];
    // KPCR.Self mismatch: refused at once at CPL0 and with KERNEL_GS_BASE.
    let mut bad = g.clone();
    bad.write_u64(k + u64::from(bad.layout.kpcr.self_), k + 0x1000);
    let mut c2 = GuestContext::new(g.os());
    let r = c2
        .identify(&mut bad.kmem(), &bad.regs(0, 0, false))
        .cloned();
    assert_eq!(r, Err(IdentifyError::BadPerCpuBase(k)));
    let r = c2.identify(&mut bad.kmem(), &bad.regs(0, 3, true)).cloned();
    assert_eq!(r, Err(IdentifyError::BadPerCpuBase(k)));
    assert!(c2.wants_kernel_gs_base());
    assert_eq!(c2.stats().failures, 2);

    // A cached base is trusted for BASE_CHECK_EVERY samples, then checked again.
    assert!(sample_windows(&g, &mut ctx, 0, 0).0.is_ok());
    g.write_u64(k + u64::from(g.layout.kpcr.self_), 0);
    for n in 0..BASE_CHECK_EVERY {
        assert!(sample_windows(&g, &mut ctx, 0, 3).0.is_ok(), "{n}");
    }
    assert_eq!(
        sample_windows(&g, &mut ctx, 0, 3).0,
        Err(IdentifyError::BadPerCpuBase(k))
    );
    assert!(ctx.wants_kernel_gs_base());
    assert_eq!(
        sample_windows(&g, &mut ctx, 0, 3).0,
        Err(IdentifyError::BadPerCpuBase(k))
    );
}

#[test]
fn hostile_thread_pointers_fail_the_sample_only() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctx = GuestContext::new(g.os());
    let a = g.processes[1].clone();
    for bad in [0x7ff6_0000_1000, 0, a.threads[0].ethread + 4, u64::MAX] {
        g.switch(0, bad);
        let (r, reads) = sample_windows(&g, &mut ctx, 0, 0);
        assert!(r.is_err(), "{bad:#x}");
        assert!(reads <= 4);
    }
    g.switch(0, a.threads[1].ethread);
    assert_eq!(sample_windows(&g, &mut ctx, 0, 0).0.unwrap(), a.identity(1));
    assert_eq!(ctx.stats().failures, 4);
    // A gs base at CPL3 is a TEB, never taken for the KPCR; CPL0 with a user GS (before
    // SWAPGS) uses the cached base.
    let mut fresh = GuestContext::new(g.os());
    let mut regs = g.regs(0, 0, false);
    regs.gs_base = crate::testguest::windows::TEB;
    assert_eq!(
        fresh.identify(&mut g.kmem(), &regs).cloned(),
        Err(IdentifyError::NoPerCpuBase)
    );
    assert!(fresh.wants_kernel_gs_base());
    assert!(ctx.identify(&mut g.kmem(), &regs).is_ok());
}

#[test]
fn scripted_linux_samples_follow_switches_renames_execs_and_reuse() {
    for hot in [false, true] {
        let mut g = LinuxGuest::new(&test_layout(hot));
        let mut ctx = GuestContext::new(g.os());
        let check = |g: &LinuxGuest, ctx: &mut GuestContext, i: usize, cpl: u8| {
            let regs = g.regs(0, cpl, ctx.wants_kernel_gs_base());
            let r = match ctx.identify(&mut g.kmem(), &regs).cloned() {
                Err(IdentifyError::NoPerCpuBase) => {
                    ctx.identify(&mut g.kmem(), &g.regs(0, cpl, true)).cloned()
                }
                r => r,
            };
            assert_eq!(r.unwrap(), g.tasks[i].identity, "task {i}");
        };
        for i in [0, 2, 3, 4, 5, 4, 5, 0, 3] {
            let t = g.tasks[i].task;
            g.switch(0, t);
            check(&g, &mut ctx, i, if i >= 3 { 3 } else { 0 });
        }
        // awk-io renames itself while running: seen within RECHECK_EVERY samples.
        let t = g.tasks[5].task;
        g.switch(0, t);
        check(&g, &mut ctx, 5, 3);
        g.rename(5, "awk-compress");
        let mut seen = None;
        for n in 0..=RECHECK_EVERY {
            let regs = g.regs(0, 3, false);
            let id = ctx.identify(&mut g.kmem(), &regs).unwrap();
            if id.thread.name.as_deref() == Some("awk-compress") {
                seen = Some(n);
                break;
            }
        }
        assert!(seen.is_some());
        check(&g, &mut ctx, 5, 3);
        // awk (the leader) renames itself while not running: seen at the next switch to it.
        g.rename(4, "gawk");
        let t = g.tasks[4].task;
        g.switch(0, t);
        check(&g, &mut ctx, 4, 3);
        // sh execs busybox: a new mm, a new process.
        let before = g.tasks[3].identity.process.key;
        g.exec(3, "busybox");
        let t = g.tasks[3].task;
        g.switch(0, t);
        check(&g, &mut ctx, 3, 3);
        assert_ne!(g.tasks[3].identity.process.key, before);
        // busybox execs ls while it runs: ls's from the next sample, with no switch between.
        g.exec(3, "ls");
        check(&g, &mut ctx, 3, 3);
        // sh's task_struct is freed and a new process takes it at once: same pointer.
        let new = g.reuse(3, 99, "seq");
        check(&g, &mut ctx, new, 3);
        assert_eq!(g.tasks[new].task, g.tasks[3].task);
    }
}

#[test]
fn the_thread_cache_is_emptied_when_full() {
    // MAX_CACHED_THREADS + 1 thread pointers: one ETHREAD's pages mapped at that many places.
    let mut g = WindowsGuest::new(&ntproc_layout());
    let a = g.processes[1].clone();
    let t = a.threads[0].ethread;
    let frames = [0, 0x1000]
        .map(|o| crate::Memory::physical(&mut g.kmem(), (t & !0xfff) + o).unwrap() & !0xfff);
    let alias = |i: usize| 0xffff_b000_0000_0000 + 0x2000 * i as u64;
    for i in 0..=MAX_CACHED_THREADS {
        g.phys.map(g.kernel_cr3, alias(i), frames[0]);
        g.phys.map(g.kernel_cr3, alias(i) + 0x1000, frames[1]);
    }
    let ptr = |i: usize| alias(i) + (t & 0xfff);
    let mut ctx = GuestContext::new(g.os());
    let visit = |g: &mut WindowsGuest, ctx: &mut GuestContext, i: usize| {
        g.switch(0, ptr(i));
        let id = sample_windows(g, ctx, 0, 0).0.unwrap();
        let mut want = a.identity(0);
        want.thread.key.object = ptr(i);
        assert_eq!(id, want);
    };
    for i in 0..MAX_CACHED_THREADS {
        visit(&mut g, &mut ctx, i);
    }
    assert_eq!(ctx.stats().reads, MAX_CACHED_THREADS as u64);
    visit(&mut g, &mut ctx, 0);
    assert_eq!(ctx.stats().reads, MAX_CACHED_THREADS as u64, "still cached");
    // One more thread: the cache is emptied, so thread 1 is read again.
    visit(&mut g, &mut ctx, MAX_CACHED_THREADS);
    visit(&mut g, &mut ctx, 1);
    assert_eq!(ctx.stats().reads, MAX_CACHED_THREADS as u64 + 2);
}

thread_local! {
    /// Allocations made by this thread so far.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's allocations (so a test can show that a path
/// allocates nothing whatever other tests do at the same time).
struct CountingAllocator;

// SAFETY: every call goes to the system allocator unchanged; the count is a thread-local Cell
// without a destructor, which touching never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller keeps GlobalAlloc::alloc's contract, which is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from System.alloc (above) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn cache_hits_and_re_checks_allocate_nothing() {
    let mut g = WindowsGuest::new(&ntproc_layout());
    let mut ctx = GuestContext::new(g.os());
    let a = g.processes[1].clone();
    let threads = [a.threads[0].ethread, a.threads[1].ethread];
    for &t in &threads {
        g.switch(0, t);
        assert!(ctx.identify(&mut g.kmem(), &g.regs(0, 0, false)).is_ok());
    }
    let before = allocations();
    for n in 0..3 * RECHECK_EVERY as usize {
        // Runs of 3 samples of one thread, then the other: hits, re-checks and fast paths.
        g.switch(0, threads[n / 3 % 2]);
        assert!(ctx.identify(&mut g.kmem(), &g.regs(0, 3, false)).is_ok());
    }
    assert_eq!(allocations() - before, 0, "Windows");

    let mut g = LinuxGuest::new(&test_layout(true));
    let mut ctx = GuestContext::new(g.os());
    let tasks = [g.tasks[4].task, g.tasks[5].task];
    for &t in &tasks {
        g.switch(0, t);
        assert!(ctx.identify(&mut g.kmem(), &g.regs(0, 0, false)).is_ok());
    }
    let before = allocations();
    for n in 0..3 * RECHECK_EVERY as usize {
        g.switch(0, tasks[n / 3 % 2]);
        assert!(ctx.identify(&mut g.kmem(), &g.regs(0, 3, false)).is_ok());
    }
    assert_eq!(allocations() - before, 0, "Linux");
    // The count works: a full read allocates (the names).
    g.switch(0, g.tasks[3].task);
    let before = allocations();
    assert!(ctx.identify(&mut g.kmem(), &g.regs(0, 0, false)).is_ok());
    assert!(allocations() > before);
}
