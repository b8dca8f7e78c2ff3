//! The CPUs the kernel knows, by cpu index (MADT order): their APIC ids, which
//! one booted, and each CPU's stacks.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::boot;
use crate::sync::RacyCell;

pub const MAX_CPUS: usize = 32;
const KERNEL_STACK: usize = 16 * 1024;
const EXCEPTION_STACK: usize = 8 * 1024;
const DOUBLE_FAULT_STACK: usize = 4 * 1024;
const INTERRUPT_STACK: usize = 16 * 1024;

#[repr(C, align(4096))]
struct CpuStacks {
    kernel: [u8; KERNEL_STACK],
    exception: [u8; EXCEPTION_STACK],
    double_fault: [u8; DOUBLE_FAULT_STACK],
    interrupt: [u8; INTERRUPT_STACK],
}

const NO_STACKS: CpuStacks =
    CpuStacks { kernel: [0; KERNEL_STACK], exception: [0; EXCEPTION_STACK], double_fault: [0; DOUBLE_FAULT_STACK], interrupt: [0; INTERRUPT_STACK] };

static STACKS: RacyCell<[CpuStacks; MAX_CPUS]> = RacyCell::new([NO_STACKS; MAX_CPUS]);
static APIC_IDS: RacyCell<[u32; MAX_CPUS]> = RacyCell::new([0; MAX_CPUS]);
static CPU_COUNT: AtomicUsize = AtomicUsize::new(1);
static BOOT_CPU: AtomicUsize = AtomicUsize::new(0);

/// Number of CPUs listed in the MADT (and given a cpu index).
pub fn cpu_count() -> usize {
    CPU_COUNT.load(Ordering::Relaxed)
}

pub fn apic_id(cpu: usize) -> u32 {
    // SAFETY: written by the BSP before any AP starts, read-only afterwards.
    unsafe { (*APIC_IDS.get())[cpu] }
}

/// Records the MADT's CPU list. BSP only, before `smp::start_aps`.
pub fn set_cpus(ids: &[u32]) {
    // SAFETY: single-threaded boot.
    let table = unsafe { &mut *APIC_IDS.get() };
    table[..ids.len()].copy_from_slice(ids);
    CPU_COUNT.store(ids.len(), Ordering::Relaxed);
}

/// cpu index (MADT order) of the boot CPU.
pub fn boot_cpu() -> usize {
    BOOT_CPU.load(Ordering::Relaxed)
}

/// Records which cpu index booted. BSP only, at boot.
pub fn set_boot_cpu(cpu: usize) {
    BOOT_CPU.store(cpu, Ordering::Relaxed);
}

/// Top of `cpu`'s kernel (idle) stack.
pub fn kernel_stack_top(cpu: usize, bsp: usize) -> u64 {
    if cpu == bsp {
        return boot::boot_stack_top();
    }
    // SAFETY: only the address of this CPU's stack is taken.
    unsafe { (*STACKS.get())[cpu].kernel.as_ptr() as u64 + KERNEL_STACK as u64 }
}

/// Prepares an IST stack: its top 16 bytes hold the CPU index, so a trap
/// handler finds its CPU just above the hardware frame.
fn ist_top(stack: &mut [u8], cpu: usize) -> u64 {
    let top = stack.as_mut_ptr() as u64 + stack.len() as u64 - 16;
    // SAFETY: `top` is inside `stack` and 16-byte aligned.
    unsafe { (top as *mut u64).write(cpu as u64) };
    top
}

/// The tops of `cpu`'s three IST stacks (exceptions, double fault/NMI,
/// interrupts and system calls), each prepared by `ist_top`. Called by that CPU
/// only, once.
pub fn ist_tops(cpu: usize) -> [u64; 3] {
    // SAFETY: each CPU initialises only its own stacks slot.
    let stacks = unsafe { &mut (*STACKS.get())[cpu] };
    [ist_top(&mut stacks.exception, cpu), ist_top(&mut stacks.double_fault, cpu), ist_top(&mut stacks.interrupt, cpu)]
}
