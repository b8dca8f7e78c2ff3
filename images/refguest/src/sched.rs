//! Processes and a per-CPU round-robin scheduler. Each process is pinned to
//! one CPU. Context switches happen only in trap context by swapping the trap
//! frame (and CR3) on the IST stack before IRET, so there is no kernel thread
//! state to save: an idle CPU runs `idle` on its kernel stack at CPL0.

use crate::idt::TrapFrame;
use crate::paging::{self, AddressSpace, MAX_SPACES};
use crate::percpu::{self, MAX_CPUS};
use crate::sync::{RacyCell, SpinLock};
use crate::user::{REPORT_SLOTS, USER_STACK_TOP};
use crate::{boot, cpu, exit, gdt};

pub const MAX_PROCS: usize = MAX_SPACES;
const RFLAGS_IF: u64 = 1 << 9;
const RFLAGS_RESERVED: u64 = 1 << 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    Ready,
    Running,
    Exited,
    Faulted,
}

#[derive(Clone, Copy)]
pub struct Fault {
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cr2: u64,
}

#[derive(Clone, Copy)]
pub struct Process {
    pub state: State,
    pub cpu: usize,
    pub space: AddressSpace,
    pub frame: TrapFrame,
    pub exit_code: u64,
    pub reports: [Option<u64>; REPORT_SLOTS],
    pub fault: Option<Fault>,
    /// Times this process was switched in.
    pub runs: u64,
    /// Timer ticks that found it running.
    pub ticks: u64,
    /// TSC ticks it has run (switch in to switch out, its trap handling included).
    pub tsc: u64,
    /// The TSC when it was last switched in.
    since: u64,
    /// Not run before this TSC (0: at once): `scenario=phases` leaves its CPU idle, halted,
    /// between phases with it.
    pub not_before: u64,
}

pub struct Table {
    pub procs: [Option<Process>; MAX_PROCS],
    pub count: usize,
    pub finished: usize,
    current: [Option<usize>; MAX_CPUS],
    idle: [bool; MAX_CPUS],
    idle_stack: [u64; MAX_CPUS],
    pub ticks: [u64; MAX_CPUS],
}

pub static TABLE: SpinLock<Table> = SpinLock::new(Table {
    procs: [None; MAX_PROCS],
    count: 0,
    finished: 0,
    current: [None; MAX_CPUS],
    idle: [false; MAX_CPUS],
    idle_stack: [0; MAX_CPUS],
    ticks: [0; MAX_CPUS],
});

/// What runs, with the table locked, once every process has ended: the
/// selected scenario's judgement (set by `on_all_ended`).
static ALL_ENDED: RacyCell<Option<fn(&Table) -> !>> = RacyCell::new(None);

/// Sets what runs once every process has ended. BSP only, before any process
/// runs.
pub fn on_all_ended(hook: fn(&Table) -> !) {
    // SAFETY: single-threaded boot; read only after processes start.
    unsafe { *ALL_ENDED.get() = Some(hook) };
}

/// A scenario's view of context switches (`scenario=ntprocs` keeps a stand-in Windows
/// kernel's current thread with them). Both run with the table locked and interrupts off, on
/// the CPU concerned, and must not lock the table.
#[derive(Clone, Copy)]
pub struct Hooks {
    /// After `cpu` switched to process `next` (its CR3 loaded), or to the idle loop (None).
    pub switched: fn(cpu: usize, next: Option<usize>),
    /// After process `pid` on `cpu` ended, before the next is picked: it may `respawn`.
    pub ended: fn(table: &mut Table, cpu: usize, pid: usize),
}

static HOOKS: RacyCell<Option<Hooks>> = RacyCell::new(None);

/// Sets the context-switch hooks. BSP only, during a scenario's setup (before any process
/// runs).
pub fn set_hooks(hooks: Hooks) {
    // SAFETY: single-threaded setup; read only after processes start.
    unsafe { *HOOKS.get() = Some(hooks) };
}

fn hooks() -> Option<Hooks> {
    // SAFETY: written by the BSP before any process runs, read-only afterwards.
    unsafe { *HOOKS.get() }
}

