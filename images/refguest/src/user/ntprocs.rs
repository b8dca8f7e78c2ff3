//! The CPL3 work of `scenario=ntprocs`: one register loop per thread of the stand-in Windows
//! processes (the same loop as `prof`'s, in assembly so each has an exact range and a FUNC
//! symbol; echo32's in x86 code, run in compatibility mode), run by `prof::main` until each
//! thread's deadline. A sample's function names its
//! thread, whatever the host makes of the guest's kernel structures.

core::arch::global_asm!(
    r#"
    .section .user.text.ntprocs, "ax"
    .macro NT_SPIN name
    .p2align 6
    .global \name
    .type \name, @function
\name:"#,
    spin_loop_asm!(),
    r#"
    ret
    .global \name\()_end
\name\()_end:
    .size \name, \name\()_end - \name
    .endm

    NT_SPIN ntprocs_alpha_main
    NT_SPIN ntprocs_alpha_worker
    NT_SPIN ntprocs_bravo_main
    NT_SPIN ntprocs_charlie_main
    NT_SPIN ntprocs_delta_main

    /* echo32.exe, a WOW64 process: its thread's 64-bit side (wow64cpu's part) calls the x86
     * code with a far call through a 32-bit code selector, and that code returns with a far
     * return. Compatibility mode may leave the upper halves of the registers undefined, so
     * the callee-saved ones go through the stack. Where compatibility-mode code is emulated
     * (PVM hosts, as guest-kernel code) it runs thousands of times slower than 64-bit code:
     * each call does 1/64 of the work. */
    .p2align 6
    .global ntprocs_echo32_main
    .type ntprocs_echo32_main, @function
ntprocs_echo32_main:
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    shr $6, %rdi
    sub $8, %rsp
    lea ntprocs_echo32_x86(%rip), %rax
    movl %eax, (%rsp)
    movw ${user32_cs}, 4(%rsp)
    lcalll *(%rsp)
    add $8, %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    ret
    .global ntprocs_echo32_main_end
ntprocs_echo32_main_end:
    .size ntprocs_echo32_main, ntprocs_echo32_main_end - ntprocs_echo32_main

    /* The x86 work: the same register loop on 32-bit registers, then a 32-bit far return. */
    .p2align 6
    .code32
    .global ntprocs_echo32_x86
    .type ntprocs_echo32_x86, @function
ntprocs_echo32_x86:
    mov %edi, %ecx
    xor %eax, %eax
    test %ecx, %ecx
    jz 2f
1:  add %ecx, %eax
    xor $0x5a, %eax
    dec %ecx
    jnz 1b
2:  lret
    .global ntprocs_echo32_x86_end
ntprocs_echo32_x86_end:
    .size ntprocs_echo32_x86, ntprocs_echo32_x86_end - ntprocs_echo32_x86
    .code64
    .text
    "#,
    user32_cs = const super::USER32_CS,
    options(att_syntax)
);

extern "C" {
    fn ntprocs_alpha_main(n: u64);
    fn ntprocs_alpha_worker(n: u64);
    fn ntprocs_bravo_main(n: u64);
    fn ntprocs_charlie_main(n: u64);
    fn ntprocs_delta_main(n: u64);
    fn ntprocs_echo32_main(n: u64);
}

/// The work function of each thread, in the scenario's thread order (alpha-main,
/// alpha-worker, bravo-main, charlie-main, delta-main, echo32-main).
pub fn work() -> [u64; 6] {
    [
        ntprocs_alpha_main as *const () as u64,
        ntprocs_alpha_worker as *const () as u64,
        ntprocs_bravo_main as *const () as u64,
        ntprocs_charlie_main as *const () as u64,
        ntprocs_delta_main as *const () as u64,
        ntprocs_echo32_main as *const () as u64,
    ]
}
