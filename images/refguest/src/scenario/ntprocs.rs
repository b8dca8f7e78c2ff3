//! `scenario=ntprocs`: processes and threads of a stand-in Windows kernel, for hosts that name
//! a guest's processes, threads and user modules from its kernel's structures. Module 0
//! (hvprof `--initrd`) must be tests/fixtures/pe/ntproc.c linked /fixed into the kernel window
//! with /entry:KiSystemStartup: the boot CPU maps it in kernel space (and so in every address
//! space created afterwards) and calls its entry with a loader block (Microsoft x64), which
//! returns the kernel's services.
//!
//! The kernel first runs its System process's thread at CPL0 for `ntprocs.kms` milliseconds
//! (default 500; time for a host to find the kernel and its PDB). Then four Windows processes,
//! each a refguest address space with its own CR3, run on the boot CPU:
//!
//! | process | pid | threads (tid, name) | runs |
//! |---|---|---|---|
//! | alpha.exe | 1000 | 1004 alpha-main, 1008 alpha-worker | `ntprocs.ms` (3000) |
//! | bravo.exe | 1100 | 1104 bravo-main | `ntprocs.ms` |
//! | charlie.exe | 1200 | 1204 charlie-main | a third of it, then exits |
//! | delta.exe | 1300 | 1304 delta-main | the rest, created when charlie exits |
//! | echo32.exe (WOW64) | 1400 | 1404 echo32-main | `ntprocs.ms` |
//!
//! Round robin over the six threads gives alpha about a third of the time and bravo,
//! charlie-then-delta and echo32 a sixth each. delta reuses charlie's address-space slot (the same CR3),
//! its EPROCESS and its ETHREAD, with a new PID, TID and CreateTime, as Windows may reuse all
//! three. Each process's PEB page (its user data page at USER_DATA) holds the PEB, its loader
//! data and one loader entry per module: the executable over the process's code (all of
//! `.user`) and system DLLs at addresses that are not mapped. The page's last 0x200 bytes are
//! the threads' TEBs (empty), their user-mode GS base.
//!
//! echo32.exe is a 32-bit process as WOW64 runs one: its EPROCESS's WoW64Process points at an
//! `_EWOW64PROCESS` whose Peb is its 32-bit PEB, built in the same page with its own loader
//! list (the executable again, and x86 DLLs under SysWOW64, at addresses that are not mapped),
//! and its thread spends its time in x86 code, in compatibility mode (`user::ntprocs`).
//!
//! At every context switch the scheduler's hook makes the next thread the KPCR's
//! Prcb.CurrentThread (the idle thread when none) and sets the GS bases as Windows keeps them
//! (`gs`): kernel mode GS base = KPCR, user mode GS base = TEB with KERNEL_GS_BASE = KPCR. The
//! guest reads both MSRs back after each switch.
//!
//! Ground truth, printed at the end: each process's and thread's TSC time and timer ticks
//! (the scheduler's), and each loader entry. PASS when every thread exited cleanly, delta ran
//! with charlie's CR3 and EPROCESS, and every GS read-back matched.

use super::{common, Env, Scenario};
use crate::paging::AddressSpace;
use crate::sched::{self, Table};
use crate::start_info::{module, param_u64};
use crate::sync::SpinLock;
use crate::user::{ntprocs as user_work, prof as work, USER_DATA, USER_STACK_PAGES, USER_STACK_TOP};

pub const SCENARIO: Scenario = Scenario { name: "ntprocs", setup, check, control: None };

/// The guest's boot time as a Windows FILETIME (2026-11-26 00:00 UTC, 100 ns since 1601):
/// the System process's CreateTime; later ones add the time since boot.
const BOOT_FILETIME: u64 = 0x01dd_7d39_1468_c000;
/// Iterations of the System thread's loop per call.
const SPIN: u64 = 20_000;
/// ntproc.c's MAX_MODULES and PEB_PAGE_END: the loader entries one process may have, and
/// where the PEB page's part that is the guest's (the TEBs) begins.
const MAX_MODULES: usize = 4;
const PEB_PAGE_END: u64 = 0xe00;
const TEB_SIZE: u64 = 0x100;