/// Adds a process in `space`, pinned to `cpu`, that starts at user address
/// `entry` with RDI, RSI = `args` and RSP = `rsp`. Returns its pid, or None
/// when the table is full.
fn insert(table: &mut Table, space: AddressSpace, entry: u64, cpu: usize, args: [u64; 2], rsp: u64) -> Option<usize> {
    let pid = table.count;
    if pid >= MAX_PROCS {
        return None;
    }
    let frame = TrapFrame {
        rip: entry,
        cs: u64::from(gdt::USER_CS),
        ss: u64::from(gdt::USER_DS),
        rsp,
        rflags: RFLAGS_IF | RFLAGS_RESERVED,
        rdi: args[0],
        rsi: args[1],
        ..TrapFrame::default()
    };
    let process = Process {
        state: State::Ready,
        cpu,
        space,
        frame,
        exit_code: 0,
        reports: [None; REPORT_SLOTS],
        fault: None,
        runs: 0,
        ticks: 0,
        tsc: 0,
        since: 0,
        not_before: 0,
    };
    table.procs[pid] = Some(process);
    table.count += 1;
    Some(pid)
}

/// Creates a process pinned to `cpu` that starts at user address `entry`
/// with RDI, RSI = `args`, in a new address space. Returns its pid, or None
/// when the table is full.
pub fn spawn(entry: u64, cpu: usize, args: [u64; 2]) -> Option<usize> {
    let mut table = TABLE.lock();
    if table.count >= MAX_PROCS {
        return None;
    }
    let space = paging::create(table.count);
    insert(&mut *table, space, entry, cpu, args, USER_STACK_TOP - 8) // as if entered by a call
}

/// Creates a second thread of control in process `owner`'s address space: the same as
/// `spawn`, but with its stack top at `stack_top` (inside the owner's stack, which the
/// threads then share). Returns its pid.
pub fn spawn_thread(owner: usize, entry: u64, cpu: usize, args: [u64; 2], stack_top: u64) -> Option<usize> {
    let mut table = TABLE.lock();
    let space = table.procs.get(owner)?.as_ref()?.space;
    insert(&mut *table, space, entry, cpu, args, stack_top - 8)
}

/// Creates a process in the address-space slot of process `ended`, rebuilt, so with the same
/// CR3 (an exited process's page tables reused), from an `ended` hook. None if a process in
/// that space has not ended, or the table is full.
pub fn respawn(table: &mut Table, ended: usize, entry: u64, cpu: usize, args: [u64; 2]) -> Option<usize> {
    let slot = table.procs.get(ended)?.as_ref()?.space.slot;
    let live = table.procs.iter().take(table.count).flatten().any(|p| {
        p.space.slot == slot && matches!(p.state, State::Ready | State::Running)
    });
    if live || table.count >= MAX_PROCS {
        return None;
    }
    // The ended process's tables may be this CPU's current ones: leave them before the
    // rebuild (the switch that follows loads whichever CR3 runs next).
    // SAFETY: the kernel PML4 maps the kernel.
    unsafe { cpu::write_cr3(boot::kernel_pml4()) };
    let space = paging::create(slot);
    insert(table, space, entry, cpu, args, USER_STACK_TOP - 8)
}

/// The process running on `cpu`, if any.
pub fn current(table: &Table, cpu: usize) -> Option<usize> {
    table.current[cpu]
}

/// Enters the idle loop on this CPU's kernel stack. Never returns: the next
/// timer tick or wake IPI switches to a ready process if there is one.
pub fn idle(cpu: usize) -> ! {
    {
        let mut table = TABLE.lock();
        table.idle[cpu] = true;
        table.idle_stack[cpu] = percpu::kernel_stack_top(cpu, percpu::boot_cpu());
    }
    idle_loop()
}

extern "C" fn idle_loop() -> ! {
    loop {
        cpu::wait_for_interrupt();
    }
}

fn idle_frame(table: &Table, cpu: usize) -> TrapFrame {
    TrapFrame {
        rip: idle_loop as *const () as u64,
        cs: u64::from(gdt::KERNEL_CS),
        ss: u64::from(gdt::KERNEL_DS),
        rsp: table.idle_stack[cpu],
        rflags: RFLAGS_IF | RFLAGS_RESERVED,
        ..TrapFrame::default()
    }
}

