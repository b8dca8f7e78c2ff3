//! GS bases the way 64-bit Windows keeps them, for the scenario that runs a stand-in Windows
//! kernel (`ntprocs`): in kernel mode IA32_GS_BASE holds the processor's KPCR and
//! IA32_KERNEL_GS_BASE the current thread's user GS base (its TEB); in user mode the two are
//! the other way round. Windows exchanges them with SWAPGS on every entry from and return to
//! user mode. The CPL0 emulator of PVM hosts lacks SWAPGS, so `trap` calls `enter` and `leave`
//! instead, which write both MSRs from per-CPU copies. Until a scenario calls `set` nothing is
//! written: other scenarios pay nothing and keep both bases at zero.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::cpu::{rdmsr, wrmsr};
use crate::percpu::MAX_CPUS;
use crate::sync::RacyCell;

pub const MSR_GS_BASE: u32 = 0xC000_0101;
pub const MSR_KERNEL_GS_BASE: u32 = 0xC000_0102;

static ON: AtomicBool = AtomicBool::new(false);
/// Per CPU: [kernel-mode GS base, user-mode GS base].
static BASES: RacyCell<[[u64; 2]; MAX_CPUS]> = RacyCell::new([[0; 2]; MAX_CPUS]);

fn write(gs: u64, kernel_gs: u64) {
    // SAFETY: the kernel never addresses memory through GS, so either base is sound.
    unsafe {
        wrmsr(MSR_GS_BASE, gs);
        wrmsr(MSR_KERNEL_GS_BASE, kernel_gs);
    }
}

/// Sets `cpu`'s kernel-mode GS base (the KPCR) and the user-mode one (the TEB of the thread
/// about to run, 0 for none), and writes them as kernel mode has them. Called on `cpu` at
/// CPL0 (a context switch, or set-up before any process runs).
pub fn set(cpu: usize, kernel: u64, user: u64) {
    // SAFETY: each CPU writes only its own entry, with interrupts off (trap context or set-up).
    unsafe { (*BASES.get())[cpu] = [kernel, user] };
    ON.store(true, Ordering::Relaxed);
    write(kernel, user);
}

fn bases(cpu: usize) -> [u64; 2] {
    // SAFETY: only `cpu` itself writes its entry (see `set`), and it is not doing so now.
    unsafe { (*BASES.get())[cpu] }
}

/// Entry to the kernel from user mode on `cpu` (what SWAPGS does on Windows).
pub fn enter(cpu: usize) {
    if ON.load(Ordering::Relaxed) {
        let [kernel, user] = bases(cpu);
        write(kernel, user);
    }
}

/// Return to user mode on `cpu` (SWAPGS before IRETQ on Windows).
pub fn leave(cpu: usize) {
    if ON.load(Ordering::Relaxed) {
        let [kernel, user] = bases(cpu);
        write(user, kernel);
    }
}

/// Whether the MSRs hold what kernel mode should have on `cpu` (read back, for the scenario's
/// own check that its writes took).
pub fn kernel_mode_ok(cpu: usize) -> bool {
    let [kernel, user] = bases(cpu);
    rdmsr(MSR_GS_BASE) == kernel && rdmsr(MSR_KERNEL_GS_BASE) == user
}
