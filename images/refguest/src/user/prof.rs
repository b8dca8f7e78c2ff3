//! CPL3 workloads for the profiling scenarios.
//!
//! The functions whose samples the scenarios count are written in assembly so that their
//! address ranges are exact: each starts 64-byte aligned (so no 16-byte bucket holds two of
//! them) and has an `<name>_end` label after its last byte. Each is also declared
//! `.type <name>, @function` with `.size <name>, <name>_end - <name>`, so the ELF symbol table
//! has them as FUNC symbols with their real sizes and profilers symbolise samples in them.
//! Each is the same register loop, `n` iterations, so its cost is proportional to `n`.
//!
//! `main` is a phase runner: it calls one work function over and over until each phase's TSC
//! deadline, and optionally makes the CONTROL system call after each phase so the kernel can
//! act (stop a profile, take a snapshot) while the workload keeps running. At the end it
//! reports (REPORT) how many calls it made and the TSC ticks they took: the rate of guest work.

use super::{exit, nr, syscall};

/// Iterations of the unit call (`f1`): a few microseconds at native speed.
pub const UNIT: u64 = 20_000;

core::arch::global_asm!(
    r#"
    .section .user.text.prof, "ax"
    .macro SPIN name
    .p2align 6
    .global \name
    .type \name, @function
\name:"#,
    spin_loop_asm!(),
    r#"
    ret
    .global \name\()_end
\name\()_end:
    .size \name, \name\()_end - \name
    .endm

    SPIN shares_f1
    SPIN shares_f2
    SPIN shares_f4
    SPIN process_g1
    SPIN process_g2
    SPIN affinity_h0
    SPIN affinity_h1
    SPIN stopped_w

    /* One round of the shares workload: f1(n), f2(2n), f4(4n). */
    .p2align 6
    .global shares_round
    .type shares_round, @function
shares_round:
    push %rbx
    mov %rdi, %rbx
    call shares_f1
    lea (%rbx,%rbx), %rdi
    call shares_f2
    lea (,%rbx,4), %rdi
    call shares_f4
    pop %rbx
    ret
    .global shares_round_end
shares_round_end:
    .size shares_round, shares_round_end - shares_round

    /* The same round with f2 20% slower: f1(n), f2(12n/5), f4(4n) (for hvprof compare). */
    .p2align 6
    .global shares_round_slow_f2
    .type shares_round_slow_f2, @function
shares_round_slow_f2:
    push %rbx
    mov %rdi, %rbx
    call shares_f1
    lea (%rbx,%rbx,2), %rax
    shl $2, %rax
    xor %edx, %edx
    mov $5, %ecx
    div %rcx
    mov %rax, %rdi
    call shares_f2
    lea (,%rbx,4), %rdi
    call shares_f4
    pop %rbx
    ret
    .global shares_round_slow_f2_end
shares_round_slow_f2_end:
    .size shares_round_slow_f2, shares_round_slow_f2_end - shares_round_slow_f2

    /* The same round with f2 twice as slow: f1(n), f2(4n), f4(4n). */
    .p2align 6
    .global shares_round_double_f2
    .type shares_round_double_f2, @function
shares_round_double_f2:
    push %rbx
    mov %rdi, %rbx
    call shares_f1
    lea (,%rbx,4), %rdi
    call shares_f2
    lea (,%rbx,4), %rdi
    call shares_f4
    pop %rbx
    ret
    .global shares_round_double_f2_end
shares_round_double_f2_end:
    .size shares_round_double_f2, shares_round_double_f2_end - shares_round_double_f2
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    fn shares_round_slow_f2(n: u64);
    fn shares_round_double_f2(n: u64);
    pub fn shares_f1(n: u64);
    pub fn shares_f2(n: u64);
    pub fn shares_f4(n: u64);
    pub fn process_g1(n: u64);
    pub fn process_g2(n: u64);
    pub fn affinity_h0(n: u64);
    pub fn affinity_h1(n: u64);
    pub fn stopped_w(n: u64);
    pub fn shares_round(n: u64);
    static shares_f1_end: u8;
    static shares_f2_end: u8;
    static shares_f4_end: u8;
    static process_g1_end: u8;
    static process_g2_end: u8;
    static affinity_h0_end: u8;
    static affinity_h1_end: u8;
    static stopped_w_end: u8;
}