#[repr(C)]
#[derive(Clone, Copy)]
struct PspModule {
    name: *const u8,
    base: u64,
    size: u64,
}

#[repr(C)]
struct ProcessParameters {
    slot: u64,
    pid: u64,
    create_time: u64,
    directory_table_base: u64,
    image_file_name: *const u8,
    peb_page: u64,
    peb_page_va: u64,
    module_count: u64,
    modules: [PspModule; MAX_MODULES],
    module32_count: u64,
    modules32: [PspModule; MAX_MODULES],
}

#[repr(C)]
struct ThreadParameters {
    slot: u64,
    tid: u64,
    create_time: u64,
    name: *const u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Services {
    create_process: Option<extern "win64" fn(*const ProcessParameters) -> u64>,
    create_thread: Option<extern "win64" fn(u64, *const ThreadParameters) -> u64>,
    exit_process: Option<extern "win64" fn(u64)>,
    swap_thread: Option<extern "win64" fn(u64, u64) -> u64>,
    spin: Option<extern "win64" fn(u64) -> u64>,
}

#[repr(C)]
struct LoaderBlock {
    processors: u64,
    kernel_directory_table_base: u64,
    boot_time: u64,
    services: Services,
    system_thread: u64,
}

/// A loader entry: `base` 0 is the executable, over all of `.user`.
struct ModuleSpec {
    name: &'static str,
    base: u64,
    size: u64,
}

struct ThreadSpec {
    name: &'static str,
    tid: u64,
    /// Which ETHREAD of the kernel's table.
    slot: u64,
    /// Its work function (`user::ntprocs::work` index).
    work: usize,
}

struct ProcessSpec {
    name: &'static str,
    pid: u64,
    /// Which EPROCESS of the kernel's table (0 is System's).
    slot: u64,
    modules: &'static [ModuleSpec],
    /// A WOW64 process's 32-bit loader list (empty: a 64-bit process).
    modules32: &'static [ModuleSpec],
    threads: &'static [ThreadSpec],
}

const EXE: u64 = 0;
const NTDLL: ModuleSpec = ModuleSpec { name: "ntdll.dll\0", base: 0x7ff8_5000_0000, size: 0x1f_8000 };
const KERNEL32: ModuleSpec = ModuleSpec { name: "kernel32.dll\0", base: 0x7ff8_4000_0000, size: 0xc_0000 };

static PROCESSES: [ProcessSpec; 5] = [
    ProcessSpec {
        name: "alpha.exe\0",
        pid: 1000,
        slot: 1,
        modules: &[ModuleSpec { name: "alpha.exe\0", base: EXE, size: 0 }, NTDLL, KERNEL32],
        modules32: &[],
        threads: &[
            ThreadSpec { name: "alpha-main\0", tid: 1004, slot: 1, work: 0 },
            ThreadSpec { name: "alpha-worker\0", tid: 1008, slot: 2, work: 1 },
        ],
    },
    ProcessSpec {
        name: "bravo.exe\0",
        pid: 1100,
        slot: 2,
        modules: &[
            ModuleSpec { name: "bravo.exe\0", base: EXE, size: 0 },
            NTDLL,
            KERNEL32,
            ModuleSpec { name: "user32.dll\0", base: 0x7ff8_3000_0000, size: 0x1a_0000 },
        ],
        modules32: &[],
        threads: &[ThreadSpec { name: "bravo-main\0", tid: 1104, slot: 3, work: 2 }],
    },
    ProcessSpec {
        name: "charlie.exe\0",
        pid: 1200,
        slot: 3,
        modules: &[ModuleSpec { name: "charlie.exe\0", base: EXE, size: 0 }, NTDLL, KERNEL32],
        modules32: &[],
        threads: &[ThreadSpec { name: "charlie-main\0", tid: 1204, slot: 4, work: 3 }],
    },
    // charlie's EPROCESS and ETHREAD slots and (see `ended`) its address space.
    ProcessSpec {
        name: "delta.exe\0",
        pid: 1300,
        slot: 3,
        modules: &[
            ModuleSpec { name: "delta.exe\0", base: EXE, size: 0 },
            NTDLL,
            KERNEL32,
            ModuleSpec { name: "advapi32.dll\0", base: 0x7ff8_2000_0000, size: 0xa_4000 },
        ],
        modules32: &[],
        threads: &[ThreadSpec { name: "delta-main\0", tid: 1304, slot: 4, work: 4 }],
    },
    // A WOW64 process: the 64-bit DLLs WOW64 runs on, and its x86 ones (the executable's
    // entry is in both lists, at one base).
    ProcessSpec {
        name: "echo32.exe\0",
        pid: 1400,
        slot: 4,
        modules: &[
            ModuleSpec { name: "echo32.exe\0", base: EXE, size: 0 },
            NTDLL,
            ModuleSpec { name: "wow64.dll\0", base: 0x7ff8_1000_0000, size: 0x5_9000 },
            ModuleSpec { name: "wow64cpu.dll\0", base: 0x7ff8_0800_0000, size: 0xa000 },
        ],
        modules32: &[
            ModuleSpec { name: "echo32.exe\0", base: EXE, size: 0 },
            ModuleSpec { name: "ntdll.dll\0", base: 0x7770_0000, size: 0x1a_4000 },
            ModuleSpec { name: "kernel32.dll\0", base: 0x7640_0000, size: 0xf_0000 },
        ],
        threads: &[ThreadSpec { name: "echo32-main\0", tid: 1404, slot: 5, work: 5 }],
    },
];
const CHARLIE: usize = 2;
const DELTA: usize = 3;

/// A Windows process the kernel holds.
#[derive(Clone, Copy)]
struct Live {
    eprocess: u64,
    cr3: u64,
    create_time: u64,
}

/// A refguest process as a Windows thread.
#[derive(Clone, Copy)]
struct LiveThread {
    /// Index in PROCESSES.
    process: usize,
    /// Index in its process's `threads`.
    index: usize,
    ethread: u64,
    teb: u64,
}

struct State {
    services: Option<Services>,
    processes: [Option<Live>; 5],
    /// By refguest pid.
    threads: [Option<LiveThread>; sched::MAX_PROCS],
    /// TSC ticks of the System thread's loop.
    system_tsc: u64,
    /// The phase length of delta's thread (the rest of the run).
    delta_plan: u64,
    switches: u64,
    gs_mismatches: u64,
    failure: Option<&'static str>,
}

static STATE: SpinLock<State> = SpinLock::new(State {
    services: None,
    processes: [None; 5],
    threads: [None; sched::MAX_PROCS],
    system_tsc: 0,
    delta_plan: 0,
    switches: 0,
    gs_mismatches: 0,
    failure: None,
});

fn now_filetime() -> u64 {
    BOOT_FILETIME + crate::time::ms_since_boot() * 10_000
}

/// Has the kernel create process `index` of PROCESSES in `space`, with its PEB in the space's
/// data page. Returns the EPROCESS's address.
fn create_process(services: &Services, index: usize, space: AddressSpace) -> Result<Live, &'static str> {
    let spec = &PROCESSES[index];
    let (code_start, code_end) = crate::prof::user_range();
    let none = PspModule { name: core::ptr::null(), base: 0, size: 0 };
    let list = |specs: &[ModuleSpec]| {
        let mut modules = [none; MAX_MODULES];
        for (m, s) in modules.iter_mut().zip(specs) {
            let (base, size) = if s.base == EXE { (code_start, code_end - code_start) } else { (s.base, s.size) };
            *m = PspModule { name: s.name.as_ptr(), base, size };
        }
        modules
    };
    let create_time = now_filetime();
    let p = ProcessParameters {
        slot: spec.slot,
        pid: spec.pid,
        create_time,
        directory_table_base: space.cr3,
        image_file_name: spec.name.as_ptr(),
        peb_page: space.data,
        peb_page_va: USER_DATA,
        module_count: spec.modules.len().min(MAX_MODULES) as u64,
        modules: list(spec.modules),
        module32_count: spec.modules32.len().min(MAX_MODULES) as u64,
        modules32: list(spec.modules32),
    };
    let create = services.create_process.ok_or("the kernel gave no CreateProcess")?;
    let eprocess = create(&p);
    if eprocess == 0 {
        return Err("CreateProcess failed");
    }
    Ok(Live { eprocess, cr3: space.cr3, create_time })
}

