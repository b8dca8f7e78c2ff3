//! The smoke workload: sum of squares, a private-memory check, and reports.

use super::{exit, nr, opaque, syscall, USER_DATA};

/// Report keys.
pub const KEY_SUM: u64 = 0;
pub const KEY_MARKER: u64 = 1;
pub const KEY_PID: u64 = 2;
/// Value each process writes at USER_DATA: MARKER_BASE + pid.
pub const MARKER_BASE: u64 = 0x5eed_0000;

/// sum(k*k for k in 1..=n) mod 2^64; `opaque` keeps LLVM from using the
/// closed form, so this really loops n times at CPL3.
#[link_section = ".user.text"]
#[inline(never)]
pub extern "C" fn sum_squares(n: u64) -> u64 {
    let mut sum = 0u64;
    let mut k = 1u64;
    while k <= n {
        sum = opaque(sum.wrapping_add(k.wrapping_mul(k)));
        k += 1;
    }
    sum
}

/// Entry point: RDI = pid as the kernel numbered it, RSI = n.
#[link_section = ".user.text"]
pub extern "C" fn main(pid: u64, n: u64) -> ! {
    let data = USER_DATA as *mut u64;
    // SAFETY: USER_DATA is this process's private, writable data page.
    unsafe { data.write_volatile(MARKER_BASE + pid) };
    let sum = sum_squares(n);
    syscall(nr::YIELD, 0, 0);
    // SAFETY: as above.
    let marker = unsafe { data.read_volatile() };
    syscall(nr::REPORT, KEY_SUM, sum);
    syscall(nr::REPORT, KEY_MARKER, marker);
    syscall(nr::REPORT, KEY_PID, syscall(nr::GETPID, 0, 0));
    exit(0)
}
