//! PVH entry: the Xen ELF note, the 32-bit entry point and the switch to long mode.
//!
//! PVH enters at `pvh_entry32` in 32-bit protected mode with flat segments,
//! paging off and EBX = physical address of `struct hvm_start_info`. We build
//! identity page tables for the first 4 GiB (2 MiB pages; 3-4 GiB uncached for
//! the APIC and IOAPIC), enable SSE (CR4.OSFXSR/OSXMMEXCPT, CR0.MP, !CR0.EM;
//! the host target's ABI uses SSE), enter long mode and call `kmain_bsp`.

use crate::cpu::Page;
use crate::sync::RacyCell;

/// Size of the boot CPU's stack (also its idle stack).
pub const BOOT_STACK_SIZE: usize = 64 * 1024;

/// Boot page tables: PML4, one PDPT, four PDs covering 0..4 GiB.
#[no_mangle]
static BOOT_PML4: RacyCell<Page> = RacyCell::new(Page::ZERO);
#[no_mangle]
static BOOT_PDPT: RacyCell<Page> = RacyCell::new(Page::ZERO);
#[no_mangle]
static BOOT_PD: RacyCell<[Page; 4]> = RacyCell::new([Page::ZERO; 4]);

#[repr(C, align(4096))]
pub struct BootStack(pub [u8; BOOT_STACK_SIZE]);

#[no_mangle]
static BOOT_STACK: RacyCell<BootStack> = RacyCell::new(BootStack([0; BOOT_STACK_SIZE]));

/// Physical address of the kernel PML4 (identity mapped, so also its address).
pub fn kernel_pml4() -> u64 {
    BOOT_PML4.get() as u64
}

/// The kernel PDPT: user address spaces share its entries for 0..1 GiB and 2..4 GiB.
pub fn kernel_pdpt() -> *const [u64; 512] {
    BOOT_PDPT.get().cast()
}

/// Top of the boot stack.
pub fn boot_stack_top() -> u64 {
    BOOT_STACK.get() as u64 + BOOT_STACK_SIZE as u64
}

core::arch::global_asm!(
    r#"
    .section .note.xen, "a"
    .p2align 2
    .long 4             /* namesz: "Xen\0" */
    .long 8             /* descsz */
    .long 18            /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .quad pvh_entry32

    .section .boot.text, "ax"
    .code32
    .global pvh_entry32
pvh_entry32:
    cli
    cld
    mov %ebx, %esi                  /* start_info; survives into long mode */

    /* PML4[0] -> PDPT, PDPT[0..4] -> PDs */
    mov $BOOT_PDPT, %eax
    or $3, %eax
    mov %eax, BOOT_PML4
    xor %ecx, %ecx
1:  mov %ecx, %eax
    shl $12, %eax
    add $BOOT_PD, %eax
    or $3, %eax
    mov %eax, BOOT_PDPT(,%ecx,8)
    inc %ecx
    cmp $4, %ecx
    jb 1b

    /* 2048 x 2 MiB identity pages; 3..4 GiB get PCD|PWT */
    xor %ecx, %ecx
2:  mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    cmp $1536, %ecx
    jb 3f
    or $0x18, %eax
3:  mov %eax, BOOT_PD(,%ecx,8)
    inc %ecx
    cmp $2048, %ecx
    jb 2b

    mov $BOOT_PML4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $0x620, %eax                 /* PAE | OSFXSR | OSXMMEXCPT */
    mov %eax, %cr4
    mov $0xC0000080, %ecx           /* EFER.LME */
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    and $0x9FFFFFFB, %eax           /* clear EM, CD, NW */
    or $0x80010023, %eax            /* PG | WP | NE | MP | PE */
    mov %eax, %cr0
    lgdt boot_gdtr
    ljmp $0x08, $long_entry

    .code64
long_entry:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $BOOT_STACK, %rsp
    add ${stack_size}, %rsp
    mov %esi, %edi                  /* zero-extends: arg0 = start_info */
    call kmain_bsp
4:  cli
    hlt
    jmp 4b

    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF        /* 0x08: 64-bit code */
    .quad 0x00CF92000000FFFF        /* 0x10: data */
boot_gdtr:
    .word boot_gdtr - boot_gdt - 1
    .long boot_gdt
    .text
    "#,
    stack_size = const BOOT_STACK_SIZE,
    options(att_syntax)
);
