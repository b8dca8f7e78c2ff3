//! The call-stack workload: a known call tree built with frame pointers, for host-side
//! stack sampling. All time is spent in one leaf, `stacks_leaf`, reached by three paths whose
//! costs are 1 : 2 : 4:
//!
//! ```text
//! main -> stacks_round -> stacks_a -> stacks_leaf(n)                 1/7
//! main -> stacks_round -> stacks_b -> stacks_leaf(2n)                2/7
//! main -> stacks_round -> stacks_c -> stacks_mid -> stacks_leaf(4n)  4/7
//! ```
//!
//! A flat profile sees only the leaf; only call stacks tell the paths apart. Every function
//! keeps a frame (`push rbp; mov rbp, rsp`), the leaf included, so an RBP-chain walk from any
//! sample inside the leaf's loop names its caller.

core::arch::global_asm!(
    r#"
    .section .user.text.stacks, "ax"
    .macro FRAME_FN name
    .p2align 6
    .global \name
    .type \name, @function
\name:
    push %rbp
    mov %rsp, %rbp
    .endm
    .macro END_FN name
    pop %rbp
    ret
    .global \name\()_end
\name\()_end:
    .size \name, \name\()_end - \name
    .endm

    FRAME_FN stacks_leaf"#,
    spin_loop_asm!(),
    r#"
    END_FN stacks_leaf

    FRAME_FN stacks_a
    call stacks_leaf
    END_FN stacks_a

    FRAME_FN stacks_b
    shl $1, %rdi
    call stacks_leaf
    END_FN stacks_b

    FRAME_FN stacks_mid
    call stacks_leaf
    END_FN stacks_mid

    FRAME_FN stacks_c
    shl $2, %rdi
    call stacks_mid
    END_FN stacks_c

    FRAME_FN stacks_round
    push %rbx
    push %rbx
    mov %rdi, %rbx
    call stacks_a
    mov %rbx, %rdi
    call stacks_b
    mov %rbx, %rdi
    call stacks_c
    pop %rbx
    pop %rbx
    END_FN stacks_round
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    fn stacks_round(n: u64);
}

/// The address `main` calls for the call-stack workload.
pub fn round() -> u64 {
    stacks_round as *const () as u64
}
