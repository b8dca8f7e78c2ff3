//! `scenario=phases`' CPL3 code: one phase of work, timed by the process itself.

use super::prof::UNIT;
use super::{exit, nr, syscall};

#[inline(always)]
fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC only reads the time-stamp counter (allowed at CPL3: CR4.TSD is clear).
    unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Entry point: RDI = the work function's user address (called with `UNIT`), RSI = the
/// phase's length in TSC ticks. Calls the work function until the phase is over, then reports
/// the TSC just before its first call (slot 0) and just after its last (slot 1), and exits.
#[link_section = ".user.text"]
pub extern "C" fn main(work: u64, phase_tsc: u64) -> ! {
    // SAFETY: the kernel passes the address of one of `prof`'s work functions, which are
    // `extern "C" fn(u64)` in `.user.text`.
    let f: extern "C" fn(u64) = unsafe { core::mem::transmute(work as usize) };
    let start = rdtsc();
    let deadline = start + phase_tsc;
    let mut end = start;
    while end < deadline {
        f(UNIT);
        end = rdtsc();
    }
    syscall(nr::REPORT, 0, start);
    syscall(nr::REPORT, 1, end);
    exit(0)
}
