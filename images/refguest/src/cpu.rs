//! Thin wrappers over privileged x86 instructions. Only plain integer
//! instructions that the CPL0 emulator on PVM hosts handles are used here
//! (no INVPCID, CLAC/STAC, XGETBV, x87).

use core::arch::asm;

/// A 4 KiB page-aligned frame.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
pub struct Page(pub [u64; 512]);

impl Page {
    pub const ZERO: Page = Page([0; 512]);
}

pub fn outb(port: u16, value: u8) {
    // SAFETY: port I/O has no memory effects; the ports used are devices we own.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags)) }
}

pub fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: as for `outb`.
    unsafe { asm!("in al, dx", out("al") value, in("dx") port, options(nomem, nostack, preserves_flags)) }
    value
}

pub fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: only architectural MSRs are read; the kernel runs at CPL0.
    unsafe { asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// # Safety
/// Writing an MSR changes CPU state; the caller must know the effect is sound.
pub unsafe fn wrmsr(msr: u32, value: u64) {
    let (lo, hi) = (value as u32, (value >> 32) as u32);
    // SAFETY: delegated to the caller.
    unsafe { asm!("wrmsr", in("ecx") msr, in("eax") lo, in("edx") hi, options(nostack, preserves_flags)) }
}

pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC only reads the time-stamp counter.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// # Safety
/// `pml4` must be a valid top-level table that maps the running kernel.
pub unsafe fn write_cr3(pml4: u64) {
    // SAFETY: delegated to the caller.
    unsafe { asm!("mov cr3, {}", in(reg) pml4, options(nostack, preserves_flags)) }
}

/// Disables interrupts; returns whether they were enabled.
pub fn interrupts_disable() -> bool {
    let flags: u64;
    // SAFETY: reads RFLAGS and clears IF; no memory is touched.
    unsafe { asm!("pushfq", "pop {}", "cli", out(reg) flags, options(nomem, preserves_flags)) }
    flags & (1 << 9) != 0
}

pub fn interrupts_enable() {
    // SAFETY: enabling interrupts is sound once the IDT is loaded (it is
    // loaded before any lock is taken with interrupts enabled).
    unsafe { asm!("sti", options(nomem, nostack)) }
}

/// Stops this CPU for good.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: halting with interrupts off only stops this CPU.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) }
    }
}

/// Enables interrupts and waits for one.
pub fn wait_for_interrupt() {
    // SAFETY: STI;HLT atomically enables interrupts and halts.
    unsafe { asm!("sti", "hlt", options(nomem, nostack)) }
}
