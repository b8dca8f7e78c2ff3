//! Bringing CPUs online: each CPU's descriptor tables, APIC and timer, and
//! application-processor start-up (INIT/SIPI/SIPI into a short real-mode
//! trampoline that goes straight to long mode). Which CPUs there are and their
//! stacks are `percpu`'s.

use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::percpu::{apic_id, cpu_count, kernel_stack_top, MAX_CPUS};
use crate::{apic, boot, gdt, idt, percpu, sched, syscall, time};

/// Physical page the trampoline is copied to; SIPI vector = TRAMPOLINE >> 12.
pub const TRAMPOLINE: u64 = 0x8000;
const START_TIMEOUT_MS: u64 = 1000;

static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static ONLINE_COUNT: AtomicUsize = AtomicUsize::new(0);
static TIMER_COUNT: AtomicUsize = AtomicUsize::new(0);

pub fn online_count() -> usize {
    ONLINE_COUNT.load(Ordering::Acquire)
}

/// Per-CPU descriptor tables, APIC and timer. Interrupts stay disabled.
pub fn cpu_init(cpu: usize, timer_hz: u64) {
    let ist = percpu::ist_tops(cpu);
    gdt::load(cpu, ist);
    syscall::init(cpu, ist[2]);
    idt::load();
    apic::enable(idt::SPURIOUS_VECTOR);
    if TIMER_COUNT.load(Ordering::Relaxed) == 0 {
        let count = (time::apic_hz() / timer_hz.max(1)).clamp(1000, u64::from(u32::MAX));
        TIMER_COUNT.store(count as usize, Ordering::Relaxed);
    }
    apic::timer_periodic(idt::TIMER_VECTOR, TIMER_COUNT.load(Ordering::Relaxed) as u32);
}

fn report_online(cpu: usize) {
    crate::println!("cpu {} online apic={}", cpu, apic_id(cpu));
    ONLINE[cpu].store(true, Ordering::Release);
    ONLINE_COUNT.fetch_add(1, Ordering::AcqRel);
}

/// Marks the boot CPU online.
pub fn bsp_online(cpu: usize) {
    report_online(cpu);
}

extern "C" fn ap_entry(cpu: u64) -> ! {
    let cpu = cpu as usize;
    cpu_init(cpu, 0);
    report_online(cpu);
    sched::idle(cpu)
}

global_asm!(
    r#"
    .section .text.trampoline, "ax"
    .code16
tramp_start:
    cli
    xor %ax, %ax
    mov %ax, %ds
    lgdtl (tramp_gdtr - tramp_start + {base})
    mov $0x620, %eax
    mov %eax, %cr4
    movl (tramp_cr3 - tramp_start + {base}), %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov $0x80010033, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(tramp64 - tramp_start + {base})
    .code64
tramp64:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    mov (tramp_stack - tramp_start + {base}), %rsp
    mov (tramp_arg - tramp_start + {base}), %rdi
    mov (tramp_entry - tramp_start + {base}), %rax
    jmp *%rax
    .p2align 3
tramp_gdt:
    .quad 0, 0x00AF9A000000FFFF, 0x00CF92000000FFFF
tramp_gdtr:
    .word 23
    .long tramp_gdt - tramp_start + {base}
    .p2align 3
    .global tramp_start, tramp_end, tramp_cr3, tramp_stack, tramp_entry, tramp_arg
tramp_cr3: .quad 0
tramp_stack: .quad 0
tramp_entry: .quad 0
tramp_arg: .quad 0
tramp_end:
    .text
    "#,
    base = const TRAMPOLINE,
    options(att_syntax)
);

extern "C" {
    static tramp_start: u8;
    static tramp_end: u8;
    static tramp_cr3: u8;
    static tramp_stack: u8;
    static tramp_entry: u8;
    static tramp_arg: u8;
}

/// Address of trampoline symbol `sym` in its copy at TRAMPOLINE.
fn tramp_slot(sym: *const u8) -> *mut u64 {
    (TRAMPOLINE + (sym as u64 - (&raw const tramp_start) as u64)) as *mut u64
}

/// Starts every listed AP, one at a time. Returns the cpu index of the
/// first AP that did not report in, if any.
pub fn start_aps(bsp: usize) -> Result<(), usize> {
    let start = &raw const tramp_start;
    let len = (&raw const tramp_end) as usize - start as usize;
    // SAFETY: the trampoline page is free RAM below 1 MiB (checked against
    // the memmap at boot); start_info and the command line were copied out.
    unsafe { core::ptr::copy_nonoverlapping(start, TRAMPOLINE as *mut u8, len) };
    let entry: extern "C" fn(u64) -> ! = ap_entry;
    for (cpu, online) in ONLINE.iter().enumerate().take(cpu_count()) {
        if cpu == bsp {
            continue;
        }
        // SAFETY: the slots lie in the trampoline copy; no AP runs it now
        // (APs start one at a time and leave it before reporting online).
        unsafe {
            tramp_slot(&raw const tramp_cr3).write_volatile(boot::kernel_pml4());
            tramp_slot(&raw const tramp_stack).write_volatile(kernel_stack_top(cpu, bsp));
            tramp_slot(&raw const tramp_entry).write_volatile(entry as *const () as u64);
            tramp_slot(&raw const tramp_arg).write_volatile(cpu as u64);
        }
        let id = apic_id(cpu);
        let sipi = apic::ICR_STARTUP | (TRAMPOLINE >> 12) as u32;
        apic::send_ipi(id, apic::ICR_INIT);
        time::delay_us(100);
        apic::send_ipi(id, sipi);
        time::delay_us(200);
        if !online.load(Ordering::Acquire) {
            apic::send_ipi(id, sipi);
        }
        let deadline = crate::cpu::rdtsc() + time::ms_to_tsc(START_TIMEOUT_MS);
        while !online.load(Ordering::Acquire) {
            if crate::cpu::rdtsc() > deadline {
                return Err(cpu);
            }
            core::hint::spin_loop();
        }
    }
    Ok(())
}
