//! IDT, entry stubs and the trap frame. Every gate uses an IST stack; the
//! word just above each IST top holds the CPU index (see `smp`).

use core::arch::{asm, global_asm};

use crate::gdt::{IST_DOUBLE_FAULT, IST_EXCEPTION, IST_INTERRUPT, KERNEL_CS};
use crate::sync::RacyCell;

pub const TIMER_VECTOR: u8 = 0x40;
pub const WAKE_VECTOR: u8 = 0x41;
/// Frame tag for SYSCALL entries (`syscall`); its IDT gate is DPL0, so
/// `int 0x80` from user mode faults.
pub const SYSCALL_VECTOR: u8 = 0x80;
pub const SPURIOUS_VECTOR: u8 = 0xFF;
pub const NMI_VECTOR: u8 = 2;
pub const DOUBLE_FAULT_VECTOR: u8 = 8;

/// Registers saved by `trap_common`, then the vector and error code, then the
/// hardware interrupt frame. The layout is shared with the assembly below.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct TrapFrame {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

impl TrapFrame {
    pub fn is_user(&self) -> bool {
        self.cs & 3 == 3
    }
}

// 256 stubs of 16 bytes each: push a dummy error code where the CPU pushes
// none, push the vector, jump to the common path.
global_asm!(
    r#"
    .section .text.trap, "ax"
    .p2align 4
    .global trap_stubs
trap_stubs:
    .set vec, 0
    .rept 256
    .p2align 4
    .if (vec == 8) || (vec == 10) || (vec == 11) || (vec == 12) || (vec == 13) || (vec == 14) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    push $0
    .endif
    push $vec
    jmp trap_common
    .set vec, vec + 1
    .endr

trap_common:
    push %r15
    push %r14
    push %r13
    push %r12
    push %r11
    push %r10
    push %r9
    push %r8
    push %rbp
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %rbx
    push %rax
    mov %rsp, %rdi
    cld
    call trap_dispatch
    pop %rax
    pop %rbx
    pop %rcx
    pop %rdx
    pop %rsi
    pop %rdi
    pop %rbp
    pop %r8
    pop %r9
    pop %r10
    pop %r11
    pop %r12
    pop %r13
    pop %r14
    pop %r15
    add $16, %rsp
    iretq
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    static trap_stubs: [u8; 256 * 16];
}

static IDT: RacyCell<[[u64; 2]; 256]> = RacyCell::new([[0; 2]; 256]);

#[repr(C, packed)]
struct Pointer {
    limit: u16,
    base: u64,
}

/// Fills the shared IDT. BSP only, before interrupts are enabled anywhere.
pub fn init() {
    // SAFETY: taking the address of the assembly stub table.
    let stubs = unsafe { trap_stubs.as_ptr() } as u64;
    // SAFETY: single-threaded boot; the IDT is not loaded yet.
    let idt = unsafe { &mut *IDT.get() };
    for (vector, gate) in idt.iter_mut().enumerate() {
        let handler = stubs + 16 * vector as u64;
        let ist = match vector as u8 {
            DOUBLE_FAULT_VECTOR | NMI_VECTOR => IST_DOUBLE_FAULT,
            0..=31 => IST_EXCEPTION,
            _ => IST_INTERRUPT,
        };
        let attributes: u64 = 0x8E; // present DPL0 interrupt gate
        gate[0] = (handler & 0xFFFF)
            | (u64::from(KERNEL_CS) << 16)
            | (u64::from(ist) << 32)
            | (attributes << 40)
            | ((handler >> 16 & 0xFFFF) << 48);
        gate[1] = handler >> 32;
    }
}

/// Loads the IDT on this CPU.
pub fn load() {
    let pointer = Pointer { limit: (256 * 16 - 1) as u16, base: IDT.get() as u64 };
    // SAFETY: the IDT is fully initialised by `init` before any CPU loads it.
    unsafe { asm!("lidt [{}]", in(reg) &pointer, options(readonly, nostack, preserves_flags)) }
}