/// A work function's user address range `[start, end)`.
#[derive(Clone, Copy)]
pub struct Range {
    pub name: &'static str,
    pub start: u64,
    pub end: u64,
}

macro_rules! range {
    ($name:literal, $f:ident, $end:ident) => {
        Range { name: $name, start: $f as *const () as u64, end: (&raw const $end) as u64 }
    };
}

pub fn f1() -> Range {
    range!("f1", shares_f1, shares_f1_end)
}
pub fn f2() -> Range {
    range!("f2", shares_f2, shares_f2_end)
}
pub fn f4() -> Range {
    range!("f4", shares_f4, shares_f4_end)
}
pub fn g1() -> Range {
    range!("g1", process_g1, process_g1_end)
}
pub fn g2() -> Range {
    range!("g2", process_g2, process_g2_end)
}
pub fn h0() -> Range {
    range!("h0", affinity_h0, affinity_h0_end)
}
pub fn h1() -> Range {
    range!("h1", affinity_h1, affinity_h1_end)
}
pub fn w() -> Range {
    range!("w", stopped_w, stopped_w_end)
}
/// The address `main` calls for the shares workload.
pub fn round() -> u64 {
    shares_round as *const () as u64
}

/// The shares workload with f2 20% slower (`shares.slowf2=20`).
pub fn round_slow_f2() -> u64 {
    shares_round_slow_f2 as *const () as u64
}

/// The shares workload with f2 twice as slow (`shares.slowf2=100`).
pub fn round_double_f2() -> u64 {
    shares_round_double_f2 as *const () as u64
}

/// `main`'s second argument: `phases` phases of `phase_tsc` TSC ticks, with a CONTROL system
/// call (argument = phase number, from 1) after each phase if `control`.
pub fn plan(phase_tsc: u64, phases: u64, control: bool) -> u64 {
    (phase_tsc & PHASE_MASK) | (phases.min(0xFF) << 40) | (u64::from(control) << 48)
}

const PHASE_MASK: u64 = (1 << 40) - 1;

/// The time-stamp counter, read at CPL3 (inlined into the caller's `.user.text`).
#[inline(always)]
pub(super) fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC only reads the time-stamp counter (allowed at CPL3: CR4.TSD is clear).
    unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Entry point: RDI = the work function's user address (called with `UNIT`), RSI = `plan`.
#[link_section = ".user.text"]
pub extern "C" fn main(work: u64, plan: u64) -> ! {
    // SAFETY: the kernel passes the address of one of the work functions above, which are
    // `extern "C" fn(u64)` in `.user.text`.
    let f: extern "C" fn(u64) = unsafe { core::mem::transmute(work as usize) };
    let phase_tsc = plan & PHASE_MASK;
    let phases = (plan >> 40) & 0xFF;
    let control = (plan >> 48) & 1 != 0;
    let start = rdtsc();
    let mut phase = 1;
    let mut calls = 0u64;
    while phase <= phases {
        let deadline = start + phase * phase_tsc;
        while rdtsc() < deadline {
            f(UNIT);
            calls = calls.wrapping_add(1);
        }
        if control {
            syscall(nr::CONTROL, phase, 0);
        }
        phase += 1;
    }
    // The work done and the TSC ticks it took, for scenarios that measure the guest's rate.
    syscall(nr::REPORT, REPORT_CALLS, calls);
    syscall(nr::REPORT, REPORT_TICKS, rdtsc().wrapping_sub(start));
    exit(0)
}

/// `main`'s report slots: the work function's calls, and the TSC ticks from the first to the
/// end of the last phase.
pub const REPORT_CALLS: u64 = 0;
pub const REPORT_TICKS: u64 = 1;
