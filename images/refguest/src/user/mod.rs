//! CPL3 programs. Everything here runs in user mode and must stay inside the
//! `.user.text` section, linked at USER_BASE: no calls into kernel code
//! (no panics, bounds checks, formatting, or compiler-inserted memcpy/memset)
//! and no constants in kernel `.rodata` (no string literals, no jump tables).
//! Keep functions to simple integer loops and `#[inline(always)]` helpers,
//! and check `objdump -d` of the `.user` section after changes.

/// The workloads' unit of work, in AT&T syntax: RDI iterations of a register loop (RCX, RAX
/// and flags clobbered), the same in every function that spins so that their costs compare.
macro_rules! spin_loop_asm {
    () => {
        "
    mov %rdi, %rcx
    xor %eax, %eax
    test %rcx, %rcx
    jz 2f
1:  add %rcx, %rax
    xor $0x5a, %rax
    dec %rcx
    jnz 1b
2:
"
    };
}

pub mod prof;
pub mod smoke;
// After `prof`, so that the profiling scenarios' functions keep their addresses.
pub mod bench;
pub mod stacks;
pub mod ntprocs;
pub mod phases;

/// The 32-bit user code selector (compatibility mode; `gdt` lays its descriptor out): the
/// x86 code of `ntprocs`' WOW64 process runs under it.
pub const USER32_CS: u16 = 0x18 | 3;

/// Start of the user window: code from the `.user` section.
pub const USER_BASE: u64 = 0x4000_0000;
/// One private read-write data page.
pub const USER_DATA: u64 = 0x4010_0000;
/// Top of the private user stack.
pub const USER_STACK_TOP: u64 = 0x4020_0000;
pub const USER_STACK_PAGES: usize = 4;

/// System call numbers: SYSCALL with the number in RAX, arguments in RDI,
/// RSI; result in RAX (u64::MAX for an unknown call); RCX and R11 clobbered.
pub mod nr {
    /// exit(code) -> never returns.
    pub const EXIT: u64 = 0;
    /// report(key, value): records a result for the kernel to check.
    pub const REPORT: u64 = 1;
    /// getpid() -> pid.
    pub const GETPID: u64 = 2;
    /// yield(): lets another process on this CPU run.
    pub const YIELD: u64 = 3;
    /// control(arg) -> value: the scenario's `control` hook (profiling scenarios act between
    /// workload phases); u64::MAX if the scenario has none.
    pub const CONTROL: u64 = 4;
}

/// Number of report slots per process.
pub const REPORT_SLOTS: usize = 4;

#[inline(always)]
pub fn syscall(nr: u64, a: u64, b: u64) -> u64 {
    let ret: u64;
    // SAFETY: SYSCALL enters the kernel, which preserves all registers but
    // RAX, RCX and R11.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret, in("rdi") a, in("rsi") b,
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        )
    };
    ret
}

#[inline(always)]
pub fn exit(code: u64) -> ! {
    syscall(nr::EXIT, code, 0);
    loop {
        core::hint::spin_loop();
    }
}

/// An optimisation barrier that stays inline (no call out of `.user.text`).
#[inline(always)]
pub fn opaque(mut value: u64) -> u64 {
    // SAFETY: an empty asm block that only claims to modify `value`.
    unsafe { core::arch::asm!("/* {0} */", inout(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}