/// Has the kernel create thread `index` of process `process` for refguest process `pid`.
fn create_thread(state: &mut State, process: usize, index: usize, pid: usize) -> Result<(), &'static str> {
    let spec = &PROCESSES[process].threads[index];
    let live = state.processes[process].ok_or("no such process")?;
    let services = state.services.ok_or("no kernel")?;
    let t = ThreadParameters { slot: spec.slot, tid: spec.tid, create_time: now_filetime(), name: spec.name.as_ptr() };
    let create = services.create_thread.ok_or("the kernel gave no CreateThread")?;
    let ethread = create(live.eprocess, &t);
    if ethread == 0 {
        return Err("CreateThread failed");
    }
    let teb = USER_DATA + PEB_PAGE_END + TEB_SIZE * index as u64;
    *state.threads.get_mut(pid).ok_or("pid out of range")? = Some(LiveThread { process, index, ethread, teb });
    Ok(())
}

fn space_of(pid: usize) -> Result<AddressSpace, &'static str> {
    sched::TABLE.lock().procs[pid].as_ref().map(|p| p.space).ok_or("no such process")
}

fn setup(env: &Env) -> Result<(), &'static str> {
    let image = crate::pe::load(module().ok_or("no module 0: pass the kernel image as --initrd")?)?;
    if !crate::paging::map_kernel_image() {
        return Err("module 0 is not based in the kernel window");
    }
    let (ms, kms) = (param_u64("ntprocs.ms", 3000), param_u64("ntprocs.kms", 500));
    let cpu = env.bsp;
    let mut block = LoaderBlock {
        processors: env.cpus.min(crate::percpu::MAX_CPUS) as u64,
        kernel_directory_table_base: crate::boot::kernel_pml4(),
        boot_time: BOOT_FILETIME,
        services: Services { create_process: None, create_thread: None, exit_process: None, swap_thread: None, spin: None },
        system_thread: 0,
    };
    // SAFETY: the image is mapped executable at its base and its entry point is a Microsoft
    // x64 function of one pointer to a loader block (the module's contract above); it writes
    // only the block and its own data.
    let entry: extern "win64" fn(*mut LoaderBlock) -> u64 = unsafe { core::mem::transmute(image.entry as usize) };
    if entry(&mut block) != 0 {
        return Err("KiSystemStartup refused the loader block");
    }
    let services = block.services;
    let (Some(swap), Some(spin)) = (services.swap_thread, services.spin) else {
        return Err("the kernel gave no SwapThread or Spin");
    };
    let pcr = swap(cpu as u64, block.system_thread);
    if pcr == 0 {
        return Err("SwapThread gave no KPCR for the boot CPU");
    }
    crate::println!(
        "ntprocs kernel base={:#x} pages={} kpcr={:#x} system_thread={:#x} ms={} kms={}",
        image.base,
        image.pages,
        pcr,
        block.system_thread,
        ms,
        kms
    );

    // The System process's thread, at CPL0 with GS base = the KPCR.
    crate::gs::set(cpu, pcr, 0);
    let gs_ok = crate::gs::kernel_mode_ok(cpu);
    let start = crate::cpu::rdtsc();
    let deadline = start + common::ms(kms);
    let mut acc = 0u64;
    while crate::cpu::rdtsc() < deadline {
        acc ^= spin(SPIN);
    }
    let system_tsc = crate::cpu::rdtsc() - start;
    crate::gs::set(cpu, swap(cpu as u64, 0), 0);

    let third = ms / 3;
    {
        let mut state = STATE.lock();
        state.services = Some(services);
        state.system_tsc = system_tsc;
        state.gs_mismatches += u64::from(!gs_ok);
        state.delta_plan = work::plan(common::ms(ms - third), 1, false);
    }
    let full = work::plan(common::ms(ms), 1, false);
    let work_fns = user_work::work();
    // A process's second thread has the lower half of its stack.
    let second_stack = USER_STACK_TOP - 4096 * (USER_STACK_PAGES as u64 / 2);
    // delta starts when charlie ends (`ended`).
    for (index, spec) in PROCESSES.iter().enumerate().filter(|&(i, _)| i != DELTA) {
        let plan = if index == CHARLIE { work::plan(common::ms(third), 1, false) } else { full };
        // The scheduler's table is locked (by spawn) before this scenario's state, never after.
        let mut pids = [0usize; 2];
        pids[0] = common::spawn(work_fns[spec.threads[0].work], cpu, plan)?;
        for t in 1..spec.threads.len().min(2) {
            let args = [work_fns[spec.threads[t].work], plan];
            pids[t] = sched::spawn_thread(pids[0], work::main as *const () as u64, cpu, args, second_stack).ok_or("spawn failed")?;
        }
        let space = space_of(pids[0])?;
        let mut state = STATE.lock();
        state.processes[index] = Some(create_process(&services, index, space)?);
        for (t, &pid) in pids.iter().enumerate().take(spec.threads.len()) {
            create_thread(&mut state, index, t, pid)?;
        }
    }
    crate::println!("ntprocs system tsc={} acc={:#x}", system_tsc, acc);
    sched::set_hooks(sched::Hooks { switched, ended });
    Ok(())
}

