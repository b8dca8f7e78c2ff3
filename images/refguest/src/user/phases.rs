//! `scenario=phases`' CPL3 code: one phase of work, timed by the process itself.

use super::prof::{rdtsc, UNIT};
use super::{exit, nr, syscall};

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