/// Next ready process on `cpu` after `after` (round robin).
fn pick(table: &Table, cpu: usize, after: Option<usize>) -> Option<usize> {
    let start = after.map_or(0, |p| p + 1);
    let now = cpu::rdtsc();
    (0..table.count).map(|i| (start + i) % table.count).find(|&p| {
        table.procs[p]
            .as_ref()
            .is_some_and(|proc| proc.cpu == cpu && proc.state == State::Ready && proc.not_before <= now)
    })
}

fn switch_to(table: &mut Table, cpu: usize, frame: &mut TrapFrame, next: Option<usize>) {
    let now = cpu::rdtsc();
    if let Some(proc) = table.current[cpu].and_then(|cur| table.procs[cur].as_mut()) {
        proc.tsc += now - proc.since;
    }
    match next {
        Some(p) => {
            let Some(proc) = table.procs[p].as_mut() else { return };
            proc.state = State::Running;
            proc.runs += 1;
            proc.since = now;
            *frame = proc.frame;
            // SAFETY: the process's PML4 shares the kernel mappings.
            unsafe { cpu::write_cr3(proc.space.cr3) };
        }
        None => {
            *frame = idle_frame(table, cpu);
            // SAFETY: the kernel PML4 maps the kernel.
            unsafe { cpu::write_cr3(boot::kernel_pml4()) };
        }
    }
    table.current[cpu] = next;
    if let Some(hooks) = hooks() {
        (hooks.switched)(cpu, next);
    }
}

/// Timer tick, wake IPI or yield: switch to another ready process if any.
pub fn reschedule(cpu: usize, frame: &mut TrapFrame, tick: bool) {
    let mut table = TABLE.lock();
    if tick {
        table.ticks[cpu] += 1;
        if let Some(proc) = table.current[cpu].and_then(|cur| table.procs[cur].as_mut()) {
            proc.ticks += 1;
        }
    }
    match table.current[cpu] {
        Some(cur) => {
            if let Some(next) = pick(&table, cpu, Some(cur)) {
                if let Some(proc) = table.procs[cur].as_mut() {
                    proc.frame = *frame;
                    proc.state = State::Ready;
                }
                switch_to(&mut table, cpu, frame, Some(next));
            }
        }
        // Interrupted kernel code other than the idle loop (boot) keeps running.
        None if table.idle[cpu] => {
            if let Some(next) = pick(&table, cpu, None) {
                switch_to(&mut table, cpu, frame, Some(next));
            }
        }
        None => {}
    }
}

/// Ends the current process on `cpu` with `state`, then runs the next one.
/// When every process has ended, the scenario's `finish` decides the verdict.
pub fn end_current(cpu: usize, frame: &mut TrapFrame, state: State, exit_code: u64, fault: Option<Fault>) {
    let mut table = TABLE.lock();
    let Some(cur) = table.current[cpu] else { return };
    if let Some(proc) = table.procs[cur].as_mut() {
        proc.state = state;
        proc.exit_code = exit_code;
        proc.fault = fault;
    }
    table.finished += 1;
    if let Some(hooks) = hooks() {
        (hooks.ended)(&mut *table, cpu, cur);
    }
    let next = pick(&table, cpu, Some(cur));
    switch_to(&mut table, cpu, frame, next);
    if table.finished == table.count {
        // SAFETY: written by the BSP before any process runs, read-only afterwards.
        match unsafe { *ALL_ENDED.get() } {
            Some(hook) => hook(&table),
            None => exit::fail(format_args!("no scenario selected")),
        }
    }
}

/// Records `value` in report slot `key` of the current process.
pub fn report(cpu: usize, key: u64, value: u64) -> bool {
    let mut table = TABLE.lock();
    let Some(cur) = table.current[cpu] else { return false };
    match (table.procs[cur].as_mut(), usize::try_from(key)) {
        (Some(proc), Ok(k)) if k < REPORT_SLOTS => {
            proc.reports[k] = Some(value);
            true
        }
        _ => false,
    }
}