/// Every context switch: the kernel's current thread and the GS bases.
fn switched(cpu: usize, next: Option<usize>) {
    let mut state = STATE.lock();
    let Some(swap) = state.services.and_then(|s| s.swap_thread) else { return };
    let (ethread, teb) = next.and_then(|pid| state.threads[pid]).map_or((0, 0), |t| (t.ethread, t.teb));
    let pcr = swap(cpu as u64, ethread);
    crate::gs::set(cpu, pcr, teb);
    state.switches += 1;
    if pcr == 0 || !crate::gs::kernel_mode_ok(cpu) {
        state.gs_mismatches += 1;
    }
}

/// charlie's end: the kernel lets it go and delta takes its address space, EPROCESS and ETHREAD.
fn ended(table: &mut Table, cpu: usize, pid: usize) {
    let mut state = STATE.lock();
    let Some(thread) = state.threads[pid] else { return };
    if thread.process != CHARLIE {
        return;
    }
    let (Some(services), Some(charlie)) = (state.services, state.processes[CHARLIE]) else { return };
    if let Some(exit) = services.exit_process {
        exit(charlie.eprocess);
    }
    let spec = &PROCESSES[DELTA];
    let work_fn = user_work::work()[spec.threads[0].work];
    let plan = state.delta_plan;
    let result = (|| {
        let delta = sched::respawn(table, pid, work::main as *const () as u64, cpu, [work_fn, plan]).ok_or("respawn failed")?;
        let space = table.procs[delta].as_ref().map(|p| p.space).ok_or("no delta")?;
        state.processes[DELTA] = Some(create_process(&services, DELTA, space)?);
        create_thread(&mut state, DELTA, 0, delta)
    })();
    if let Err(e) = result {
        state.failure.get_or_insert(e);
    }
}

