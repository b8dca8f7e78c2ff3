//! System calls: SYSCALL (EFER.SCE, STAR/LSTAR/FMASK). `int 0x80` from CPL3
//! raises #UD on PVM hosts, SYSCALL is their native path.
//!
//! SWAPGS is avoided (the CPL0 emulator lacks it), so each CPU gets its own
//! entry stub (LSTAR differs per CPU) that knows its CPU's stack: it parks
//! the user RSP in a per-CPU slot, switches to the CPU's interrupt IST stack
//! (interrupts are masked by FMASK) and builds the same frame as an
//! interrupt, tagged SYSCALL_VECTOR. Returns go through `trap_common`'s IRETQ,
//! so a system call can switch processes like the timer does.
//!
//! PVM quirk (measured on this project's KVM): SYSCALL from CPL3 jumps to
//! LSTAR with FMASK applied but leaves CS at the user selector, so the fetch
//! of the supervisor-only stub page faults at CPL3 (#PF, error 5, CR2 = RIP =
//! LSTAR). `trap` recognises exactly that fault and completes the system
//! call here with the same frame (RIP from RCX, RFLAGS from R11). On a host
//! that implements SYSCALL correctly the stub path runs instead.

use core::arch::global_asm;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu::wrmsr;
use crate::gdt::{KERNEL_CS, USER_CS, USER_DS};
use crate::idt::{TrapFrame, SYSCALL_VECTOR};
use crate::sched::{self, State};
use crate::percpu::MAX_CPUS;
use crate::sync::RacyCell;
use crate::user::nr;

const MSR_EFER: u32 = 0xC000_0080;
const MSR_STAR: u32 = 0xC000_0081;
const MSR_LSTAR: u32 = 0xC000_0082;
const MSR_FMASK: u32 = 0xC000_0084;
const EFER_SCE: u64 = 1;
/// Cleared on entry: TF, IF, DF, NT, AC.
const FMASK: u64 = 0x4_4700;
const STUB_SIZE: u64 = 64;

/// Per-CPU kernel stack tops for the entry stubs, and user-RSP parking slots.
#[no_mangle]
static SYSCALL_STACKS: RacyCell<[u64; MAX_CPUS]> = RacyCell::new([0; MAX_CPUS]);
#[no_mangle]
static SYSCALL_USER_RSP: RacyCell<[u64; MAX_CPUS]> = RacyCell::new([0; MAX_CPUS]);

global_asm!(
    r#"
    .section .text.syscall, "ax"
    .p2align 6
    .global syscall_stubs
syscall_stubs:
    .set cpu, 0
    .rept {max_cpus}
    .p2align 6
    mov %rsp, SYSCALL_USER_RSP + 8 * cpu
    mov SYSCALL_STACKS + 8 * cpu, %rsp
    push ${user_ds}
    push SYSCALL_USER_RSP + 8 * cpu
    push %r11
    push ${user_cs}
    push %rcx
    push $0
    push ${vector}
    jmp trap_common
    .set cpu, cpu + 1
    .endr
    .text
    "#,
    max_cpus = const MAX_CPUS,
    user_ds = const USER_DS,
    user_cs = const USER_CS,
    vector = const SYSCALL_VECTOR,
    options(att_syntax)
);

extern "C" {
    static syscall_stubs: [u8; MAX_CPUS * STUB_SIZE as usize];
}

/// A CONTROL system call's handler: (cpu, argument) -> result.
type Control = fn(usize, u64) -> u64;

/// The CONTROL system call's handler: the selected scenario's (set by
/// `on_control`).
static CONTROL: RacyCell<Option<Control>> = RacyCell::new(None);

/// Sets the CONTROL system call's handler. BSP only, before any process runs.
pub fn on_control(hook: Control) {
    // SAFETY: single-threaded boot; read only after processes start.
    unsafe { *CONTROL.get() = Some(hook) };
}

static NATIVE: AtomicU64 = AtomicU64::new(0);
static VIA_FAULT: AtomicU64 = AtomicU64::new(0);

fn entry(cpu: usize) -> u64 {
    (&raw const syscall_stubs) as u64 + STUB_SIZE * cpu as u64
}

/// (system calls entered through the stub, completed from the #PF quirk).
pub fn counts() -> (u64, u64) {
    (NATIVE.load(Ordering::Relaxed), VIA_FAULT.load(Ordering::Relaxed))
}

/// Completes a SYSCALL that faulted at CPL3 on the entry stub (see the
/// module docs). Returns false if `frame` is some other page fault.
pub fn complete_from_fault(cpu: usize, frame: &mut TrapFrame, cr2: u64) -> bool {
    if !frame.is_user() || frame.rip != entry(cpu) || cr2 != frame.rip {
        return false;
    }
    VIA_FAULT.fetch_add(1, Ordering::Relaxed);
    frame.rip = frame.rcx;
    frame.rflags = (frame.r11 & USER_RFLAGS_KEEP) | RFLAGS_IF | RFLAGS_RESERVED;
    frame.vector = u64::from(SYSCALL_VECTOR);
    frame.error = 0;
    handle(cpu, frame);
    true
}

/// User RFLAGS bits kept across a system call: CF PF AF ZF SF DF OF.
const USER_RFLAGS_KEEP: u64 = 0xCD5;
const RFLAGS_IF: u64 = 1 << 9;
const RFLAGS_RESERVED: u64 = 1 << 1;

/// Enables SYSCALL on this CPU; `stack_top` must carry the CPU index like
/// an IST top (the interrupt IST stack is reused).
pub fn init(cpu: usize, stack_top: u64) {
    // SAFETY: each CPU writes only its own slot, before enabling SYSCALL.
    unsafe { (*SYSCALL_STACKS.get())[cpu] = stack_top };
    // STAR[47:32]: kernel CS (SS = +8); STAR[63:48]: base for SYSRET
    // (SS = +8, CS = +16), matching the GDT layout in `gdt`.
    let star = (u64::from(KERNEL_CS) << 32) | (u64::from(USER_DS & !3) - 8) << 48;
    // SAFETY: the stubs and stacks are set up; the GDT matches STAR.
    unsafe {
        wrmsr(MSR_STAR, star);
        wrmsr(MSR_LSTAR, entry(cpu));
        wrmsr(MSR_FMASK, FMASK);
        wrmsr(MSR_EFER, crate::cpu::rdmsr(MSR_EFER) | EFER_SCE);
    }
}

/// A system call that entered through the stub.
pub fn dispatch(cpu: usize, frame: &mut TrapFrame) {
    NATIVE.fetch_add(1, Ordering::Relaxed);
    handle(cpu, frame);
}

/// Handles a system call from the current process on `cpu`.
fn handle(cpu: usize, frame: &mut TrapFrame) {
    let (a, b) = (frame.rdi, frame.rsi);
    let ret = match frame.rax {
        nr::EXIT => {
            sched::end_current(cpu, frame, State::Exited, a, None);
            return;
        }
        nr::REPORT => u64::from(!sched::report(cpu, a, b)),
        nr::GETPID => {
            let table = sched::TABLE.lock();
            sched::current(&table, cpu).map_or(u64::MAX, |p| p as u64)
        }
        // SAFETY: written by the BSP before any process runs, read-only afterwards.
        nr::CONTROL => match unsafe { *CONTROL.get() } {
            Some(hook) => hook(cpu, a),
            None => u64::MAX,
        },
        nr::YIELD => {
            frame.rax = 0;
            sched::reschedule(cpu, frame, false);
            return;
        }
        _ => u64::MAX,
    };
    frame.rax = ret;
}
