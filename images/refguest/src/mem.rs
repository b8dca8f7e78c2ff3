//! memcpy/memmove/memset/memcmp/bcmp for the compiler. The host target's
//! compiler-builtins leaves these to libc, which a kernel does not have.
//! String instructions keep LLVM from turning the loops back into calls.

use core::arch::asm;

/// # Safety
/// Standard C `memcpy` contract.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees both ranges are valid and disjoint.
    unsafe {
        asm!(
            "mov {tail:r}, rcx", "shr rcx, 3", "rep movsq",
            "mov rcx, {tail:r}", "and rcx, 7", "rep movsb",
            tail = out(reg) _,
            inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
    dest
}

/// # Safety
/// Standard C `memmove` contract.
#[no_mangle]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dest as usize) <= (src as usize) || (dest as usize) >= (src as usize).wrapping_add(n) {
        // SAFETY: a forward copy is correct when dest does not start inside src.
        return unsafe { memcpy(dest, src, n) };
    }
    // SAFETY: backward byte copy of overlapping ranges the caller made valid.
    unsafe {
        asm!(
            "std", "rep movsb", "cld",
            inout("rcx") n => _,
            inout("rdi") dest.wrapping_add(n).wrapping_sub(1) => _,
            inout("rsi") src.wrapping_add(n).wrapping_sub(1) => _,
            options(nostack)
        );
    }
    dest
}

/// # Safety
/// Standard C `memset` contract.
#[no_mangle]
pub unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
    let pattern = u64::from(c as u8) * 0x0101_0101_0101_0101;
    // SAFETY: the caller guarantees the range is valid. Bulk stores use
    // STOSQ because each string iteration is emulated at CPL0 on PVM hosts.
    unsafe {
        asm!(
            "mov {tail:r}, rcx", "shr rcx, 3", "rep stosq",
            "mov rcx, {tail:r}", "and rcx, 7", "rep stosb",
            tail = out(reg) _,
            inout("rcx") n => _, inout("rdi") dest => _, in("rax") pattern,
            options(nostack, preserves_flags)
        );
    }
    dest
}

/// # Safety
/// Standard C `memcmp` contract.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: i < n and the caller guarantees n readable bytes; volatile
        // reads keep LLVM from recognising this loop as memcmp.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// # Safety
/// Standard C `bcmp` contract.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}