fn check(table: &Table) -> Result<(), &'static str> {
    let state = STATE.lock();
    let tsc_of = |process: usize| -> (u64, u64) {
        state
            .threads
            .iter()
            .enumerate()
            .filter_map(|(pid, t)| Some((table.procs[pid].as_ref()?, (*t)?)))
            .filter(|(_, t)| t.process == process)
            .fold((0, 0), |(tsc, ticks), (p, _)| (tsc + p.tsc, ticks + p.ticks))
    };
    let total: u64 = (0..PROCESSES.len()).map(|i| tsc_of(i).0).sum();
    crate::println!("ntprocs system pid=4 name=System tsc={}", state.system_tsc);
    for (index, spec) in PROCESSES.iter().enumerate() {
        let Some(live) = state.processes[index] else {
            crate::println!("ntprocs process name={} never created BAD", spec.name.trim_end_matches('\0'));
            continue;
        };
        let (tsc, ticks) = tsc_of(index);
        crate::println!(
            "ntprocs process pid={} name={} cr3={:#x} eprocess={:#x} create_time={:#x} ticks={} tsc={} share={}",
            spec.pid,
            spec.name.trim_end_matches('\0'),
            live.cr3,
            live.eprocess,
            live.create_time,
            ticks,
            tsc,
            common::Pct(common::hundredths(tsc, total))
        );
        for (pid, t) in state.threads.iter().enumerate().filter_map(|(pid, t)| Some((pid, (*t)?))) {
            if t.process != index {
                continue;
            }
            let t_spec = &spec.threads[t.index];
            let p = table.procs[pid].as_ref().ok_or("a thread has no process")?;
            crate::println!(
                "ntprocs thread tid={} pid={} name={} ethread={:#x} teb={:#x} runs={} ticks={} tsc={} share={}",
                t_spec.tid,
                spec.pid,
                t_spec.name.trim_end_matches('\0'),
                t.ethread,
                t.teb,
                p.runs,
                p.ticks,
                p.tsc,
                common::Pct(common::hundredths(p.tsc, total))
            );
        }
        let (code_start, code_end) = crate::prof::user_range();
        for m in spec.modules {
            let (base, size) = if m.base == EXE { (code_start, code_end - code_start) } else { (m.base, m.size) };
            crate::println!("ntprocs module pid={} name={} base={:#x} size={:#x}", spec.pid, m.name.trim_end_matches('\0'), base, size);
        }
        // The 32-bit list's own entries (its executable is the 64-bit list's).
        for m in spec.modules32.iter().filter(|m| m.base != EXE) {
            crate::println!(
                "ntprocs module pid={} name={} base={:#x} size={:#x} bits=32",
                spec.pid,
                m.name.trim_end_matches('\0'),
                m.base,
                m.size
            );
        }
    }
    let gs_ok = state.gs_mismatches == 0 && state.switches > 0;
    crate::println!("ntprocs gs switches={} mismatches={} {}", state.switches, state.gs_mismatches, common::ok(gs_ok));
    if let Some(e) = state.failure {
        return Err(e);
    }
    let (Some(charlie), Some(delta)) = (state.processes[CHARLIE], state.processes[DELTA]) else {
        return Err("delta was never created");
    };
    let reused = charlie.cr3 == delta.cr3 && charlie.eprocess == delta.eprocess && charlie.create_time != delta.create_time;
    crate::println!("ntprocs reuse cr3={:#x} eprocess={:#x} {}", delta.cr3, delta.eprocess, common::ok(reused));
    if !reused {
        return Err("delta did not reuse charlie's CR3 and EPROCESS");
    }
    if (0..PROCESSES.len()).any(|i| tsc_of(i).0 == 0) {
        return Err("a process never ran");
    }
    if !gs_ok {
        return Err("the GS bases read back differ from those written");
    }
    common::all_exited("ntprocs", table)
}
